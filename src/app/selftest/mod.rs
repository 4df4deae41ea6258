//! Offline self-test of one port, like `ethtool -t PORT offline`: register test, MAC loopback,
//! interrupt, link.
//!
//! # Why these three
//! They localise a bring-up failure before any cable or peer is involved: the register test
//! proves the BAR mapping and the register offsets ([`regtest`]); MAC loopback proves descriptor
//! rings, DMA through the IOMMU and the buffer pool, since frames leave through the transmit ring
//! and come back through the receive ring, byte for byte, without the PHY; the link test then
//! proves the outside world. The interrupt test (a cause set by hand, EICS, must arrive as an
//! MSI-X message on the queue's eventfd) proves the interrupt path through VFIO and the IOMMU's
//! interrupt remapping, where the driver has an interrupt mode. Each test opens the port afresh (every open resets the device), so
//! one test's configuration cannot leak into the next.
//!
//! What applies depends on the port: the null device has no registers and no path from
//! transmit to receive, so only its link test runs and the others report "not applicable"; the
//! software 82599 (`sim:N`) runs all three against its modelled registers.

pub mod regtest;

use std::time::{Duration, Instant};

use crate::app::wire::{build_udp_frame, UdpFlow};
use crate::device::{MacAddr, Port, RxQueue, TxQueue};
use crate::devices::ids::{self, Family};
use crate::devices::qm::model::{QmDevice, PORTALS_PER_PORT};
use crate::devices::sim::SimPort;
use crate::devices::virtio;
use crate::devices::{self, AnyPort, PortConfig, PortName};
use crate::error::Result;
use crate::platform::bus::{Bus, PciBus};
use crate::platform::vfio::{VfioDevice, VfioOptions};

/// The outcome of one test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It passed.
    Pass,
    /// It failed; the detail says how.
    Fail,
    /// It does not apply to this port; the detail says why.
    NotApplicable,
}

impl Verdict {
    /// "PASS", "FAIL" or "N/A".
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::NotApplicable => "N/A",
        }
    }
}

/// One test's report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestReport {
    /// Short name ("register", "loopback", "link").
    pub name: &'static str,
    /// The outcome.
    pub verdict: Verdict,
    /// What was checked, or what went wrong (one line).
    pub detail: String,
    /// How long it took.
    pub duration: Duration,
}

/// Options of the self-test.
#[derive(Clone, Debug)]
pub struct SelftestConfig {
    /// How to open the port (loopback is switched on for the loopback test only).
    pub port: PortConfig,
    /// Frames sent in the loopback test.
    pub frames: usize,
    /// Their size (60..=1514).
    pub frame_size: usize,
    /// How long the loopback test waits for its frames.
    pub timeout: Duration,
}

impl Default for SelftestConfig {
    fn default() -> Self {
        SelftestConfig {
            port: PortConfig::default(),
            frames: 64,
            frame_size: 128,
            timeout: Duration::from_secs(2),
        }
    }
}

/// The register test table of a PCI id, if there is one.
pub fn table_for(pci_id: (u16, u16)) -> Option<(&'static str, &'static [regtest::RegTest])> {
    match ids::lookup(pci_id.0, pci_id.1) {
        Some((Family::Igb, _)) => Some(("82576", regtest::IGB_82576)),
        Some((Family::Ixgbe, _)) => Some(("82599", regtest::IXGBE_82599)),
        // A virtio device's registers are not in BAR0: see `virtio::port::register_test`.
        Some((Family::Virtio, _)) | None => None,
    }
}

/// Whether the PCI device at `addr` is a virtio device (by its sysfs ids).
fn is_virtio(addr: crate::platform::pci::PciAddress) -> bool {
    crate::platform::pci::Sysfs::default()
        .vendor_device(addr)
        .is_ok_and(|(v, d)| matches!(ids::lookup(v, d), Some((Family::Virtio, _))))
}

fn report(
    name: &'static str,
    start: Instant,
    r: std::result::Result<String, String>,
) -> TestReport {
    let (verdict, detail) = match r {
        Ok(d) => (Verdict::Pass, d),
        Err(d) => (Verdict::Fail, d),
    };
    TestReport {
        name,
        verdict,
        detail,
        duration: start.elapsed(),
    }
}

