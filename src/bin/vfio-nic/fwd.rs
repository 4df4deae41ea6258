//! `vfio-nic fwd`: forward between two ports (or back out of one), like testpmd's io mode.
//!
//! One thread per queue pair; each publishes its counters with relaxed stores once per burst, and
//! the main thread prints a status line once per `--stats-period` and a summary at the end.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use vfio_nic::device::Port;
use vfio_nic::forward::{forward_burst, FwdStats};
use vfio_nic::port::{self, AnyRx, AnyTx, PortConfig};
use vfio_nic::{Error, Result};

/// Options of `fwd`.
#[derive(clap::Args, Debug)]
pub struct FwdArgs {
    /// One port (frames go back out of it) or two (frames cross over).
    #[arg(required = true, num_args = 1..=2)]
    pub ports: Vec<String>,
    /// Packets per burst.
    #[arg(long, default_value_t = 32)]
    pub burst: usize,
    /// Queue pairs per port (one forwarding thread each).
    #[arg(long, default_value_t = 1)]
    pub queues: u16,
    /// Stop after this many seconds (default: run until Ctrl-C).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Seconds between status lines (0: none).
    #[arg(long, default_value_t = 1.0)]
    pub stats_period: f64,
    /// Frame size of null ports.
    #[arg(long, default_value_t = 64)]
    pub null_size: usize,
    /// Null ports write a template into every received frame and read every sent one (DPDK's copy=1).
    #[arg(long)]
    pub null_copy: bool,
}

/// Shared counters of one direction, written by its forwarding thread.
#[derive(Default)]
struct Live {
    rx: AtomicU64,
    tx: AtomicU64,
    dropped: AtomicU64,
}

fn publish(live: &Live, st: &FwdStats) {
    live.rx.store(st.rx, Relaxed);
    live.tx.store(st.tx, Relaxed);
    live.dropped.store(st.tx_dropped, Relaxed);
}

/// Runs the forwarder.
pub fn run(args: &FwdArgs, json_out: bool, stop: Arc<AtomicBool>) -> Result<()> {
    if args.burst == 0 || args.burst > 512 {
        return Err(Error::InvalidConfig(format!(
            "--burst {} must be between 1 and 512",
            args.burst
        )));
    }
    let mut config = PortConfig::default();
    config.null.frame_size = args.null_size;
    config.null.copy = args.null_copy;
    config.null.queues = args.queues;
    let mut a = port::open(&args.ports[0], &config)?;
    let (a_rx, a_tx) = a.take_queues()?;
    // Ports outlive their queues: they are dropped (device reset) after the threads end.
    let mut ports = Vec::new();
    // With one port, frames go back out of the same port: A.rx -> A.tx.
    let (pairs, names) = if let Some(second) = args.ports.get(1) {
        let mut b = port::open(second, &config)?;
        let (b_rx, b_tx) = b.take_queues()?;
        let names = vec![
            format!("{} -> {}", args.ports[0], second),
            format!("{} -> {}", second, args.ports[0]),
        ];
        let mut pairs: Vec<Vec<(AnyRx, AnyTx)>> = Vec::new();
        for ((arx, btx), (brx, atx)) in a_rx.into_iter().zip(b_tx).zip(b_rx.into_iter().zip(a_tx)) {
            pairs.push(vec![(arx, btx), (brx, atx)]);
        }
        ports.push(b);
        (pairs, names)
    } else {
        let names = vec![format!("{} -> {}", args.ports[0], args.ports[0])];
        let pairs = a_rx.into_iter().zip(a_tx).map(|p| vec![p]).collect();
        (pairs, names)
    };
    let directions = names.len();
    let live: Arc<Vec<Live>> = Arc::new(
        (0..directions * pairs.len())
            .map(|_| Live::default())
            .collect(),
    );
    let burst = args.burst;
    let mut threads = Vec::new();
    for (q, mut dirs) in pairs.into_iter().enumerate() {
        let live = live.clone();
        let stop = stop.clone();
        threads.push(std::thread::spawn(move || -> Result<()> {
            let mut batch = Vec::with_capacity(burst);
            let mut stats = vec![FwdStats::default(); dirs.len()];
            while !stop.load(Relaxed) {
                for (d, (rx, tx)) in dirs.iter_mut().enumerate() {
                    forward_burst(rx, tx, &mut batch, burst, &mut stats[d])?;
                    publish(&live[q * directions + d], &stats[d]);
                }
            }
            Ok(())
        }));
    }

    let start = Instant::now();
    let end = args.duration.map(|d| start + Duration::from_secs_f64(d));
    let period = (args.stats_period > 0.0).then(|| Duration::from_secs_f64(args.stats_period));
    let mut last = (start, vec![0u64; directions]);
    let totals = |live: &[Live]| -> Vec<(u64, u64, u64)> {
        (0..directions)
            .map(|d| {
                live.iter()
                    .skip(d)
                    .step_by(directions)
                    .fold((0, 0, 0), |acc, l| {
                        (
                            acc.0 + l.rx.load(Relaxed),
                            acc.1 + l.tx.load(Relaxed),
                            acc.2 + l.dropped.load(Relaxed),
                        )
                    })
            })
            .collect()
    };
    loop {
        std::thread::sleep(Duration::from_millis(20));
        let now = Instant::now();
        let finished = stop.load(Relaxed)
            || end.is_some_and(|e| now >= e)
            || threads.iter().any(|t| t.is_finished());
        if let Some(p) = period {
            if now.duration_since(last.0) >= p && !finished && !json_out {
                let t = totals(&live);
                let dt = now.duration_since(last.0).as_secs_f64();
                let line: Vec<String> = t
                    .iter()
                    .enumerate()
                    .map(|(d, &(rx, _, drop))| {
                        format!(
                            "{}: {rx} pkts {:.2} Mpps drop {drop}",
                            names[d],
                            (rx - last.1[d]) as f64 / dt / 1e6
                        )
                    })
                    .collect();
                println!(
                    "{:7.1} s  {}",
                    now.duration_since(start).as_secs_f64(),
                    line.join("  |  ")
                );
                last = (now, t.iter().map(|x| x.0).collect());
            }
        }
        if finished {
            break;
        }
    }
    stop.store(true, Relaxed);
    let mut failure = None;
    for t in threads {
        if let Err(e) = t.join().expect("forwarding thread panicked") {
            failure.get_or_insert(e);
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let t = totals(&live);
    let total: u64 = t.iter().map(|x| x.0).sum();
    if json_out {
        let dirs: Vec<_> = t
            .iter()
            .enumerate()
            .map(|(d, &(rx, tx, drop))| json!({ "direction": names[d], "rx": rx, "tx": tx, "dropped": drop, "mpps": rx as f64 / secs / 1e6 }))
            .collect();
        println!(
            "{}",
            json!({ "seconds": secs, "burst": burst, "queues": args.queues, "packets": total, "mpps": total as f64 / secs / 1e6, "ns_per_packet": secs * 1e9 / total.max(1) as f64, "directions": dirs })
        );
    } else {
        for (d, &(rx, tx, drop)) in t.iter().enumerate() {
            println!(
                "{}: rx {rx} tx {tx} dropped {drop} ({:.2} Mpps)",
                names[d],
                rx as f64 / secs / 1e6
            );
        }
        println!(
            "total {total} packets in {secs:.2} s: {:.2} Mpps, {:.1} ns per packet",
            total as f64 / secs / 1e6,
            secs * 1e9 / total.max(1) as f64
        );
    }
    drop(ports);
    drop(a);
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
