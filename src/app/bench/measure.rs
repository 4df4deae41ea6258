//! Measuring: each comparison's interleaved pairs on a rig, the group's floor, and the A/A run
//! anew when the machine moved.
//!
//! Each comparison runs [`BenchConfig::pairs`] interleaved pairs (A B, B A, A B, ...) of
//! [`BenchConfig::seconds`] each ([`compare::abba`]) and gives B - A in ns per packet with its
//! 95 % confidence interval (paired t), and its p-value; the A/A comparison of the baseline
//! against itself that comes first in every group gives the noise floor of this machine now.
//!
//! The floor is the machine's noise when it was measured. When a comparison's baseline A runs
//! clearly off where the same placement ran in the group's comparison before
//! ([`compare::baseline_moved`]: the host moved the vCPUs, say), an A/A of that baseline is run
//! at once ("A/A anew"); its floor judges that comparison and the group's next ones if the
//! baseline matches it, the larger of the two floors if it matches neither; the row says so.
//! On the threaded software 82599 each row also says when the model, not the driver, set the
//! pace ([`compare::pace`]): B - A is then the whole system's.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::Duration;

use crate::app::compare::{self, abba, mean_95, noise_floor, paired_p, paired_t_95};
use crate::app::pipeline::FreeOn;
use crate::device::RxQueue;
use crate::{Error, Result};

use super::judge::{Comparison, Moved};
use super::plan::{is_piped, placement_name, plan, Cell, Device, Placement, Traffic, Work};
use super::rig::Rig;
use super::{BenchConfig, Progress};

/// The repetitions done and planned, and the caller's progress callback.
pub(super) struct Tally<'p> {
    pub(super) done: usize,
    pub(super) total: usize,
    pub(super) report: &'p mut dyn FnMut(&Progress<'_>),
}

impl Tally<'_> {
    /// A pair of `what` done: two repetitions more.
    fn pair(&mut self, what: &str, pair: usize, pairs: usize) {
        self.done += 2;
        (self.report)(&Progress {
            what,
            pair,
            pairs,
            done_reps: self.done,
            total_reps: self.total,
        });
    }
}

/// Measures the whole matrix of `config` into `results`, in order (an A/A run anew right after
/// the comparison whose moved baseline called for it). Judging waits for all of it
/// ([`super::judge`]); on an error, `results` holds what was measured before it.
pub(super) fn measure_matrix(
    config: &BenchConfig,
    stop: &AtomicBool,
    tally: &mut Tally<'_>,
    results: &mut Vec<Comparison>,
) -> Result<()> {
    for &dev in &config.devices {
        for &t in &config.traffic {
            let mut rig = Rig::open(config, dev, t)?;
            for &work in &config.works {
                let g = Group { dev, t, work };
                let mut run = Runner {
                    rig: &mut rig,
                    config,
                    stop,
                    tally: &mut *tally,
                };
                run.group(g, results)?;
            }
            rig.check_model()?;
        }
    }
    Ok(())
}

/// What measuring one comparison needs besides the comparison.
struct Runner<'a, 'p> {
    rig: &'a mut Rig,
    config: &'a BenchConfig,
    stop: &'a AtomicBool,
    tally: &'a mut Tally<'p>,
}

impl Runner<'_, '_> {
    /// Measures group `g`'s plan into `results`: the A/A first, whose floor judges the rest.
    fn group(&mut self, g: Group, results: &mut Vec<Comparison>) -> Result<()> {
        // The group's floor (its A/A's, or the A/A run anew's), and each placement's latest
        // samples, which tell whether the machine moved since.
        let mut floor = 0.0;
        let mut seen = Baselines::default();
        for cell in plan(g.dev) {
            let (kind, pa, _) = cell;
            if is_piped(kind) && g.work != Work::Fwd {
                continue;
            }
            let mut c = self.measure(g, cell)?.compared(g, cell, floor);
            let moved = seen
                .latest(pa)
                .filter(|_| kind != "return") // (its A is not a forwarding loop)
                .and_then(|then| compare::baseline_moved(then, &c.a_ns));
            let mut anew = None;
            if kind == "A/A" {
                floor = c.floor;
            } else if let Some(share) = moved {
                let r = self.aa_anew(g, pa)?;
                let both = [r.a_ns.clone(), r.b_ns.clone()].concat();
                let matches = compare::baseline_moved(&both, &c.a_ns).is_none();
                floor = if matches { r.floor } else { floor.max(r.floor) };
                c = c.with_floor_anew(floor, share, matches);
                anew = Some(r);
            }
            for row in std::iter::once(c).chain(anew) {
                seen.record(&row);
                results.push(row);
            }
        }
        Ok(())
    }

