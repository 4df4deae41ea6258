//! The Intel 82599 (ixgbe) driver, written once against [`Bus`].
//!
//! The same code drives a real card through VFIO ([`crate::platform::bus::PciBus`]) and the software 82599
//! used by the host tests. It is deliberately small and follows the datasheet's order (via the
//! summary in `intel-nic-notes.md` 1.4, which is ixy's minimal sequence):
//!
//! | file | what |
//! |---|---|
//! | `init.rs` | reset, link, receive/transmit global setup, RSS, in datasheet order |
//! | `queue.rs` | [`IxgbeRx`] / [`IxgbeTx`]: ring registers, enable/disable, the VLAN strip switch |
//! | `vlan.rs` | VLAN filter table shadow, TPID, extended (double) VLAN |
//! | `stats.rs` | read-to-clear counters accumulated to 64 bits |
//! | `swfw.rs` | the software/firmware semaphore around AUTOC writes |
//!
//! Shutdown is part of the design, not an afterthought: every queue disables its own hardware
//! queue in `Drop` (a bounded poll of RXDCTL/TXDCTL.ENABLE) before its ring and buffers are freed,
//! and the port's `Drop` disables every queue, resets the device and turns bus mastering off.
//! `Drop` also runs while a panic unwinds, so a crashed program never leaves a device writing
//! into freed memory.

mod init;
mod queue;
mod stats;
mod swfw;
mod vlan;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use crate::device::{LinkStatus, MacAddr, Port, PortInfo, PortStats, QueueSet};
use crate::devices::ids::{self, Family};
use crate::devices::intel::config::{Chip, IntelConfig, Limits};
use crate::error::{Error, Result};
use crate::platform::bus::Bus;
use crate::platform::mmio::Mmio;
use crate::platform::regs::ixgbe::{self as r};

pub use crate::devices::intel::VlanFilter;
pub use queue::{IxgbeRx, IxgbeTx};

use queue::StripCtl;
use stats::HwStats;

/// Largest ring the driver accepts (Linux `IXGBE_MAX_RXD`/`IXGBE_MAX_TXD`).
pub const MAX_RING: usize = 8192;
/// Receive queues usable with RSS (the redirection table holds 4-bit queue numbers).
pub const MAX_RX_QUEUES: u16 = 16;
/// Transmit queues usable without DCB or virtualisation.
pub const MAX_TX_QUEUES: u16 = 64;
/// Largest MTU: the 82599's jumbo limit as Linux uses it (9728-byte frames, less header and CRC).
pub const MAX_MTU: u16 = 9710;

/// The 82599 chip, as the parameter of [`IntelConfig`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Chip82599;

impl Chip for Chip82599 {
    const LIMITS: Limits = LIMITS;
}

/// How to open an 82599 port.
pub type IxgbeConfig = IntelConfig<Chip82599>;

/// The 82599's limits for the shared checks.
const LIMITS: Limits = Limits {
    family: "ixgbe",
    chip: "82599",
    max_ring: MAX_RING,
    max_mtu: MAX_MTU,
    max_rx_queues: MAX_RX_QUEUES,
    max_tx_queues: MAX_TX_QUEUES,
};

/// An open 82599 port.
pub struct IxgbePort<B: Bus> {
    bus: B,
    regs: Arc<B::Mmio>,
    name: Arc<str>,
    model: &'static str,
    cfg: IxgbeConfig,
    mac: MacAddr,
    vlan: VlanFilter,
    /// One per receive queue, shared with the queue after `take_queues`.
    strip: Vec<Arc<StripCtl>>,
    /// The queues until `take_queues` hands them out.
    rx: Vec<IxgbeRx<B>>,
    tx: Vec<IxgbeTx<B>>,
    taken: bool,
    stats: HwStats,
}

impl<B: Bus> IxgbePort<B> {
    /// Opens the 82599 behind `bus`: resets it and brings it up as `cfg` says.
    ///
    /// Refuses devices that are not 82599s ([`Error::UnsupportedDevice`]). A link that stays
    /// down for `cfg.link_timeout` is logged and reported by [`Port::link`], not an error.
    pub fn open(bus: B, cfg: IxgbeConfig) -> Result<Self> {
        let (vendor, device) = bus.pci_id();
        let model = match ids::lookup(vendor, device) {
            Some((Family::Ixgbe, model)) => model,
            _ => {
                return Err(Error::UnsupportedDevice {
                    addr: bus.name().to_string(),
                    vendor,
                    device,
                    supported: ids::KNOWN
                        .iter()
                        .filter(|k| k.2 == Family::Ixgbe)
                        .map(|k| format!("{:04x}:{:04x}", k.0, k.1))
                        .collect::<Vec<_>>()
                        .join(", ")
                        + " (the ixgbe driver)",
                });
            }
        };
        cfg.check()?;
        let regs = bus.regs().clone();
        let name: Arc<str> = bus.name().into();
        let vlan = VlanFilter::from_config(cfg.tpid, &cfg.vlans, cfg.vlan_filter)?;
        let strip = (0..cfg.rx_queues)
            .map(|_| Arc::new(StripCtl::new(cfg.rx_strip)))
            .collect();
        // From here on the port exists, so an error or a panic below runs its `Drop`: queues
        // disabled, device reset, bus mastering off, before any ring memory is freed.
        let mut port = IxgbePort {
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
    pub fn config(&self) -> &IxgbeConfig {
        &self.cfg
    }

    /// The bus the port sits on.
    pub fn bus(&self) -> &B {
        &self.bus
    }

    /// Unicast and multicast promiscuous mode (FCTRL.UPE|MPE); broadcast is always accepted.
    pub fn set_promiscuous(&mut self, on: bool) -> Result<()> {
        let bits = r::fctrl::UPE.bit() | r::fctrl::MPE.bit();
        if on {
            self.regs.modify(r::FCTRL, 0, bits);
        } else {
            self.regs.modify(r::FCTRL, bits, 0);
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

impl<B: Bus> Port for IxgbePort<B> {
    type Rx = IxgbeRx<B>;
    type Tx = IxgbeTx<B>;

    fn info(&self) -> PortInfo {
        PortInfo {
            name: self.name.to_string(),
            driver: "ixgbe",
            model: self.model.to_string(),
            pci_id: Some(self.bus.pci_id()),
            mac: self.mac,
            rx_queues: self.cfg.rx_queues,
            tx_queues: self.cfg.tx_queues,
            rx_ring: self.cfg.rx_ring as u16,
            tx_ring: self.cfg.tx_ring as u16,
        }
    }

    /// LINKS.UP and LINKS.LINK_SPEED (datasheet 8.2.3.22.20 via notes 1.3).
    fn link(&self) -> Result<LinkStatus> {
        let v = self.regs.read(r::LINKS);
        if v == u32::MAX {
            return Err(Error::DeviceGone {
                device: self.name.to_string(),
            });
        }
        Ok(init::decode_links(v))
    }

    fn stats(&mut self) -> Result<PortStats> {
        self.stats.accumulate(&*self.regs, self.cfg.rx_queues);
        self.alive()?;
        Ok(PortStats {
            hw: self.stats.totals(self.cfg.rx_queues),
        })
    }

    fn take_queues(&mut self) -> Result<QueueSet<IxgbeRx<B>, IxgbeTx<B>>> {
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

impl<B: Bus> Drop for IxgbePort<B> {
    /// Stops all DMA before anything is unmapped: queues still held here drop first (each
    /// disables its hardware queue), every queue's enable bit is cleared (also those handed
    /// out), receive is turned off, the device is reset and bus mastering is disabled.
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
