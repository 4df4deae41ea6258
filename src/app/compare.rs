//! Paired comparisons of two benchmark configurations that know the machine's noise.
//!
//! The question a VLAN placement benchmark answers is a few nanoseconds wide, on machines whose
//! speed drifts by more than that over a minute (turbo, other tenants, the page cache). So two
//! configurations A and B are never measured one after the other in blocks: they run in
//! interleaved pairs, A B B A A B ... ([`abba`]), and each pair gives one difference `b - a`
//! measured seconds apart, so slow drift cancels out of it. The differences give a 95 %
//! confidence interval by the paired t method (Student's t with n - 1 degrees of freedom, on the
//! pairs' differences; [`paired_t_95`]).
//!
//! An A/A comparison (the same configuration against itself) shows what difference this machine
//! produces out of nothing at this moment: its [`noise_floor`]. A difference whose interval
//! includes zero, or whose size is within the floor, is reported as "no difference measurable
//! here", never as a winner ([`Verdict`]).

use std::fmt;

/// A mean with a two-sided 95 % confidence interval.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Interval {
    /// The sample mean.
    pub mean: f64,
    /// Lower bound of the interval.
    pub lo: f64,
    /// Upper bound of the interval.
    pub hi: f64,
}

impl Interval {
    /// Half the interval's width.
    pub fn half_width(&self) -> f64 {
        (self.hi - self.lo) / 2.0
    }

    /// Whether `x` lies in the interval (bounds included).
    pub fn contains(&self, x: f64) -> bool {
        self.lo <= x && x <= self.hi
    }
}

/// The order of `pairs` interleaved pairs: A B, B A, A B, ... (A B B A A B B A ...), so that
/// each configuration runs first in half the pairs. Yields `true` where A runs first.
pub fn abba(pairs: usize) -> impl Iterator<Item = bool> {
    (0..pairs).map(|i| i % 2 == 0)
}

/// The 97.5 % quantile of Student's t distribution with `df` degrees of freedom (the factor of
/// a two-sided 95 % interval): exact to three decimals from a table up to 30, then the
/// Cornish-Fisher expansion around the normal quantile (error below 0.001 there).
pub fn t_975(df: usize) -> f64 {
    const TABLE: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::INFINITY,
        1..=30 => TABLE[df - 1],
        _ => {
            let (z, n): (f64, f64) = (1.959_964, df as f64);
            z + (z.powi(3) + z) / (4.0 * n)
                + (5.0 * z.powi(5) + 16.0 * z.powi(3) + 3.0 * z) / (96.0 * n * n)
        }
    }
}

/// The mean of `b[i] - a[i]` with its paired-t 95 % interval (the one-sample t interval of
/// the differences). With fewer than two pairs the interval is unbounded (nothing can be
/// concluded).
///
/// # Panics
/// If `a` and `b` differ in length.
pub fn paired_t_95(a: &[f64], b: &[f64]) -> Interval {
    assert_eq!(
        a.len(),
        b.len(),
        "a paired comparison needs as many A as B samples"
    );
    let d: Vec<f64> = a.iter().zip(b).map(|(a, b)| b - a).collect();
    mean_95(&d)
}

/// The mean of `x` with its one-sample t 95 % interval (Student's t with n - 1 degrees of
/// freedom); unbounded with fewer than two samples.
pub fn mean_95(x: &[f64]) -> Interval {
    let n = x.len();
    let mean = if n == 0 {
        f64::NAN
    } else {
        x.iter().sum::<f64>() / n as f64
    };
    if n < 2 {
        return Interval {
            mean,
            lo: f64::NEG_INFINITY,
            hi: f64::INFINITY,
        };
    }
    let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    let half = t_975(n - 1) * (var / n as f64).sqrt();
    Interval {
        mean,
        lo: mean - half,
        hi: mean + half,
    }
}

/// The largest difference an A/A comparison of this machine could show: the size of its mean
/// difference plus its interval's half-width.
pub fn noise_floor(aa: &Interval) -> f64 {
    aa.mean.abs() + aa.half_width()
}

/// What a comparison of B against A says.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// The interval includes zero, or the difference is within the noise floor: no winner.
    NoDifference {
        /// The bound of what cannot be told apart here, ns (the larger of the floor and the
        /// interval's half-width).
        within: f64,
    },
    /// B costs more than A: by `diff` ns per packet, `percent` of A.
    Slower {
        /// B - A, ns per packet, with its interval.
        diff: Interval,
        /// The mean difference as a percentage of A's mean.
        percent: f64,
    },
    /// B costs less than A.
    Faster {
        /// B - A, ns per packet (negative), with its interval.
        diff: Interval,
        /// The mean difference as a percentage of A's mean (negative).
        percent: f64,
    },
}

