//! The transmit engine: from TDH..TDT to frames on the wire.
//!
//! It runs only while DMATXCTL.TE, the queue's TXDCTL.ENABLE and bus mastering are on and
//! RTTDCS.ARBDIS is off. It walks the ring from TDH to TDT: context descriptors (DTYP 0010)
//! are kept in slot IDX (dword 3 bits 6:4; two slots per queue: VLAN, MACLEN, IPLEN, TUCMD,
//! L4LEN, MSS, `tx_offload.rs`); data descriptors (DTYP 0011) are gathered until EOP, and the
//! frame's first descriptor decides VLE, IDX, TSE, POPTS and PAYLEN. Checksum insertion and
//! TSO are done as `tx_offload.rs` describes (a TSE frame leaves as its segments, each counted
//! as a frame, as GPTC/GOTC count them on the part). A frame with VLE gets the context's TCI
//! inserted after the MAC addresses with DMATXCTL.VT as TPID (in every segment of a TSE frame;
//! the offsets of the context describe the frame without it), and HLREG0.TXPADEN pads it to
//! 60 bytes. Descriptors with RS get DD
//! (dword 3 bit 0) written back with a release store, unless TDWBAL.HEAD_WB_EN asks for head
//! write-back instead (the head index is then stored at TDWBAH:TDWBAL after each run).
//! HLREG0 and DMATXCTL.VT are read once a run. A port with no peer sends into the void: a frame
//! of one buffer is then counted from its descriptor and first bytes without being gathered,
//! its buffer still checked whole by the IOMMU (`void_frame`); runs of such frames take a quick
//! path with the ring translated once (`tx_void.rs`).
//!
//! A data descriptor of length 0 hangs the queue, as it hangs the part's transmit DMA: TDH stays
//! on it and nothing more is sent until a reset or the queue is disabled
//! ([`SimCounters::tx_hangs`](super::SimCounters::tx_hangs)).
//!
//! Not trusted: a descriptor that cannot be read stops the queue where it is (TDH stays on it,
//! the fault is counted, a later tail write retries); a buffer that cannot be read drops its
//! frame (counted) but the descriptors still complete, so the ring does not wedge. Legacy
//! descriptors (DEXT = 0) are logged once and the frame is sent as its buffers say. A frame
//! gathers at most `MAX_FRAME` bytes, a TSE frame at most its largest header + 256 KiB
//! (`TSO_MAX`); longer ones are dropped (counted, logged).

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use super::layout::{txq, TQSM, W_GOTC, W_QBTC};
use super::regs::{lock, SimRegs};

use super::engine::{TxEngine, TxQueue, TxTally, VoidRun, WireFrame};
use super::layout::{bucket_index, TX_BUCKETS};
use super::tx_offload::{insert_checksums, Malformed, Offload, Tso, TxContext, TSO_MAX};
use crate::platform::dma::DmaView;
use crate::platform::regs::ixgbe as r;

/// Largest frame the engine gathers (the 82599 limit without TSO is about 15.5 KB).
pub(super) const MAX_FRAME: usize = 16 * 1024;

/// Where the frames of a transmit run go (decided once a run).
#[derive(Clone, Copy, Debug)]
enum Dest<'p> {
    /// Into an inbound FIFO: the peer's, or this port's own with MAC loopback.
    Fifo(&'p SimRegs),
    /// Nowhere, counted as sent: the port has no peer.
    Void,
    /// Nowhere, counted as dropped: the link is down.
    Down,
}

/// What a transmit walk carries along: where its frames go and what it counts.
pub(super) struct Walk<'a> {
    /// Frames for a FIFO (`Dest::Fifo`).
    out: &'a mut Vec<WireFrame>,
    /// Buffers that take the place of frames moved to `out`.
    spare: &'a mut Vec<Vec<u8>>,
    dest: Dest<'a>,
    /// The statistics counter TQSM maps the queue to.
    stat: usize,
    tally: &'a mut TxTally,
    /// HLREG0 and DMATXCTL.VT, read once a run.
    hlreg0: u32,
    vt: u16,
}

