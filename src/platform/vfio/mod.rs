//! VFIO: safe, user-space ownership of a PCI device behind the IOMMU.
//!
//! Why VFIO and not `/sys/.../resource0` plus `/proc/self/pagemap`: with VFIO the IOMMU confines
//! the device's DMA to memory we mapped for it, the kernel resets the device when we exit, and no
//! physical addresses are needed. The price is three kernel objects with a strict order:
//!
//! - the [`Container`] (`/dev/vfio/vfio`): one IOMMU address space, shared by every device of the
//!   process so that one DMA buffer has one IOVA for all ports;
//! - the group (`/dev/vfio/<n>`): the unit of isolation, opened once and shared by its devices;
//! - the device fd, from which config space, BARs and reset are reached ([`VfioDevice`]).
//!
//! Handles are `Arc`-linked downwards (device -> group -> container; BAR mappings and DMA memory
//! hold the device or group), so they are torn down in the order the kernel needs whatever order
//! the user drops them in. Three DMA backends sit behind that seam: the type1 container, iommufd
//! with the device cdev, and VFIO's no-IOMMU mode; `select.rs` says which opens a device
//! ([`assess`], [`choose`]) and why the others cannot.
//!
//! A driver that handles faults takes the device's request and error notifications, its AER
//! registers and its function reset from [`DeviceEvents`] (`events.rs`).
//!
//! This module is, with `dma` and `mmio`, where the crate's `unsafe` lives (ioctls in `ioctl.rs`,
//! the BAR mapping in `device.rs`).

mod backend;
mod container;
mod device;
mod events;
mod group;
mod ioctl;
mod iommufd;
mod noiommu;
mod registry;
mod select;

pub use container::{iova_alignment, Container, CONTAINER_PATH, GROUP_DIR};
pub use device::{
    command_with_bus_master, Device as VfioDevice, IrqCounts, RegionInfo, PCI_COMMAND,
    PCI_COMMAND_MASTER, PCI_COMMAND_MEMORY,
};
pub use events::{
    bit_names, counter_growth, parse_counters, AerStatus, DeviceEvents, Signals, COR_NAMES,
    UNCOR_NAMES,
};
pub use iommufd::{CDEV_DIR, IOMMU_PATH};
pub use select::{
    assess, choose, Assessment, DmaBackend, GroupKind, Host, VfioOptions, ENV_ALLOW_NOIOMMU,
    ENV_BACKEND,
};
