//! The `vfio-nic` tool on the device: what a bring-up engineer types, run as a separate process
//! exactly as they would run it (`info`, `regs --decode`, `selftest`; and in the kernel-peer
//! layout `respond` answering Linux's ping over a VLAN and `capture` writing what Linux sent, in
//! every VLAN mode).
//!
//! The binary is `$VFIO_NIC_CLI`, or `vfio-nic` from `PATH` (the QEMU guest has it in /bin); the
//! tests are skipped when neither exists. Each command opens and closes the port itself, so the
//! suite holds no port while they run.

use std::process::Command;
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::Value;
use vfio_nic::vlan::{RxMode, TxMode};

use super::drv;
use super::peer::{sh, PeerVlan, OUR_IP, VID};
use super::proc::{Bounded, Finished};
use super::{step, Ctx, Outcome};

/// How long a one-shot command (`info`, `regs`, `selftest`) may take.
const ONE_SHOT: Duration = Duration::from_secs(45);
/// How long `respond`/`capture` may take to stop after Ctrl-C (closing the port included).
const STOP_LIMIT: Duration = Duration::from_secs(15);

pub(super) fn cli() -> Option<String> {
    if let Ok(p) = std::env::var("VFIO_NIC_CLI") {
        return Some(p);
    }
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .map(|d| format!("{d}/vfio-nic"))
        .find(|p| std::path::Path::new(p).is_file())
}

fn spawn(bin: &str, args: &[&str]) -> Result<Bounded, String> {
    Bounded::spawn(
        format!("`vfio-nic {}`", args.join(" ")),
        Command::new(bin).args(args),
    )
}

/// Runs a one-shot command to its end (at most [`ONE_SHOT`]), whatever its status.
fn run(bin: &str, args: &[&str]) -> Result<Finished, String> {
    step(format!("running `vfio-nic {}`", args.join(" ")));
    spawn(bin, args)?.finish_within(ONE_SHOT)
}

/// Runs a command that must succeed; returns its stdout.
fn ok(bin: &str, args: &[&str]) -> Result<String, String> {
    let out = run(bin, args)?;
    if !out.success() {
        return Err(format!(
            "`vfio-nic {}` failed ({:?}): {}",
            args.join(" "),
            out.status,
            out.stderr.trim()
        ));
    }
    Ok(out.stdout)
}

/// How long `respond`/`capture` may take to open and initialise the port (link included).
const OPEN_LIMIT: Duration = Duration::from_secs(30);

/// Waits until a command started in the background is serving: the tool prints its first
/// status line (`--stats-period 0.5`) only once the port is open and its loop runs, so traffic
/// sent after that line cannot be missed (a fixed sleep was too short on a loaded machine).
pub(super) fn wait_serving(child: &mut Bounded, what: &str) -> Result<(), String> {
    step(format!(
        "waiting for {what} to open the port and print its first status line"
    ));
    child
        .wait_line("its first status line", OPEN_LIMIT, |l| {
            l.trim_start().starts_with(|c: char| c.is_ascii_digit()) && l.contains(" s  ")
        })
        .map(|_| ())
}

/// Ctrl-C, as a user would: the tool stops, prints its summary and closes the port. Bounded:
/// a tool that does not stop within [`STOP_LIMIT`] is killed and reported.
pub(super) fn interrupt(child: Bounded, what: &str) -> Result<Finished, String> {
    step(format!("stopping {what} with SIGINT"));
    child.signal(Signal::SIGINT);
    child
        .finish_within(STOP_LIMIT)
        .map_err(|e| format!("after SIGINT: {e}"))
}

fn json(text: &str) -> Result<Value, String> {
    serde_json::from_str(text.trim()).map_err(|e| format!("not JSON ({e}): {}", text.trim()))
}

