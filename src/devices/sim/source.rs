//! The built-in traffic source: a sender on the wire that offers one frame back to back, so a
//! benchmark's receive side needs no transmitting port (and no second copy of every frame).
//!
//! The source's frame goes through the whole receive path (`rx.rs`) when the engine has no
//! snapshot or ring cursor to place copies under: the first time, and again after any register
//! other than a tail is written (or a reset). That path judges it (size, filters, parse and
//! checksums, queue) under the registers' snapshot (`rx_config.rs`), and the verdict is kept
//! with the frame's analysis, as every frame's is. The frame is the same every time, so each
//! burst takes that verdict (`SimRegs::judge`, a lookup) and places copies under it
//! ([`SimRegs::source_copies`]), from one run of the engine to the next; a new source frame is
//! judged for itself.
//!
//! A burst is what a part that fetches and writes back descriptors in bursts does: the
//! receive enables (bus master, RXCTRL.RXEN, link), the queue's RXDCTL.ENABLE and the snapshot
//! (no register but a tail written since) are checked once, then the burst's descriptors are
//! read, then its buffers written, then its descriptors written back. The ring is translated
//! once (`DmaView::ring`) and the buffers through one window on their pool's mapping; each
//! copy's descriptor is written back with DD as a release store, and it is counted. A buffer
//! outside that window ends the burst before it; what a burst cannot place at all (a ring not
//! inside one mapping, a first buffer not inside its mapping) goes down the whole path, which
//! faults, drops and counts it as it does any frame. A ring with no free descriptor makes the
//! source wait, as the whole path would (it re-reads the same tail and counts nothing): an idle
//! poll then costs a verdict lookup and a tail read, not a trip down the whole path. A copy
//! skips only what cannot differ from the frame judged: the judging, and the copy that strips
//! the tag or appends the FCS (made once per burst). Fault injection (RXE, split frames),
//! checked once per burst, sends every frame down the whole path.
//!
//! Receive turned off during a burst takes effect with the next one (at most 32 frames later,
//! a microsecond or so), as the part finishes the descriptors it has fetched. A driver that
//! turns receive off and then unmaps its memory is not hurt: its unmap waits for the IOMMU view
//! the burst holds.

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use super::engine::{RxEngine, Verdict};
use super::regs::SimRegs;
use super::rx::{Outcome, EOP};
use super::rx_ring::wb_hi;
use crate::platform::dma::DmaView;

/// Frames the source produces per service call at most (inline mode).
const SOURCE_BUDGET: usize = 4096;
/// The same per poll of a device thread (threaded mode): a device thread serves transmit
/// queues (its own and other ports') between runs, and a large budget would starve them while
/// the driver keeps freeing descriptors. 128 frames (four bursts, about 1.5 us) beat 64 in 11
/// of 14 alternating runs of `examples/model_cost.rs` (a poll's fixed cost is spread over
/// twice the frames); 256 was better or much worse depending on the run.
const THREADED_SOURCE_BUDGET: usize = 128;
/// Copies a burst places at most (`source_copies`).
const BURST: usize = 32;

impl SimRegs {
    /// Lets the source fill free descriptors; whether any frame was delivered.
    pub(super) fn run_source(&self, dma: &DmaView<'_>, rx: &mut RxEngine, inline: bool) -> bool {
        let Some(mut src) = rx.source.take() else {
            return false;
        };
        let mut worked = false;
        let budget = if inline {
            SOURCE_BUDGET
        } else {
            THREADED_SOURCE_BUDGET
        };
        let mut done = 0;
        while done < budget {
            if src.remaining == Some(0) || !self.rx_ready() {
                break;
            }
            let left = src.remaining.map_or(usize::MAX, |n| n as usize);
            // Copies under the verdict kept for the frame; with none kept (or no room, or
            // the queue off, or a fault injected) the whole path decides for the next frame,
            // and copies follow it under the verdict it keeps.
            // (`frames`: taken off the wire, placed or dropped.)
            let (o, frames) =
                match self.source_copies(dma, rx, &src.frame, (budget - done).min(left)) {
                    Burst::Wait => break, // No free descriptor: as the whole path would find.
                    Burst::Whole => {
                        let o = self.receive(dma, rx, &src.frame, true);
                        if matches!(o, Outcome::NoRoom(_) | Outcome::NotReady) {
                            break; // The source waits until the port can take its frame.
                        }
                        let c = match o {
                            Outcome::Placed => {
                                let k = (budget - done - 1).min(left - 1);
                                self.source_copies(dma, rx, &src.frame, k).placed()
                            }
                            _ => 0,
                        };
                        (o, 1 + c)
                    }
                    Burst::Placed(c) => (Outcome::Placed, c),
                };
            done += frames;
            self.counters.source_frames.add(frames as u64);
            if let Some(r) = src.remaining.as_mut() {
                *r -= frames as u64;
            }
            worked |= o == Outcome::Placed;
            if o == Outcome::Dropped {
                // Every source frame is the same: the next one would be dropped too. Not
                // progress either, so an idle device thread backs off.
                break;
            }
        }
        rx.source = Some(src);
        worked
    }

