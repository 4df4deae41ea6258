//! `vfio-nic bench`: what each VLAN placement costs, on in-memory ports (no hardware).
//!
//! A matrix of receive mode (hardware, software, deferred) x transmit mode (hardware, software)
//! x traffic (untagged, tagged) x application work, on two devices:
//!
//! - `null`: the null device (copy mode, so every received buffer holds the template frame and
//!   every sent one is read). It has no VLAN hardware: cells that need it are "n/a".
//! - `sim`: the ixgbe driver on the software 82599 in threaded mode. Port A has a traffic
//!   source (64-byte UDP frames, tagged or not) and port B transmits into the void; both are
//!   served by ONE device thread on the other core (a two-core machine has one forwarding core
//!   and one device core), so frames arrive in cache lines another core wrote, as DMA writes
//!   do. The model's own transmit counter must match what the forwarder sent.
//!
//! Work: `fwd` forwards A.rx -> B.tx without reading the frame (the shared
//! [`forward_burst`] loop); `l2` reads the destination MAC and the tag with
//! [`PacketVlan::take_vlan`], folds both into a checksum the compiler must keep, and asks for
//! the same tag on transmit (a VLAN-transparent forwarder: frames leave as they came, whatever
//! the modes). In `fwd` the hardware and software receive modes strip the tag and nothing puts
//! it back: that is what those placements do to a forwarder that never looks.
//!
//! Each cell: `--reps` repetitions of `--seconds`; reported as the median ns per packet (and
//! Mpps) with min and max. A benchmark reports figures; it asserts nothing about speed.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use vfio_nic::app::forward::{forward_burst, forward_burst_with, FwdStats};
use vfio_nic::device::{Port, RxQueue};
use vfio_nic::devices::ixgbe::{IxgbeConfig, IxgbePort};
use vfio_nic::devices::null::{NullConfig, NullPort};
use vfio_nic::devices::sim::{pin_current_thread, DeviceThread, Mode, SimConfig, SimPort, Source};
use vfio_nic::platform::dma::{Packet, PoolConfig};
use vfio_nic::vlan::{
    PacketVlan, RxMode, SwVlanTx, TxMode, VlanConfig, VlanControl, VlanRx, VlanTx,
};
use vfio_nic::{Error, Result};

/// Options of `bench`.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// Repetitions per cell (the median is reported, with min and max).
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// Seconds per repetition.
    #[arg(long, default_value_t = 0.5)]
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
    /// Write a bar chart (ns per packet by mode) as SVG to this file.
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// Pin the forwarding thread to the first CPU and the sim's device thread to the second.
    #[arg(long, value_delimiter = ',', num_args = 1..=2)]
    pub pin: Vec<usize>,
    /// Only these receive modes (hw, sw, deferred); all by default.
    #[arg(long, value_delimiter = ',')]
    pub rx: Vec<String>,
    /// Only these transmit modes (hw, sw); all by default.
    #[arg(long, value_delimiter = ',')]
    pub tx: Vec<String>,
}

/// The devices `--device` selects.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceSel {
    /// The null device.
    Null,
    /// The ixgbe driver on the software 82599 (threaded).
    Sim,
    /// Both.
    Both,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Work {
    Fwd,
    L2,
}

/// Frame length on the wire without the tag and without FCS.
const FRAME: usize = 64;
/// The tag of tagged traffic: VID 100, PCP 5.
const TCI: u16 = 0xa064;

#[derive(Clone, Debug, Serialize)]
struct Figures {
    ns_median: f64,
    ns_min: f64,
    ns_max: f64,
    mpps_median: f64,
    mpps_min: f64,
    mpps_max: f64,
    packets: u64,
    tx_dropped: u64,
    empty_polls: u64,
    /// Frames the model's transmit counter saw during the cell, warm-up included (sim only).
    model_tx: Option<u64>,
    /// Packets the forwarder sent during the warm-up (compare `model_tx` with this + `packets`).
    warmup_packets: u64,
}

#[derive(Clone, Debug, Serialize)]
struct Cell {
    device: &'static str,
    rx: &'static str,
    tx: &'static str,
    traffic: &'static str,
    work: Work,
    /// `None`: not available on this device (the reason is in `na`).
    result: Option<Figures>,
    na: Option<String>,
}

fn rx_name(m: RxMode) -> &'static str {
    match m {
        RxMode::Hardware => "hw",
        RxMode::Software => "sw",
        RxMode::Deferred => "deferred",
    }
}

