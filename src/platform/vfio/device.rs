//! An open VFIO PCI device: config space, BAR mappings, reset and DMA through its container.
//!
//! Ownership is arranged so that nothing can outlive what it depends on: a [`Device`] is a handle
//! to a shared inner object that owns the device fd, `Arc`s of its group and of the container
//! (which keeps the group attached), and the process-wide "open" claim for its address. BAR
//! mappings hold that inner object too, so a mapped register window keeps the fd, group and
//! container open. Field order makes the teardown order the one VFIO wants: device fd first, then
//! the group and container handles; the container closes the groups, then itself, when the last
//! device and the last DMA buffer are gone.
//!
//! Opening goes one of three ways, chosen in `select.rs`: through the IOMMU group (type1 and
//! no-IOMMU, `VFIO_GROUP_GET_DEVICE_FD`) or through the device's own cdev bound to iommufd (no
//! group fd at all). After that, config space, BARs, interrupts and reset go through the device
//! fd alike.

use std::any::Any;
use std::ffi::CString;
use std::fmt;
use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::ptr::NonNull;
use std::sync::Arc;

use memmap2::{MmapOptions, MmapRaw};
use vfio_bindings::bindings::vfio::{
    VFIO_DEVICE_FLAGS_PCI, VFIO_DEVICE_FLAGS_RESET, VFIO_IRQ_INFO_EVENTFD,
    VFIO_PCI_BAR5_REGION_INDEX, VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_INTX_IRQ_INDEX,
    VFIO_PCI_MSIX_IRQ_INDEX, VFIO_PCI_MSI_IRQ_INDEX, VFIO_REGION_INFO_FLAG_MMAP,
    VFIO_REGION_INFO_FLAG_READ, VFIO_REGION_INFO_FLAG_WRITE,
};

use super::container::Container;
use super::group::Group;
use super::ioctl;
use super::registry::{Claim, OPEN_DEVICES};
use super::select::{self, DmaBackend, Host, VfioOptions};
use crate::error::{Error, Result};
use crate::platform::dma::DmaMapper;
use crate::platform::irq::{Interrupt, InterruptSet};
use crate::platform::mmio::MmioRegion;
use crate::platform::pci::{PciAddress, Sysfs};

/// Offset of the PCI COMMAND register in config space.
pub const PCI_COMMAND: u64 = 0x04;
/// COMMAND bit: respond to memory-space accesses (BARs).
pub const PCI_COMMAND_MEMORY: u16 = 1 << 1;
/// COMMAND bit: the device may master the bus (DMA).
pub const PCI_COMMAND_MASTER: u16 = 1 << 2;

/// Size, offset (in the device fd) and `VFIO_REGION_INFO_FLAG_*` of a device region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionInfo {
    /// Size in bytes (0 when the device does not implement the region).
    pub size: u64,
    /// Offset of the region in the device fd, for pread/pwrite and mmap.
    pub offset: u64,
    /// `VFIO_REGION_INFO_FLAG_*`.
    pub flags: u32,
}

impl RegionInfo {
    /// Whether the region can be mmapped.
    pub fn is_mappable(&self) -> bool {
        self.flags & VFIO_REGION_INFO_FLAG_MMAP != 0
    }

    /// Whether the region can be read and written through the fd.
    pub fn is_read_write(&self) -> bool {
        let rw = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE;
        self.flags & rw == rw
    }
}

/// COMMAND register value with bus mastering (and memory space) switched on or off.
pub fn command_with_bus_master(command: u16, enable: bool) -> u16 {
    if enable {
        command | PCI_COMMAND_MASTER | PCI_COMMAND_MEMORY
    } else {
        command & !PCI_COMMAND_MASTER
    }
}

