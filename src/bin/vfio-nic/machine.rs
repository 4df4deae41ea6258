//! What the bench says about the machine before it measures: the two things that moved the
//! software 82599's figures most between runs here.
//!
//! - **How long a cache line takes to cross between the two CPUs.** The threaded model's
//!   frames and descriptors cross from the device core to the forwarding core and back, so its
//!   figures follow this latency. On a VM it changes with where the host runs the vCPUs (this
//!   machine showed 30 and 60 ns within an hour), so it is measured at the start of every run: a
//!   ping-pong on one atomic word between two threads pinned to the two CPUs, and again at the
//!   end, when no device thread is left to compete with it. (Measured between comparisons, with
//!   the model's device thread asleep on the same CPU, it read 2-6 times too high.)
//! - **Whether DMA memory got 2 MiB huge pages** (`/proc/meminfo`). Without them the pools sit on
//!   4 KiB pages wherever the kernel put them, and the same cell varied by 2x from one run to the
//!   next (TLB and cache-set conflicts of the buffers' first lines, which all share their offset
//!   in a page); with them it did not.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use vfio_nic::devices::sim::pin_current_thread;
use vfio_nic::{Error, Result};

/// Round trips of the ping-pong.
const TRIPS: u64 = 100_000;
/// How long one side waits for the other's answer before giving up.
const WAIT: Duration = Duration::from_secs(2);

/// The machine as the bench found it.
#[derive(Clone, Debug, Serialize)]
pub struct MachineNotes {
    /// One cache-line transfer between the CPUs, in ns (half a ping-pong round trip).
    pub line_transfer_ns: f64,
    /// The CPUs it was measured between.
    pub cpus: [usize; 2],
    /// `HugePages_Total` and `HugePages_Free` of `/proc/meminfo` (2 MiB pages).
    pub huge_pages: (u64, u64),
}

impl MachineNotes {
    /// Measures between `cpus` and reads the huge-page counts.
    pub fn probe(cpus: [usize; 2]) -> Result<MachineNotes> {
        Ok(MachineNotes {
            line_transfer_ns: line_transfer_ns(cpus, TRIPS)?,
            cpus,
            huge_pages: huge_pages(),
        })
    }

    /// One line for the report's header.
    pub fn line(&self) -> String {
        let pages = match self.huge_pages {
            (0, _) => "no 2 MiB huge pages reserved: DMA memory is on 4 KiB pages and the sim \
                       figures vary more between runs (reserve some: echo 256 > \
                       /proc/sys/vm/nr_hugepages)"
                .to_string(),
            (total, free) => format!("2 MiB huge pages: {free} free of {total}"),
        };
        format!(
            "machine: a cache line crosses between CPUs {} and {} in {:.1} ns (ping-pong); {pages}",
            self.cpus[0], self.cpus[1], self.line_transfer_ns
        )
    }
}

/// Half the mean round trip of `trips` round trips of a ping-pong on one word between two
/// threads pinned to `cpus` (the caller's own affinity is left as it is).
fn line_transfer_ns(cpus: [usize; 2], trips: u64) -> Result<f64> {
    let word = Arc::new(AtomicU64::new(0));
    // Side 0 writes odd values and waits for the even answer; side 1 the other way round.
    let side = |me: u64| {
        let word = word.clone();
        let cpu = cpus[me as usize];
        std::thread::spawn(move || -> Result<Duration> {
            pin_current_thread(cpu)?;
            let start = Instant::now();
            for i in 0..trips {
                if me == 0 {
                    word.store(2 * i + 1, Ordering::Release);
                    wait_for(&word, 2 * i + 2)?;
                } else {
                    wait_for(&word, 2 * i + 1)?;
                    word.store(2 * i + 2, Ordering::Release);
                }
            }
            Ok(start.elapsed())
        })
    };
    let (a, b) = (side(0), side(1));
    let joined = |h: std::thread::JoinHandle<Result<Duration>>| {
        h.join().unwrap_or_else(|_| {
            Err(Error::InvalidConfig(
                "a thread of the line-transfer probe panicked".into(),
            ))
        })
    };
    let (ta, tb) = (joined(a), joined(b));
    tb?;
    Ok(ta?.as_nanos() as f64 / trips as f64 / 2.0)
}

/// Spins until `word` holds `value`, for at most [`WAIT`].
fn wait_for(word: &AtomicU64, value: u64) -> Result<()> {
    let start = Instant::now();
    let mut spins = 0u32;
    while word.load(Ordering::Acquire) != value {
        spins = spins.wrapping_add(1);
        if spins % 4096 == 0 && start.elapsed() > WAIT {
            return Err(Error::Stalled {
                stage: "bench's line-transfer probe",
                what: "the other CPU's answer",
                waited_ms: WAIT.as_millis() as u64,
            });
        }
        std::hint::spin_loop();
    }
    Ok(())
}

/// `HugePages_Total` and `HugePages_Free`, or zeros if `/proc/meminfo` says nothing.
fn huge_pages() -> (u64, u64) {
    let info = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    (field("HugePages_Total:"), field("HugePages_Free:"))
}
