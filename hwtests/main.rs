//! The on-device test suite: checks a real (or emulated) NIC through the same code paths an
//! application uses.
//!
//! The ports come from the environment, never from code, so the same binary runs on a bring-up
//! board, on a lab machine with real 82576/82599 cards and, in CI, inside a QEMU guest:
//!
//!     VFIO_NIC_PORTS=0000:01:00.0,0000:02:00.0 vfio-nic-hwtests [FILTER]
//!
//! Optional variables:
//! - `VFIO_NIC_EXPECT_MACS=52:54:00:12:34:56,...`: the MAC each port must report (QEMU's `mac=`).
//! - `VFIO_NIC_OTHER_DRIVER_PORT=0000:02:00.0`: a port bound to a kernel driver, to check that
//!   opening it fails with the documented error.
//! - `VFIO_NIC_PEER_IF=eth0`: the Linux netdev of the port wired to ours (kernel-peer layout);
//!   the peer test configures a VLAN interface on it and pings our port.
//!
//! Files: `regtest.rs` (register self-test), `drv.rs` (helpers for driver-level tests),
//! `traffic.rs` (link, counters, 10,000-frame transfer, loopback, drop and reopen),
//! `vlan_tests.rs` (VLAN modes, filter, TPID), `peer.rs` (ARP/ICMP responder for the kernel peer).
//!
//! Output: one line per test (`ok`, `FAIL`, `skip` and the test name), then a final
//! `N passed, M failed, K skipped` line; the exit status is non-zero when anything failed. Tests
//! that need two ports wired together are skipped, never passed, when given one port.

mod cli_tests;
mod drv;
mod peer;
mod traffic;
mod vlan_tests;

use vfio_nic::selftest::regtest;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use vfio_nic::device::MacAddr;
use vfio_nic::dma::{DmaMemory, Pool, PoolConfig};
use vfio_nic::ids::{self, Family};
use vfio_nic::mmio::Mmio;
use vfio_nic::pci::PciAddress;
use vfio_nic::regs::{igb, ixgbe};
use vfio_nic::vfio::VfioDevice;
use vfio_nic::Error;

/// What a test learns from the environment.
struct Ctx {
    ports: Vec<PciAddress>,
    expect_macs: Option<Vec<MacAddr>>,
    other_driver_port: Option<PciAddress>,
    /// The Linux netdev wired to our first port (kernel-peer layout).
    peer_if: Option<String>,
    /// That netdev's MAC (`VFIO_NIC_PEER_MAC`), when known.
    peer_mac: Option<MacAddr>,
}

enum Outcome {
    Pass(String),
    Fail(String),
    Skip(String),
}

type TestFn = fn(&Ctx) -> Outcome;

/// Every test, in the order it runs.
const TESTS: &[(&str, TestFn)] = &[
    ("vfio_open_read_mac", vfio_open_read_mac),
    ("config_space_bus_master", config_space_bus_master),
    ("register_test", register_test),
    ("dma_map_through_iommu", dma_map_through_iommu),
    ("open_twice_fails", open_twice_fails),
    ("two_ports_share_container", two_ports_share_container),
    ("other_driver_refused", other_driver_refused),
    (
        "driver_open_link_mac_counters",
        traffic::driver_open_link_mac_counters,
    ),
    ("traffic_10k_mixed_sizes", traffic::traffic_10k_mixed_sizes),
    ("mac_loopback", traffic::mac_loopback),
    (
        "drop_mid_traffic_and_reopen",
        traffic::drop_mid_traffic_and_reopen,
    ),
    ("vlan_modes_matrix", vlan_tests::vlan_modes_matrix),
    ("vlan_filter_table", vlan_tests::vlan_filter_table),
    ("vlan_tpid_88a8", vlan_tests::vlan_tpid_88a8),
    ("vlan_wire_capture", vlan_tests::vlan_wire_capture),
    ("kernel_peer_vlan_ping", peer::kernel_peer_vlan_ping),
    ("cli_info_regs_selftest", cli_tests::cli_info_regs_selftest),
    (
        "cli_respond_and_capture_kernel_peer",
        cli_tests::cli_respond_and_capture_kernel_peer,
    ),
];

