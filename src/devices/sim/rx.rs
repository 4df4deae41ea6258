//! The receive engine: from a frame on the wire to a written-back descriptor.
//!
//! Order of decisions, as on the 82599: receive enabled (bus master, link or MAC loopback,
//! RXCTRL.RXEN) -> FCS -> size (60 bytes minimum, 1518 or MAXFRS.MFS with HLREG0.JUMBOEN, +4 per
//! recognised tag) -> VLAN filter (VLNCTRL.VFE + VFTA, VID 0 included) -> address filter (FCTRL
//! BAM/MPE/UPE, MTA hash with MCSTCTRL.MO = 0, RAL/RAH with AV) -> queue (RSS via RETA when
//! MRQC.MRQE = 1, else queue 0) -> that queue's RXDCTL.ENABLE -> strip (RXDCTL.VME) and FCS
//! (HLREG0.RXCRCSTRP) -> buffers.
//!
//! A frame's fate is decided in two steps: [`judge`](SimRegs::judge) (size, filters, parse and
//! checksums, queue), which depends only on the frame's bytes and the registers, so that it is
//! kept with the frame's analysis and reused until a register other than a tail is written
//! (and the traffic source's one frame is judged once per snapshot, `rx_config.rs`); and
//! delivery, which checks the enables and the queue and writes the ring (`rx_ring.rs`).

use std::sync::atomic::Ordering::{Acquire, Relaxed};

use super::engine::{
    Analysis, Delivery, RingCursor, RxConfig, RxEngine, RxTally, Verdict, WireFrame, ANALYSES,
    SPARE,
};
use super::frame::{self, VlanView};
use super::layout::{bucket_index, RX_BUCKETS};
use super::layout::{rxq, RQSMR, W_GORC, W_QBRC, W_TOR};
use super::regs::{lock, SimRegs};
use crate::platform::dma::DmaView;
use crate::platform::regs::ixgbe as r;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    Placed,
    Dropped,
    /// Receive is off (RXEN, the queue, link, bus master): counted by the caller.
    NotReady,
    NoRoom(usize),
}

pub(super) const DD: u32 = 1;
pub(super) const EOP: u32 = 1 << 1;
const VP: u32 = 1 << 3;
const VEXT: u32 = 1 << 9;
/// RXE: MAC error (what fault injection sets).
pub(super) const RXE: u32 = 1 << 29;

impl SimRegs {
    /// Offers a frame to this port's receive side (from a test's wire): it waits in the inbound
    /// FIFO (the packet buffer, RXPBSIZE(0) bytes) until the receive engine runs, at once in
    /// inline mode, on the next poll in threaded mode.
    pub(super) fn arrive(&self, f: WireFrame) {
        if self.queue_arrivals(std::iter::once(f)) && self.inline.load(Relaxed) {
            self.service_rx();
        }
    }