    /// The floor was measured on another machine than this one: an A/A of baseline `pa` now.
    /// Its floor judges the comparison that called for it (and the group's next ones) if the
    /// baseline matches it, else the larger floor does.
    fn aa_anew(&mut self, g: Group, pa: Placement) -> Result<Comparison> {
        let again = ("A/A anew", pa, pa);
        self.tally.total +=
            self.config.pairs * 2 + 2 * usize::from(self.rig.model_time().is_some());
        Ok(self.measure(g, again)?.compared(g, again, 0.0))
    }
}

/// Each placement's latest samples in a group, from whichever comparison ran it last.
#[derive(Default)]
struct Baselines(Vec<(Placement, Vec<f64>)>);

impl Baselines {
    fn latest(&self, p: Placement) -> Option<&[f64]> {
        self.0.iter().find(|x| x.0 == p).map(|x| x.1.as_slice())
    }

    fn set(&mut self, p: Placement, ns: Vec<f64>) {
        self.0.retain(|x| x.0 != p);
        self.0.push((p, ns));
    }

    /// Keeps what `c` ran of the forwarding loop: both sides of an A/A (one placement), A and
    /// B of a placement comparison, A alone of the pipeline (its B is the two-core loop),
    /// nothing of the pool-return comparison.
    fn record(&mut self, c: &Comparison) {
        match c.kind {
            "return" => {}
            "pipeline" => self.set(c.pa, c.a_ns.clone()),
            _ if c.is_floor() => self.set(c.pa, [c.a_ns.clone(), c.b_ns.clone()].concat()),
            _ => {
                self.set(c.pa, c.a_ns.clone());
                self.set(c.pb, c.b_ns.clone());
            }
        }
    }
}

/// The group a comparison belongs to: device, traffic, work.
#[derive(Clone, Copy)]
struct Group {
    dev: Device,
    t: Traffic,
    work: Work,
}

/// The samples of one comparison, before they are judged.
struct Measured {
    a_ns: Vec<f64>,
    b_ns: Vec<f64>,
    /// Buffers home by the pool's slow path, and packets sent: A, B.
    slow: [(u64, u64); 2],
    model_ns_per_frame: Option<f64>,
    driver_busy_ns: Option<[f64; 2]>,
}

impl Runner<'_, '_> {
    /// Runs one comparison on the rig: `pairs` interleaved pairs, then (threaded model) one
    /// more repetition of A and of B for the forwarder's busy time.
    fn measure(&mut self, g: Group, cell: Cell) -> Result<Measured> {
        let (kind, pa, pb) = cell;
        let model_before = self.rig.model_time();
        let mut m = self.pairs(g, cell)?;
        m.model_ns_per_frame = match (model_before, self.rig.model_time()) {
            (Some((busy0, sent0)), Some((busy1, sent1))) if sent1 > sent0 => {
                Some((busy1 - busy0) as f64 / (sent1 - sent0) as f64)
            }
            _ => None,
        };
        // Which side sets the pace: the forwarder's own busy time in A and B, from one more
        // repetition of each (not samples of the comparison).
        if m.model_ns_per_frame.is_some() && !is_piped(kind) {
            let dur = Duration::from_secs_f64(self.config.seconds);
            m.driver_busy_ns = Some([
                self.rig.rep_busy(pa, g.work, self.config, dur)?,
                self.rig.rep_busy(pb, g.work, self.config, dur)?,
            ]);
            self.tally.done += 2;
        }
        Ok(m)
    }

