//! `vfio-nic bench`: the VLAN-placement bench of [`vfio_nic::app::bench`] (what each VLAN
//! placement costs, as paired comparisons that know the noise), run from the command line and
//! printed: the options, the progress line, the table, the summary lines, `--json` and the
//! `--svg` chart. The engine (rigs, plan, pairing, judging) is the library's.
//!
//! The matrix is judged as one family once it has all been measured (Holm's procedure over the
//! comparisons' p-values, the A/A rows left out: `vfio_nic::app::bench::judge`). That is why the
//! table comes at the end of the run, each row with its `p(Holm)`, and only a progress line
//! (standard error) shows before; a run that stops early prints the rows it measured, judged as
//! a family of those. `--json` has each comparison's raw and adjusted p, and the correction and
//! its family size at the top.
//!
//! Before it measures a software 82599 or queue-manager model, the bench probes the machine
//! (`machine.rs`: the cross-core latency and huge pages, which those figures follow), and again
//! at the end.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use vfio_nic::app::bench::{
    self, family_size, BenchConfig, Device, Judged, Progress, Traffic, Work, FRAME,
};
use vfio_nic::app::compare::{self, Pace, Verdict};
use vfio_nic::{Error, Result};

use crate::machine::MachineNotes;

/// Options of `bench`.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// Interleaved A/B pairs per comparison (at least 2; 10 or more for a usable interval).
    #[arg(long, default_value_t = 10)]
    pub pairs: usize,
    /// Seconds per repetition (each pair runs two).
    #[arg(long, default_value_t = 0.2)]
    pub seconds: f64,
    /// Packets per burst.
    #[arg(long, default_value_t = 32)]
    pub burst: usize,
    /// Descriptors per ring (sim), and the pool is four rings' worth of buffers.
    #[arg(long, default_value_t = 512)]
    pub ring: usize,
    /// Which devices to run.
    #[arg(long, value_enum, default_value_t = DeviceSel::Both)]
    pub device: DeviceSel,
    /// Only this traffic (untagged, tagged); both by default.
    #[arg(long, value_delimiter = ',')]
    pub traffic: Vec<String>,
    /// Only this work (fwd, l2); both by default.
    #[arg(long, value_delimiter = ',')]
    pub work: Vec<String>,
    /// Write a chart of every comparison (B - A with its interval, and the noise floor) as SVG.
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// Pin the forwarding thread to the first CPU and the sim's device thread (or the afp
    /// generator) to the second.
    #[arg(long, value_delimiter = ',', num_args = 1..=2)]
    pub pin: Vec<usize>,
    /// The veth pair of `--device afp`: the interface the generator sends into and the one the
    /// forwarder receives from (both ends in this network namespace, up).
    #[arg(long, value_delimiter = ',')]
    pub afp_pair: Vec<String>,
    /// `--device irq`: empty polls in a row before the adaptive loop sleeps.
    #[arg(long, default_value_t = 256)]
    pub idle_polls: u32,
}

/// The devices `--device` selects.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceSel {
    /// The null device.
    Null,
    /// The ixgbe driver on the software 82599 (threaded).
    Sim,
    /// The software 82599 in inline mode too (its writes on the forwarding core), for the
    /// cold-line A/B against the threaded one.
    SimInline,
    /// The null device and both software 82599 modes.
    Both,
    /// An af_packet port on the veth pair `--afp-pair` (not part of `both`: it needs root and
    /// a pair made beforehand).
    Afp,
    /// The qm driver on the threaded queue-manager model (DPAA2-like): the seed's Software
    /// vs Deferred receive.
    Qm,
    /// The queue-manager model in inline mode too (its writes on the forwarding core).
    QmInline,
    /// The virtio driver on the threaded software virtio-net device (a device thread polls its
    /// rings): the seed's Software vs Deferred receive.
    Virtio,
    /// The software virtio-net device in inline mode too (its work inside the doorbells).
    VirtioInline,
    /// The interrupt row: polling against the adaptive loop (interrupt mode) on the threaded
    /// software 82599, under load and for the wake-up latency (`bench_irq.rs`).
    Irq,
}

