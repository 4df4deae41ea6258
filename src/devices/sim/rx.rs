//! The receive engine: from a frame on the wire to a written-back descriptor.
//!
//! Order of decisions, as on the 82599: receive enabled (bus master, link or MAC loopback,
//! RXCTRL.RXEN) -> FCS -> size (60 bytes minimum, 1518 or MAXFRS.MFS with HLREG0.JUMBOEN, +4 per
//! recognised tag) -> VLAN filter (VLNCTRL.VFE + VFTA, VID 0 included) -> address filter (FCTRL
//! BAM/MPE/UPE, MTA hash with MCSTCTRL.MO = 0, RAL/RAH with AV) -> queue (RSS via RETA when
//! MRQC.MRQE = 1, else queue 0) -> that queue's RXDCTL.ENABLE -> strip (RXDCTL.VME) and FCS
//! (HLREG0.RXCRCSTRP) -> buffers.
//!
//! Buffers are written first, descriptors after: qword 0 (pkt_info, RSS hash), then length and
//! VLAN, then the status/error dword with DD as a release store, one descriptor after the other.
//! A DMA fault anywhere drops the frame before any descriptor is written back and leaves RDH
//! where it was.

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use super::engine::{Analysis, RxEngine, RxTally, WireFrame, ANALYSES, SPARE};
use super::frame::{self, VlanView};
use super::layout::{bucket_index, RX_BUCKETS};
use super::layout::{rxq, RQSMR, W_GORC, W_QBRC, W_TOR};
use super::regs::{lock, SimRegs};
use crate::platform::dma::DmaView;
use crate::platform::regs::ixgbe as r;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Placed,
    Dropped,
    /// Receive is off (RXEN, the queue, link, bus master): counted by the caller.
    NotReady,
    NoRoom(usize),
}

/// Frames the source produces per service call at most.
const SOURCE_BUDGET: usize = 4096;
/// The same per poll of a device thread (threaded mode).
const THREADED_SOURCE_BUDGET: usize = 64;

const DD: u32 = 1;
const EOP: u32 = 1 << 1;
const VP: u32 = 1 << 3;
const VEXT: u32 = 1 << 9;
/// RXE: MAC error (what fault injection sets).
pub(super) const RXE: u32 = 1 << 29;

impl SimRegs {
    /// Offers a frame to this port's receive side (from the peer, loopback or a test). It waits
    /// in the inbound FIFO (the packet buffer, RXPBSIZE(0) bytes) until the receive engine runs:
    /// at once in inline mode, on the next poll in threaded mode.
    /// A frame arrives from the wire; inline, the receive engine runs at once.
    pub(super) fn arrive(&self, f: WireFrame) {
        if self.queue_arrival(f) && self.inline.load(Relaxed) {
            self.service_rx();
        }
    }

    /// Puts a frame from the wire into the inbound FIFO (or drops it, counted, when the packet
    /// buffer is full); whether it was queued. The caller runs the receive engine (once for a
    /// whole batch of frames, inline).
    pub(super) fn queue_arrival(&self, f: WireFrame) -> bool {
        let kb = r::rxpbsize::SIZE.get(self.get(r::RXPBSIZE.at(0))) as usize;
        let cap = (kb * 1024).max(16 * 1024);
        let len = f.data.len();
        {
            let mut q = lock(&self.inbound);
            if self.inbound_bytes.load(Relaxed) + len > cap {
                drop(q);
                self.bump(r::MPC.at(0), 1);
                self.counters.rx_fifo_overflow.inc();
                return false;
            }
            q.push_back(f);
            self.inbound_bytes.fetch_add(len, Relaxed);
        }
        true
    }

    /// Adds a run's counts to the registers and the model's counters, and clears them.
    fn flush_rx(&self, t: &mut RxTally) {
        if t.total != 0 {
            self.bump(r::TPR, t.total);
            self.bump_wide(W_TOR, t.total_wire);
        }
        if t.frames != 0 {
            self.bump(r::GPRC, t.frames);
            self.bump(r::RXDGPC, t.frames);
            self.bump_wide(W_GORC, t.wire);
            for (i, &n) in t.bucket.iter().enumerate() {
                if n != 0 {
                    self.bump(RX_BUCKETS[i], n);
                }
            }
            if t.bcast != 0 {
                self.bump(r::BPRC, t.bcast);
            }
            if t.mcast != 0 {
                self.bump(r::MPRC, t.mcast);
            }
            for s in 0..16 {
                if t.q_frames[s] != 0 {
                    self.bump(r::QPRC.at(s as u32), t.q_frames[s]);
                    self.bump_wide(W_QBRC + s, t.q_bytes[s]);
                }
            }
            self.counters.rx_frames.add(u64::from(t.frames));
            self.counters.rx_bytes.add(t.delivered);
        }
        *t = RxTally::default();
    }

