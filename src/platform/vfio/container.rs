//! The VFIO container: one IOMMU address space shared by every device this process opens.
//!
//! Why one per process: DMA memory (packet pools) is allocated once and used by several ports, for
//! example when forwarding between two NICs without copying. That only works if every device sees
//! the same IOVA for the same buffer, i.e. if all their groups sit in one container. So
//! [`Container::shared`] hands out the live container if there is one and opens a fresh one only
//! after every user of the previous one is gone (a process-global `Weak`).
//!
//! The container also owns the group registry (group number -> open group) because VFIO lets a
//! group be opened only once: two ports in one group must share the group fd. And it owns IOVA
//! allocation, because IOVAs are per address space.
//!
//! The kernel ties the IOMMU to the groups, not to the container fd: `VFIO_SET_IOMMU` is refused
//! before the first group is attached, and when the last group leaves, the IOMMU and every mapping
//! in it are torn down. So the container keeps each group it attached open until the container
//! itself is dropped, and DMA memory holds the container: as long as any buffer is still mapped,
//! the IOMMU that maps it exists, whatever order devices and buffers are dropped in. The cost is
//! that a group stays claimed by this process until its last buffer is freed.
//!
//! The same object serves the three DMA backends (`select.rs`): with type1 it is the container
//! fd; with no-IOMMU too (type `VFIO_NOIOMMU_IOMMU`, nothing mapped, bus addresses are physical
//! ones, `noiommu.rs`); with iommufd it is `/dev/iommu` with one IOAS, and devices attach through
//! their cdevs ([`Container::attach_cdev`]) instead of groups. A process has one at a time, so
//! one backend: the first device opened chooses it.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use nix::errno::Errno;
use vfio_bindings::bindings::vfio::{VFIO_API_VERSION, VFIO_GROUP_FLAGS_VIABLE};

use super::backend::Backend;
use super::group::{self, lock, Group};
use super::select::{self, DmaBackend, Host};
use super::{ioctl, iommufd, noiommu};
use crate::error::{Error, Result};
use crate::platform::dma::{DmaMapper, IovaAllocator, HUGE_PAGE};
use crate::platform::pci::{PciAddress, Sysfs};

/// Path of the container node.
pub const CONTAINER_PATH: &str = "/dev/vfio/vfio";
/// Directory of the group nodes (`/dev/vfio/<group>`).
pub const GROUP_DIR: &str = "/dev/vfio";

const PAGE: u64 = 4096;

/// The process's live container, if any.
static SHARED: Mutex<Weak<Container>> = Mutex::new(Weak::new());

/// IOVA alignment for a mapping of `len` bytes: 2 MiB for whole huge pages (so the IOMMU can use
/// 2 MiB page-table entries), 4 KiB otherwise.
pub fn iova_alignment(len: u64) -> u64 {
    if len > 0 && len % HUGE_PAGE as u64 == 0 {
        HUGE_PAGE as u64
    } else {
        PAGE
    }
}

/// Opens a VFIO node read-write, turning the common failures into errors that say what to do.
pub(super) fn open_node(path: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => Error::NoVfio {
                path: path.to_path_buf(),
            },
            io::ErrorKind::PermissionDenied => Error::PermissionDenied {
                path: path.to_path_buf(),
            },
            _ => Error::io(format!("opening {}", path.display()), e),
        })
}

struct State {
    /// Whether `VFIO_SET_IOMMU` is in effect (it is set once, with the first group).
    iommu_set: bool,
    /// The attached groups, kept open until the container is dropped (see the module docs).
    groups: HashMap<u32, Arc<Group>>,
    iova: IovaAllocator,
    /// Live mappings, IOVA -> length: lets `unmap` reject what it never mapped instead of
    /// corrupting the allocator.
    mappings: BTreeMap<u64, u64>,
}

/// A VFIO container: the IOMMU address space of this process's devices.
///
/// Obtain it with [`Container::shared`] (or from a device); it is also the [`DmaMapper`] that
/// makes DMA memory visible to the devices.
pub struct Container {
    fd: File,
    backend: Backend,
    state: Mutex<State>,
}

