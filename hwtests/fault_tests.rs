//! Faults an appliance meets, on the device: the cable pulled and put back, the card removed
//! under traffic, PCIe errors. Each test asks the fault injector (`fault.rs`) for the fault
//! at the moment it needs it, while traffic flows, and checks what the driver and the tool
//! make of it: the link's change seen and timed, traffic back after the link, a removed port
//! whose bursts fail with `DeviceRemoved` and whose removal completes once it is dropped while
//! the other port keeps forwarding, a function reset after an uncorrectable error with the
//! port's configuration back, and no buffer lost on the way.
//!
//! Ports: `VFIO_NIC_PORTS` is a wired pair A, B (A is faulted, B drives its traffic);
//! `VFIO_NIC_SECOND_PAIR` a second wired pair C, D for the tests that need two wires (C is
//! faulted). The QEMU layout `faults` has both.

use std::process::Command;
use std::time::Duration;

use vfio_nic::app::respond::{arp_request, echo_request};
use vfio_nic::device::{MacAddr, Port, RxQueue};
use vfio_nic::devices::AnyPort;
use vfio_nic::health::{EventKind, Health, Severity};
use vfio_nic::platform::dma::Pool;
use vfio_nic::platform::pci::PciAddress;
use vfio_nic::vlan::{RxMode, VlanConfig, VlanControl, VlanFilter};

use super::cli_tests::{interrupt, wait_serving};
use super::drv;
use super::fault::{
    fail, health, outcome, present, queues, test_frame, tool, tx_pool, wait_until, Flow, Injector,
    OrFail, Res,
};
use super::proc::Bounded;
use super::{step, Ctx, Outcome};

/// How long the driver may take to see a link change (it polls every 100 ms; QEMU's
/// autonegotiation after a link comes back takes a moment more).
const LINK_SEEN: Duration = Duration::from_secs(10);
/// How long traffic may take to come back.
const RESUME: Duration = Duration::from_secs(15);

/// The wired pair A, B, or a skip.
fn pair(ctx: &Ctx) -> Res<(PciAddress, PciAddress)> {
    match ctx.ports[..] {
        [a, b, ..] => Ok((a, b)),
        _ => Err(Outcome::Skip(
            "needs two ports wired to each other (VFIO_NIC_PORTS=A,B)".into(),
        )),
    }
}

/// The second wired pair, or a skip.
fn second_pair(ctx: &Ctx) -> Res<(PciAddress, PciAddress)> {
    ctx.second_pair.ok_or_else(|| {
        Outcome::Skip(
            "needs a second pair of ports wired to each other (VFIO_NIC_SECOND_PAIR=C,D)".into(),
        )
    })
}

fn open(addr: PciAddress) -> Res<AnyPort> {
    drv::open(addr, false).map_err(Outcome::Fail)
}

/// The port's events, one line.
fn events(h: &Health) -> String {
    let e: Vec<String> = h.events().iter().map(|e| e.to_string()).collect();
    e.join("; ")
}

/// The pool of a queue's port back to empty once everything holding its buffers is gone.
fn all_home(what: &str, pool: &Pool) -> Res<()> {
    let s = pool.stats();
    if s.in_use != 0 {
        return fail(format!(
            "{what}: {} of {} buffers not returned (lost)",
            s.in_use, s.capacity
        ));
    }
    Ok(())
}