fn tx_name(m: TxMode) -> &'static str {
    match m {
        TxMode::Hardware => "hw",
        TxMode::Software => "sw",
    }
}

/// The frame the source sends (and the null device copies into every buffer).
fn frame(tagged: bool) -> Vec<u8> {
    let mut s = Source::udp(vfio_nic::device::MacAddr([0x02, 0, 0, 0, 0, 2]), FRAME);
    if tagged {
        s = s.with_vlan(0x8100, TCI);
    }
    s.frame()
}

/// One burst of the `l2` work: read the destination MAC and the tag, use both, send the frame
/// out with the tag it came with.
#[inline]
fn l2_burst<R: RxQueue, T: SwVlanTx>(
    rx: &mut VlanRx<R>,
    tx: &mut VlanTx<T>,
    batch: &mut Vec<Packet>,
    burst: usize,
    st: &mut FwdStats,
    acc: &mut u64,
) -> std::result::Result<(), vfio_nic::device::QueueError> {
    forward_burst_with(rx, tx, batch, burst, st, |rx, batch| {
        let ctx = rx.ctx();
        for p in batch {
            let tci = p.take_vlan(ctx);
            let d = p.data();
            let dst = d.get(..6).map_or(0, |m| {
                u64::from_le_bytes([m[0], m[1], m[2], m[3], m[4], m[5], 0, 0])
            });
            let t = tci.map_or(0, |t| t.raw());
            *acc = acc.rotate_left(5) ^ dst ^ u64::from(t);
            if let Some(t) = tci {
                // Cannot fail: the tag was received, so its VID is not 4095.
                let _ = p.set_tx_vlan(t);
            }
        }
    })?;
    Ok(())
}

/// Forwards for `dur`; returns the stats and the time taken.
fn timed<R: RxQueue, T: SwVlanTx>(
    rx: &mut VlanRx<R>,
    tx: &mut VlanTx<T>,
    work: Work,
    burst: usize,
    dur: Duration,
) -> Result<(FwdStats, Duration)> {
    let mut batch = Vec::with_capacity(burst);
    let mut st = FwdStats::default();
    let mut acc = 0u64;
    let start = Instant::now();
    let deadline = start + dur;
    let err = |e: vfio_nic::device::QueueError| Error::InvalidConfig(format!("burst failed: {e}"));
    loop {
        match work {
            Work::Fwd => {
                for _ in 0..256 {
                    forward_burst(rx, tx, &mut batch, burst, &mut st).map_err(err)?;
                }
            }
            Work::L2 => {
                for _ in 0..256 {
                    l2_burst(rx, tx, &mut batch, burst, &mut st, &mut acc).map_err(err)?;
                }
            }
        }
        if Instant::now() >= deadline {
            break;
        }
    }
    let took = start.elapsed();
    std::hint::black_box(acc);
    Ok((st, took))
}

/// Runs the repetitions of one cell; `model_tx` reads the model's transmit counter.
fn reps<R: RxQueue, T: SwVlanTx>(
    args: &BenchArgs,
    rx: &mut VlanRx<R>,
    tx: &mut VlanTx<T>,
    work: Work,
    model_tx: Option<&dyn Fn() -> u64>,
    stop: &AtomicBool,
) -> Result<Figures> {
    let before = model_tx.map(|f| f());
    // Warm-up: caches, the pool's free list, the device thread's back-off.
    let (warm, _) = timed(rx, tx, work, args.burst, Duration::from_millis(50))?;
    let mut ns = Vec::new();
    let (mut packets, mut dropped, mut empty) = (0, 0, 0);
    for _ in 0..args.reps {
        if stop.load(Relaxed) {
            return Err(Error::InvalidConfig("interrupted".into()));
        }
        let (st, took) = timed(
            rx,
            tx,
            work,
            args.burst,
            Duration::from_secs_f64(args.seconds),
        )?;
        if st.tx == 0 {
            return Err(Error::InvalidConfig(
                "nothing was forwarded: the model or the driver is stuck".into(),
            ));
        }
        ns.push(took.as_secs_f64() * 1e9 / st.tx as f64);
        packets += st.tx;
        dropped += st.tx_dropped;
        empty += st.empty_polls;
    }
    ns.sort_by(f64::total_cmp);
    let med = ns[ns.len() / 2];
    let (lo, hi) = (ns[0], ns[ns.len() - 1]);
    let model = match (model_tx, before) {
        (Some(f), Some(b)) => {
            // The warm-up's packets are not in `packets`: compare over the whole cell after the
            // device drained the ring.
            let want = packets + warm.tx;
            let deadline = Instant::now() + Duration::from_secs(2);
            let mut seen = f() - b;
            while seen != want && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
                seen = f() - b;
            }
            Some(seen)
        }
        _ => None,
    };
    Ok(Figures {
        ns_median: med,
        ns_min: lo,
        ns_max: hi,
        mpps_median: 1e3 / med,
        mpps_min: 1e3 / hi,
        mpps_max: 1e3 / lo,
        packets,
        tx_dropped: dropped,
        empty_polls: empty,
        model_tx: model,
        warmup_packets: warm.tx,
    })
}