/// `info`, `regs --decode` and `selftest` on the first port.
pub fn cli_info_regs_selftest(ctx: &Ctx) -> Outcome {
    let Some(bin) = cli() else {
        return Outcome::Skip("no vfio-nic binary (set VFIO_NIC_CLI or put it on PATH)".into());
    };
    let port = ctx.ports[0].to_string();
    super::verdict(|| {
        let info = json(&ok(&bin, &["--json", "info", &port])?)?;
        let mac = info["mac"].as_str().unwrap_or_default().to_string();
        if let Some(want) = ctx.expect_macs.as_ref().and_then(|m| m.first()) {
            if mac != want.to_string() {
                return Err(format!("info reports MAC {mac}, expected {want}"));
            }
        }
        let driver = info["driver"].as_str().unwrap_or_default().to_string();
        let backend = dma_backend(&bin, &port, &info)?;
        if info["link"]["up"] != Value::Bool(true) {
            return Err(format!("info reports the link down: {}", info["link"]));
        }
        // The register that proves the decoder reads the device: RAH0.AV (the NVM MAC is
        // valid) on the Intel chips, NUM_QUEUES (receive, transmit, control; a 16-bit register
        // of its own) on virtio.
        let (names, reg, field, want): (&[&str], &str, Option<&str>, u64) = if driver == "virtio" {
            (
                &["DEVICE_STATUS", "QUEUE_SIZE", "NUM_QUEUES"],
                "NUM_QUEUES",
                None,
                3,
            )
        } else {
            (&["CTRL", "STATUS", "RAH0"], "RAH", Some("AV"), 1)
        };
        let mut args = vec!["--json", "regs", &port];
        args.extend_from_slice(names);
        args.push("--decode");
        let regs = json(&ok(&bin, &args)?)?;
        let list = regs["registers"].as_array().cloned().unwrap_or_default();
        let r = list
            .iter()
            .find(|r| r["name"].as_str().is_some_and(|n| n.starts_with(reg)))
            .ok_or_else(|| format!("regs --decode did not list {reg}"))?;
        let v = match field {
            Some(field) => r["fields"]
                .as_array()
                .and_then(|f| f.iter().find(|f| f["name"] == field))
                .and_then(|f| f["value"].as_u64()),
            None => r["value"]
                .as_str()
                .and_then(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok()),
        };
        if v != Some(want) {
            return Err(format!(
                "{reg}{} decoded as {v:?}, expected {want}: {r}",
                field.map(|f| format!(".{f}")).unwrap_or_default()
            ));
        }
        let fields: usize = list
            .iter()
            .map(|r| r["fields"].as_array().map_or(0, Vec::len))
            .sum();
        // `gen` sends 100 frames (broadcast) and reports them; the port's counters agree where
        // they are the driver's own (virtio: counted as queued), and `stats` lists them.
        let gen = json(&ok(
            &bin,
            &[
                "--json",
                "gen",
                &port,
                "--count",
                "100",
                "--stats-period",
                "0",
            ],
        )?)?;
        if gen["generator"]["sent"] != 100 {
            return Err(format!("gen --count 100 reported {}", gen["generator"]));
        }
        if driver == "virtio" && gen["hw"]["tx_packets"] != 100 {
            return Err(format!("gen: the driver counted {} sent", gen["hw"]));
        }
        let stats = json(&ok(&bin, &["--json", "stats", &port])?)?;
        let counters = stats["hw"].as_object().map_or(0, |m| m.len());
        if counters == 0 {
            return Err(format!("stats listed no counters: {stats}"));
        }
        let selftest = run(&bin, &["selftest", &port])?;
        let text = &selftest.stdout;
        if !selftest.success() {
            return Err(format!(
                "selftest failed: {}",
                text.trim().replace('\n', " | ")
            ));
        }
        let passed = text.lines().filter(|l| l.contains("PASS")).count();
        Ok(format!(
            "info: {driver} MAC {mac} link up, {backend}; regs --decode: {} registers, {fields} fields; gen: 100 sent; stats: {counters} counters; selftest: {passed} PASS lines",
            list.len()
        ))
    })
}

/// `info` and `list` name the DMA backend the port is opened through: the one the environment
/// asks for (`VFIO_NIC_VFIO_BACKEND`, which the tool reads too), and `list` reports the group.
fn dma_backend(bin: &str, port: &str, info: &Value) -> Result<String, String> {
    let want = super::drv::vfio().backend.map(|b| b.name());
    let used = info["dma"]["would_use"].as_str();
    if want.is_some() && used != want {
        return Err(format!(
            "info: DMA backend {used:?}, expected {want:?}: {}",
            info["dma"]
        ));
    }
    let rows = json(&ok(bin, &["--json", "list"])?)?;
    let row = rows
        .as_array()
        .and_then(|r| r.iter().find(|r| r["address"] == port))
        .ok_or_else(|| format!("list does not show {port}: {rows}"))?;
    if row["would_use"].as_str() != used {
        return Err(format!(
            "list says backend {}, info {used:?}",
            row["would_use"]
        ));
    }
    // In text too; and no-IOMMU mode says what it gives up, in one warning line.
    let text = run(bin, &["info", port])?;
    let dma_line = text.stdout.lines().find(|l| l.starts_with("dma "));
    if !text.success() || !dma_line.is_some_and(|l| l.contains(used.unwrap_or("?"))) {
        return Err(format!(
            "info (text): no dma line naming {used:?}: {}",
            text.stdout
        ));
    }
    let warnings = text
        .stderr
        .lines()
        .filter(|l| l.contains("no-IOMMU mode"))
        .count();
    let want_warnings = usize::from(used == Some("noiommu"));
    if warnings != want_warnings || (want_warnings == 1 && !text.stderr.contains("ALL memory")) {
        return Err(format!(
            "{warnings} no-IOMMU warning line(s), expected {want_warnings}: {}",
            text.stderr.trim()
        ));
    }
    Ok(format!(
        "backend {} ({} {}, in list too; {want_warnings} warning line)",
        used.unwrap_or("?"),
        row["iommu_group_kind"].as_str().unwrap_or("?"),
        row["iommu_group"]
    ))
}

