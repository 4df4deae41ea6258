//! `info`, `stats` and `selftest`: looking at one port through its driver.
//!
//! Opening a port resets it (that is how every driver here starts), so `info` shows the state
//! right after bring-up and `stats` shows counters since this command opened the port; what
//! another process did to the device is gone by then (VFIO lets one process own a device).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use vfio_nic::app::selftest::{self, SelftestConfig, Verdict};
use vfio_nic::device::{Port, QueueStats, RxQueue, TxQueue};
use vfio_nic::devices::qm::model::{QmDevice, PORTALS_PER_PORT};
use vfio_nic::devices::sim;
use vfio_nic::devices::{self, AnyPort, PortName};
use vfio_nic::health::clock;
use vfio_nic::platform::bus::Bus;
use vfio_nic::platform::dma::Pool;
use vfio_nic::platform::mmio::Mmio;
use vfio_nic::platform::vfio;
use vfio_nic::vlan::{VlanConfig, VlanHardware};
use vfio_nic::{Error, Result};

use crate::common;
use crate::list;
use crate::{CliError, CliResult};

/// Region names of a VFIO PCI device, by index.
const REGIONS: [&str; 6] = ["BAR0", "BAR1", "BAR2", "BAR3", "BAR4", "BAR5"];

fn size_text(n: u64) -> String {
    match n {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} B"),
    }
}

/// The BARs of a port: through the VFIO device for PCI ports (opened and closed before the
/// driver opens it), the modelled BAR0 for sim ports, the modelled MC portal and software
/// portals for qm ports, none for null ports.
fn bars(name: &str) -> Result<Vec<Value>> {
    match name.parse::<PortName>()? {
        PortName::Null(_) | PortName::AfPacket(_) => Ok(Vec::new()),
        PortName::Sim(_) => Ok(vec![json!({
            "name": "BAR0", "size": sim::BAR_LEN, "mmap": false, "note": "modelled registers",
        })]),
        PortName::VirtioModel(_) => Ok(vec![json!({
            "name": "BAR0", "size": vfio_nic::devices::virtio::model::BAR_LEN, "mmap": false,
            "note": "modelled common configuration, device configuration and doorbells",
        })]),
        PortName::Qm(i) => {
            let dev = QmDevice::open_named(i)?;
            let mut out = vec![json!({
                "name": "BAR0", "size": dev.regs().len(), "mmap": false,
                "note": "modelled MC command portal (our packaging: DPAA2 objects are fsl-mc regions)",
            })];
            for p in 0..PORTALS_PER_PORT {
                let (cena, cinh) = dev.portal(p).expect("every port has its portals");
                out.push(json!({"name": format!("portal {p} CENA"), "size": cena.len(), "mmap": false, "note": "modelled portal memory"}));
                out.push(json!({"name": format!("portal {p} CINH"), "size": cinh.len(), "mmap": false, "note": "modelled portal registers"}));
            }
            Ok(out)
        }
        PortName::Pci(addr) => {
            // The device alone: a virtio device has no BAR0 to map.
            let dev =
                vfio_nic::platform::vfio::VfioDevice::open_with(addr, &common::vfio_options())?;
            let mut out = Vec::new();
            for (i, region) in REGIONS.iter().enumerate() {
                let r = dev.region_info(i as u32)?;
                if r.size > 0 {
                    out.push(json!({"name": region, "size": r.size, "mmap": r.is_mappable()}));
                }
            }
            Ok(out)
        }
    }
}

/// What interrupts a port's device offers (through VFIO, or modelled), for the Intel drivers'
/// interrupt mode (`null` for the null, af_packet and qm ports: they are polled).
fn interrupts(port: &AnyPort) -> Result<Value> {
    let counts = match port {
        AnyPort::Igb(p) => p.bus().device().irq_counts()?,
        AnyPort::Ixgbe(p) => p.bus().device().irq_counts()?,
        // The model's MSI-X: the 16 EICR queue vectors, each an eventfd it signals.
        AnyPort::IxgbeSim(_) => vfio_nic::platform::vfio::IrqCounts {
            msix: 16,
            ..Default::default()
        },
        _ => return Ok(Value::Null),
    };
    Ok(json!({"msix": counts.msix, "msi": counts.msi, "intx": counts.intx, "interrupt_mode": true}))
}

