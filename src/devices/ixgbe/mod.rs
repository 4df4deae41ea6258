//! The Intel 82599 (ixgbe) driver, written once against [`Bus`].
//!
//! The same code drives a real card through VFIO ([`crate::platform::bus::PciBus`]) and the software 82599
//! used by the host tests. [`IxgbePort`] is the Intel port shell ([`IntelPort`]) with [`Chip82599`] filled in; what
//! is the 82599's own is [`Chip82599`]'s [`IntelChip`] implementation, here and in the files
//! below. It is deliberately small and follows the datasheet's order (via the
//! summary in `docs/intel-nics.md` 1.4, which is ixy's minimal sequence):
//!
//! | file | what |
//! |---|---|
//! | `init.rs` | reset, link, receive/transmit global setup, RSS, in datasheet order |
//! | `queue.rs` | [`IxgbeRx`] / [`IxgbeTx`]: ring registers, enable/disable, the VLAN strip switch |
//! | `vlan.rs` | the VLAN registers: per-queue strip requests, filter enable, TPID, extended (double) VLAN |
//! //! | `swfw.rs` | the software/firmware semaphore around AUTOC writes |
//!
//! Shutdown is part of the design, not an afterthought: every queue disables its own hardware
//! queue in `Drop` (a bounded poll of RXDCTL/TXDCTL.ENABLE) before its ring and buffers are freed,
//! and the port's `Drop` disables every queue, resets the device and turns bus mastering off.
//! `Drop` also runs while a panic unwinds, so a crashed program never leaves a device writing
//! into freed memory.

mod init;
pub(crate) mod queue;
mod restore;
mod swfw;
mod vlan;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_offload;

use std::sync::Arc;
use std::time::Duration;

use crate::device::LinkStatus;
use crate::devices::ids::Family;
use crate::devices::intel::config::{Chip, IntelConfig, Limits};
use crate::devices::intel::irq::IrqRegs;
use crate::devices::intel::port::{link_status, IntelChip, IntelPort, ShellOnly};
use crate::devices::intel::queue::RingRegs;
use crate::devices::intel::recovery::Restore;
use crate::devices::intel::rxq::IntelRx;
use crate::devices::intel::vlan::VlanShadow;
use crate::error::Result;
use crate::platform::bus::Bus;
use crate::platform::mmio::Mmio;
use crate::platform::regs::ixgbe::{self as r};
use crate::platform::regs::{Reg, RegArray, Stats};
use crate::vlan::VlanCaps;

pub use queue::{IxgbeRx, IxgbeTx, StripCtl};

/// Largest ring the driver accepts (Linux `IXGBE_MAX_RXD`/`IXGBE_MAX_TXD`).
pub const MAX_RING: usize = 8192;
/// Receive queues usable with RSS (the redirection table holds 4-bit queue numbers).
pub const MAX_RX_QUEUES: u16 = 16;
/// Transmit queues usable without DCB or virtualisation.
pub const MAX_TX_QUEUES: u16 = 64;
/// Largest MTU: the 82599's jumbo limit as Linux uses it (9728-byte frames, less header and CRC).
pub const MAX_MTU: u16 = 9710;

/// The 82599 chip, as the parameter of [`IntelConfig`] and [`IntelPort`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Chip82599;

impl crate::sealed::Sealed for Chip82599 {}

impl Chip for Chip82599 {
    const LIMITS: Limits = LIMITS;
}

/// How to open an 82599 port.
pub type IxgbeConfig = IntelConfig<Chip82599>;

/// An open 82599 port.
pub type IxgbePort<B> = IntelPort<Chip82599, B>;

/// The 82599's limits for the shared checks.
const LIMITS: Limits = Limits {
    family: "ixgbe",
    chip: "82599",
    max_ring: MAX_RING,
    max_mtu: MAX_MTU,
    max_rx_queues: MAX_RX_QUEUES,
    max_tx_queues: MAX_TX_QUEUES,
    // EITR.ITR_INTERVAL, bits 11:3, in units of 2 us.
    max_throttle_us: 1022,
};

impl IntelChip for Chip82599 {
    const FAMILY: Family = Family::Ixgbe;
    const STATUS: Reg = r::STATUS;
    const PROMISC: (Reg, u32) = (r::FCTRL, r::fctrl::UPE.bit() | r::fctrl::MPE.bit());
    const VFE: (Reg, u32, u32) = (r::VLNCTRL, r::vlnctrl::VFE.bit(), r::vlnctrl::CFIEN.bit());
    const VFTA: RegArray = r::VFTA;
    const RX_RING: &'static RingRegs = &queue::RX.ring;
    const TX_RING: &'static RingRegs = &queue::TX_RING;
    const RESET: (Reg, u32, &'static str, Duration) = (
        r::CTRL,
        r::ctrl::RST.bit() | r::ctrl::LNK_RST.bit(),
        "CTRL.RST|LNK_RST",
        init::RESET_SETTLE,
    );
    const STATS: &'static Stats = &r::STATS;
    /// LINKS.UP and LINKS.LINK_SPEED (datasheet 8.2.3.22.20 via notes 1.3).
    const LINK: (Reg, u32, &'static str) = (r::LINKS, r::links::UP.bit(), "LINKS.UP");
    const IRQ: Option<&'static IrqRegs> = Some(&queue::IRQ);
    type Rx<B: Bus> = IxgbeRx<B>;
    /// One per receive queue, shared with the queue after `take_queues`.
    type Strip = Vec<Arc<StripCtl>>;

    fn strip_state(cfg: &IxgbeConfig) -> Vec<Arc<StripCtl>> {
        (0..cfg.rx_queues)
            .map(|_| Arc::new(StripCtl::new(cfg.rx_strip)))
            .collect()
    }

    /// LINKS (notes 1.3): UP b30, LINK_SPEED b29:28 = 01 100M, 10 1G, 11 10G; always full
    /// duplex.
    fn decode_link(v: u32) -> LinkStatus {
        let speed = r::links::LINK_SPEED.get(v);
        link_status(r::links::UP.is_set(v), speed, [0, 100, 1_000, 10_000], true)
    }

    fn init<B: Bus>(port: &mut IxgbePort<B>, _: ShellOnly) -> Result<()> {
        port.init()
    }

    fn stop<M: Mmio + ?Sized>(m: &M, name: &str, _: ShellOnly) {
        init::stop(m, name)
    }

    fn vlan_caps<B: Bus>(port: &IxgbePort<B>) -> VlanCaps {
        vlan::caps(port)
    }

    fn set_rx_strip<B: Bus>(port: &mut IxgbePort<B>, queue: u16, on: bool) -> Result<()> {
        port.set_rx_strip(queue, on)
    }

    fn write_tpid<M: Mmio + ?Sized>(m: &M, shadow: &VlanShadow) {
        vlan::write_tpid(m, shadow)
    }

    fn intel_rx<B: Bus>(q: &mut IxgbeRx<B>) -> &mut IntelRx<B> {
        q.intel()
    }

    fn restore<M: Mmio + ?Sized>(m: &M, r: &Restore<'_, Self>, _: ShellOnly) -> Result<()> {
        restore::restore(m, r)
    }
}