/// Progress on the terminal (standard error), one line rewritten in place; a line per
/// comparison when standard error is not a terminal.
struct ProgressLine {
    started: Instant,
    tty: bool,
}

impl ProgressLine {
    fn show(&self, p: &Progress<'_>) {
        let (what, pair, pairs) = (p.what, p.pair, p.pairs);
        let left = p.total_reps.saturating_sub(p.done_reps);
        let per = self.started.elapsed().as_secs_f64() / p.done_reps.max(1) as f64;
        let eta = (per * left as f64).round() as u64;
        if self.tty {
            eprint!(
                "\r\x1b[2K[{}/{} repetitions, about {}m{:02}s left] {what}: pair {pair}/{pairs}",
                p.done_reps,
                p.total_reps,
                eta / 60,
                eta % 60
            );
        } else if pair == pairs {
            eprintln!(
                "bench: {what} done ({}/{} repetitions, about {eta} s left)",
                p.done_reps, p.total_reps
            );
        }
    }

    fn end(&self) {
        if self.tty {
            eprint!("\r\x1b[2K");
        }
    }
}

fn pick<'a>(given: &[String], all: &[&'a str], what: &str) -> Result<Vec<&'a str>> {
    if given.is_empty() {
        return Ok(all.to_vec());
    }
    given
        .iter()
        .map(|g| {
            all.iter()
                .copied()
                .find(|a| *a == g.as_str())
                .ok_or_else(|| {
                    Error::InvalidConfig(format!("unknown {what} {g:?} (one of {all:?})"))
                })
        })
        .collect()
}

/// The library's configuration of `args` (`--traffic` and `--work` checked against their names).
fn config(args: &BenchArgs) -> Result<BenchConfig> {
    let traffic = pick(&args.traffic, &["untagged", "tagged"], "traffic")?
        .into_iter()
        .map(|t| {
            if t == "tagged" {
                Traffic::Tagged
            } else {
                Traffic::Untagged
            }
        })
        .collect();
    let works = pick(&args.work, &["fwd", "l2"], "work")?
        .into_iter()
        .map(|w| if w == "fwd" { Work::Fwd } else { Work::L2 })
        .collect();
    let devices = match args.device {
        DeviceSel::Null => vec![Device::Null],
        DeviceSel::Sim => vec![Device::Sim],
        DeviceSel::SimInline => vec![Device::Sim, Device::SimInline],
        DeviceSel::Both => vec![Device::Null, Device::Sim, Device::SimInline],
        DeviceSel::Afp => vec![Device::Afp],
        DeviceSel::Qm => vec![Device::Qm],
        DeviceSel::QmInline => vec![Device::Qm, Device::QmInline],
        DeviceSel::Virtio => vec![Device::Virtio],
        DeviceSel::VirtioInline => vec![Device::Virtio, Device::VirtioInline],
        // (main.rs sends `--device irq` to bench_irq.rs.)
        DeviceSel::Irq => vec![],
    };
    Ok(BenchConfig {
        pairs: args.pairs,
        seconds: args.seconds,
        burst: args.burst,
        ring: args.ring,
        devices,
        traffic,
        works,
        pin: args.pin.clone(),
        afp_pair: args.afp_pair.clone(),
        idle_polls: args.idle_polls,
    })
}

/// The machine's cross-core latency and huge pages, which the sim, qm and virtio figures follow
/// (`machine.rs`); measured before anything is pinned or running, where a model runs.
fn probe_machine(config: &BenchConfig) -> Result<Option<MachineNotes>> {
    let models = config.devices.iter().any(|d| {
        ["sim", "qm", "virtio"]
            .iter()
            .any(|m| d.name().starts_with(m))
    });
    if !models {
        return Ok(None);
    }
    let cpus = match (config.pin.first(), config.pin.get(1)) {
        (Some(&a), Some(&b)) => Some([a, b]),
        _ => std::thread::available_parallelism()
            .is_ok_and(|n| n.get() >= 2)
            .then_some([0, 1]),
    };
    cpus.map(MachineNotes::probe).transpose()
}