/// The state shared by a device handle and its BAR mappings. Fields drop in declaration order.
pub(super) struct Inner {
    pub(super) fd: File,
    pub(super) addr: PciAddress,
    flags: u32,
    num_regions: u32,
    config: RegionInfo,
    /// The IOMMU group's number (sysfs's, for every backend).
    iommu_group: u32,
    /// The open group (type1, no-IOMMU); `None` for a device opened through its cdev.
    group: Option<Arc<Group>>,
    container: Arc<Container>,
    _claim: Claim,
    /// The kernel asked for the device back (set by [`DeviceEvents`](super::DeviceEvents)):
    /// when the last handle goes, its group leaves the container too, so that the removal can
    /// complete (see `Drop`).
    pub(super) removed: std::sync::atomic::AtomicBool,
}

impl Drop for Inner {
    /// A device being removed takes its group out of the container as it closes (the device
    /// fd closes right after this, then the group fd): Linux completes the removal of a
    /// group's last device only once the group has left its container, and the container
    /// otherwise keeps every group it attached until the process's last DMA buffer is gone.
    /// DPDK does the same (`rte_vfio_release_device` closes the group with its last device).
    /// A device opened through its cdev (iommufd) has no group: closing its fd unbinds it.
    fn drop(&mut self) {
        if let Some(group) = &self.group {
            if self.removed.load(std::sync::atomic::Ordering::Acquire) {
                self.container.release_group(group, self.addr);
            }
        }
    }
}

/// An open VFIO PCI device (re-exported as `vfio::VfioDevice`).
pub struct Device {
    pub(super) inner: Arc<Inner>,
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VfioDevice")
            .field("addr", &self.inner.addr.to_string())
            .field("group", &self.inner.iommu_group)
            .field("backend", &self.inner.container.backend())
            .field("flags", &self.inner.flags)
            .field("num_regions", &self.inner.num_regions)
            .finish()
    }
}

/// Keeps a BAR mapped, and the device it belongs to open, for as long as an [`MmioRegion`] lives.
/// The mapping is dropped (unmapped) before the device.
struct BarMapping {
    _map: MmapRaw,
    _device: Arc<Inner>,
}

impl Device {
    /// Opens the device at `addr` with the automatic backend (see [`Device::open_with`]).
    pub fn open(addr: PciAddress) -> Result<Device> {
        Device::open_with(addr, &VfioOptions::default())
    }

    /// Opens the device at `addr` through the backend `options` choose (iommufd, type1 or
    /// no-IOMMU; `select.rs`). sysfs and `/dev` are asked first, so that the error names what
    /// to fix: the device missing or not bound to vfio-pci, then each backend's own reason.
    pub fn open_with(addr: PciAddress, options: &VfioOptions) -> Result<Device> {
        Device::open_on(addr, &Host::default(), options)
    }

    /// Opens the device at `addr`, reading sysfs from `sysfs.root` (automatic backend).
    pub fn open_with_sysfs(addr: PciAddress, sysfs: &Sysfs) -> Result<Device> {
        let host = Host {
            sysfs: sysfs.clone(),
            ..Host::default()
        };
        Device::open_on(addr, &host, &VfioOptions::default())
    }

