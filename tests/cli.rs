//! The `vfio-nic` command line, run as a program on `sim:` and `null:` ports: JSON output and
//! its fields, captures compared byte for byte with what was sent (parsed by the pcap-file
//! reader and again by hand from the format), and one-line errors for bad arguments.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;
use vfio_nic::app::wire::{build_udp_frame, UdpFlow};
use vfio_nic::device::MacAddr;

fn vfio_nic(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vfio-nic"))
        .args(args)
        // Warnings (no huge pages on a build machine) would mix into stderr; the error tests
        // below run without this to check the one-line rule as users see it.
        .env("RUST_LOG", "error")
        .output()
        .expect("run vfio-nic")
}

/// Runs with `--json`, expects success, returns the parsed output.
fn json(args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = vfio_nic(&all);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{args:?} failed: {}{}",
        stdout,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{args:?}: {e}: {stdout}"))
}

#[test]
fn info_reports_model_link_queues_and_vlan() {
    let v = json(&["info", "sim:0"]);
    assert_eq!(v["driver"], "ixgbe");
    assert_eq!(v["pci_id"], "8086:10fb");
    assert_eq!(v["link"]["up"], true);
    assert_eq!(v["link"]["speed_mbps"], 10000);
    assert_eq!(v["bars"][0]["name"], "BAR0");
    assert_eq!(v["queues"]["rx_ring"], 512);
    assert_eq!(v["vlan_caps"]["rx_strip"], true);
    assert_eq!(v["vlan"]["rx_mode"], "sw");
    assert!(v["mac"].as_str().unwrap().parse::<MacAddr>().is_ok());
    let v = json(&["info", "null:0"]);
    assert_eq!(v["driver"], "null");
    assert_eq!(v["pci_id"], Value::Null);
    assert_eq!(v["vlan_caps"]["filter"], false);
    assert_eq!(v["bars"].as_array().unwrap().len(), 0);
}

#[test]
fn stats_has_device_and_software_counters() {
    let v = json(&["stats", "sim:0"]);
    for name in ["GPRC", "GPTC", "GORC", "MPC", "CRCERRS"] {
        assert_eq!(v["hw"][name], 0, "{name}");
    }
    assert_eq!(v["rx_queues"][0]["packets"], 0);
    let v = json(&["stats", "null:0", "--duration", "0.05"]);
    assert!(v["rx_queues"][0]["packets"].as_u64().unwrap() > 0);
    assert_eq!(v["hw"], serde_json::json!({}));
}

#[test]
fn fwd_with_duration_summarises_in_json() {
    let v = json(&["fwd", "null:0", "null:1", "--duration", "0.2"]);
    assert!(v["packets"].as_u64().unwrap() > 0);
    assert!(v["mpps"].as_f64().unwrap() > 0.0);
    assert!(v["ns_per_packet"].as_f64().is_some());
    assert_eq!(v["directions"].as_array().unwrap().len(), 2);
    assert_eq!(v["channels"][0]["name"], "null:0 -> null:1");
    // VLAN options on the software 82599, hardware strip and filter.
    let v = json(&[
        "fwd",
        "sim:0",
        "sim:1",
        "--duration",
        "0.1",
        "--vlan-rx",
        "hw",
        "--vlan-tx",
        "hw",
        "--vlan-filter",
        "100,200",
    ]);
    assert_eq!(v["vlan"]["rx_mode"], "hw");
    assert_eq!(v["vlan"]["table"], serde_json::json!([0, 100, 200]));
    assert!(v["hw"]["sim:0"]["GPRC"].is_u64());
}

#[test]
fn fwd_pairs_ports_as_the_topology_says() {
    // Looped: each port's frames back out of itself, one direction per port.
    let v = json(&[
        "fwd",
        "--topology",
        "loop",
        "null:0",
        "null:1",
        "null:2",
        "--duration",
        "0.2",
    ]);
    let names: Vec<&str> = v["channels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["null:0 -> null:0", "null:1 -> null:1", "null:2 -> null:2"]
    );
    assert!(v["channels"][2]["packets"].as_u64().unwrap() > 0);
    assert_eq!(v["ended"], serde_json::json!([]));
    // Paired: 0 and 1 cross, 2 and 3 cross.
    let v = json(&[
        "fwd",
        "null:0",
        "null:1",
        "null:2",
        "null:3",
        "--duration",
        "0.2",
    ]);
    assert_eq!(v["channels"][3]["name"], "null:3 -> null:2");
    // An odd number of ports cannot pair up.
    fails_in_one_line(
        &["fwd", "null:0", "null:1", "null:2", "--duration", "0.1"],
        "--topology loop",
    );
    fails_in_one_line(
        &["fwd", "--topology", "ring", "null:0", "--duration", "0.1"],
        "use paired",
    );
}

