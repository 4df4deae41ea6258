//! Which of the three DMA backends opens a device, and why the others cannot.
//!
//! Linux hands a PCI device to user space in three ways, and which one works depends on the
//! machine, not on the device:
//!
//! - **type1**: the device's IOMMU group `/dev/vfio/<n>` attached to the container
//!   `/dev/vfio/vfio` (every kernel since 3.6; Linux means to deprecate it);
//! - **iommufd**: the device's own cdev `/dev/vfio/devices/vfioN` bound to `/dev/iommu` (6.6 and
//!   later, with CONFIG_IOMMUFD and CONFIG_VFIO_DEVICE_CDEV, which Debian's kernels lack);
//! - **noiommu**: a machine without an IOMMU (most cloud VMs): the group `/dev/vfio/noiommu-<n>`
//!   that vfio-pci makes when the kernel's `enable_unsafe_noiommu_mode` is on, no translation,
//!   DMA to physical addresses. Opt-in twice: the kernel's switch and ours
//!   ([`VfioOptions::allow_noiommu`]), since the device can then reach all memory.
//!
//! [`assess`] answers, from sysfs and `/dev` alone (a fake tree in tests), whether each backend
//! could open a device and, where not, the typed error that says what to do; [`choose`] picks
//! one: the one asked for, or automatically iommufd, else type1, else no-IOMMU when allowed. A
//! process uses one backend for all its devices (one bus address per buffer for every port), so
//! once a device is open its backend is the process's choice.

use std::fmt;
use std::fs::{self, OpenOptions};
use std::io;
use std::path::PathBuf;
use std::str::FromStr;

use super::iommufd::{CDEV_DIR, IOMMU_PATH};
use crate::error::{Error, Result};
use crate::platform::pci::{PciAddress, Sysfs, VFIO_DRIVER};

/// A way to hand a device's DMA to user space.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DmaBackend {
    /// The VFIO type1 container (`/dev/vfio/vfio` + the group).
    Type1,
    /// iommufd (`/dev/iommu`) with the VFIO device cdev.
    Iommufd,
    /// VFIO's no-IOMMU mode: no isolation, physical addresses.
    NoIommu,
}

impl DmaBackend {
    /// Every backend, in the order automatic selection prefers them.
    pub const PREFERENCE: [DmaBackend; 3] =
        [DmaBackend::Iommufd, DmaBackend::Type1, DmaBackend::NoIommu];

    /// The name used on the command line and in messages.
    pub fn name(self) -> &'static str {
        match self {
            DmaBackend::Type1 => "type1",
            DmaBackend::Iommufd => "iommufd",
            DmaBackend::NoIommu => "noiommu",
        }
    }
}

impl fmt::Display for DmaBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DmaBackend {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "type1" => Ok(DmaBackend::Type1),
            "iommufd" => Ok(DmaBackend::Iommufd),
            "noiommu" => Ok(DmaBackend::NoIommu),
            _ => Err(Error::InvalidConfig(format!(
                "'{s}' is not a VFIO backend: give type1, iommufd or noiommu (or leave it out for automatic selection)"
            ))),
        }
    }
}

/// How VFIO devices are opened (part of `PortConfig`; `--vfio-backend` and `--allow-noiommu`
/// on the command line).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VfioOptions {
    /// The backend to use; `None` chooses automatically (iommufd where the device has a cdev
    /// and `/dev/iommu` opens, else type1, else no-IOMMU if allowed).
    pub backend: Option<DmaBackend>,
    /// Allows VFIO's no-IOMMU mode, where the device can read and write all memory.
    pub allow_noiommu: bool,
}

/// The environment variable naming the backend (`type1`, `iommufd`, `noiommu` or `auto`).
pub const ENV_BACKEND: &str = "VFIO_NIC_VFIO_BACKEND";
/// The environment variable allowing no-IOMMU mode (`1`).
pub const ENV_ALLOW_NOIOMMU: &str = "VFIO_NIC_ALLOW_NOIOMMU";

