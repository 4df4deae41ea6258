//! Interrupt mode of an Intel port: one MSI-X vector per receive queue, masked while the queue
//! is polled, unmasked only while it sleeps.
//!
//! The registers and their meaning (datasheet 82576 section 7.3, "Interrupts"; Linux igb
//! `igb_configure_msix`/`igb_assign_vector`; QEMU `hw/net/igb_core.c`, `igb_raise_interrupts`):
//! - GPIE.MSIX_MODE: queue causes go to EICR one bit per vector, the vector IVAR names;
//! - IVAR: receive queue q -> vector v, with a valid bit;
//! - EICR: a vector's cause, set by every frame written back on a queue of that vector, whether
//!   masked or not; cleared by writing 1 (and by the message itself where EIAC has the bit);
//! - EIMS / EIMC: unmask / mask. The device sends vector v's message when EICR.v & EIMS.v
//!   becomes set, by a new cause or by unmasking a pending one (QEMU: `raised_ecauses` in
//!   `igb_raise_interrupts`, which EIMS writes go through too);
//! - `EITR[v]`: the least interval between two messages of vector v (QEMU postpones the message
//!   while the interval's timer runs);
//! - EICS: sets EICR bits by hand, for the self-test;
//! - GPIE.EIAME with EIAM (82576) / EIAM_EX (82599): a vector's EIMS bit is cleared when its
//!   message is sent (auto-mask), so that a woken queue is masked before the driver's EIMC,
//!   and a vector interrupts once per arming however fast frames come, throttled or not.
//!   Linux sets both (igb `igb_configure_msix` GPIE.EIAME and `igb_irq_enable` EIAM; ixgbe
//!   `ixgbe_setup_gpie` GPIE.EIAME and EIAM_EX(0..1) = all ones: "use EIAM to auto-mask when
//!   MSI-X interrupt is asserted"), as DPDK does. QEMU's igb does not model auto-mask
//!   (`igb_msix_notify` clears EICR by EIAC only), so the driver still masks a woken vector
//!   itself (EIMC in `disarm`): on QEMU that write is what masks it, on a card it is
//!   redundant. That a card's auto-mask works as the datasheet says only a card can confirm.
//!
//! So a queue sleeps in three steps (`QueueIrq::arm`): clear its stale cause (frames the polling
//! loop already took set it while masked), unmask, then look at the ring once more. A frame
//! that landed between the last empty poll and the unmask is in the ring (the look finds it);
//! one that lands after the unmask sends the message. Nothing is lost and nobody sleeps on a
//! frame that is already there: the race every interrupt-driven driver closes this way (NAPI's
//! `napi_complete_done` then re-check, DPDK l3fwd-power's re-poll after `rx_intr_enable`).
//!
//! The 82599 has the same scheme with its own layout (`IVAR[q >> 1]` with byte 0 or 2, EITR in
//! 2 us units, GPIE.PBA_SUPPORT; Linux `ixgbe_set_ivar`, `ixgbe_write_eitr`), and the software
//! 82599 models it (`devices/sim/irq.rs`), so the host tests run this code. That QEMU models
//! the 82576's registers is what the on-device test proves; the order of EICR and EIMS effects
//! on a real card is the datasheets' word until a card confirms it.

use std::sync::Arc;

use super::config::IrqConfig;
use crate::error::{Error, Result};
use crate::platform::irq::{Interrupt, InterruptSet};
use crate::platform::mmio::Mmio;
use crate::platform::regs::{Field, Reg, RegArray};

/// A chip's interrupt registers and how its IVAR and EITR encode a setting.
#[derive(Debug)]
pub struct IrqRegs {
    /// Extended interrupt cause read (write 1 to clear).
    pub eicr: Reg,
    /// Extended interrupt cause set.
    pub eics: Reg,
    /// Extended interrupt mask set.
    pub eims: Reg,
    /// Extended interrupt mask clear.
    pub eimc: Reg,
    /// Extended interrupt auto clear.
    pub eiac: Reg,
    /// Extended interrupt auto mask for the queue vectors (EIAM on the 82576, EIAM_EX(0) on
    /// the 82599), effective with GPIE.EIAME.
    pub eiam: Reg,
    /// General purpose interrupt enable, and the bits MSI-X mode needs in it.
    pub gpie: (Reg, u32),
    /// The throttle registers, one per vector.
    pub eitr: RegArray,
    /// EITR's value for an interval of `us` microseconds.
    pub eitr_value: fn(us: u16) -> u32,
    /// Vectors this mode can use: one EICR/EIMS bit each.
    pub max_vectors: u16,
    /// The IVAR register, the bits of its entry, and the entry's value that route receive
    /// queue `queue` to vector `vector` (valid bit included).
    pub ivar_rx: fn(queue: u32, vector: u32) -> (Reg, u32, u32),
    /// A register whose read has no side effect (STATUS): read after the unmask, it makes sure
    /// the posted EICR and EIMS writes have reached the device before the ring is looked at.
    pub flush: Reg,
}

