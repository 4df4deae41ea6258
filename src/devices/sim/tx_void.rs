//! The transmit engine's quick path for frames into the void (a port with no peer, nothing
//! captured): what the benchmarks' transmitting port does with every frame.
//!
//! The whole walk (`tx.rs`) takes one descriptor at a time through the general decoder: legacy
//! and unknown types logged, TSO and checksum requests carried out (`tx_offload.rs`: a TSE frame
//! leaves as several frames, so it is never counted here), frames of several buffers gathered,
//! lengths checked, each access translated through the ring's window. A frame that goes
//! nowhere needs only its length, whether it is tagged, and its first six bytes (broadcast and
//! multicast counts), and its buffer checked readable whole. A run here takes the ring
//! translated once (`DmaView::ring`) and the buffer pool once (`DmaView::window_around`, from
//! the first buffer), and per descriptor: a context descriptor is kept in its slot; a
//! one-buffer data frame (DEXT, DTYP 0011, EOP, no TSE or POPTS, 12 bytes to `MAX_FRAME`)
//! inside the pool's window is counted as the whole walk counts it (`void_frame`); RS gets DD
//! as there.
//!
//! It stops at the first descriptor that needs more, and the whole walk takes that descriptor
//! (logging, gathering, hanging, dropping or faulting as it always does), then this path is
//! tried again. Nothing a frame's fate depends on is decided differently here.

use std::sync::atomic::Ordering::{Acquire, Release};

use super::engine::{TxQueue, VoidRun};
use super::regs::SimRegs;
use super::tx::{
    Walk, DD, DEXT, DTYP, DTYP_CONTEXT, DTYP_DATA, EOP, MAX_FRAME, POPTS, RS, TSE, VLE,
};
use crate::platform::dma::DmaView;

impl SimRegs {
    /// Counts descriptors from `head` towards `tail` while each is one the void path takes
    /// (module doc); returns where it stopped. `st` must not be inside a frame.
    pub(super) fn void_run<'v, 'a>(
        dma: &'v DmaView<'a>,
        run: &mut VoidRun<'v, 'a>,
        st: &mut TxQueue,
        (mut head, tail): (usize, usize),
        head_wb: bool,
        w: &mut Walk<'_>,
    ) -> usize {
        let n = run.ring.len();
        while head != tail {
            let addr = run.ring.load_u64(head, 0, Acquire);
            let hi = run.ring.load_u64(head, 8, Acquire);
            let (cmd, olinfo) = (hi as u32, (hi >> 32) as u32);
            if cmd & (DEXT | DTYP) == DEXT | DTYP_CONTEXT {
                Self::keep_context(st, addr, cmd, olinfo);
            } else {
                let len = (cmd & 0xffff) as usize;
                let simple = cmd & (DEXT | DTYP | EOP | TSE) == DEXT | DTYP_DATA | EOP
                    && olinfo & POPTS == 0
                    && (12..=MAX_FRAME).contains(&len);
                if !simple {
                    break;
                }
                let pool = run.pool.get_or_insert_with(|| dma.window_around(addr));
                let mut dst = [0u8; 6];
                let Some(k) = pool.read_prefix_inside(addr, len, &mut dst) else {
                    break;
                };
                Self::count_void(len, cmd & VLE != 0, &dst[..k], w);
            }
            if cmd & RS != 0 && !head_wb {
                run.ring.store_u32(head, 12, olinfo | DD, Release);
            }
            head = if head + 1 == n { 0 } else { head + 1 };
        }
        head
    }
}
