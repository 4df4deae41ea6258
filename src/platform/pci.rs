//! PCI addresses and what sysfs says about a device before we try to open it.
//!
//! Opening a device through VFIO fails with bare errnos (`ENOENT`, `EBUSY`, `EINVAL`) that do not
//! tell the user which of half a dozen setup steps is missing. Sysfs knows: whether the device
//! exists, which driver owns it, whether the IOMMU put it in a group, and what else is in that
//! group. [`Sysfs::check_vfio_ready`] asks those questions in the order a user has to fix them and
//! turns the first failing answer into an error that contains the command that fixes it.
//!
//! Everything here is plain file reading, so [`Sysfs`] takes its root as a parameter: tests build a
//! fake tree in a temporary directory, and the real one lives at `/sys`.
//!
//! [`capabilities`] walks a function's standard capability list, through whatever reads its
//! configuration space (VFIO's config region, or a copy of it in memory).

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::error::{Error, Result};

/// The driver a device must be bound to for VFIO.
pub const VFIO_DRIVER: &str = "vfio-pci";

/// The configuration space's status register (PCI Local Bus 3.0, 6.2.3).
pub const PCI_STATUS: u64 = 0x06;
/// Its "capability list present" bit.
pub const PCI_STATUS_CAP_LIST: u16 = 1 << 4;
/// The offset of the capability list's first pointer (6.7).
pub const PCI_CAPABILITY_LIST: u64 = 0x34;

/// The standard capability list's entries as (offset, id), in list order, walked through
/// `read16` (a 16-bit configuration read: the status register, the list pointer, each entry's
/// id and next pointer); empty when the status register says there is no list. A pointer
/// below 0x40 ends the walk (0 ends the list; the header holds no capability), and so do 48
/// entries, all that fit in 192 bytes: a longer walk is a loop in the list, which must not
/// hang us.
pub fn capabilities<E>(
    mut read16: impl FnMut(u64) -> std::result::Result<u16, E>,
) -> std::result::Result<Vec<(u64, u8)>, E> {
    let mut caps = Vec::new();
    if read16(PCI_STATUS)? & PCI_STATUS_CAP_LIST == 0 {
        return Ok(caps);
    }
    let mut at = u64::from(read16(PCI_CAPABILITY_LIST)? as u8 & !3);
    while at >= 0x40 && caps.len() < 48 {
        let [id, next] = read16(at)?.to_le_bytes();
        caps.push((at, id));
        at = u64::from(next & !3);
    }
    Ok(caps)
}

/// PCI class code (upper 16 bits of the 24-bit class) of PCI-to-PCI bridges (for messages:
/// a bridge bound to the wrong driver is named as a bridge).
const CLASS_PCI_BRIDGE: u32 = 0x0604;

/// Drivers that leave a group usable by VFIO when they are bound to another device of it.
///
/// The kernel's rule (Linux >= 5.19, `drivers/vfio/group.c` `vfio_group_ioctl_get_status`:
/// viable unless `iommu_group_dma_owner_claimed`): a group is usable while no device in it is
/// bound to a driver that uses the kernel's DMA domain, that is any driver without
/// `driver_managed_dma`. The drivers that set it: `pci-stub` (drivers/pci/pci-stub.c),
/// `pcieport` (drivers/pci/pcie/portdrv.c: PCIe root and switch ports) and the VFIO drivers
/// (`vfio-pci` and its variants, whose names contain "vfio"). Before 5.19
/// (`vfio_dev_driver_allowed`) the list was pci-stub plus any non-endpoint device; a bridge
/// bound to `shpchp` (a conventional hot-plug bridge) blocks the group on current kernels.
/// An unbound device never blocks it.
const DMA_SAFE_DRIVERS: &[&str] = &["pci-stub", "pcieport"];

/// Whether a device bound to `driver` leaves its IOMMU group usable by VFIO.
fn leaves_group_viable(driver: &str) -> bool {
    driver == VFIO_DRIVER || driver.contains("vfio") || DMA_SAFE_DRIVERS.contains(&driver)
}
/// PCI base class of network controllers.
const BASE_CLASS_NETWORK: u32 = 0x02;

/// A PCI function address, `domain:bus:device.function`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PciAddress {
    /// PCI segment (domain); almost always 0, but VMD domains go beyond 16 bits.
    pub domain: u32,
    /// Bus number.
    pub bus: u8,
    /// Device (slot) number, `0..=31`.
    pub device: u8,
    /// Function number, `0..=7`.
    pub function: u8,
}