impl VfioOptions {
    /// Options from the environment ([`ENV_BACKEND`], [`ENV_ALLOW_NOIOMMU`]), for programs
    /// such as the on-device tests that take their setup from it; unset means automatic and
    /// not allowed.
    pub fn from_env() -> Result<VfioOptions> {
        let backend = match std::env::var(ENV_BACKEND) {
            Ok(s) if s.is_empty() || s == "auto" => None,
            Ok(s) => Some(s.parse()?),
            Err(_) => None,
        };
        let allow_noiommu = match std::env::var(ENV_ALLOW_NOIOMMU).as_deref() {
            Ok("1") | Ok("yes") | Ok("true") => true,
            Ok("0") | Ok("") | Ok("no") | Ok("false") | Err(_) => false,
            Ok(other) => {
                return Err(Error::InvalidConfig(format!(
                    "{ENV_ALLOW_NOIOMMU}={other}: give 1 or 0"
                )))
            }
        };
        Ok(VfioOptions {
            backend,
            allow_noiommu,
        })
    }
}

/// Where to look: sysfs and `/dev` (fake trees in tests).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    /// The sysfs view.
    pub sysfs: Sysfs,
    /// The directory that plays `/dev`.
    pub dev: PathBuf,
}

impl Default for Host {
    fn default() -> Self {
        Host {
            sysfs: Sysfs::default(),
            dev: PathBuf::from("/dev"),
        }
    }
}

/// What the IOMMU did with a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupKind {
    /// No IOMMU group: no IOMMU, or no-IOMMU mode off when vfio-pci bound it.
    None,
    /// A real IOMMU group.
    Iommu(u32),
    /// A group VFIO made for a device without an IOMMU (`/dev/vfio/noiommu-<n>`).
    NoIommu(u32),
}

impl Host {
    /// `<dev>/vfio/vfio`, `<dev>/vfio/<n>`, ...
    fn dev_path(&self, rel: &str) -> PathBuf {
        self.dev.join(rel.trim_start_matches("/dev/"))
    }

    /// The device's IOMMU group and its kind (a no-IOMMU group is named `vfio-noiommu`:
    /// drivers/vfio/group.c, `vfio_noiommu_group_alloc`).
    pub fn group_kind(&self, addr: PciAddress) -> Result<GroupKind> {
        let n = match self.sysfs.iommu_group(addr) {
            Ok(n) => n,
            Err(Error::NoIommuGroup { .. }) => return Ok(GroupKind::None),
            Err(e) => return Err(e),
        };
        let name = self
            .sysfs
            .root
            .join(format!("kernel/iommu_groups/{n}/name"));
        Ok(match fs::read_to_string(name) {
            Ok(s) if s.trim() == "vfio-noiommu" => GroupKind::NoIommu(n),
            _ => GroupKind::Iommu(n),
        })
    }

    /// The device's VFIO cdev (`/dev/vfio/devices/vfioN`), from sysfs's `vfio-dev/vfioN`
    /// (present only while vfio-pci holds the device, and only with a `dev` attribute when the
    /// kernel has CONFIG_VFIO_DEVICE_CDEV).
    pub fn cdev(&self, addr: PciAddress) -> Result<PathBuf> {
        let dir = self.sysfs.device_dir(addr).join("vfio-dev");
        let no = |why: String| Error::NoVfioCdev {
            addr: addr.to_string(),
            why,
        };
        let name = fs::read_dir(&dir)
            .ok()
            .and_then(|rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .find(|n| n.starts_with("vfio"))
            })
            .ok_or_else(|| {
                no(if self.sysfs.driver(addr).as_deref() == Some(VFIO_DRIVER) {
                    format!("no {} in sysfs", dir.display())
                } else {
                    "it is not bound to vfio-pci, which makes the cdev".into()
                })
            })?;
        if !dir.join(&name).join("dev").exists() {
            return Err(no(format!(
                "{} has no dev attribute: the kernel lacks CONFIG_VFIO_DEVICE_CDEV",
                dir.join(&name).display()
            )));
        }
        let node = self.dev_path(CDEV_DIR).join(&name);
        if !node.exists() {
            return Err(no(format!("{} is missing", node.display())));
        }
        Ok(node)
    }

    /// Whether `/dev/iommu` opens read-write.
    pub fn check_iommufd(&self) -> Result<()> {
        let path = self.dev_path(IOMMU_PATH);
        match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(_) => Ok(()),
            Err(e) => Err(iommu_open_error(path, e)),
        }
    }

    /// The kernel's no-IOMMU switch: `Ok` when on, else why not.
    pub fn check_noiommu_enabled(&self, addr: PciAddress) -> Result<()> {
        let p = self
            .sysfs
            .root
            .join("module/vfio/parameters/enable_unsafe_noiommu_mode");
        let why = match fs::read_to_string(&p) {
            Ok(s) if matches!(s.trim(), "Y" | "1") => return Ok(()),
            Ok(s) => format!("{} is {}", p.display(), s.trim()),
            Err(_) => format!(
                "{} is missing: the kernel lacks CONFIG_VFIO_NOIOMMU (Debian's kernels do) or vfio is not loaded",
                p.display()
            ),
        };
        Err(Error::NoIommuNotEnabled {
            addr: addr.to_string(),
            why,
        })
    }
}

