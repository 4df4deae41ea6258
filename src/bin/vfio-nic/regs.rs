//! `list`, `regs` and `reg`: looking at a card without a driver running.

use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use vfio_nic::devices::any::PortName;
use vfio_nic::devices::ids;
use vfio_nic::devices::virtio::{self, transport::Window};
use vfio_nic::platform::mmio::MmioRegion;
use vfio_nic::platform::vfio::VfioDevice;

use vfio_nic::devices::qm::model::{QmDevice, QmRegion};
use vfio_nic::devices::sim::{SimConfig, SimPort};
use vfio_nic::platform::bus::{Bus, PciBus};
use vfio_nic::platform::mmio::Mmio;
use vfio_nic::platform::regs::{self, Access, RegisterInfo, RegisterMap};
use vfio_nic::{Error, Result};

/// A device whose registers are read without a driver: a PCI device through VFIO, the
/// software 82599 (in its reset state, since nothing else in this process drives it), or the
/// first software portal of a qm port (the portal's cache-inhibited registers).
enum Target {
    Pci(PciBus),
    Sim(SimPort),
    /// Software portal 0's registers of a qm port.
    Qm(Arc<QmRegion>),
    /// The common configuration of a virtio device (offsets from its start, which the
    /// capability walk found; fields read at their natural widths).
    Virtio(Window<MmioRegion>),
}

impl Target {
    fn regs(&self) -> &dyn Mmio {
        match self {
            Target::Pci(b) => &**b.regs(),
            Target::Sim(s) => &**s.regs(),
            Target::Qm(r) => &**r,
            Target::Virtio(w) => w,
        }
    }
}

/// Opens a port's registers and finds its register map.
fn open(port: &str) -> Result<(Target, &'static RegisterMap)> {
    let (target, (v, d)) = match port.parse::<PortName>()? {
        PortName::Pci(addr) => {
            let dev = VfioDevice::open_with(addr, &crate::common::vfio_options())?;
            let id = dev.vendor_device()?;
            if matches!(ids::lookup(id.0, id.1), Some((ids::Family::Virtio, _))) {
                let t = virtio::port::pci_transport(&dev, Duration::from_secs(2))?;
                (Target::Virtio(t.common), id)
            } else {
                (Target::Pci(PciBus::from_device(dev)?), id)
            }
        }
        PortName::Sim(i) => {
            let sim = SimPort::open_named(i, &SimConfig::default())?;
            let id = sim.pci_id();
            (Target::Sim(sim), id)
        }
        PortName::Qm(i) => {
            let dev = QmDevice::open_named(i)?;
            let (_, cinh) = dev.portal(0).expect("every port has its portals");
            let map = regs::family("qbman").expect("the qbman map is built in");
            return Ok((Target::Qm(cinh), map));
        }
        other => {
            return Err(Error::NotSupported {
                device: other.to_string(),
                what: "register access".into(),
                why: vfio_nic::devices::kinds::no_registers(),
            })
        }
    };
    let (family, _) = ids::lookup(v, d).ok_or_else(|| Error::UnsupportedDevice {
        addr: port.to_string(),
        vendor: v,
        device: d,
        supported: ids::supported_list(),
    })?;
    let map = regs::family(family.name()).expect("every family has a register map");
    Ok((target, map))
}

fn register_json(info: &RegisterInfo, n: u32, value: Option<u32>, decode: bool) -> Value {
    let offset = info.instance_offset(n).unwrap_or(info.offset);
    let mut v = json!({
        "name": info.instance_name(n),
        "offset": format!("{offset:#07x}"),
        "access": info.access.short_name(),
        "value": value.map(|x| format!("{x:#010x}")),
    });
    if decode {
        if let Some(value) = value {
            v["fields"] = info
                .decode(value)
                .iter()
                .map(|f| {
                    json!({
                        "name": f.name,
                        "bits": if f.lo == f.hi { f.lo.to_string() } else { format!("{}:{}", f.hi, f.lo) },
                        "value": f.value,
                        "meaning": f.meaning,
                        "description": f.description,
                    })
                })
                .collect();
        }
    }
    v
}

