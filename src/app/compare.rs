//! Paired comparisons of two benchmark configurations that know the machine's noise, judged as
//! one family.
//!
//! The question a VLAN placement benchmark answers is a few nanoseconds wide, on machines whose
//! speed drifts by more than that over a minute (turbo, other tenants, the page cache). So two
//! configurations A and B are never measured one after the other in blocks: they run in
//! interleaved pairs, A B B A A B ... ([`abba`]), and each pair gives one difference `b - a`
//! measured seconds apart, so slow drift cancels out of it. The differences give a 95 %
//! confidence interval by the paired t method (Student's t with n - 1 degrees of freedom, on the
//! pairs' differences; [`paired_t_95`]) and, from the same t statistic, a two-sided p-value
//! ([`paired_p`]): the interval excludes zero exactly when that p is below [`ALPHA`].
//!
//! An A/A comparison (the same configuration against itself) shows what difference this machine
//! produces out of nothing at this moment: its [`noise_floor`]. A difference whose interval
//! includes zero, or whose size is within the floor, is reported as "no difference measurable
//! here", never as a winner ([`Verdict`]).
//!
//! A benchmark matrix asks many such questions at once, and each 95 % interval excludes zero by
//! chance one time in twenty when there is nothing to find: among 30 comparisons, one or two
//! "winners" are expected from noise alone. So the p-values of one matrix are corrected together
//! with Holm's step-down procedure ([`holm`]), which keeps the chance of declaring even one false
//! difference in the whole matrix below [`ALPHA`] (without assuming the comparisons
//! independent) and is uniformly more powerful than Bonferroni's. The [`verdict`] declares a
//! difference only when the Holm-adjusted p is below [`ALPHA`] as well. The A/A comparisons are
//! not part of that family: they measure the floor, they test nothing.
//!
//! The Student t distribution (its quantiles and tail probabilities) comes from `statrs`, not
//! from hand-written tables or series.

use std::fmt;

use statrs::distribution::{ContinuousCDF, StudentsT};

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

/// The significance level of one comparison: its interval is the 95 % one, and a difference is
/// declared only where its Holm-adjusted p-value is below this.
pub const ALPHA: f64 = 0.05;

/// Student's t distribution with `df` degrees of freedom; `None` for `df` 0 (no such
/// distribution: one sample has no spread).
fn students_t(df: usize) -> Option<StudentsT> {
    StudentsT::new(0.0, 1.0, df as f64).ok()
}

/// The 97.5 % quantile of Student's t distribution with `df` degrees of freedom (the factor of
/// a two-sided 95 % interval); infinite for `df` 0.
pub fn t_975(df: usize) -> f64 {
    students_t(df).map_or(f64::INFINITY, |t| t.inverse_cdf(1.0 - ALPHA / 2.0))
}

/// The two-sided p-value of a t statistic `t` with `df` degrees of freedom: the probability,
/// with no difference at all, of a |t| at least this large. 1 for `df` 0 or a `t` that is NaN
/// (nothing can be concluded), 0 for an infinite `t`.
pub fn t_p_two_sided(t: f64, df: usize) -> f64 {
    match students_t(df) {
        Some(dist) if !t.is_nan() => (2.0 * dist.sf(t.abs())).min(1.0),
        _ => 1.0,
    }
}

/// The count, mean and sample variance (n - 1 in the denominator) of `x`; the variance is NaN
/// with fewer than two samples, the mean with none.
fn moments(x: &[f64]) -> (usize, f64, f64) {
    let n = x.len();
    let mean = x.iter().sum::<f64>() / n as f64;
    let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n.saturating_sub(1) as f64;
    (n, mean, var)
}

/// The differences `b[i] - a[i]` of a paired comparison.
///
/// # Panics
/// If `a` and `b` differ in length.
fn differences(a: &[f64], b: &[f64]) -> Vec<f64> {
    assert_eq!(
        a.len(),
        b.len(),
        "a paired comparison needs as many A as B samples"
    );
    a.iter().zip(b).map(|(a, b)| b - a).collect()
}