pub(super) const EOP: u32 = 1 << 24;
pub(super) const RS: u32 = 1 << 27;
pub(super) const DEXT: u32 = 1 << 29;
pub(super) const VLE: u32 = 1 << 30;
pub(super) const TSE: u32 = 1 << 31;
pub(super) const DD: u32 = 1;
/// POPTS IXSM/TXSM (olinfo bits 9:8): checksum insertion (`tx_offload.rs`).
pub(super) const POPTS: u32 = 0x3 << 8;
/// DTYP (dword 2 bits 23:20) of advanced context and data descriptors.
pub(super) const DTYP: u32 = 0xf << 20;
pub(super) const DTYP_CONTEXT: u32 = 0x2 << 20;
pub(super) const DTYP_DATA: u32 = 0x3 << 20;

impl SimRegs {
    fn tx_ready(&self, q: usize) -> bool {
        self.dma_allowed()
            && r::dmatxctl::TE.is_set(self.get(r::DMATXCTL))
            && r::txdctl::ENABLE.is_set(self.get_off(txq(q) + 0x28))
            && !r::rttdcs::ARBDIS.is_set(self.get(r::RTTDCS))
    }

    /// Runs the transmit engine of queue `q`, then puts what it produced on the wire (after
    /// releasing this port's lock). Returns whether any descriptor was processed (a ring the
    /// device cannot read makes no progress, so the device thread does not spin on it).
    pub(super) fn run_tx(&self, q: usize) -> bool {
        // Where this run's frames go, and how they are padded and tagged: MAC loopback, the
        // link, the peer, HLREG0 and DMATXCTL.VT are read once a run.
        let peer = lock(&self.peer).upgrade();
        let hlreg0 = self.get(r::HLREG0);
        let lpbk = r::hlreg0::LPBK.is_set(hlreg0);
        let dest = match (lpbk, self.link_up(), peer.as_deref()) {
            (true, _, _) => Dest::Fifo(self),
            (false, false, _) => Dest::Down,
            (false, true, Some(p)) => Dest::Fifo(p),
            (false, true, None) => Dest::Void,
        };
        let mut tally = TxTally::default();
        let (mut out, worked) = {
            let mut tx = lock(&self.tx);
            let TxEngine {
                q: queues,
                spare,
                out,
            } = &mut *tx;
            if spare.is_empty() {
                // Buffers the peer's receive engine gave back (`returns`, a leaf lock).
                spare.append(&mut lock(&self.returns));
            }
            let mut w = Walk {
                out,
                spare,
                dest,
                stat: self.stat_index(TQSM, q),
                tally: &mut tally,
                hlreg0,
                vt: r::dmatxctl::VT.get(self.get(r::DMATXCTL)) as u16,
            };
            let worked = self.walk(&mut queues[q], q, &mut w);
            (std::mem::take(out), worked)
        };
        self.flush_tx(&tally);
        // Inline, the receive engine runs once for the whole run's frames, not once a frame.
        if let Dest::Fifo(to) = dest {
            if to.queue_arrivals(out.drain(..)) && self.inline.load(Relaxed) {
                to.service_rx();
            }
        }
        lock(&self.tx).out = out;
        worked
    }

    fn flush_tx(&self, t: &TxTally) {
        if t.dropped != 0 {
            self.counters.tx_dropped.add(t.dropped);
        }
        if t.frames == 0 {
            return;
        }
        self.bump(r::GPTC, t.frames);
        self.bump(r::TPT, t.frames);
        self.bump(r::TXDGPC, t.frames);
        self.bump_wide(W_GOTC, t.bytes + 4 * u64::from(t.frames));
        for (i, &n) in t.bucket.iter().enumerate() {
            if n != 0 {
                self.bump(TX_BUCKETS[i], n);
            }
        }
        if t.bcast != 0 {
            self.bump(r::BPTC, t.bcast);
        }
        if t.mcast != 0 {
            self.bump(r::MPTC, t.mcast);
        }
        for s in 0..16 {
            if t.q_frames[s] != 0 {
                self.bump(r::QPTC.at(s as u32), t.q_frames[s]);
                self.bump_wide(W_QBTC + s, t.q_bytes[s]);
            }
        }
        self.counters.tx_frames.add(u64::from(t.frames));
        self.counters.tx_bytes.add(t.bytes);
    }