/// Why `/dev/iommu` (at `path`) did not open, as the error that says what to do.
fn iommu_open_error(path: PathBuf, e: io::Error) -> Error {
    match e.kind() {
        io::ErrorKind::PermissionDenied => Error::IommufdNotPermitted { path },
        io::ErrorKind::NotFound => Error::NotSupported {
            device: path.display().to_string(),
            what: "the iommufd backend".into(),
            why: "there is no /dev/iommu: the kernel lacks CONFIG_IOMMUFD (Debian's kernels do) or its module is not loaded (`modprobe iommufd`); use --vfio-backend type1".into(),
        },
        _ => Error::io(format!("opening {}", path.display()), e),
    }
}

/// Whether each backend could open a device, and why not where it could not.
#[derive(Debug)]
pub struct Assessment {
    /// The device.
    pub addr: PciAddress,
    /// What sysfs says of its IOMMU group.
    pub group: GroupKind,
    /// What every backend needs first: the device exists and is bound to vfio-pci.
    pub bound: Result<()>,
    /// Type1's verdict.
    pub type1: Result<()>,
    /// iommufd's verdict.
    pub iommufd: Result<()>,
    /// No-IOMMU's verdict (its kernel switch and this process's permission included).
    pub noiommu: Result<()>,
}

impl Assessment {
    /// The verdict of one backend.
    pub fn verdict(&self, b: DmaBackend) -> &Result<()> {
        match b {
            DmaBackend::Type1 => &self.type1,
            DmaBackend::Iommufd => &self.iommufd,
            DmaBackend::NoIommu => &self.noiommu,
        }
    }