impl fmt::Display for PciAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

fn bad(input: &str, reason: impl Into<String>) -> Error {
    Error::BadPortName {
        input: input.to_string(),
        reason: reason.into(),
    }
}

/// Parses 1..=`max_digits` hex digits (no sign, no `0x`).
fn hex_field(input: &str, name: &str, text: &str, max_digits: usize) -> Result<u32> {
    if text.is_empty() {
        return Err(bad(input, format!("the {name} is empty")));
    }
    if text.len() > max_digits || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad(
            input,
            format!("the {name} '{text}' is not 1 to {max_digits} hex digits"),
        ));
    }
    // Cannot fail: at most 8 hex digits were checked above.
    u32::from_str_radix(text, 16).map_err(|e| bad(input, format!("the {name} '{text}': {e}")))
}

impl FromStr for PciAddress {
    type Err = Error;

    /// Accepts `DOMAIN:BUS:DEVICE.FUNCTION` (`0000:01:00.0`) and `BUS:DEVICE.FUNCTION` (`01:00.0`,
    /// domain 0), in hex, any case.
    fn from_str(input: &str) -> Result<Self> {
        let (rest, function) = input.rsplit_once('.').ok_or_else(|| {
            bad(
                input,
                "missing '.FUNCTION' (expected DOMAIN:BUS:DEVICE.FUNCTION)",
            )
        })?;
        let parts: Vec<&str> = rest.split(':').collect();
        let (domain, bus, device) = match parts.as_slice() {
            [bus, device] => (None, *bus, *device),
            [domain, bus, device] => (Some(*domain), *bus, *device),
            _ => {
                return Err(bad(
                    input,
                    format!(
                        "expected DOMAIN:BUS:DEVICE.FUNCTION or BUS:DEVICE.FUNCTION, found {} ':'-separated field(s) before the '.'",
                        parts.len()
                    ),
                ))
            }
        };
        let domain = match domain {
            Some(d) => hex_field(input, "domain", d, 8)?,
            None => 0,
        };
        let bus = hex_field(input, "bus", bus, 2)? as u8;
        let device = hex_field(input, "device", device, 2)?;
        if device > 31 {
            return Err(bad(
                input,
                format!("the device {device:#x} is out of range (00..=1f)"),
            ));
        }
        let function = hex_field(input, "function", function, 1)?;
        if function > 7 {
            return Err(bad(
                input,
                format!("the function {function} is out of range (0..=7)"),
            ));
        }
        Ok(PciAddress {
            domain,
            bus,
            device: device as u8,
            function: function as u8,
        })
    }
}

/// A view of sysfs rooted at `root` (normally `/sys`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sysfs {
    /// The directory that plays the role of `/sys`.
    pub root: PathBuf,
}

impl Default for Sysfs {
    fn default() -> Self {
        Sysfs {
            root: PathBuf::from("/sys"),
        }
    }
}

/// Reads a sysfs hex number such as `0x8086\n`.
fn read_hex(path: &Path) -> Result<u32> {
    let text = fs::read_to_string(path).map_err(|e| Error::io(path.display().to_string(), e))?;
    let t = text.trim();
    let digits = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .unwrap_or(t);
    u32::from_str_radix(digits, 16).map_err(|e| {
        Error::io(
            path.display().to_string(),
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("expected a hex number, found '{t}': {e}"),
            ),
        )
    })
}

/// The last path component of a symlink's target, if the link exists.
fn link_basename(link: &Path) -> Option<String> {
    let target = fs::read_link(link).ok()?;
    Some(target.file_name()?.to_string_lossy().into_owned())
}

