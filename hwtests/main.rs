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
//! - `VFIO_NIC_VFIO_BACKEND=type1|iommufd|noiommu` (default: automatic) and
//!   `VFIO_NIC_ALLOW_NOIOMMU=1`: how every port is opened (`backend_tests.rs`); the `vfio-nic`
//!   tool the CLI tests run reads the same two variables.
//! - `VFIO_NIC_FAULT_INJECT=/path/to/command`: the fault injector the fault tests ask for a
//!   pulled cable, a hot unplug or a PCIe error (`fault.rs` says what it takes); without it
//!   they are skipped, saying so.
//! - `VFIO_NIC_SECOND_PAIR=0000:02:00.0,0000:04:00.0`: a second pair of ports wired to each
//!   other, for the fault tests that need two wires (a hot unplug on one, traffic on the other).
//! - `VFIO_NIC_HWTESTS_GROUP=device|faults|all`: which tests (default all): the device tests,
//!   or the fault tests (`link_flap_*`, `hot_unplug_*`, `aer_*`, `unprivileged_*`, `soak_*`),
//!   which change the machine (cables, slots, device ownership) and run last.
//! - `VFIO_NIC_SOAK_SECS=600`: how long the soak runs (default 60).
//!
//! Files: `proc.rs` (child processes with deadlines), `drv.rs` (helpers for driver-level tests),
//! `traffic.rs` (link, counters, 10,000-frame transfer, loopback, drop and reopen),
//! `vlan_tests.rs` (VLAN modes, filter, TPID), `peer.rs` (ARP/ICMP responder for the kernel peer),
//! `jumbo_tests.rs` (jumbo frames as chains, against Linux's igb and between our two ports),
//! `fault.rs` (the fault injector and the fault tests' helpers), `fault_tests.rs` (link loss,
//! hot unplug, PCIe errors), `unpriv_tests.rs` (the tool without root), `soak.rs` (the soak),
//! `offload_tests.rs` (checksum offloads and TSO against Linux's igb and stack), `linux_peer.rs`
//! (the Linux side of those tests: interface set-up, counters, sockets), `ip_port.rs` (our side:
//! the port speaking IPv4 and the TCP connection), `tcp.rs` (the minimal TCP client's frames and
//! the IPv4 frame builders).
//!
//! Output: one line per test (`ok`, `FAIL`, `skip` and the test name), then a final
//! `N passed, M failed, K skipped` line; the exit status is non-zero when anything failed. Tests
//! that need two ports wired together are skipped, never passed, when given one port. While a
//! test runs, its steps are echoed as `.. NAME [T s]: STEP` lines.
//!
//! # Time limits
//! Every test runs in a process of its own (the suite's binary again, with
//! `VFIO_NIC_HWTESTS_ONE=NAME`), which makes itself a session leader, and has a time limit
//! (`TESTS`). A test past its limit is reported as `FAIL NAME: timed out after N s while: STEP`
//! with the last step it announced, every process of its session is killed (the `vfio-nic` tool,
//! `ping`: whatever holds a VFIO device or a pipe), and the suite goes on with the next test.
//! A test that hangs can therefore neither hide the other tests' results nor leave a port busy.
//! `VFIO_NIC_HWTESTS_BUDGET=S` caps the whole suite (the QEMU runner sets it below the guest's
//! time-out): each test's limit is cut to what is left, and tests that find nothing left are
//! reported as not run. Inside the tests every child process, shell command and receive loop
//! is bounded as well (`proc.rs`, `drv.rs`).

mod backend_tests;
mod cli_tests;
mod drv;
mod fault;
mod fault_tests;
mod ip_port;
mod irq_tests;
mod jumbo_tests;
mod linux_peer;
mod offload_tests;
mod peer;
mod proc;
mod soak;
mod tcp;
mod traffic;
mod unpriv_tests;
mod vlan_tests;

use vfio_nic::app::selftest::regtest;