    /// Places up to `k` copies of the source's frame `f` under its verdict, with the snapshot
    /// and ring cursor the engine holds (module doc). Anything it cannot place without a doubt
    /// (no verdict, a fault to detect) it leaves to the whole path; a ring with no free
    /// descriptor, where the whole path would find none either, makes the source wait.
    fn source_copies(&self, dma: &DmaView<'_>, rx: &mut RxEngine, f: &[u8], k: usize) -> Burst {
        // The snapshot, then the frame's verdict under it (kept with its analysis, `rx.rs`;
        // a runt never gets that far on the whole path).
        let Some(c) = rx.config else {
            return Burst::Whole;
        };
        if self.config_epoch.load(Acquire) != c.epoch || f.len() < 60 {
            return Burst::Whole;
        }
        let Verdict::Deliver(d) = self.judge(rx, &c, f) else {
            return Burst::Whole;
        };
        let RxEngine {
            cursor: Some(ring),
            scratch,
            tally,
            ..
        } = rx
        else {
            return Burst::Whole;
        };
        let k = k.min(BURST);
        let injecting =
            self.faults.rx_errors.load(Relaxed) > 0 || self.faults.split_frames.load(Relaxed) > 0;
        if k == 0 || ring.q != d.q || injecting {
            return Burst::Whole;
        }
        if ring.free() < k {
            self.reread_tail(ring);
        }
        if ring.free() == 0 {
            return Burst::Wait;
        }
        let strip = d.tag.filter(|_| ring.vme);
        let data = Self::bytes_written(scratch, f, strip, c.keep_fcs);
        if data.len() > ring.chunk {
            return Burst::Whole; // Several buffers per frame: the whole path handles them.
        }
        let vlan = strip.map_or(0, |(_, tci)| tci);
        let hi = wb_hi(d.staterr | EOP, data.len(), vlan);
        let k = k.min(ring.free());
        // The enables, once a burst (module doc).
        if !self.rx_ready() || !self.rx_queue_on(ring.q) {
            return Burst::Whole;
        }
        // Like the part, which fetches descriptors into its own cache in bursts and writes
        // them back in bursts: the batch's descriptors are read first, then its buffers are
        // written, then the descriptors are written back in ring order. The lines the driver
        // wrote (refilled descriptors) or read (frames it looked at) then cross to this core
        // together instead of one stall per frame. The ring is translated once (a ring not in
        // one mapping goes down the whole path, which faults where it is not mapped), and the
        // buffers, which come from one pool in one mapping, through one window.
        let Some(descs) = dma.ring(ring.base, ring.n) else {
            return Burst::Whole;
        };
        let mut addrs = [0u64; BURST];
        // A running slot index rather than `RxRing::at(i)` per copy, which cost 6-9 more
        // instructions a frame here (callgrind, `examples/model_cost.rs`).
        let mut at = ring.head;
        for a in &mut addrs[..k] {
            *a = descs.load_u64(at, 0, Acquire);
            at = if at + 1 == ring.n { 0 } else { at + 1 };
        }
        // Each copy's buffer, in order, while it is inside the pool's window; the first one
        // outside ends the burst unplaced. The next burst takes it (a window on its own
        // mapping), or the whole path, which faults where nothing is mapped.
        let pool = dma.window_around(addrs[0]);
        let placed = addrs[..k]
            .iter()
            .take_while(|&&a| pool.write_inside(a, data))
            .count();
        // Qword 0, then DD with the length and VLAN as a release store (as `rx_ring.rs` does).
        let mut at = ring.head;
        for _ in 0..placed {
            descs.store_u64(at, 0, d.lo, Relaxed);
            descs.store_u64(at, 8, hi, Release);
            at = if at + 1 == ring.n { 0 } else { at + 1 };
        }
        if placed == 0 {
            return Burst::Whole;
        }
        self.advance(ring, placed);
        Self::count_rx_n(tally, ring.stat, f, data.len(), placed as u32);
        Self::count_total_n(tally, f.len(), placed as u32);
        Burst::Placed(placed)
    }
}

/// What a burst of the source's copies did.
enum Burst {
    /// Placed this many (at least one).
    Placed(usize),
    /// Placed none: the ring has no free descriptor for the frame's queue (the whole path
    /// would find none either: it re-reads the same tail), so the source waits.
    Wait,
    /// Placed none for another reason: the whole path decides the next frame.
    Whole,
}

impl Burst {
    fn placed(&self) -> usize {
        match self {
            Burst::Placed(n) => *n,
            _ => 0,
        }
    }
}