impl fmt::Debug for Container {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = lock(&self.state);
        f.debug_struct("Container")
            .field("fd", &self.fd.as_raw_fd())
            .field("backend", &self.backend)
            .field("groups", &st.groups.keys().collect::<Vec<_>>())
            .field("iommu_set", &st.iommu_set)
            .field("mappings", &st.mappings.len())
            .finish()
    }
}

impl Container {
    /// The process's container: the live one if any device or DMA memory still uses it, else a
    /// freshly opened type1 one.
    pub fn shared() -> Result<Arc<Container>> {
        let live = lock(&SHARED).upgrade();
        match live {
            Some(c) => Ok(c),
            None => Container::shared_for(DmaBackend::Type1, &Host::default()),
        }
    }

    /// The backend of the process's live container, if any.
    pub fn live_backend() -> Option<DmaBackend> {
        lock(&SHARED).upgrade().map(|c| c.backend.kind())
    }

    /// The process's container for `kind`: the live one (which must be of that kind: one backend
    /// per process), else a freshly opened one.
    pub fn shared_for(kind: DmaBackend, host: &Host) -> Result<Arc<Container>> {
        let mut slot = lock(&SHARED);
        if let Some(c) = slot.upgrade() {
            if c.backend.kind() != kind {
                return Err(Error::DmaBackendMismatch {
                    addr: "a device".into(),
                    wanted: kind.name(),
                    live: c.backend.kind().name(),
                });
            }
            return Ok(c);
        }
        let c = Arc::new(match kind {
            DmaBackend::Type1 => {
                Container::open(&select::dev_node(host, CONTAINER_PATH), Backend::probe)?
            }
            DmaBackend::NoIommu => Container::open(
                &select::dev_node(host, CONTAINER_PATH),
                Backend::probe_noiommu,
            )?,
            DmaBackend::Iommufd => Container::open_iommufd(host)?,
        });
        *slot = Arc::downgrade(&c);
        Ok(c)
    }

    /// `/dev/iommu` with a fresh IOAS.
    fn open_iommufd(host: &Host) -> Result<Container> {
        let fd = select::open_iommu(host)?;
        let ioas = iommufd::ioas_alloc(fd.as_fd()).map_err(|e| Error::Vfio {
            what: "IOMMU_IOAS_ALLOC",
            target: iommufd::IOMMU_PATH.into(),
            source: e.into(),
        })?;
        tracing::debug!(ioas, "iommufd opened, IOAS allocated");
        Ok(Container::with_fd(fd, Backend::Iommufd { ioas }))
    }