    fn open_on(addr: PciAddress, host: &Host, options: &VfioOptions) -> Result<Device> {
        let claim = OPEN_DEVICES.claim(addr)?;
        let assessment = select::assess(host, addr, options);
        let backend = select::choose(assessment, options, Container::live_backend())?;
        if backend == DmaBackend::NoIommu {
            warn_noiommu(addr);
        }
        let container = Container::shared_for(backend, host)?;
        let group_number = host.sysfs.iommu_group(addr)?;
        let vfio_err = |what, e: nix::errno::Errno| Error::Vfio {
            what,
            target: addr.to_string(),
            source: e.into(),
        };
        let (fd, group) = if backend == DmaBackend::Iommufd {
            (container.attach_cdev(addr, host)?, None)
        } else {
            let group = container.group(group_number, addr, &host.sysfs)?;
            let name = CString::new(addr.to_string()).expect("a PCI address has no NUL byte");
            let fd = ioctl::group_get_device_fd(group.fd(), &name)
                .map_err(|e| vfio_err("VFIO_GROUP_GET_DEVICE_FD", e))?;
            (fd, Some(group))
        };
        let info =
            ioctl::device_get_info(fd.as_fd()).map_err(|e| vfio_err("VFIO_DEVICE_GET_INFO", e))?;
        if info.flags & VFIO_DEVICE_FLAGS_PCI == 0 {
            return Err(Error::NotSupported {
                device: addr.to_string(),
                what: "a non-PCI VFIO device".into(),
                why: "vfio-nic drives PCI devices only; check that the address is a NIC".into(),
            });
        }
        let config = region_info(&fd, addr, VFIO_PCI_CONFIG_REGION_INDEX)?;
        tracing::info!(
            %addr,
            group = group_number,
            backend = %backend,
            regions = info.num_regions,
            irqs = info.num_irqs,
            reset = info.flags & VFIO_DEVICE_FLAGS_RESET != 0,
            "VFIO device opened"
        );
        Ok(Device {
            inner: Arc::new(Inner {
                fd,
                addr,
                flags: info.flags,
                num_regions: info.num_regions,
                config,
                iommu_group: group_number,
                group,
                container,
                _claim: claim,
                removed: std::sync::atomic::AtomicBool::new(false),
            }),
        })
    }

    /// The device's PCI address.
    pub fn addr(&self) -> PciAddress {
        self.inner.addr
    }

    /// The device's IOMMU group.
    pub fn iommu_group(&self) -> u32 {
        self.inner.iommu_group
    }

    /// The file descriptor of the device's open group (`/dev/vfio/<group>`): devices of one
    /// group opened in one process share it (VFIO allows a group to be opened once). `None` for
    /// a device opened through its cdev (iommufd), which has no group fd.
    pub fn group_fd(&self) -> Option<i32> {
        use std::os::fd::AsRawFd;
        self.inner.group.as_ref().map(|g| g.fd().as_raw_fd())
    }

    /// The DMA backend the device was opened through.
    pub fn backend(&self) -> DmaBackend {
        self.inner.container.backend()
    }

    /// Number of regions VFIO exposes (BARs, ROM, config space, ...).
    pub fn num_regions(&self) -> u32 {
        self.inner.num_regions
    }

    /// Size, offset and flags of region `index` (`0..=5` are the BARs, 7 is config space).
    pub fn region_info(&self, index: u32) -> Result<RegionInfo> {
        region_info(&self.inner.fd, self.inner.addr, index)
    }

    fn config_range(&self, offset: u64, len: usize) -> Result<u64> {
        let size = self.inner.config.size;
        match offset.checked_add(len as u64) {
            Some(end) if end <= size => Ok(self.inner.config.offset + offset),
            _ => Err(Error::InvalidConfig(format!(
                "{}: config space access of {len} bytes at {offset:#x} is outside its {size:#x} bytes",
                self.inner.addr
            ))),
        }
    }