/// Frames of a classic pcap file (our own small reader: the writer under test is the crate's).
fn pcap_frames(path: &str) -> Result<Vec<Vec<u8>>, String> {
    let d = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    if d.len() < 24 || d[..4] != [0xd4, 0xc3, 0xb2, 0xa1] {
        return Err(format!("{path}: not a little-endian microsecond pcap file"));
    }
    if u32::from_le_bytes(d[20..24].try_into().unwrap()) != 1 {
        return Err(format!("{path}: link type is not Ethernet"));
    }
    let mut out = Vec::new();
    let mut off = 24;
    while off + 16 <= d.len() {
        let incl = u32::from_le_bytes(d[off + 8..off + 12].try_into().unwrap()) as usize;
        off += 16;
        let end = (off + incl).min(d.len());
        out.push(d[off..end].to_vec());
        off = end;
    }
    Ok(out)
}

/// `respond` on `port` answering for our address on VLAN 100 (with `options` besides):
/// started, `while_serving` run once it serves, then Linux's ping of 3 requests, which must all
/// be answered, and Ctrl-C. Returns what `while_serving` returned and the tool's output.
fn respond_to_linux_ping<T>(
    bin: &str,
    port: &str,
    peer: &PeerVlan,
    options: &[&str],
    while_serving: impl FnOnce(&Bounded) -> Result<T, String>,
) -> Result<(T, Finished), String> {
    let mut args = vec!["respond", port, "--ip", OUR_IP, "--vlan", "100"];
    args.extend_from_slice(options);
    args.extend_from_slice(&["--duration", "60", "--stats-period", "0.5"]);
    let what = format!("respond {}", options.join(" "));
    let mut child = spawn(bin, &args)?;
    wait_serving(&mut child, &what)?;
    let served = while_serving(&child);
    let _ = sh(&format!("ip neigh flush dev {}", peer.vif));
    step(format!("{what}: Linux pings 10.99.0.2 (3 requests)"));
    let ping = sh("ping -c 3 -W 2 -w 15 10.99.0.2");
    let out = interrupt(child, &what)?;
    let served = served?;
    match ping {
        Ok(t) if t.contains("3 packets received") => Ok((served, out)),
        other => Err(format!(
            "{what}: Linux's ping failed ({other:?}); respond said: {}",
            out.text()
        )),
    }
}

/// What the kernel-peer tests need: the tool, our port, and the Linux peer on VLAN 100 (brought
/// up); or the outcome that skips (not this layout, no tool) or fails (the peer would not come up).
fn kernel_peer(ctx: &Ctx) -> Result<(String, String, PeerVlan), Outcome> {
    let Some(ifname) = ctx.peer_if.clone() else {
        return Err(Outcome::Skip(
            "set VFIO_NIC_PEER_IF to the Linux netdev wired to the first port (kernel-peer layout)"
                .into(),
        ));
    };
    let Some(bin) = cli() else {
        return Err(Outcome::Skip(
            "no vfio-nic binary (set VFIO_NIC_CLI or put it on PATH)".into(),
        ));
    };
    let peer = PeerVlan::up(&ifname).map_err(Outcome::Fail)?;
    Ok((bin, ctx.ports[0].to_string(), peer))
}