    fn walk(&self, st: &mut TxQueue, q: usize, w: &mut Walk<'_>) -> bool {
        if !self.tx_ready(q) || st.hung {
            return false;
        }
        let tb = txq(q);
        let n = (self.get_off(tb + 8) & 0x000F_FF80) as usize / 16;
        let mut head = self.get_off(tb + 0x10) as usize;
        let tail = self.get_off(tb + 0x18) as usize;
        if n == 0 || head >= n || tail >= n || head == tail {
            return false;
        }
        let base = u64::from(self.get_off(tb + 4)) << 32 | u64::from(self.get_off(tb) & !0x7f);
        let start = head;
        let wb = self.get_off(tb + 0x38);
        let head_wb = r::tdwbal::HEAD_WB_EN.is_set(wb);
        // One view for the whole walk (descriptors, buffers, write-backs): it holds the IOMMU
        // table, so nothing in the walk may take it again; frames go on the wire after it.
        let dma = self.iommu.view();
        // The ring is translated once for the walk (faults are still detected per access).
        let ring = dma.window(base, n * 16);
        // Frames into the void take the quick path where they can (`tx_void.rs`).
        let void = matches!(w.dest, Dest::Void) && self.capture_cap == 0;
        let mut quick = void
            .then(|| dma.ring(base, n))
            .flatten()
            .map(|ring| VoidRun { ring, pool: None });
        while head != tail {
            if let Some(run) = quick.as_mut().filter(|_| !st.in_frame) {
                head = Self::void_run(&dma, run, st, (head, tail), head_wb, w);
                if head == tail {
                    break;
                }
            }
            let d = base + (head * 16) as u64;
            let (Ok(addr), Ok(hi)) = (ring.load_u64(d, Acquire), ring.load_u64(d + 8, Acquire))
            else {
                self.counters.dma_faults.inc();
                break;
            };
            let (cmd, olinfo) = (hi as u32, (hi >> 32) as u32);
            if cmd & (DEXT | DTYP) == DEXT | DTYP_CONTEXT {
                Self::keep_context(st, addr, cmd, olinfo);
            } else {
                if cmd & (DEXT | DTYP) != DEXT | DTYP_DATA {
                    self.gap("legacy or unknown transmit descriptor type; sent as a plain buffer");
                }
                if cmd & 0xffff == 0 {
                    // DTALEN 0: the transmit DMA of the part hangs on it (Linux pads every frame
                    // to 17 bytes so that it never happens). The queue stops here for good:
                    // TDH stays on the descriptor, nothing after it is sent.
                    st.hung = true;
                    self.counters.tx_hangs.inc();
                    tracing::error!(port = %self.name, queue = q, slot = head, "transmit data descriptor with length 0: the queue's DMA hangs (reset or disable the queue)");
                    break;
                }
                self.data(&dma, st, (addr, cmd, olinfo), q, w);
            }
            if cmd & RS != 0 && !head_wb && ring.store_u32(d + 12, olinfo | DD, Release).is_err() {
                self.counters.dma_faults.inc();
            }
            // (A compare, not `% n`: a division per descriptor cost more than the rest of
            // the step.)
            head = if head + 1 == n { 0 } else { head + 1 };
        }
        self.set_off(tb + 0x10, head as u32);
        if head_wb {
            let at = u64::from(self.get_off(tb + 0x3C)) << 32 | u64::from(wb & !3);
            if dma.store_u32(at, head as u32, Release).is_err() {
                self.counters.dma_faults.inc();
            }
        }
        head != start
    }