    /// Opens a VFIO container node and picks its IOMMU type with `probe`.
    fn open(path: &Path, probe: fn(BorrowedFd<'_>, &str) -> Result<Backend>) -> Result<Container> {
        let fd = open_node(path)?;
        let name = path.display().to_string();
        let version = ioctl::get_api_version(fd.as_fd()).map_err(|e| Error::Vfio {
            what: "VFIO_GET_API_VERSION",
            target: name.clone(),
            source: e.into(),
        })?;
        if version != VFIO_API_VERSION as i32 {
            return Err(Error::NotSupported {
                device: name,
                what: format!("VFIO API version {version}"),
                why: format!(
                    "vfio-nic speaks version {VFIO_API_VERSION}; use a kernel with the standard VFIO API"
                ),
            });
        }
        let backend = probe(fd.as_fd(), &name)?;
        tracing::debug!(path = %name, backend = backend.name(), "VFIO container opened");
        Ok(Container::with_fd(fd, backend))
    }

    /// A container over an already opened and checked fd.
    fn with_fd(fd: File, backend: Backend) -> Container {
        Container {
            fd,
            backend,
            state: Mutex::new(State {
                iommu_set: false,
                groups: HashMap::new(),
                iova: IovaAllocator::default(),
                mappings: BTreeMap::new(),
            }),
        }
    }

    /// Whether a group is attached and the IOMMU set, i.e. whether [`DmaMapper::map`] can work.
    pub fn has_iommu(&self) -> bool {
        lock(&self.state).iommu_set
    }

    /// The open group `number`, attached to this container: the already open one if this
    /// process opened a device of the group before, else a newly opened one. `addr` and `sysfs`
    /// only serve error messages.
    pub(super) fn group(&self, number: u32, addr: PciAddress, sysfs: &Sysfs) -> Result<Arc<Group>> {
        let mut st = lock(&self.state);
        if let Some(g) = st.groups.get(&number) {
            return Ok(g.clone());
        }
        let file = self.attach(&mut st, number, addr, sysfs)?;
        let group = Arc::new(Group::new(number, file));
        st.groups.insert(number, group.clone());
        Ok(group)
    }

    /// Lets go of `group` (of the removed device `addr`, whose last handle is closing) when no
    /// other device of the process uses it: out of the registry, so that it is closed (and
    /// detached) right after the device. Not while it is the last group and DMA memory is still
    /// mapped: the IOMMU would go with it; then it leaves with the container, when the last
    /// buffer is freed (logged).
    pub(super) fn release_group(&self, group: &Arc<Group>, addr: PciAddress) {
        let mut st = lock(&self.state);
        let number = group.number();
        // The registry's handle and the closing device's: nobody else's.
        if Arc::strong_count(group) > 2 || !st.groups.contains_key(&number) {
            return;
        }
        if st.groups.len() == 1 && !st.mappings.is_empty() {
            tracing::warn!(%addr, group = number, mappings = st.mappings.len(), "the removed device's group is the last in the container and DMA memory is still mapped: the removal completes once that memory is freed (drop the pools) or the process exits");
            return;
        }
        st.groups.remove(&number);
        if st.groups.is_empty() {
            // The kernel tears the IOMMU down with the last group.
            st.iommu_set = false;
        }
        tracing::info!(%addr, group = number, "the removed device's group leaves the container");
    }

    /// Opens `/dev/vfio/<number>`, checks it is viable, attaches it and sets the IOMMU if it is
    /// the first group.
    fn attach(&self, st: &mut State, number: u32, addr: PciAddress, sysfs: &Sysfs) -> Result<File> {
        // No-IOMMU groups have nodes of their own name (drivers/vfio/group.c, vfio_group_alloc).
        let prefix = if self.backend == Backend::NoIommu {
            "noiommu-"
        } else {
            ""
        };
        let path = PathBuf::from(format!("{GROUP_DIR}/{prefix}{number}"));
        // A previous container of this process may still be closing this group on another thread.
        group::wait_until_closed(number);
        let file = open_node(&path).map_err(|e| match e {
            Error::Io { source, .. } if source.raw_os_error() == Some(libc::EBUSY) => {
                Error::GroupBusy {
                    group: number,
                    path: path.clone(),
                }
            }
            e => e,
        })?;
        let vfio_err = |what, e: Errno| Error::Vfio {
            what,
            target: format!("IOMMU group {number} ({addr})"),
            source: e.into(),
        };
        let flags = ioctl::group_get_status(file.as_fd())
            .map_err(|e| vfio_err("VFIO_GROUP_GET_STATUS", e))?;
        if flags & VFIO_GROUP_FLAGS_VIABLE == 0 {
            let offenders = sysfs.group_offenders(number, addr).unwrap_or_default();
            let others = if offenders.is_empty() {
                format!(
                    "the kernel reports a device in it still in use (see `ls /sys/kernel/iommu_groups/{number}/devices`)"
                )
            } else {
                offenders.join(", ")
            };
            return Err(Error::GroupNotViable {
                addr: addr.to_string(),
                group: number,
                others,
            });
        }
        self.backend
            .attach_group(self.fd.as_fd(), file.as_fd())
            .map_err(|e| vfio_err("VFIO_GROUP_SET_CONTAINER", e))?;
        if !st.iommu_set {
            // On failure `file` is closed on return, which detaches the group again.
            self.backend
                .set_iommu(self.fd.as_fd())
                .map_err(|e| vfio_err("VFIO_SET_IOMMU", e))?;
            st.iommu_set = true;
        }
        self.refresh_windows(st);
        tracing::debug!(group = number, %addr, backend = self.backend.name(), "VFIO group attached");
        Ok(file)
    }
}

impl Container {
    /// Allocates only where the IOMMU can translate (its address width, less reserved regions
    /// such as the MSI window); without the capability, the default window. After every attach:
    /// a new device's reserved regions can narrow the ranges (and intersecting the free windows
    /// again is safe at any time).
    fn refresh_windows(&self, st: &mut State) {
        match self.backend.iova_ranges(self.fd.as_fd()) {
            Ok(Some(ranges)) => {
                st.iova.restrict_to(&ranges);
                tracing::debug!(reported = ?ranges, windows = %st.iova.describe(), backend = self.backend.name(), "IOVA ranges");
            }
            Ok(None) => tracing::debug!(
                windows = %st.iova.describe(),
                "no IOVA-range capability (Linux < 5.4), or no IOMMU: using the default window"
            ),
            Err(e) => tracing::warn!(
                error = %e,
                windows = %st.iova.describe(),
                "asking the IOMMU for its IOVA ranges failed; using the current IOVA windows"
            ),
        }
    }

