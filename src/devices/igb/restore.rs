//! Putting an 82576 port back after a function reset (PCIe error recovery, run by the shell's
//! watch thread: `devices/intel/recovery.rs`).
//!
//! The bring-up's order (`init.rs`, notes 1.2) without the ring allocations: the chip's own
//! reset on top of the function reset (Linux's `igb_io_slot_reset` calls `igb_reset` too),
//! the MAC written back into receive address 0, the multicast table cleared, the VLAN registers
//! from the port's shadow, the strip switch, the link restarted, receive control as the port
//! has it now (promiscuous mode included), interrupt routing and RSS, transmit on, every queue
//! disabled, receive on. The queues then program their own rings (`IntelRx::resync`,
//! `IntelTx::resync`) at their next burst: with every queue's ENABLE clear, RCTL.EN and
//! TCTL.EN move no frame until then (QEMU: `igb_can_receive` and `igb_tx_enabled` check the
//! queue bits).

use crate::devices::intel::irq;
use crate::devices::intel::port::restore_vlan;
use crate::devices::intel::recovery::Restore;
use crate::devices::intel::rss;
use crate::error::Result;
use crate::platform::mmio::Mmio;
use crate::platform::regs::igb::{self as r};

use super::init::{reset_chip, rx_global, setup_link, tctl_on};
use super::queue::{IRQ, RX, TX_RING};
use super::Chip82576;

/// The restore (module doc).
pub(super) fn restore<M: Mmio + ?Sized>(m: &M, p: &Restore<'_, Chip82576>) -> Result<()> {
    reset_chip(m, p.name, p.cfg.reg_timeout)?;

    // The port's MAC back in receive address 0 (the reset reloads the EEPROM's, which is the
    // same on a healthy card; written anyway, as Linux's igb_reset does with igb_rar_set).
    crate::devices::intel::write_mac(m, r::RAL.at(0), r::RAH.at(0), r::rah::AV.bit(), p.mac);
    for i in 0..r::MTA.count() {
        m.write(r::MTA.at(i), 0);
    }
    restore_vlan::<Chip82576, M>(m, p.vlan);
    super::vlan::write_strip(m, *p.strip);
    setup_link(m, p.name, p.cfg)?;
    rx_global(m, p.cfg, p.promiscuous, p.vlan.enabled);

    // Every queue disabled until its owner puts its ring back.
    RX.ring.disable_all(m);
    TX_RING.disable_all(m);
    if let (Some(set), Some(cfg)) = (p.irqs, p.cfg.interrupts) {
        // The queues keep the vectors they had; only the registers are new.
        irq::program(m, &IRQ, set, u32::from(p.cfg.rx_queues), cfg)?;
    }
    if p.cfg.rx_queues > 1 {
        rss::setup(m, &super::init::RSS, p.cfg.rx_queues);
    }
    m.write(r::TCTL, tctl_on());
    m.modify(r::RCTL, 0, r::rctl::EN.bit());
    Ok(())
}