/// The cable of A pulled and put back while frames flow from A to B: `link()` and the health
/// record see both changes with their times, the bursts report no error, traffic comes back,
/// and every buffer comes home.
pub fn link_flap_driver(ctx: &Ctx) -> Outcome {
    outcome(|| {
        let inj = Injector::from_env()?;
        let (a_addr, b_addr) = pair(ctx)?;
        let mut a = open(a_addr)?;
        let mut b = open(b_addr)?;
        let ha = health(&a)?;
        let (a_rx, a_tx) = queues(&mut a)?;
        let (mut b_rx, b_tx) = queues(&mut b)?;
        drop((a_rx, b_tx));
        drv::drain(&mut b_rx, Duration::from_millis(50)).or_fail()?;
        let rx_pool = b_rx.pool().clone();
        let pool = tx_pool(1024)?;
        let (ma, mb) = (a.info().mac, b.info().mac);
        let flow = Flow::start("B", a_tx, b_rx, pool.clone(), move |s| {
            test_frame(mb, ma, s)
        });
        flow.wait_more(200, RESUME)?;

        let a_s = a_addr.to_string();
        inj.ask(&["link", &a_s, "down"])?;
        let down_after = wait_until("A's link is seen down", LINK_SEEN, || {
            Ok(!ha.link().status.up)
        })?;
        let down = ha.link();
        if a.link().or_fail()?.up {
            return fail("Port::link says up while the health record says down");
        }
        // Frames sent while the cable is out go nowhere; the bursts must not fail for it.
        std::thread::sleep(Duration::from_secs(1));
        let during = flow.received();
        inj.ask(&["link", &a_s, "up"])?;
        let up_after = wait_until("A's link is seen up again", LINK_SEEN, || {
            Ok(ha.link().status.up)
        })?;
        let up = ha.link();
        let resumed = flow.wait_more(200, RESUME)?;
        let report = flow.stop();
        if !report.errors.is_empty() {
            return fail(format!(
                "burst errors during the flap (none is a link error): {:?}",
                report.errors
            ));
        }
        if up.changes < 2 || down.since >= up.since {
            return fail(format!(
                "link record: down {down}, then {up}; events: {}",
                events(&ha)
            ));
        }
        all_home("the transmit pool", &pool)?;
        drop((a, b));
        all_home("B's receive pool", &rx_pool)?;
        Ok(format!(
            "link down seen {:.2} s after the request ({down}), up {:.2} s after ({up}); {} frames sent, {} received ({} by the time the link came back); traffic back {:.2} s after the link; no burst error; every buffer home; events: {}",
            down_after.as_secs_f64(),
            up_after.as_secs_f64(),
            report.sent,
            report.received,
            during,
            resumed.as_secs_f64(),
            events(&ha)
        ))
    })
}

/// Starts `vfio-nic ARGS` with a status line every half second (for at most a minute) and
/// waits until it serves (its first status line).
fn serving(bin: &str, args: &[&str]) -> Res<Bounded> {
    let what = format!("`vfio-nic {}`", args.join(" "));
    let mut child = Bounded::spawn(
        what.clone(),
        Command::new(bin)
            .args(args)
            .args(["--stats-period", "0.5", "--duration", "60"]),
    )
    .or_fail()?;
    wait_serving(&mut child, &what).or_fail()?;
    Ok(child)
}

/// Pulls A's cable for a second while `tool` runs: the tool's status lines that show A's link
/// down, then up again (each with the time the driver saw it).
fn flap_on_status_lines(inj: &Injector, tool: &mut Bounded, a: &str) -> Res<(String, String)> {
    inj.ask(&["link", a, "down"])?;
    let down = tool
        .wait_line("a status line with A's link down", LINK_SEEN, |l| {
            l.contains(&format!("{a} link down since "))
        })
        .or_fail()?;
    std::thread::sleep(Duration::from_secs(1));
    inj.ask(&["link", a, "up"])?;
    let up = tool
        .wait_line("a status line with A's link up again", LINK_SEEN, |l| {
            l.contains(&format!("{a} link up, ")) && l.contains(" since ")
        })
        .or_fail()?;
    Ok((down, up))
}