use std::io::Write;
use std::process::{Command, ExitCode};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use vfio_nic::device::{MacAddr, Port, RxQueue};
use vfio_nic::devices::ids::{self, Family};
use vfio_nic::devices::virtio;
use vfio_nic::platform::dma::{DmaMemory, Pool, PoolConfig};
use vfio_nic::platform::mmio::Mmio;
use vfio_nic::platform::pci::{PciAddress, Sysfs};
use vfio_nic::platform::regs::{igb, ixgbe};
use vfio_nic::platform::vfio::VfioDevice;
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
    /// A second pair of ports wired to each other (`VFIO_NIC_SECOND_PAIR`).
    second_pair: Option<(PciAddress, PciAddress)>,
}

enum Outcome {
    Pass(String),
    Fail(String),
    Skip(String),
}

type TestFn = fn(&Ctx) -> Outcome;

/// One test: its name, its body and how long it may take before the runner stops it.
///
/// The limits are ceilings for the slowest bed we run on (QEMU under TCG on a 2-core machine
/// with the other core busy), about three times the time seen there; a real NIC is faster.
struct Test {
    name: &'static str,
    run: TestFn,
    limit_s: u64,
    /// Seconds added to the limit, from the environment (the soak's length).
    extra_s: fn() -> u64,
}

const fn test(name: &'static str, run: TestFn, limit_s: u64) -> Test {
    Test {
        name,
        run,
        limit_s,
        extra_s: || 0,
    }
}

/// The fault tests (link loss, hot unplug, PCIe errors, no root, the soak): they need a fault
/// injector (or skip) and change the machine as they go, so they run after the device tests,
/// the unplug last (it takes a port away and puts it back).
const FAULT_TESTS: &[Test] = &[
    test(
        "unprivileged_tool_runs",
        unpriv_tests::unprivileged_tool_runs,
        90,
    ),
    test(
        "unprivileged_memlock_limit_named",
        unpriv_tests::unprivileged_memlock_limit_named,
        90,
    ),
    test(
        "unprivileged_without_huge_pages",
        unpriv_tests::unprivileged_without_huge_pages,
        60,
    ),
    test("link_flap_driver", fault_tests::link_flap_driver, 90),
    test("link_flap_fwd", fault_tests::link_flap_fwd, 120),
    test("link_flap_respond", fault_tests::link_flap_respond, 120),
    test("aer_correctable_reported", fault_tests::aer_correctable, 60),
    test(
        "aer_uncorrectable_recovers",
        fault_tests::aer_uncorrectable,
        90,
    ),
    Test {
        name: "soak_mixed_traffic",
        run: soak::soak_mixed_traffic,
        limit_s: 120,
        extra_s: soak::seconds,
    },
    test("hot_unplug_driver", fault_tests::hot_unplug_driver, 120),
    test("hot_unplug_fwd", fault_tests::hot_unplug_fwd, 120),
];