/// Runs the benchmark and prints it: the table (or `--json`), the summary lines, the chart.
pub fn run(args: &BenchArgs, json_out: bool, stop: Arc<AtomicBool>) -> Result<()> {
    if args.burst == 0 || args.burst > 512 || args.pairs < 2 || args.seconds <= 0.0 {
        return Err(Error::InvalidConfig(
            "--burst 1..=512, --pairs >= 2 and --seconds > 0".into(),
        ));
    }
    let config = config(args)?;
    let machine = probe_machine(&config)?;
    let progress = ProgressLine {
        started: Instant::now(),
        tty: std::io::stderr().is_terminal(),
    };
    if !json_out {
        outln!(
            "vfio-nic bench: {} interleaved pairs of {} s per comparison (A B, B A, ...), burst {}, ring {} (sim), {}-byte frames (+4 tagged), pin {:?}",
            args.pairs, args.seconds, args.burst, args.ring, FRAME, args.pin
        );
        if let Some(m) = &machine {
            outln!("{}", m.line());
        }
    }
    let measured = bench::run(&config, &stop, |p| progress.show(p));
    progress.end();
    let rows = match measured {
        Ok(rows) => rows,
        Err(stopped) => {
            if !json_out && !stopped.rows.is_empty() {
                // The run's own failure is the one to report, even where the reader has gone.
                let _ = print_partial_table(&stopped.rows, &stopped.error);
            }
            return Err(stopped.error);
        }
    };
    if !json_out {
        print_table(&rows)?;
    }
    // Again at the end, with every device thread gone: a machine whose latency moved during
    // the run shows it here.
    let machine_end = match &machine {
        Some(m) => Some(MachineNotes::probe(m.cpus)?),
        None => None,
    };
    if let (Some(m), false) = (&machine_end, json_out) {
        outln!("at the end, {}", m.line());
    }
    let cold = cold_lines(&rows);
    let piped = pipeline_lines(&rows);
    let seed = seed_lines(&rows);
    if !json_out {
        for line in cold.iter().chain(&piped).chain(&seed) {
            outln!("{line}");
        }
    }
    if let Some(path) = &args.svg {
        chart(path, &rows, args)?;
        if !json_out {
            outln!("chart written to {}", path.display());
        }
    }
    if json_out {
        let correction = serde_json::json!({
            "method": "holm", "family_size": family_size(&rows), "alpha": compare::ALPHA,
            "family": "every comparison of this run but the A/A rows (noise floors)",
        });
        let v = serde_json::json!({
            "pairs": args.pairs, "seconds": args.seconds, "burst": args.burst, "ring": args.ring,
            "frame_bytes": FRAME, "pin": args.pin, "interval": "95 % paired t", "correction": correction,
            "machine": machine, "machine_at_end": machine_end,
            "comparisons": rows, "cold_lines": cold, "pipeline_lines": piped, "seed_lines": seed,
        });
        outln!("{v}");
    }
    Ok(())
}

/// The table of a run that stopped at `e`: the rows measured before, corrected as a family of
/// those (the comparisons it did not reach were never tested).
fn print_partial_table(rows: &[Judged], e: &Error) -> Result<()> {
    outln!(
        "the run stopped after {} rows ({e}); what it measured, judged as a family of those:",
        rows.len()
    );
    print_table(rows)
}

/// The table of a judged matrix: what its columns and verdicts mean, then a row per comparison.
fn print_table(rows: &[Judged]) -> Result<()> {
    outln!("B - A: ns per packet with its 95 % confidence interval (paired t over the pairs); floor: the A/A comparison's");
    let m = family_size(rows);
    outln!(
        "p(Holm): the paired t test's p adjusted over the {m} comparison{} of this run (A/A rows are floors, not tested); a difference is declared where p(Holm) < {} and B - A is clear of zero and of the floor",
        if m == 1 { "" } else { "s" },
        compare::ALPHA
    );
    outln!(
        "{:<4} {:<8} {:<3} {:<8} {:<17} {:<17} {:>14} {:>14}  verdict (B - A)",
        "dev",
        "traffic",
        "wrk",
        "kind",
        "A",
        "B",
        "A ns/pkt",
        "B ns/pkt"
    );
    for r in rows {
        print_comparison(r)?;
    }
    Ok(())
}