/// Kernel peer: `respond` answers Linux's ping over VLAN 100 in every receive x transmit mode,
/// and `capture` writes the peer's tagged ARP requests exactly as on the wire, the same bytes in
/// every receive mode.
pub fn cli_respond_and_capture_kernel_peer(ctx: &Ctx) -> Outcome {
    let (bin, port, peer) = match kernel_peer(ctx) {
        Ok(t) => t,
        Err(o) => return o,
    };
    let result = super::verdict(|| {
        let mut done = Vec::new();
        // Every receive mode and every transmit mode at least once (the library-level peer test
        // covers the full cross product).
        // A virtio-net device neither strips nor inserts: its modes are software and deferred.
        let virtio = drv::is_virtio(ctx.ports[0]);
        let modes: &[(RxMode, TxMode)] = if virtio {
            &[
                (RxMode::Software, TxMode::Software),
                (RxMode::Deferred, TxMode::Software),
            ]
        } else {
            &[
                (RxMode::Hardware, TxMode::Hardware),
                (RxMode::Software, TxMode::Software),
                (RxMode::Deferred, TxMode::Hardware),
                (RxMode::Deferred, TxMode::Software),
            ]
        };
        for &(rx, tx) in modes {
            {
                let (rxs, txs) = (rx.to_string(), tx.to_string());
                let options = ["--vlan-rx", &rxs, "--vlan-tx", &txs];
                respond_to_linux_ping(&bin, &port, &peer, &options, |_| Ok(()))?;
                done.push(format!("{rxs}/{txs}"));
            }
        }
        // Capture in every receive mode while the peer sends three tagged ARP requests.
        let mut files = Vec::new();
        for rx in RxMode::ALL
            .into_iter()
            .filter(|&m| !(virtio && m == RxMode::Hardware))
        {
            let rxs = rx.to_string();
            let path = format!("/tmp/cli-capture-{rxs}.pcap");
            let args = [
                "capture",
                &port,
                "-w",
                &path,
                "--duration",
                "60",
                "--vlan-rx",
                &rxs,
                "--timestamps",
                "zero",
                "--stats-period",
                "0.5",
            ];
            let what = format!("capture --vlan-rx {rxs}");
            let mut child = spawn(&bin, &args)?;
            wait_serving(&mut child, &what)?;
            let _ = sh(&format!("ip neigh flush dev {}", peer.vif));
            // No responder now: the kernel's ARP requests go unanswered; arping sends exactly 3.
            step(format!("{what}: the peer sends 3 ARP requests"));
            let _ = sh(&format!("arping -c 3 -w 4 -I {} 10.99.0.2", peer.vif))
                .or_else(|_| sh("ping -c 3 -W 1 -w 6 10.99.0.2"));
            let out = interrupt(child, &what)?;
            if !out.success() {
                return Err(format!(
                    "{what} failed ({:?}): {}",
                    out.status,
                    out.stderr.trim()
                ));
            }
            let frames = pcap_frames(&path)?;
            let arps: Vec<&Vec<u8>> = frames
                .iter()
                .filter(|f| f.len() >= 18 && f[12..14] == [0x81, 0x00] && f[16..18] == [0x08, 0x06])
                .collect();
            if arps.len() < 3 {
                return Err(format!(
                    "capture --vlan-rx {rxs}: {} frames, {} of them tagged ARP; expected 3 tagged ARP requests from the peer",
                    frames.len(),
                    arps.len()
                ));
            }
            for f in &arps {
                let vid = u16::from_be_bytes([f[14], f[15]]) & 0xfff;
                if vid != VID {
                    return Err(format!(
                        "capture --vlan-rx {rxs}: ARP request on VID {vid}, expected {VID}"
                    ));
                }
                if let Some(mac) = &ctx.peer_mac {
                    if f[6..12] != mac.0 {
                        return Err(format!(
                            "capture --vlan-rx {rxs}: ARP from {:02x?}, expected the peer {mac}",
                            &f[6..12]
                        ));
                    }
                }
            }
            let arps: Vec<Vec<u8>> = arps.into_iter().take(3).cloned().collect();
            files.push((rxs, arps));
        }
        // The peer sends the same requests every time, so what was captured must be the same
        // bytes in every mode (other frames the kernel may send meanwhile are left out).
        for (mode, frames) in &files[1..] {
            if *frames != files[0].1 {
                return Err(format!(
                    "the ARP requests captured in receive mode {mode} differ from those in mode {}",
                    files[0].0
                ));
            }
        }
        Ok(format!(
            "respond answered Linux's ping over VLAN {VID} in {}; capture wrote the peer's tagged ARP requests as on the wire, the same bytes in {}",
            done.join(", "),
            files.iter().map(|f| f.0.as_str()).collect::<Vec<_>>().join(", ")
        ))
    });
    // The peer's VLAN interface goes away whatever the outcome.
    drop(peer);
    result
}