    /// Runs the receive engine: delivers what waits in the inbound FIFO, then lets the traffic
    /// source fill free descriptors. Returns whether anything happened.
    pub(super) fn service_rx(&self) -> bool {
        let mut rx = lock(&self.rx);
        let worked = self.service_rx_locked(&mut rx);
        let mut tally = std::mem::take(&mut rx.tally);
        self.flush_rx(&mut tally);
        if !rx.used.is_empty() {
            // The buffers of the frames received go back to the port that sent them (the peer;
            // with MAC loopback this port), for its transmit engine. `returns` is a leaf lock,
            // so taking it with this port's receive lock held cannot deadlock.
            let peer = lock(&self.peer).upgrade();
            let to = peer.as_deref().unwrap_or(self);
            let mut r = lock(&to.returns);
            let room = SPARE.saturating_sub(r.len());
            // (Draining removes them all; those beyond the room are freed.)
            r.extend(rx.used.drain(..).take(room));
        }
        worked
    }

    fn service_rx_locked(&self, rx: &mut RxEngine) -> bool {
        let inline = self.inline.load(Relaxed);
        let mut worked = false;
        // One IOMMU view for the whole run (every frame's descriptors and buffers): nothing
        // below takes the IOMMU table again.
        let dma = self.iommu.view();
        loop {
            let Some(f) = lock(&self.inbound).pop_front() else {
                break;
            };
            self.inbound_bytes.fetch_sub(f.data.len(), Relaxed);
            let outcome = self.receive(&dma, rx, &f.data, f.fcs_ok);
            let Outcome::NoRoom(q) = outcome else {
                if outcome == Outcome::NotReady {
                    self.counters.rx_not_ready.inc();
                }
                rx.blocked = false;
                worked = true;
                rx.used.push(f.data);
                continue;
            };
            let drop_en = r::srrctl::DROP_EN.is_set(self.get_off(rxq(q) + 0x14));
            if inline || drop_en {
                self.count_no_room(q, drop_en);
                Self::count_total(&mut rx.tally, f.data.len());
                worked = true;
                rx.used.push(f.data);
                continue;
            }
            // Threaded, DROP_EN clear: the frame waits in the packet buffer.
            if !rx.blocked {
                rx.blocked = true;
                self.bump(r::RNBC.at(0), 1);
            }
            self.inbound_bytes.fetch_add(f.data.len(), Relaxed);
            lock(&self.inbound).push_front(f);
            break;
        }
        worked | self.run_source(&dma, rx, inline)
    }

    fn run_source(&self, dma: &DmaView<'_>, rx: &mut RxEngine, inline: bool) -> bool {
        let Some(mut src) = rx.source.take() else {
            return false;
        };
        let mut worked = false;
        // A device thread serves transmit queues (its own and other ports') between runs: a
        // large budget would starve them while the driver keeps freeing descriptors.
        let budget = if inline {
            SOURCE_BUDGET
        } else {
            THREADED_SOURCE_BUDGET
        };
        for _ in 0..budget {
            if src.remaining == Some(0) || !self.rx_ready() {
                break;
            }
            let o = self.receive(dma, rx, &src.frame, true);
            if matches!(o, Outcome::NoRoom(_) | Outcome::NotReady) {
                break; // The source waits until the port can take its frame.
            }
            self.counters.source_frames.inc();
            if let Some(n) = src.remaining.as_mut() {
                *n -= 1;
            }
            if o == Outcome::Dropped {
                // Every source frame is the same: the next one would be dropped too. Not
                // progress either, so an idle device thread backs off.
                break;
            }
            worked = true;
        }
        rx.source = Some(src);
        worked
    }

    fn count_no_room(&self, q: usize, drop_en: bool) {
        self.counters.rx_no_descriptor.inc();
        if drop_en {
            self.bump(r::QPRDC.at(self.stat_index(RQSMR, q) as u32), 1);
        } else {
            self.bump(r::MPC.at(0), 1);
            self.bump(r::RNBC.at(0), 1);
        }
    }

    fn rx_ready(&self) -> bool {
        self.dma_allowed()
            && r::rxctrl::RXEN.is_set(self.get(r::RXCTRL))
            && (self.link_up() || r::hlreg0::LPBK.is_set(self.get(r::HLREG0)))
    }

