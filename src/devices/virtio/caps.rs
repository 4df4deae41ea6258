//! Finding a modern virtio device's structures: the vendor-specific PCI capabilities.
//!
//! A virtio 1.x PCI device describes where its common configuration, doorbells (notify), ISR
//! and device configuration live with `struct virtio_pci_cap` entries (vendor id 0x09) in the
//! capability list of its configuration space (virtio 1.2, 4.1.4): a BAR, an offset and a
//! length each; the notify entry adds `notify_off_multiplier`. The walk is a pure function of
//! the configuration space's first 256 bytes, so the host tests feed it images of good and bad
//! devices. A device without a common configuration is legacy-only (or not virtio 1.x), which
//! this driver refuses: see [`Caps::parse`].

use std::convert::Infallible;

use crate::error::{Error, Result};
use crate::platform::pci;

/// `cfg_type` of the common configuration.
pub const COMMON_CFG: u8 = 1;
/// `cfg_type` of the notifications (doorbells).
pub const NOTIFY_CFG: u8 = 2;
/// `cfg_type` of the ISR status.
pub const ISR_CFG: u8 = 3;
/// `cfg_type` of the device-specific configuration.
pub const DEVICE_CFG: u8 = 4;
/// PCI capability id of vendor-specific capabilities.
const CAP_VNDR: u8 = 0x09;

/// Where one structure lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    /// The BAR (0..=5).
    pub bar: u8,
    /// Byte offset in the BAR.
    pub offset: u32,
    /// Bytes.
    pub length: u32,
}

/// The structures of a modern virtio PCI device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    /// The common configuration.
    pub common: Region,
    /// The doorbells.
    pub notify: Region,
    /// Distance between two queues' doorbells per `queue_notify_off` step.
    pub notify_off_multiplier: u32,
    /// The ISR status (unused while polling; kept for `info`).
    pub isr: Option<Region>,
    /// The device configuration (MAC, link status).
    pub device: Option<Region>,
}

