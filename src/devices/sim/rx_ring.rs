//! The receive ring as the engine fills it: a cursor on it, and the placement of a frame into
//! its buffers with the descriptors written back.
//!
//! Buffers are written first, descriptors after: qword 0 (pkt_info, RSS hash), then the
//! status/error dword with DD and the length and VLAN in one release store, one descriptor
//! after the other. A DMA fault anywhere drops the frame before any descriptor is written back
//! and leaves RDH where it was.
//!
//! The cursor keeps the ring's geometry as long as the register snapshot lasts (`rx_config.rs`:
//! until a register other than a tail is written) and the head the engine
//! advances, which is written to RDH after every frame (after every burst of the
//! traffic source's copies, `source.rs`). RDT is read when the
//! descriptors the cursor knows of run out: the driver moves it once a burst, and each read of it
//! on the device core fetches the line the driver wrote.

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use super::engine::RingCursor;
use super::layout::{rxq, RQSMR};
use super::regs::SimRegs;
use super::rx::{Outcome, EOP};
use crate::platform::dma::DmaView;
use crate::platform::regs::ixgbe as r;

impl SimRegs {
    /// Whether queue `q` is enabled with a ring of at least one descriptor (read every frame).
    pub(super) fn rx_queue_on(&self, q: usize) -> bool {
        let rb = rxq(q);
        r::rxdctl::ENABLE.is_set(self.get_off(rb + 0x28)) && self.get_off(rb + 8) >= 16
    }

    /// A cursor on queue `q`'s ring, from its registers.
    pub(super) fn ring_cursor(&self, q: usize) -> RingCursor {
        let rb = rxq(q);
        let srrctl = self.get_off(rb + 0x14);
        let chunk = r::srrctl::BSIZEPKT.get(srrctl) as usize * 1024;
        RingCursor {
            q,
            n: (self.get_off(rb + 8) & 0x000F_FF80) as usize / 16,
            base: u64::from(self.get_off(rb + 4)) << 32 | u64::from(self.get_off(rb) & !0x7f),
            head: self.get_off(rb + 0x10) as usize,
            tail: self.get_off(rb + 0x18) as usize,
            chunk: if chunk == 0 { 2048 } else { chunk },
            vme: r::rxdctl::VME.is_set(self.get_off(rb + 0x28)),
            stat: self.stat_index(RQSMR, q),
        }
    }

    /// Writes `data` into the buffers of `ring` and writes the descriptors back: one buffer, or
    /// as many as it needs (`rx_scatter.rs`), only when the ring has them all free.
    pub(super) fn place(
        &self,
        dma: &DmaView<'_>,
        ring: &mut RingCursor,
        data: &[u8],
        lo: u64,
        staterr: u32,
        vlan: u16,
    ) -> Outcome {
        let mut chunk = ring.chunk;
        let split = self.faults.split_frames.load(Relaxed) > 0;
        if split {
            chunk = chunk.min(self.faults.split_chunk.load(Relaxed).max(1));
        }
        // (Most frames fit one buffer: no division for them.)
        let needed = if data.len() <= chunk {
            1
        } else {
            data.len().div_ceil(chunk)
        };
        if needed > ring.free() {
            self.reread_tail(ring);
            if ring.n == 0 || needed > ring.free() {
                return Outcome::NoRoom(ring.q);
            }
        }
        if needed == 1 {
            let o = self.place_one(dma, ring, data, lo, staterr | EOP, vlan);
            if split && o == Outcome::Placed {
                self.faults.split_frames.fetch_sub(1, Relaxed);
            }
            return o;
        }
        let o = self.place_scattered(dma, ring, data, (chunk, needed), lo, staterr, vlan);
        if split && o == Outcome::Placed {
            self.faults.split_frames.fetch_sub(1, Relaxed);
        }
        o
    }

    /// [`place`](Self::place) for a frame that fits one buffer (every frame but jumbo or split
    /// ones): the descriptor at the head, one write-back with EOP in `staterr`.
    #[inline]
    fn place_one(
        &self,
        dma: &DmaView<'_>,
        ring: &mut RingCursor,
        data: &[u8],
        lo: u64,
        staterr: u32,
        vlan: u16,
    ) -> Outcome {
        let d = ring.base + (ring.head * 16) as u64;
        let ok = dma
            .load_u64(d, Acquire)
            .and_then(|addr| dma.write(addr, data))
            .and_then(|_| dma.store_u64(d, lo, Relaxed))
            .and_then(|_| dma.store_u64(d + 8, wb_hi(staterr, data.len(), vlan), Release));
        if ok.is_err() {
            self.counters.dma_faults.inc();
            return Outcome::Dropped;
        }
        self.advance(ring, 1);
        Outcome::Placed
    }

    /// Reads RDT again into `ring`, when the descriptors it knows of are used up: has the
    /// driver given more? (`place`, the quick path and the source's bursts.)
    #[inline]
    pub(super) fn reread_tail(&self, ring: &mut RingCursor) {
        ring.tail = self.get_off(rxq(ring.q) + 0x18) as usize;
    }

    /// Moves the ring's head past `k` written-back descriptors (RDH too).
    pub(super) fn advance(&self, ring: &mut RingCursor, k: usize) {
        ring.head = ring.at(k);
        self.set_off(rxq(ring.q) + 0x10, ring.head as u32);
        self.rx_cause(ring.q);
    }
}

/// A write-back's second qword: dword 2 (status and errors, with DD) and dword 3 (length and
/// VLAN), stored together as one release store so that the driver sees DD only together with
/// the length (little-endian: dword 2 is the low half).
pub(super) fn wb_hi(staterr: u32, len: usize, vlan: u16) -> u64 {
    let len_vlan = len as u32 | u32::from(vlan) << 16;
    u64::from(staterr) | u64::from(len_vlan) << 32
}