    fn address_ok(&self, f: &[u8]) -> bool {
        let fctrl = self.get(r::FCTRL);
        let d = &f[..6];
        if d == [0xff; 6] {
            return r::fctrl::BAM.is_set(fctrl);
        }
        if d[0] & 1 != 0 {
            let h = (u32::from(d[4]) >> 4 | u32::from(d[5]) << 4) & 0xfff;
            let mta = self.get(r::MTA.at(h >> 5));
            return r::fctrl::MPE.is_set(fctrl) || mta >> (h & 31) & 1 != 0;
        }
        if r::fctrl::UPE.is_set(fctrl) {
            return true;
        }
        let lo = u32::from_le_bytes([d[0], d[1], d[2], d[3]]);
        let hi = u32::from(u16::from_le_bytes([d[4], d[5]]));
        (0..r::RAH.count()).any(|n| {
            let rah = self.get(r::RAH.at(n));
            r::rah::AV.is_set(rah) && rah & 0xffff == hi && self.get(r::RAL.at(n)) == lo
        })
    }

    fn rss_queue(&self, f: &[u8], h: Option<frame::Headers>) -> Option<(u16, u32, usize)> {
        let mrqc = self.get(r::MRQC);
        if r::mrqc::MRQE.get(mrqc) != 1 {
            return None;
        }
        let mut key = [0u8; 40];
        for (i, k) in key.chunks_exact_mut(4).enumerate() {
            k.copy_from_slice(&self.get(r::RSSRK.at(i as u32)).to_le_bytes());
        }
        let (t, hash) = frame::rss(f, h, mrqc, &key)?;
        let idx = hash & 0x7f;
        let q = (self.get(r::RETA.at(idx / 4)) >> (8 * (idx % 4))) & 0xf;
        Some((t, hash, q as usize))
    }

    /// Runs one frame through the receive path. TPR/TORL count every frame whose fate is
    /// final (placed or dropped); a frame that waits or is not taken is not counted yet.
    fn receive(&self, dma: &DmaView<'_>, rx: &mut RxEngine, f: &[u8], fcs_ok: bool) -> Outcome {
        let o = self.receive_inner(dma, rx, f, fcs_ok);
        if matches!(o, Outcome::Placed | Outcome::Dropped) {
            Self::count_total(&mut rx.tally, f.len());
        }
        o
    }

    fn count_total(t: &mut RxTally, len: usize) {
        t.total += 1;
        t.total_wire += len as u64 + 4;
    }

    fn receive_inner(
        &self,
        dma: &DmaView<'_>,
        rx: &mut RxEngine,
        f: &[u8],
        fcs_ok: bool,
    ) -> Outcome {
        if !self.rx_ready() {
            return Outcome::NotReady;
        }
        let (err, reg) = if !fcs_ok {
            (true, r::CRCERRS)
        } else {
            (f.len() < 60, r::RUC)
        };
        if err {
            self.bump(reg, 1);
            self.counters.rx_errors.inc();
            return Outcome::Dropped;
        }
        let vet = r::vlnctrl::VET.get(self.get(r::VLNCTRL)) as u16;
        let ext = r::ctrl_ext::EXTENDED_VLAN.is_set(self.get(r::CTRL_EXT));
        let outer = ext.then(|| r::exvet::VET_EXT.get(self.get(r::EXVET)) as u16);
        let vv = frame::vlan_view(f, vet, outer);
        let hl = self.get(r::HLREG0);
        let max = if r::hlreg0::JUMBOEN.is_set(hl) {
            r::maxfrs::MFS.get(self.get(r::MAXFRS)) as usize
        } else {
            1518
        } + 4 * vv.tags;
        if f.len() + 4 > max {
            self.bump(r::ROC, 1);
            self.counters.rx_errors.inc();
            return Outcome::Dropped;
        }
        if !self.vlan_ok(vv) || !self.address_ok(f) {
            self.counters.rx_filtered.inc();
            return Outcome::Dropped;
        }
        let (h, cs) = Self::analyse(rx, f, [vet, outer.unwrap_or(vet)]);
        let rss = self.rss_queue(f, h);
        let q = rss.map_or(0, |(_, _, q)| q);
        let rb = rxq(q);
        let dctl = self.get_off(rb + 0x28);
        if !r::rxdctl::ENABLE.is_set(dctl) || self.get_off(rb + 8) < 16 {
            return Outcome::NotReady;
        }
        let strip = vv.tagged && r::rxdctl::VME.is_set(dctl);
        let keep_fcs = !r::hlreg0::RXCRCSTRP.is_set(hl);
        // The bytes written: the frame itself, or a copy without its tag or with its FCS.
        let mut scratch = std::mem::take(&mut rx.scratch);
        let data: &[u8] = if strip || keep_fcs {
            scratch.clear();
            if strip {
                scratch.extend_from_slice(&f[..vv.tag_off]);
                scratch.extend_from_slice(&f[vv.tag_off + 4..]);
            } else {
                scratch.extend_from_slice(f);
            }
            if keep_fcs {
                scratch.extend_from_slice(&frame::fcs(f));
            }
            &scratch
        } else {
            f
        };
        let mut staterr = DD | cs.status | cs.errors;
        if vv.tagged {
            staterr |= VP;
        }
        if ext && vv.tags == 2 {
            staterr |= VEXT;
        }
        let inject = self.faults.rx_errors.load(Relaxed) > 0;
        if inject {
            staterr |= RXE;
        }
        let (rss_type, hash) = rss.map_or((0, 0), |(t, hash, _)| (t, hash));
        let hash = if r::rxcsum::PCSD.is_set(self.get(r::RXCSUM)) {
            hash
        } else {
            0
        };
        let lo = u64::from(rss_type | frame::packet_type(h)) | u64::from(hash) << 32;
        let o = self.place(dma, q, data, lo, staterr, if strip { vv.tci } else { 0 });
        if o == Outcome::Placed {
            if inject {
                self.faults.rx_errors.fetch_sub(1, Relaxed);
                self.counters.injected_rx_errors.inc();
            }
            let s = self.stat_index(RQSMR, q);
            Self::count_rx(&mut rx.tally, s, f, data.len());
        }
        rx.scratch = scratch;
        o
    }

