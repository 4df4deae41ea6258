//! The interrupt row (`vfio-nic bench --device irq`): what interrupt mode costs, and how fast a sleeping queue
//! wakes, on the threaded software 82599 (the device model on its own thread, interrupts as
//! eventfds it signals: `devices/sim/irq.rs`).
//!
//! Two placements of the same port, opened in interrupt mode both times so that only the loop
//! differs: A polls for ever (the vector stays masked), B is the adaptive loop of
//! `app::idle` (poll while frames come, sleep on the interrupt after [`BenchConfig::idle_polls`] empty polls).
//! Three comparisons, in interleaved pairs (A B, B A, ...) of [`BenchConfig::seconds`] each:
//! - `load`: ns per packet forwarding the model's traffic source at full rate into an unwired
//!   port. The adaptive loop must cost nothing while there is work: it never sleeps then.
//! - `wake median` and `wake p99`: the latency from a frame's send (the peer's transmit burst;
//!   the device thread carries it over) to the receive burst that returns it, for single frames
//!   2 ms apart, the receiver idle in between: polling (A), or asleep on the eventfd (B). Each
//!   repetition gives a median and a 99th percentile of its frames' latencies, in ns.
//!
//! The four ports (two for each measurement) share one device thread that never backs off when
//! idle (`DeviceThread::spinning`, on the second [`BenchConfig::pin`] CPU): a frame is carried as soon as it
//! is written, so the latency is the receiving loop's, not the model's idle pause.
//!
//! Each comparison's B - A has its 95 % paired-t interval, and the three p-values are corrected
//! together (Holm), as in the rest of the bench; no A/A floor is measured for this row, so a
//! verdict rests on the interval and the corrected p alone.

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::app::compare::{self, abba, mean_95, paired_p, paired_t_95, Interval, Verdict};
use crate::app::forward::{forward_burst, FwdStats};
use crate::app::idle::{Idle, IdlePolicy};
use crate::device::{MacAddr, Port, RxQueue, TxQueue};
use crate::devices::intel::IrqConfig;
use crate::devices::ixgbe::{IxgbeConfig, IxgbePort, IxgbeRx, IxgbeTx};
use crate::devices::sim::{pin_current_thread, DeviceThread, Mode, SimConfig, SimPort, Source};
use crate::platform::dma::{Packet, Pool, PoolConfig};
use crate::{Error, Result};

use super::{BenchConfig, Progress};

/// Time between two frames of the wake-up measurement.
pub const GAP: Duration = Duration::from_millis(2);

/// Poll or adaptive.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Loop {
    Poll,
    Adaptive,
}

fn ixgbe_cfg(ring: usize) -> IxgbeConfig {
    IxgbeConfig {
        rx_ring: ring,
        tx_ring: ring,
        pool: PoolConfig {
            buffers: 4 * ring,
            ..PoolConfig::default()
        },
        interrupts: Some(IrqConfig::default()),
        link_timeout: Duration::from_secs(2),
        ..IxgbeConfig::default()
    }
}

fn open(
    sim: &SimPort,
    cfg: IxgbeConfig,
) -> Result<(IxgbePort<SimPort>, IxgbeRx<SimPort>, IxgbeTx<SimPort>)> {
    let mut port = IxgbePort::open(sim.clone(), cfg)?;
    let (mut rx, mut tx) = port.take_queues()?;
    Ok((port, rx.remove(0), tx.remove(0)))
}

fn policy(args: &BenchConfig) -> IdlePolicy {
    IdlePolicy {
        idle_polls: args.idle_polls,
        max_sleep: Duration::from_millis(100),
    }
}

/// One repetition of `load`: ns per packet over `seconds` of forwarding the source.
fn load_rep(
    rx: &mut IxgbeRx<SimPort>,
    tx: &mut IxgbeTx<SimPort>,
    how: Loop,
    args: &BenchConfig,
) -> Result<f64> {
    let mut idle = (how == Loop::Adaptive).then(|| Idle::new(policy(args)));
    let mut batch = Vec::with_capacity(args.burst);
    let mut st = FwdStats::default();
    let t = Instant::now();
    let end = t + Duration::from_secs_f64(args.seconds);
    while Instant::now() < end {
        let got = forward_burst(rx, tx, &mut batch, args.burst, &mut st)?;
        if let Some(i) = idle.as_mut() {
            if i.after_round(got) {
                i.sleep(&mut [&mut *rx as &mut dyn RxQueue])?;
            }
        }
    }
    Ok(t.elapsed().as_nanos() as f64 / st.tx.max(1) as f64)
}