fn interrupts_text(v: &Value) -> String {
    if v.is_null() {
        return "none (this device has no interrupt mode: it is polled)".into();
    }
    format!(
        "MSI-X {} vectors, MSI {}, INTx {}; interrupt mode {}",
        v["msix"],
        v["msi"],
        v["intx"],
        if v["msix"] == 0 {
            "not possible without MSI-X (polled)"
        } else {
            "available (--interrupts: one MSI-X vector per receive queue)"
        }
    )
}

/// The DMA backend of a PCI port: the one it is opened through, and each backend's verdict
/// (`null` for ports that are not PCI devices).
fn dma(name: &str) -> Result<Value> {
    let PortName::Pci(addr) = name.parse::<PortName>()? else {
        return Ok(Value::Null);
    };
    let host = vfio::Host::default();
    let options = common::vfio_options();
    let chosen = vfio::choose(vfio::assess(&host, addr, &options), &options, None);
    Ok(list::backends_json(
        &vfio::assess(&host, addr, &options),
        &chosen,
    ))
}

fn dma_text(v: &Value) -> String {
    let others: Vec<String> = v["backends"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| Some(k.as_str()) != v["would_use"].as_str())
                .map(|(k, b)| match b["why_not"].as_str() {
                    None => format!("{k} also possible"),
                    Some(w) => format!("{k} not: {w}"),
                })
                .collect()
        })
        .unwrap_or_default();
    format!(
        "{} ({})",
        v["would_use"].as_str().unwrap_or("none"),
        others.join("; ")
    )
}

