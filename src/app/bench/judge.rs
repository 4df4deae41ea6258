//! The results: each comparison as measured, and judged with the rest of its matrix.
//!
//! A matrix of some 30 comparisons at 95 % each would show a winner or two by chance alone, so
//! the matrix is judged as one family once it has all been measured: the paired t tests'
//! p-values of its comparisons (not of its A/A rows, which measure floors) are adjusted by
//! Holm's procedure ([`compare::holm`]), and a difference is declared only where the adjusted p
//! is below 0.05 as well. That is why a caller gets the verdicts at the end of the run, and only
//! progress before; a run that stops early gives the rows it measured, judged as a family of
//! those ([`super::Stopped`]). Each row has its raw and adjusted p.
//!
//! The structs serialize (serde) to the objects of `vfio-nic bench --json`'s `comparisons`.

use serde::Serialize;

use crate::app::compare::{self, Interval, Pace, Verdict};

use super::plan::{Placement, Work};

/// One comparison as measured; its verdict waits for the rest of the matrix ([`Judged`]).
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    /// The device's name ([`super::Device::name`]).
    pub device: &'static str,
    /// `untagged` or `tagged` ([`super::Traffic::name`]).
    pub traffic: &'static str,
    /// The work forwarded.
    pub work: Work,
    /// "A/A", "A/A anew", "receive", "transmit", "cold", "pipeline" or "return".
    pub kind: &'static str,
    /// Placement A as the results name it (`rx hw tx hw`, `rx deferred tx sw 1 core`, ...).
    pub a: String,
    /// Placement B.
    pub b: String,
    /// Placement A.
    #[serde(skip)]
    pub pa: Placement,
    /// Placement B.
    #[serde(skip)]
    pub pb: Placement,
    /// A's ns per packet of every repetition, pair by pair.
    pub a_ns: Vec<f64>,
    /// B's, pair by pair.
    pub b_ns: Vec<f64>,
    /// A's mean ns per packet with its 95 % interval.
    pub a_mean: Interval,
    /// B's.
    pub b_mean: Interval,
    /// B - A, ns per packet (paired t, 95 %).
    pub diff: Interval,
    /// The A/A floor of the group this comparison belongs to, ns.
    pub floor: f64,
    /// The paired t test's two-sided p-value of B - A, before the matrix's correction.
    pub p: f64,
    /// The baseline's move from the same placement's run before in the group (A's mean over
    /// that one's, minus one), when it moved ([`compare::baseline_moved`]): an A/A of A was then
    /// run anew.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline_moved: Option<Moved>,
    /// Threaded software 82599: which stage set the pace ([`compare::pace`]). Where the model
    /// did, B - A is the whole system's, not the driver's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pace: Option<Pace>,
    /// On the pipeline comparison: the pool's buffers that went home through its slow path
    /// (cross-thread returns) per packet in B, as a check that B took it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<String>,
    /// Software 82599: the model's own time per frame on the device core (its busy time over
    /// the comparison's frames, both placements), next to the forwarder's ns per packet.
    pub model_ns_per_frame: Option<f64>,
    /// Software 82599, threaded: the forwarder's busy time per packet (bursts that received
    /// something) in A and B, from one extra repetition of each; beside the model's time per
    /// frame, the larger of the two sets the pace.
    pub driver_busy_ns: Option<[f64; 2]>,
}

impl Comparison {
    /// An A/A row (planned or run anew): it measures a floor and is not one of the matrix's
    /// hypotheses.
    pub fn is_floor(&self) -> bool {
        self.kind.starts_with("A/A")
    }
}

/// A comparison judged with the rest of its matrix (Holm over the matrix's p-values).
#[derive(Clone, Debug, Serialize)]
pub struct Judged {
    /// The comparison.
    #[serde(flatten)]
    pub c: Comparison,
    /// The p-value adjusted by Holm's procedure over the matrix's comparisons; none on the A/A
    /// rows (floors, not hypotheses).
    pub p_holm: Option<f64>,
    /// The verdict on B - A (an A/A row's: never a difference).
    pub verdict: Verdict,
}

/// Judges a whole matrix at once: the p-values of its comparisons, the A/A rows left out, are
/// adjusted together by Holm's procedure, and each verdict asks for its adjusted p below 0.05
/// besides an interval clear of zero and of the floor. An A/A row is judged with its raw p
/// against its own floor, which covers it: never a difference.
pub(super) fn judge(results: Vec<Comparison>) -> Vec<Judged> {
    let family: Vec<f64> = results
        .iter()
        .filter(|c| !c.is_floor())
        .map(|c| c.p)
        .collect();
    let mut adjusted = compare::holm(&family).into_iter();
    results
        .into_iter()
        .map(|c| {
            let p_holm = if c.is_floor() { None } else { adjusted.next() };
            let p = p_holm.unwrap_or(c.p);
            let verdict = compare::verdict(&c.diff, c.a_mean.mean, c.floor, p);
            Judged { c, p_holm, verdict }
        })
        .collect()
}

/// The size of the family Holm's procedure corrected for: the matrix's comparisons, not its
/// A/A rows.
pub fn family_size(rows: &[Judged]) -> usize {
    rows.iter().filter(|r| r.p_holm.is_some()).count()
}

/// A comparison's baseline that moved from the same placement's run before in its group
/// ([`compare::baseline_moved`]).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Moved {
    /// A's mean over the same placement's run before, minus one.
    pub share: f64,
    /// Whether A matches the A/A run anew (then that floor judges; else the larger one).
    pub anew_matches: bool,
}