fn not_applicable(name: &'static str, why: &str) -> TestReport {
    TestReport {
        name,
        verdict: Verdict::NotApplicable,
        detail: why.to_string(),
        duration: Duration::ZERO,
    }
}

fn run_table<B: Bus>(bus: &B) -> std::result::Result<String, String> {
    let Some((chip, table)) = table_for(bus.pci_id()) else {
        let (v, d) = bus.pci_id();
        return Err(format!("no register test table for {v:04x}:{d:04x}"));
    };
    let regs: &B::Mmio = bus.regs();
    let n = regtest::run(regs, table)?;
    Ok(format!(
        "{n} checks on {} registers ({chip} table)",
        table.iter().map(|t| t.count as usize).sum::<usize>()
    ))
}

/// The register test (see [`regtest`]) on the device behind `name`, opened without a driver.
/// A PCI device is reset through VFIO first (if it can be), so the test's precondition, a
/// quiesced device, holds. Fails with an error only when the device cannot be opened.
pub fn register_test(name: &str, vfio: &VfioOptions) -> Result<TestReport> {
    let start = Instant::now();
    match name.parse::<PortName>()? {
        PortName::Null(_) => Ok(not_applicable(
            "register",
            "the null device has no registers",
        )),
        PortName::Sim(i) => {
            let bus = SimPort::open_named(i, &Default::default())?;
            Ok(report("register", start, run_table(&bus)))
        }
        PortName::AfPacket(_) => Ok(not_applicable(
            "register",
            "an af_packet port is a kernel interface, with no registers of ours",
        )),
        PortName::Qm(i) => {
            let dev = QmDevice::open_named(i)?;
            let r = (0..PORTALS_PER_PORT).try_fold(0, |n, p| {
                let (_, cinh) = dev.portal(p).expect("every port has its portals");
                Ok::<_, String>(n + regtest::run(&*cinh, regtest::QBMAN_PORTAL)?)
            });
            Ok(report(
                "register",
                start,
                r.map(|n| format!("{n} checks on the interrupt registers of {PORTALS_PER_PORT} software portals (qbman table)")),
            ))
        }
        PortName::VirtioModel(i) => {
            let m = crate::devices::virtio::model::VirtioModel::open_named(i);
            let t = m.transport(&format!("virtio:{i}"), Duration::from_secs(2));
            Ok(report("register", start, virtio::port::register_test(&t)))
        }
        PortName::Pci(addr) if is_virtio(addr) => {
            let dev = VfioDevice::open_with(addr, vfio)?;
            let t = virtio::port::pci_transport(&dev, Duration::from_secs(2))?;
            Ok(report("register", start, virtio::port::register_test(&t)))
        }
        PortName::Pci(addr) => {
            let bus = PciBus::from_device(VfioDevice::open_with(addr, vfio)?)?;
            let reset = bus.device().reset()?;
            tracing::debug!(port = %addr, reset, "register test on a freshly opened device");
            Ok(report("register", start, run_table(&bus)))
        }
    }
}

/// The MAC loopback test: opens the port with MAC loopback on, sends `cfg.frames` distinct
/// IPv4/UDP frames and expects each back, in order and byte-identical.
pub fn loopback_test(name: &str, cfg: &SelftestConfig) -> Result<TestReport> {
    match name.parse::<PortName>()? {
        PortName::Null(_) => {
            return Ok(not_applicable(
                "loopback",
                "the null device discards what it sends and invents what it receives",
            ))
        }
        PortName::AfPacket(_) => {
            return Ok(not_applicable(
                "loopback",
                "an af_packet port cannot put the interface's MAC into loopback",
            ))
        }
        PortName::Pci(addr) if is_virtio(addr) => {
            return Ok(not_applicable(
                "loopback",
                "virtio-net has no MAC loopback; traffic tests use a peer on the same backend",
            ))
        }
        PortName::VirtioModel(_) => return Ok(not_applicable(
            "loopback",
            "virtio-net has no MAC loopback; traffic tests use the wired peer (virtio:N and N^1)",
        )),
        PortName::Qm(_) => {
            return Ok(not_applicable(
                "loopback",
                "the qm model has no MAC loopback (a DPNI loops back through its DPMAC, which \
                 is not modelled); traffic tests use the wired peer",
            ))
        }
        _ => {}
    }
    let mut pc = cfg.port.clone();
    pc.ixgbe.loopback = true;
    pc.igb.loopback = true;
    let start = Instant::now();
    let mut port = devices::open(name, &pc)?;
    let mac = port.info().mac;
    let r = loopback_frames(&mut port, mac, cfg);
    drop(port);
    Ok(report("loopback", start, r))
}