fn main() -> ExitCode {
    let Ok(list) = std::env::var("VFIO_NIC_PORTS") else {
        println!(
            "vfio-nic-hwtests: set VFIO_NIC_PORTS=0000:01:00.0[,0000:02:00.0] (ports bound to vfio-pci; two ports must be wired to each other) to run the on-device suite; nothing was run"
        );
        return ExitCode::SUCCESS;
    };
    let ctx = match context(&list) {
        Ok(c) => c,
        Err(e) => {
            println!("vfio-nic-hwtests: {e}");
            println!("0 passed, 1 failed");
            return ExitCode::FAILURE;
        }
    };
    let filter = std::env::args().nth(1);
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    for (name, test) in TESTS {
        if filter.as_deref().is_some_and(|f| !name.contains(f)) {
            continue;
        }
        let t0 = Instant::now();
        let outcome = std::panic::catch_unwind(|| test(&ctx))
            .unwrap_or_else(|p| Outcome::Fail(format!("panicked: {}", panic_text(&p))));
        let ms = t0.elapsed().as_millis();
        match outcome {
            Outcome::Pass(d) => {
                passed += 1;
                println!("ok   {name} ({ms} ms) {d}");
            }
            Outcome::Fail(d) => {
                failed += 1;
                println!("FAIL {name} ({ms} ms): {d}");
            }
            Outcome::Skip(d) => {
                skipped += 1;
                println!("skip {name}: {d}");
            }
        }
    }
    println!("{passed} passed, {failed} failed, {skipped} skipped");
    if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into())
}