/// Every test, in the order it runs.
const TESTS: &[Test] = &[
    test("vfio_open_read_mac", vfio_open_read_mac, 30),
    test(
        "dma_backend_as_chosen",
        backend_tests::dma_backend_as_chosen,
        60,
    ),
    test("config_space_bus_master", config_space_bus_master, 30),
    test("register_test", register_test, 60),
    test("dma_map_through_iommu", dma_map_through_iommu, 30),
    test("open_twice_fails", open_twice_fails, 30),
    test("two_ports_share_container", two_ports_share_container, 30),
    test("other_driver_refused", other_driver_refused, 30),
    test("two_ports_in_one_group", two_ports_in_one_group, 90),
    test(
        "driver_open_link_mac_counters",
        traffic::driver_open_link_mac_counters,
        60,
    ),
    test(
        "traffic_10k_mixed_sizes",
        traffic::traffic_10k_mixed_sizes,
        120,
    ),
    test("mac_loopback", traffic::mac_loopback, 60),
    test(
        "interrupt_wakes_a_sleeping_queue",
        irq_tests::interrupt_wakes_a_sleeping_queue,
        60,
    ),
    test(
        "interrupt_wakes_the_steered_queue",
        irq_tests::interrupt_wakes_the_steered_queue,
        90,
    ),
    test(
        "drop_mid_traffic_and_reopen",
        traffic::drop_mid_traffic_and_reopen,
        90,
    ),
    test("vlan_modes_matrix", vlan_tests::vlan_modes_matrix, 120),
    test("vlan_filter_table", vlan_tests::vlan_filter_table, 60),
    test("vlan_tpid_88a8", vlan_tests::vlan_tpid_88a8, 60),
    test("vlan_wire_capture", vlan_tests::vlan_wire_capture, 60),
    test("kernel_peer_vlan_ping", peer::kernel_peer_vlan_ping, 120),
    test("jumbo_vfio_pair", jumbo_tests::jumbo_vfio_pair, 60),
    test("jumbo_kernel_peer", jumbo_tests::jumbo_kernel_peer, 60),
    test(
        "udp_checksum_offload_kernel_peer",
        offload_tests::udp_checksum_offload_kernel_peer,
        60,
    ),
    test(
        "tcp_checksum_offload_kernel_peer",
        offload_tests::tcp_checksum_offload_kernel_peer,
        90,
    ),
    test(
        "tcp_tso_kernel_peer",
        offload_tests::tcp_tso_kernel_peer,
        90,
    ),
    test(
        "cli_info_regs_selftest",
        cli_tests::cli_info_regs_selftest,
        90,
    ),
    test(
        "cli_respond_and_capture_kernel_peer",
        cli_tests::cli_respond_and_capture_kernel_peer,
        180,
    ),
    test(
        "cli_respond_interrupts_idle",
        cli_tests::cli_respond_interrupts_idle,
        90,
    ),
];

/// Tests of the runner itself, run instead of [`TESTS`] when `VFIO_NIC_HWTESTS_RUNNER_CHECK=1`
/// (no device needed; tests/hwtests_runner.rs drives them on the host): a test that hangs
/// while a process it started holds on, and a test after it that must still run.
const RUNNER_CHECK: &[Test] = &[
    test("runner_check_hang", runner_check_hang, 2),
    test("runner_check_after", runner_check_after, 10),
];

fn runner_check_hang(_: &Ctx) -> Outcome {
    use std::os::unix::process::CommandExt;
    // Like every child the tests start (proc.rs): the leader of a process group of its own.
    let sleeper = Command::new("sleep")
        .arg("300")
        .process_group(0)
        .spawn()
        .map(|c| c.id());
    match sleeper {
        Ok(pid) => step(format!("holding sleep pid {pid}; waiting for ever")),
        Err(e) => return Outcome::Fail(format!("cannot start sleep: {e}")),
    }
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn runner_check_after(_: &Ctx) -> Outcome {
    Outcome::Pass("ran after the hung test".into())
}

/// Whether this run checks the runner itself (`VFIO_NIC_HWTESTS_RUNNER_CHECK=1`).
fn runner_check() -> bool {
    std::env::var("VFIO_NIC_HWTESTS_RUNNER_CHECK").as_deref() == Ok("1")
}

/// The tests this run chooses from: the runner's own checks, or the suite's group
/// (`VFIO_NIC_HWTESTS_GROUP`: `device`, `faults`, or `all`, the default).
fn tests() -> Result<Vec<&'static Test>, String> {
    if runner_check() {
        return Ok(RUNNER_CHECK.iter().collect());
    }
    let group = std::env::var("VFIO_NIC_HWTESTS_GROUP").unwrap_or_default();
    match group.as_str() {
        "device" => Ok(TESTS.iter().collect()),
        "faults" => Ok(FAULT_TESTS.iter().collect()),
        "" | "all" => Ok(TESTS.iter().chain(FAULT_TESTS).collect()),
        g => Err(format!(
            "VFIO_NIC_HWTESTS_GROUP={g}: use device, faults or all"
        )),
    }
}

/// Set by the runner in the process that runs one test (internal; see [`run_isolated`]).
const ONE_TEST_ENV: &str = "VFIO_NIC_HWTESTS_ONE";
/// Lines a test process prints for the runner (everything else is passed through).
const STEP: &str = "@@step ";
const OUTCOME: &str = "@@outcome ";