impl Sysfs {
    /// A view rooted at `root` instead of `/sys`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Sysfs { root: root.into() }
    }

    fn devices_dir(&self) -> PathBuf {
        self.root.join("bus/pci/devices")
    }

    /// `<root>/bus/pci/devices/<addr>`.
    pub fn device_dir(&self, addr: PciAddress) -> PathBuf {
        self.devices_dir().join(addr.to_string())
    }

    /// Whether the device is present.
    pub fn exists(&self, addr: PciAddress) -> bool {
        self.device_dir(addr).exists()
    }

    /// Name of the bound driver (basename of the `driver` link), or `None` when unbound.
    pub fn driver(&self, addr: PciAddress) -> Option<String> {
        link_basename(&self.device_dir(addr).join("driver"))
    }

    /// Number of the device's IOMMU group; [`Error::NoIommuGroup`] when it has none.
    pub fn iommu_group(&self, addr: PciAddress) -> Result<u32> {
        let link = self.device_dir(addr).join("iommu_group");
        let name = link_basename(&link).ok_or_else(|| Error::NoIommuGroup {
            addr: addr.to_string(),
            path: link.clone(),
        })?;
        name.parse().map_err(|_| {
            Error::io(
                link.display().to_string(),
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("IOMMU group link points to '{name}', which is not a group number"),
                ),
            )
        })
    }

    /// Every device in IOMMU group `group`, sorted (entries that are not PCI addresses are skipped).
    pub fn group_devices(&self, group: u32) -> Result<Vec<PciAddress>> {
        let dir = self
            .root
            .join("kernel/iommu_groups")
            .join(group.to_string())
            .join("devices");
        list_addresses(&dir)
    }

    /// PCI vendor and device id, from the `vendor` and `device` files.
    pub fn vendor_device(&self, addr: PciAddress) -> Result<(u16, u16)> {
        let dir = self.device_dir(addr);
        let vendor = read_hex(&dir.join("vendor"))?;
        let device = read_hex(&dir.join("device"))?;
        Ok((vendor as u16, device as u16))
    }

    /// The 24-bit class code (`0x020000` for an Ethernet controller).
    pub fn class(&self, addr: PciAddress) -> Result<u32> {
        read_hex(&self.device_dir(addr).join("class"))
    }

    /// Every PCI device whose base class is "network controller" (0x02), sorted.
    pub fn list_network_devices(&self) -> Result<Vec<PciAddress>> {
        Ok(list_addresses(&self.devices_dir())?
            .into_iter()
            .filter(|&a| matches!(self.class(a), Ok(c) if c >> 16 == BASE_CLASS_NETWORK))
            .collect())
    }

    /// Checks everything VFIO needs before the device can be opened and returns its IOMMU group.
    ///
    /// The checks run in the order the user has to fix them: the device exists
    /// ([`Error::NoSuchDevice`]), it is bound to vfio-pci ([`Error::NotBoundToVfio`]), the IOMMU
    /// put it in a group ([`Error::NoIommuGroup`]), and no other device of the group is bound to
    /// a driver that keeps the group from VFIO ([`Error::GroupNotViable`]; the kernel's rule, see
    /// `DMA_SAFE_DRIVERS`).
    pub fn check_vfio_ready(&self, addr: PciAddress) -> Result<u32> {
        let dir = self.device_dir(addr);
        if !dir.exists() {
            return Err(Error::NoSuchDevice {
                addr: addr.to_string(),
                path: dir,
            });
        }
        match self.driver(addr) {
            Some(d) if d == VFIO_DRIVER => {}
            Some(d) => {
                return Err(Error::NotBoundToVfio {
                    addr: addr.to_string(),
                    bound: format!("bound to {d}"),
                    unbind: format!("echo {addr} > /sys/bus/pci/devices/{addr}/driver/unbind && "),
                })
            }
            None => {
                return Err(Error::NotBoundToVfio {
                    addr: addr.to_string(),
                    bound: "not bound to any driver".into(),
                    unbind: String::new(),
                })
            }
        }
        let group = self.iommu_group(addr)?;
        let offenders = self.group_offenders(group, addr)?;
        if !offenders.is_empty() {
            return Err(Error::GroupNotViable {
                addr: addr.to_string(),
                group,
                others: offenders.join(", "),
            });
        }
        Ok(group)
    }

    /// Devices of `group` other than `addr` that keep the group from being used through VFIO,
    /// each described as "0000:01:00.1 is bound to e1000e" ("... (a PCI bridge) ..." for
    /// bridges): bound to a driver outside vfio-pci and `DMA_SAFE_DRIVERS`.
    pub fn group_offenders(&self, group: u32, addr: PciAddress) -> Result<Vec<String>> {
        Ok(self
            .group_devices(group)?
            .into_iter()
            .filter(|&other| other != addr)
            .filter_map(|other| {
                let driver = self.driver(other)?;
                if leaves_group_viable(&driver) {
                    return None;
                }
                let what = if self.is_bridge(other) {
                    " (a PCI bridge)"
                } else {
                    ""
                };
                Some(format!("{other}{what} is bound to {driver}"))
            })
            .collect())
    }

    fn is_bridge(&self, addr: PciAddress) -> bool {
        matches!(self.class(addr), Ok(c) if c >> 8 == CLASS_PCI_BRIDGE)
    }
}

