//! The README's sample outputs are what the commands print: every `$ vfio-nic ...` line of a
//! `text` block in README.md is run, and its output compared with the lines under it.
//!
//! What depends on the machine is not compared as written: in a line that reports a rate or a
//! time (Mpps, ns per packet, ms, a UTC clock time) every number is masked, the forwarder's once-a-second status
//! lines are left out (how many there are depends on the run), and a README line `...`
//! stands for the lines it abbreviates. Everything else must be equal: counts, MACs, the
//! VLAN configuration, the pool's line, the self-test's verdicts and reasons, the errors. A
//! sample naming a PCI address runs only where that address does not exist (its sample is the
//! error a machine without that NIC gives). Of standard error only the tool's one-line error
//! counts: log lines (the 4 KiB-page fallback, the software 82599's notes) are left out, as the
//! README says.

use std::process::Command;

/// One sample: the command's arguments and the output the README shows.
struct Sample {
    line: usize,
    args: Vec<String>,
    expected: Vec<String>,
}

/// Every `$ vfio-nic` sample of the README's `text` blocks.
fn samples() -> Vec<Sample> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let mut out: Vec<Sample> = Vec::new();
    let mut in_text = false;
    for (i, line) in readme.lines().enumerate() {
        if line.starts_with("```") {
            in_text = line == "```text";
            continue;
        }
        if !in_text {
            continue;
        }
        if let Some(cmd) = line.strip_prefix("$ vfio-nic ") {
            out.push(Sample {
                line: i + 1,
                args: cmd.split_whitespace().map(String::from).collect(),
                expected: Vec::new(),
            });
        } else if line.starts_with("$ ") {
            // Another program's sample: not ours to run.
            in_text = false;
        } else if let Some(s) = out.last_mut() {
            s.expected.push(line.to_string());
        }
    }
    out
}

/// Whether a line reports a rate or a time, whose numbers depend on the machine.
fn is_timed(line: &str) -> bool {
    ["Mpps", "ns per packet", " ms)", " ms (", " UTC"]
        .iter()
        .any(|w| line.contains(w))
}

/// `line` with every number of a timed line masked.
fn normalise(line: &str) -> String {
    if !is_timed(line) {
        return line.trim_end().to_string();
    }
    let mut out = String::new();
    let mut in_number = false;
    for c in line.trim_end().chars() {
        if c.is_ascii_digit() || (in_number && c == '.') {
            if !in_number {
                out.push('N');
            }
            in_number = true;
        } else {
            in_number = false;
            out.push(c);
        }
    }
    out
}

/// The forwarder's status line ("    1.0 s  null:0 -> ...").
fn is_status_line(line: &str) -> bool {
    let t = line.trim_start();
    line.starts_with("  ") && t.split_whitespace().nth(1) == Some("s") && t.contains("pkts")
}

/// Compares the README's lines with the command's: `None` when they agree, else the first
/// difference.
fn compare(expected: &[String], actual: &[String]) -> Option<String> {
    let want: Vec<String> = expected
        .iter()
        .filter(|l| !is_status_line(l))
        .map(|l| normalise(l))
        .collect();
    let got: Vec<String> = actual
        .iter()
        .filter(|l| !is_status_line(l))
        .map(|l| normalise(l))
        .collect();
    let mut g = 0;
    for (k, w) in want.iter().enumerate() {
        if w.trim_start().starts_with("...") {
            // Abbreviated lines: skip what is printed until the README's next line.
            let next = want.get(k + 1);
            while g < got.len() && Some(&got[g]) != next {
                g += 1;
            }
            continue;
        }
        match got.get(g) {
            Some(l) if l == w => g += 1,
            Some(l) => return Some(format!("README: {w}\nprinted: {l}")),
            None => return Some(format!("README: {w}\nprinted: (nothing more)")),
        }
    }
    (g < got.len()).then(|| format!("printed more than the README shows: {}", got[g]))
}

#[test]
fn every_readme_sample_is_what_its_command_prints() {
    let all = samples();
    assert!(all.len() >= 10, "the README's samples were not found");
    let mut failures = Vec::new();
    for s in &all {
        if let Some(pci) = s.args.iter().find(|a| a.starts_with("0000:")) {
            if std::path::Path::new("/sys/bus/pci/devices")
                .join(pci)
                .exists()
            {
                continue;
            }
        }
        let out = Command::new(env!("CARGO_BIN_EXE_vfio-nic"))
            .args(&s.args)
            // The README leaves out the warnings of a machine without huge pages.
            .env("RUST_LOG", "error")
            .output()
            .expect("run vfio-nic");
        let mut actual: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(String::from)
            .collect();
        // Of standard error, the tool's one-line error (the README leaves the model's and the
        // drivers' log lines out).
        actual.extend(
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .filter(|l| l.starts_with("vfio-nic: "))
                .map(String::from),
        );
        if let Some(d) = compare(&s.expected, &actual) {
            failures.push(format!(
                "README.md:{}: `vfio-nic {}`:\n{d}",
                s.line,
                s.args.join(" ")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn the_comparison_can_fail() {
    let lines = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let readme = lines(&["pool 0: 4096 buffers", "  ...", "end (1.0 ms)"]);
    assert_eq!(
        compare(
            &readme,
            &lines(&["pool 0: 4096 buffers", "a", "b", "end (2.5 ms)"])
        ),
        None
    );
    assert!(compare(&readme, &lines(&["pool 0: 4095 buffers", "end (1.0 ms)"])).is_some());
    assert!(compare(&lines(&["x"]), &lines(&["x", "more"])).is_some());
}

/// The README's list of supported devices is `devices::ids`'s: every id the drivers open is
/// named there (as `vvvv:dddd`, or as a device id after its vendor's first one).
#[test]
fn the_readme_names_every_supported_device_id() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    for (vendor, device, family, model) in vfio_nic::devices::ids::KNOWN {
        let full = format!("`{vendor:04x}:{device:04x}`");
        let short = format!("`{device:04x}`");
        assert!(
            readme.contains(&full) || readme.contains(&short),
            "README.md does not name {vendor:04x}:{device:04x} ({}, {model})",
            family.name()
        );
    }
}