fn loopback_frames(
    port: &mut AnyPort,
    mac: MacAddr,
    cfg: &SelftestConfig,
) -> std::result::Result<String, String> {
    let (mut rx, mut tx) = port.take_queues().map_err(|e| e.to_string())?;
    let (rx, tx) = (&mut rx[0], &mut tx[0]);
    let flow = UdpFlow {
        dst_mac: mac,
        src_mac: mac,
        src_ip: [198, 18, 0, 1].into(),
        dst_ip: [198, 18, 0, 2].into(),
        src_port: 1024,
        dst_port: 9,
        size: cfg.frame_size,
    };
    let mut sent = Vec::with_capacity(cfg.frames);
    let mut frame = Vec::new();
    for seq in 0..cfg.frames as u64 {
        if !build_udp_frame(&flow, seq, &mut frame) {
            return Err(format!(
                "frame size {} is outside 60..=1514",
                cfg.frame_size
            ));
        }
        sent.push(frame.clone());
    }
    let mut got = Vec::new();
    let mut next = 0;
    let mut batch = Vec::new();
    let deadline = Instant::now() + cfg.timeout;
    while got.len() < sent.len() && Instant::now() < deadline {
        while next < sent.len() && batch.len() < 32 {
            let Some(mut p) = rx.pool().alloc() else {
                break;
            };
            if !p.set_data(&sent[next]) {
                return Err("a test frame does not fit a pool buffer".into());
            }
            batch.push(p);
            next += 1;
        }
        // What the ring does not take stays in `batch` and goes first next round.
        tx.tx_burst(&mut batch).map_err(|e| e.to_string())?;
        let mut rxb = Vec::new();
        rx.rx_burst(&mut rxb, 64).map_err(|e| e.to_string())?;
        got.extend(rxb.iter().map(|p| p.data().to_vec()));
    }
    if got.len() < sent.len() {
        return Err(format!(
            "{} of {} frames came back within {:?} (rx queue: {:?}); check the loopback \
             configuration and the receive ring",
            got.len(),
            sent.len(),
            cfg.timeout,
            rx.stats()
        ));
    }
    for (i, (s, g)) in sent.iter().zip(&got).enumerate() {
        if s != g {
            let at = s
                .iter()
                .zip(g)
                .position(|(a, b)| a != b)
                .unwrap_or(s.len().min(g.len()));
            return Err(format!(
                "frame {i} came back different: sent {} bytes, got {}, first difference at byte {at}",
                s.len(),
                g.len()
            ));
        }
    }
    Ok(format!(
        "{} frames of {} bytes came back byte-identical",
        sent.len(),
        cfg.frame_size
    ))
}

/// The link test: opens the port normally and checks the link is up.
pub fn link_test(name: &str, cfg: &SelftestConfig) -> Result<TestReport> {
    let start = Instant::now();
    let port = devices::open(name, &cfg.port)?;
    let r = match port.link() {
        Ok(l) if l.up => Ok(format!(
            "up, {} Mb/s, {} duplex",
            l.speed_mbps,
            if l.full_duplex { "full" } else { "half" }
        )),
        Ok(_) => Err("link down: check the cable and the link partner".to_string()),
        Err(e) => Err(e.to_string()),
    };
    Ok(report("link", start, r))
}