/// An IVAR entry: register `reg`, its vector field `vec` and valid bit `valid`, set to
/// `vector` (what each chip's `ivar_rx` returns once it has picked the entry's fields).
pub(crate) fn ivar_entry(reg: Reg, vec: Field, valid: Field, vector: u32) -> (Reg, u32, u32) {
    (reg, vec.mask() | valid.bit(), vec.val(vector) | valid.bit())
}

/// One receive queue's vector: its eventfd and its bit in EICR, EIMS and EIMC.
pub(crate) struct QueueIrq {
    irq: Interrupt,
    bit: u32,
    regs: &'static IrqRegs,
    /// The routing of every vector of the port, kept while any queue may sleep on one.
    _set: Arc<InterruptSet>,
}

impl QueueIrq {
    /// The eventfd the queue sleeps on.
    pub(crate) fn interrupt(&self) -> &Interrupt {
        &self.irq
    }

    /// Clears the vector's stale cause and signals, and unmasks it: from now on a frame on the
    /// queue sends its message. The read at the end waits for both writes to reach the device
    /// (PCIe writes are posted: without it, a late EICR clear could wipe the cause of a frame
    /// written back after the caller's look at the ring). The caller looks at the ring right
    /// after.
    pub(crate) fn arm<M: Mmio + ?Sized>(&self, m: &M) -> Result<()> {
        // A signal left from before (a message that raced the last sleep's end) would end the
        // next sleep at once.
        self.irq.take()?;
        m.write(self.regs.eicr, self.bit);
        m.write(self.regs.eims, self.bit);
        // Linux's `readl`: the read, then `dma_rmb`, so the caller's look at the ring is not
        // satisfied before it (on arm64 a load of DMA memory may otherwise pass the MMIO read).
        m.read_ordered(self.regs.flush);
        Ok(())
    }

    /// Masks the vector again (the queue is polled).
    pub(crate) fn disarm<M: Mmio + ?Sized>(&self, m: &M) {
        m.write(self.regs.eimc, self.bit);
    }

    /// Sets the vector's cause by hand (EICS): with the vector unmasked, the device sends its
    /// message as if a frame had arrived. For the self-test.
    pub(crate) fn trigger<M: Mmio + ?Sized>(&self, m: &M) {
        m.write(self.regs.eics, self.bit);
    }
}