/// One row of the table: the comparison, and its verdict with its Holm-adjusted p (an A/A row's
/// floor instead), and its notes.
fn print_comparison(r: &Judged) -> Result<()> {
    let c = &r.c;
    let mut verdict = if c.is_floor() {
        format!(
            "floor: +-{:.2} ns (A/A difference {:+.2} [{:+.2}, {:+.2}])",
            c.floor, c.diff.mean, c.diff.lo, c.diff.hi
        )
    } else {
        verdict_text(r)
    };
    if let Some(m) = c.baseline_moved {
        let judge = if m.anew_matches {
            "its floor judges"
        } else {
            "A matches neither: the larger floor judges"
        };
        verdict += &format!(
            " [the machine moved: A ran {:+.0} % off its run before; A/A run anew, {judge}]",
            100.0 * m.share
        );
    }
    if let (Some(Pace::Model { a, b }), false) = (c.pace, c.is_floor()) {
        let sides = match (a, b) {
            (true, true) => "A and B",
            (true, false) => "A",
            _ => "B",
        };
        verdict += &format!(
            " [the model set the pace of {sides}: B - A is the system's, not the driver's alone]"
        );
    }
    let model = c
        .model_ns_per_frame
        .map(|m| {
            let driver = c.driver_busy_ns.map_or(String::new(), |[a, b]| {
                format!("; driver busy: A {a:.0}, B {b:.0} ns per packet")
            });
            format!("  (model: {m:.0} ns per frame on the device core{driver})")
        })
        .or_else(|| c.pipeline.as_ref().map(|p| format!("  ({p})")))
        .unwrap_or_default();
    outln!(
        "{:<4} {:<8} {:<3} {:<8} {:<17} {:<17} {:>14} {:>14}  {verdict}{model}",
        c.device,
        c.traffic,
        c.work.name(),
        c.kind,
        c.a,
        c.b,
        format!("{:.2}+-{:.2}", c.a_mean.mean, c.a_mean.half_width()),
        format!("{:.2}+-{:.2}", c.b_mean.mean, c.b_mean.half_width()),
    );
    Ok(())
}

/// `p(Holm) 0.003` (or `<0.001`), for the rows and the summary lines.
fn p_holm_text(p: f64) -> String {
    if p < 0.001 {
        "p(Holm) <0.001".to_string()
    } else {
        format!("p(Holm) {p:.3}")
    }
}

/// A row's verdict with its Holm-adjusted p, as the table and the summary lines print it.
fn verdict_text(r: &Judged) -> String {
    match r.p_holm {
        Some(p) => format!("{}, {}", r.verdict, p_holm_text(p)),
        None => r.verdict.to_string(),
    }
}

/// The cold-line A/B: the same Software vs Deferred receive comparison with the device's
/// writes on the other core (threaded) and on the forwarding core (inline), each with its
/// Holm-adjusted p, and the difference of the two differences (its interval from both
/// half-widths added in quadrature: the two comparisons are independent).
fn cold_lines(results: &[Judged]) -> Vec<String> {
    let cold = |device: &'static str| {
        results
            .iter()
            .filter(move |r| r.c.device == device && r.c.kind == "cold")
    };
    let mut out = Vec::new();
    for r in cold("sim") {
        let c = &r.c;
        let Some(wr) = cold("sim-inline").find(|w| w.c.traffic == c.traffic && w.c.work == c.work)
        else {
            continue;
        };
        let w = &wr.c;
        let p = |r: &Judged| {
            r.p_holm
                .map_or_else(String::new, |p| format!(" ({})", p_holm_text(p)))
        };
        let d = c.diff.mean - w.diff.mean;
        let h = (c.diff.half_width().powi(2) + w.diff.half_width().powi(2)).sqrt();
        out.push(format!(
            "cold lines, {} {}: software strip (sw vs deferred receive) {:+.2} ns [{:+.2}, {:+.2}]{} with the frame written on the other core, {:+.2} ns [{:+.2}, {:+.2}]{} on the forwarding core: {:+.2} ns +-{:.2} per packet for the line arriving cold",
            c.traffic, c.work.name(), c.diff.mean, c.diff.lo, c.diff.hi, p(r), w.diff.mean, w.diff.lo, w.diff.hi, p(wr), d, h
        ));
    }
    out
}