    /// Opens `addr`'s VFIO cdev, binds it to this iommufd and attaches it to the IOAS (iommufd
    /// only); returns the device fd, from which everything else goes as with a group's device.
    pub(super) fn attach_cdev(&self, addr: PciAddress, host: &Host) -> Result<File> {
        let Backend::Iommufd { ioas } = self.backend else {
            return Err(Error::DmaBackendMismatch {
                addr: addr.to_string(),
                wanted: DmaBackend::Iommufd.name(),
                live: self.backend.kind().name(),
            });
        };
        let path = host.cdev(addr)?;
        let file = open_node(&path)?;
        let vfio_err = |what, e: Errno| Error::Vfio {
            what,
            target: format!("{addr} ({})", path.display()),
            source: e.into(),
        };
        let mut st = lock(&self.state);
        // EBUSY here: the device's group is open (another process's type1 container, say).
        let devid = iommufd::bind(&file, self.fd.as_fd())
            .map_err(|e| vfio_err("VFIO_DEVICE_BIND_IOMMUFD", e))?;
        iommufd::attach(&file, ioas).map_err(|e| vfio_err("VFIO_DEVICE_ATTACH_IOMMUFD_PT", e))?;
        st.iommu_set = true;
        self.refresh_windows(&mut st);
        tracing::debug!(%addr, devid, ioas, cdev = %path.display(), "VFIO cdev bound to iommufd and attached");
        Ok(file)
    }