/// The verdict on a difference `diff` (B - A, ns per packet) given A's mean cost `a_mean` and
/// the machine's noise floor `floor` (ns; from [`noise_floor`] of an A/A run).
pub fn verdict(diff: &Interval, a_mean: f64, floor: f64) -> Verdict {
    let unresolved = !diff.mean.is_finite() || !diff.lo.is_finite() || !diff.hi.is_finite();
    if unresolved || diff.contains(0.0) || diff.mean.abs() <= floor {
        return Verdict::NoDifference {
            within: floor.max(diff.half_width()),
        };
    }
    let percent = 100.0 * diff.mean / a_mean;
    if diff.mean > 0.0 {
        Verdict::Slower {
            diff: *diff,
            percent,
        }
    } else {
        Verdict::Faster {
            diff: *diff,
            percent,
        }
    }
}

/// How far the baseline's mean may move from the floor's, as a share of it, before the floor
/// is taken to describe another machine (with both means' intervals apart as well).
pub const MOVED_SHARE: f64 = 0.05;

/// Whether the machine moved since the A/A floor was measured: `now` (the baseline's samples
/// in a later comparison) and `floor_samples` (the same configuration's samples in the A/A,
/// both sides) have 95 % intervals that do not overlap, and means more than [`MOVED_SHARE`]
/// apart. Returns the baseline's relative move (`now` over the floor's mean, minus one) if so.
///
/// The paired design cancels a slow drift out of each difference, but not out of the floor:
/// a floor measured with the two CPUs sharing a cache says nothing of the noise after the host
/// moved them apart. A moved baseline is the visible sign of that.
pub fn baseline_moved(floor_samples: &[f64], now: &[f64]) -> Option<f64> {
    let (then, now) = (mean_95(floor_samples), mean_95(now));
    let apart = now.lo > then.hi || now.hi < then.lo;
    let share = now.mean / then.mean - 1.0;
    (apart && share.abs() > MOVED_SHARE).then_some(share)
}

/// Which side of a two-core benchmark sets its pace: the forwarder (its busy time per packet
/// in A and in B) or the device model on the other core (its busy time per packet over both).
/// Where the model is the slower stage, the forwarder waits for it, and a difference between
/// A and B is the whole system's (work moved between model and driver shows up as a change),
/// not the driver's cost alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Pace {
    /// The driver is the slower stage in both A and B: B - A is the driver's.
    Driver,
    /// The model is as slow as the driver, or slower, in A, in B, or in both.
    Model {
        /// In A.
        a: bool,
        /// In B.
        b: bool,
    },
}