fn print_register(v: &Value) -> Result<()> {
    outln!(
        "{:<14} {}  {}  {}",
        v["name"].as_str().unwrap_or(""),
        v["offset"].as_str().unwrap_or(""),
        v["value"]
            .as_str()
            .unwrap_or("(not read: reading clears it)"),
        v["access"].as_str().unwrap_or("")
    );
    if let Some(fields) = v["fields"].as_array() {
        for f in fields {
            outln!(
                "    {:<16} [{:>5}] = {:#x}{}   {}",
                f["name"].as_str().unwrap_or(""),
                f["bits"].as_str().unwrap_or(""),
                f["value"].as_u64().unwrap_or(0),
                f["meaning"]
                    .as_str()
                    .map(|m| format!(" ({m})"))
                    .unwrap_or_default(),
                f["description"].as_str().unwrap_or("")
            );
        }
    }
    Ok(())
}

/// `vfio-nic regs PORT [NAME...] [--decode]`.
pub fn dump(port: &str, names: &[String], decode: bool, json: bool) -> Result<()> {
    let (bus, map) = open(port)?;
    let regs = bus.regs();
    let mut wanted: Vec<(&RegisterInfo, u32, bool)> = Vec::new();
    if names.is_empty() {
        // Whole map; read-to-clear and write-only registers are listed but not read, so a dump
        // does not disturb the counters.
        for info in map.registers {
            for n in 0..info.count {
                wanted.push((info, n, false));
            }
        }
    } else {
        for name in names {
            let (info, n) = map.lookup(name).ok_or_else(|| {
                Error::InvalidConfig(format!(
                    "{} has no register '{name}'; `vfio-nic regs {port}` lists them all",
                    map.family
                ))
            })?;
            wanted.push((info, n, true));
        }
    }
    let mut out = Vec::new();
    for (info, n, asked) in wanted {
        let offset = info.instance_offset(n).unwrap_or(info.offset);
        let readable = match info.access {
            Access::WriteOnly => false,
            a if a.read_has_side_effect() => asked,
            _ => true,
        };
        let value = readable.then(|| regs.read32(offset as usize));
        out.push(register_json(info, n, value, decode));
    }
    if json {
        outln!(
            "{}",
            json!({ "port": port, "family": map.family, "registers": out })
        );
    } else {
        outln!("{port} ({}), {} registers", map.family, out.len());
        out.iter().try_for_each(print_register)?;
    }
    Ok(())
}

fn parse_u32(s: &str) -> Result<u32> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u32::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|_| Error::InvalidConfig(format!("'{s}' is not a 32-bit number (write 123 or 0x7b)")))
}

/// `vfio-nic reg PORT NAME|OFFSET [VALUE]`.
pub fn one(port: &str, register: &str, value: Option<&str>, json: bool) -> Result<()> {
    let (bus, map) = open(port)?;
    let regs = bus.regs();
    let (info, n, offset) = match map.lookup(register) {
        Some((info, n)) => (
            Some(info),
            n,
            info.instance_offset(n).unwrap_or(info.offset),
        ),
        None if register.starts_with("0x") || register.chars().all(|c| c.is_ascii_digit()) => {
            let off = parse_u32(register)?;
            match map.by_offset(off) {
                // A register of the map, at its own width (virtio's are 8 or 16 bits wide).
                Some((info, n)) => (Some(info), n, off),
                None if off % 4 != 0 || off as usize + 4 > regs.len() => {
                    return Err(Error::InvalidConfig(format!(
                        "offset {off:#x} is not a register of the map nor a 4-byte aligned word inside the {:#x}-byte BAR",
                        regs.len()
                    )))
                }
                None => (None, 0, off),
            }
        }
        None => {
            return Err(Error::InvalidConfig(format!(
                "{} has no register '{register}'; `vfio-nic regs {port}` lists them all",
                map.family
            )))
        }
    };
    if let Some(v) = value {
        regs.write32(offset as usize, parse_u32(v)?);
    }
    let read = regs.read32(offset as usize);
    let v = match info {
        Some(info) => register_json(info, n, Some(read), true),
        None => {
            json!({ "name": format!("{offset:#07x}"), "offset": format!("{offset:#07x}"), "value": format!("{read:#010x}"), "access": "?" })
        }
    };
    if json {
        outln!("{v}");
    } else {
        print_register(&v)?;
    }
    Ok(())
}