    /// The backend this container serves.
    pub fn backend(&self) -> DmaBackend {
        self.backend.kind()
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        if !st.mappings.is_empty() {
            // Cannot happen through DmaMemory (it holds the container); the kernel drops them.
            tracing::warn!(
                mappings = st.mappings.len(),
                "VFIO container closed with live DMA mappings"
            );
        }
        // Groups first (closing them detaches them and releases the IOMMU), then `fd`.
        st.groups.clear();
        tracing::debug!(backend = self.backend.name(), "VFIO container closed");
    }
}

/// Turns a failed `VFIO_IOMMU_MAP_DMA` (or `IOMMU_IOAS_MAP`, `what`) into an error that says
/// what to do.
fn map_error(what: &str, len: u64, iova: u64, e: Errno) -> Error {
    if e == Errno::ENOMEM {
        if let Some((limit, locked, needed)) = crate::platform::memlock::refusal(len) {
            return Error::MemlockLimit {
                bytes: len,
                limit,
                locked,
                needed,
                needed_kib: needed.div_ceil(1024),
            };
        }
    }
    let hint = match e {
        Errno::ENOMEM => {
            "the locked-memory limit is too low: raise it (`ulimit -l unlimited`, or LimitMEMLOCK= for a service) or run as root"
        }
        Errno::ENOSPC => {
            "too many DMA mappings: use fewer, larger allocations or raise vfio_iommu_type1's dma_entry_limit"
        }
        Errno::EFAULT => "the memory is not mapped in this process (a driver bug)",
        _ => "check `dmesg` for IOMMU errors",
    };
    Error::DmaAlloc {
        bytes: len as usize,
        reason: format!("{what} at IOVA {iova:#x} failed: {e}; {hint}"),
    }
}

impl Container {
    /// The IOVA windows DMA memory is allocated in (for messages and tests): the IOMMU's
    /// reported ranges, less what is in use.
    pub fn iova_windows(&self) -> String {
        lock(&self.state).iova.describe()
    }
}

impl DmaMapper for Container {
    /// # Safety
    /// The caller upholds [`DmaMapper::map`]'s contract: the range stays valid until unmapped.
    unsafe fn map(&self, vaddr: *mut u8, len: usize) -> Result<u64> {
        let size = len as u64;
        if size == 0 || size % PAGE != 0 || vaddr as u64 % PAGE != 0 {
            return Err(Error::DmaAlloc {
                bytes: len,
                reason: format!(
                    "VFIO maps whole pages, but address {vaddr:p} / length {len:#x} is not 4 KiB aligned (a driver bug)"
                ),
            });
        }
        let mut st = lock(&self.state);
        if !st.iommu_set {
            return Err(Error::DmaAlloc {
                bytes: len,
                reason: "the VFIO container has no IOMMU yet (it is set up when the first device \
                         is opened); open the device with VfioDevice::open before allocating DMA \
                         memory for it"
                    .into(),
            });
        }
        if self.backend == Backend::NoIommu {
            // SAFETY: forwarded from this function's contract (the memory outlives its DMA).
            let pa = unsafe { noiommu::physical_base(vaddr, len) }?;
            st.mappings.insert(pa, size);
            return Ok(pa);
        }
        let iova = st.iova.alloc(size, iova_alignment(size))?;
        // SAFETY: the caller guarantees (DmaMapper::map contract) that the memory stays valid and
        // reserved for the device until `unmap` is called with this IOVA.
        if let Err(e) = unsafe { self.backend.map(self.fd.as_fd(), vaddr as u64, iova, size) } {
            st.iova.free(iova, size);
            return Err(map_error(self.backend.map_call(), size, iova, e));
        }
        st.mappings.insert(iova, size);
        Ok(iova)
    }

    fn unmap(&self, iova: u64, len: usize) -> Result<()> {
        let mut st = lock(&self.state);
        let Some(mapped) = st.mappings.remove(&iova) else {
            return Err(Error::DmaUnmap {
                iova,
                len,
                reason: "this container never mapped that IOVA (a driver bug)".into(),
            });
        };
        if mapped != len as u64 {
            tracing::error!(
                iova = format_args!("{iova:#x}"),
                len,
                mapped,
                "unmap length differs from the mapping (a driver bug); unmapping the whole mapping"
            );
        }
        if self.backend == Backend::NoIommu {
            // Nothing was mapped; the pages stay locked until the memory is freed.
            return Ok(());
        }
        let failure = match self.backend.unmap(self.fd.as_fd(), iova, mapped) {
            Ok(n) if n == mapped => None,
            Ok(n) => Some(format!(
                "{} unmapped {n:#x} of {mapped:#x} bytes",
                self.backend.unmap_call()
            )),
            Err(e) => Some(format!("{} failed: {e}", self.backend.unmap_call())),
        };
        match failure {
            None => {
                st.iova.free(iova, mapped);
                Ok(())
            }
            // The IOVA range stays allocated: the IOMMU may still translate it to the old pages,
            // so handing it out again would alias two buffers for the device.
            Some(reason) => Err(Error::DmaUnmap {
                iova,
                len: mapped as usize,
                reason,
            }),
        }
    }

    fn describe(&self) -> String {
        match self.backend {
            Backend::Iommufd { ioas } => format!("iommufd {} (IOAS {ioas})", self.fd.as_raw_fd()),
            b => format!("vfio container {} ({})", self.fd.as_raw_fd(), b.name()),
        }
    }

    fn needs_physical_contiguity(&self) -> bool {
        self.backend == Backend::NoIommu
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alignment_is_2m_for_whole_huge_pages_else_4k() {
        assert_eq!(iova_alignment(2 << 20), 2 << 20);
        assert_eq!(iova_alignment(6 << 20), 2 << 20);
        assert_eq!(iova_alignment(4096), 4096);
        assert_eq!(iova_alignment(3 << 20), 4096);
        assert_eq!(iova_alignment((2 << 20) + 4096), 4096);
        assert_eq!(iova_alignment(0), 4096);
    }

    #[test]
    fn missing_node_is_no_vfio_and_says_modprobe() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vfio");
        let err = open_node(&path).unwrap_err();
        assert!(
            matches!(&err, Error::NoVfio { path: p } if *p == path),
            "{err:?}"
        );
        assert!(err.to_string().contains("modprobe vfio-pci"));
    }

