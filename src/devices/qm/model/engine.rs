//! What the model's hardware does: the receive engine (a frame from the wire into a buffer
//! from the pool, with its annotation, onto the receive frame queue), the transmit engine (an
//! enqueued frame descriptor onto the wire, its buffer back to its pool), and the portal
//! commands (enqueue ring, pull, release, acquire). All run under the model's one lock.

use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use super::state::{rx_fqid, tx_fqid, Hot, Portal, SocState, MIN_FRAME};
use crate::devices::qm::layout::{
    acquire, cena, dq, eq, hwa, pull, release, Fd, BUFS_PER_CMD, EQCR_SIZE, VALID_BIT,
};
use crate::platform::dma::{DmaView, SoftIommu};

/// A 32-bit word of a portal's CENA memory.
pub fn word(mem: &[AtomicU32], byte: usize) -> u32 {
    mem[byte / 4].load(Acquire)
}

fn words<const N: usize>(mem: &[AtomicU32], byte: usize) -> [u32; N] {
    std::array::from_fn(|i| mem[byte / 4 + i].load(Relaxed))
}

fn fd_at(mem: &[AtomicU32], byte: usize) -> Fd {
    Fd(words::<8>(mem, byte))
}

/// The L2 parse result of a frame: the FAPR word and the first TCI's offset (0: none).
fn parse(frame: &[u8]) -> (u64, u8) {
    let mut w = hwa::ETH_MAC_PRESENT;
    w |= if frame[..6] == [0xff; 6] {
        hwa::MAC_BROADCAST
    } else if frame[0] & 1 == 1 {
        hwa::MAC_MULTICAST
    } else {
        hwa::MAC_UNICAST
    };
    let is_tag = |at: usize| {
        frame.len() >= at + 4
            && matches!(
                u16::from_be_bytes([frame[at], frame[at + 1]]),
                0x8100 | 0x88a8
            )
    };
    if is_tag(12) {
        w |= if is_tag(16) {
            hwa::VLAN_N_PRESENT
        } else {
            hwa::VLAN_1_PRESENT
        };
        return (w, 14);
    }
    (w, 0)
}

/// A frame arrives at DPNI `d` from the wire.
pub fn receive(s: &mut SocState, view: &DmaView, d: usize, frame: &[u8]) {
    let n = &mut s.dpnis[d];
    let c = &mut n.counters;
    let Some((b, buf_size)) = n.pool.filter(|_| n.enabled && n.master && n.link_up) else {
        c.drops[1] += 1;
        return;
    };
    if frame.len() + 4 > usize::from(n.max_frame) || frame.len() < MIN_FRAME {
        c.drops[1] += 1;
        return;
    }
    let (fapr, tci_at) = parse(frame);
    // The filter acts on a 0x8100 outer tag: whether WRIOP's filter also takes 0x88a8 (its
    // parser marks both as VLAN) is not documented; only a board can tell.
    if n.vlan_filter && tci_at != 0 && frame[12..14] == [0x81, 0x00] {
        let vid = u16::from_be_bytes([frame[14], frame[15]]) & 0xfff;
        if !n.vids.contains(&vid) {
            c.drops[0] += 1;
            return;
        }
    }
    if n.taildrop.is_some_and(|t| n.rx_fq.len() >= t as usize) {
        c.drops[1] += 1;
        return;
    }
    let off = hwa::SIZE + usize::from(n.head_room);
    if off + frame.len() > usize::from(buf_size) {
        c.drops[1] += 1;
        return;
    }
    let Some(addr) = s.dpbps[b].bufs.pop() else {
        s.dpnis[d].counters.drops[2] += 1;
        return;
    };
    let mut annot = [0u8; hwa::SIZE];
    annot[hwa::FAPR_WORD..hwa::FAPR_WORD + 8].copy_from_slice(&fapr.to_le_bytes());
    annot[hwa::VLAN_TCI_OFFSET_1] = tci_at;
    if view.write(addr, &annot).is_err() || view.write(addr + off as u64, frame).is_err() {
        s.faults.dma_faults += 1;
        s.dpbps[b].bufs.push(addr);
        return;
    }
    let n = &mut s.dpnis[d];
    let mut fd = Fd::simple(
        addr,
        frame.len() as u32,
        super::state::bpid_of(b),
        off as u16,
    );
    fd.0[4] = Fd::FRC_FASV;
    n.rx_fq.push_back(fd);
    let c = &mut n.counters;
    let bytes = frame.len() as u64 + 4;
    c.ingress[0] += 1;
    c.ingress[1] += bytes;
    if fapr & hwa::MAC_MULTICAST != 0 {
        c.ingress[2] += 1;
        c.ingress[3] += bytes;
    }
    if fapr & hwa::MAC_BROADCAST != 0 {
        c.ingress[4] += 1;
        c.ingress[5] += bytes;
    }
}