#[test]
fn gen_sends_count_frames() {
    let v = json(&[
        "gen", "sim:0", "--count", "100", "--size", "128", "--vlan", "7:3",
    ]);
    assert_eq!(v["channels"][0]["name"], "sim:0 tx");
    assert_eq!(v["channels"][0]["packets"], 100);
    assert_eq!(v["channels"][0]["bytes"], 100 * 132);
    assert_eq!(v["generator"]["sent"], 100);
    assert_eq!(v["generator"]["vlan"]["vid"], 7);
    assert_eq!(v["hw"]["GPTC"], 100);
    let v = json(&["gen", "null:0", "--count", "10", "--rate", "1000"]);
    assert_eq!(v["generator"]["sent"], 10);
    assert!(v["seconds"].as_f64().unwrap() >= 0.008);
}

#[test]
fn selftest_passes_on_sim_and_skips_what_null_lacks() {
    let v = json(&["selftest", "sim:0", "--frames", "16"]);
    assert_eq!(v["result"], "PASS");
    let names: Vec<&str> = v["tests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["register", "loopback", "interrupt", "link"]);
    let results: Vec<&str> = v["tests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["result"].as_str().unwrap())
        .collect();
    // The software 82599 models MSI-X: EICS reaches the queue's eventfd.
    assert_eq!(results, ["PASS", "PASS", "PASS", "PASS"], "{v}");
    let v = json(&["selftest", "null:0"]);
    assert_eq!(v["result"], "PASS");
    assert_eq!(v["tests"][0]["result"], "N/A");
    assert_eq!(v["tests"][3]["result"], "PASS");
}

#[test]
fn respond_answers_the_probe_on_its_vlan_only() {
    let v = json(&[
        "respond",
        "sim:1",
        "--ip",
        "192.0.2.1/24",
        "--vlan",
        "100",
        "--vlan-rx",
        "hw",
        "--probe-from",
        "sim:0",
        "--pings",
        "2",
    ]);
    assert_eq!(v["probe"]["ok"], true);
    assert_eq!(v["responder"]["arp_replies"], 1);
    assert_eq!(v["responder"]["echo_replies"], 2);
    // The probe is sent on VLAN 100; a filter without 100 drops it before the responder sees
    // it: no reply, so the probe fails with a non-zero exit and one line.
    let out = vfio_nic(&probe_without_reply(&["--duration", "0.3"]));
    assert!(!out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
}

/// `respond` with a probe sent on VLAN 100 through a filter that holds only VLAN 200: the
/// responder never sees it, so the probe gets no reply and the run fails. `extra` follows.
fn probe_without_reply<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "respond",
        "sim:1",
        "--ip",
        "192.0.2.1/24",
        "--vlan",
        "100",
        "--vlan-filter",
        "200",
        "--probe-from",
        "sim:0",
    ];
    args.extend_from_slice(extra);
    args
}

/// One pcap file parsed by hand from the format (libpcap's savefile.c layout): 24-byte global
/// header, then per record ts_sec, ts_usec, incl_len, orig_len and the bytes.
fn parse_pcap_by_hand(bytes: &[u8]) -> Vec<(u32, u32, Vec<u8>)> {
    let u32le = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    assert_eq!(
        u32le(bytes, 0),
        0xa1b2_c3d4,
        "little-endian, microsecond magic"
    );
    assert_eq!(&bytes[4..8], &[2, 0, 4, 0], "version 2.4");
    assert_eq!(u32le(bytes, 20), 1, "LINKTYPE_ETHERNET");
    let snaplen = u32le(bytes, 16);
    let mut out = Vec::new();
    let mut at = 24;
    while at < bytes.len() {
        let (sec, usec, incl, orig) = (
            u32le(bytes, at),
            u32le(bytes, at + 4),
            u32le(bytes, at + 8),
            u32le(bytes, at + 12),
        );
        assert!(usec < 1_000_000 && incl <= snaplen && incl == orig);
        at += 16;
        out.push((sec, usec, bytes[at..at + incl as usize].to_vec()));
        at += incl as usize;
    }
    assert_eq!(at, bytes.len(), "no trailing bytes");
    out
}

/// What `gen --vlan VID:PCP --size N` from `src` sends, built here: the frame with the 802.1Q
/// tag after the MAC addresses.
fn expected_frames(src: MacAddr, count: u64, size: usize, tci: u16) -> Vec<Vec<u8>> {
    let flow = UdpFlow {
        dst_mac: MacAddr::BROADCAST,
        src_mac: src,
        src_ip: [198, 18, 0, 1].into(),
        dst_ip: [198, 18, 0, 2].into(),
        src_port: 1024,
        dst_port: 9,
        size,
    };
    (0..count)
        .map(|seq| {
            let mut f = Vec::new();
            assert!(build_udp_frame(&flow, seq, &mut f));
            let mut tagged = f[..12].to_vec();
            tagged.extend_from_slice(&[0x81, 0x00]);
            tagged.extend_from_slice(&tci.to_be_bytes());
            tagged.extend_from_slice(&f[12..]);
            // Independent of our builder: IPv4 header checksum and total length by hand.
            let ip = &tagged[18..38];
            let sum: u32 = ip
                .chunks(2)
                .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
                .sum();
            assert_eq!((sum & 0xffff) + (sum >> 16), 0xffff, "IPv4 checksum");
            assert_eq!(
                usize::from(u16::from_be_bytes([ip[2], ip[3]])),
                size - 14,
                "IPv4 total length"
            );
            tagged
        })
        .collect()
}

/// `capture RX -w PATH --gen-on GEN` of 40 frames of 100 bytes tagged VID 100 PCP 5, through
/// a VLAN filter of VID 100, in receive mode `mode`, without timestamps; its JSON.
fn capture_tagged(rx: &str, gen: &str, mode: &str, path: &Path) -> Value {
    json(&[
        "capture",
        rx,
        "-w",
        path.to_str().unwrap(),
        "--gen-on",
        gen,
        "--count",
        "40",
        "--vlan",
        "100:5",
        "--size",
        "100",
        "--vlan-rx",
        mode,
        "--no-timestamps",
        "--vlan-filter",
        "100",
    ])
}

#[test]
fn capture_of_generated_tagged_traffic_is_byte_identical_in_every_vlan_mode() {
    let dir = tempfile::tempdir().unwrap();
    let src: MacAddr = json(&["info", "sim:0"])["mac"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let expect = expected_frames(src, 40, 100, 0xa064); // VID 100, PCP 5
    let mut files = Vec::new();
    for mode in ["hw", "sw", "deferred"] {
        let path = dir.path().join(format!("{mode}.pcap"));
        let v = capture_tagged("sim:1", "sim:0", mode, &path);
        assert_eq!(v["frames"], 40, "{mode}");
        assert_eq!(v["vlan"]["rx_mode"], mode);
        assert_eq!(v["channels"][0]["name"], "sim:1 rx");
        assert_eq!(v["channels"][0]["packets"], 40);
        assert_eq!(v["channels"][1]["packets"], 40);

        // The pcap-file crate's reader (not the writer's code path).
        let bytes = std::fs::read(&path).unwrap();
        let mut reader = pcap_file::pcap::PcapReader::new(&bytes[..]).unwrap();
        assert_eq!(reader.header().datalink, pcap_file::DataLink::ETHERNET);
        let mut read = Vec::new();
        while let Some(p) = reader.next_packet() {
            read.push(p.unwrap().data.into_owned());
        }
        assert_eq!(read, expect, "pcap-file reader, mode {mode}");

        // And by hand from the format.
        let by_hand = parse_pcap_by_hand(&bytes);
        assert!(by_hand.iter().all(|(s, u, _)| (*s, *u) == (0, 0)));
        let frames: Vec<Vec<u8>> = by_hand.into_iter().map(|r| r.2).collect();
        assert_eq!(frames, expect, "by hand, mode {mode}");
        files.push(bytes);
    }
    assert!(files.windows(2).all(|w| w[0] == w[1]), "files differ");
}

#[test]
fn capture_filter_drops_other_vlans() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.pcap");
    for mode in ["hw", "sw", "deferred"] {
        let v = json(&[
            "capture",
            "sim:1",
            "-w",
            path.to_str().unwrap(),
            "--gen-on",
            "sim:0",
            "--count",
            "10",
            "--vlan",
            "100",
            "--vlan-rx",
            mode,
            "--vlan-filter",
            "200",
            "--no-timestamps",
        ]);
        assert_eq!(v["frames"], 0, "{mode}");
        assert_eq!(v["generator"]["sent"], 10);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 24, "header only");
    }
}

