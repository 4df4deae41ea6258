//! Putting an 82599 port back after a function reset (PCIe error recovery, run by the shell's
//! watch thread: `devices/intel/recovery.rs`).
//!
//! The bring-up's order (`init.rs`, notes 1.4; Linux's `ixgbe_io_slot_reset` and
//! `ixgbe_io_resume` go through the same reset and `ixgbe_up`) without the ring allocations:
//! the global reset, the MAC written back, the link, receive and transmit global setup as the
//! port has it now (promiscuous mode, the VLAN shadow), interrupt routing and RSS, every queue
//! disabled, transmit DMA on, receive on through the security-block workaround, the port
//! claimed from firmware again (DRV_LOAD). The queues then program their own rings, each with
//! its VLAN strip bit (RXDCTL.VME), at their next burst.

use crate::devices::intel::irq;
use crate::devices::intel::port::restore_vlan;
use crate::devices::intel::recovery::Restore;
use crate::devices::intel::rss;
use crate::error::Result;
use crate::platform::mmio::Mmio;
use crate::platform::regs::ixgbe::{self as r};

use super::init::{
    reset_chip, rx_dma, rx_global, set_rx_enable, setup_link, sfp_part, tx_global, RSS,
};
use super::queue::{IRQ, RX, TX_RING};
use super::Chip82599;

/// The restore (module doc).
pub(super) fn restore<M: Mmio + ?Sized>(m: &M, p: &Restore<'_, Chip82599>) -> Result<()> {
    reset_chip(m, p.name, p.cfg.reg_timeout)?;
    crate::devices::intel::write_mac(m, r::RAL.at(0), r::RAH.at(0), r::rah::AV.bit(), p.mac);
    setup_link(m, p.name, p.cfg.loopback, sfp_part(p.pci_id.1))?;
    rx_global(m, p.cfg, p.promiscuous);
    restore_vlan::<Chip82599, M>(m, p.vlan);
    RX.ring.disable_all(m);
    TX_RING.disable_all(m);
    rx_dma(m, p.cfg.rx_queues);
    if p.cfg.rx_queues > 1 {
        rss::setup(m, &RSS, p.cfg.rx_queues);
    }
    if let (Some(set), Some(cfg)) = (p.irqs, p.cfg.interrupts) {
        irq::program(m, &IRQ, set, u32::from(p.cfg.rx_queues), cfg)?;
    }
    tx_global(m);
    m.modify(r::DMATXCTL, 0, r::dmatxctl::TE.bit());
    set_rx_enable(m, p.name, true)?;
    m.modify(r::CTRL_EXT, 0, r::ctrl_ext::DRV_LOAD.bit());
    Ok(())
}