/// `vfio-nic fwd A C` (two wires: B sends into A, C's partner D receives) while A's cable is
/// pulled and put back: the status lines show A's link down and up with the times seen,
/// forwarding resumes, and the summary lists the changes.
pub fn link_flap_fwd(ctx: &Ctx) -> Outcome {
    outcome(|| {
        let inj = Injector::from_env()?;
        let bin = tool()?;
        let (a_addr, b_addr) = pair(ctx)?;
        let (c_addr, d_addr) = second_pair(ctx)?;
        let (a_s, c_s) = (a_addr.to_string(), c_addr.to_string());
        let mut fwd = serving(&bin, &["fwd", &a_s, &c_s])?;
        let mut b = open(b_addr)?;
        let mut d = open(d_addr)?;
        let (b_rx, b_tx) = queues(&mut b)?;
        let (mut d_rx, d_tx) = queues(&mut d)?;
        drop((b_rx, d_tx));
        drv::drain(&mut d_rx, Duration::from_millis(50)).or_fail()?;
        let pool = tx_pool(1024)?;
        let mb = b.info().mac;
        let flow = Flow::start("D (through fwd)", b_tx, d_rx, pool.clone(), move |s| {
            test_frame(MacAddr([0x02, 0, 0, 0, 0, 0x0d]), mb, s)
        });
        flow.wait_more(200, RESUME)?;
        let (down_line, up_line) = flap_on_status_lines(&inj, &mut fwd, &a_s)?;
        let resumed = flow.wait_more(200, RESUME)?;
        let report = flow.stop();
        let out = interrupt(fwd, "vfio-nic fwd").or_fail()?;
        if !out.success() {
            return fail(format!("fwd failed: {}", out.text()));
        }
        let summary = out
            .stdout
            .lines()
            .find(|l| l.starts_with(&format!("{a_s}: ")) && l.contains("link down"))
            .ok_or_else(|| {
                Outcome::Fail(format!(
                    "the summary does not list A's link changes: {}",
                    out.stdout
                ))
            })?
            .to_string();
        if !report.errors.is_empty() {
            return fail(format!(
                "burst errors on the test ports: {:?}",
                report.errors
            ));
        }
        all_home("the transmit pool", &pool)?;
        Ok(format!(
            "status lines: `{}` then `{}`; forwarding back {:.2} s after the link; {} of {} frames through; summary: {summary}",
            down_line.trim(),
            up_line.trim(),
            resumed.as_secs_f64(),
            report.received,
            report.sent
        ))
    })
}

/// `vfio-nic respond A` answering pings from B while A's cable is pulled and put back: the
/// status line shows the link down and up with the times, and the answers come back.
pub fn link_flap_respond(ctx: &Ctx) -> Outcome {
    outcome(|| {
        let inj = Injector::from_env()?;
        let bin = tool()?;
        let (a_addr, b_addr) = pair(ctx)?;
        let a_s = a_addr.to_string();
        let mut respond = serving(&bin, &["respond", &a_s, "--ip", "10.39.0.1/24"])?;
        let mut b = open(b_addr)?;
        let (mut b_rx, b_tx) = queues(&mut b)?;
        drv::drain(&mut b_rx, Duration::from_millis(50)).or_fail()?;
        let mb = b.info().mac;
        let (us, them) = (
            "10.39.0.2".parse().expect("an address"),
            "10.39.0.1".parse().expect("an address"),
        );
        // Learn A's MAC as a host would (ARP), then ping it.
        let pool = tx_pool(512)?;
        let mut batch = vec![drv::packet(&pool, &arp_request(mb, us, them)).or_fail()?];
        let mut b_tx = b_tx;
        drv::send_all(&mut b_tx, &mut batch).or_fail()?;
        let mut got = Vec::new();
        let arp = wait_until("A answers B's ARP request", RESUME, || {
            b_rx.rx_burst(&mut got, 32).or_fail()?;
            Ok(got
                .iter()
                .any(|p| p.data().get(12..14) == Some(&[0x08, 0x06][..])))
        });
        let ma = match arp {
            Ok(_) => {
                let p = got
                    .iter()
                    .find(|p| p.data().get(12..14) == Some(&[0x08, 0x06][..]))
                    .expect("seen above");
                MacAddr(p.data()[6..12].try_into().expect("6 bytes"))
            }
            Err(o) => return Err(o),
        };
        got.clear();
        // Pings from B; what comes back on A's wire are A's echo replies.
        let flow = Flow::start("B (echo replies)", b_tx, b_rx, pool.clone(), move |s| {
            echo_request(mb, ma, us, them, 0x3939, s as u16, b"link flap")
        });
        flow.wait_more(50, RESUME)?;
        let (down_line, up_line) = flap_on_status_lines(&inj, &mut respond, &a_s)?;
        let resumed = flow.wait_more(50, RESUME)?;
        let report = flow.stop();
        let out = interrupt(respond, "vfio-nic respond").or_fail()?;
        if !out.success() {
            return fail(format!("respond failed: {}", out.text()));
        }
        if !report.errors.is_empty() {
            return fail(format!("burst errors on B: {:?}", report.errors));
        }
        all_home("the transmit pool", &pool)?;
        Ok(format!(
            "status lines: `{}` then `{}`; answers back {:.2} s after the link; {} replies to {} pings",
            down_line.trim(),
            up_line.trim(),
            resumed.as_secs_f64(),
            report.received,
            report.sent
        ))
    })
}