fn vlan_cfg(rx: RxMode, tx: TxMode) -> VlanConfig {
    VlanConfig {
        rx_mode: rx,
        tx_mode: tx,
        ..VlanConfig::default()
    }
}

fn null_cell(
    args: &BenchArgs,
    rx_mode: RxMode,
    tx_mode: TxMode,
    tagged: bool,
    work: Work,
    stop: &AtomicBool,
) -> Result<std::result::Result<Figures, String>> {
    let f = frame(tagged);
    let ncfg = NullConfig {
        copy: true,
        frame_size: f.len(),
        template: Some(f),
        pool: PoolConfig {
            buffers: 4 * args.ring.max(args.burst),
            ..PoolConfig::default()
        },
        ..NullConfig::default()
    };
    let mut a = NullPort::new(0, ncfg.clone())?;
    let mut b = NullPort::new(1, ncfg)?;
    let a_ctl = match VlanControl::new(&mut a, &vlan_cfg(rx_mode, TxMode::Software)) {
        Ok(c) => c,
        Err(e) => return Ok(Err(e.to_string())),
    };
    let b_ctl = match VlanControl::new(&mut b, &vlan_cfg(RxMode::Software, tx_mode)) {
        Ok(c) => c,
        Err(e) => return Ok(Err(e.to_string())),
    };
    let (mut arx, _) = a.take_queues()?;
    let (_, mut btx) = b.take_queues()?;
    let mut rx = a_ctl.wrap_rx(arx.remove(0));
    let mut tx = b_ctl.wrap_tx(btx.remove(0));
    Ok(Ok(reps(args, &mut rx, &mut tx, work, None, stop)?))
}

fn sim_cell(
    args: &BenchArgs,
    rx_mode: RxMode,
    tx_mode: TxMode,
    tagged: bool,
    work: Work,
    stop: &AtomicBool,
) -> Result<std::result::Result<Figures, String>> {
    let thread = args
        .pin
        .get(1)
        .map_or_else(DeviceThread::new, |&c| DeviceThread::pinned(c));
    let scfg = SimConfig {
        mode: Mode::Threaded,
        thread: Some(thread),
        ..SimConfig::default()
    };
    let mut src = Source::udp(vfio_nic::device::MacAddr([0x02, 0, 0, 0, 0, 2]), FRAME);
    if tagged {
        src = src.with_vlan(0x8100, TCI);
    }
    let sa = SimPort::with_source(scfg.clone(), src);
    // B's own source never sends: B only transmits, into the void.
    let sb = SimPort::with_source(scfg, Source::new(frame(false)).with_count(0));
    let icfg = IxgbeConfig {
        rx_ring: args.ring,
        tx_ring: args.ring,
        pool: PoolConfig {
            buffers: 4 * args.ring,
            ..PoolConfig::default()
        },
        link_timeout: Duration::from_secs(2),
        ..IxgbeConfig::default()
    };
    let mut a = IxgbePort::open(sa.clone(), icfg.clone())?;
    let mut b = IxgbePort::open(sb.clone(), icfg)?;
    let a_ctl = match VlanControl::new(&mut a, &vlan_cfg(rx_mode, TxMode::Software)) {
        Ok(c) => c,
        Err(e) => return Ok(Err(e.to_string())),
    };
    let b_ctl = match VlanControl::new(&mut b, &vlan_cfg(RxMode::Software, tx_mode)) {
        Ok(c) => c,
        Err(e) => return Ok(Err(e.to_string())),
    };
    let (mut arx, _) = a.take_queues()?;
    let (_, mut btx) = b.take_queues()?;
    let mut rx = a_ctl.wrap_rx(arx.remove(0));
    let mut tx = b_ctl.wrap_tx(btx.remove(0));
    let counter = || sb.counters().tx_frames;
    let fig = reps(args, &mut rx, &mut tx, work, Some(&counter), stop)?;
    let ca = sa.counters();
    if ca.rx_errors + ca.rx_filtered + ca.dma_faults + sb.counters().dma_faults != 0 {
        return Err(Error::InvalidConfig(format!(
            "the model refused frames: A {ca:?}, B {:?}",
            sb.counters()
        )));
    }
    Ok(Ok(fig))
}

