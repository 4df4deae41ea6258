//! The receive engine's quick path for frames from the wire (the inbound FIFO).
//!
//! The whole path (`rx.rs`) takes one frame at a time: the enables, the snapshot, the verdict, the
//! ring cursor and its queue, then four IOMMU accesses (descriptor, buffer, two write-back words),
//! each translated on its own. Most frames of a run are alike: good, judged before (their verdict
//! is kept with their analysis), for the queue the engine already has a cursor on, one buffer each.
//! For those, a run checks the enables, the fault injections, the snapshot and the queue's
//! RXDCTL.ENABLE once, translates the ring once (`DmaView::ring`; a ring not mapped whole is left
//! to the whole path) and the buffer pool once (`DmaView::window_around`, from the first buffer),
//! and places frame after frame in the whole path's order: descriptor read, buffer written, qword
//! 0, then DD with length and VLAN as one release store. It writes RDH once, at the end of the run.
//!
//! It stops at the first frame that needs more: a bad FCS or a runt, a verdict that drops it or
//! sends it to another queue, several buffers, no free descriptor, or a buffer outside the pool's
//! window. The whole path then takes that frame (and counts, drops or faults it as it always does),
//! and the quick path is tried again for the next. So nothing a frame's fate depends on is decided
//! differently here; only the checks that cannot change within a run are made once. (As for the
//! traffic source's bursts, receive turned off during a run takes effect with the next run; a
//! driver's unmap waits for the IOMMU view the run holds.)

use std::collections::VecDeque;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use super::engine::{RxEngine, Verdict, WireFrame};
use super::layout::rxq;
use super::regs::SimRegs;
use super::rx::EOP;
use super::rx_ring::wb_hi;
use crate::platform::dma::{DmaView, DmaWindow};

impl SimRegs {
    /// Places frames from the front of `pending` while the quick path can (module doc);
    /// returns how many it placed (taken off `pending`, their buffers in `rx.used`) and their
    /// bytes as they arrived.
    pub(super) fn receive_quick(
        &self,
        dma: &DmaView<'_>,
        rx: &mut RxEngine,
        pending: &mut VecDeque<WireFrame>,
    ) -> (usize, usize) {
        let injecting =
            self.faults.rx_errors.load(Relaxed) > 0 || self.faults.split_frames.load(Relaxed) > 0;
        if pending.is_empty() || injecting || !self.rx_ready() {
            return (0, 0);
        }
        let c = self.config(rx);
        let Some(mut ring) = rx.cursor.filter(|r| self.rx_queue_on(r.q)) else {
            return (0, 0);
        };
        let Some(descs) = dma.ring(ring.base, ring.n) else {
            return (0, 0); // Not mapped whole: the whole path reads (and faults) per frame.
        };
        let mut pool: Option<DmaWindow<'_, '_>> = None;
        let (mut placed, mut bytes) = (0, 0);
        while let Some(f) = pending.front() {
            if !f.fcs_ok || f.data.len() < 60 {
                break;
            }
            let Verdict::Deliver(d) = self.judge(rx, &c, &f.data) else {
                break;
            };
            let strip = d.tag.filter(|_| ring.vme);
            let data = Self::bytes_written(&mut rx.scratch, &f.data, strip, c.keep_fcs);
            if d.q != ring.q || data.len() > ring.chunk {
                break;
            }
            if ring.free() == 0 {
                self.reread_tail(&mut ring);
                if ring.free() == 0 {
                    break;
                }
            }
            let addr = descs.load_u64(ring.head, 0, Acquire);
            let pool = pool.get_or_insert_with(|| dma.window_around(addr));
            if !pool.write_inside(addr, data) {
                break; // (The whole path reads the descriptor again, and faults if it must.)
            }
            let vlan = strip.map_or(0, |(_, tci)| tci);
            let hi = wb_hi(d.staterr | EOP, data.len(), vlan);
            descs.store_u64(ring.head, 0, d.lo, Relaxed);
            descs.store_u64(ring.head, 8, hi, Release);
            ring.head = ring.at(1);
            Self::count_rx(&mut rx.tally, ring.stat, &f.data, data.len());
            Self::count_total(&mut rx.tally, f.data.len());
            if let Some(f) = pending.pop_front() {
                bytes += f.data.len();
                rx.used.push(f.data);
            }
            placed += 1;
        }
        if placed > 0 {
            self.set_off(rxq(ring.q) + 0x10, ring.head as u32);
            self.rx_cause(ring.q);
        }
        rx.cursor = Some(ring);
        (placed, bytes)
    }
}