/// A correctable error on A while B sends to it: reported (the AER status), nothing reset,
/// traffic uninterrupted.
pub fn aer_correctable(ctx: &Ctx) -> Outcome {
    outcome(|| {
        let inj = Injector::from_env()?;
        let (a_addr, b_addr) = pair(ctx)?;
        let mut a = open(a_addr)?;
        let mut b = open(b_addr)?;
        let ha = health(&a)?;
        let (mut a_rx, _a_tx) = queues(&mut a)?;
        let (_b_rx, b_tx) = queues(&mut b)?;
        drv::drain(&mut a_rx, Duration::from_millis(50)).or_fail()?;
        let pool = tx_pool(1024)?;
        let (ma, mb) = (a.info().mac, b.info().mac);
        let flow = Flow::start("A", b_tx, a_rx, pool.clone(), move |s| {
            test_frame(ma, mb, s)
        });
        flow.wait_more(100, RESUME)?;
        inj.ask(&["aer", &a_addr.to_string(), "correctable"])?;
        let seen = wait_until(
            "the correctable error is reported",
            Duration::from_secs(10),
            || Ok(ha.counts().correctable > 0),
        )?;
        flow.wait_more(100, RESUME)?;
        let report = flow.stop();
        let c = ha.counts();
        if c.uncorrectable + c.recoveries + c.failed_recoveries > 0 || ha.epoch() != 0 {
            return fail(format!(
                "a correctable error must change nothing, but: {c:?}; events: {}",
                events(&ha)
            ));
        }
        if !report.errors.is_empty() {
            return fail(format!("burst errors: {:?}", report.errors));
        }
        all_home("the transmit pool", &pool)?;
        Ok(format!(
            "reported {:.2} s after the injection, traffic went on ({} frames); events: {}",
            seen.as_secs_f64(),
            report.received,
            events(&ha)
        ))
    })
}

