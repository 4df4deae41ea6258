//! The built-in traffic source: a sender on the wire that offers one frame back to back, so a
//! benchmark's receive side needs no transmitting port (and no second copy of every frame).
//!
//! A run of the source takes its frames in batches. The first frame of a batch goes through
//! the whole receive path (`rx.rs`), which judges it (size, filters, parse and checksums,
//! queue) under the registers' snapshot (`rx_config.rs`). The frame is the same every time, so
//! that verdict holds for every copy the snapshot serves, and the copies after the first go to
//! the ring in one burst ([`SimRegs::source_copies`]). In a burst the descriptors are read
//! first, then the buffers written, then the descriptors written back, as a part that fetches
//! and writes back descriptors in bursts does. What each copy still gets, as the first does:
//! its descriptor is read and its buffer written through the software IOMMU (a fault drops the
//! copy, counted once, and ends the burst), the receive enables and the queue's RXDCTL.ENABLE
//! are checked before its buffer is written (and that no register but a tail was written since
//! the burst began), its descriptor is written back with DD as a release
//! store, and it is counted. One difference: the descriptors of a burst are read before the
//! enables of its later copies are checked, so a descriptor that faults just as receive is turned
//! off is refused by the IOMMU (and counted there) without a frame being dropped; the copy waits.
//! What a copy skips is only what cannot differ from the first: the judging, and the copy that
//! strips the tag or appends the FCS (made once per batch). Fault injection (RXE, split
//! frames), checked once per burst, sends every frame down the whole path.

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use super::engine::{RxEngine, Verdict};
use super::layout::rxq;
use super::regs::SimRegs;
use super::rx::{Outcome, EOP};
use crate::platform::dma::DmaView;

/// Frames the source produces per service call at most (inline mode).
const SOURCE_BUDGET: usize = 4096;
/// The same per poll of a device thread (threaded mode): a device thread serves transmit
/// queues (its own and other ports') between runs, and a large budget would starve them while
/// the driver keeps freeing descriptors.
const THREADED_SOURCE_BUDGET: usize = 64;
/// Copies a burst places at most after the first (`source_copies`).
const BURST: usize = 31;

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
            let o = self.receive(dma, rx, &src.frame, true, true);
            if matches!(o, Outcome::NoRoom(_) | Outcome::NotReady) {
                break; // The source waits until the port can take its frame.
            }
            // This frame, and the copies placed after it under its verdict.
            let left = src.remaining.map_or(usize::MAX, |n| n as usize) - 1;
            let (copies, faulted) = if o == Outcome::Placed {
                self.source_copies(dma, rx, &src.frame, (budget - done - 1).min(left))
            } else {
                (0, false)
            };
            let n = 1 + copies + usize::from(faulted);
            done += n;
            self.counters.source_frames.add(n as u64);
            if let Some(r) = src.remaining.as_mut() {
                *r -= n as u64;
            }
            worked |= o == Outcome::Placed;
            if o == Outcome::Dropped || faulted {
                // Every source frame is the same: the next one would be dropped too. Not
                // progress either, so an idle device thread backs off.
                break;
            }
        }
        rx.source = Some(src);
        worked
    }

    /// Places up to `k` more copies of the source's frame `f` right after one was placed, under
    /// that frame's verdict, snapshot and ring cursor (module doc). Returns the copies placed,
    /// and whether one more was dropped by a DMA fault (counted as the whole path counts it).
    fn source_copies(
        &self,
        dma: &DmaView<'_>,
        rx: &mut RxEngine,
        f: &[u8],
        k: usize,
    ) -> (usize, bool) {
        let RxEngine {
            config: Some(c),
            cursor: Some(ring),
            source_verdict: Some(Verdict::Deliver(d)),
            scratch,
            tally,
            ..
        } = rx
        else {
            return (0, false);
        };
        let k = k.min(BURST);
        let injecting =
            self.faults.rx_errors.load(Relaxed) > 0 || self.faults.split_frames.load(Relaxed) > 0;
        if k == 0 || ring.q != d.q || injecting {
            return (0, false);
        }
        let strip = d.tag.filter(|_| ring.vme);
        let data = Self::bytes_written(scratch, f, strip, c.keep_fcs);
        if data.len() > ring.chunk {
            return (0, false); // Several buffers per frame: the whole path handles them.
        }
        let vlan = strip.map_or(0, |(_, tci)| tci);
        let len_vlan = data.len() as u32 | u32::from(vlan) << 16;
        let hi = u64::from(d.staterr | EOP) | u64::from(len_vlan) << 32;
        if ring.free() < k {
            ring.tail = self.get_off(rxq(ring.q) + 0x18) as usize;
        }
        let k = k.min(ring.free());
        // Like the part, which fetches descriptors into its own cache in bursts and writes
        // them back in bursts: the batch's descriptors are read first, then its buffers are
        // written, then the descriptors are written back in ring order. The lines the driver
        // wrote (refilled descriptors) or read (frames it looked at) then cross to this core
        // together instead of one stall per frame.
        let descs = dma.window(ring.base, ring.n * 16);
        let desc = |i: usize| ring.base + (ring.at(i) * 16) as u64;
        let mut addrs = [0u64; BURST];
        // The copy (by index) whose descriptor or buffer could not be accessed.
        let mut fault_at = None;
        let mut fetched = 0;
        while fetched < k {
            let Ok(a) = descs.load_u64(desc(fetched), Acquire) else {
                fault_at = Some(fetched);
                break;
            };
            addrs[fetched] = a;
            fetched += 1;
        }
        // Each copy, in order: the enables, then its buffer (or the fault of its descriptor).
        let (mut placed, mut faulted) = (0, false);
        while placed < fetched || fault_at == Some(placed) {
            let stale = self.config_epoch.load(Acquire) != c.epoch;
            if !self.rx_ready() || !self.rx_queue_on(ring.q) || stale {
                break;
            }
            if placed == fetched || dma.write(addrs[placed], data).is_err() {
                faulted = true;
                break;
            }
            placed += 1;
        }
        // Qword 0, then DD with the length and VLAN as a release store (as `rx_ring.rs` does).
        // A descriptor that cannot be written back drops its frame, and the copies after it
        // are not delivered (their buffers are written over later).
        let unwritten = (0..placed).find(|&i| {
            descs
                .store_u64(desc(i), d.lo, Relaxed)
                .and_then(|_| descs.store_u64(desc(i) + 8, hi, Release))
                .is_err()
        });
        if let Some(i) = unwritten {
            (placed, faulted) = (i, true);
        }
        if faulted {
            self.counters.dma_faults.inc();
            Self::count_total(tally, f.len());
        }
        ring.head = ring.at(placed);
        if placed > 0 {
            self.set_off(rxq(ring.q) + 0x10, ring.head as u32);
            Self::count_rx_n(tally, ring.stat, f, data.len(), placed as u32);
            Self::count_total_n(tally, f.len(), placed as u32);
        }
        (placed, faulted)
    }
}