/// DPNI `d` transmits the frame `fd` describes, then releases its buffer to the FD's pool
/// unless IVP is set.
fn transmit(s: &mut SocState, view: &DmaView, d: usize, fd: Fd) {
    let mut frame = std::mem::take(&mut s.scratch);
    frame.clear();
    let read = view.read_append(
        fd.addr() + u64::from(fd.offset()),
        fd.len() as usize,
        &mut frame,
    );
    let n = &mut s.dpnis[d];
    if read.is_err() {
        s.faults.dma_faults += 1;
    } else if !(n.enabled && n.master) || fd.format() != 0 {
        n.counters.drops[3] += 1;
    } else {
        frame.resize(frame.len().max(MIN_FRAME), 0);
        let c = &mut n.counters;
        let bytes = frame.len() as u64 + 4;
        c.egress[0] += 1;
        c.egress[1] += bytes;
        if frame[0] & 1 == 1 {
            let i = if frame[..6] == [0xff; 6] { 4 } else { 2 };
            c.egress[i] += 1;
            c.egress[i + 1] += bytes;
        }
        if let Some(p) = n.peer.filter(|_| n.link_up) {
            receive(s, view, p, &frame);
        }
    }
    s.scratch = frame;
    if !fd.ivp() {
        s.release(fd.bpid(), fd.addr());
    }
}

/// An enqueue of `fd` to frame queue `fqid`: a transmit queue sends it, a receive queue takes
/// it as if it had arrived (what a real portal allows too).
fn enqueue_one(s: &mut SocState, view: &DmaView, fqid: u32, fd: Fd) {
    let n = s.dpnis.len();
    if let Some(d) = (0..n).find(|&d| tx_fqid(d) == fqid) {
        transmit(s, view, d, fd);
    } else if let Some(d) = (0..n).find(|&d| rx_fqid(d) == fqid) {
        s.dpnis[d].rx_fq.push_back(fd);
    } else {
        s.faults.bad_commands += 1;
        if !fd.ivp() {
            s.release(fd.bpid(), fd.addr());
        }
    }
}

/// The enqueue ring of a portal up to producer index `pi` (the last EQCR_PI doorbell):
/// consumes the entries, then writes the consumer index back (CINH and CENA 0x1840). An entry
/// whose valid bit is not the one of its pass stops the walk (a stale entry).
pub fn eqcr_consume(s: &mut SocState, iommu: &SoftIommu, mem: &[AtomicU32], hot: &Hot, pi: u32) {
    let pi = pi & (2 * EQCR_SIZE - 1);
    let mut ci = hot.device.ci.load(Relaxed);
    // One hold of the IOMMU table for the whole walk (see `DmaView`).
    let view = iommu.view();
    while ci != pi {
        let at = cena::eqcr(ci & (EQCR_SIZE - 1));
        let verb = word(mem, at);
        if verb & VALID_BIT != Portal::eqcr_vb(ci) {
            s.faults.stale_commands += 1;
            break;
        }
        let fqid = word(mem, at + 4 * eq::TGTID_WORD) & 0x00ff_ffff;
        let fd = fd_at(mem, at + 4 * eq::FD_WORD);
        if verb & 3 != 0 && verb & eq::VERB_TARGET_QD == 0 {
            enqueue_one(s, &view, fqid, fd);
        } else {
            s.faults.bad_commands += 1;
        }
        ci = (ci + 1) & (2 * EQCR_SIZE - 1);
    }
    hot.device.ci.store(ci, Release);
    mem[cena::EQCR_CI / 4].store(ci, Release);
}