/// The seed's question (DPDK commit 87dd2307c0: dpaa2's strip in the receive burst), one line
/// per device, traffic and work where the run asked it: Software receive (the strip in the
/// burst) against Deferred (none: the application strips, or never needs to), both with
/// software insertion, and the answer, "a difference" or "no difference measurable", with the
/// paired interval and p(Holm).
fn seed_lines(results: &[Judged]) -> Vec<String> {
    results
        .iter()
        .filter(|r| r.c.kind == "receive" && r.c.a == "rx deferred tx sw" && r.c.b == "rx sw tx sw")
        .map(|r| {
            let c = &r.c;
            let answer = match r.verdict {
                Verdict::NoDifference { within } => {
                    format!("no difference measurable (+-{within:.2} ns)")
                }
                _ => "a difference".to_string(),
            };
            let p = r.p_holm.map_or_else(String::new, |p| format!(", {}", p_holm_text(p)));
            let paced = if matches!(c.pace, Some(Pace::Model { .. })) {
                " [the model set the pace: the system's difference, not the driver's alone]"
            } else {
                ""
            };
            format!(
                "seed question, {} {} {}: software strip vs deferred receive, {:.2} vs {:.2} ns per packet, B - A {:+.2} ns [{:+.2}, {:+.2}]: {answer}{p}{paced}",
                c.device,
                c.traffic,
                c.work.name(),
                c.b_mean.mean,
                c.a_mean.mean,
                c.diff.mean,
                c.diff.lo,
                c.diff.hi,
            )
        })
        .collect()
}

/// The pipeline comparisons against page_pool's seed figure (72.74 ns per packet recycled on
/// the allocating CPU, 74.42 ns returned from another, called noise by its authors).
fn pipeline_lines(results: &[Judged]) -> Vec<String> {
    results
        .iter()
        .filter(|r| r.c.kind == "pipeline" || r.c.kind == "return")
        .map(|r| {
            let c = &r.c;
            let what = if c.kind == "return" {
                "the pool alone, buffers freed on the other core (slow path) vs handed back and freed where allocated (fast path)"
            } else {
                "forwarding, receive and transmit on two cores (every buffer by the slow path) vs one core (fast path)"
            };
            format!(
                "{} {}, {what}: {:.2} vs {:.2} ns per packet: {} (page_pool's seed: 74.42 vs 72.74 ns, +1.68 ns, called noise)",
                c.kind,
                c.traffic,
                c.b_mean.mean,
                c.a_mean.mean,
                verdict_text(r)
            )
        })
        .collect()
}