    /// Reads `buf.len()` bytes of config space at `offset`.
    pub fn config_read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let pos = self.config_range(offset, buf.len())?;
        self.inner
            .fd
            .read_exact_at(buf, pos)
            .map_err(|source| Error::Vfio {
                what: "config space read",
                target: format!("{} at {offset:#x}", self.inner.addr),
                source,
            })
    }

    /// Writes `buf` to config space at `offset`.
    pub fn config_write(&self, offset: u64, buf: &[u8]) -> Result<()> {
        let pos = self.config_range(offset, buf.len())?;
        self.inner
            .fd
            .write_all_at(buf, pos)
            .map_err(|source| Error::Vfio {
                what: "config space write",
                target: format!("{} at {offset:#x}", self.inner.addr),
                source,
            })
    }

    /// Reads a little-endian 16-bit config register.
    pub fn config_read_u16(&self, offset: u64) -> Result<u16> {
        let mut b = [0; 2];
        self.config_read(offset, &mut b)?;
        Ok(u16::from_le_bytes(b))
    }

    /// Reads a little-endian 32-bit config register.
    pub fn config_read_u32(&self, offset: u64) -> Result<u32> {
        let mut b = [0; 4];
        self.config_read(offset, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// Writes a little-endian 16-bit config register.
    pub fn config_write_u16(&self, offset: u64, value: u16) -> Result<()> {
        self.config_write(offset, &value.to_le_bytes())
    }

    /// Writes a little-endian 32-bit config register.
    pub fn config_write_u32(&self, offset: u64, value: u32) -> Result<()> {
        self.config_write(offset, &value.to_le_bytes())
    }

    fn set_bus_master(&self, enable: bool) -> Result<()> {
        let old = self.config_read_u16(PCI_COMMAND)?;
        let new = command_with_bus_master(old, enable);
        if new != old {
            self.config_write_u16(PCI_COMMAND, new)?;
        }
        tracing::debug!(addr = %self.inner.addr, old = format_args!("{old:#06x}"), new = format_args!("{new:#06x}"), "PCI COMMAND");
        Ok(())
    }

    /// Lets the device do DMA: sets Bus Master Enable (and Memory Space Enable) in COMMAND.
    pub fn enable_bus_master(&self) -> Result<()> {
        self.set_bus_master(true)
    }

    /// Stops the device from starting DMA: clears Bus Master Enable in COMMAND.
    pub fn disable_bus_master(&self) -> Result<()> {
        self.set_bus_master(false)
    }

    /// PCI vendor and device id, read from config space.
    pub fn vendor_device(&self) -> Result<(u16, u16)> {
        Ok((self.config_read_u16(0)?, self.config_read_u16(2)?))
    }

    /// Maps BAR `index` (0..=5) for register access.
    ///
    /// The returned region keeps the mapping, the device fd, its group and the container alive.
    pub fn map_bar(&self, index: u32) -> Result<MmioRegion> {
        let addr = self.inner.addr;
        if index > VFIO_PCI_BAR5_REGION_INDEX {
            return Err(Error::InvalidConfig(format!(
                "{addr}: BAR{index} does not exist; PCI BARs are numbered 0 to 5"
            )));
        }
        let region = self.region_info(index)?;
        let not_supported = |why: String| Error::NotSupported {
            device: addr.to_string(),
            what: format!("mapping BAR{index}"),
            why,
        };
        if region.size == 0 {
            return Err(not_supported(format!(
                "the device has no BAR{index}; see `lspci -vv -s {addr}` for its BARs"
            )));
        }
        if !region.is_mappable() {
            return Err(not_supported(
                "VFIO does not allow mmapping it (an I/O-port BAR, or a kernel older than 4.16 that \
                 hides BARs holding the MSI-X table); use a memory BAR or a newer kernel"
                    .into(),
            ));
        }
        let len = usize::try_from(region.size).map_err(|_| {
            not_supported(format!(
                "its size {:#x} does not fit in memory",
                region.size
            ))
        })?;
        let name = format!("{addr} BAR{index}");
        let map = MmapOptions::new()
            .offset(region.offset)
            .len(len)
            .map_raw(&self.inner.fd)
            .map_err(|source| Error::Vfio {
                what: "mmap",
                target: name.clone(),
                source,
            })?;
        let base = NonNull::new(map.as_mut_ptr()).expect("mmap never returns null on success");
        let owner: Arc<dyn Any + Send + Sync> = Arc::new(BarMapping {
            _map: map,
            _device: self.inner.clone(),
        });
        tracing::debug!(%name, len, "BAR mapped");
        // The mapping is owned by the `BarMapping` in `owner`, so it stays mapped while the region
        // holds `owner`; nothing creates references to it.
        // SAFETY: `base` starts a fresh read-write shared mapping of `len` bytes of the BAR,
        // page-aligned (so 4-byte aligned), alive as long as `owner` (see above).
        Ok(unsafe { MmioRegion::from_raw(base, len, name, owner) })
    }

    /// The DMA mapper that makes memory visible to this device: the process's container.
    ///
    /// Use it as `DmaMemory::allocate(len, device.dma_mapper())`. Every device of the process
    /// shares the container, so memory mapped once is visible to all of them at the same IOVA,
    /// and the memory keeps the container (and its IOMMU) alive until it is unmapped.
    pub fn dma_mapper(&self) -> Arc<dyn DmaMapper> {
        self.inner.container.clone()
    }

    /// The process's container (the same object as [`Device::dma_mapper`], typed).
    pub fn container(&self) -> Arc<Container> {
        self.inner.container.clone()
    }

    /// Whether the device supports `VFIO_DEVICE_RESET` (typically a function-level reset).
    pub fn can_reset(&self) -> bool {
        self.inner.flags & VFIO_DEVICE_FLAGS_RESET != 0
    }

    /// Resets the device through VFIO if it supports that; returns whether it did.
    pub fn reset(&self) -> Result<bool> {
        if !self.can_reset() {
            tracing::debug!(addr = %self.inner.addr, "device has no VFIO reset");
            return Ok(false);
        }
        ioctl::device_reset(self.inner.fd.as_fd()).map_err(|e| Error::Vfio {
            what: "VFIO_DEVICE_RESET",
            target: self.inner.addr.to_string(),
            source: e.into(),
        })?;
        tracing::debug!(addr = %self.inner.addr, "device reset");
        Ok(true)
    }
}

/// How many interrupt vectors of each kind a device offers (`VFIO_DEVICE_GET_IRQ_INFO`; 0 where
/// the kind is missing or cannot signal an eventfd).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct IrqCounts {
    /// Legacy INTx (0 or 1).
    pub intx: u32,
    /// MSI vectors.
    pub msi: u32,
    /// MSI-X vectors.
    pub msix: u32,
}