impl Caps {
    /// Walks the capability list of `config` (the configuration space, at least 256 bytes),
    /// taking the first structure of each type, as the spec asks of drivers. `device` names
    /// the device in errors.
    pub fn parse(config: &[u8], device: &str) -> Result<Caps> {
        let rd16 = |o: usize| u16::from_le_bytes([config[o], config[o + 1]]);
        let rd32 =
            |o: usize| u32::from_le_bytes([config[o], config[o + 1], config[o + 2], config[o + 3]]);
        if config.len() < 256 {
            return Err(Error::DeviceState {
                device: device.into(),
                what: format!(
                    "only {} bytes of PCI configuration space could be read; the capability list needs 256",
                    config.len()
                ),
            });
        }
        let (mut common, mut notify, mut isr, mut dev) = (None, None, None, None);
        let mut mult = 0;
        let Ok(list) = pci::capabilities(|o| Ok::<_, Infallible>(rd16(o as usize)));
        for (at, id) in list {
            let at = at as usize;
            // An entry too close to the end for a `virtio_pci_cap` ends the walk.
            if at + 16 > 256 {
                break;
            }
            let len = config[at + 2];
            if id == CAP_VNDR && len >= 16 {
                let region = Region {
                    bar: config[at + 4],
                    offset: rd32(at + 8),
                    length: rd32(at + 12),
                };
                let usable = region.bar <= 5;
                match config[at + 3] {
                    COMMON_CFG if usable && common.is_none() => common = Some(region),
                    NOTIFY_CFG if usable && notify.is_none() && len >= 20 && at + 20 <= 256 => {
                        notify = Some(region);
                        mult = rd32(at + 16);
                    }
                    ISR_CFG if usable && isr.is_none() => isr = Some(region),
                    DEVICE_CFG if usable && dev.is_none() => dev = Some(region),
                    _ => {}
                }
            }
        }
        let legacy = |what: &str| {
            Error::NotSupported {
            device: device.into(),
            what: "this virtio device".into(),
            why: format!(
                "it has no {what} capability: a legacy-only (virtio 0.9) device, which vfio-nic does not drive; give QEMU `disable-legacy=on` (or use a virtio 1.x device)"
            ),
        }
        };
        let common = common.ok_or_else(|| legacy("common-configuration"))?;
        let notify = notify.ok_or_else(|| legacy("notification"))?;
        if common.length < 0x38 {
            return Err(Error::DeviceState {
                device: device.into(),
                what: format!(
                    "its common configuration is {} bytes, shorter than the 56 that virtio 1.0 defines",
                    common.length
                ),
            });
        }
        Ok(Caps {
            common,
            notify,
            notify_off_multiplier: mult,
            isr,
            device: dev,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A configuration space with the capabilities QEMU's virtio-net-pci has with
    /// `disable-legacy=on` (BAR 4: common at 0, ISR at 0x1000, device at 0x2000, notify at
    /// 0x3000 with multiplier 4), behind an MSI-X capability; `skip` leaves types out.
    pub fn qemu_like(skip: &[u8]) -> Vec<u8> {
        let mut c = vec![0u8; 256];
        c[0..4].copy_from_slice(&[0xf4, 0x1a, 0x41, 0x10]);
        c[pci::PCI_STATUS as usize] = pci::PCI_STATUS_CAP_LIST as u8;
        c[pci::PCI_CAPABILITY_LIST as usize] = 0x98;
        // MSI-X at 0x98 -> first vendor cap at 0x84.
        c[0x98] = 0x11;
        c[0x99] = 0x84;
        let caps: [(u8, u32, u32, usize); 4] = [
            (COMMON_CFG, 0, 0x1000, 0x84),
            (ISR_CFG, 0x1000, 0x1000, 0x70),
            (DEVICE_CFG, 0x2000, 0x1000, 0x60),
            (NOTIFY_CFG, 0x3000, 0x1000, 0x4c),
        ];
        let kept: Vec<_> = caps.iter().filter(|c| !skip.contains(&c.0)).collect();
        if let Some(first) = kept.first() {
            c[0x99] = first.3 as u8;
        } else {
            c[0x99] = 0;
        }
        for (i, &&(ty, off, len, at)) in kept.iter().enumerate() {
            c[at] = CAP_VNDR;
            c[at + 1] = kept.get(i + 1).map_or(0, |n| n.3 as u8);
            c[at + 2] = if ty == NOTIFY_CFG { 20 } else { 16 };
            c[at + 3] = ty;
            c[at + 4] = 4;
            c[at + 8..at + 12].copy_from_slice(&off.to_le_bytes());
            c[at + 12..at + 16].copy_from_slice(&len.to_le_bytes());
            if ty == NOTIFY_CFG {
                c[at + 16..at + 20].copy_from_slice(&4u32.to_le_bytes());
            }
        }
        c
    }

    #[test]
    fn finds_qemus_structures() {
        let caps = Caps::parse(&qemu_like(&[]), "t").unwrap();
        assert_eq!(
            caps.common,
            Region {
                bar: 4,
                offset: 0,
                length: 0x1000
            }
        );
        assert_eq!(caps.notify.offset, 0x3000);
        assert_eq!(caps.notify_off_multiplier, 4);
        assert_eq!(caps.device.unwrap().offset, 0x2000);
        assert_eq!(caps.isr.unwrap().offset, 0x1000);
    }

    #[test]
    fn legacy_only_devices_are_refused_with_the_reason() {
        let mut c = qemu_like(&[COMMON_CFG, NOTIFY_CFG, ISR_CFG, DEVICE_CFG]);
        let e = Caps::parse(&c, "0000:03:00.0").unwrap_err().to_string();
        assert!(
            e.contains("legacy-only") && e.contains("disable-legacy=on"),
            "{e}"
        );
        // No capability list at all.
        c[0x06] = 0;
        assert!(Caps::parse(&c, "x").is_err());
        let e = Caps::parse(&qemu_like(&[NOTIFY_CFG]), "x")
            .unwrap_err()
            .to_string();
        assert!(e.contains("notification"), "{e}");
    }

    #[test]
    fn a_looping_or_truncated_list_ends() {
        let mut c = qemu_like(&[]);
        // The last capability points back to the first: the walk stops, and the first of
        // each type found counts.
        c[0x4c + 1] = 0x84;
        assert!(Caps::parse(&c, "x").is_ok());
        let e = Caps::parse(&c[..128], "x").unwrap_err().to_string();
        assert!(e.contains("256"), "{e}");
        // A common configuration too short for the queue fields.
        let mut c = qemu_like(&[]);
        c[0x84 + 12..0x84 + 16].copy_from_slice(&0x20u32.to_le_bytes());
        let e = Caps::parse(&c, "x").unwrap_err().to_string();
        assert!(e.contains("56"), "{e}");
    }
}