fn parse_modes<T: Copy>(given: &[String], all: &[(T, &'static str)], what: &str) -> Result<Vec<T>> {
    if given.is_empty() {
        return Ok(all.iter().map(|m| m.0).collect());
    }
    given
        .iter()
        .map(|g| {
            all.iter()
                .find(|m| m.1 == g.as_str())
                .map(|m| m.0)
                .ok_or_else(|| Error::InvalidConfig(format!("unknown {what} mode {g:?}")))
        })
        .collect()
}

/// Runs the benchmark.
pub fn run(args: &BenchArgs, json_out: bool, stop: Arc<AtomicBool>) -> Result<()> {
    if args.burst == 0 || args.burst > 512 || args.reps == 0 || args.seconds <= 0.0 {
        return Err(Error::InvalidConfig(
            "--burst 1..=512, --reps >= 1 and --seconds > 0".into(),
        ));
    }
    let rx_modes = parse_modes(
        &args.rx,
        &[
            (RxMode::Hardware, "hw"),
            (RxMode::Software, "sw"),
            (RxMode::Deferred, "deferred"),
        ],
        "receive",
    )?;
    let tx_modes = parse_modes(
        &args.tx,
        &[(TxMode::Hardware, "hw"), (TxMode::Software, "sw")],
        "transmit",
    )?;
    if let Some(&cpu) = args.pin.first() {
        pin_current_thread(cpu)?;
    }
    let devices: &[&'static str] = match args.device {
        DeviceSel::Null => &["null"],
        DeviceSel::Sim => &["sim"],
        DeviceSel::Both => &["null", "sim"],
    };
    if !json_out {
        outln!(
            "vfio-nic bench: burst {}, ring {} (sim), {} x {} s per cell, {}-byte frames (+4 tagged), pin {:?}",
            args.burst, args.ring, args.reps, args.seconds, FRAME, args.pin
        );
        outln!(
            "{:<5} {:<8} {:<3} {:<8} {:<4} {:>9} {:>17} {:>8} {:>17}",
            "dev",
            "rx",
            "tx",
            "traffic",
            "work",
            "ns/pkt",
            "(min-max)",
            "Mpps",
            "(min-max)"
        );
    }
    let mut cells = Vec::new();
    for &dev in devices {
        for &rxm in &rx_modes {
            for &txm in &tx_modes {
                for tagged in [false, true] {
                    for work in [Work::Fwd, Work::L2] {
                        let r = match dev {
                            "null" => null_cell(args, rxm, txm, tagged, work, &stop)?,
                            _ => sim_cell(args, rxm, txm, tagged, work, &stop)?,
                        };
                        let cell = Cell {
                            device: dev,
                            rx: rx_name(rxm),
                            tx: tx_name(txm),
                            traffic: if tagged { "tagged" } else { "untagged" },
                            work,
                            na: r.as_ref().err().cloned(),
                            result: r.ok(),
                        };
                        if !json_out {
                            print_cell(&cell)?;
                        }
                        cells.push(cell);
                    }
                }
            }
        }
    }
    if let Some(path) = &args.svg {
        chart(path, &cells, args)?;
        if !json_out {
            outln!("chart written to {}", path.display());
        }
    }
    if json_out {
        let v = serde_json::json!({
            "burst": args.burst, "ring": args.ring, "reps": args.reps, "seconds": args.seconds,
            "frame_bytes": FRAME, "pin": args.pin, "cells": cells,
        });
        outln!("{v}");
    }
    Ok(())
}

fn print_cell(c: &Cell) -> Result<()> {
    let work = match c.work {
        Work::Fwd => "fwd",
        Work::L2 => "l2",
    };
    match &c.result {
        Some(f) => {
            let model = match f.model_tx {
                Some(m) if m != f.packets + f.warmup_packets => format!(
                    "  MISMATCH: the model sent {m} frames, the forwarder {}",
                    f.packets + f.warmup_packets
                ),
                _ => String::new(),
            };
            outln!(
                "{:<5} {:<8} {:<3} {:<8} {:<4} {:>9.1} {:>17} {:>8.2} {:>17}{}{}",
                c.device,
                c.rx,
                c.tx,
                c.traffic,
                work,
                f.ns_median,
                format!("({:.1}-{:.1})", f.ns_min, f.ns_max),
                f.mpps_median,
                format!("({:.2}-{:.2})", f.mpps_min, f.mpps_max),
                if f.tx_dropped > 0 {
                    format!("  tx dropped {}", f.tx_dropped)
                } else {
                    String::new()
                },
                model
            );
        }
        None => outln!(
            "{:<5} {:<8} {:<3} {:<8} {:<4} {:>9} {:>17} {:>8}",
            c.device,
            c.rx,
            c.tx,
            c.traffic,
            work,
            "n/a",
            "",
            "n/a"
        ),
    }
    Ok(())
}

/// A horizontal bar per measured cell: median ns per packet, with a min-max whisker.
fn chart(path: &std::path::Path, cells: &[Cell], args: &BenchArgs) -> Result<()> {
    use plotters::prelude::*;
    let measured: Vec<(String, &Figures, &str)> = cells
        .iter()
        .filter_map(|c| {
            c.result.as_ref().map(|f| {
                let work = match c.work {
                    Work::Fwd => "fwd",
                    Work::L2 => "l2",
                };
                (
                    format!("rx {} tx {} {} {}", c.rx, c.tx, c.traffic, work),
                    f,
                    c.device,
                )
            })
        })
        .collect();
    if measured.is_empty() {
        return Ok(());
    }
    let fail = |e: String| Error::InvalidConfig(format!("writing {}: {e}", path.display()));
    // One panel per device, each with its own scale (null: ns; sim: the model's hundreds of ns).
    let devices: Vec<&str> = ["null", "sim"]
        .into_iter()
        .filter(|d| measured.iter().any(|m| m.2 == *d))
        .collect();
    let rows = |d: &str| measured.iter().filter(|m| m.2 == d).count() as u32;
    let height = devices.iter().map(|d| 80 + 22 * rows(d)).sum::<u32>();
    let root = SVGBackend::new(path, (960, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(e.to_string()))?;
    let mut rest = root.clone();
    for d in devices {
        let (area, below) = rest.split_vertically(80 + 22 * rows(d));
        rest = below;
        let mine: Vec<&(String, &Figures, &str)> = measured.iter().filter(|m| m.2 == d).collect();
        let n = mine.len();
        let xmax = mine.iter().map(|m| m.1.ns_max).fold(0.0f64, f64::max) * 1.1;
        let labels: Vec<String> = mine.iter().map(|m| m.0.clone()).collect();
        let what = if d == "null" {
            "null device (copy mode)"
        } else {
            "ixgbe on the software 82599, threaded (bounded by the model)"
        };
        let mut ch = ChartBuilder::on(&area)
            .caption(
                format!(
                    "{what}: ns per forwarded packet, median of {} (line: min-max), burst {}, ring {}",
                    args.reps, args.burst, args.ring
                ),
                ("sans-serif", 14),
            )
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(260)
            .build_cartesian_2d(0f64..xmax, (0i32..n as i32).into_segmented())
            .map_err(|e| fail(e.to_string()))?;
        ch.configure_mesh()
            .disable_y_mesh()
            .y_labels(n)
            .y_label_formatter(&|y| match y {
                SegmentValue::CenterOf(i) => labels.get(*i as usize).cloned().unwrap_or_default(),
                _ => String::new(),
            })
            .x_desc("ns per packet (lower is faster)")
            .draw()
            .map_err(|e| fail(e.to_string()))?;
        let color = if d == "null" {
            BLUE.mix(0.6)
        } else {
            RED.mix(0.6)
        };
        ch.draw_series(mine.iter().enumerate().map(|(i, m)| {
            Rectangle::new(
                [
                    (0.0, SegmentValue::Exact(i as i32)),
                    (m.1.ns_median, SegmentValue::Exact(i as i32 + 1)),
                ],
                color.filled(),
            )
        }))
        .map_err(|e| fail(e.to_string()))?;
        ch.draw_series(mine.iter().enumerate().map(|(i, m)| {
            PathElement::new(
                vec![
                    (m.1.ns_min, SegmentValue::CenterOf(i as i32)),
                    (m.1.ns_max, SegmentValue::CenterOf(i as i32)),
                ],
                BLACK.stroke_width(2),
            )
        }))
        .map_err(|e| fail(e.to_string()))?;
    }
    root.present().map_err(|e| fail(e.to_string()))?;
    Ok(())
}