    #[test]
    fn a_file_that_is_not_a_container_is_rejected() {
        let f = tempfile::NamedTempFile::new().unwrap();
        let err = Container::open(f.path(), Backend::probe).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Vfio {
                    what: "VFIO_GET_API_VERSION",
                    ..
                }
            ),
            "{err:?}"
        );
    }

    fn fake() -> Container {
        let backend = Backend::Type1 {
            iommu_type: vfio_bindings::bindings::vfio::VFIO_TYPE1v2_IOMMU,
        };
        Container::with_fd(tempfile::tempfile().unwrap(), backend)
    }

    #[test]
    fn map_before_any_group_is_a_clear_error() {
        let c = fake();
        assert!(!c.has_iommu());
        let mut page = vec![0u8; 3 * 4096];
        let p = page
            .as_mut_ptr()
            .wrapping_add(page.as_ptr().align_offset(4096));
        // SAFETY: no mapping is made (the container has no IOMMU), so nothing is exposed.
        let err = unsafe { c.map(p, 4096) }.unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("no IOMMU yet") && msg.contains("VfioDevice::open"),
            "{msg}"
        );
        assert!(c.describe().contains("type1v2"));
    }

    #[test]
    fn failed_map_returns_its_iova_and_bad_unmap_does_not_panic() {
        let c = fake();
        lock(&c.state).iommu_set = true;
        let free = lock(&c.state).iova.free_bytes();
        let mut page = vec![0u8; 3 * 4096];
        let p = page
            .as_mut_ptr()
            .wrapping_add(page.as_ptr().align_offset(4096));
        // SAFETY: the fd is a plain file, so the MAP_DMA ioctl fails (ENOTTY) and maps nothing.
        let err = unsafe { c.map(p, 4096) }.unwrap_err();
        assert!(matches!(err, Error::DmaAlloc { .. }), "{err:?}");
        assert_eq!(lock(&c.state).iova.free_bytes(), free);
        // SAFETY: rejected before any ioctl because the length is not page-aligned.
        assert!(unsafe { c.map(p, 100) }.is_err());
        assert!(matches!(
            c.unmap(0x1234_5000, 4096),
            Err(Error::DmaUnmap { .. })
        ));
        assert_eq!(lock(&c.state).iova.free_bytes(), free);
    }

    #[test]
    fn a_failed_unmap_is_reported_and_keeps_the_iova_reserved() {
        let c = fake();
        let iova = {
            let mut st = lock(&c.state);
            let iova = st.iova.alloc(2 << 20, 2 << 20).unwrap();
            st.mappings.insert(iova, 2 << 20);
            iova
        };
        // The fake fd is a plain file: the ioctl fails. The device may still reach the pages, so
        // the error goes to the caller and the IOVA is not handed out again.
        let e = c.unmap(iova, 2 << 20).unwrap_err();
        assert!(matches!(e, Error::DmaUnmap { .. }), "{e}");
        assert!(e.to_string().contains("leaked"), "{e}");
        let st = lock(&c.state);
        assert!(st.mappings.is_empty());
        assert_eq!(
            st.iova.free_bytes(),
            IovaAllocator::default().free_bytes() - (2 << 20)
        );
    }

    #[test]
    fn map_errors_say_what_to_do() {
        let msg = map_error("VFIO_IOMMU_MAP_DMA", 4096, 0x10_0000, Errno::ENOMEM).to_string();
        assert!(msg.contains("ulimit -l"), "{msg}");
        assert!(msg.contains("0x100000"), "{msg}");
        let msg = map_error("VFIO_IOMMU_MAP_DMA", 4096, 0x10_0000, Errno::ENOSPC).to_string();
        assert!(msg.contains("dma_entry_limit"), "{msg}");
    }
}