/// The mean of `b[i] - a[i]` with its paired-t 95 % interval (the one-sample t interval of
/// the differences). With fewer than two pairs the interval is unbounded (nothing can be
/// concluded).
///
/// # Panics
/// If `a` and `b` differ in length.
pub fn paired_t_95(a: &[f64], b: &[f64]) -> Interval {
    mean_95(&differences(a, b))
}

/// The two-sided p-value of the paired t test of B against A: the one-sample t test of the
/// differences `b[i] - a[i]` against zero, with n - 1 degrees of freedom. 1 with fewer than two
/// pairs; with differences that do not vary at all, 0 if they are not zero (and 1 if they are).
///
/// # Panics
/// If `a` and `b` differ in length.
pub fn paired_p(a: &[f64], b: &[f64]) -> f64 {
    mean_p(&differences(a, b))
}

/// The two-sided p-value of the one-sample t test of `x`'s mean against zero (Student's t with
/// n - 1 degrees of freedom); 1 with fewer than two samples.
pub fn mean_p(x: &[f64]) -> f64 {
    let (n, mean, var) = moments(x);
    if n < 2 {
        return 1.0;
    }
    t_p_two_sided(mean / (var / n as f64).sqrt(), n - 1)
}

/// The mean of `x` with its one-sample t 95 % interval (Student's t with n - 1 degrees of
/// freedom); unbounded with fewer than two samples.
pub fn mean_95(x: &[f64]) -> Interval {
    let (n, mean, var) = moments(x);
    if n < 2 {
        return Interval {
            mean,
            lo: f64::NEG_INFINITY,
            hi: f64::INFINITY,
        };
    }
    let half = t_975(n - 1) * (var / n as f64).sqrt();
    Interval {
        mean,
        lo: mean - half,
        hi: mean + half,
    }
}

