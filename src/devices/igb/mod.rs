//! The Intel 82576 (igb) driver, written once against [`Bus`].
//!
//! It shares with the 82599 driver ([`crate::devices::ixgbe`]) everything in
//! [`crate::devices::intel`]: the descriptor rings, the port shell ([`IntelPort`], of which
//! [`IgbPort`] is the 82576 instance), queue start/stop, the counter accumulator, the VLAN
//! filter shadow, RSS contents, config checks. What is the 82576's own is [`Chip82576`]'s
//! [`IntelChip`] implementation, here and in:
//!
//! | file | what |
//! |---|---|
//! | `init.rs` | reset, PHY autonegotiation through MDIC, receive/transmit global setup, RSS |
//! | `queue.rs` | [`IgbRx`] / [`IgbTx`]: ring registers, enable, disable in `Drop` |
//! | `vlan.rs` | port-wide strip (CTRL.VME), filter (RCTL.VFE + VFTA), TPID (VET), extended VLAN |
//! | `restore.rs` | the port put back after a function reset (PCIe error recovery) |
//! //!
//! The init sequence is notes 1.2 (Linux/DPDK on real hardware) with the QEMU model's quirks of
//! notes 5.2 and 7 allowed for: the EEPROM auto-read and configuration-done bits that QEMU never
//! sets are waited for with a short bound and only logged; the link stays down after a reset
//! until autonegotiation is restarted through the PHY, so the driver always restarts it.
//!
//! Shutdown is part of the design: every queue disables its own hardware queue in `Drop` before
//! its ring and buffers are freed, and the port's `Drop` disables every queue, resets the device
//! and turns bus mastering off, also while a panic unwinds.

mod init;
pub(crate) mod queue;
mod restore;
mod vlan;

#[cfg(test)]
mod tests;

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
use crate::platform::regs::igb::{self as r};
use crate::platform::regs::{Reg, RegArray, Stats};
use crate::vlan::VlanCaps;

pub use queue::{IgbRx, IgbTx};

/// Largest ring the driver accepts (Linux `IGB_MAX_RXD`/`IGB_MAX_TXD`).
pub const MAX_RING: usize = 4096;
/// Receive queues usable with RSS on the 82576 without virtualisation (Linux uses 8).
pub const MAX_RX_QUEUES: u16 = 8;
/// Transmit queues usable without virtualisation.
pub const MAX_TX_QUEUES: u16 = 8;
/// Largest MTU: Linux's 9216-byte jumbo frame less header, CRC and two VLAN tags.
pub const MAX_MTU: u16 = 9216 - 26;

/// The 82576's limits for the shared checks.
const LIMITS: Limits = Limits {
    family: "igb",
    chip: "82576",
    max_ring: MAX_RING,
    max_mtu: MAX_MTU,
    max_rx_queues: MAX_RX_QUEUES,
    max_tx_queues: MAX_TX_QUEUES,
    // EITR.INTERVAL, bits 14:2, in microseconds.
    max_throttle_us: (1 << 13) - 1,
};

/// The 82576 chip, as the parameter of [`IntelConfig`] and [`IntelPort`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Chip82576;

impl crate::sealed::Sealed for Chip82576 {}

impl Chip for Chip82576 {
    const LIMITS: Limits = LIMITS;
}

/// How to open an 82576 port.
pub type IgbConfig = IntelConfig<Chip82576>;

/// An open 82576 port.
pub type IgbPort<B> = IntelPort<Chip82576, B>;

impl IntelChip for Chip82576 {
    const FAMILY: Family = Family::Igb;
    const STATUS: Reg = r::STATUS;
    const PROMISC: (Reg, u32) = (r::RCTL, r::rctl::UPE.bit() | r::rctl::MPE.bit());
    const VFE: (Reg, u32, u32) = (r::RCTL, r::rctl::VFE.bit(), r::rctl::CFIEN.bit());
    const VFTA: RegArray = r::VFTA;
    const RX_RING: &'static RingRegs = &queue::RX.ring;
    const TX_RING: &'static RingRegs = &queue::TX_RING;
    const RESET: (Reg, u32, &'static str, Duration) =
        (r::CTRL, r::ctrl::RST.bit(), "CTRL.RST", init::RESET_SETTLE);
    const STATS: &'static Stats = &r::STATS;
    /// STATUS.LU, STATUS.SPEED and STATUS.FD (notes 1.1).
    const LINK: (Reg, u32, &'static str) = (r::STATUS, r::status::LU.bit(), "STATUS.LU");
    const IRQ: Option<&'static IrqRegs> = Some(&queue::IRQ);
    type Rx<B: Bus> = IgbRx<B>;
    /// CTRL.VME as last written: the 82576 strips for the whole port.
    type Strip = bool;

    fn strip_state(cfg: &IgbConfig) -> bool {
        cfg.rx_strip
    }

    /// STATUS (notes 1.1): LU b1, FD b0, SPEED b7:6 = 00 10, 01 100, 1x 1000 Mb/s.
    fn decode_link(v: u32) -> LinkStatus {
        let speed = r::status::SPEED.get(v);
        link_status(
            r::status::LU.is_set(v),
            speed,
            [10, 100, 1_000, 1_000],
            r::status::FD.is_set(v),
        )
    }

    fn init<B: Bus>(port: &mut IgbPort<B>, _: ShellOnly) -> Result<()> {
        port.init()
    }

    fn stop<M: Mmio + ?Sized>(m: &M, _name: &str, _: ShellOnly) {
        init::stop(m)
    }

    fn vlan_caps<B: Bus>(port: &IgbPort<B>) -> VlanCaps {
        vlan::caps(port)
    }

    fn set_rx_strip<B: Bus>(port: &mut IgbPort<B>, _queue: u16, on: bool) -> Result<()> {
        port.set_rx_strip_all(on)
    }

    fn write_tpid<M: Mmio + ?Sized>(m: &M, shadow: &VlanShadow) {
        vlan::write_tpid(m, shadow)
    }

    fn intel_rx<B: Bus>(q: &mut IgbRx<B>) -> &mut IntelRx<B> {
        q
    }

    fn restore<M: Mmio + ?Sized>(m: &M, r: &Restore<'_, Self>, _: ShellOnly) -> Result<()> {
        restore::restore(m, r)
    }
}
