//! The VLAN-placement bench: what each VLAN placement costs, as paired comparisons that know the
//! noise. `vfio-nic bench` prints it; an appliance's own test suite can run it through [`run`].
//!
//! For each in-memory device, traffic (untagged, tagged) and application work, the bench
//! compares placements against their natural baseline, on the same ports, switching the VLAN
//! modes between repetitions (the modes are runtime switches):
//!
//! - receive: Software vs Hardware and Deferred vs Hardware (the NIC strips), or, on a device
//!   without VLAN hardware, Software vs Deferred;
//! - transmit: Software vs Hardware insertion, where the device can insert;
//! - an A/A comparison of the baseline against itself: the noise floor of this machine now.
//!
//! Each comparison runs [`BenchConfig::pairs`] interleaved pairs (A B, B A, A B, ...) of
//! [`BenchConfig::seconds`] each ([`crate::app::compare`]) and reports B - A in ns per packet
//! with its 95 % confidence interval (paired t), and the relative difference. A difference whose
//! interval includes zero, or that is within the A/A floor, is "no difference measurable here".
//! The whole matrix is judged as one family at the end (Holm's correction, [`judge`]), so [`run`]
//! returns the verdicts once everything is measured, and reports only progress before.
//!
//! The parts, each in a file of its own:
//! - [`plan`]: the devices, traffic and work, the placements, each device's plan;
//! - `work`: the work a repetition times (`fwd`, `l2`) and its clock;
//! - `rig`: two ports of one device and their VLAN switches, one repetition on them;
//! - `afp`: the af_packet rig's generator thread and its ring-draining repetition;
//! - `virtio`: the virtio rig (two software virtio-net devices) and its devices' check;
//! - `measure`: the interleaved pairs, the floors, the A/A run anew;
//! - [`judge`]: the results, judged as one family, and their JSON form;
//! - [`irq`]: the interrupt row, polling against the adaptive loop ([`run_irq`]).
//!
//! The library never prints: the caller shows [`Progress`] and the results as it likes.

mod afp;
mod generator;
pub mod irq;
pub mod judge;
mod measure;
pub mod plan;
mod rig;
mod virtio;
mod work;

use std::sync::atomic::AtomicBool;

use crate::devices::sim::pin_current_thread;
use crate::{Error, Result};

pub use irq::{run_irq, IrqRow, IRQ_MEASURES};
pub use judge::{family_size, Comparison, Judged, Moved};
pub use plan::{Device, Placement, Traffic, Work};
pub use work::FRAME;

/// What a run measures, and how.
#[derive(Clone, Debug)]
pub struct BenchConfig {
    /// Interleaved A/B pairs per comparison (at least 2; 10 or more for a usable interval).
    pub pairs: usize,
    /// Seconds per repetition (each pair runs two).
    pub seconds: f64,
    /// Packets per burst (1 to 512).
    pub burst: usize,
    /// Descriptors per ring (sim), and the pool is four rings' worth of buffers.
    pub ring: usize,
    /// The devices to run, in this order.
    pub devices: Vec<Device>,
    /// The traffic to run on each device, in this order.
    pub traffic: Vec<Traffic>,
    /// The work to run for each traffic, in this order.
    pub works: Vec<Work>,
    /// Pin the calling (forwarding) thread to the first CPU and the model's device thread (or
    /// the afp generator, or the pipeline's second stage) to the second.
    pub pin: Vec<usize>,
    /// [`Device::Afp`]'s veth pair: the interface the generator sends into and the one the
    /// forwarder receives from (both ends in this network namespace, up).
    pub afp_pair: Vec<String>,
    /// The interrupt row ([`run_irq`]): empty polls in a row before the adaptive loop sleeps.
    pub idle_polls: u32,
}

impl Default for BenchConfig {
    /// `vfio-nic bench`'s defaults: 10 pairs of 0.2 s, bursts of 32, rings of 512, the null
    /// device and both software 82599 modes, both traffics and works, nothing pinned; 256 empty
    /// polls before the interrupt row's adaptive loop sleeps.
    fn default() -> BenchConfig {
        BenchConfig {
            pairs: 10,
            seconds: 0.2,
            burst: 32,
            ring: 512,
            devices: vec![Device::Null, Device::Sim, Device::SimInline],
            traffic: vec![Traffic::Untagged, Traffic::Tagged],
            works: vec![Work::Fwd, Work::L2],
            pin: Vec::new(),
            afp_pair: Vec::new(),
            idle_polls: 256,
        }
    }
}

impl BenchConfig {
    /// Refuses a burst outside 1..=512, fewer than 2 pairs and repetitions of no time.
    pub fn check(&self) -> Result<()> {
        if self.burst == 0 || self.burst > 512 || self.pairs < 2 || self.seconds <= 0.0 {
            return Err(Error::InvalidConfig(
                "bench: burst 1..=512, pairs >= 2 and seconds > 0".into(),
            ));
        }
        Ok(())
    }
}

/// A pair of repetitions done, as [`run`] reports it to its caller.
#[derive(Clone, Copy, Debug)]
pub struct Progress<'a> {
    /// The comparison: `null untagged fwd receive: rx deferred tx sw vs rx sw tx sw`.
    pub what: &'a str,
    /// The pair just done (from 1), of `pairs`.
    pub pair: usize,
    /// The comparison's pairs.
    pub pairs: usize,
    /// Repetitions done in the whole run.
    pub done_reps: usize,
    /// Repetitions the run plans now (an A/A run anew adds its own when it comes).
    pub total_reps: usize,
}

/// A run that stopped before the end (an error, or `stop`): what it measured before, judged as
/// a family of those (the comparisons it did not reach were never tested).
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct Stopped {
    /// The rows measured before the error.
    pub rows: Vec<Judged>,
    /// Why the run stopped (`interrupted` when `stop` was set).
    #[source]
    pub error: Error,
}

impl From<Error> for Stopped {
    fn from(error: Error) -> Stopped {
        Stopped {
            rows: Vec::new(),
            error,
        }
    }
}

/// Runs the bench of `config` on this thread (pinned to `config.pin`'s first CPU, if given):
/// every comparison measured, then all judged as one family. `progress` hears of every pair
/// done; `stop` set (by a signal handler, say) ends the run before its next pair.
pub fn run(
    config: &BenchConfig,
    stop: &AtomicBool,
    mut progress: impl FnMut(&Progress<'_>),
) -> std::result::Result<Vec<Judged>, Stopped> {
    config.check()?;
    if let Some(&cpu) = config.pin.first() {
        pin_current_thread(cpu)?;
    }
    let mut tally = measure::Tally {
        done: 0,
        total: plan::total_reps(config),
        report: &mut progress,
    };
    let mut results = Vec::new();
    let measured = measure::measure_matrix(config, stop, &mut tally, &mut results);
    // Holm needs every p-value of the matrix: the rows are judged only now.
    let rows = judge::judge(results);
    match measured {
        Ok(()) => Ok(rows),
        Err(error) => Err(Stopped { rows, error }),
    }
}