/// Runs a command expected to fail, as a user would (no RUST_LOG), and returns its stderr.
fn fails_in_one_line(args: &[&str], needle: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_vfio-nic"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} succeeded");
    assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    assert!(
        err.starts_with("vfio-nic: ") && err.contains(needle),
        "{args:?}: {err}"
    );
}

#[test]
fn bad_arguments_fail_with_one_line() {
    fails_in_one_line(&["info", "0000:zz:00.0"], "is not a port name");
    fails_in_one_line(&["info", "01:00"], "is not a port name");
    fails_in_one_line(&["info", "foo:1"], "unknown port kind");
    fails_in_one_line(&["reg", "sim:0", "FOO"], "no register 'FOO'");
    fails_in_one_line(&["gen", "null:0", "--vlan", "4096", "--count", "1"], "4096");
    fails_in_one_line(
        &["gen", "null:0", "--vlan", "4095", "--count", "1"],
        "reserved",
    );
    fails_in_one_line(
        &["fwd", "null:0", "--vlan-filter", "10,4096"],
        "out of range",
    );
    fails_in_one_line(
        &[
            "capture",
            "null:0",
            "-w",
            "/tmp/x.pcap",
            "--vlan-filter",
            "4095",
        ],
        "reserved",
    );
    fails_in_one_line(
        &[
            "respond",
            "null:0",
            "--ip",
            "192.0.2.1/24",
            "--vlan",
            "4096",
        ],
        "4096",
    );
    fails_in_one_line(&["respond", "null:0", "--ip", "192.0.2.1"], "prefix");
    fails_in_one_line(
        &[
            "capture",
            "null:0",
            "-w",
            "/nonexistent/x.pcap",
            "--count",
            "1",
        ],
        "/nonexistent/x.pcap",
    );
    fails_in_one_line(
        &[
            "gen",
            "null:0",
            "--vlan",
            "5",
            "--vlan-tx",
            "hw",
            "--count",
            "1",
        ],
        "use transmit mode sw",
    );
    fails_in_one_line(
        &["capture", "sim:1", "-w", "/tmp/y.pcap", "--vlan", "5"],
        "--gen-on",
    );
    assert!(!Path::new("/nonexistent/x.pcap").exists());
}