    /// Gathers the buffer of data descriptor `(addr, cmd, olinfo)` into the queue's frame and,
    /// at EOP, counts the frame and (to a FIFO) queues it in `w.out`, a buffer from `w.spare`
    /// taking its place; a frame into the void or onto a downed link keeps its buffer.
    fn data(
        &self,
        dma: &DmaView<'_>,
        st: &mut TxQueue,
        (addr, cmd, olinfo): (u64, u32, u32),
        q: usize,
        w: &mut Walk<'_>,
    ) {
        let len = (cmd & 0xffff) as usize;
        if !st.in_frame {
            let dext = cmd & DEXT != 0;
            let vle = cmd & VLE != 0 && dext;
            // (Offloads are fields of advanced descriptors only.)
            let offload = if dext {
                Offload::from_desc(cmd, olinfo)
            } else {
                Offload::default()
            };
            if cmd & EOP != 0
                && len >= 12
                && !offload.any()
                && matches!(w.dest, Dest::Void)
                && self.capture_cap == 0
            {
                self.void_frame(dma, addr, len, vle, w);
                return;
            }
            st.in_frame = true;
            st.vle = vle;
            st.idx = ((olinfo >> 4) & 1) as usize;
            st.offload = offload;
            st.limit = if offload.tse { TSO_MAX } else { MAX_FRAME };
            st.bad = false;
            st.frame.clear();
        }
        if !st.bad {
            let at = st.frame.len();
            if at + len > st.limit {
                st.bad = true;
                let limit = st.limit;
                tracing::warn!(port = %self.name, queue = q, "transmit frame longer than {limit} bytes dropped");
            } else if dma.read_append(addr, len, &mut st.frame).is_err() {
                st.bad = true;
                self.counters.dma_faults.inc();
            }
        }
        if cmd & EOP == 0 {
            return;
        }
        st.in_frame = false;
        if st.bad {
            self.counters.tx_dropped.inc();
            return;
        }
        if matches!(w.dest, Dest::Down) {
            w.tally.dropped += 1;
            return;
        }
        let ctx = st.ctx[st.idx];
        let tag = st.vle.then_some(ctx.vlan);
        if st.offload.tse {
            self.send_tso(&st.frame, &ctx, st.offload, tag, w);
            return;
        }
        if st.offload.any() {
            match insert_checksums(&mut st.frame, &ctx, st.offload) {
                Ok(false) => {}
                Ok(true) => self
                    .gap("SCTP CRC insertion (L4T 10) is not modelled; the CRC is sent as it is"),
                Err(m) => return self.malformed(m),
            }
        }
        self.emit(&mut st.frame, tag, w);
    }

    /// Puts one frame on the wire: the tag inserted (VLE), padded (HLREG0.TXPADEN), counted,
    /// and, to a FIFO, queued in `w.out` (its buffer moved there, a spare taking its place).
    fn emit(&self, f: &mut Vec<u8>, tag: Option<u16>, w: &mut Walk<'_>) {
        if let Some(tci) = tag {
            super::frame::insert_tag(f, w.vt, tci);
        }
        if r::hlreg0::TXPADEN.is_set(w.hlreg0) && f.len() < 60 {
            f.resize(60, 0);
        }
        self.count_tx(f, w.stat, w.tally);
        if matches!(w.dest, Dest::Void) {
            return;
        }
        let data = std::mem::replace(f, w.spare.pop().unwrap_or_default());
        let fcs_ok = r::hlreg0::TXCRCEN.is_set(w.hlreg0);
        w.out.push(WireFrame { data, fcs_ok });
    }

    /// Sends the gathered TSE frame `f` as its segments (`tx_offload.rs`), each emitted as a
    /// frame of its own; a malformed request sends nothing.
    fn send_tso(&self, f: &[u8], ctx: &TxContext, o: Offload, tag: Option<u16>, w: &mut Walk<'_>) {
        let masks = (self.get(r::DTXTCPFLGL), self.get(r::DTXTCPFLGH));
        let plan = match Tso::plan(f, ctx, o, masks, MAX_FRAME) {
            Ok(p) => p,
            Err(m) => return self.malformed(m),
        };
        let mut seg = w.spare.pop().unwrap_or_default();
        for i in 0..plan.segments() {
            plan.build(f, i, &mut seg);
            self.emit(&mut seg, tag, w);
        }
        w.spare.push(seg);
    }

    /// Drops a frame whose offload request is malformed: counted, warned about once per reason.
    fn malformed(&self, m: Malformed) {
        self.counters.tx_malformed.inc();
        self.gap(m.what());
    }