/// One repetition of `wake`: frames sent `GAP` apart by another thread; their latencies from
/// send to the burst that returned them, ns (median, p99).
fn wake_rep(
    rx: &mut IxgbeRx<SimPort>,
    tx: &mut IxgbeTx<SimPort>,
    pool: &Pool,
    dst: MacAddr,
    how: Loop,
    args: &BenchConfig,
) -> Result<(f64, f64)> {
    let frames = ((args.seconds / GAP.as_secs_f64()) as usize).clamp(10, 500);
    let epoch = Instant::now();
    // Each frame's send time (ns since `epoch`), by the sequence number it carries.
    let sent_at: Vec<AtomicU64> = (0..frames).map(|_| AtomicU64::new(0)).collect();
    let done = AtomicBool::new(false);
    let mut batch: Vec<Packet> = Vec::new();
    let mut lat = Vec::with_capacity(frames);
    let mut idle = (how == Loop::Adaptive).then(|| Idle::new(policy(args)));
    std::thread::scope(|s| -> Result<()> {
        let (sent_at, done) = (&sent_at, &done);
        let sender = s.spawn(move || -> Result<()> {
            for (i, sent) in sent_at.iter().enumerate() {
                std::thread::sleep(GAP);
                let mut p = pool
                    .alloc()
                    .ok_or_else(|| Error::InvalidConfig("the bench's pool ran dry".into()))?;
                let mut f = dst.0.to_vec();
                f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x99, 0x88, 0xb5]);
                f.extend_from_slice(&(i as u32).to_be_bytes());
                f.resize(64, 0);
                if !p.set_data(&f) {
                    return Err(Error::InvalidConfig(
                        "a 64-byte frame does not fit the bench's buffers".into(),
                    ));
                }
                let mut one = vec![p];
                sent.store(epoch.elapsed().as_nanos() as u64, Release);
                while !one.is_empty() {
                    tx.tx_burst(&mut one)?;
                }
            }
            done.store(true, Release);
            Ok(())
        });
        let deadline = Instant::now() + GAP * (frames as u32) * 4 + Duration::from_secs(5);
        while lat.len() < frames && Instant::now() < deadline {
            let got = rx.rx_burst(&mut batch, args.burst)?;
            if got > 0 {
                let now = epoch.elapsed().as_nanos() as u64;
                for p in batch.drain(..) {
                    let seq = p
                        .data()
                        .get(14..18)
                        .map(|b| u32::from_be_bytes(b.try_into().expect("four bytes")) as usize);
                    if let Some(at) = seq.and_then(|s| sent_at.get(s)) {
                        lat.push(now.saturating_sub(at.load(Acquire)) as f64);
                    }
                }
            }
            if let Some(i) = idle.as_mut() {
                if i.after_round(got) {
                    i.sleep(&mut [&mut *rx as &mut dyn RxQueue])?;
                }
            }
            if done.load(Relaxed) && got == 0 && lat.len() >= frames {
                break;
            }
        }
        sender.join().expect("the bench's sender panicked")?;
        Ok(())
    })?;
    if lat.len() < frames {
        return Err(Error::InvalidConfig(format!(
            "the wake-up measurement received {} of {frames} frames",
            lat.len()
        )));
    }
    lat.sort_by(f64::total_cmp);
    let at = |q: f64| lat[((lat.len() - 1) as f64 * q).round() as usize];
    Ok((at(0.5), at(0.99)))
}

/// One measure of the interrupt row: polling (A) against the adaptive loop (B), judged with the
/// row's other two (Holm over the three; no A/A floor is measured for this row).
#[derive(Clone, Debug, Serialize)]
pub struct IrqRow {
    /// `load ns/pkt`, `wake median ns` or `wake p99 ns`.
    pub measure: &'static str,
    /// A, polling for ever: the mean with its 95 % interval.
    pub a_poll: Interval,
    /// B, the adaptive loop.
    pub b_adaptive: Interval,
    /// B - A (paired t, 95 %).
    pub diff: Interval,
    /// The paired t test's two-sided p-value of B - A.
    pub p: f64,
    /// `p` adjusted by Holm's procedure over the row's three measures.
    pub p_holm: f64,
    /// The verdict on B - A.
    pub verdict: Verdict,
}

/// The measures of the interrupt row, in order.
pub const IRQ_MEASURES: [&str; 3] = ["load ns/pkt", "wake median ns", "wake p99 ns"];

/// The ports of the interrupt row, all served by one spinning device thread: a source
/// forwarded into an unwired port (`load`), and a wired pair, Y sending single frames to X
/// (`wake`).
struct IrqRig {
    /// Y's buffers for the frames it sends.
    pool: Pool,
    load: (IxgbeRx<SimPort>, IxgbeTx<SimPort>),
    wake: (IxgbeRx<SimPort>, IxgbeTx<SimPort>),
    x_mac: MacAddr,
    /// The queues no measure uses, the ports and the models, kept open with the rig.
    _unused: (
        IxgbeTx<SimPort>,
        IxgbeRx<SimPort>,
        IxgbeTx<SimPort>,
        IxgbeRx<SimPort>,
    ),
    _ports: [IxgbePort<SimPort>; 4],
    _sims: [SimPort; 4],
}