/// Clock ticks a second in /proc/PID/stat's times: USER_HZ, 100 on x86-64 and arm64 Linux alike.
const USER_HZ: f64 = 100.0;
/// How long the idle responder is watched.
const IDLE_WATCH: Duration = Duration::from_secs(5);
/// The most of a core an idle responder in interrupt mode may use: a quarter, against the
/// whole core a polling responder uses. Not a tighter figure, because the share is read from
/// the guest's tick accounting: a tick charges whichever task is running, and under QEMU's TCG
/// on a host with more runnable guests and builds than cores (CI runs four guests beside the
/// background builds on two) the vCPU runs the process's wake-ups (the loop's own, up to 10 a
/// second, the live line's every 0.5 s, and the port watch thread's link read every 100 ms)
/// slower in wall-clock time, and the share grows with it. Measured on 2026-12-05: 0.6 to 3.6 %
/// in the QEMU suite's runs, and 5.2 % once (the test then failed at 5 %) in a CI run whose
/// load average was about five on two cores.
const IDLE_SHARE: f64 = 0.25;
/// The fewest sleeps an idle responder reports over [`IDLE_WATCH`] (each ends by a frame or
/// after 100 ms: about 50 in 5 s; 81 to 85 were reported over the whole run on 2026-12-05).
const MIN_IDLE_SLEEPS: u32 = 25;

/// User plus system time of process `pid` so far, in clock ticks (/proc/PID/stat fields 14 and
/// 15, counted after the parenthesised command name, which may hold spaces).
fn cpu_ticks(pid: u32) -> Result<u64, String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|e| format!("/proc/{pid}/stat: {e}"))?;
    let after = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or_else(|| format!("/proc/{pid}/stat has no command name: {stat}"))?;
    // Fields from 3 (state) on: utime and stime are 14 and 15, so the 12th and 13th here.
    let fields: Vec<&str> = after.split_whitespace().collect();
    let tick = |i: usize| -> Result<u64, String> {
        fields
            .get(i)
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| format!("/proc/{pid}/stat: field {} unreadable: {stat}", i + 3))
    };
    Ok(tick(11)? + tick(12)?)
}

/// Kernel peer: `respond --interrupts` sleeps when idle (under [`IDLE_SHARE`] of a core over 5 s
/// with no traffic, from /proc/PID/stat), and still answers Linux's ping over VLAN 100 when it
/// comes. A polling responder uses a whole core here.
pub fn cli_respond_interrupts_idle(ctx: &Ctx) -> Outcome {
    let (bin, port, peer) = match kernel_peer(ctx) {
        Ok(t) => t,
        Err(o) => return o,
    };
    let result = super::verdict(|| {
        let (share, out) = respond_to_linux_ping(&bin, &port, &peer, &["--interrupts"], |child| {
            step(format!(
                "watching its CPU time for {} s of no traffic",
                IDLE_WATCH.as_secs()
            ));
            let t0 = cpu_ticks(child.pid())?;
            std::thread::sleep(IDLE_WATCH);
            let t1 = cpu_ticks(child.pid())?;
            Ok((t1 - t0) as f64 / USER_HZ / IDLE_WATCH.as_secs_f64())
        })?;
        if share >= IDLE_SHARE {
            return Err(format!(
                "idle, it used {:.1} % of a core over {} s (at most {:.0} % expected): it does not sleep; it said: {}",
                share * 100.0,
                IDLE_WATCH.as_secs(),
                IDLE_SHARE * 100.0,
                out.text()
            ));
        }
        let slept = out
            .stdout
            .lines()
            .find(|l| l.starts_with("interrupt mode:"))
            .unwrap_or("(no interrupt mode line)")
            .to_string();
        // And it says so itself: its sleeps end by a frame or by the 100 ms limit, so 5 s of
        // idle alone are about 50 of them.
        let sleeps = slept
            .split_once("slept ")
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .and_then(|n| n.parse::<u32>().ok());
        if sleeps.is_none_or(|n| n < MIN_IDLE_SLEEPS) {
            return Err(format!(
                "idle, it used {:.1} % of a core, but it reports {sleeps:?} sleeps (at least {MIN_IDLE_SLEEPS} expected over {} s idle): {slept}",
                share * 100.0,
                IDLE_WATCH.as_secs()
            ));
        }
        Ok(format!(
            "idle for {} s it used {:.2} % of a core; then answered Linux's 3 pings over VLAN 100; {slept}",
            IDLE_WATCH.as_secs(),
            share * 100.0
        ))
    });
    drop(peer);
    result
}