/// Holm's step-down adjustment of the p-values of one family of `m` comparisons (one benchmark
/// matrix, its A/A floors left out), each returned in the place of its own p.
///
/// Sorted ascending, the i-th smallest p (from 1) becomes `min(1, (m - i + 1) p)`, and no
/// adjusted p is smaller than the one before it in that order: adjusted `p_(i) = max over j <= i
/// of min(1, (m - j + 1) p_(j))`. Declaring a difference where the adjusted p is below
/// [`ALPHA`] then keeps the chance of any false difference in the family below [`ALPHA`],
/// whatever the comparisons' dependence. A NaN p counts as 1 (nothing concluded).
pub fn holm(p: &[f64]) -> Vec<f64> {
    let m = p.len();
    let p: Vec<f64> = p
        .iter()
        .map(|&x| if x.is_nan() { 1.0 } else { x })
        .collect();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&i, &j| p[i].total_cmp(&p[j]));
    let mut adjusted = vec![1.0; m];
    let mut so_far = 0.0f64;
    for (rank, &i) in order.iter().enumerate() {
        so_far = so_far.max(((m - rank) as f64 * p[i]).min(1.0));
        adjusted[i] = so_far;
    }
    adjusted
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
    /// The interval includes zero, the difference is within the noise floor, or its
    /// Holm-adjusted p-value is not below [`ALPHA`]: no winner.
    NoDifference {
        /// The bound of what cannot be told apart here, ns: the largest of the floor, the
        /// interval's half-width and, where only the correction for the matrix's other
        /// comparisons withholds the difference, the difference's own size.
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

/// The verdict on a difference `diff` (B - A, ns per packet) given A's mean cost `a_mean`, the
/// machine's noise floor `floor` (ns; from [`noise_floor`] of an A/A run) and the comparison's
/// p-value `p_adjusted` as [`holm`] adjusted it within its matrix (its own [`paired_p`] where it
/// is judged alone).
///
/// A difference is declared only when all three agree: the 95 % interval excludes zero, the
/// mean difference is larger than the floor, and the adjusted p is below [`ALPHA`]. The
/// adjusted p is never below the raw one, so the last rule only ever withholds a difference;
/// the interval's rule stays so that a declared difference never shows an interval through
/// zero.
pub fn verdict(diff: &Interval, a_mean: f64, floor: f64, p_adjusted: f64) -> Verdict {
    let unresolved = !diff.mean.is_finite() || !diff.lo.is_finite() || !diff.hi.is_finite();
    let significant = p_adjusted < ALPHA; // (false for NaN)
    if unresolved || diff.contains(0.0) || diff.mean.abs() <= floor || !significant {
        return Verdict::NoDifference {
            within: floor.max(diff.half_width()).max(diff.mean.abs()),
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
        assert!((i.half_width() - t_975(4) * 2.5f64.sqrt() / 5f64.sqrt()).abs() < 1e-9);
        assert!(
            (i.lo - 1.0369).abs() < 1e-3 && (i.hi - 4.9631).abs() < 1e-3,
            "{i:?}"
        );
        // Ten pairs: t(9) = 2.262.
        let d: Vec<f64> = (0..10).map(|k| f64::from(k % 3)).collect();
        let i = paired_t_95(&[0.0; 10], &d);
        let mean = 0.9;
        let s = (d.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / 9.0).sqrt();
        assert!((i.half_width() - 2.262 * s / 10f64.sqrt()).abs() < 1e-3 * s);
        assert_eq!(t_975(0), f64::INFINITY, "one sample: no interval");
    }

    #[test]
    fn the_t_quantiles_are_the_published_table() {
        // The 97.5 % quantiles of a printed t table (three decimals), which this module held
        // by hand before statrs computed them; and two beyond it.
        const TABLE: [f64; 30] = [
            12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
            2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
            2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
        ];
        for (df, want) in (1..).zip(TABLE) {
            let got = t_975(df);
            assert!(
                (got - want).abs() <= 5e-4 + 1e-9,
                "df {df}: {got} vs {want}"
            );
        }
        assert!((t_975(40) - 2.021).abs() < 1e-3 && (t_975(120) - 1.980).abs() < 1e-3);
    }

    #[test]
    fn p_values_are_the_known_ones() {
        // The t table read backwards: a t at the 97.5 % quantile has a two-sided p of 0.05.
        for (t, df, want) in [
            (2.776, 4, 0.05),
            (2.262, 9, 0.05),
            (12.706, 1, 0.05),
            (4.604, 4, 0.01),
            (3.250, 9, 0.01),
            (1.833, 9, 0.10),
            (0.0, 9, 1.0),
        ] {
            let p = t_p_two_sided(t, df);
            assert!((p - want).abs() < 2e-4, "t {t} df {df}: p {p}, not {want}");
            assert_eq!(
                t_p_two_sided(-t, df),
                p,
                "two-sided: the sign does not matter"
            );
        }
        assert_eq!(t_p_two_sided(f64::INFINITY, 3), 0.0);
        assert_eq!(t_p_two_sided(f64::NAN, 3), 1.0);
        assert_eq!(t_p_two_sided(2.0, 0), 1.0);
        // The paired test of the known sample: t = 3 / 0.7071 = 4.243, df 4: p = 0.0132.
        let (a, b) = ([10.0; 5], [11.0, 12.0, 13.0, 14.0, 15.0]);
        assert!(
            (paired_p(&a, &b) - 0.013_24).abs() < 1e-4,
            "{}",
            paired_p(&a, &b)
        );
        assert_eq!(paired_p(&b, &a), paired_p(&a, &b));
        // Interval and test agree: the 95 % interval excludes zero exactly when p < 0.05.
        let d: Vec<f64> = (0..10).map(|k| 0.3 + f64::from(k % 3)).collect();
        let (i, p) = (mean_95(&d), mean_p(&d));
        assert!(!i.contains(0.0) && p < ALPHA, "{i:?} {p}");
        let d: Vec<f64> = (0..10).map(|k| f64::from(k % 3) - 0.7).collect();
        let (i, p) = (mean_95(&d), mean_p(&d));
        assert!(i.contains(0.0) && p >= ALPHA, "{i:?} {p}");
        // Nothing to conclude from one pair; no spread at all: zero or certain.
        assert_eq!(paired_p(&[1.0], &[9.0]), 1.0);
        assert_eq!(mean_p(&[2.0, 2.0, 2.0]), 0.0);
        assert_eq!(mean_p(&[0.0, 0.0, 0.0]), 1.0);
    }

    #[test]
    fn holm_adjusts_as_the_textbook_does() {
        // Sorted: 0.005 x 4 = 0.02, 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, 0.04 x 1 = 0.04 -> 0.06
        // (never below the one before), each back in its place.
        let adjusted = holm(&[0.01, 0.04, 0.03, 0.005]);
        for (got, want) in adjusted.iter().zip([0.03, 0.06, 0.06, 0.02]) {
            assert!((got - want).abs() < 1e-12, "{adjusted:?}");
        }
        // Capped at 1; a family of one is left as it is; NaN is "nothing concluded".
        assert_eq!(holm(&[0.5, 0.6, 0.01]), [1.0, 1.0, 0.03]);
        assert_eq!(holm(&[0.04]), [0.04]);
        assert_eq!(holm(&[f64::NAN, 0.01]), [1.0, 0.02]);
        assert!(holm(&[]).is_empty());
        // Ties: 0.02 x 3 = 0.06 for the first, and the second (0.02 x 2) is not adjusted below it.
        let tied = holm(&[0.02, 0.02, 0.5]);
        assert!((tied[0] - 0.06).abs() < 1e-12 && (tied[1] - 0.06).abs() < 1e-12);
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
            let v = verdict(&aa, 52.5, noise_floor(&aa), paired_p(&a, &b));
            assert!(matches!(v, Verdict::NoDifference { .. }), "{round}: {v:?}");
        }
    }

    #[test]
    fn a_clear_difference_is_reported_with_its_sign_and_percent() {
        let a = [100.0, 101.0, 99.0, 100.5, 99.5, 100.0];
        let b: Vec<f64> = a.iter().map(|x| x + 20.0 + (x - 100.0) * 0.1).collect();
        let d = paired_t_95(&a, &b);
        let p = paired_p(&a, &b);
        match verdict(&d, 100.0, 1.0, p) {
            Verdict::Slower { diff, percent } => {
                assert!((diff.mean - 20.0).abs() < 0.1 && (percent - 20.0).abs() < 0.1);
            }
            v => panic!("{v:?}"),
        }
        let d = paired_t_95(&b, &a);
        assert!(matches!(verdict(&d, 120.0, 1.0, p), Verdict::Faster { .. }));
        // Inside the floor: no winner, even with a tight interval.
        let v = verdict(&paired_t_95(&a, &b), 100.0, 25.0, p);
        assert_eq!(v.to_string(), "no difference measurable here (+-25.00 ns)");
        // One pair proves nothing.
        let v = verdict(&paired_t_95(&[1.0], &[9.0]), 1.0, 0.0, 1.0);
        assert!(matches!(v, Verdict::NoDifference { .. }));
    }

    #[test]
    fn a_difference_the_matrix_does_not_carry_is_no_difference() {
        // Six pairs with B ahead by 0.2-3 ns: the interval excludes zero, the difference is well
        // outside a 0.2 ns floor, and alone it would be declared (t = 3.09, df 5: p = 0.027).
        let a = [50.0; 6];
        let b = [51.0, 53.0, 50.2, 52.5, 50.3, 53.0];
        let (diff, p) = (paired_t_95(&a, &b), paired_p(&a, &b));
        assert!(
            !diff.contains(0.0) && (p - 0.027).abs() < 1e-3,
            "{diff:?} {p}"
        );
        assert!(matches!(
            verdict(&diff, 50.0, 0.2, p),
            Verdict::Slower { .. }
        ));
        // In a matrix of five comparisons whose other four found nothing, Holm multiplies the
        // smallest p by 5: above 0.05, so no winner, and the bound it prints covers the mean.
        let family = holm(&[0.40, p, 0.90, 0.25, 0.70]);
        assert!(
            family[1] >= ALPHA && (family[1] - 5.0 * p).abs() < 1e-12,
            "{family:?}"
        );
        match verdict(&diff, 50.0, 0.2, family[1]) {
            Verdict::NoDifference { within } => {
                assert!(within >= diff.mean.abs(), "{within} {diff:?}");
            }
            v => panic!("Holm-adjusted p {} >= 0.05 declared {v:?}", family[1]),
        }
        // At exactly 0.05 nothing is declared either; just below it is.
        assert!(matches!(
            verdict(&diff, 50.0, 0.2, ALPHA),
            Verdict::NoDifference { .. }
        ));
        assert!(matches!(
            verdict(&diff, 50.0, 0.2, 0.049),
            Verdict::Slower { .. }
        ));
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