    /// Puts frames from the wire into the inbound FIFO under one hold of its lock, dropping
    /// (and counting) each that finds the packet buffer full; whether any was queued. The
    /// caller runs the receive engine (once for the whole batch, inline).
    pub(super) fn queue_arrivals(&self, frames: impl Iterator<Item = WireFrame>) -> bool {
        let kb = r::rxpbsize::SIZE.get(self.get(r::RXPBSIZE.at(0))) as usize;
        let cap = (kb * 1024).max(16 * 1024);
        let (mut added, mut lost) = (0, 0u32);
        {
            let mut q = lock(&self.inbound);
            // One atomic add for the batch: the receiver only ever lowers the count meanwhile,
            // so the level seen here is never below the true one.
            let level = self.inbound_bytes.load(Relaxed);
            for f in frames {
                let len = f.data.len();
                if level + added + len > cap {
                    lost += 1;
                    continue;
                }
                q.push_back(f);
                added += len;
            }
            self.inbound_bytes.fetch_add(added, Relaxed);
        }
        let queued = added > 0;
        if lost != 0 {
            self.bump(r::MPC.at(0), lost);
            self.counters.rx_fifo_overflow.add(u64::from(lost));
        }
        queued
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
        // The FIFO is taken whole under one hold of its lock (swapped with the engine's empty
        // `pending`), so the sender is not held up frame by frame; frames that must wait go
        // back to its front.
        let mut pending = std::mem::take(&mut rx.pending);
        'run: loop {
            std::mem::swap(&mut pending, &mut *lock(&self.inbound));
            if pending.is_empty() {
                break;
            }
            // Bytes of the frames this batch took out of the packet buffer, given back to its
            // count once per batch.
            let mut freed = 0;
            while !pending.is_empty() {
                // Frames the quick path can place (`rx_quick.rs`), then one by the whole path.
                let (placed, bytes) = self.receive_quick(&dma, rx, &mut pending);
                if placed > 0 {
                    freed += bytes;
                    rx.blocked = false;
                    worked = true;
                    continue;
                }
                let Some(f) = pending.pop_front() else {
                    break;
                };
                let outcome = self.receive(&dma, rx, &f.data, f.fcs_ok);
                let Outcome::NoRoom(q) = outcome else {
                    freed += f.data.len();
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
                    freed += f.data.len();
                    self.count_no_room(q, drop_en);
                    Self::count_total(&mut rx.tally, f.data.len());
                    worked = true;
                    rx.used.push(f.data);
                    continue;
                }
                // Threaded, DROP_EN clear: the frame and those behind it wait in the packet
                // buffer, ahead of any that arrived meanwhile.
                if !rx.blocked {
                    rx.blocked = true;
                    self.bump(r::RNBC.at(0), 1);
                }
                self.inbound_bytes.fetch_sub(freed, Relaxed);
                pending.push_front(f);
                let mut q = lock(&self.inbound);
                pending.extend(q.drain(..));
                std::mem::swap(&mut pending, &mut *q);
                break 'run;
            }
            self.inbound_bytes.fetch_sub(freed, Relaxed);
        }
        rx.pending = pending;
        worked | self.run_source(&dma, rx, inline)
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

