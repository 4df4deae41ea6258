//! The device threads of the in-memory devices' threaded mode (the software 82599 and the
//! queue-manager model share them).
//!
//! A device thread polls its ports (each model says what a poll does: the sim's transmit tails
//! and inbound FIFO, the qm model's portal doorbells) and does the same work the inline mode
//! does inside register writes, so descriptors and frames are written by another core, as DMA
//! is. By default every threaded port gets a thread of its own; ports built with the same
//! [`DeviceThread`] (in [`SimConfig::thread`](super::sim::SimConfig::thread), say) share one (a
//! benchmark on a two-core machine wants one forwarding core and one device core, not three
//! busy threads on two cores), and a `DeviceThread` may be pinned to a CPU.
//!
//! The thread holds only `Weak` references between polls: when the last handle of a port's
//! model is gone (the driver's queues keep one), the next upgrade fails, the port's `alive`
//! flag (the sim's [`WorkerWatch`](super::sim::WorkerWatch)) turns false, and when no port is left
//! the thread ends (a port attached later starts a new one). When idle it spins briefly, then
//! yields, then sleeps with a growing pause (up to 1 ms), so an idle model costs nothing on a
//! small machine and the host tests stay fast.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// A model a device thread serves. Sealed: only this crate's models implement it
/// (see `src/sealed.rs`).
pub trait Polled: crate::sealed::Sealed + Send + Sync + 'static {
    /// Does the work pending now; whether there was any.
    fn poll(&self) -> bool;
    /// The port's name, for the thread's name and messages.
    fn name(&self) -> &str;
    /// Counts one poll that found work and how long it took.
    fn busy(&self, ns: u64);
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

const SPINS: u32 = 200;
const YIELDS: u32 = 400;
const MAX_PAUSE: Duration = Duration::from_millis(1);

/// A device thread that several threaded ports may share, optionally pinned to one CPU.
///
/// Clones are the same thread. The thread starts when the first port is attached and ends when
/// its last port is gone.
#[derive(Clone, Debug, Default)]
pub struct DeviceThread(Arc<Group>);

#[derive(Debug, Default)]
struct Group {
    /// CPU to run on (`sched_setaffinity`), if any.
    pin: Option<usize>,
    /// Never back off when idle: spin, as a NIC's DMA engine does not sleep (latency
    /// measurements; it costs a whole core).
    spin: bool,
    state: Mutex<GroupState>,
    /// Bumped whenever the port list changes, so the thread refreshes its copy.
    generation: AtomicU64,
}

#[derive(Debug, Default)]
struct GroupState {
    ports: Vec<Member>,
    running: bool,
}

#[derive(Clone)]
struct Member {
    dev: Weak<dyn Polled>,
    alive: Arc<AtomicBool>,
}

impl std::fmt::Debug for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Member")
            .field("alive", &self.alive)
            .finish()
    }
}

impl DeviceThread {
    /// A device thread, not pinned.
    pub fn new() -> DeviceThread {
        DeviceThread::default()
    }

    /// A device thread pinned to `cpu`.
    pub fn pinned(cpu: usize) -> DeviceThread {
        DeviceThread(Arc::new(Group {
            pin: Some(cpu),
            ..Group::default()
        }))
    }

    /// A device thread (pinned to `cpu`, if given) that never backs off when idle: it polls
    /// its ports without pause, so that a frame is carried as soon as it is written, not after
    /// an idle pause of up to 1 ms. For wake-up latency measurements; it keeps a core busy.
    pub fn spinning(cpu: Option<usize>) -> DeviceThread {
        DeviceThread(Arc::new(Group {
            pin: cpu,
            spin: true,
            ..Group::default()
        }))
    }

    /// The CPU the thread is pinned to.
    pub fn pin(&self) -> Option<usize> {
        self.0.pin
    }
}

/// Pins the calling thread to `cpu`.
pub fn pin_current_thread(cpu: usize) -> Result<()> {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu)
        .and_then(|()| nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set))
        .map_err(|e| Error::io(format!("pinning a thread to CPU {cpu}"), e.into()))
}

/// Attaches `dev` to `thread` (starting it if it is not running); `alive` is set while the
/// thread serves the port.
pub(crate) fn attach<T: Polled>(
    dev: &Arc<T>,
    alive: Arc<AtomicBool>,
    thread: &DeviceThread,
) -> Result<()> {
    let group = &thread.0;
    let mut st = lock(&group.state);
    alive.store(true, Ordering::Release);
    let weak: Weak<dyn Polled> = Arc::downgrade(dev) as Weak<dyn Polled>;
    st.ports.push(Member {
        dev: weak,
        alive: alive.clone(),
    });
    group.generation.fetch_add(1, Ordering::AcqRel);
    if st.running {
        return Ok(());
    }
    let name = format!("{} device", dev.name());
    let g = group.clone();
    let spawned = std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || run(&g, &name));
    match spawned {
        Ok(_) => {
            st.running = true;
            Ok(())
        }
        Err(e) => {
            st.ports.pop();
            alive.store(false, Ordering::Release);
            Err(Error::io(
                format!("starting the device thread of {}", dev.name()),
                e,
            ))
        }
    }
}

fn run(group: &Arc<Group>, name: &str) {
    if let Some(cpu) = group.pin {
        if let Err(e) = pin_current_thread(cpu) {
            tracing::warn!(thread = %name, error = %e, "device thread not pinned");
        }
    }
    let mut ports: Vec<Member> = Vec::new();
    let mut seen = u64::MAX;
    let mut idle = 0u32;
    let mut pause = Duration::from_micros(20);
    loop {
        let generation = group.generation.load(Ordering::Acquire);
        if generation != seen {
            ports = lock(&group.state).ports.clone();
            seen = generation;
        }
        let mut worked = false;
        let mut gone = false;
        // One clock read per poll: a poll's time runs from the end of the one before it.
        let mut t = Instant::now();
        for m in &ports {
            match m.dev.upgrade() {
                Some(dev) => {
                    let did = dev.poll();
                    let now = Instant::now();
                    if did {
                        dev.busy((now - t).as_nanos() as u64);
                        worked = true;
                    }
                    t = now;
                }
                None => gone = true,
            }
        }
        if gone {
            // Forget the ports whose last handle is gone; end when none is left (unless one
            // was attached meanwhile: then `generation` moved and the loop goes on).
            let mut st = lock(&group.state);
            st.ports.retain(|m| {
                let live = m.dev.strong_count() > 0;
                if !live {
                    m.alive.store(false, Ordering::Release);
                }
                live
            });
            group.generation.fetch_add(1, Ordering::AcqRel);
            if st.ports.is_empty() {
                st.running = false;
                tracing::debug!(thread = %name, "device thread ends: no handle left");
                return;
            }
            continue;
        }
        if worked {
            idle = 0;
            pause = Duration::from_micros(20);
            continue;
        }
        idle = idle.saturating_add(1);
        if idle < SPINS || group.spin {
            std::hint::spin_loop();
        } else if idle < SPINS + YIELDS {
            std::thread::yield_now();
        } else {
            std::thread::sleep(pause);
            pause = (pause * 2).min(MAX_PAUSE);
        }
    }
}
