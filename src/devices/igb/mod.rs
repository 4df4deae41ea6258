//! The Intel 82576 (igb) driver, written once against [`Bus`].
//!
//! It follows the same design as the 82599 driver ([`crate::devices::ixgbe`]) and shares with it the
//! descriptor rings ([`crate::devices::intel::ring`]) and everything in [`crate::devices::intel`] (queue start/stop, the
//! counter accumulator, the VLAN filter shadow, RSS contents, config checks). What is the
//! 82576's own:
//!
//! | file | what |
//! |---|---|
//! | `init.rs` | reset, PHY autonegotiation through MDIC, receive/transmit global setup, RSS |
//! | `queue.rs` | [`IgbRx`] / [`IgbTx`]: ring registers, enable, disable in `Drop` |
//! | `vlan.rs` | port-wide strip (CTRL.VME), filter (RCTL.VFE + VFTA), TPID (VET), extended VLAN |
//! | `stats.rs` | the 82576's counter table |
//!
//! The init sequence is notes 1.2 (Linux/DPDK on real hardware) with the QEMU model's quirks of
//! notes 5.2 and 7 allowed for: the EEPROM auto-read and configuration-done bits that QEMU never
//! sets are waited for with a short bound and only logged; the link stays down after a reset
//! until autonegotiation is restarted through the PHY, so the driver always restarts it.
//!
//! Shutdown is part of the design: every queue disables its own hardware queue in `Drop` before
//! its ring and buffers are freed, and the port's `Drop` disables every queue, resets the device
//! and turns bus mastering off, also while a panic unwinds.

mod init;
mod queue;
mod stats;
mod vlan;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use crate::device::{LinkStatus, MacAddr, Port, PortInfo, PortStats, QueueSet};
use crate::devices::ids::{self, Family};
use crate::devices::intel::config::{Chip, IntelConfig, Limits};
use crate::devices::intel::VlanFilter;
use crate::error::{Error, Result};
use crate::platform::bus::Bus;
use crate::platform::mmio::Mmio;
use crate::platform::regs::igb::{self as r};

pub use queue::{IgbRx, IgbTx};

use stats::HwStats;

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
};

/// The 82576 chip, as the parameter of [`IntelConfig`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Chip82576;

impl Chip for Chip82576 {
    const LIMITS: Limits = LIMITS;
}

/// How to open an 82576 port.
pub type IgbConfig = IntelConfig<Chip82576>;

/// An open 82576 port.
pub struct IgbPort<B: Bus> {
    bus: B,
    regs: Arc<B::Mmio>,
    name: Arc<str>,
    model: &'static str,
    cfg: IgbConfig,
    mac: MacAddr,
    vlan: VlanFilter,
    /// CTRL.VME as last written (port-wide strip).
    strip: bool,
    /// The queues until `take_queues` hands them out.
    rx: Vec<IgbRx<B>>,
    tx: Vec<IgbTx<B>>,
    taken: bool,
    stats: HwStats,
}

impl<B: Bus> IgbPort<B> {
    /// Opens the 82576 behind `bus`: resets it and brings it up as `cfg` says.
    ///
    /// Refuses devices that are not 82576s ([`Error::UnsupportedDevice`]). A link that stays
    /// down for `cfg.link_timeout` is logged and reported by [`Port::link`], not an error.
    pub fn open(bus: B, cfg: IgbConfig) -> Result<Self> {
        let (vendor, device) = bus.pci_id();
        let model = match ids::lookup(vendor, device) {
            Some((Family::Igb, model)) => model,
            _ => {
                return Err(Error::UnsupportedDevice {
                    addr: bus.name().to_string(),
                    vendor,
                    device,
                    supported: ids::KNOWN
                        .iter()
                        .filter(|k| k.2 == Family::Igb)
                        .map(|k| format!("{:04x}:{:04x}", k.0, k.1))
                        .collect::<Vec<_>>()
                        .join(", ")
                        + " (the igb driver)",
                });
            }
        };
        cfg.check()?;
        let regs = bus.regs().clone();
        let name: Arc<str> = bus.name().into();
        let vlan = VlanFilter::from_config(cfg.tpid, &cfg.vlans, cfg.vlan_filter)?;
        let strip = cfg.rx_strip;
        // From here on the port exists, so an error or a panic below runs its `Drop`: queues
        // disabled, device reset, bus mastering off, before any ring memory is freed.
        let mut port = IgbPort {
            bus,
            regs,
            name,
            model,
            cfg,
            mac: MacAddr::default(),
            vlan,
            strip,
            rx: Vec::new(),
            tx: Vec::new(),
            taken: false,
            stats: HwStats::default(),
        };
        port.init()?;
        Ok(port)
    }