/// Programs MSI-X mode for `queues` receive queues, queue q on vector q, every vector masked
/// and throttled as `cfg` says, and returns each queue's [`QueueIrq`] (vector q of `set`).
///
/// Causes are auto-cleared (EIAC) and their vector auto-masked (EIAM with GPIE.EIAME) when
/// their message goes out, so a vector interrupts once per arming, on the next frame after the
/// queue re-armed it; the "other" causes (link) get no vector. A throttle of 0 is taken as the
/// least interval EITR holds (1 us on the 82576, 2 us on the 82599), as Linux's igb writes an
/// interval of 0 as 0x4 (`igb_write_itr`: `if (!itr_val) itr_val = 0x4`).
pub(crate) fn program<M: Mmio + ?Sized>(
    m: &M,
    regs: &'static IrqRegs,
    set: &Arc<InterruptSet>,
    queues: u32,
    cfg: IrqConfig,
) -> Result<Vec<QueueIrq>> {
    let vectors = set.vectors();
    let usable = |i: &Interrupt| i.vector() < regs.max_vectors;
    if vectors.len() < queues as usize || !vectors.iter().all(usable) {
        return Err(Error::NotSupported {
            device: "the port's bus".into(),
            what: format!("interrupt mode with {queues} receive queues"),
            why: format!(
                "the bus routed vectors {:?}, and each queue needs its own below {}; fix the Bus's enable_interrupts",
                vectors.iter().map(Interrupt::vector).collect::<Vec<_>>(),
                regs.max_vectors
            ),
        });
    }
    let all = set
        .vectors()
        .iter()
        .take(queues as usize)
        .fold(0u32, |a, i| a | 1 << i.vector());
    m.write(regs.eimc, all);
    m.modify(regs.gpie.0, 0, regs.gpie.1);
    let mut out = Vec::new();
    for (q, irq) in (0..queues).zip(set.vectors()) {
        let v = u32::from(irq.vector());
        let (ivar, entry, value) = (regs.ivar_rx)(q, v);
        m.modify(ivar, entry, value);
        m.write(regs.eitr.at(v), (regs.eitr_value)(cfg.throttle_us.max(1)));
        out.push(QueueIrq {
            irq: irq.clone(),
            bit: 1 << v,
            regs,
            _set: set.clone(),
        });
    }
    m.modify(regs.eiac, 0, all);
    m.modify(regs.eiam, 0, all);
    // Causes raised while the port came up (and before this) are stale.
    m.write(regs.eicr, all);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::mmio::{Access, RecordingMmio};
    use crate::platform::regs::igb as r;

    #[test]
    fn two_queues_get_two_masked_throttled_vectors_and_arm_in_order() {
        let m = RecordingMmio::new(0x20000);
        let set = Arc::new(InterruptSet::new(
            vec![Interrupt::new(0).unwrap(), Interrupt::new(1).unwrap()],
            (),
        ));
        let irqs = program(
            &m,
            &crate::devices::igb::queue::IRQ,
            &set,
            2,
            IrqConfig { throttle_us: 50 },
        )
        .unwrap();
        assert_eq!(irqs.len(), 2);
        assert!(r::gpie::MSIX_MODE.is_set(m.read(r::GPIE)));
        assert_eq!(m.read(r::EIAC), 0b11);
        // Auto-mask: GPIE.EIAME and the queue vectors in EIAM (Linux igb_configure_msix and
        // igb_irq_enable), so a vector that fires is masked until the queue re-arms it.
        assert!(r::gpie::EIAME.is_set(m.read(r::GPIE)));
        assert_eq!(m.read(r::EIAM), 0b11);
        // Queue 0 -> vector 0 in IVAR0's low byte, queue 1 -> vector 1 in IVAR1's.
        assert_eq!(m.read(r::IVAR.at(0)) & 0xff, 0x80);
        assert_eq!(m.read(r::IVAR.at(1)) & 0xff, 0x81);
        assert_eq!(r::eitr::INTERVAL.get(m.read(r::EITR.at(1))), 50);
        m.clear_log();
        irqs[1].interrupt().trigger().unwrap(); // a stale signal
        irqs[1].arm(&m).unwrap();
        assert_eq!(irqs[1].interrupt().take().unwrap(), 0, "arming drained it");
        irqs[1].disarm(&m);
        irqs[1].trigger(&m);
        assert_eq!(
            m.log(),
            [
                Access::Write {
                    offset: r::EICR.offset(),
                    value: 0b10
                },
                Access::Write {
                    offset: r::EIMS.offset(),
                    value: 0b10
                },
                Access::Read {
                    offset: r::STATUS.offset(),
                    value: 0
                },
                Access::Write {
                    offset: r::EIMC.offset(),
                    value: 0b10
                },
                Access::Write {
                    offset: r::EICS.offset(),
                    value: 0b10
                }
            ]
        );
    }

    /// A throttle of 0 is floored to the least interval, as Linux's igb does
    /// (`igb_write_itr`: an interval of 0 is written as 0x4, 1 us); on the 82599 one 2 us
    /// unit. The 82599 auto-masks through EIAM_EX(0) (Linux `ixgbe_setup_gpie`).
    #[test]
    fn a_zero_throttle_is_floored_and_both_chips_auto_mask() {
        use crate::platform::regs::ixgbe as x;
        let set = Arc::new(InterruptSet::new(vec![Interrupt::new(0).unwrap()], ()));
        let zero = IrqConfig { throttle_us: 0 };
        let m = RecordingMmio::new(0x20000);
        program(&m, &crate::devices::igb::queue::IRQ, &set, 1, zero).unwrap();
        assert_eq!(r::eitr::INTERVAL.get(m.read(r::EITR.at(0))), 1);
        let m = RecordingMmio::new(0x20000);
        program(&m, &crate::devices::ixgbe::queue::IRQ, &set, 1, zero).unwrap();
        assert_eq!(x::eitr::ITR_INTERVAL.get(m.read(x::EITR.at(0))), 1);
        assert!(x::gpie::EIAME.is_set(m.read(x::GPIE)));
        assert_eq!(m.read(x::EIAM_EX.at(0)), 1);
    }

    #[test]
    fn a_bus_that_routes_too_few_or_too_high_vectors_is_refused() {
        let m = RecordingMmio::new(0x20000);
        let one = Arc::new(InterruptSet::new(vec![Interrupt::new(0).unwrap()], ()));
        let cfg = IrqConfig::default();
        let irq = &crate::devices::igb::queue::IRQ;
        assert!(
            program(&m, irq, &one, 2, cfg).is_err(),
            "two queues, one vector"
        );
        let high = Arc::new(InterruptSet::new(vec![Interrupt::new(40).unwrap()], ()));
        assert!(program(&m, irq, &high, 1, cfg).is_err(), "vector 40");
        assert!(program(&m, irq, &one, 1, cfg).is_ok());
    }
}