/// Runs `args` with standard output read for one line and then closed, as `vfio-nic ... | head
/// -1` does; returns the exit status and standard error. Fails after 20 s.
fn with_reader_gone(args: &[&str]) -> (std::process::ExitStatus, String) {
    run_with_reader_gone(Path::new(env!("CARGO_BIN_EXE_vfio-nic")), args, 1)
}

/// Runs `program` with `args`, its standard output read for `lines` lines (0: none) and then
/// closed; returns the exit status and standard error. Fails after 20 s.
fn run_with_reader_gone(
    program: &Path,
    args: &[&str],
    lines: usize,
) -> (std::process::ExitStatus, String) {
    use std::io::{BufRead, BufReader, Read};
    use std::process::Stdio;
    let mut child = Command::new(program)
        .args(args)
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run {}: {e}", program.display()));
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    for _ in 0..lines {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        assert!(!line.is_empty(), "{args:?} printed too little");
    }
    drop(reader);
    // The reader is gone now (its end of the pipe was dropped with the BufReader). A program
    // must stop at its next write; the longest gap between two writes of these programs is the
    // fuzzer's exhaustive checks in a debug build (about 10 s of CPU, when its first line got
    // into the pipe before the reader went), so 45 s: a loaded machine passes, and a program
    // that ignores the broken pipe (the forwarder's 60 s run) does not.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(45);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > deadline {
            child.kill().ok();
            panic!("{args:?} did not exit within 45 s of its reader going away");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status, err)
}

#[test]
fn a_reader_that_goes_away_ends_the_command_quietly() {
    // A register dump larger than a pipe's buffer, and a forwarder that prints a status line
    // every 50 ms for 60 s: both stop at the first write after the reader left, exit 0, and
    // say nothing (no "failed printing to stdout" panic).
    for args in [
        &["regs", "sim:60"][..],
        &[
            "fwd",
            "null:0",
            "--duration",
            "60",
            "--stats-period",
            "0.05",
        ][..],
    ] {
        let (status, err) = with_reader_gone(args);
        assert!(status.success(), "{args:?}: {status}: {err}");
        assert!(err.trim().is_empty(), "{args:?} wrote to stderr: {err}");
    }
}

#[test]
fn a_failure_is_reported_even_when_the_reader_went_away() {
    // The probe gets no reply (VLAN 100 is not in the filter): the run fails. Its reader goes
    // after the first status line, so printing fails too; the failure must win, not the pipe.
    let (status, err) = with_reader_gone(&probe_without_reply(&[
        "--duration",
        "2",
        "--stats-period",
        "0.05",
    ]));
    assert!(!status.success(), "a failed probe exited {status}");
    assert!(err.contains("probe"), "{err}");
}

/// The bench tests run one at a time: each times repetitions of a few milliseconds, and the
/// interrupt row keeps a core busy with a spinning device thread; beside another bench on two
/// cores, a threaded model could get no CPU for a whole repetition ("nothing was forwarded").
fn bench_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Ctrl-C (SIGINT) during `vfio-nic bench` ends it as an interruption: the one-line error
/// says so, not "invalid configuration".
#[test]
fn a_bench_stopped_by_ctrl_c_says_it_was_interrupted() {
    use std::io::{BufRead, BufReader, Read};
    use std::process::Stdio;
    let _one_at_a_time = bench_lock();
    let mut child = Command::new(env!("CARGO_BIN_EXE_vfio-nic"))
        .args([
            "bench",
            "--device",
            "null",
            "--pairs",
            "50",
            "--seconds",
            "1",
        ])
        .args(["--work", "fwd", "--traffic", "untagged"])
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run vfio-nic bench");
    // The first line is printed after the Ctrl-C handler is in place.
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("vfio-nic bench:"), "{first}");
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    // It stops before its next pair of one-second runs: well within 30 s.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > deadline {
            child.kill().ok();
            panic!("bench did not stop within 30 s of SIGINT");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(!status.success(), "an interrupted bench is not a success");
    assert_eq!(
        err.trim_end(),
        "vfio-nic: bench: interrupted (Ctrl-C) before the end",
        "{err}"
    );
}