/// One row per comparison: B - A with its 95 % interval as an error bar, coloured by its
/// verdict (after the matrix's correction), and the group's noise floor as a grey band; one
/// panel per device (their scales differ).
fn chart(path: &std::path::Path, results: &[Judged], args: &BenchArgs) -> Result<()> {
    use plotters::prelude::*;
    let fail = |e: String| Error::InvalidConfig(format!("writing {}: {e}", path.display()));
    let devices: Vec<&str> = [
        "null",
        "afp",
        "sim",
        "sim-inline",
        "qm",
        "qm-inline",
        "virtio",
        "virtio-inline",
    ]
    .into_iter()
    .filter(|d| results.iter().any(|r| r.c.device == *d))
    .collect();
    if devices.is_empty() {
        return Ok(());
    }
    let rows = |d: &str| results.iter().filter(|r| r.c.device == d).count() as u32;
    let height = devices.iter().map(|d| 90 + 22 * rows(d)).sum::<u32>();
    let root = SVGBackend::new(path, (1000, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(e.to_string()))?;
    let mut rest = root.clone();
    for d in devices {
        let (area, below) = rest.split_vertically(90 + 22 * rows(d));
        rest = below;
        let mine: Vec<&Judged> = results.iter().filter(|r| r.c.device == d).collect();
        let n = mine.len();
        let reach = mine
            .iter()
            .map(|r| r.c.diff.lo.abs().max(r.c.diff.hi.abs()).max(r.c.floor))
            .filter(|x| x.is_finite())
            .fold(1.0f64, f64::max)
            * 1.1;
        let labels: Vec<String> = mine
            .iter()
            .map(|r| {
                let c = &r.c;
                format!(
                    "{} {} {}: {} vs {}",
                    c.traffic,
                    c.work.name(),
                    c.kind,
                    c.b,
                    c.a
                )
            })
            .collect();
        let what = match d {
            "null" => "null device (copy mode)",
            "afp" => "af_packet port on a veth pair (ring drained)",
            "sim" => "ixgbe on the software 82599, threaded",
            "sim-inline" => "ixgbe on the software 82599, inline",
            "qm" => "qm on the queue-manager model, threaded",
            "qm-inline" => "qm on the queue-manager model, inline",
            "virtio" => "virtio on the software virtio-net device, threaded",
            _ => "virtio on the software virtio-net device, inline",
        };
        let mut ch = ChartBuilder::on(&area)
            .caption(
                format!(
                    "{what}: B - A, ns per packet, 95 % CI over {} interleaved pairs (grey: A/A noise floor), burst {}",
                    args.pairs, args.burst
                ),
                ("sans-serif", 14),
            )
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(330)
            .build_cartesian_2d(-reach..reach, (0i32..n as i32).into_segmented())
            .map_err(|e| fail(e.to_string()))?;
        ch.configure_mesh()
            .disable_y_mesh()
            .y_labels(n)
            .y_label_formatter(&|y| match y {
                SegmentValue::CenterOf(i) => labels.get(*i as usize).cloned().unwrap_or_default(),
                _ => String::new(),
            })
            .x_desc(
                "B - A, ns per packet (right: B costs more; red, blue: slower, faster after Holm)",
            )
            .draw()
            .map_err(|e| fail(e.to_string()))?;
        ch.draw_series(mine.iter().enumerate().map(|(i, r)| {
            Rectangle::new(
                [
                    (-r.c.floor, SegmentValue::Exact(i as i32)),
                    (r.c.floor, SegmentValue::Exact(i as i32 + 1)),
                ],
                BLACK.mix(0.12).filled(),
            )
        }))
        .map_err(|e| fail(e.to_string()))?;
        let color = |r: &Judged| match r.verdict {
            Verdict::NoDifference { .. } => BLACK,
            Verdict::Slower { .. } => RED,
            Verdict::Faster { .. } => BLUE,
        };
        let shown: Vec<(usize, &Judged)> = mine
            .iter()
            .copied()
            .enumerate()
            .filter(|(_, r)| r.c.diff.lo.is_finite() && r.c.diff.hi.is_finite())
            .collect();
        // The interval as a whisker, the mean as a dot.
        ch.draw_series(shown.iter().map(|&(i, r)| {
            PathElement::new(
                vec![
                    (r.c.diff.lo, SegmentValue::CenterOf(i as i32)),
                    (r.c.diff.hi, SegmentValue::CenterOf(i as i32)),
                ],
                color(r).stroke_width(2),
            )
        }))
        .map_err(|e| fail(e.to_string()))?;
        ch.draw_series(shown.iter().map(|&(i, r)| {
            Circle::new(
                (r.c.diff.mean, SegmentValue::CenterOf(i as i32)),
                4,
                color(r).filled(),
            )
        }))
        .map_err(|e| fail(e.to_string()))?;
    }
    root.present().map_err(|e| fail(e.to_string()))?;
    Ok(())
}
