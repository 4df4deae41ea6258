//! `vfio-nic list`: every network device on the PCI bus, what the IOMMU did with it, who drives
//! it, which DMA backend would open it (and why the others cannot), and a warning where taking
//! it would cut this machine's own traffic.
//!
//! On a cloud VM the one NIC is often the one carrying the session you type in: the IOMMU group
//! (or its absence, which decides between type1/iommufd and no-IOMMU) comes before the driver,
//! and a device whose interface holds the default route says that binding it to vfio-pci cuts
//! that traffic.

use serde_json::{json, Value};
use vfio_nic::devices::ids;
use vfio_nic::platform::pci::{PciAddress, Sysfs};
use vfio_nic::platform::vfio::{self, Assessment, DmaBackend, GroupKind, Host};
use vfio_nic::Result;

use crate::common;

/// The interfaces that hold a default route, from `/proc/net/route` (IPv4: destination and mask
/// 0) and `/proc/net/ipv6_route` (destination ::/0, a gateway or a device route).
pub fn default_route_interfaces(route: &str, ipv6_route: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    // Iface Destination Gateway Flags RefCnt Use Metric Mask ... (a header line first)
    for l in route.lines().skip(1) {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() >= 8 && f[1] == "00000000" && f[7] == "00000000" {
            out.push(f[0].to_string());
        }
    }
    // dest(32 hex) plen src srcplen nexthop metric refcnt use flags iface
    for l in ipv6_route.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() >= 10 && f[0].bytes().all(|b| b == b'0') && f[1] == "00" && f[9] != "lo" {
            out.push(f[9].to_string());
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The Linux interfaces of a PCI device (`net/` under it, or under its virtio device).
fn interfaces(sysfs: &Sysfs, addr: PciAddress) -> Vec<String> {
    let dir = sysfs.device_dir(addr);
    let mut dirs = vec![dir.join("net")];
    if let Ok(rd) = std::fs::read_dir(&dir) {
        dirs.extend(
            rd.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with("virtio"))
                .map(|e| e.path().join("net")),
        );
    }
    let mut out: Vec<String> = dirs
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flat_map(|rd| rd.filter_map(|e| e.ok()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    out.sort();
    out
}

/// The group as text: "group 12", "no-IOMMU group 0", "no IOMMU group".
pub fn group_text(g: GroupKind) -> String {
    match g {
        GroupKind::Iommu(n) => format!("group {n}"),
        GroupKind::NoIommu(n) => format!("no-IOMMU group {n}"),
        GroupKind::None => "no IOMMU group".into(),
    }
}

/// The backend that would open the device and each backend's verdict, as JSON.
pub fn backends_json(a: &Assessment, chosen: &Result<DmaBackend>) -> Value {
    let mut per = serde_json::Map::new();
    for b in DmaBackend::PREFERENCE {
        per.insert(
            b.name().into(),
            match a.verdict(b) {
                Ok(()) => json!({"possible": true, "why_not": null}),
                Err(e) => json!({"possible": false, "why_not": e.to_string()}),
            },
        );
    }
    json!({
        "would_use": chosen.as_ref().ok().map(|b| b.name()),
        "why_none": chosen.as_ref().err().map(|e| e.to_string()),
        "backends": per,
    })
}

/// One line: "backend iommufd (type1 also possible; noiommu: ...)".
pub fn backends_text(a: &Assessment, chosen: &Result<DmaBackend>) -> String {
    let others: Vec<String> = DmaBackend::PREFERENCE
        .iter()
        .filter(|&&b| chosen.as_ref().ok() != Some(&b))
        .map(|&b| match a.verdict(b) {
            Ok(()) => format!("{b} also possible"),
            Err(e) => format!("{b} not: {e}"),
        })
        .collect();
    match chosen {
        Ok(b) => format!("backend {b} ({})", others.join("; ")),
        Err(e) => format!("cannot open: {e}"),
    }
}

/// `vfio-nic list`.
pub fn run(json_out: bool) -> Result<()> {
    let host = Host::default();
    let sys = &host.sysfs;
    let options = common::vfio_options();
    let route = std::fs::read_to_string("/proc/net/route").unwrap_or_default();
    let route6 = std::fs::read_to_string("/proc/net/ipv6_route").unwrap_or_default();
    let default_ifs = default_route_interfaces(&route, &route6);
    let mut rows = Vec::new();
    for addr in sys.list_network_devices()? {
        let (vendor, device) = sys.vendor_device(addr)?;
        let known = ids::lookup(vendor, device);
        let a = vfio::assess(&host, addr, &options);
        let group = a.group;
        let chosen = match known {
            None => Err(vfio_nic::Error::InvalidConfig(format!(
                "not supported by vfio-nic ({vendor:04x}:{device:04x})"
            ))),
            Some(_) => vfio::choose(vfio::assess(&host, addr, &options), &options, None),
        };
        let ifs = interfaces(sys, addr);
        let routed: Vec<&String> = ifs.iter().filter(|i| default_ifs.contains(i)).collect();
        let warning = (!routed.is_empty()).then(|| {
            format!(
                "{addr} carries {}, which holds this machine's default route: binding it to vfio-pci cuts that traffic (a remote session over it included)",
                routed.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
            )
        });
        let mut row = json!({
            "address": addr.to_string(),
            "id": format!("{vendor:04x}:{device:04x}"),
            "family": known.map(|(f, _)| f.name()),
            "model": known.map(|(_, m)| m),
            "iommu_group": match group { GroupKind::Iommu(n) | GroupKind::NoIommu(n) => Some(n), GroupKind::None => None },
            "iommu_group_kind": match group { GroupKind::Iommu(_) => "iommu", GroupKind::NoIommu(_) => "noiommu", GroupKind::None => "none" },
            "driver": sys.driver(addr),
            "interfaces": ifs,
            "can_open": chosen.is_ok(),
            "why_not": chosen.as_ref().err().map(|e| e.to_string()),
            "warning": warning,
            "text": backends_text(&a, &chosen),
        });
        if let (Value::Object(r), Value::Object(b)) = (&mut row, backends_json(&a, &chosen)) {
            r.extend(b);
        }
        rows.push(row);
    }
    if json_out {
        for r in &mut rows {
            if let Value::Object(m) = r {
                m.remove("text");
            }
        }
        outln!("{}", Value::Array(rows));
        return Ok(());
    }
    if rows.is_empty() {
        outln!("no network devices on the PCI bus");
    }
    for r in &rows {
        outln!(
            "{}  {}  {:<6} {:<50} {:<18} driver {:<10} {}",
            r["address"].as_str().unwrap_or(""),
            r["id"].as_str().unwrap_or(""),
            r["family"].as_str().unwrap_or("-"),
            r["model"].as_str().unwrap_or("(unsupported)"),
            match (r["iommu_group_kind"].as_str(), r["iommu_group"].as_u64()) {
                (Some("iommu"), Some(n)) => group_text(GroupKind::Iommu(n as u32)),
                (Some("noiommu"), Some(n)) => group_text(GroupKind::NoIommu(n as u32)),
                _ => group_text(GroupKind::None),
            },
            r["driver"].as_str().unwrap_or("none"),
            r["text"].as_str().unwrap_or("")
        );
        if let Some(w) = r["warning"].as_str() {
            outln!("  WARNING: {w}");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_routes_are_found_in_both_tables() {
        let route =
            "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
                     ens4\t00000000\t0101A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n\
                     ens4\t0001A8C0\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0\n\
                     ens5\t0002A8C0\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0\n";
        let v6 = "00000000000000000000000000000000 00 00000000000000000000000000000000 00 fe800000000000000000000000000001 00000400 00000001 00000000 00000003 ens6\n\
                  fe800000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001 ens5\n\
                  00000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000 ffffffff 00000001 00000000 00200200 lo\n";
        assert_eq!(default_route_interfaces(route, v6), ["ens4", "ens6"]);
        assert!(default_route_interfaces("", "").is_empty());
        // A header alone, or a line cut short, is no route.
        assert!(default_route_interfaces("Iface Destination\nens4 00000000\n", "").is_empty());
    }

    #[test]
    fn groups_read_as_the_issue_asks() {
        assert_eq!(group_text(GroupKind::Iommu(12)), "group 12");
        assert_eq!(group_text(GroupKind::NoIommu(0)), "no-IOMMU group 0");
        assert_eq!(group_text(GroupKind::None), "no IOMMU group");
    }
}