    /// The port's MAC address (RAL0/RAH0 as loaded from the EEPROM).
    pub fn mac(&self) -> MacAddr {
        self.mac
    }

    /// The configuration the port was opened with.
    pub fn config(&self) -> &IgbConfig {
        &self.cfg
    }

    /// The bus the port sits on.
    pub fn bus(&self) -> &B {
        &self.bus
    }

    /// Unicast and multicast promiscuous mode (RCTL.UPE|MPE); broadcast is always accepted.
    pub fn set_promiscuous(&mut self, on: bool) -> Result<()> {
        let bits = r::rctl::UPE.bit() | r::rctl::MPE.bit();
        if on {
            self.regs.modify(r::RCTL, 0, bits);
        } else {
            self.regs.modify(r::RCTL, bits, 0);
        }
        self.cfg.promiscuous = on;
        self.alive()
    }

    /// `Err(DeviceGone)` if the device answers all-ones (surprise removal).
    fn alive(&self) -> Result<()> {
        if self.regs.read(r::STATUS) == u32::MAX {
            return Err(Error::DeviceGone {
                device: self.name.to_string(),
            });
        }
        Ok(())
    }
}

impl<B: Bus> Port for IgbPort<B> {
    type Rx = IgbRx<B>;
    type Tx = IgbTx<B>;

    fn info(&self) -> PortInfo {
        PortInfo {
            name: self.name.to_string(),
            driver: "igb",
            model: self.model.to_string(),
            pci_id: Some(self.bus.pci_id()),
            mac: self.mac,
            rx_queues: self.cfg.rx_queues,
            tx_queues: self.cfg.tx_queues,
            rx_ring: self.cfg.rx_ring as u16,
            tx_ring: self.cfg.tx_ring as u16,
        }
    }

    /// STATUS.LU, STATUS.SPEED and STATUS.FD (notes 1.1).
    fn link(&self) -> Result<LinkStatus> {
        let v = self.regs.read(r::STATUS);
        if v == u32::MAX {
            return Err(Error::DeviceGone {
                device: self.name.to_string(),
            });
        }
        Ok(init::decode_status(v))
    }

    fn stats(&mut self) -> Result<PortStats> {
        self.stats.accumulate(&*self.regs, self.cfg.rx_queues);
        self.alive()?;
        Ok(PortStats {
            hw: self.stats.totals(self.cfg.rx_queues),
        })
    }

    fn take_queues(&mut self) -> Result<QueueSet<IgbRx<B>, IgbTx<B>>> {
        if self.taken {
            return Err(Error::InvalidConfig(format!(
                "{}: queues were already taken",
                self.name
            )));
        }
        self.taken = true;
        Ok((std::mem::take(&mut self.rx), std::mem::take(&mut self.tx)))
    }
}

impl<B: Bus> Drop for IgbPort<B> {
    /// Stops all DMA before anything is unmapped: queues still held here drop first (each
    /// disables its hardware queue), every queue's enable bit is cleared (also those handed
    /// out), receive and transmit are turned off, the device is reset and bus mastering is
    /// disabled.
    fn drop(&mut self) {
        self.rx.clear();
        self.tx.clear();
        init::shutdown(
            &*self.regs,
            &self.name,
            self.cfg.rx_queues,
            self.cfg.tx_queues,
            self.cfg.reg_timeout,
        );
        if let Err(e) = self.bus.disable_bus_master() {
            tracing::warn!(port = %self.name, error = %e, "could not disable bus mastering");
        }
    }
}