/// The routing of a device's MSI-X vectors to eventfds: disables MSI-X when dropped (before
/// the device fd and its BAR mappings go, since it holds the device).
struct MsixRouting {
    device: Arc<Inner>,
}

impl Drop for MsixRouting {
    fn drop(&mut self) {
        if let Err(e) = ioctl::device_disable_irqs(self.device.fd.as_fd(), VFIO_PCI_MSIX_IRQ_INDEX)
        {
            tracing::warn!(addr = %self.device.addr, "disabling MSI-X (VFIO_DEVICE_SET_IRQS) failed: {e}");
        }
    }
}

impl Device {
    /// The interrupt vectors the device offers, by kind.
    pub fn irq_counts(&self) -> Result<IrqCounts> {
        let count = |index| -> Result<u32> {
            let info = ioctl::device_get_irq_info(self.inner.fd.as_fd(), index).map_err(|e| {
                Error::Vfio {
                    what: "VFIO_DEVICE_GET_IRQ_INFO",
                    target: self.inner.addr.to_string(),
                    source: e.into(),
                }
            })?;
            Ok(if info.flags & VFIO_IRQ_INFO_EVENTFD != 0 {
                info.count
            } else {
                0
            })
        };
        Ok(IrqCounts {
            intx: count(VFIO_PCI_INTX_IRQ_INDEX)?,
            msi: count(VFIO_PCI_MSI_IRQ_INDEX)?,
            msix: count(VFIO_PCI_MSIX_IRQ_INDEX)?,
        })
    }

