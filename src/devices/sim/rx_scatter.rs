//! Receive scatter: a frame longer than one receive buffer is written across as many
//! descriptors as it needs.
//!
//! Why a module of its own: this is the only place where one frame owns several descriptors,
//! and the rules for what each of them says are the part a driver's scattered receive path
//! depends on (Linux `ixgbe_is_non_eop` / `ixgbe_process_skb_fields`, DPDK
//! `ixgbe_recv_scattered_pkts`); the one-buffer paths (`rx_ring.rs`, `rx_quick.rs`, the
//! traffic source's bursts in `source.rs`) stay free of them and hand every frame that does not
//! fit one buffer to the whole path, which comes here.
//!
//! What the model does, and what it rests on:
//! - Which frames get here: those up to the receive size limit, 1518 bytes (FCS included), or
//!   MAXFRS.MFS (bits 31:16) with HLREG0.JUMBOEN (bit 2), + 4 per recognised VLAN tag (82599
//!   datasheet, the MAXFRS and HLREG0 registers; Linux `ixgbe_set_rx_buffer_len` writes
//!   MHADD.MFS and sets JUMBOEN for an MTU above 1500; `IXGBE_RXDADV_ERR_OSE` is the oversize
//!   error). Longer frames are dropped and counted in ROC (`rx.rs`, `Verdict::Oversize`)
//!   before any descriptor is touched.
//! - Buffers: SRRCTL.BSIZEPKT (bits 4:0, 1 KB units; 2 KB at reset) each; the frame fills them
//!   in ring order, every one full but the last.
//! - Write-back (advanced one-buffer descriptors, the datasheet's write-back format; DD and
//!   EOP as `IXGBE_RXDADV_STAT_DD`/`_EOP` in Linux `ixgbe_type.h`): every descriptor gets DD
//!   and the length of the bytes in its own buffer; only the last gets EOP. The status, errors,
//!   VLAN tag, packet type and RSS hash are those of the frame and are written with the last
//!   descriptor, which is where drivers read them: Linux reads them from the EOP descriptor
//!   (`ixgbe_process_skb_fields` is called with it), DPDK too (`ixgbe_fill_cluster_head_buf`
//!   takes the EOP descriptor's `rxd` and `staterr`). The descriptors before it carry DD, their
//!   length, the VLAN field (the same for the whole frame) and an injected RXE, with qword 0
//!   (packet type, RSS) zero: we found no statement in our sources of what the part writes
//!   there, and no driver reads it, so the model writes nothing a driver could come to rely on.
//! - All or nothing: a frame is placed only when the ring has free descriptors for all of it
//!   (checked, with RDT read again, before any byte is written: `rx_ring.rs`). A frame that does
//!   not fit is not written at all; it is dropped and counted (SRRCTL.DROP_EN: QPRDC; inline
//!   mode always) or waits in the packet buffer (threaded mode without DROP_EN: RNBC), as the
//!   module doc of the model says for a frame that finds no descriptor (the datasheet's
//!   description of SRRCTL.DROP_EN).
//! - Order: every buffer is written first; then the descriptors are written back from the last
//!   to the first, each as a release store of its status dword, so a driver that sees DD on the
//!   frame's first descriptor sees the whole frame. (The part writes back in ring order; a
//!   driver following the datasheet cannot tell the difference, since it must wait for EOP
//!   either way, and the model never shows half a frame, even when a write-back faults: what was
//!   written back of the frame is cleared again and the frame is dropped.)

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use super::engine::RingCursor;
use super::regs::SimRegs;
use super::rx::{Outcome, DD, EOP, RXE};
use super::rx_ring::wb_hi;
use crate::platform::dma::DmaView;

impl SimRegs {
    /// Writes `data` into the `needed` buffers of `chunk` bytes at the head of `ring` (all
    /// free: the caller checked) and writes their descriptors back (module doc).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn place_scattered(
        &self,
        dma: &DmaView<'_>,
        ring: &mut RingCursor,
        data: &[u8],
        (chunk, needed): (usize, usize),
        lo: u64,
        staterr: u32,
        vlan: u16,
    ) -> Outcome {
        let desc = |i: usize| ring.base + (ring.at(i) * 16) as u64;
        // The buffer addresses, kept to restore the descriptors if a write-back faults.
        let mut addrs = Vec::with_capacity(needed);
        for (i, part) in data.chunks(chunk).enumerate() {
            let ok = dma.load_u64(desc(i), Acquire).and_then(|addr| {
                addrs.push(addr);
                dma.write(addr, part)
            });
            if ok.is_err() {
                self.counters.dma_faults.inc();
                return Outcome::Dropped;
            }
        }
        let last = needed - 1;
        for i in (0..needed).rev() {
            let part = if i == last {
                data.len() - chunk * last
            } else {
                chunk
            };
            let (wb_lo, st) = if i == last {
                (lo, staterr | EOP)
            } else {
                (0, DD | (staterr & RXE))
            };
            let d = desc(i);
            let ok = dma
                .store_u64(d, wb_lo, Relaxed)
                .and_then(|_| dma.store_u64(d + 8, wb_hi(st, part, vlan), Release));
            if ok.is_err() {
                self.counters.dma_faults.inc();
                // Take back the write-backs already made: the descriptors read as the driver
                // left them (best effort: they were writable a moment ago).
                for (j, &addr) in addrs.iter().enumerate().skip(i + 1) {
                    let _ = dma.store_u64(desc(j) + 8, 0, Release);
                    let _ = dma.store_u64(desc(j), addr, Relaxed);
                }
                return Outcome::Dropped;
            }
        }
        self.advance(ring, needed);
        Outcome::Placed
    }
}