fn context(list: &str) -> Result<Ctx, String> {
    let ports = list
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.trim()
                .parse::<PciAddress>()
                .map_err(|e| format!("VFIO_NIC_PORTS: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if ports.is_empty() {
        return Err("VFIO_NIC_PORTS names no port".into());
    }
    let expect_macs = match std::env::var("VFIO_NIC_EXPECT_MACS") {
        Ok(s) => Some(
            s.split(',')
                .map(|m| {
                    m.trim()
                        .parse::<MacAddr>()
                        .map_err(|e| format!("VFIO_NIC_EXPECT_MACS: {e}"))
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Err(_) => None,
    };
    let other_driver_port = match std::env::var("VFIO_NIC_OTHER_DRIVER_PORT") {
        Ok(s) if !s.is_empty() => Some(
            s.parse()
                .map_err(|e| format!("VFIO_NIC_OTHER_DRIVER_PORT: {e}"))?,
        ),
        _ => None,
    };
    let peer_if = std::env::var("VFIO_NIC_PEER_IF")
        .ok()
        .filter(|s| !s.is_empty());
    let peer_mac = match std::env::var("VFIO_NIC_PEER_MAC") {
        Ok(s) if !s.is_empty() => Some(
            s.trim()
                .parse::<MacAddr>()
                .map_err(|e| format!("VFIO_NIC_PEER_MAC: {e}"))?,
        ),
        _ => None,
    };
    Ok(Ctx {
        ports,
        expect_macs,
        other_driver_port,
        peer_if,
        peer_mac,
    })
}

/// Opens a port and tells which family it is.
fn open(addr: PciAddress) -> Result<(VfioDevice, Family), String> {
    let dev = VfioDevice::open(addr).map_err(|e| e.to_string())?;
    let (v, d) = dev.vendor_device().map_err(|e| e.to_string())?;
    let (family, _) = ids::lookup(v, d).ok_or_else(|| {
        format!(
            "{addr}: {v:04x}:{d:04x} is not a NIC this suite knows ({})",
            ids::supported_list()
        )
    })?;
    Ok((dev, family))
}

/// Reads receive-address entry 0, where the NVM MAC is loaded at reset.
fn read_mac(m: &dyn Mmio, family: Family) -> Result<MacAddr, String> {
    let (ral, rah, av) = match family {
        Family::Igb => (igb::RAL.at(0), igb::RAH.at(0), igb::rah::AV),
        Family::Ixgbe => (ixgbe::RAL.at(0), ixgbe::RAH.at(0), ixgbe::rah::AV),
    };
    let lo = m.read(ral);
    let hi = m.read(rah);
    if hi & av.bit() == 0 {
        return Err(format!(
            "RAH0 {hi:#010x} has no address-valid bit: the NVM MAC was not loaded"
        ));
    }
    let l = lo.to_le_bytes();
    let h = hi.to_le_bytes();
    Ok(MacAddr([l[0], l[1], l[2], l[3], h[0], h[1]]))
}

fn vfio_open_read_mac(ctx: &Ctx) -> Outcome {
    let mut seen = Vec::new();
    for (i, &addr) in ctx.ports.iter().enumerate() {
        let (dev, family) = match open(addr) {
            Ok(x) => x,
            Err(e) => return Outcome::Fail(e),
        };
        let bar = match dev.map_bar(0) {
            Ok(b) => b,
            Err(e) => return Outcome::Fail(e.to_string()),
        };
        let mac = match read_mac(&bar, family) {
            Ok(m) => m,
            Err(e) => return Outcome::Fail(format!("{addr}: {e}")),
        };
        if mac.is_multicast() || mac == MacAddr::default() {
            return Outcome::Fail(format!("{addr}: MAC {mac} is not a unicast address"));
        }
        if let Some(expect) = ctx.expect_macs.as_ref().and_then(|v| v.get(i)) {
            if *expect != mac {
                return Outcome::Fail(format!("{addr}: MAC {mac}, expected {expect}"));
            }
        }
        seen.push(format!("{addr} {} MAC {mac}", family.name()));
    }
    Outcome::Pass(seen.join(", "))
}

fn config_space_bus_master(ctx: &Ctx) -> Outcome {
    let addr = ctx.ports[0];
    let (dev, _) = match open(addr) {
        Ok(x) => x,
        Err(e) => return Outcome::Fail(e),
    };
    verdict(|| {
        let vendor = dev.config_read_u16(0).map_err(text)?;
        dev.enable_bus_master().map_err(text)?;
        let cmd = dev.config_read_u16(4).map_err(text)?;
        if cmd & 0b110 != 0b110 {
            return Err(format!(
                "COMMAND {cmd:#06x} lacks memory-space or bus-master after enabling"
            ));
        }
        dev.disable_bus_master().map_err(text)?;
        let off = dev.config_read_u16(4).map_err(text)?;
        if off & 0b100 != 0 {
            return Err(format!(
                "COMMAND {off:#06x} still has bus-master after disabling"
            ));
        }
        Ok(format!(
            "vendor {vendor:#06x}, COMMAND {cmd:#06x} -> {off:#06x}"
        ))
    })
}

fn register_test(ctx: &Ctx) -> Outcome {
    let mut done = Vec::new();
    for &addr in &ctx.ports {
        let (dev, family) = match open(addr) {
            Ok(x) => x,
            Err(e) => return Outcome::Fail(e),
        };
        let bar = match dev.map_bar(0) {
            Ok(b) => b,
            Err(e) => return Outcome::Fail(e.to_string()),
        };
        let table = match family {
            Family::Igb => regtest::IGB_82576,
            Family::Ixgbe => regtest::IXGBE_82599,
        };
        match regtest::run(&bar, table) {
            Ok(n) => done.push(format!("{addr}: {n} checks")),
            Err(e) => return Outcome::Fail(format!("{addr}: {e}")),
        }
    }
    Outcome::Pass(done.join(", "))
}

fn dma_map_through_iommu(ctx: &Ctx) -> Outcome {
    let addr = ctx.ports[0];
    let (dev, _) = match open(addr) {
        Ok(x) => x,
        Err(e) => return Outcome::Fail(e),
    };
    verdict(|| {
        let mapper = dev.dma_mapper();
        let a = DmaMemory::allocate(64 * 1024, mapper.clone()).map_err(text)?;
        let b = DmaMemory::allocate(3 * 4096, mapper.clone()).map_err(text)?;
        let pool = Pool::new(
            PoolConfig {
                buffers: 512,
                ..PoolConfig::default()
            },
            mapper.clone(),
        )
        .map_err(text)?;
        let ranges = [
            (a.iova(), a.len() as u64),
            (b.iova(), b.len() as u64),
            (pool.memory().iova(), pool.memory().len() as u64),
        ];
        for (i, &(s, l)) in ranges.iter().enumerate() {
            if s == 0 {
                return Err("an IOVA of 0 was handed out".into());
            }
            for &(s2, l2) in &ranges[i + 1..] {
                if s < s2 + l2 && s2 < s + l {
                    return Err(format!(
                        "IOVA ranges overlap: {s:#x}+{l:#x} and {s2:#x}+{l2:#x}"
                    ));
                }
            }
        }
        Ok(format!(
            "{} mappings at {:#x}, {:#x}, {:#x} (huge pages: {})",
            ranges.len(),
            ranges[0].0,
            ranges[1].0,
            ranges[2].0,
            a.is_huge()
        ))
    })
}

/// Turns a check's result into an outcome.
fn verdict(check: impl FnOnce() -> Result<String, String>) -> Outcome {
    match check() {
        Ok(detail) => Outcome::Pass(detail),
        Err(why) => Outcome::Fail(why),
    }
}

fn text(e: Error) -> String {
    e.to_string()
}

fn open_twice_fails(ctx: &Ctx) -> Outcome {
    let addr = ctx.ports[0];
    let first = match VfioDevice::open(addr) {
        Ok(d) => d,
        Err(e) => return Outcome::Fail(e.to_string()),
    };
    let second = VfioDevice::open(addr);
    let verdict = match second {
        Err(Error::AlreadyOpen { .. }) => None,
        Err(e) => Some(format!("second open failed with the wrong error: {e}")),
        Ok(_) => Some("second open of the same port succeeded".into()),
    };
    drop(first);
    if let Some(v) = verdict {
        return Outcome::Fail(v);
    }
    // After the first handle is gone the port opens again.
    match VfioDevice::open(addr) {
        Ok(_) => {
            Outcome::Pass("second open refused with AlreadyOpen; reopen after drop works".into())
        }
        Err(e) => Outcome::Fail(format!("reopen after drop failed: {e}")),
    }
}

fn two_ports_share_container(ctx: &Ctx) -> Outcome {
    if ctx.ports.len() < 2 {
        return Outcome::Skip("needs two ports".into());
    }
    let (a, _) = match open(ctx.ports[0]) {
        Ok(x) => x,
        Err(e) => return Outcome::Fail(e),
    };
    let (b, _) = match open(ctx.ports[1]) {
        Ok(x) => x,
        Err(e) => return Outcome::Fail(e),
    };
    let (ma, mb) = (a.dma_mapper(), b.dma_mapper());
    if !Arc::ptr_eq(&ma, &mb) {
        return Outcome::Fail("the two ports got different VFIO containers".into());
    }
    // Memory mapped through one port's container is usable by both.
    match DmaMemory::allocate(4096, ma) {
        Ok(m) => Outcome::Pass(format!("one container; shared mapping at {:#x}", m.iova())),
        Err(e) => Outcome::Fail(e.to_string()),
    }
}

fn other_driver_refused(ctx: &Ctx) -> Outcome {
    let Some(addr) = ctx.other_driver_port else {
        return Outcome::Skip(
            "set VFIO_NIC_OTHER_DRIVER_PORT to a port bound to a kernel driver".into(),
        );
    };
    match VfioDevice::open(addr) {
        Ok(_) => Outcome::Fail(format!(
            "{addr} opened although it is not bound to vfio-pci"
        )),
        Err(e @ Error::NotBoundToVfio { .. }) => {
            let text = e.to_string();
            if text.contains("driver_override") && text.contains("drivers_probe") {
                Outcome::Pass(text)
            } else {
                Outcome::Fail(format!("error does not say how to rebind: {text}"))
            }
        }
        Err(e) => Outcome::Fail(format!("wrong error: {e}")),
    }
}