    /// The frame's headers and checksum verdict for TPIDs `tpids`: a pure function of the
    /// bytes and the TPIDs, so a frame seen before (exactly the same bytes, the same TPIDs) is
    /// not parsed and verified again (see `RxEngine::analyses`).
    fn analyse(
        rx: &mut RxEngine,
        f: &[u8],
        tpids: [u16; 2],
    ) -> (Option<frame::Headers>, frame::Csum) {
        let mut h = f.len() as u64 ^ u64::from(tpids[0]) << 32 ^ u64::from(tpids[1]) << 48;
        let mut words = f.chunks_exact(8);
        for w in &mut words {
            h = (h ^ u64::from_ne_bytes(w.try_into().unwrap())).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
        for &b in words.remainder() {
            h = (h ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
        if rx.analyses.is_empty() {
            rx.analyses.resize_with(ANALYSES, || None);
        }
        // Two-way: the entry at the hash and its neighbour, so that two frames whose hashes
        // collide do not evict each other for ever.
        let i = (h >> 56) as usize % ANALYSES;
        for j in [i, i ^ 1] {
            if let Some(a) = &rx.analyses[j] {
                if a.tpids == tpids && a.frame == f {
                    return (a.headers, a.csum);
                }
            }
        }
        let headers = frame::headers(f, tpids);
        let csum = frame::checksums(f, headers);
        let victim = if rx.analyses[i].is_none() || (h >> 55) & 1 == 0 {
            i
        } else {
            i ^ 1
        };
        match &mut rx.analyses[victim] {
            Some(a) => {
                a.frame.clear();
                a.frame.extend_from_slice(f);
                (a.tpids, a.headers, a.csum) = (tpids, headers, csum);
            }
            slot @ None => {
                *slot = Some(Analysis {
                    frame: f.to_vec(),
                    tpids,
                    headers,
                    csum,
                })
            }
        }
        (headers, csum)
    }

    fn vlan_ok(&self, vv: VlanView) -> bool {
        if !vv.tagged || !r::vlnctrl::VFE.is_set(self.get(r::VLNCTRL)) {
            return true;
        }
        let vid = u32::from(vv.tci & 0xfff);
        self.get(r::VFTA.at(vid >> 5)) >> (vid & 31) & 1 != 0
    }

    /// Writes `data` into the buffers of queue `q` and writes the descriptors back.
    fn place(
        &self,
        dma: &DmaView<'_>,
        q: usize,
        data: &[u8],
        lo: u64,
        staterr: u32,
        vlan: u16,
    ) -> Outcome {
        let rb = rxq(q);
        let n = (self.get_off(rb + 8) & 0x000F_FF80) as usize / 16;
        let head = self.get_off(rb + 0x10) as usize;
        let tail = self.get_off(rb + 0x18) as usize;
        if n == 0 || head >= n || tail >= n {
            return Outcome::NoRoom(q);
        }
        // Ring arithmetic by compares: `% n` is a division, and the model did three per frame.
        let wrap = |i: usize| if i >= n { i - n } else { i };
        let free = wrap(tail + n - head);
        let mut chunk = r::srrctl::BSIZEPKT.get(self.get_off(rb + 0x14)) as usize * 1024;
        if chunk == 0 {
            chunk = 2048;
        }
        let split = self.faults.split_frames.load(Relaxed) > 0;
        if split {
            chunk = chunk.min(self.faults.split_chunk.load(Relaxed).max(1));
        }
        let needed = data.len().div_ceil(chunk).max(1);
        if needed > free {
            return Outcome::NoRoom(q);
        }
        let base = u64::from(self.get_off(rb + 4)) << 32 | u64::from(self.get_off(rb) & !0x7f);
        if needed == 1 {
            return self.place_one(
                dma,
                rb,
                base,
                (head, n),
                data,
                lo,
                staterr | EOP,
                vlan,
                split,
            );
        }
        let desc = |i: usize| base + (wrap(head + i) * 16) as u64;
        for (i, part) in data.chunks(chunk).enumerate() {
            let ok = dma
                .load_u64(desc(i), Acquire)
                .and_then(|addr| dma.write(addr, part));
            if ok.is_err() {
                self.counters.dma_faults.inc();
                return Outcome::Dropped;
            }
        }
        for (i, part) in data.chunks(chunk).enumerate() {
            let d = desc(i);
            let (wb_lo, st) = if i + 1 == needed {
                (lo, staterr | EOP)
            } else {
                (0, DD | (staterr & RXE))
            };
            let len_vlan = part.len() as u32 | u32::from(vlan) << 16;
            // Dwords 2 (status, with DD) and 3 (length, VLAN) in one release store: the driver
            // sees DD only together with the length (little-endian: dword 2 is the low half).
            let ok = dma.store_u64(d, wb_lo, Relaxed).and_then(|_| {
                dma.store_u64(d + 8, u64::from(st) | u64::from(len_vlan) << 32, Release)
            });
            if ok.is_err() {
                self.counters.dma_faults.inc();
                return Outcome::Dropped;
            }
        }
        if split {
            self.faults.split_frames.fetch_sub(1, Relaxed);
        }
        self.set_off(rb + 0x10, wrap(head + needed) as u32);
        Outcome::Placed
    }

    /// [`place`](Self::place) for a frame that fits one buffer (every frame but jumbo or split
    /// ones): descriptor `head` of the ring at `base` (of `n`), one write-back with EOP in
    /// `staterr`, the head moved by one.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn place_one(
        &self,
        dma: &DmaView<'_>,
        rb: usize,
        base: u64,
        (head, n): (usize, usize),
        data: &[u8],
        lo: u64,
        staterr: u32,
        vlan: u16,
        split: bool,
    ) -> Outcome {
        let d = base + (head * 16) as u64;
        let len_vlan = data.len() as u32 | u32::from(vlan) << 16;
        // As in `place`: dwords 2 and 3 (status with DD, length and VLAN) in one release store.
        let ok = dma
            .load_u64(d, Acquire)
            .and_then(|addr| dma.write(addr, data))
            .and_then(|_| dma.store_u64(d, lo, Relaxed))
            .and_then(|_| {
                dma.store_u64(
                    d + 8,
                    u64::from(staterr) | u64::from(len_vlan) << 32,
                    Release,
                )
            });
        if ok.is_err() {
            self.counters.dma_faults.inc();
            return Outcome::Dropped;
        }
        if split {
            self.faults.split_frames.fetch_sub(1, Relaxed);
        }
        self.set_off(rb + 0x10, if head + 1 == n { 0 } else { head + 1 } as u32);
        Outcome::Placed
    }

    /// Counts a placed frame (statistics counter `s`) in the run's tally.
    fn count_rx(t: &mut RxTally, s: usize, f: &[u8], delivered: usize) {
        let wire = f.len() as u64 + 4;
        t.frames += 1;
        t.wire += wire;
        t.delivered += delivered as u64;
        t.bucket[bucket_index(wire)] += 1;
        if f[..6] == [0xff; 6] {
            t.bcast += 1;
        } else if f[0] & 1 != 0 {
            t.mcast += 1;
        }
        t.q_frames[s] += 1;
        t.q_bytes[s] += delivered as u64;
    }
}