/// What A received of B's probe frames: the sequence numbers, and whether each came stripped
/// of VLAN 100.
fn probe_round(
    b_tx: &mut vfio_nic::vlan::VlanTx<vfio_nic::devices::AnyTx>,
    a_rx: &mut vfio_nic::vlan::VlanRx<vfio_nic::devices::AnyRx>,
    pool: &Pool,
    (ma, mb): (MacAddr, MacAddr),
    base: u32,
) -> Res<Vec<(u32, Option<u16>)>> {
    // 0: tagged VID 100 to A (in the filter), 1: tagged VID 200 to A (filtered out),
    // 2: untagged to another MAC (not for A, promiscuous off), 3: untagged to A.
    let other = MacAddr([0x02, 0, 0, 0, 0, 0x77]);
    let mut batch = Vec::new();
    for k in 0..4u32 {
        let dst = if k == 2 { other } else { ma };
        let mut p = drv::packet(pool, &drv::frame(dst, mb, base + k, 64)).or_fail()?;
        let vid = match k {
            0 => Some(100),
            1 => Some(200),
            _ => None,
        };
        if let Some(v) = vid {
            use vfio_nic::vlan::{PacketVlan, Tci, Vid};
            p.set_tx_vlan(Tci::from_vid(Vid::new(v).or_fail()?))
                .or_fail()?;
        }
        batch.push(p);
    }
    drv::send_all(b_tx, &mut batch).or_fail()?;
    let mut got = Vec::new();
    let mut out = Vec::new();
    let _ = wait_until(
        "A receives the probe frames",
        Duration::from_secs(3),
        || {
            a_rx.rx_burst(&mut got, 32).or_fail()?;
            for mut p in got.drain(..) {
                use vfio_nic::vlan::PacketVlan;
                let tci = p.take_vlan(a_rx.ctx());
                let seq = u32::from_be_bytes(p.data()[14..18].try_into().expect("4 bytes"));
                if (base..base + 4).contains(&seq) {
                    out.push((seq - base, tci.map(|t| t.vid())));
                }
            }
            Ok(out.len() >= 2)
        },
    );
    // Give a wrongly passed frame its chance to show up.
    std::thread::sleep(Duration::from_millis(200));
    a_rx.rx_burst(&mut got, 32).or_fail()?;
    for mut p in got.drain(..) {
        use vfio_nic::vlan::PacketVlan;
        let tci = p.take_vlan(a_rx.ctx());
        let seq = u32::from_be_bytes(p.data()[14..18].try_into().expect("4 bytes"));
        if (base..base + 4).contains(&seq) {
            out.push((seq - base, tci.map(|t| t.vid())));
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// An uncorrectable (non-fatal) error on A: reported, the function reset and the port
/// restored with its configuration (promiscuous mode off, VLAN filter with VID 100, tags
/// stripped by the NIC), traffic both ways again, every buffer home (the runner checks the
/// guest's DMAR fault log).
pub fn aer_uncorrectable(ctx: &Ctx) -> Outcome {
    outcome(|| {
        let inj = Injector::from_env()?;
        let (a_addr, b_addr) = pair(ctx)?;
        let mut a = open(a_addr)?;
        let mut b = open(b_addr)?;
        let ha = health(&a)?;
        match &mut a {
            AnyPort::Igb(p) => p.set_promiscuous(false).or_fail()?,
            AnyPort::Ixgbe(p) => p.set_promiscuous(false).or_fail()?,
            _ => {
                return Err(Outcome::Skip(
                    "needs an Intel port (promiscuous switch)".into(),
                ))
            }
        }
        let cfg = VlanConfig {
            rx_mode: RxMode::Hardware,
            filter: true,
            table: VlanFilter::with([100]).or_fail()?,
            ..VlanConfig::default()
        };
        let a_ctl = VlanControl::new(&mut a, &cfg).or_fail()?;
        let b_ctl = VlanControl::new(&mut b, &VlanConfig::default()).or_fail()?;
        let (a_rx, a_tx) = queues(&mut a)?;
        let (b_rx, b_tx) = queues(&mut b)?;
        let mut a_rx = a_ctl.wrap_rx(a_rx);
        let mut b_tx = b_ctl.wrap_tx(b_tx);
        drv::drain(&mut a_rx, Duration::from_millis(50)).or_fail()?;
        let pool = tx_pool(1024)?;
        let macs = (a.info().mac, b.info().mac);
        let want = vec![(0, Some(100)), (3, None)];
        let before = probe_round(&mut b_tx, &mut a_rx, &pool, macs, 1000)?;
        if before != want {
            return fail(format!(
                "before the error A received {before:?} of the probe (index, stripped VID), expected {want:?}"
            ));
        }
        // A's own transmit direction flows through the error and the reset.
        let (ma, mb) = macs;
        let flow = Flow::start("B", a_tx, b_rx, pool.clone(), move |s| {
            test_frame(mb, ma, s)
        });
        flow.wait_more(100, RESUME)?;

        inj.ask(&["aer", &a_addr.to_string(), "uncorrectable"])?;
        let took = wait_until(
            "A is reset and restored after the error",
            Duration::from_secs(20),
            || {
                if ha.is_failed() {
                    return fail(format!("the recovery failed: {}", events(&ha)));
                }
                Ok(ha.counts().recoveries > 0 && !ha.recovering())
            },
        )?;
        let resumed = flow.wait_more(100, RESUME)?;
        // A's receive queue puts its ring back at its first burst after the restore.
        let mut scratch = Vec::new();
        a_rx.rx_burst(&mut scratch, 32).or_fail()?;
        drop(scratch);
        let after = probe_round(&mut b_tx, &mut a_rx, &pool, macs, 2000)?;
        let report = flow.stop();
        if after != want {
            return fail(format!(
                "after the recovery A received {after:?} of the probe (index, stripped VID), expected {want:?}: the configuration was not restored; events: {}",
                events(&ha)
            ));
        }
        let err = ha
            .events()
            .into_iter()
            .find_map(|e| match e.kind {
                EventKind::PcieError { severity, what } => Some((severity, what)),
                _ => None,
            })
            .ok_or_else(|| Outcome::Fail(format!("no PCIe error reported: {}", events(&ha))))?;
        if err.0 == Severity::Correctable {
            return fail(format!(
                "the error was reported as correctable: {}",
                events(&ha)
            ));
        }
        if !report.errors.is_empty() {
            return fail(format!("burst errors: {:?}", report.errors));
        }
        drop((b_tx, a_rx));
        all_home("the transmit pool", &pool)?;
        Ok(format!(
            "{} error ({}); port back {:.2} s after the injection (reset and restore), traffic {:.2} s later; promiscuous off, VLAN filter {{100}} and hardware strip as before; {} frames A -> B; events: {}",
            err.0,
            err.1,
            took.as_secs_f64(),
            resumed.as_secs_f64(),
            report.received,
            events(&ha)
        ))
    })
}

/// The removed port's sysfs entry gone: the kernel finished the removal.
fn removal_completes(addr: PciAddress) -> Res<Duration> {
    wait_until(
        &format!("the kernel finishes removing {addr} (its sysfs entry goes)"),
        Duration::from_secs(20),
        || Ok(!present(addr)),
    )
}

/// The card back (re-plugged, bound to vfio-pci), so that the machine is as the suite found
/// it; `None` when the injector cannot put it back.
fn replug(inj: &Injector, addr: PciAddress) -> Res<Option<Duration>> {
    match inj.ask(&["replug", &addr.to_string()]) {
        Err(Outcome::Skip(why)) => {
            step(format!("{addr} stays out: {why}"));
            return Ok(None);
        }
        r => r?,
    };
    let t = wait_until(
        &format!("{addr} is back in sysfs"),
        Duration::from_secs(20),
        || Ok(present(addr)),
    )?;
    super::fault::bind_vfio(addr)?;
    Ok(Some(t))
}

/// C removed (hot unplug) while both wires carry traffic: C's bursts fail with
/// `DeviceRemoved`, the removal completes once C's queues and port are dropped, the other wire
/// never stops; then C is put back and works.
pub fn hot_unplug_driver(ctx: &Ctx) -> Outcome {
    outcome(|| {
        let inj = Injector::from_env()?;
        let (a_addr, b_addr) = pair(ctx)?;
        let (c_addr, d_addr) = second_pair(ctx)?;
        let mut a = open(a_addr)?;
        let mut b = open(b_addr)?;
        let mut c = open(c_addr)?;
        let mut d = open(d_addr)?;
        let hc = health(&c)?;
        let (mut a_rx, _a_tx) = queues(&mut a)?;
        let (_b_rx, b_tx) = queues(&mut b)?;
        let (mut c_rx, c_tx) = queues(&mut c)?;
        let (d_rx, d_tx) = queues(&mut d)?;
        // Every handle on C must go for its removal to complete: its transmit queue is not
        // used here, so it goes now.
        drop(c_tx);
        drv::drain(&mut a_rx, Duration::from_millis(50)).or_fail()?;
        drv::drain(&mut c_rx, Duration::from_millis(50)).or_fail()?;
        let pool = tx_pool(2048)?;
        let (ma, mb, mc, md) = (a.info().mac, b.info().mac, c.info().mac, d.info().mac);
        let keep = Flow::start(
            "A (the wire that stays)",
            b_tx,
            a_rx,
            pool.clone(),
            move |s| test_frame(ma, mb, s),
        );
        let lost = Flow::start("C (the port removed)", d_tx, c_rx, pool.clone(), move |s| {
            test_frame(mc, md, s)
        });
        keep.wait_more(100, RESUME)?;
        lost.wait_more(100, RESUME)?;

        inj.ask(&["unplug", &c_addr.to_string()])?;
        let seen = wait_until(
            "C's driver sees the removal request",
            Duration::from_secs(20),
            || Ok(hc.is_removed()),
        )?;
        wait_until(
            "C's receive burst fails with DeviceRemoved",
            Duration::from_secs(5),
            || Ok(lost.ended()),
        )?;
        let lost = lost.stop();
        if !lost
            .errors
            .iter()
            .any(|(_, e)| *e == vfio_nic::device::QueueError::DeviceRemoved)
        {
            return fail(format!(
                "C's bursts did not fail with DeviceRemoved: {:?}",
                lost.errors
            ));
        }
        if !matches!(c.link(), Err(vfio_nic::Error::DeviceRemoved { .. })) {
            return fail(format!("C's link() after the removal: {:?}", c.link()));
        }
        // The application's part: drop the port (its queues went with the flow).
        drop(c);
        let gone = removal_completes(c_addr)?;
        keep.wait_more(200, RESUME)?;
        let kept = keep.stop();
        if !kept.errors.is_empty() {
            return fail(format!(
                "the other wire saw burst errors: {:?}",
                kept.errors
            ));
        }
        all_home("the transmit pool", &pool)?;

        // Put back, bound to vfio-pci, opened, traffic.
        let back = match replug(&inj, c_addr)? {
            None => "not put back (the injector cannot)".to_string(),
            Some(t) => {
                let mut c = open(c_addr)?;
                let (mut c_rx, _c_tx) = queues(&mut c)?;
                drv::drain(&mut c_rx, Duration::from_millis(50)).or_fail()?;
                // D's transmit queue went with the flow: D is opened afresh.
                drop((d_rx, d));
                let mut d = open(d_addr)?;
                let (_d_rx, mut d_tx) = queues(&mut d)?;
                let n = drv::pump(
                    &mut d_tx,
                    &mut c_rx,
                    100,
                    |i| drv::packet(&pool, &test_frame(mc, md, i as u64)),
                    100,
                    Duration::from_millis(20),
                )
                .or_fail()?
                .len();
                if n != 100 {
                    return fail(format!("after the re-plug, {n} of 100 frames reached C"));
                }
                format!(
                    "back {:.1} s after the re-plug, 100 of 100 frames through",
                    t.as_secs_f64()
                )
            }
        };
        Ok(format!(
            "removal seen {:.2} s after the request, C's bursts failed with DeviceRemoved, removal complete {:.2} s after C was dropped; the other wire carried {} frames throughout, no error; C {back}",
            seen.as_secs_f64(),
            gone.as_secs_f64(),
            kept.received
        ))
    })
}

/// `vfio-nic fwd --topology loop A C`: C removed under traffic. fwd ends C's direction with a
/// one-line reason and closes C (the removal completes), A's direction goes on; then C is put
/// back.
pub fn hot_unplug_fwd(ctx: &Ctx) -> Outcome {
    outcome(|| {
        let inj = Injector::from_env()?;
        let bin = tool()?;
        let (a_addr, b_addr) = pair(ctx)?;
        let (c_addr, d_addr) = second_pair(ctx)?;
        let (a_s, c_s) = (a_addr.to_string(), c_addr.to_string());
        let mut fwd = serving(&bin, &["fwd", "--topology", "loop", &a_s, &c_s])?;
        let mut b = open(b_addr)?;
        let mut d = open(d_addr)?;
        let (mut b_rx, b_tx) = queues(&mut b)?;
        let (mut d_rx, d_tx) = queues(&mut d)?;
        drv::drain(&mut b_rx, Duration::from_millis(50)).or_fail()?;
        drv::drain(&mut d_rx, Duration::from_millis(50)).or_fail()?;
        let pool = tx_pool(2048)?;
        let (mb, md) = (b.info().mac, d.info().mac);
        // B's frames come back to B through A; D's through C.
        let dst = MacAddr([0x02, 0, 0, 0, 0, 0x42]);
        let keep = Flow::start("B (through A)", b_tx, b_rx, pool.clone(), move |s| {
            test_frame(dst, mb, s)
        });
        let lost = Flow::start("D (through C)", d_tx, d_rx, pool.clone(), move |s| {
            test_frame(dst, md, s)
        });
        keep.wait_more(100, RESUME)?;
        lost.wait_more(100, RESUME)?;
        inj.ask(&["unplug", &c_s])?;
        let line = fwd
            .wait_line(
                "fwd's line that C's direction ended",
                Duration::from_secs(20),
                |l| l.starts_with(&format!("fwd: {c_s} -> {c_s} ended")),
            )
            .or_fail()?;
        let gone = removal_completes(c_addr)?;
        keep.wait_more(200, RESUME)?;
        let kept = keep.stop();
        let lost = lost.stop();
        let out = interrupt(fwd, "vfio-nic fwd").or_fail()?;
        if !out.success() {
            return fail(format!("fwd failed after the removal: {}", out.text()));
        }
        if !out
            .stdout
            .contains(&format!("{c_s} -> {c_s}: ended before the run"))
        {
            return fail(format!(
                "fwd's summary does not say C's direction ended: {}",
                out.stdout
            ));
        }
        if !kept.errors.is_empty() || !lost.errors.is_empty() {
            return fail(format!(
                "burst errors on the test ports: {:?} {:?}",
                kept.errors, lost.errors
            ));
        }
        all_home("the transmit pool", &pool)?;
        let back = match replug(&inj, c_addr)? {
            None => "not put back".to_string(),
            Some(t) => format!("put back and bound to vfio-pci in {:.1} s", t.as_secs_f64()),
        };
        Ok(format!(
            "`{}`; removal complete {:.2} s after that line; A's direction went on ({} frames back to B); C {back}",
            line.trim(),
            gone.as_secs_f64(),
            kept.received
        ))
    })
}
