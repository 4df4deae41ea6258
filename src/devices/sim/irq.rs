//! Interrupt delivery of the software 82599, so that the ixgbe driver's interrupt mode runs in
//! `sim:N` unchanged.
//!
//! What is modelled (82599 datasheet 7.3 "Interrupts" as Linux's `ixgbe_configure_msix` and
//! DPDK's `ixgbe_configure_msix` program it, and as QEMU models the same scheme for the 82576 in
//! `igb_raise_interrupts`):
//! - with GPIE.MSIX_MODE set, a frame written back on receive queue q sets EICR bit v, where v
//!   is the queue's IVAR entry (IVAR[q >> 1], byte 0 for even queues, byte 2 for odd ones, with
//!   its valid bit); vectors 0-15 only (the EICR queue bits; 16-63 would need EIMS_EX);
//! - a vector whose EICR and EIMS bits are both set sends its message: the eventfd that
//!   [`Bus::enable_interrupts`](crate::platform::bus::Bus::enable_interrupts) routed it to is
//!   signalled, and the EICR bit is cleared if EIAC has it. A cause raised while masked waits
//!   in EICR; unmasking it (EIMS) sends the message then. EICS sets causes by hand;
//! - EITR[v].ITR_INTERVAL (2 us units): a message within the interval after the vector's last
//!   one is postponed, and the device thread sends it when the interval has passed (threaded
//!   mode). Inline, with no thread to send it later, messages go out at once: a postponed one
//!   could otherwise never be sent while the driver sleeps;
//! - auto-mask: with GPIE.EIAME, a message clears its vector's EIMS bit when EIAM_EX(0) has it
//!   (the register Linux's `ixgbe_setup_gpie` sets for the 82599 in MSI-X mode), so the vector
//!   sends nothing more until it is unmasked again.
//!
//! Not modelled: auto-mask through EIAM (0x890, what Linux uses on the 82598 and outside MSI-X
//! mode), the "other" causes' vector (IVAR_MISC; LSC stays in EICR only), transmit queue
//! causes, MSI and INTx. The model's messages cost a write to an
//! eventfd; a card's cost an MSI-X write through the IOMMU's interrupt remapping.

use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};

use super::msix::VECTORS;
use super::regs::SimRegs;
use crate::platform::irq::Interrupt;
use crate::platform::regs::ixgbe as r;

impl SimRegs {
    /// A frame was written back on receive queue `q` (its RDH moved): its vector's cause, and
    /// the message if the vector is unmasked. One relaxed load when interrupts are not routed.
    #[inline]
    pub(super) fn rx_cause(&self, q: usize) {
        if self.irq.on.load(Relaxed) {
            self.rx_cause_routed(q);
        }
    }

    fn rx_cause_routed(&self, q: usize) {
        if !r::gpie::MSIX_MODE.is_set(self.get(r::GPIE)) {
            return;
        }
        let ivar = self.get(r::IVAR.at((q >> 1) as u32));
        let (vec, valid) = if q & 1 == 0 {
            (
                r::ivar::RX_EVEN_VEC.get(ivar),
                r::ivar::RX_EVEN_VALID.is_set(ivar),
            )
        } else {
            (
                r::ivar::RX_ODD_VEC.get(ivar),
                r::ivar::RX_ODD_VALID.is_set(ivar),
            )
        };
        if valid && (vec as usize) < VECTORS {
            self.raise_cause(1 << vec);
            self.send_due();
        }
    }

    /// Sets EICR bits (a frame, or EICS).
    pub(super) fn raise_cause(&self, bits: u32) {
        self.word_fetch_or(r::EICR.offset(), bits);
    }

    /// Sends the message of every vector whose cause is set and unmasked, but for those still
    /// in their throttle interval (threaded mode): they are marked pending for the device
    /// thread ([`SimRegs::irq_poll`]). Returns whether a message was sent.
    ///
    /// Called after every change that can make a message due: a cause set (a frame, EICS) by
    /// one thread, a mask cleared (EIMS) by another. Each sets its bit first and decides here,
    /// under the routing's lock, so the later of two decisions sees both bits: no message is
    /// lost between them (nor sent twice for one cause).
    pub(super) fn send_due(&self) -> bool {
        if !self.irq.on.load(Acquire) {
            return false;
        }
        let fds = self.irq.fds();
        let due = self.get(r::EICR) & self.get(r::EIMS) & ((1 << VECTORS) - 1);
        // A postponed message whose vector was masked (or its cause cleared) meanwhile is no
        // longer owed: the device thread need not keep watching for it.
        self.irq.pending.fetch_and(due, AcqRel);
        if due == 0 {
            return false;
        }
        let throttle = !self.inline.load(Relaxed);
        let now = self.irq.now_ns();
        let eiac = self.get(r::EIAC);
        let eiam = if r::gpie::EIAME.is_set(self.get(r::GPIE)) {
            self.get(r::EIAM_EX.at(0))
        } else {
            0
        };
        let mut sent = false;
        let mut bits = due;
        while bits != 0 {
            let v = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let bit = 1u32 << v;
            let interval_ns =
                u64::from(r::eitr::ITR_INTERVAL.get(self.get(r::EITR.at(v as u32)))) * 2_000;
            let last = self.irq.last[v].load(Relaxed);
            if throttle && last != 0 && now.saturating_sub(last) < interval_ns {
                self.irq.pending.fetch_or(bit, AcqRel);
                continue;
            }
            self.irq.pending.fetch_and(!bit, AcqRel);
            self.irq.last[v].store(now, Relaxed);
            if eiac & bit != 0 {
                self.word_fetch_and(r::EICR.offset(), !bit);
            }
            if eiam & bit != 0 {
                self.word_fetch_and(r::EIMS.offset(), !bit);
            }
            if let Some(fd) = fds.0.get(v) {
                // Counted first: a woken waiter reads the counter already raised.
                self.counters.interrupts.inc();
                if let Err(e) = fd.trigger() {
                    tracing::warn!(port = %self.name, vector = v, "the model could not signal its interrupt eventfd: {e}");
                }
                sent = true;
            }
        }
        sent
    }

    /// The device thread's turn: messages whose throttle interval has ended. A message still
    /// waiting counts as work, so that the thread does not back off (up to 1 ms) meanwhile
    /// and send it late.
    pub(super) fn irq_poll(&self) -> bool {
        if self.irq.pending.load(Relaxed) == 0 {
            return false;
        }
        self.send_due();
        true
    }

    /// Routes vectors 0 to n - 1 to `fds` (the bus's `enable_interrupts`); the generation to
    /// take it down with.
    pub(super) fn route_interrupts(&self, fds: Vec<Interrupt>) -> u64 {
        self.irq.route(fds)
    }

    /// Takes routing `generation` down (a newer one stays).
    pub(super) fn unroute_interrupts(&self, generation: u64) {
        self.irq.unroute(generation);
    }
}
