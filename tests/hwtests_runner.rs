//! The on-device suite's runner on the host (no device needed): a test that hangs is reported
//! as timed out with the step it was in, everything it started is killed, the next test still
//! runs, and the suite's budget cuts tests that find no time left.

use std::process::Command;
use std::time::{Duration, Instant};

fn suite(budget: Option<&str>) -> (String, Option<i32>, Duration) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vfio-nic-hwtests"));
    cmd.env("VFIO_NIC_HWTESTS_RUNNER_CHECK", "1")
        .env_remove("VFIO_NIC_PORTS")
        .env_remove("VFIO_NIC_HWTESTS_BUDGET");
    if let Some(b) = budget {
        cmd.env("VFIO_NIC_HWTESTS_BUDGET", b);
    }
    let t0 = Instant::now();
    let out = cmd.output().expect("run vfio-nic-hwtests");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        out.status.code(),
        t0.elapsed(),
    )
}

/// Whether process `pid` is gone (or only a zombie waiting for its new parent).
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

#[test]
fn a_hung_test_times_out_and_the_suite_goes_on() {
    let (out, code, took) = suite(None);
    let line = out
        .lines()
        .find(|l| l.starts_with("FAIL runner_check_hang"))
        .unwrap_or_else(|| panic!("no FAIL line for the hung test:\n{out}"));
    assert!(
        line.starts_with("FAIL runner_check_hang: timed out after 2 s while: holding sleep pid "),
        "{line}"
    );
    let pid: u32 = line
        .split("pid ")
        .nth(1)
        .and_then(|r| r.split(';').next())
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("no pid in {line}"));
    // Killed with the test's session, although it led a process group of its own.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !gone(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(gone(pid), "the hung test's child {pid} survived:\n{out}");
    assert!(out.contains("\nok   runner_check_after"), "{out}");
    assert!(
        out.trim_end().ends_with("1 passed, 1 failed, 0 skipped"),
        "{out}"
    );
    assert_eq!(code, Some(1));
    assert!(took < Duration::from_secs(30), "took {took:?}");
}

#[test]
fn the_suite_budget_cuts_tests_that_find_no_time_left() {
    let (out, code, _) = suite(Some("1"));
    assert!(
        out.contains(
            "FAIL runner_check_hang: not run: the suite's time budget of 1 s (VFIO_NIC_HWTESTS_BUDGET) was used up"
        ),
        "{out}"
    );
    assert!(
        out.trim_end().ends_with("0 passed, 2 failed, 0 skipped"),
        "{out}"
    );
    assert_eq!(code, Some(1));
    let (out, _, _) = suite(Some("x"));
    assert!(
        out.contains("VFIO_NIC_HWTESTS_BUDGET=x is not a number"),
        "{out}"
    );
}