impl IrqRig {
    fn open(args: &BenchConfig) -> Result<IrqRig> {
        // One device thread for all four ports, spinning: an idle device thread backs off for
        // up to 1 ms, which would be measured as wake-up latency in both placements.
        let threaded = SimConfig {
            mode: Mode::Threaded,
            thread: Some(DeviceThread::spinning(args.pin.get(1).copied())),
            ..SimConfig::default()
        };
        // load: port A's source at full rate, forwarded into an unwired port B.
        let la = SimPort::with_source(
            threaded.clone(),
            Source::udp(MacAddr([2, 0, 0, 0, 0, 2]), 64),
        );
        let lb = SimPort::with_source(
            threaded.clone(),
            Source::udp(MacAddr([2, 0, 0, 0, 0, 3]), 64).with_count(0),
        );
        let (lpa, lrx, ltx_unused) = open(&la, ixgbe_cfg(args.ring))?;
        let (lpb, lrx_unused, ltx) = open(&lb, ixgbe_cfg(args.ring))?;
        // wake: a wired pair; Y sends single frames to X.
        let (x, y) = SimPort::pair(threaded);
        let (px, xrx, xtx_unused) = open(&x, ixgbe_cfg(args.ring))?;
        let (py, yrx_unused, ytx) = open(&y, ixgbe_cfg(args.ring))?;
        let pool = Pool::new(
            PoolConfig {
                buffers: 1024,
                ..PoolConfig::default()
            },
            crate::platform::bus::Bus::dma_mapper(&y),
        )?;
        Ok(IrqRig {
            pool,
            load: (lrx, ltx),
            wake: (xrx, ytx),
            x_mac: x.mac(),
            _unused: (ltx_unused, lrx_unused, xtx_unused, yrx_unused),
            _ports: [lpa, lpb, px, py],
            _sims: [la, lb, x, y],
        })
    }
}

/// Runs the interrupt row of `config` (its `pairs`, `seconds`, `burst`, `ring`, `pin` and
/// `idle_polls`) on this thread, pinned to `config.pin`'s first CPU if given: `load`,
/// `wake median`, `wake p99`, poll (A) against adaptive (B), judged together. `progress` hears
/// of every pair done; `stop` set ends the run before its next pair.
pub fn run_irq(
    config: &BenchConfig,
    stop: &AtomicBool,
    mut progress: impl FnMut(&Progress<'_>),
) -> Result<Vec<IrqRow>> {
    let args = config;
    if args.idle_polls == 0 || args.pairs < 2 || args.seconds <= 0.0 || args.burst == 0 {
        return Err(Error::InvalidConfig(
            "bench: idle_polls >= 1, pairs >= 2, seconds > 0 and burst >= 1".into(),
        ));
    }
    if let Some(&cpu) = args.pin.first() {
        pin_current_thread(cpu)?;
    }
    let mut rig = IrqRig::open(args)?;
    let mut a = [Vec::new(), Vec::new(), Vec::new()];
    let mut b = [Vec::new(), Vec::new(), Vec::new()];
    for (pair, a_first) in abba(args.pairs).enumerate() {
        if stop.load(Relaxed) {
            return Err(Error::Interrupted("bench --device irq".into()));
        }
        let order = if a_first {
            [Loop::Poll, Loop::Adaptive]
        } else {
            [Loop::Adaptive, Loop::Poll]
        };
        for how in order {
            let (lrx, ltx) = &mut rig.load;
            let ns = load_rep(lrx, ltx, how, args)?;
            let (xrx, ytx) = &mut rig.wake;
            let (median, p99) = wake_rep(xrx, ytx, &rig.pool, rig.x_mac, how, args)?;
            let side = if how == Loop::Poll { &mut a } else { &mut b };
            side[0].push(ns);
            side[1].push(median);
            side[2].push(p99);
        }
        progress(&Progress {
            what: "interrupt row",
            pair: pair + 1,
            pairs: args.pairs,
            done_reps: 2 * (pair + 1),
            total_reps: 2 * args.pairs,
        });
    }
    Ok(judge_irq(&a, &b))
}

/// The three measures' rows: B - A of each, the p-values corrected together (Holm).
fn judge_irq(a: &[Vec<f64>; 3], b: &[Vec<f64>; 3]) -> Vec<IrqRow> {
    let p: Vec<f64> = (0..3).map(|i| paired_p(&a[i], &b[i])).collect();
    let p_holm = compare::holm(&p);
    (0..3)
        .map(|i| {
            let diff = paired_t_95(&a[i], &b[i]);
            let (am, bm) = (mean_95(&a[i]), mean_95(&b[i]));
            let verdict = compare::verdict(&diff, am.mean, 0.0, p_holm[i]);
            IrqRow {
                measure: IRQ_MEASURES[i],
                a_poll: am,
                b_adaptive: bm,
                diff,
                p: p[i],
                p_holm: p_holm[i],
                verdict,
            }
        })
        .collect()
}