/// The VDQCR read trigger of portal `p`: one pull, answered at once into the storage.
pub fn pull(s: &mut SocState, iommu: &SoftIommu, mem: &[AtomicU32]) {
    // Read-triggered (CFG.VPM): the command's valid bit is not looked at.
    let [w0, src, lo, hi] = words::<4>(mem, cena::VDQCR);
    let frames = ((w0 >> 8 & 0xff) + 1) as usize;
    let mut tok = (w0 >> 16) as u8;
    if std::mem::take(&mut s.faults.stale_token_next) {
        tok = tok.wrapping_add(0x40) | 1;
    }
    let storage = u64::from(lo) | u64::from(hi) << 32;
    let fqid = src & 0x00ff_ffff;
    if w0 & 0x7f != pull::VERB_FQ_TO_STORAGE {
        s.faults.bad_commands += 1;
    }
    let fq = (0..s.dpnis.len()).find(|&d| rx_fqid(d) == fqid);
    let view = iommu.view();
    if let Some(d) = fq {
        if let Some(frame) = s.dpnis[d].source.take() {
            // The source keeps the queue at least as full as this pull asks for.
            for _ in s.dpnis[d].rx_fq.len()..frames {
                receive(s, &view, d, &frame);
            }
            s.dpnis[d].source = Some(frame);
        }
    }
    let mut i = 0;
    loop {
        let fd = fq.and_then(|d| (i < frames).then(|| s.dpnis[d].rx_fq.pop_front()).flatten());
        let empty = fq.is_none_or(|d| s.dpnis[d].rx_fq.is_empty());
        let last = fd.is_none() || i + 1 == frames || empty;
        let mut stat = dq::STAT_VOLATILE;
        if fd.is_some() {
            stat |= dq::STAT_VALIDFRAME;
        }
        if last {
            stat |= dq::STAT_EXPIRED;
        }
        if empty {
            stat |= dq::STAT_FQEMPTY;
        }
        let at = storage + (i * dq::SIZE) as u64;
        let f = fd.unwrap_or_default().0;
        let mut ok = view
            .store_u64(at + dq::FQID as u64, u64::from(fqid), Relaxed)
            .is_ok();
        for k in 0..4 {
            let v = u64::from(f[2 * k]) | u64::from(f[2 * k + 1]) << 32;
            ok &= view
                .store_u64(at + (dq::FD + 8 * k) as u64, v, Relaxed)
                .is_ok();
        }
        let w = dq::word0(dq::VERB_DQ | VALID_BIT as u8, stat, tok);
        ok &= view.store_u64(at, w, Release).is_ok();
        if !ok {
            // The frame cannot be delivered: its buffer goes back to its pool.
            s.faults.dma_faults += 1;
            if let Some(fd) = fd {
                s.release(fd.bpid(), fd.addr());
            }
        }
        i += 1;
        if last {
            break;
        }
    }
}

/// RCR_AM_RT(slot): the release command in that slot puts its buffers into their pool; the
/// slot is free again.
pub fn release_slot(s: &mut SocState, mem: &[AtomicU32], hot: &Hot, slot: u32) {
    release_cmd(s, mem, slot);
    hot.free_slot(slot);
}

fn release_cmd(s: &mut SocState, mem: &[AtomicU32], slot: u32) {
    let at = cena::rcr(slot);
    let w0 = word(mem, at);
    let n = (w0 & 7) as usize;
    if w0 & release::VERB == 0 || n == 0 || n > BUFS_PER_CMD {
        s.faults.bad_commands += 1;
        return;
    }
    let bpid = (w0 >> 16) as u16;
    let bufs = words::<14>(mem, at + 8);
    for k in 0..n {
        let addr = u64::from(bufs[2 * k]) | u64::from(bufs[2 * k + 1]) << 32;
        if !s.release(bpid, addr) {
            break;
        }
    }
}

/// CR_RT: the management command (acquire) in the portal's CR, answered in RR.
pub fn command(s: &mut SocState, p: usize, mem: &[AtomicU32]) {
    let [w0, w1] = words::<2>(mem, cena::CR);
    let mut rsp = [0u32; 16];
    let mut rslt = 0xff;
    if w0 & 0x7f == acquire::VERB {
        let bpid = (w0 >> 16) as u16;
        let want = (w1 & 0xff) as usize;
        if let Some(pool) = s
            .dpbp_of(bpid)
            .filter(|_| (1..=BUFS_PER_CMD).contains(&want))
        {
            let got = want.min(pool.bufs.len());
            for k in 0..got {
                let a = pool.bufs.pop().expect("counted");
                rsp[2 + 2 * k] = a as u32;
                rsp[3 + 2 * k] = (a >> 32) as u32;
            }
            rsp[1] = got as u32;
            rslt = acquire::RSLT_OK;
        }
    }
    for (i, w) in rsp.iter().enumerate().skip(1) {
        mem[cena::RR / 4 + i].store(*w, Relaxed);
    }
    let vb = s.portals[p].rr_vb;
    s.portals[p].rr_vb ^= VALID_BIT;
    mem[cena::RR / 4].store(w0 & 0x7f | vb | rslt << 8, Release);
}
