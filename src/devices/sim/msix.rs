//! The interrupt state of one software 82599 port: which eventfd each MSI-X vector is routed
//! to, when each vector last sent, and which messages wait for their throttle interval. What
//! the registers make of it (causes, masks, EIAC, EITR) is `irq.rs`; the state is here, below
//! both `irq.rs` and the register file that holds it (`regs.rs`), so that neither imports the
//! other's.

use std::sync::atomic::Ordering::{Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use crate::platform::irq::Interrupt;

/// The vectors whose causes EICR holds one bit each (the queue causes, RTX_QUEUE).
pub(super) const VECTORS: usize = 16;

/// The interrupt side of one software 82599 port.
pub(super) struct SimIrq {
    /// Eventfds are routed (interrupt mode): the receive path looks at nothing else when not.
    pub(super) on: AtomicBool,
    /// Vector -> eventfd, as routed, and the routing's generation. Also the lock under which
    /// every decision to send is taken (see `SimRegs::send_due` in `irq.rs`).
    fds: Mutex<(Vec<Interrupt>, u64)>,
    /// Each vector's last message, ns since `epoch` (0: never).
    pub(super) last: [AtomicU64; VECTORS],
    /// Vectors whose message waits for its throttle interval to end.
    pub(super) pending: AtomicU32,
    epoch: Instant,
}

impl Default for SimIrq {
    fn default() -> Self {
        SimIrq {
            on: AtomicBool::new(false),
            fds: Mutex::new((Vec::new(), 0)),
            last: std::array::from_fn(|_| AtomicU64::new(0)),
            pending: AtomicU32::new(0),
            epoch: Instant::now(),
        }
    }
}

impl SimIrq {
    pub(super) fn fds(&self) -> MutexGuard<'_, (Vec<Interrupt>, u64)> {
        self.fds.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Routes vector i to `fds[i]` (the bus's `enable_interrupts`); returns the routing's
    /// generation, for [`SimIrq::unroute`].
    pub(super) fn route(&self, fds: Vec<Interrupt>) -> u64 {
        let mut g = self.fds();
        g.0 = fds;
        g.1 += 1;
        self.on.store(true, Release);
        g.1
    }

    /// Takes routing `generation` down: no message is sent any more. A newer routing (the port
    /// reopened while queues of the old one lived on) is left alone.
    pub(super) fn unroute(&self, generation: u64) {
        let mut g = self.fds();
        if g.1 != generation {
            return;
        }
        self.on.store(false, Release);
        g.0.clear();
        self.pending.store(0, Relaxed);
    }

    /// A device reset: no message is owed; the routing (a VFIO matter) stays.
    pub(super) fn reset(&self) {
        self.pending.store(0, Relaxed);
        for l in &self.last {
            l.store(0, Relaxed);
        }
    }

    pub(super) fn now_ns(&self) -> u64 {
        // 1 and up, so that 0 can mean "never".
        self.epoch.elapsed().as_nanos() as u64 + 1
    }
}