    /// Enables MSI-X with `vectors` vectors, vector `i` signalling the `i`-th eventfd of the
    /// returned set, until the set is dropped.
    ///
    /// Interrupt mode needs MSI-X: the drivers give each queue a vector of its own. A device
    /// with fewer MSI-X vectors than asked is refused with what it does offer (MSI and INTx
    /// included), and so is a vector count of 0.
    pub fn enable_msix(&self, vectors: u16) -> Result<InterruptSet> {
        let counts = self.irq_counts()?;
        if vectors == 0 || u32::from(vectors) > counts.msix {
            return Err(Error::NotSupported {
                device: self.inner.addr.to_string(),
                what: format!("interrupt mode with {vectors} MSI-X vector(s)"),
                why: format!(
                    "the device offers {} MSI-X vector(s), {} MSI and {} INTx through VFIO, and this driver needs one MSI-X vector per queue (at least 1); use fewer queues, or poll (leave interrupts off)",
                    counts.msix, counts.msi, counts.intx
                ),
            });
        }
        let irqs = (0..vectors)
            .map(Interrupt::new)
            .collect::<Result<Vec<_>>>()?;
        let fds: Vec<_> = irqs.iter().map(|i| i.as_fd()).collect();
        ioctl::device_set_irq_eventfds(self.inner.fd.as_fd(), VFIO_PCI_MSIX_IRQ_INDEX, &fds)
            .map_err(|e| Error::Vfio {
                what: "VFIO_DEVICE_SET_IRQS (MSI-X eventfds)",
                target: self.inner.addr.to_string(),
                source: e.into(),
            })?;
        tracing::info!(addr = %self.inner.addr, vectors, "MSI-X vectors routed to eventfds");
        let routing = MsixRouting {
            device: self.inner.clone(),
        };
        Ok(InterruptSet::new(irqs, routing))
    }
}

/// The one warning line of no-IOMMU mode (once per process): what the user gave up.
fn warn_noiommu(addr: PciAddress) {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        tracing::warn!(
            "VFIO no-IOMMU mode ({addr}, allowed by --allow-noiommu): no IOMMU isolates the device, it can read and write ALL memory of this machine, and DMA goes to physical addresses"
        );
    }
}

fn region_info(fd: &File, addr: PciAddress, index: u32) -> Result<RegionInfo> {
    let info = ioctl::device_get_region_info(fd.as_fd(), index).map_err(|e| Error::Vfio {
        what: "VFIO_DEVICE_GET_REGION_INFO",
        target: format!("{addr} region {index}"),
        source: e.into(),
    })?;
    Ok(RegionInfo {
        size: info.size,
        offset: info.offset,
        flags: info.flags,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_can_cross_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Device>();
        send_sync::<Container>();
        send_sync::<BarMapping>();
    }

    #[test]
    fn bus_master_bits() {
        assert_eq!(command_with_bus_master(0x0000, true), 0x0006);
        assert_eq!(command_with_bus_master(0x0401, true), 0x0407);
        assert_eq!(command_with_bus_master(0x0407, false), 0x0403);
        assert_eq!(command_with_bus_master(0x0403, false), 0x0403);
    }

    #[test]
    fn region_flags() {
        let r = RegionInfo {
            size: 0x2_0000,
            offset: 0,
            flags: VFIO_REGION_INFO_FLAG_READ
                | VFIO_REGION_INFO_FLAG_WRITE
                | VFIO_REGION_INFO_FLAG_MMAP,
        };
        assert!(r.is_mappable() && r.is_read_write());
        let cfg = RegionInfo {
            flags: VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE,
            ..r
        };
        assert!(!cfg.is_mappable() && cfg.is_read_write());
    }

    /// Open runs the sysfs checks before touching /dev/vfio, so their precise errors reach the user,
    /// and a failed open releases the address again.
    #[test]
    fn open_reports_sysfs_problems_first_and_releases_the_claim() {
        let dir = tempfile::tempdir().unwrap();
        let sysfs = Sysfs::new(dir.path());
        let addr: PciAddress = "0000:7f:1f.7".parse().unwrap();
        let err = Device::open_with_sysfs(addr, &sysfs).unwrap_err();
        assert!(matches!(err, Error::NoSuchDevice { .. }), "{err:?}");
        assert!(!OPEN_DEVICES.contains(addr));
        let again = Device::open_with_sysfs(addr, &sysfs).unwrap_err();
        assert!(matches!(again, Error::NoSuchDevice { .. }), "{again:?}");
    }
}