/// The interrupt test: opens the port in interrupt mode, arms its first receive queue and sets
/// the queue's cause by hand (EICS); the vector's MSI-X message must reach the queue's eventfd
/// (VFIO_DEVICE_SET_IRQS) within 2 s. Not applicable where the driver or device has no
/// interrupt mode (the reason is the refusal's own).
pub fn interrupt_test(name: &str, cfg: &SelftestConfig) -> Result<TestReport> {
    let mut port_cfg = cfg.port.clone();
    let irq = Some(crate::devices::intel::IrqConfig::default());
    port_cfg.igb.interrupts = irq;
    port_cfg.ixgbe.interrupts = irq;
    port_cfg.virtio.interrupts = true;
    let start = Instant::now();
    let mut port = match devices::open(name, &port_cfg) {
        Ok(p) => p,
        Err(crate::Error::NotSupported { why, .. }) => {
            return Ok(not_applicable("interrupt", &why))
        }
        Err(e) => return Err(e),
    };
    let vectors = match &port {
        AnyPort::Igb(p) => p.interrupts().len(),
        AnyPort::Ixgbe(p) => p.interrupts().len(),
        AnyPort::IxgbeSim(p) => p.interrupts().len(),
        AnyPort::Virtio(_) => {
            return Ok(not_applicable(
                "interrupt",
                devices::any::NO_MANUAL_INTERRUPT,
            ))
        }
        _ => {
            return Ok(not_applicable(
                "interrupt",
                &devices::kinds::no_interrupt_mode(),
            ))
        }
    };
    let (mut rx, _tx) = port.take_queues()?;
    let q = &mut rx[0];
    let r = (|| -> std::result::Result<String, String> {
        // Frames already waiting would make arming report them instead of sleeping: take them.
        let mut batch = Vec::new();
        while q.rx_burst(&mut batch, 64).map_err(|e| e.to_string())? > 0 {
            batch.clear();
        }
        q.arm_interrupt().map_err(|e| e.to_string())?;
        let sent = Instant::now();
        q.trigger_interrupt().map_err(|e| e.to_string())?;
        let irq = q.interrupt().cloned().ok_or("the queue has no interrupt")?;
        let fired = irq
            .wait(Duration::from_secs(2))
            .map_err(|e| e.to_string())?;
        q.disarm_interrupt();
        if fired {
            Ok(format!(
                "EICS on vector {} arrived through MSI-X in {:.2} ms ({vectors} vector(s), one per receive queue)",
                irq.vector(),
                sent.elapsed().as_secs_f64() * 1e3
            ))
        } else {
            Err(format!(
                "EICS set vector {}'s cause but no interrupt arrived within 2 s: check that the IOMMU's interrupt remapping and MSI-X work (dmesg)",
                irq.vector()
            ))
        }
    })();
    Ok(report("interrupt", start, r))
}

/// All four tests: `ethtool -t`'s three (register, loopback, link) with the interrupt test
/// before the link test.
pub fn run(name: &str, cfg: &SelftestConfig) -> Result<Vec<TestReport>> {
    Ok(vec![
        register_test(name, &cfg.port.vfio)?,
        loopback_test(name, cfg)?,
        interrupt_test(name, cfg)?,
        link_test(name, cfg)?,
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> SelftestConfig {
        let mut c = SelftestConfig::default();
        c.port.ixgbe.rx_ring = 64;
        c.port.ixgbe.tx_ring = 64;
        c.port.ixgbe.pool.buffers = 256;
        c.port.ixgbe.link_timeout = Duration::from_millis(500);
        c
    }

    #[test]
    fn the_software_82599_passes_every_test() {
        let r = run("sim:90", &small()).unwrap();
        let names: Vec<_> = r.iter().map(|t| t.name).collect();
        assert_eq!(names, ["register", "loopback", "interrupt", "link"]);
        for t in &r {
            assert_eq!(t.verdict, Verdict::Pass, "{t:?}");
        }
        assert!(r[2].detail.contains("arrived through MSI-X"), "{r:?}");
    }

    #[test]
    fn the_qm_device_passes_its_register_and_link_tests() {
        let mut c = small();
        c.port.qm.pool.buffers = 256;
        c.port.qm.hw_buffers = 64;
        let r = run("qm:62", &c).unwrap();
        let v: Vec<_> = r.iter().map(|t| t.verdict).collect();
        assert_eq!(
            v,
            [
                Verdict::Pass,
                Verdict::NotApplicable,
                Verdict::NotApplicable,
                Verdict::Pass
            ],
            "{r:?}"
        );
    }

    #[test]
    fn the_null_device_runs_only_the_link_test() {
        let r = run("null:3", &small()).unwrap();
        let v: Vec<_> = r.iter().map(|t| t.verdict).collect();
        assert_eq!(
            v,
            [
                Verdict::NotApplicable,
                Verdict::NotApplicable,
                Verdict::NotApplicable,
                Verdict::Pass
            ]
        );
    }
}