/// The pace of a comparison from the model's busy ns per packet and the driver's in A and B.
pub fn pace(model_ns: f64, driver_ns: [f64; 2]) -> Pace {
    let (a, b) = (model_ns >= driver_ns[0], model_ns >= driver_ns[1]);
    if a || b {
        Pace::Model { a, b }
    } else {
        Pace::Driver
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::NoDifference { within } => {
                write!(f, "no difference measurable here (+-{within:.2} ns)")
            }
            Verdict::Slower { diff, percent } | Verdict::Faster { diff, percent } => write!(
                f,
                "{:+.2} ns [{:+.2}, {:+.2}], {:+.1} %",
                diff.mean, diff.lo, diff.hi, percent
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_known_sample_gives_the_known_interval() {
        // Differences 1, 2, 3, 4, 5: mean 3, s = sqrt(2.5), se = 0.7071, t(4) = 2.776.
        let a = [10.0; 5];
        let b = [11.0, 12.0, 13.0, 14.0, 15.0];
        let i = paired_t_95(&a, &b);
        assert!((i.mean - 3.0).abs() < 1e-12);
        assert!((i.half_width() - 2.776 * 2.5f64.sqrt() / 5f64.sqrt()).abs() < 1e-9);
        assert!(
            (i.lo - 1.0369).abs() < 1e-3 && (i.hi - 4.9631).abs() < 1e-3,
            "{i:?}"
        );
        // Ten pairs: t(9) = 2.262.
        let d: Vec<f64> = (0..10).map(|k| f64::from(k % 3)).collect();
        let i = paired_t_95(&[0.0; 10], &d);
        let mean = 0.9;
        let s = (d.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / 9.0).sqrt();
        assert!((i.half_width() - 2.262 * s / 10f64.sqrt()).abs() < 1e-9);
        // Beyond the table the expansion stays within 0.001 of the true quantiles.
        assert!((t_975(40) - 2.021).abs() < 1e-3 && (t_975(120) - 1.980).abs() < 1e-3);
    }

    #[test]
    fn an_a_a_pair_is_never_declared_a_winner() {
        // Whatever the samples, a configuration against itself is judged with its own floor.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 11) as f64 / (1u64 << 53) as f64
        };
        for round in 0..1000 {
            let n = 2 + round % 20;
            let a: Vec<f64> = (0..n).map(|_| 50.0 + 5.0 * next()).collect();
            let b: Vec<f64> = (0..n).map(|_| 50.0 + 5.0 * next()).collect();
            let aa = paired_t_95(&a, &b);
            let v = verdict(&aa, 52.5, noise_floor(&aa));
            assert!(matches!(v, Verdict::NoDifference { .. }), "{round}: {v:?}");
        }
    }

    #[test]
    fn a_clear_difference_is_reported_with_its_sign_and_percent() {
        let a = [100.0, 101.0, 99.0, 100.5, 99.5, 100.0];
        let b: Vec<f64> = a.iter().map(|x| x + 20.0 + (x - 100.0) * 0.1).collect();
        let d = paired_t_95(&a, &b);
        match verdict(&d, 100.0, 1.0) {
            Verdict::Slower { diff, percent } => {
                assert!((diff.mean - 20.0).abs() < 0.1 && (percent - 20.0).abs() < 0.1);
            }
            v => panic!("{v:?}"),
        }
        let d = paired_t_95(&b, &a);
        assert!(matches!(verdict(&d, 120.0, 1.0), Verdict::Faster { .. }));
        // Inside the floor: no winner, even with a tight interval.
        let v = verdict(&paired_t_95(&a, &b), 100.0, 25.0);
        assert_eq!(v.to_string(), "no difference measurable here (+-25.00 ns)");
        // One pair proves nothing.
        let v = verdict(&paired_t_95(&[1.0], &[9.0]), 1.0, 0.0);
        assert!(matches!(v, Verdict::NoDifference { .. }));
    }

    #[test]
    fn a_baseline_that_moved_is_seen_and_one_that_did_not_is_not() {
        let floor: Vec<f64> = (0..20).map(|k| 45.0 + f64::from(k % 5) * 0.5).collect();
        // The same spread around the same mean: not moved.
        let same: Vec<f64> = (0..10).map(|k| 45.2 + f64::from(k % 4) * 0.6).collect();
        assert_eq!(baseline_moved(&floor, &same), None);
        // Three times slower (the tagged l2 rows of the third-round matrix): moved, by +200 %.
        let slow: Vec<f64> = floor.iter().take(10).map(|x| 3.0 * x).collect();
        let share = baseline_moved(&floor, &slow).expect("a baseline three times slower moved");
        assert!((share - 2.0).abs() < 1e-9, "{share}");
        // Intervals apart but by less than MOVED_SHARE: a slow drift the pairs cancel.
        let drift: Vec<f64> = floor.iter().take(10).map(|x| x * 1.03).collect();
        assert!(mean_95(&drift).lo > mean_95(&floor).hi);
        assert_eq!(baseline_moved(&floor, &drift), None);
        // A large move with intervals that overlap (too noisy to tell): not claimed.
        let noisy: Vec<f64> = (0..10)
            .map(|k| if k % 2 == 0 { 20.0 } else { 90.0 })
            .collect();
        assert_eq!(baseline_moved(&floor, &noisy), None);
    }

    #[test]
    fn the_slower_stage_sets_the_pace() {
        assert_eq!(pace(12.0, [18.0, 19.0]), Pace::Driver);
        assert_eq!(pace(23.0, [18.0, 19.0]), Pace::Model { a: true, b: true });
        assert_eq!(pace(20.0, [18.0, 22.0]), Pace::Model { a: true, b: false });
        assert_eq!(pace(22.0, [22.0, 30.0]), Pace::Model { a: true, b: false });
    }

    #[test]
    fn abba_alternates_which_runs_first() {
        assert_eq!(
            abba(4).collect::<Vec<_>>(),
            [true, false, true, false],
            "A B, B A, A B, B A"
        );
    }
}
