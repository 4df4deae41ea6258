//! What a register-level driver needs from whatever its device sits on.
//!
//! The igb and ixgbe drivers are written once against [`Bus`]: a register window, a DMA mapper
//! and a few PCI-level controls. [`PciBus`] provides them from a VFIO device; the software 82599
//! provides them from memory. That is how the unchanged ixgbe driver runs on real cards and in
//! host tests.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::platform::dma::DmaMapper;
use crate::platform::irq::InterruptSet;
use crate::platform::mmio::{Mmio, MmioRegion};
use crate::platform::pci::PciAddress;
use crate::platform::vfio::{DeviceEvents, VfioDevice};

/// A device's register window, DMA mapper and PCI controls.
pub trait Bus: Send + Sync + 'static {
    /// The register window's type.
    type Mmio: Mmio + 'static;
    /// BAR0, the registers.
    fn regs(&self) -> &Arc<Self::Mmio>;
    /// The mapper DMA memory for this device must be allocated through.
    fn dma_mapper(&self) -> Arc<dyn DmaMapper>;
    /// PCI vendor and device id.
    fn pci_id(&self) -> (u16, u16);
    /// The port's name for messages ("0000:01:00.0", "sim:0").
    fn name(&self) -> &str;
    /// Lets the device master the bus (DMA). Nothing can be received without it.
    fn enable_bus_master(&self) -> Result<()>;
    /// Stops the device from mastering the bus.
    fn disable_bus_master(&self) -> Result<()>;
    /// Routes `vectors` MSI-X vectors (0 to n - 1) to eventfds, until the returned set is
    /// dropped. A bus without interrupts refuses, saying so.
    fn enable_interrupts(&self, vectors: u16) -> Result<InterruptSet> {
        Err(Error::NotSupported {
            device: self.name().to_string(),
            what: format!("interrupt mode ({vectors} vectors)"),
            why: "this device delivers no interrupts; poll instead (leave interrupts off)".into(),
        })
    }
    /// The device's fault notifications (hot unplug requests, PCIe errors), its AER registers
    /// and its function reset, for a driver that handles them; `None` for a bus without them
    /// (the in-memory devices).
    fn device_events(&self) -> Option<Result<DeviceEvents>> {
        None
    }
}

/// A PCI device opened through VFIO, with BAR0 mapped.
pub struct PciBus {
    dev: VfioDevice,
    regs: Arc<MmioRegion>,
    id: (u16, u16),
    name: String,
}

impl PciBus {
    /// Opens `addr` through VFIO and maps BAR0.
    pub fn open(addr: PciAddress) -> Result<PciBus> {
        PciBus::from_device(VfioDevice::open(addr)?)
    }

    /// Maps BAR0 of a device already opened through VFIO.
    pub fn from_device(dev: VfioDevice) -> Result<PciBus> {
        let addr = dev.addr();
        let id = dev.vendor_device()?;
        let regs = Arc::new(dev.map_bar(0)?);
        Ok(PciBus {
            dev,
            regs,
            id,
            name: addr.to_string(),
        })
    }

    /// The VFIO device.
    pub fn device(&self) -> &VfioDevice {
        &self.dev
    }
}

impl Bus for PciBus {
    type Mmio = MmioRegion;

    fn regs(&self) -> &Arc<MmioRegion> {
        &self.regs
    }

    fn dma_mapper(&self) -> Arc<dyn DmaMapper> {
        self.dev.dma_mapper()
    }

    fn pci_id(&self) -> (u16, u16) {
        self.id
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn enable_bus_master(&self) -> Result<()> {
        self.dev.enable_bus_master()
    }

    fn disable_bus_master(&self) -> Result<()> {
        self.dev.disable_bus_master()
    }

    fn enable_interrupts(&self, vectors: u16) -> Result<InterruptSet> {
        self.dev.enable_msix(vectors)
    }

    fn device_events(&self) -> Option<Result<DeviceEvents>> {
        Some(self.dev.events())
    }
}