/// `vfio-nic info PORT`.
pub fn info(name: &str, json_out: bool) -> Result<()> {
    let dma = dma(name)?;
    let bars = bars(name)?;
    let mut port = devices::open(name, &common::port_config(1))?;
    let info = port.info();
    let link = port.link()?;
    // When the driver saw the link so (a driver that watches its device keeps the record).
    let seen = port.health().map(|h| h.link());
    let caps = port.vlan_caps();
    let irqs = interrupts(&port)?;
    let ctl = common::vlan_control(&mut port, &VlanConfig::default())?;
    let v = json!({
        "port": info.name,
        "driver": info.driver,
        "model": info.model,
        "pci_id": info.pci_id.map(|(v, d)| format!("{v:04x}:{d:04x}")),
        "mac": info.mac.to_string(),
        "link": {"up": link.up, "speed_mbps": link.speed_mbps, "full_duplex": link.full_duplex,
                 "since": seen.map(|r| clock(r.since)), "changes": seen.map(|r| r.changes)},
        "bars": bars,
        "queues": {"rx": info.rx_queues, "tx": info.tx_queues,
                    "rx_ring": info.rx_ring, "tx_ring": info.tx_ring},
        "mtu": info.mtu,
        "vlan_caps": {"rx_strip": caps.rx_strip, "tx_insert": caps.tx_insert, "filter": caps.filter,
                       "extended": caps.extended, "tx_insert_extended": caps.tx_insert_extended,
                       "any_tpid": caps.any_tpid,
                       "strip_queues": caps.rx_queues},
        "vlan": common::vlan_json(&ctl),
        "interrupts": irqs,
        "dma": dma,
    });
    if json_out {
        outln!("{v}");
        return Ok(());
    }
    let caps_list: Vec<&str> = [
        (caps.rx_strip, "rx-strip"),
        (caps.tx_insert, "tx-insert"),
        (caps.filter, "filter"),
        (caps.extended, "extended(QinQ)"),
        (caps.tx_insert_extended, "tx-insert-extended"),
        (caps.any_tpid, "any-tpid"),
    ]
    .iter()
    .filter(|c| c.0)
    .map(|c| c.1)
    .collect();
    let bar_text: Vec<String> = v["bars"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|b| {
                    format!(
                        "{} {}{}",
                        b["name"].as_str().unwrap_or(""),
                        size_text(b["size"].as_u64().unwrap_or(0)),
                        b["note"]
                            .as_str()
                            .map(|n| format!(" ({n})"))
                            .unwrap_or_default()
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    outln!("port        {}", info.name);
    outln!("driver      {}", info.driver);
    outln!("model       {}", info.model);
    outln!(
        "pci id      {}",
        v["pci_id"].as_str().unwrap_or("- (not a PCI device)")
    );
    outln!("mac         {}", info.mac);
    if !v["dma"].is_null() {
        outln!("dma         {}", dma_text(&v["dma"]));
    }
    outln!(
        "link        {}",
        match seen {
            Some(r) => r.to_string(),
            None if link.up => format!(
                "up, {} Mb/s, {} duplex",
                link.speed_mbps,
                if link.full_duplex { "full" } else { "half" }
            ),
            None => "down".to_string(),
        }
    );
    outln!(
        "bars        {}",
        if bar_text.is_empty() {
            "none".to_string()
        } else {
            bar_text.join(", ")
        }
    );
    outln!(
        "queues      rx {} x {} descriptors, tx {} x {} descriptors",
        info.rx_queues,
        info.rx_ring,
        info.tx_queues,
        info.tx_ring
    );
    if let Some(mtu) = info.mtu {
        outln!("mtu         {mtu}");
    }
    outln!("interrupts  {}", interrupts_text(&irqs));
    outln!(
        "vlan caps   {}",
        if caps_list.is_empty() {
            "none (software VLAN modes only)".to_string()
        } else {
            format!("{} ({} strip queues)", caps_list.join(" "), caps.rx_queues)
        }
    );
    outln!("vlan        {}", common::vlan_line(&ctl));
    Ok(())
}

/// Options of `stats`.
#[derive(clap::Args, Debug)]
pub struct StatsArgs {
    /// The port.
    pub port: String,
    /// Receive (and drop) for this many seconds before reading the counters (default: read at once).
    #[arg(long, value_name = "S", default_value_t = 0.0)]
    pub duration: f64,
}

fn queue_json(q: &QueueStats) -> Value {
    json!({"packets": q.packets, "bytes": q.bytes, "no_room": q.no_room, "dropped": q.dropped,
           "copied": q.copied})
}

/// `vfio-nic stats PORT`.
pub fn stats(args: &StatsArgs, json_out: bool, stop: Arc<AtomicBool>) -> Result<()> {
    if !(args.duration >= 0.0 && args.duration.is_finite()) {
        return Err(Error::InvalidConfig(format!(
            "--duration {} must be a number of seconds, 0 or more",
            args.duration
        )));
    }
    let mut port = devices::open(&args.port, &common::port_config(1))?;
    let (mut rx, tx) = port.take_queues()?;
    let end = Instant::now() + Duration::from_secs_f64(args.duration);
    let mut batch = Vec::new();
    while Instant::now() < end && !stop.load(std::sync::atomic::Ordering::Relaxed) {
        for q in rx.iter_mut() {
            q.rx_burst(&mut batch, 32)?;
            Pool::free_vec(&mut batch);
        }
    }
    let hw = port.stats()?;
    let health = port.health();
    let rxq: Vec<Value> = rx.iter().map(|q| queue_json(&q.stats())).collect();
    let txq: Vec<Value> = tx.iter().map(|q| queue_json(&q.stats())).collect();
    let pools: Vec<Value> = rx
        .iter()
        .map(|q| {
            let s = q.pool().stats();
            json!({"capacity": s.capacity, "buf_size": q.pool().buf_size(), "free": s.free, "in_use": s.in_use, "alloc_failures": s.alloc_failures, "slow_returns": s.slow_returns})
        })
        .collect();
    if json_out {
        outln!(
            "{}",
            json!({"port": args.port, "seconds": args.duration, "hw": common::hw_json(&hw),
            "rx_queues": rxq, "tx_queues": txq, "pools": pools,
            "link": health.as_ref().map(|h| {
                let l = h.link();
                json!({"up": l.status.up, "speed_mbps": l.status.speed_mbps,
                       "since": clock(l.since), "changes": l.changes})
            }),
            "events": health.as_ref().map(|h| {
                h.events().iter().map(|e| e.to_string()).collect::<Vec<_>>()
            })})
        );
        return Ok(());
    }
    outln!(
        "{}: counters since this command opened the port ({:.1} s of receive)",
        args.port,
        args.duration
    );
    if let Some(h) = &health {
        outln!("link: {}", h.link());
        for e in h.events() {
            outln!("event: {e}");
        }
    }
    if hw.hw.is_empty() {
        outln!("device counters: none (this device has no hardware counters)");
    } else {
        outln!("device counters (datasheet names):");
        for (n, v) in &hw.hw {
            outln!("  {n:<10} {v}");
        }
    }
    outln!("software counters:");
    for (kind, qs) in [("rx", &rxq), ("tx", &txq)] {
        for (i, q) in qs.iter().enumerate() {
            outln!(
                "  {kind} queue {i}: {} packets, {} bytes, {} no room, {} dropped",
                q["packets"],
                q["bytes"],
                q["no_room"],
                q["dropped"]
            );
        }
    }
    for (i, p) in pools.iter().enumerate() {
        outln!(
            "  pool {i}: {} buffers, {} free, {} in use, {} allocation failures, {} buffers home by the slow path",
            p["capacity"],
            p["free"],
            p["in_use"],
            p["alloc_failures"],
            p["slow_returns"]
        );
    }
    Ok(())
}

/// Options of `selftest`.
#[derive(clap::Args, Debug)]
#[command(after_help = selftest_help())]
pub struct SelftestArgs {
    #[arg(help = vfio_nic::devices::kinds::port_arg_help())]
    pub port: String,
    /// Frames sent in the loopback test.
    #[arg(long, default_value_t = 64)]
    pub frames: usize,
    /// Their size in bytes (60..=1514).
    #[arg(long, default_value_t = 128)]
    pub size: usize,
}

/// What `selftest` runs, with the kinds each test applies to from the port table.
fn selftest_help() -> String {
    use vfio_nic::devices::kinds::names_with;
    format!(
        "Like `ethtool -t PORT offline`: a register test (write/read patterns from the Linux \
drivers' tables and the queue manager's portal registers: {} ports), a MAC loopback test \
(frames sent with loopback on must come back byte-identical), an interrupt test (the \
receive queue's cause raised by hand must wake its eventfd: {} ports; virtio-net has no \
register that raises it, so its line says N/A) and a link test. Each test opens the port \
afresh, which resets it.",
        names_with(|k| k.registers),
        names_with(|k| k.interrupts),
    )
}

/// `vfio-nic selftest PORT`.
pub fn selftest(args: &SelftestArgs, json_out: bool) -> CliResult {
    if args.frames == 0 || args.frames > 4096 {
        return Err(Error::InvalidConfig(format!(
            "--frames {} must be between 1 and 4096",
            args.frames
        ))
        .into());
    }
    let cfg = SelftestConfig {
        port: common::port_config(1),
        frames: args.frames,
        frame_size: args.size,
        ..SelftestConfig::default()
    };
    let reports = selftest::run(&args.port, &cfg)?;
    let failed = reports
        .iter()
        .filter(|r| r.verdict == Verdict::Fail)
        .count();
    let verdict = if failed == 0 { "PASS" } else { "FAIL" };
    // The report first; a reader that went away (`| head`) must not hide a failed test, so
    // the verdict below is returned before any error of the printing.
    let printed = (|| -> vfio_nic::Result<()> {
        if json_out {
            let tests: Vec<Value> = reports
                .iter()
                .map(|r| {
                    json!({"name": r.name, "result": r.verdict.label(), "detail": r.detail,
                                 "ms": r.duration.as_secs_f64() * 1e3})
                })
                .collect();
            outln!(
                "{}",
                json!({"port": args.port, "result": verdict, "failed": failed, "tests": tests})
            );
        } else {
            outln!("The test result is {verdict}");
            outln!("The test extra info:");
            for r in &reports {
                outln!(
                    "{:<10} {:<5} {} ({:.1} ms)",
                    r.name,
                    r.verdict.label(),
                    r.detail,
                    r.duration.as_secs_f64() * 1e3
                );
            }
        }
        Ok(())
    })();
    if failed > 0 {
        let first = reports
            .iter()
            .find(|r| r.verdict == Verdict::Fail)
            .map(|r| format!("{}: {}", r.name, r.detail))
            .unwrap_or_default();
        return Err(CliError::Failed(format!(
            "self-test of {} failed ({failed} of {} tests): {first}",
            args.port,
            reports.len()
        )));
    }
    Ok(printed?)
}