    /// "type1: ...; iommufd: ...; noiommu: ..." for the backends that cannot, in preference
    /// order.
    pub fn reasons(&self) -> String {
        DmaBackend::PREFERENCE
            .iter()
            .filter_map(|&b| self.verdict(b).as_ref().err().map(|e| format!("{b}: {e}")))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

fn not_for(addr: PciAddress, backend: DmaBackend, why: String) -> Error {
    Error::NotSupported {
        device: addr.to_string(),
        what: format!("the {backend} backend"),
        why,
    }
}

/// Asks sysfs and `/dev` whether each backend could open `addr` with `options`.
pub fn assess(host: &Host, addr: PciAddress, options: &VfioOptions) -> Assessment {
    let group = host.group_kind(addr).unwrap_or(GroupKind::None);
    let bound = check_bound(host, addr);
    let type1 = match group {
        GroupKind::Iommu(n) => host
            .sysfs
            .group_offenders(n, addr)
            .and_then(|offenders| {
                if offenders.is_empty() {
                    Ok(())
                } else {
                    Err(Error::GroupNotViable {
                        addr: addr.to_string(),
                        group: n,
                        others: offenders.join(", "),
                    })
                }
            })
            .and_then(|()| exists(host.dev_path(super::CONTAINER_PATH)))
            .and_then(|()| exists(host.dev_path(&format!("{}/{n}", super::GROUP_DIR)))),
        GroupKind::NoIommu(n) => Err(untranslated(addr, DmaBackend::Type1, n)),
        GroupKind::None => Err(no_group(host, addr)),
    };
    let iommufd = match group {
        GroupKind::Iommu(_) => host.cdev(addr).and_then(|_| host.check_iommufd()),
        GroupKind::NoIommu(n) => Err(untranslated(addr, DmaBackend::Iommufd, n)),
        GroupKind::None => Err(no_group(host, addr)),
    };
    let noiommu = match group {
        GroupKind::Iommu(n) => Err(not_for(
            addr,
            DmaBackend::NoIommu,
            format!("an IOMMU translates for it (IOMMU group {n}): use type1 or iommufd, which isolate it"),
        )),
        GroupKind::NoIommu(n) => host
            .check_noiommu_enabled(addr)
            .and_then(|()| exists(host.dev_path(&format!("{}/noiommu-{n}", super::GROUP_DIR))))
            .and_then(|()| allowed(addr, options)),
        GroupKind::None => host.check_noiommu_enabled(addr).and_then(|()| {
            Err(Error::NoIommuNotEnabled {
                addr: addr.to_string(),
                why: "the mode is on, but the device has no IOMMU group: it was bound to vfio-pci before the mode was turned on (unbind and rebind it)".into(),
            })
        }),
    };
    Assessment {
        addr,
        group,
        bound,
        type1,
        iommufd,
        noiommu,
    }
}

/// Why type1 or iommufd cannot open a device in no-IOMMU group `n`.
fn untranslated(addr: PciAddress, backend: DmaBackend, n: u32) -> Error {
    not_for(
        addr,
        backend,
        format!("no IOMMU translates for it (group {n} is a VFIO no-IOMMU group); only the noiommu backend can open it"),
    )
}

fn allowed(addr: PciAddress, options: &VfioOptions) -> Result<()> {
    if options.allow_noiommu {
        Ok(())
    } else {
        Err(Error::NoIommuNotAllowed {
            addr: addr.to_string(),
        })
    }
}

fn exists(path: PathBuf) -> Result<()> {
    if path.exists() {
        Ok(())
    } else {
        Err(Error::NoVfio { path })
    }
}

fn no_group(host: &Host, addr: PciAddress) -> Error {
    Error::NoIommuGroup {
        addr: addr.to_string(),
        path: host.sysfs.device_dir(addr).join("iommu_group"),
    }
}

/// The device exists and is bound to vfio-pci (what every backend needs first).
fn check_bound(host: &Host, addr: PciAddress) -> Result<()> {
    let dir = host.sysfs.device_dir(addr);
    if !dir.exists() {
        return Err(Error::NoSuchDevice {
            addr: addr.to_string(),
            path: dir,
        });
    }
    match host.sysfs.driver(addr) {
        Some(d) if d == VFIO_DRIVER => Ok(()),
        Some(d) => Err(Error::NotBoundToVfio {
            addr: addr.to_string(),
            bound: format!("bound to {d}"),
            unbind: format!("echo {addr} > /sys/bus/pci/devices/{addr}/driver/unbind && "),
        }),
        None => Err(Error::NotBoundToVfio {
            addr: addr.to_string(),
            bound: "not bound to any driver".into(),
            unbind: String::new(),
        }),
    }
}

/// The backend that opens the device: the one `options` names (its own error if it cannot),
/// else the first of iommufd, type1, no-IOMMU that can. `live` is the backend of this
/// process's open devices, if any: a process keeps one.
pub fn choose(
    a: Assessment,
    options: &VfioOptions,
    live: Option<DmaBackend>,
) -> Result<DmaBackend> {
    let addr = a.addr.to_string();
    let mut a = a;
    std::mem::replace(&mut a.bound, Ok(()))?;
    let mismatch = |wanted: DmaBackend, live: DmaBackend| Error::DmaBackendMismatch {
        addr: addr.clone(),
        wanted: wanted.name(),
        live: live.name(),
    };
    if let Some(b) = options.backend {
        if a.verdict(b).is_err() {
            return Err(take(a, b));
        }
        return match live {
            Some(l) if l != b => Err(mismatch(b, l)),
            _ => Ok(b),
        };
    }
    let first_ok = DmaBackend::PREFERENCE
        .into_iter()
        .find(|&b| a.verdict(b).is_ok());
    match (live, first_ok) {
        (Some(l), _) if a.verdict(l).is_ok() => Ok(l),
        (Some(l), Some(b)) => Err(mismatch(b, l)),
        (None, Some(b)) => Ok(b),
        // Nothing works. Where only our permission is missing, that is the one thing to say.
        (_, None) if matches!(a.noiommu, Err(Error::NoIommuNotAllowed { .. })) => {
            Err(take(a, DmaBackend::NoIommu))
        }
        (_, None) => Err(Error::NoDmaBackend {
            reasons: a.reasons(),
            addr,
        }),
    }
}

/// Moves one backend's error out of the assessment.
fn take(a: Assessment, b: DmaBackend) -> Error {
    let r = match b {
        DmaBackend::Type1 => a.type1,
        DmaBackend::Iommufd => a.iommufd,
        DmaBackend::NoIommu => a.noiommu,
    };
    r.expect_err("called for a backend that cannot")
}

/// Opens a path read-write for a backend, with the usual messages (`/dev/iommu` has its own
/// permission error).
pub(super) fn open_iommu(host: &Host) -> Result<fs::File> {
    host.check_iommufd()?;
    let path = host.dev_path(IOMMU_PATH);
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| Error::io(format!("opening {}", path.display()), e))
}

/// The path of a `/dev` node under `host`.
pub(super) fn dev_node(host: &Host, rel: &str) -> PathBuf {
    host.dev_path(rel)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, PermissionsExt};