    /// A frame of one buffer (of 12 bytes or more) that goes nowhere (no peer, no capture):
    /// counted as [`data`](Self::data) counts it, from its length and destination address,
    /// without gathering it. Its buffer is still checked whole by the IOMMU (a buffer that cannot be
    /// read drops the frame, counted), but only its first bytes are copied: nothing reads the
    /// rest. (A frame to a FIFO or a capture is gathered whole.)
    fn void_frame(&self, dma: &DmaView<'_>, addr: u64, len: usize, vle: bool, w: &mut Walk<'_>) {
        let mut dst = [0u8; 6];
        if len > MAX_FRAME {
            self.counters.tx_dropped.inc();
            tracing::warn!(port = %self.name, "transmit frame longer than {MAX_FRAME} bytes dropped");
            return;
        }
        let Ok(n) = dma.read_prefix(addr, len, &mut dst) else {
            self.counters.dma_faults.inc();
            self.counters.tx_dropped.inc();
            return;
        };
        Self::count_void(len, vle, &dst[..n], w);
    }

    /// Keeps a context descriptor (qword 0, dword 2 `cmd`, dword 3 `olinfo`) in its slot (IDX,
    /// olinfo bit 4) for the data descriptors that name it (`tx_offload.rs`).
    #[inline]
    pub(super) fn keep_context(st: &mut TxQueue, qw0: u64, cmd: u32, olinfo: u32) {
        st.ctx[((olinfo >> 4) & 1) as usize] = TxContext::from_desc(qw0, cmd, olinfo);
    }

    /// Counts a frame into the void from its buffer's length, whether a tag is inserted, and
    /// its first bytes (`void_frame`, and the quick path in `tx_void.rs`): the tag and the
    /// padding HLREG0.TXPADEN asks for are added as the gathered frame would have them.
    pub(super) fn count_void(len: usize, vle: bool, dst: &[u8], w: &mut Walk<'_>) {
        // The tag goes after the addresses, so it does not move them.
        let mut wire = len + if vle { 4 } else { 0 };
        if r::hlreg0::TXPADEN.is_set(w.hlreg0) {
            wire = wire.max(60);
        }
        Self::count_tx_len(wire as u64, dst, w.stat, w.tally);
    }

    fn gap(&self, what: &'static str) {
        let mut tx_gaps = lock(&self.gaps);
        if !tx_gaps.contains(&what) {
            tx_gaps.push(what);
            tracing::warn!(port = %self.name, "{what} (logged once)");
        }
    }

    /// Counts a frame that goes on the wire (statistics counter `s`), and captures it if the
    /// port captures.
    fn count_tx(&self, f: &[u8], s: usize, t: &mut TxTally) {
        Self::count_tx_len(f.len() as u64, f.get(..6).unwrap_or(f), s, t);
        if self.capture_cap > 0 {
            let mut c = lock(&self.capture);
            if c.len() == self.capture_cap {
                c.pop_front();
            }
            c.push_back(f.to_vec());
        }
    }

    /// Counts a frame of `len` bytes (no FCS) whose first bytes (up to six) are `dst`.
    fn count_tx_len(len: u64, dst: &[u8], s: usize, t: &mut TxTally) {
        t.frames += 1;
        t.bytes += len;
        t.bucket[bucket_index(len + 4)] += 1;
        if dst == [0xff; 6] {
            t.bcast += 1;
        } else if dst.first().is_some_and(|b| b & 1 != 0) {
            t.mcast += 1;
        }
        t.q_frames[s] += 1;
        t.q_bytes[s] += len;
    }

    /// The device thread's work: every enabled transmit queue with descriptors, then the
    /// receive side. Returns whether anything happened.
    pub(super) fn poll(&self) -> bool {
        if self.removed.load(Relaxed) {
            return false;
        }
        let mut worked = false;
        for (w, mask) in self.tx_enabled.iter().enumerate() {
            let mut m = mask.load(Acquire);
            while m != 0 {
                let q = w * 64 + m.trailing_zeros() as usize;
                m &= m - 1;
                let tb = txq(q);
                if self.get_off(tb + 0x10) != self.get_off(tb + 0x18) {
                    worked |= self.run_tx(q);
                }
            }
        }
        worked | self.service_rx() | self.irq_poll()
    }
}

/// The device thread's view of a software 82599.
impl crate::sealed::Sealed for SimRegs {}

impl crate::devices::worker::Polled for SimRegs {
    fn poll(&self) -> bool {
        SimRegs::poll(self)
    }
    fn name(&self) -> &str {
        SimRegs::name(self)
    }
    fn busy(&self, ns: u64) {
        self.counters.busy_ns.add(ns);
        self.counters.busy_polls.inc();
    }
}