#[test]
fn bench_reports_paired_comparisons_with_their_intervals() {
    let _one_at_a_time = bench_lock();
    // A smoke test of the report's shape; no figure is asserted (benchmarks report, they do
    // not pass or fail on speed).
    let v = json(&[
        "bench",
        "--device",
        "null",
        "--pairs",
        "3",
        "--seconds",
        "0.01",
        "--work",
        "fwd",
        "--traffic",
        "tagged",
    ]);
    assert_eq!(v["interval"], "95 % paired t");
    let all = v["comparisons"].as_array().unwrap();
    holm_judged_the_matrix(&v);
    // A comparison whose baseline moved off its run before is followed by an A/A anew (at
    // 10 ms a repetition that may happen or not); the planned ones come in their order.
    let c: Vec<&Value> = all.iter().filter(|c| c["kind"] != "A/A anew").collect();
    let kinds: Vec<&str> = c.iter().map(|c| c["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["A/A", "receive", "pipeline", "return"], "{v}");
    for (i, row) in all.iter().enumerate() {
        let moved = !row["baseline_moved"].is_null();
        let anew_next = all.get(i + 1).is_some_and(|n| n["kind"] == "A/A anew");
        assert_eq!(
            moved, anew_next,
            "a moved baseline, and only one, brings an A/A anew: {v}"
        );
        if moved {
            let (f, g) = (
                row["floor"].as_f64().unwrap(),
                all[i + 1]["floor"].as_f64().unwrap(),
            );
            let own = if row["baseline_moved"]["anew_matches"] == true {
                g
            } else {
                f.max(g)
            };
            assert_eq!(f, own, "judged by the new floor, or the larger of two: {v}");
        }
    }
    assert!(
        c[3]["baseline_moved"].is_null(),
        "the pool-return row's A is not the A/A's loop: {v}"
    );
    for piped in &c[2..] {
        let note = piped["pipeline"].as_str().unwrap();
        assert!(
            note.contains("A 0.000") && note.contains("B 1.0"),
            "A recycles on its core, every buffer of B comes home by the slow path: {note}"
        );
    }
    assert_eq!(v["pipeline_lines"].as_array().unwrap().len(), 2, "{v}");
    assert_eq!(c[0]["kind"], "A/A");
    assert_eq!(c[0]["verdict"]["verdict"], "no_difference");
    assert_eq!(
        (c[1]["a"].as_str(), c[1]["b"].as_str()),
        (Some("rx deferred tx sw"), Some("rx sw tx sw"))
    );
    for side in ["a_ns", "b_ns"] {
        assert_eq!(c[1][side].as_array().unwrap().len(), 3, "{side}");
    }
    let (lo, mean, hi) = (
        c[1]["diff"]["lo"].as_f64().unwrap(),
        c[1]["diff"]["mean"].as_f64().unwrap(),
        c[1]["diff"]["hi"].as_f64().unwrap(),
    );
    assert!(lo <= mean && mean <= hi, "{lo} {mean} {hi}");
    if c[1]["baseline_moved"].is_null() {
        assert_eq!(
            c[1]["floor"], c[0]["floor"],
            "judged with its group's A/A floor"
        );
    }
}

/// The verdicts of a bench run's JSON were corrected for the matrix: the family is every
/// comparison but the A/A rows, each of those has a raw p and a Holm-adjusted one not below it,
/// the smallest adjusted p is the smallest raw one times the family's size, and no difference is
/// declared with an adjusted p of 0.05 or more.
fn holm_judged_the_matrix(v: &Value) {
    let all = v["comparisons"].as_array().unwrap();
    let tested: Vec<&Value> = all
        .iter()
        .filter(|c| !c["kind"].as_str().unwrap().starts_with("A/A"))
        .collect();
    assert_eq!(v["correction"]["method"], "holm", "{v}");
    assert_eq!(v["correction"]["family_size"], tested.len(), "{v}");
    for c in all {
        let p = c["p"].as_f64().unwrap_or_else(|| panic!("no raw p: {c}"));
        assert!((0.0..=1.0).contains(&p), "{c}");
        if c["kind"].as_str().unwrap().starts_with("A/A") {
            assert!(
                c["p_holm"].is_null(),
                "an A/A row is a floor, not tested: {c}"
            );
            assert_eq!(c["verdict"]["verdict"], "no_difference", "{c}");
            continue;
        }
        let held = c["p_holm"]
            .as_f64()
            .unwrap_or_else(|| panic!("no p_holm: {c}"));
        assert!(p <= held && held <= 1.0, "{c}");
        if held >= 0.05 {
            assert_eq!(c["verdict"]["verdict"], "no_difference", "{c}");
        }
    }
    let smallest = |key: &str| {
        tested
            .iter()
            .map(|c| c[key].as_f64().unwrap())
            .fold(f64::INFINITY, f64::min)
    };
    let m = tested.len() as f64;
    assert!(
        (smallest("p_holm") - (m * smallest("p")).min(1.0)).abs() < 1e-12,
        "{v}"
    );
}

/// `bench` as people read it: the table comes once the matrix is measured (its verdicts need
/// every p-value of the run), every row but the floors with its Holm-adjusted p.
#[test]
fn bench_prints_the_judged_table_with_holm_adjusted_p() {
    let _one_at_a_time = bench_lock();
    let out = vfio_nic(&[
        "bench",
        "--device",
        "null",
        "--pairs",
        "2",
        "--seconds",
        "0.01",
        "--work",
        "l2",
        "--traffic",
        "untagged",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    let header = lines
        .iter()
        .position(|l| l.starts_with("dev "))
        .unwrap_or_else(|| panic!("no table header: {stdout}"));
    assert!(
        lines[..header]
            .iter()
            .any(|l| l.starts_with("p(Holm): ") && l.contains("over the 1 comparison of this run")),
        "the table says what p(Holm) is and over how many comparisons: {stdout}"
    );
    let rows: Vec<&str> = lines[header + 1..]
        .iter()
        .copied()
        .filter(|l| l.starts_with("null "))
        .collect();
    assert!(rows.len() >= 2, "{stdout}");
    for row in rows {
        let floor = row.contains(" A/A ");
        assert_eq!(
            floor,
            !row.contains(", p(Holm) "),
            "p(Holm) on every row but the floors: {row}"
        );
    }
}

/// Every command on the queue-manager device (`qm:N`): the same JSON as on the other ports,
/// the portal's registers decoded from `regs/qbman.toml`, and a capture of tagged traffic
/// byte-identical in both receive modes the device has (Hardware is refused by name).
#[test]
fn every_command_works_on_qm_ports() {
    let v = json(&["info", "qm:10"]);
    assert_eq!(v["driver"], "qm");
    assert_eq!(v["link"]["up"], true);
    let v = json(&["regs", "qm:10", "CFG", "EQCR_PI", "--decode"]);
    let regs = v["registers"].as_array().unwrap_or_else(|| panic!("{v}"));
    assert_eq!(regs[1]["name"], "EQCR_PI");
    assert!(regs[1]["fields"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["name"] == "VB"));
    let v = json(&["reg", "qm:10", "EQCR_CI"]);
    assert!(v["value"].is_string(), "{v}");
    let v = json(&["selftest", "qm:10"]);
    assert_eq!(v["tests"][0]["result"], "PASS", "{v}");
    assert_eq!(v["tests"][3]["result"], "PASS", "{v}");
    let v = json(&["stats", "qm:10"]);
    assert!(v["hw"]["ingress_nobuffer_discards"].is_u64(), "{v}");
    let v = json(&["gen", "qm:10", "--count", "50", "--size", "128"]);
    assert_eq!(v["channels"][0]["packets"], 50);
    let v = json(&["fwd", "qm:12", "qm:13", "--duration", "0.2"]);
    assert!(v["hw"]["qm:12"]["ingress_all_frames"].is_u64(), "{v}");
    let v = json(&[
        "respond",
        "qm:15",
        "--ip",
        "192.0.2.1/24",
        "--vlan",
        "100",
        "--vlan-rx",
        "deferred",
        "--probe-from",
        "qm:14",
        "--pings",
        "2",
    ]);
    assert_eq!(v["probe"]["ok"], true, "{v}");

    let dir = tempfile::tempdir().unwrap();
    let src: MacAddr = json(&["info", "qm:16"])["mac"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let expect = expected_frames(src, 40, 100, 0xa064);
    for mode in ["sw", "deferred"] {
        let path = dir.path().join(format!("{mode}.pcap"));
        let v = capture_tagged("qm:17", "qm:16", mode, &path);
        assert_eq!(v["frames"], 40, "{mode}: {v}");
        let frames: Vec<Vec<u8>> = parse_pcap_by_hand(&std::fs::read(&path).unwrap())
            .into_iter()
            .map(|r| r.2)
            .collect();
        assert_eq!(frames, expect, "mode {mode}");
    }
    // The port opens (and may warn about huge pages) before the mode is refused: errors only.
    let never = dir.path().join("never.pcap");
    let out = vfio_nic(&[
        "capture",
        "qm:17",
        "-w",
        never.to_str().unwrap(),
        "--vlan-rx",
        "hw",
        "--count",
        "1",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("qm:17: VLAN receive mode hw"), "{err}");
}

/// `vfio-nic --json bench --device INLINE` (the threaded device and its inline mode) on
/// untagged forwarding, briefly: checks that the plan is the seed's comparison (Software vs
/// Deferred receive) after an A/A on each of the two, and returns the report with the threaded
/// device's seed row.
fn seed_comparison(inline: &str, threaded: &str) -> (Value, Value) {
    let v = json(&[
        "bench",
        "--device",
        inline,
        "--pairs",
        "2",
        "--seconds",
        "0.01",
        "--work",
        "fwd",
        "--traffic",
        "untagged",
    ]);
    let all = v["comparisons"].as_array().unwrap();
    let planned: Vec<(&str, &str)> = all
        .iter()
        .filter(|c| c["kind"] != "A/A anew")
        .map(|c| (c["device"].as_str().unwrap(), c["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(
        planned,
        [
            (threaded, "A/A"),
            (threaded, "receive"),
            (inline, "A/A"),
            (inline, "receive")
        ],
        "{v}"
    );
    let seed = all
        .iter()
        .find(|c| c["device"] == threaded && c["kind"] == "receive")
        .unwrap()
        .clone();
    assert_eq!(seed["a"], "rx deferred tx sw", "{seed}");
    assert_eq!(seed["b"], "rx sw tx sw", "{seed}");
    (v, seed)
}

/// `bench` on the queue-manager device, threaded and inline: the seed's comparison (Software
/// vs Deferred receive) runs on both, with the model's pace reported for the threaded one.
/// A smoke test of the report's shape; no figure is asserted.
#[test]
fn bench_runs_the_seed_comparison_on_the_qm_device() {
    let _one_at_a_time = bench_lock();
    let (v, seed) = seed_comparison("qm-inline", "qm");
    assert!(seed["model_ns_per_frame"].is_number(), "{seed}");
    holm_judged_the_matrix(&v);
}

#[test]
fn bench_runs_the_seed_comparison_on_the_virtio_device() {
    let _one_at_a_time = bench_lock();
    let (v, seed) = seed_comparison("virtio-inline", "virtio");
    let all = v["comparisons"].as_array().unwrap();
    // The threaded device's own time per frame (its device thread polled and found work).
    assert!(seed["model_ns_per_frame"].is_number(), "{seed}");
    let inline = all
        .iter()
        .find(|c| c["device"] == "virtio-inline" && c["kind"] == "receive")
        .unwrap();
    assert!(inline["model_ns_per_frame"].is_null(), "{inline}");
    // The answer per device: one line each, "a difference" or "no difference measurable".
    let lines: Vec<&str> = v["seed_lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    for (line, dev) in lines.iter().zip(["virtio", "virtio-inline"]) {
        assert!(
            line.starts_with(&format!("seed question, {dev} untagged fwd: ")),
            "{line}"
        );
        assert!(
            line.contains(": a difference") || line.contains(": no difference measurable"),
            "{line}"
        );
    }
    holm_judged_the_matrix(&v);
}

/// An example program, built for this test: `cargo test` builds the examples only as test
/// harnesses, so the first call runs `cargo build --examples` (in this test's profile; the
/// build lock is free while tests run) and the programs are target/<profile>/examples/NAME.
fn example(name: &str) -> std::path::PathBuf {
    static BUILT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    let dir = BUILT.get_or_init(|| {
        let exe = std::env::current_exe().expect("the test's own path");
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("target/<profile>/deps/");
        let mut build = Command::new(env!("CARGO"));
        build
            .args(["build", "--quiet", "--examples"])
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        if profile_dir.ends_with("release") {
            build.arg("--release");
        }
        let status = build.status().expect("run cargo build --examples");
        assert!(status.success(), "cargo build --examples failed: {status}");
        profile_dir.join("examples")
    });
    dir.join(name)
}

#[test]
fn examples_end_quietly_when_their_reader_goes_away() {
    // Every example program, with its reader gone before its first line (`| head -0`), and the
    // forwarder, which prints once a second, after its first line (`| head -1`): each stops at
    // the write, exits 0 and says nothing (no "failed printing to stdout" panic).
    let runs: [(&str, &[&str], usize); 6] = [
        ("forward", &["null:0", "null:1", "--seconds", "0.2"], 0),
        ("forward", &["null:0", "null:1", "--seconds", "60"], 1),
        (
            "instructions",
            &["deferred", "sw", "untagged", "fwd", "2000"],
            0,
        ),
        ("model_cost", &["20000"], 0),
        ("device_floor", &["20000"], 0),
        ("vlan-fuzz", &["--seconds", "0.2", "--iterations", "100"], 0),
    ];
    for (name, args, lines) in runs {
        let (status, err) = run_with_reader_gone(&example(name), args, lines);
        assert!(status.success(), "{name} {args:?}: {status}: {err}");
        assert!(
            err.trim().is_empty(),
            "{name} {args:?} wrote to stderr: {err}"
        );
    }
}

/// `bench --device irq`: the interrupt row (poll against the adaptive loop on the threaded
/// software 82599), its three measures corrected together. A smoke test of the report's shape
/// and of the wake-up measurement receiving every frame; no figure is asserted.
#[test]
fn bench_runs_the_interrupt_row() {
    let _one_at_a_time = bench_lock();
    let v = json(&[
        "bench",
        "--device",
        "irq",
        "--pairs",
        "2",
        "--seconds",
        "0.03",
    ]);
    let rows = v["rows"].as_array().unwrap();
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r["measure"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["load ns/pkt", "wake median ns", "wake p99 ns"],
        "{v}"
    );
    assert_eq!(v["correction"]["family_size"], 3, "{v}");
    for r in rows {
        assert!(r["a_poll"]["mean"].as_f64().unwrap() > 0.0, "{v}");
        assert!(r["b_adaptive"]["mean"].as_f64().unwrap() > 0.0, "{v}");
        // (A p that cannot be computed, NaN, is written as null.)
        if let (Some(ph), Some(p)) = (r["p_holm"].as_f64(), r["p"].as_f64()) {
            assert!(ph >= p, "{v}");
        }
    }
}

/// `--interrupts` on the software 82599: `fwd` and `capture` with nothing arriving sleep (and
/// say how often), `respond` still answers its probe while it sleeps between frames, `info`
/// shows the vectors; a port without an interrupt mode refuses the option in one line.
#[test]
fn traffic_commands_sleep_in_interrupt_mode() {
    let v = json(&[
        "fwd",
        "sim:40",
        "sim:41",
        "--interrupts",
        "--idle-polls",
        "8",
        "--duration",
        "0.3",
    ]);
    assert!(v["idle"]["sleeps"].as_u64().unwrap() >= 1, "{v}");
    let file = std::env::temp_dir().join(format!("vfio-nic-irq-{}.pcap", std::process::id()));
    let v = json(&[
        "capture",
        "sim:42",
        "-w",
        file.to_str().unwrap(),
        "--interrupts",
        "--duration",
        "0.3",
    ]);
    assert!(v["idle"]["sleeps"].as_u64().unwrap() >= 1, "{v}");
    let _ = std::fs::remove_file(&file);
    let v = json(&[
        "respond",
        "sim:45",
        "--ip",
        "192.0.2.1/24",
        "--probe-from",
        "sim:44",
        "--interrupts",
        "--idle-polls",
        "4",
    ]);
    assert_eq!(v["probe"]["ok"], true, "{v}");
    assert!(v["idle"].is_object(), "{v}");
    let v = json(&["info", "sim:46"]);
    assert_eq!(v["interrupts"]["msix"], 16, "{v}");
    fails_in_one_line(
        &["fwd", "null:0", "--interrupts", "--duration", "0.1"],
        "have an interrupt mode",
    );
    fails_in_one_line(
        &["fwd", "sim:0", "--interrupts", "--idle-polls", "0"],
        "--idle-polls must be 1 or more",
    );
}

/// `--help` of `verb` (the top level when empty), as text.
fn help(verb: &[&str]) -> String {
    let mut args = verb.to_vec();
    args.push("--help");
    let out = vfio_nic(&args);
    assert!(out.status.success(), "{args:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The help texts name every kind of port the parser takes, and every capability sentence
/// names exactly the kinds the table (which the drivers are tested against) gives it: a kind
/// added to `devices::kinds` and missing from a help text fails here.
#[test]
fn every_help_text_names_the_kinds_of_the_port_table() {
    use vfio_nic::devices::kinds::{names_with, KINDS};
    let top = help(&[]);
    for k in KINDS {
        assert!(
            top.contains(k.syntax) || top.contains(k.name),
            "the top-level help lacks {}: {top}",
            k.name
        );
    }
    for verb in ["info", "gen", "selftest"] {
        let h = help(&[verb]);
        for k in KINDS.iter().filter(|k| k.prefix.is_some()) {
            let short = k.syntax.split('[').next().unwrap();
            assert!(h.contains(short), "`{verb} --help` lacks {short}: {h}");
        }
    }
    for verb in ["regs", "reg"] {
        let h = help(&[verb]);
        for k in KINDS.iter().filter(|k| k.prefix.is_some()) {
            assert_eq!(
                h.contains(k.syntax),
                k.registers,
                "`{verb} --help` and the table disagree on {}: {h}",
                k.name
            );
        }
    }
    let with_irq = names_with(|k| k.interrupts);
    for verb in ["fwd", "respond", "capture"] {
        let h = help(&[verb]).replace('\n', " ");
        assert!(
            h.contains(&format!("({with_irq} ports; others refuse it)")),
            "`{verb} --help` does not name the kinds with interrupts ({with_irq}): {h}"
        );
    }
    let h = help(&["selftest"]).replace('\n', " ");
    assert!(h.contains(&names_with(|k| k.registers)), "{h}");
}

/// The table's interrupt column is what the in-memory drivers do: asked for interrupts, a kind
/// that has them opens its receive queue with one, and the others are refused by
/// `--interrupts` with the table's sentence.
#[test]
fn the_port_tables_interrupt_column_is_what_the_drivers_do() {
    use vfio_nic::devices::kinds::KINDS;
    for k in KINDS
        .iter()
        .filter(|k| matches!(k.prefix, Some("sim" | "qm" | "null")))
    {
        let port = format!("{}:0", k.prefix.unwrap());
        let out = vfio_nic(&[
            "fwd",
            &port,
            "--interrupts",
            "--duration",
            "0.2",
            "--stats-period",
            "0",
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.success(),
            k.interrupts,
            "{port} --interrupts: table says {}, the tool said: {err}",
            k.interrupts
        );
        if !k.interrupts {
            assert!(err.contains("have an interrupt mode"), "{port}: {err}");
        }
    }
}

/// `--buf-size` reaches every family's pool: a size a device takes opens (and its pool says
/// so), one it cannot use is refused with the range it takes, and a malformed one before any
/// port opens.
#[test]
fn buf_size_sets_every_pool_and_is_refused_with_the_range() {
    for port in ["sim:0", "null:0", "qm:0"] {
        let v = json(&["--buf-size", "4096", "stats", port]);
        assert_eq!(v["pools"][0]["buf_size"], 4096 + 128, "{port}: {v}");
    }
    fails_in_one_line(
        &["--buf-size", "32768", "info", "sim:0"],
        "must be 1024 to 16384 bytes",
    );
    fails_in_one_line(
        &["--buf-size", "100", "info", "null:0"],
        "give a multiple of 128 from 128 to",
    );
    fails_in_one_line(
        &[
            "fwd",
            "null:0",
            "--buf-size",
            "1024",
            "--null-size",
            "1500",
            "--duration",
            "0.1",
        ],
        "must be between 1 and 1024",
    );
}