    /// A fake `/sys` and `/dev`.
    struct Fake {
        dir: tempfile::TempDir,
    }

    const A: &str = "0000:01:00.0";

    impl Fake {
        fn new() -> Fake {
            let dir = tempfile::tempdir().unwrap();
            for d in ["sys/bus/pci/devices", "dev/vfio/devices"] {
                fs::create_dir_all(dir.path().join(d)).unwrap();
            }
            Fake { dir }
        }
        fn sys(&self) -> PathBuf {
            self.dir.path().join("sys")
        }
        fn dev(&self) -> PathBuf {
            self.dir.path().join("dev")
        }
        fn host(&self) -> Host {
            Host {
                sysfs: Sysfs::new(self.sys()),
                dev: self.dev(),
            }
        }
        fn touch(&self, p: PathBuf) {
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, "").unwrap();
        }
        /// A device bound to `driver`, in group `group` (named `vfio-noiommu` when `noiommu`).
        fn device(&self, driver: &str, group: Option<u32>, noiommu: bool) {
            let d = self.sys().join("bus/pci/devices").join(A);
            fs::create_dir_all(&d).unwrap();
            symlink(
                format!("../../../bus/pci/drivers/{driver}"),
                d.join("driver"),
            )
            .unwrap();
            if let Some(g) = group {
                let gd = self.sys().join(format!("kernel/iommu_groups/{g}"));
                fs::create_dir_all(gd.join("devices")).unwrap();
                symlink(
                    format!("../../../kernel/iommu_groups/{g}"),
                    d.join("iommu_group"),
                )
                .unwrap();
                symlink(
                    format!("../../../../bus/pci/devices/{A}"),
                    gd.join("devices").join(A),
                )
                .unwrap();
                if noiommu {
                    fs::write(gd.join("name"), "vfio-noiommu\n").unwrap();
                    self.touch(self.dev().join(format!("vfio/noiommu-{g}")));
                } else {
                    self.touch(self.dev().join(format!("vfio/{g}")));
                }
                self.touch(self.dev().join("vfio/vfio"));
            }
        }
        fn cdev(&self, with_dev: bool) {
            let d = self
                .sys()
                .join(format!("bus/pci/devices/{A}/vfio-dev/vfio3"));
            fs::create_dir_all(&d).unwrap();
            if with_dev {
                fs::write(d.join("dev"), "511:3\n").unwrap();
                self.touch(self.dev().join("vfio/devices/vfio3"));
            }
        }
        fn iommu(&self, mode: u32) {
            let p = self.dev().join("iommu");
            self.touch(p.clone());
            fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
        }
        fn noiommu_param(&self, v: &str) {
            let p = self
                .sys()
                .join("module/vfio/parameters/enable_unsafe_noiommu_mode");
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, format!("{v}\n")).unwrap();
        }
        fn choose(&self, o: VfioOptions, live: Option<DmaBackend>) -> Result<DmaBackend> {
            let a = A.parse().unwrap();
            choose(assess(&self.host(), a, &o), &o, live)
        }
    }

    fn auto() -> VfioOptions {
        VfioOptions::default()
    }
    fn only(b: DmaBackend) -> VfioOptions {
        VfioOptions {
            backend: Some(b),
            allow_noiommu: false,
        }
    }
    fn root() -> bool {
        // SAFETY: geteuid has no preconditions.
        (unsafe { libc::geteuid() }) == 0
    }

    #[test]
    fn a_cdev_and_dev_iommu_choose_iommufd_else_type1() {
        let f = Fake::new();
        f.device("vfio-pci", Some(7), false);
        assert_eq!(f.choose(auto(), None).unwrap(), DmaBackend::Type1);
        f.cdev(true);
        // A cdev but no /dev/iommu: type1, and iommufd says why not.
        assert_eq!(f.choose(auto(), None).unwrap(), DmaBackend::Type1);
        let e = f.choose(only(DmaBackend::Iommufd), None).unwrap_err();
        assert!(e.to_string().contains("CONFIG_IOMMUFD"), "{e}");
        f.iommu(0o666);
        assert_eq!(f.choose(auto(), None).unwrap(), DmaBackend::Iommufd);
        assert_eq!(
            f.choose(only(DmaBackend::Type1), None).unwrap(),
            DmaBackend::Type1
        );
        // A process whose devices use type1 keeps it.
        assert_eq!(
            f.choose(auto(), Some(DmaBackend::Type1)).unwrap(),
            DmaBackend::Type1
        );
        let e = f
            .choose(only(DmaBackend::Iommufd), Some(DmaBackend::Type1))
            .unwrap_err();
        assert!(matches!(e, Error::DmaBackendMismatch { .. }), "{e:?}");
        assert!(e.to_string().contains("--vfio-backend type1"), "{e}");
        // No-IOMMU is refused where an IOMMU translates.
        let e = f.choose(only(DmaBackend::NoIommu), None).unwrap_err();
        assert!(e.to_string().contains("an IOMMU translates"), "{e}");
    }

    #[test]
    fn a_device_without_a_cdev_is_a_typed_refusal() {
        let f = Fake::new();
        f.device("vfio-pci", Some(7), false);
        f.iommu(0o666);
        let e = f.choose(only(DmaBackend::Iommufd), None).unwrap_err();
        assert!(matches!(e, Error::NoVfioCdev { .. }), "{e:?}");
        assert!(e.to_string().contains("vfio-dev"), "{e}");
        // The sysfs directory without `dev`: a kernel without CONFIG_VFIO_DEVICE_CDEV.
        f.cdev(false);
        let e = f.choose(only(DmaBackend::Iommufd), None).unwrap_err();
        assert!(e.to_string().contains("CONFIG_VFIO_DEVICE_CDEV"), "{e}");
    }

    #[test]
    fn dev_iommu_not_permitted_is_a_typed_refusal() {
        if root() {
            // Root opens a mode-000 file: the refusal cannot be staged (it is, as any user).
            return;
        }
        let f = Fake::new();
        f.device("vfio-pci", Some(7), false);
        f.cdev(true);
        f.iommu(0o000);
        let e = f.choose(only(DmaBackend::Iommufd), None).unwrap_err();
        assert!(matches!(e, Error::IommufdNotPermitted { .. }), "{e:?}");
        assert_eq!(f.choose(auto(), None).unwrap(), DmaBackend::Type1);
    }

    /// The refusal as root cannot stage (root opens a mode-000 file), so the mapping from the
    /// open's error is checked on its own too.
    #[test]
    fn dev_iommu_refusals_say_what_to_do() {
        let denied = io::Error::from(io::ErrorKind::PermissionDenied);
        let e = iommu_open_error("/dev/iommu".into(), denied);
        assert!(matches!(e, Error::IommufdNotPermitted { .. }), "{e:?}");
        assert!(e.to_string().contains("run as root"), "{e}");
        assert!(e.to_string().contains("--vfio-backend type1"), "{e}");
        let missing = iommu_open_error("/dev/iommu".into(), io::ErrorKind::NotFound.into());
        assert!(missing.to_string().contains("CONFIG_IOMMUFD"), "{missing}");
    }

    #[test]
    fn noiommu_needs_the_kernel_switch_and_ours() {
        let f = Fake::new();
        f.device("vfio-pci", Some(0), true);
        let allow = VfioOptions {
            backend: None,
            allow_noiommu: true,
        };
        // The kernel's switch is missing (no CONFIG_VFIO_NOIOMMU).
        let e = f.choose(allow, None).unwrap_err();
        assert!(e.to_string().contains("CONFIG_VFIO_NOIOMMU"), "{e}");
        f.noiommu_param("N");
        let e = f.choose(only(DmaBackend::NoIommu), None).unwrap_err();
        assert!(matches!(e, Error::NoIommuNotEnabled { .. }), "{e:?}");
        assert!(e.to_string().contains("enable_unsafe_noiommu_mode"), "{e}");
        f.noiommu_param("Y");
        // On in the kernel, not allowed here: that is the one thing said.
        let e = f.choose(auto(), None).unwrap_err();
        assert!(matches!(e, Error::NoIommuNotAllowed { .. }), "{e:?}");
        assert!(e.to_string().contains("--allow-noiommu"), "{e}");
        assert!(e.to_string().contains("ALL memory"), "{e}");
        assert_eq!(f.choose(allow, None).unwrap(), DmaBackend::NoIommu);
        // type1 and iommufd say why they cannot.
        let a = assess(&f.host(), A.parse().unwrap(), &allow);
        assert!(a.type1.is_err() && a.iommufd.is_err());
        assert!(a.reasons().contains("no-IOMMU group"), "{}", a.reasons());
        assert_eq!(a.group, GroupKind::NoIommu(0));
    }

    #[test]
    fn no_group_at_all_names_each_fix() {
        let f = Fake::new();
        f.device("vfio-pci", None, false);
        let e = f.choose(auto(), None).unwrap_err();
        assert!(matches!(e, Error::NoDmaBackend { .. }), "{e:?}");
        let m = e.to_string();
        assert!(m.contains("type1:") && m.contains("intel_iommu=on"), "{m}");
        assert!(
            m.contains("noiommu:") && m.contains("CONFIG_VFIO_NOIOMMU"),
            "{m}"
        );
        f.noiommu_param("Y");
        let e = f.choose(only(DmaBackend::NoIommu), None).unwrap_err();
        assert!(e.to_string().contains("rebind"), "{e}");
    }

    #[test]
    fn not_bound_to_vfio_comes_first() {
        let f = Fake::new();
        f.device("igb", Some(7), false);
        let e = f.choose(auto(), None).unwrap_err();
        assert!(matches!(e, Error::NotBoundToVfio { .. }), "{e:?}");
        let a = assess(&f.host(), A.parse().unwrap(), &auto());
        assert!(a.type1.is_ok(), "type1 would work once bound");
        let cdev = a.iommufd.unwrap_err().to_string();
        assert!(cdev.contains("not bound to vfio-pci"), "{cdev}");
        assert!(!f.dev().join("iommu").exists());
    }

    #[test]
    fn names_parse_and_options_come_from_the_environment() {
        assert_eq!(
            "iommufd".parse::<DmaBackend>().unwrap(),
            DmaBackend::Iommufd
        );
        assert_eq!("noiommu".parse::<DmaBackend>().unwrap().name(), "noiommu");
        let e = "vfio".parse::<DmaBackend>().unwrap_err();
        assert!(e.to_string().contains("type1, iommufd or noiommu"), "{e}");
    }
}