/// Tells the runner what the test is doing now, so that a test stopped at its time limit can
/// be reported with the step it was stuck in.
pub fn step(what: impl std::fmt::Display) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{STEP}{}", one_line(&what.to_string()));
    let _ = out.flush();
}

fn one_line(s: &str) -> String {
    s.trim().replace('\n', " | ")
}

fn main() -> ExitCode {
    // The library logs through `tracing`; RUST_LOG=vfio_nic=debug shows it (on stderr).
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    let list = match std::env::var("VFIO_NIC_PORTS") {
        Ok(l) => l,
        Err(_) if runner_check() => "0000:00:00.0".to_string(),
        Err(_) => {
            println!(
            "vfio-nic-hwtests: set VFIO_NIC_PORTS=0000:01:00.0[,0000:02:00.0] (ports bound to vfio-pci; two ports must be wired to each other) to run the on-device suite; nothing was run"
        );
            return ExitCode::SUCCESS;
        }
    };
    let ctx = match context(&list) {
        Ok(c) => c,
        Err(e) => {
            println!("vfio-nic-hwtests: {e}");
            println!("0 passed, 1 failed");
            return ExitCode::FAILURE;
        }
    };
    if let Ok(name) = std::env::var(ONE_TEST_ENV) {
        return run_one(&ctx, &name);
    }
    let filter = std::env::args().nth(1);
    let budget = match suite_budget() {
        Ok(b) => b,
        Err(e) => {
            println!("vfio-nic-hwtests: {e}");
            println!("0 passed, 1 failed");
            return ExitCode::FAILURE;
        }
    };
    let suite_start = Instant::now();
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    let tests = match tests() {
        Ok(t) => t,
        Err(e) => {
            println!("vfio-nic-hwtests: {e}");
            println!("0 passed, 1 failed");
            return ExitCode::FAILURE;
        }
    };
    for t in tests {
        if filter.as_deref().is_some_and(|f| !t.name.contains(f)) {
            continue;
        }
        let t0 = Instant::now();
        // The suite's budget (the QEMU guest's time) caps each test's own limit, so that the
        // suite always ends with a result line, even after a test that used its whole limit.
        let mut limit = Duration::from_secs(t.limit_s + (t.extra_s)());
        if let Some(b) = budget {
            let left = b.saturating_sub(suite_start.elapsed());
            if left < Duration::from_secs(5) {
                failed += 1;
                println!(
                    "FAIL {}: not run: the suite's time budget of {} s (VFIO_NIC_HWTESTS_BUDGET) was used up",
                    t.name,
                    b.as_secs()
                );
                continue;
            }
            limit = limit.min(left);
        }
        let (outcome, timed_out) = run_isolated(t, limit);
        let ms = t0.elapsed().as_millis();
        let name = t.name;
        match outcome {
            Outcome::Pass(d) => {
                passed += 1;
                println!("ok   {name} ({ms} ms) {d}");
            }
            Outcome::Fail(d) if timed_out => {
                failed += 1;
                println!("FAIL {name}: {d}");
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

/// In the test's own process: runs test `name` and prints its outcome for the runner.
fn run_one(ctx: &Ctx, name: &str) -> ExitCode {
    // A session of its own, so that the runner can stop this test together with every process
    // group it starts (each child in hwtests/proc.rs leads its own group).
    if let Err(e) = nix::unistd::setsid() {
        step(format!(
            "setsid failed ({e}): processes this test starts may outlive a time-out"
        ));
    }
    let Some(t) = tests()
        .unwrap_or_default()
        .into_iter()
        .find(|t| t.name == name)
    else {
        println!("{OUTCOME}fail no test named {name}");
        return ExitCode::FAILURE;
    };
    let outcome = std::panic::catch_unwind(|| (t.run)(ctx))
        .unwrap_or_else(|p| Outcome::Fail(format!("panicked: {}", panic_text(&p))));
    let (kind, detail) = match outcome {
        Outcome::Pass(d) => ("pass", d),
        Outcome::Fail(d) => ("fail", d),
        Outcome::Skip(d) => ("skip", d),
    };
    println!("{OUTCOME}{kind} {}", one_line(&detail));
    ExitCode::SUCCESS
}

/// Runs one test in a child process of its own (which makes itself a session leader) and
/// waits at most `limit`. Past it, every process of the test's session is killed (the test and
/// whatever it started: the `vfio-nic` tool, `ping`), which also closes every VFIO device they
/// held, so the next test starts on free ports. The test's `step` lines are echoed as they
/// come (`..` lines), so a slow test can be followed on the console. Returns the outcome and
/// whether the limit was hit.
fn run_isolated(t: &Test, limit: Duration) -> (Outcome, bool) {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            return (
                Outcome::Fail(format!("cannot find the suite's binary: {e}")),
                false,
            )
        }
    };
    let mut cmd = Command::new(exe);
    cmd.env(ONE_TEST_ENV, t.name).args(std::env::args().skip(1));
    let mut child = match proc::spawn_with_stdout(&mut cmd) {
        Ok(c) => c,
        Err(e) => return (Outcome::Fail(e), false),
    };
    let lines = proc::lines_of(child.stdout.take().expect("stdout is piped"));
    let start = Instant::now();
    let deadline = start + limit;
    let mut last_step = String::from("starting the test process");
    let mut outcome = None;
    let mut exited_at: Option<Instant> = None;
    let mut timed_out = false;
    loop {
        match lines.recv_timeout(Duration::from_millis(50)) {
            Ok(line) => {
                let line = line.trim_end();
                if let Some(s) = line.strip_prefix(STEP) {
                    println!(
                        ".. {} [{:.1} s]: {s}",
                        t.name,
                        start.elapsed().as_secs_f64()
                    );
                    last_step = s.to_string();
                } else if let Some(o) = line.strip_prefix(OUTCOME) {
                    outcome = Some(parse_outcome(o));
                } else {
                    println!("{line}");
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        // A test process that exited while something it started still holds its stdout: the
        // session is killed below; give the pipe a moment, not for ever.
        if exited_at.is_none() && matches!(child.try_wait(), Ok(Some(_))) {
            exited_at = Some(Instant::now());
        }
        if exited_at.is_some_and(|t| t.elapsed() > Duration::from_secs(2)) {
            break;
        }
        if Instant::now() >= deadline {
            timed_out = true;
            break;
        }
    }
    // Where everything of the test's session waits at the deadline (state D and a kernel
    // function name a process stuck in the kernel), before it is killed.
    let at_deadline = if timed_out {
        let members = proc::members(proc::Scope::Session, child.id());
        format!("; at the deadline: {}", proc::describe(&members))
    } else {
        String::new()
    };
    // Whatever the test left running goes now (all of it, on a time-out), so the next test
    // starts on free ports.
    let _ = child.kill();
    let stuck = proc::kill_session(child.id(), Duration::from_secs(10));
    let status = proc::reap(&mut child, Duration::from_secs(10));
    let stuck_note = match (&stuck, status) {
        (None, Some(_)) => String::new(),
        (Some(names), _) => format!(
            "; processes {names} did not exit after SIGKILL (stuck in the kernel?), so later tests may find the ports busy"
        ),
        (None, None) => "; the test process could not be reaped after SIGKILL".to_string(),
    };
    if timed_out {
        return (
            Outcome::Fail(format!(
                "timed out after {} s while: {last_step}{at_deadline}{stuck_note}",
                limit.as_secs()
            )),
            true,
        );
    }
    let outcome = match outcome {
        Some(Outcome::Fail(d)) => Outcome::Fail(d + &stuck_note),
        Some(o) => o,
        None => Outcome::Fail(format!(
            "the test process ended ({}) without reporting an outcome; last step: {last_step}{stuck_note}",
            status.map_or("not reaped".to_string(), |s| s.to_string())
        )),
    };
    (outcome, false)
}

/// `VFIO_NIC_HWTESTS_BUDGET`: seconds the whole suite may take (the QEMU runner sets it a
/// little below the guest's time-out); none when unset.
fn suite_budget() -> Result<Option<Duration>, String> {
    match std::env::var("VFIO_NIC_HWTESTS_BUDGET") {
        Ok(s) if !s.trim().is_empty() => s
            .trim()
            .parse::<u64>()
            .map(|n| Some(Duration::from_secs(n)))
            .map_err(|_| format!("VFIO_NIC_HWTESTS_BUDGET={s} is not a number of seconds")),
        _ => Ok(None),
    }
}

fn parse_outcome(o: &str) -> Outcome {
    let (kind, detail) = o.split_once(' ').unwrap_or((o, ""));
    let detail = detail.to_string();
    match kind {
        "pass" => Outcome::Pass(detail),
        "skip" => Outcome::Skip(detail),
        _ => Outcome::Fail(detail),
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
    let second_pair = match std::env::var("VFIO_NIC_SECOND_PAIR") {
        Ok(s) if !s.is_empty() => {
            let v: Vec<PciAddress> = s
                .split(',')
                .map(|a| {
                    a.trim()
                        .parse()
                        .map_err(|e| format!("VFIO_NIC_SECOND_PAIR: {e}"))
                })
                .collect::<Result<_, _>>()?;
            match v[..] {
                [a, b] => Some((a, b)),
                _ => return Err(format!("VFIO_NIC_SECOND_PAIR={s}: give two ports, A,B")),
            }
        }
        _ => None,
    };
    Ok(Ctx {
        ports,
        expect_macs,
        other_driver_port,
        peer_if,
        peer_mac,
        second_pair,
    })
}

/// Opens a port and tells which family it is.
fn open(addr: PciAddress) -> Result<(VfioDevice, Family), String> {
    let dev = VfioDevice::open_with(addr, &drv::vfio()).map_err(|e| e.to_string())?;
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
        Family::Virtio => return Err("a virtio device has no receive-address registers".into()),
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

/// The MAC a port reports without a driver: receive-address entry 0 of an Intel NIC, the
/// device configuration of a virtio device.
fn device_mac(dev: &VfioDevice, family: Family) -> Result<MacAddr, String> {
    if family == Family::Virtio {
        let t = virtio::port::pci_transport(dev, Duration::from_secs(2)).map_err(text)?;
        return t
            .mac()
            .map_err(text)?
            .ok_or_else(|| "the virtio device has no device configuration".to_string());
    }
    let bar = dev.map_bar(0).map_err(text)?;
    read_mac(&bar, family)
}

fn vfio_open_read_mac(ctx: &Ctx) -> Outcome {
    let mut seen = Vec::new();
    for (i, &addr) in ctx.ports.iter().enumerate() {
        let (dev, family) = match open(addr) {
            Ok(x) => x,
            Err(e) => return Outcome::Fail(e),
        };
        let mac = match device_mac(&dev, family) {
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
        // The Intel chips' register tables, read in BAR0; a virtio device's checks are of its
        // common configuration, wherever its capability puts it.
        let table = match family {
            Family::Igb => regtest::IGB_82576,
            Family::Ixgbe => regtest::IXGBE_82599,
            Family::Virtio => {
                let r = virtio::port::pci_transport(&dev, Duration::from_secs(2))
                    .map_err(text)
                    .and_then(|t| virtio::port::register_test(&t));
                match r {
                    Ok(d) => done.push(format!("{addr}: {d}")),
                    Err(e) => return Outcome::Fail(format!("{addr}: {e}")),
                }
                continue;
            }
        };
        let bar = match dev.map_bar(0) {
            Ok(b) => b,
            Err(e) => return Outcome::Fail(e.to_string()),
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
            (pool.iova(), pool.mem_len() as u64),
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
            "{} mappings at {:#x}, {:#x}, {:#x} (huge pages: {}); IOVA windows now {}",
            ranges.len(),
            ranges[0].0,
            ranges[1].0,
            ranges[2].0,
            a.is_huge(),
            dev.container().iova_windows()
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
    let first = match VfioDevice::open_with(addr, &drv::vfio()) {
        Ok(d) => d,
        Err(e) => return Outcome::Fail(e.to_string()),
    };
    let second = VfioDevice::open_with(addr, &drv::vfio());
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
    match VfioDevice::open_with(addr, &drv::vfio()) {
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

/// Two ports that share one IOMMU group (two functions behind a conventional PCI bridge, as
/// the QEMU layout `shared-group` builds them): both open through the one group fd the process
/// may hold, in one container, and frames cross between them in both directions.
fn two_ports_in_one_group(ctx: &Ctx) -> Outcome {
    let expect = std::env::var("VFIO_NIC_SHARED_GROUP").as_deref() == Ok("1");
    if ctx.ports.len() < 2 {
        return Outcome::Skip("needs two ports in one IOMMU group".into());
    }
    let (a, b) = (ctx.ports[0], ctx.ports[1]);
    let sysfs = Sysfs::default();
    let (ga, gb) = (sysfs.iommu_group(a).ok(), sysfs.iommu_group(b).ok());
    if ga.is_none() || ga != gb {
        let why = format!("{a} is in IOMMU group {ga:?}, {b} in {gb:?}");
        return if expect {
            Outcome::Fail(format!("VFIO_NIC_SHARED_GROUP=1 but {why}"))
        } else {
            Outcome::Skip(format!("needs two ports in one IOMMU group: {why}"))
        };
    }
    verdict(|| {
        {
            step("opening both functions of the group");
            let (da, _) = open(a)?;
            let (db, _) = open(b)?;
            if da.iommu_group() != db.iommu_group() || da.group_fd() != db.group_fd() {
                return Err(format!(
                    "group {} fd {:?} and group {} fd {:?}: the group was opened twice",
                    da.iommu_group(),
                    da.group_fd(),
                    db.iommu_group(),
                    db.group_fd()
                ));
            }
            if !Arc::ptr_eq(&da.container(), &db.container()) {
                return Err("the two functions got different containers".into());
            }
        }
        let mut pa = drv::open(a, false)?;
        let mut pb = drv::open(b, false)?;
        let (ma, mb) = (pa.info().mac, pb.info().mac);
        let (mut rxa, mut txa) = pa.take_queues().map_err(text)?;
        let (mut rxb, mut txb) = pb.take_queues().map_err(text)?;
        drv::drain(&mut rxa[0], Duration::from_millis(30))?;
        drv::drain(&mut rxb[0], Duration::from_millis(30))?;
        let mut seen = Vec::new();
        for (name, tx, rx, dst, src) in [
            ("A -> B", &mut txa[0], &mut rxb[0], mb, ma),
            ("B -> A", &mut txb[0], &mut rxa[0], ma, mb),
        ] {
            let pool = rx.pool().clone();
            let got = drv::pump(
                tx,
                rx,
                500,
                |i| drv::packet(&pool, &drv::frame(dst, src, i as u32, 60 + i % 1400)),
                500,
                Duration::from_millis(20),
            )?;
            let in_order = got.iter().enumerate().all(|(i, p)| {
                p.data().get(14..18) == Some(&(i as u32).to_be_bytes()[..])
                    && p.len() == 60 + i % 1400
            });
            if got.len() != 500 || !in_order {
                return Err(format!(
                    "{name}: {} of 500 frames, in order and of the right length: {in_order}",
                    got.len()
                ));
            }
            seen.push(name);
        }
        Ok(format!(
            "{a} and {b} share IOMMU group {}: one group fd, one container; 500 frames {}",
            ga.unwrap_or_default(),
            seen.join(" and ")
        ))
    })
}

fn other_driver_refused(ctx: &Ctx) -> Outcome {
    let Some(addr) = ctx.other_driver_port else {
        return Outcome::Skip(
            "set VFIO_NIC_OTHER_DRIVER_PORT to a port bound to a kernel driver".into(),
        );
    };
    match VfioDevice::open_with(addr, &drv::vfio()) {
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