/// The entries of `dir` that parse as PCI addresses, sorted.
fn list_addresses(dir: &Path) -> Result<Vec<PciAddress>> {
    let entries = fs::read_dir(dir).map_err(|e| Error::io(dir.display().to_string(), e))?;
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(dir.display().to_string(), e))?;
        if let Some(addr) = entry.file_name().to_str().and_then(|n| n.parse().ok()) {
            out.push(addr);
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::os::unix::fs::symlink;

    fn addr(s: &str) -> PciAddress {
        s.parse().unwrap()
    }

    /// 16-bit reads of a configuration space image, for [`capabilities`].
    fn reader(c: &[u8]) -> impl FnMut(u64) -> std::result::Result<u16, ()> + '_ {
        |o| Ok(u16::from_le_bytes([c[o as usize], c[o as usize + 1]]))
    }

    #[test]
    fn capability_list_walked_in_order_and_bounded() {
        let mut c = vec![0u8; 256];
        c[0x06] = PCI_STATUS_CAP_LIST as u8;
        // The pointer's low two bits are reserved: 0x53 points at 0x50.
        c[0x34] = 0x53;
        c[0x50..0x52].copy_from_slice(&[0x10, 0x60]); // PCI Express, then 0x60
        c[0x60..0x62].copy_from_slice(&[0x11, 0x00]); // MSI-X, the end
        assert_eq!(
            capabilities(reader(&c)),
            Ok(vec![(0x50, 0x10), (0x60, 0x11)])
        );
        // A next pointer into the header ends the walk there.
        c[0x61] = 0x3c;
        assert_eq!(
            capabilities(reader(&c)),
            Ok(vec![(0x50, 0x10), (0x60, 0x11)])
        );
        // A loop ends after 48 entries.
        c[0x61] = 0x50;
        let caps = capabilities(reader(&c)).unwrap();
        assert_eq!(caps.len(), 48);
        assert_eq!(caps[47], (0x60, 0x11));
        // No list when the status register says so.
        c[0x06] = 0;
        assert_eq!(capabilities(reader(&c)), Ok(vec![]));
    }

    #[test]
    fn parses_long_and_short_forms() {
        let a = addr("0000:01:00.0");
        assert_eq!(
            a,
            PciAddress {
                domain: 0,
                bus: 1,
                device: 0,
                function: 0
            }
        );
        assert_eq!(addr("01:00.0"), a);
        assert_eq!(addr("ABCD:Ff:1F.7").to_string(), "abcd:ff:1f.7");
        assert_eq!(addr("10000:00:03.0").to_string(), "10000:00:03.0");
    }

    fn reason(s: &str) -> String {
        match s.parse::<PciAddress>() {
            Err(Error::BadPortName { input, reason }) => {
                assert_eq!(input, s);
                reason
            }
            other => panic!("{s}: expected BadPortName, got {other:?}"),
        }
    }

    #[test]
    fn bad_syntax_says_what_is_wrong() {
        assert!(reason("0000:01:00").contains("missing '.FUNCTION'"));
        assert!(reason("01.0").contains("found 1"));
        assert!(reason("0:0:0:01:00.0").contains("found 5"));
        assert!(reason("0000:1g:00.0").contains("bus '1g'"));
        assert!(reason("0000::00.0").contains("bus is empty"));
        assert!(reason("0000:01:20.0").contains("device 0x20 is out of range"));
        assert!(reason("0000:01:00.8").contains("function 8 is out of range"));
        assert!(reason("0000:01:00.").contains("function is empty"));
        assert!(reason("+000:01:00.0").contains("domain '+000'"));
        assert!(reason("0000:001:00.0").contains("bus '001' is not 1 to 2 hex digits"));
        let msg = "eth0".parse::<PciAddress>().unwrap_err().to_string();
        assert!(
            msg.contains("use a PCI address such as 0000:01:00.0"),
            "{msg}"
        );
    }

    proptest! {
        #[test]
        fn display_then_parse_round_trips(domain in any::<u32>(), bus in any::<u8>(), device in 0u8..32, function in 0u8..8) {
            let a = PciAddress { domain, bus, device, function };
            prop_assert_eq!(a.to_string().parse::<PciAddress>().unwrap(), a);
        }

        #[test]
        fn random_strings_never_panic(s in "\\PC{0,20}") {
            let _ = s.parse::<PciAddress>();
        }

        #[test]
        fn address_like_strings_never_panic(s in "[0-9a-fA-F:.xg+-]{0,16}") {
            if let Ok(a) = s.parse::<PciAddress>() {
                prop_assert!(a.device < 32 && a.function < 8);
            }
        }
    }

    /// A fake `/sys` in a temporary directory.
    struct FakeSys {
        dir: tempfile::TempDir,
    }

    impl FakeSys {
        fn new() -> Self {
            let dir = tempfile::tempdir().unwrap();
            fs::create_dir_all(dir.path().join("bus/pci/devices")).unwrap();
            FakeSys { dir }
        }

        fn sysfs(&self) -> Sysfs {
            Sysfs::new(self.dir.path())
        }

        /// Adds a device with a class, an optional driver and an optional IOMMU group.
        fn device(&self, a: &str, class: u32, driver: Option<&str>, group: Option<u32>) {
            let d = self.dir.path().join("bus/pci/devices").join(a);
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("vendor"), "0x8086\n").unwrap();
            fs::write(d.join("device"), "0x10c9\n").unwrap();
            fs::write(d.join("class"), format!("{class:#08x}\n")).unwrap();
            if let Some(drv) = driver {
                symlink(format!("../../../bus/pci/drivers/{drv}"), d.join("driver")).unwrap();
            }
            if let Some(g) = group {
                symlink(
                    format!("../../../kernel/iommu_groups/{g}"),
                    d.join("iommu_group"),
                )
                .unwrap();
                let gd = self
                    .dir
                    .path()
                    .join(format!("kernel/iommu_groups/{g}/devices"));
                fs::create_dir_all(&gd).unwrap();
                symlink(format!("../../../../bus/pci/devices/{a}"), gd.join(a)).unwrap();
            }
        }
    }

    const NIC: u32 = 0x020000;
    const BRIDGE: u32 = 0x060400;

    #[test]
    fn reads_ids_class_driver_and_group() {
        let f = FakeSys::new();
        f.device("0000:01:00.0", NIC, Some("vfio-pci"), Some(12));
        f.device("0000:00:1f.0", 0x060100, None, Some(3));
        let s = f.sysfs();
        let a = addr("01:00.0");
        assert!(s.exists(a));
        assert_eq!(
            s.device_dir(a),
            f.dir.path().join("bus/pci/devices/0000:01:00.0")
        );
        assert_eq!(s.vendor_device(a).unwrap(), (0x8086, 0x10c9));
        assert_eq!(s.class(a).unwrap(), NIC);
        assert_eq!(s.driver(a).as_deref(), Some("vfio-pci"));
        assert_eq!(s.driver(addr("00:1f.0")), None);
        assert_eq!(s.iommu_group(a).unwrap(), 12);
        assert_eq!(s.group_devices(12).unwrap(), vec![a]);
        assert_eq!(s.list_network_devices().unwrap(), vec![a]);
        assert_eq!(Sysfs::default().root, PathBuf::from("/sys"));
    }

    #[test]
    fn bound_to_vfio_is_ready() {
        let f = FakeSys::new();
        f.device("0000:01:00.0", NIC, Some("vfio-pci"), Some(7));
        assert_eq!(f.sysfs().check_vfio_ready(addr("0000:01:00.0")).unwrap(), 7);
    }

    #[test]
    fn bound_to_igb_says_how_to_rebind() {
        let f = FakeSys::new();
        f.device("0000:01:00.0", NIC, Some("igb"), Some(7));
        let err = f
            .sysfs()
            .check_vfio_ready(addr("0000:01:00.0"))
            .unwrap_err();
        assert!(matches!(err, Error::NotBoundToVfio { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains("bound to igb"), "{msg}");
        assert!(
            msg.contains("echo 0000:01:00.0 > /sys/bus/pci/devices/0000:01:00.0/driver/unbind && "),
            "{msg}"
        );
        assert!(
            msg.contains("echo vfio-pci > /sys/bus/pci/devices/0000:01:00.0/driver_override"),
            "{msg}"
        );
        assert!(
            msg.contains("echo 0000:01:00.0 > /sys/bus/pci/drivers_probe"),
            "{msg}"
        );
    }

    #[test]
    fn unbound_device_has_no_unbind_step() {
        let f = FakeSys::new();
        f.device("0000:01:00.0", NIC, None, Some(7));
        let msg = f
            .sysfs()
            .check_vfio_ready(addr("0000:01:00.0"))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("not bound to any driver"), "{msg}");
        assert!(!msg.contains("unbind"), "{msg}");
        assert!(msg.contains("driver_override"), "{msg}");
    }

    #[test]
    fn missing_device() {
        let f = FakeSys::new();
        let err = f
            .sysfs()
            .check_vfio_ready(addr("0000:02:00.0"))
            .unwrap_err();
        assert!(
            matches!(&err, Error::NoSuchDevice { addr, .. } if addr == "0000:02:00.0"),
            "{err:?}"
        );
        assert!(err.to_string().contains("lspci"));
    }

    #[test]
    fn missing_iommu_group() {
        let f = FakeSys::new();
        f.device("0000:01:00.0", NIC, Some("vfio-pci"), None);
        let err = f
            .sysfs()
            .check_vfio_ready(addr("0000:01:00.0"))
            .unwrap_err();
        assert!(matches!(err, Error::NoIommuGroup { .. }), "{err:?}");
        assert!(err.to_string().contains("intel_iommu=on"));
    }

    #[test]
    fn group_viable_when_others_are_vfio_pci_stub_unbound_or_ports() {
        // The kernel's rule (vfio_group_ioctl_get_status): drivers with driver_managed_dma
        // (vfio-pci and variants, pci-stub, pcieport) and unbound devices leave it usable.
        let f = FakeSys::new();
        f.device("0000:01:00.0", NIC, Some("vfio-pci"), Some(4));
        f.device("0000:01:00.1", NIC, Some("vfio-pci"), Some(4));
        f.device("0000:01:00.2", NIC, None, Some(4));
        f.device("0000:01:00.3", NIC, Some("pci-stub"), Some(4));
        f.device("0000:00:1c.0", BRIDGE, Some("pcieport"), Some(4));
        f.device("0000:00:1d.0", BRIDGE, None, Some(4));
        let s = f.sysfs();
        assert_eq!(s.group_devices(4).unwrap().len(), 6);
        assert_eq!(s.check_vfio_ready(addr("0000:01:00.0")).unwrap(), 4);
        assert_eq!(s.check_vfio_ready(addr("0000:01:00.1")).unwrap(), 4);
    }

    #[test]
    fn a_bridge_bound_to_a_dma_using_driver_blocks_the_group() {
        // shpchp (a conventional hot-plug bridge) does not set driver_managed_dma: the kernel
        // refuses the group, so we say so first, naming the bridge.
        let f = FakeSys::new();
        f.device("0000:02:01.0", NIC, Some("vfio-pci"), Some(7));
        f.device("0000:01:00.0", BRIDGE, Some("shpchp"), Some(7));
        let err = f
            .sysfs()
            .check_vfio_ready(addr("0000:02:01.0"))
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("0000:01:00.0 (a PCI bridge) is bound to shpchp"),
            "{err}"
        );
    }

    #[test]
    fn group_not_viable_lists_offenders() {
        let f = FakeSys::new();
        f.device("0000:01:00.0", NIC, Some("vfio-pci"), Some(4));
        f.device("0000:01:00.1", NIC, Some("e1000e"), Some(4));
        f.device("0000:01:00.2", NIC, None, Some(4));
        f.device("0000:01:00.3", NIC, Some("igb"), Some(4));
        let err = f
            .sysfs()
            .check_vfio_ready(addr("0000:01:00.0"))
            .unwrap_err();
        match &err {
            Error::GroupNotViable {
                addr,
                group,
                others,
            } => {
                assert_eq!(addr, "0000:01:00.0");
                assert_eq!(*group, 4);
                assert_eq!(
                    others,
                    "0000:01:00.1 is bound to e1000e, 0000:01:00.3 is bound to igb"
                );
            }
            other => panic!("expected GroupNotViable, got {other:?}"),
        }
        assert!(err.to_string().contains("bind them to vfio-pci"));
    }
}