    /// The comparison's interleaved pairs (A B, B A, ...): each side's ns per packet, and its
    /// buffers home by the pool's slow path.
    fn pairs(&mut self, g: Group, (kind, pa, pb): Cell) -> Result<Measured> {
        let (rig, args) = (&mut *self.rig, self.config);
        let piped = is_piped(kind);
        let what = format!(
            "{} {} {} {kind}: {} vs {}",
            g.dev.name(),
            g.t.name(),
            g.work.name(),
            placement_name(pa),
            placement_name(pb)
        );
        let dur = Duration::from_secs_f64(args.seconds);
        let (mut a_ns, mut b_ns) = (Vec::new(), Vec::new());
        let mut slow = [(0u64, 0u64); 2];
        for (i, a_first) in abba(args.pairs).enumerate() {
            if self.stop.load(Relaxed) {
                return Err(Error::Interrupted("bench".into()));
            }
            let mut side = |b: bool| {
                let (s0, n0) = (rig.rx.pool().stats().slow_returns, rig.sent);
                let ns = match b {
                    _ if kind == "return" => {
                        let on = if b { FreeOn::Other } else { FreeOn::Allocating };
                        rig.rep_return(on, args, dur)
                    }
                    true if piped => rig.rep_pipeline(pb, args, dur),
                    true => rig.rep(pb, g.work, args, dur),
                    false => rig.rep(pa, g.work, args, dur),
                };
                let s = &mut slow[usize::from(b)];
                s.0 += rig.rx.pool().stats().slow_returns - s0;
                s.1 += rig.sent - n0;
                ns
            };
            let x = side(!a_first)?;
            let y = side(a_first)?;
            let (a, b) = if a_first { (x, y) } else { (y, x) };
            a_ns.push(a);
            b_ns.push(b);
            self.tally.pair(&what, i + 1, args.pairs);
        }
        Ok(Measured {
            a_ns,
            b_ns,
            slow,
            model_ns_per_frame: None,
            driver_busy_ns: None,
        })
    }
}

impl Measured {
    /// The comparison these samples make, to be judged against `floor` (an A/A's own floor is
    /// its own) once the matrix is done.
    fn compared(self, g: Group, (kind, pa, pb): Cell, floor: f64) -> Comparison {
        let piped = is_piped(kind);
        let diff = paired_t_95(&self.a_ns, &self.b_ns);
        let floor = if kind.starts_with("A/A") {
            noise_floor(&diff)
        } else {
            floor
        };
        let a_mean = mean_95(&self.a_ns);
        let (a, b) = if kind == "return" {
            (
                "freed on alloc core".to_string(),
                "freed on other core".to_string(),
            )
        } else if piped {
            (
                format!("{} 1 core", placement_name(pa)),
                format!("{} 2 cores", placement_name(pb)),
            )
        } else {
            (placement_name(pa), placement_name(pb))
        };
        let slow = self.slow;
        Comparison {
            device: g.dev.name(),
            traffic: g.t.name(),
            work: g.work,
            kind,
            a,
            b,
            pa,
            pb,
            p: paired_p(&self.a_ns, &self.b_ns),
            a_mean,
            b_mean: mean_95(&self.b_ns),
            a_ns: self.a_ns,
            b_ns: self.b_ns,
            diff,
            floor,
            baseline_moved: None,
            pace: self
                .model_ns_per_frame
                .zip(self.driver_busy_ns)
                .map(|(m, d)| compare::pace(m, d)),
            model_ns_per_frame: self.model_ns_per_frame,
            driver_busy_ns: self.driver_busy_ns,
            pipeline: piped.then(|| {
                let per = |(s, n): (u64, u64)| s as f64 / n.max(1) as f64;
                format!(
                    "buffers home by the pool's slow path per packet: A {:.3}, B {:.3}",
                    per(slow[0]),
                    per(slow[1])
                )
            }),
        }
    }
}

impl Comparison {
    /// The same comparison to be judged against `floor`, from the A/A run anew because its
    /// baseline moved by `share` from the group's A/A; `matches`: the new A/A's baseline
    /// matches it.
    fn with_floor_anew(mut self, floor: f64, share: f64, matches: bool) -> Comparison {
        self.floor = floor;
        self.baseline_moved = Some(Moved {
            share,
            anew_matches: matches,
        });
        self
    }
}