    pub(super) fn rx_ready(&self) -> bool {
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

    fn rss_queue(
        &self,
        mrqc: u32,
        key: &[u8; 40],
        f: &[u8],
        h: Option<frame::Headers>,
    ) -> Option<(u16, u32, usize)> {
        let (t, hash) = frame::rss(f, h, mrqc, key)?;
        let idx = hash & 0x7f;
        let q = (self.get(r::RETA.at(idx / 4)) >> (8 * (idx % 4))) & 0xf;
        Some((t, hash, q as usize))
    }

    /// The registers' snapshot ([`rx_config`](super::rx_config)), read afresh when a register
    /// other than a tail was written since it was taken (the ring cursor goes with it).
    pub(super) fn config(&self, rx: &mut RxEngine) -> RxConfig {
        match rx.config {
            Some(c) if c.epoch == self.config_epoch.load(Acquire) => c,
            _ => {
                let c = self.rx_config(&mut rx.rss_key);
                rx.forget_config();
                rx.config = Some(c);
                c
            }
        }
    }

    /// The cursor on queue `q`'s ring (the one in `slot`, or a new one there), or `None` when
    /// the queue is off (the cursor is dropped).
    fn cursor<'c>(&self, slot: &'c mut Option<RingCursor>, q: usize) -> Option<&'c mut RingCursor> {
        if !self.rx_queue_on(q) {
            *slot = None;
            return None;
        }
        if slot.is_none_or(|c| c.q != q) {
            *slot = Some(self.ring_cursor(q));
        }
        slot.as_mut()
    }

    /// Runs one frame through the receive path. TPR/TORL count every frame whose fate is
    /// final (placed or dropped); a frame that waits or is not taken is not counted yet.
    pub(super) fn receive(
        &self,
        dma: &DmaView<'_>,
        rx: &mut RxEngine,
        f: &[u8],
        fcs_ok: bool,
    ) -> Outcome {
        let o = self.receive_inner(dma, rx, f, fcs_ok);
        if matches!(o, Outcome::Placed | Outcome::Dropped) {
            Self::count_total(&mut rx.tally, f.len());
        }
        o
    }

    pub(super) fn count_total(t: &mut RxTally, len: usize) {
        Self::count_total_n(t, len, 1);
    }

    /// Counts `n` frames of `len` bytes whose fate is final (TPR, TORL).
    pub(super) fn count_total_n(t: &mut RxTally, len: usize, n: u32) {
        t.total += n;
        t.total_wire += (len as u64 + 4) * u64::from(n);
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
        let c = self.config(rx);
        match self.judge(rx, &c, f) {
            Verdict::Oversize => {
                self.bump(r::ROC, 1);
                self.counters.rx_errors.inc();
                Outcome::Dropped
            }
            Verdict::Filtered => {
                self.counters.rx_filtered.inc();
                Outcome::Dropped
            }
            Verdict::Deliver(d) => self.deliver(dma, rx, &c, f, d),
        }
    }

    /// What becomes of frame `f` under the snapshot `c`, from its bytes and the filter
    /// registers: dropped (size, filters), or delivered with these write-back fields.
    pub(super) fn judge(&self, rx: &mut RxEngine, c: &RxConfig, f: &[u8]) -> Verdict {
        let a = Self::analyse(&mut rx.analyses, f, [c.vet, c.outer.unwrap_or(c.vet)]);
        // Judged before, under the same registers (no write but a tail since): the same verdict.
        if let Some((epoch, v)) = a.verdict {
            if epoch == c.epoch {
                return v;
            }
        }
        let v = self.judge_bytes(c, &rx.rss_key.0, f, a.headers, a.csum);
        a.verdict = Some((c.epoch, v));
        v
    }

    /// [`judge`](Self::judge) for a frame not judged under these registers yet, from its
    /// analysis (headers and checksums).
    fn judge_bytes(
        &self,
        c: &RxConfig,
        rss_key: &[u8; 40],
        f: &[u8],
        h: Option<frame::Headers>,
        cs: frame::Csum,
    ) -> Verdict {
        let vv = frame::vlan_view(f, c.vet, c.outer);
        if f.len() + 4 > c.max + 4 * vv.tags {
            return Verdict::Oversize;
        }
        if !self.vlan_ok(c, vv) || !self.address_ok(f) {
            return Verdict::Filtered;
        }
        let rss = c.rss.and_then(|mrqc| self.rss_queue(mrqc, rss_key, f, h));
        let (rss_type, hash, q) = rss.unwrap_or((0, 0, 0));
        let mut staterr = DD | cs.status | cs.errors;
        if vv.tagged {
            staterr |= VP;
        }
        if c.outer.is_some() && vv.tags == 2 {
            staterr |= VEXT;
        }
        let hash = if c.pcsd { hash } else { 0 };
        Verdict::Deliver(Delivery {
            q,
            staterr,
            lo: u64::from(rss_type | frame::packet_type(h)) | u64::from(hash) << 32,
            tag: vv.tagged.then_some((vv.tag_off, vv.tci)),
        })
    }

    /// Writes frame `f` into queue `d.q`'s ring, stripping its tag if the queue does
    /// (RXDCTL.VME) and appending its FCS if HLREG0 says so.
    fn deliver(
        &self,
        dma: &DmaView<'_>,
        rx: &mut RxEngine,
        c: &RxConfig,
        f: &[u8],
        d: Delivery,
    ) -> Outcome {
        let Some(ring) = self.cursor(&mut rx.cursor, d.q) else {
            return Outcome::NotReady;
        };
        let strip = d.tag.filter(|_| ring.vme);
        let mut scratch = std::mem::take(&mut rx.scratch);
        let data = Self::bytes_written(&mut scratch, f, strip, c.keep_fcs);
        let inject = self.faults.rx_errors.load(Relaxed) > 0;
        let staterr = if inject { d.staterr | RXE } else { d.staterr };
        let vlan = strip.map_or(0, |(_, tci)| tci);
        let o = self.place(dma, ring, data, d.lo, staterr, vlan);
        if o == Outcome::Placed {
            if inject {
                self.faults.rx_errors.fetch_sub(1, Relaxed);
                self.counters.injected_rx_errors.inc();
            }
            Self::count_rx(&mut rx.tally, ring.stat, f, data.len());
        }
        rx.scratch = scratch;
        o
    }

    /// The bytes written for frame `f`: the frame itself, or a copy in `scratch` without its
    /// tag (`strip`: its offset and TCI) or with its FCS.
    #[inline]
    pub(super) fn bytes_written<'b>(
        scratch: &'b mut Vec<u8>,
        f: &'b [u8],
        strip: Option<(usize, u16)>,
        keep_fcs: bool,
    ) -> &'b [u8] {
        if strip.is_none() && !keep_fcs {
            return f;
        }
        scratch.clear();
        if let Some((at, _)) = strip {
            scratch.extend_from_slice(&f[..at]);
            scratch.extend_from_slice(&f[at + 4..]);
        } else {
            scratch.extend_from_slice(f);
        }
        if keep_fcs {
            scratch.extend_from_slice(&frame::fcs(f));
        }
        scratch
    }

    /// The analysis of frame `f` for TPIDs `tpids` (headers, checksum verdict, and the last
    /// whole verdict): made on first sight and kept by a hash of the bytes, so a frame seen before
    /// (exactly the same bytes, the same TPIDs) is not parsed and verified again (see
    /// `RxEngine::analyses`).
    fn analyse<'a>(
        analyses: &'a mut Vec<Option<Analysis>>,
        f: &[u8],
        tpids: [u16; 2],
    ) -> &'a mut Analysis {
        // The slot comes from a few words where frames of different flows differ (source MAC
        // and type, IPv4 addresses, ports and checksum, the last bytes) and the length: an
        // entry is used only after a full compare, so the hash needs to spread, not to be exact.
        let word = |at: usize| {
            f.get(at..at + 8)
                .map_or(0, |w| u64::from_ne_bytes(w.try_into().unwrap()))
        };
        let mut h = f.len() as u64 ^ u64::from(tpids[0]) << 32 ^ u64::from(tpids[1]) << 48;
        for w in [word(6), word(26), word(34), word(f.len().saturating_sub(8))] {
            h = (h ^ w).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
        if analyses.is_empty() {
            analyses.resize_with(ANALYSES, || None);
        }
        // Two-way: the entry at the hash and its neighbour, so that two frames whose hashes
        // collide do not evict each other for ever.
        let i = (h >> 56) as usize % ANALYSES;
        let hit = [i, i ^ 1].into_iter().find(|&j| {
            analyses[j]
                .as_ref()
                .is_some_and(|a| a.tpids == tpids && a.frame == f)
        });
        let victim = if analyses[i].is_none() || (h >> 55) & 1 == 0 {
            i
        } else {
            i ^ 1
        };
        let a = analyses[hit.unwrap_or(victim)].get_or_insert_with(|| Analysis {
            frame: Vec::new(),
            tpids,
            headers: None,
            csum: frame::Csum::default(),
            verdict: None,
        });
        if hit.is_none() {
            a.frame.clear();
            a.frame.extend_from_slice(f);
            a.tpids = tpids;
            a.headers = frame::headers(f, tpids);
            a.csum = frame::checksums(f, a.headers);
            a.verdict = None;
        }
        a
    }

    fn vlan_ok(&self, c: &RxConfig, vv: VlanView) -> bool {
        if !vv.tagged || !c.vfe {
            return true;
        }
        let vid = u32::from(vv.tci & 0xfff);
        self.get(r::VFTA.at(vid >> 5)) >> (vid & 31) & 1 != 0
    }

    /// Counts a placed frame (statistics counter `s`) in the run's tally.
    pub(super) fn count_rx(t: &mut RxTally, s: usize, f: &[u8], delivered: usize) {
        Self::count_rx_n(t, s, f, delivered, 1);
    }

    /// Counts `n` placed copies of frame `f`.
    #[inline]
    pub(super) fn count_rx_n(t: &mut RxTally, s: usize, f: &[u8], delivered: usize, n: u32) {
        let wire = f.len() as u64 + 4;
        let n64 = u64::from(n);
        t.frames += n;
        t.wire += wire * n64;
        t.delivered += delivered as u64 * n64;
        t.bucket[bucket_index(wire)] += n;
        if f[..6] == [0xff; 6] {
            t.bcast += n;
        } else if f[0] & 1 != 0 {
            t.mcast += n;
        }
        t.q_frames[s] += n;
        t.q_bytes[s] += delivered as u64 * n64;
    }
}
