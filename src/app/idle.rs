//! Sleeping when idle: adaptive polling for loops over receive queues in interrupt mode.
//!
//! A loop polls while its bursts bring frames (no interrupt is ever raised then: the queues'
//! vectors stay masked), counts the rounds that brought nothing, and after
//! [`IdlePolicy::idle_polls`] of them in a row sleeps on its queues' interrupts until a frame
//! arrives or [`IdlePolicy::max_sleep`] passes (so that it still sees a stop request and prints
//! its status), then polls again. This is DPDK l3fwd-power's poll-then-sleep loop, and the shape
//! of Linux's NAPI: interrupts only to end an idle period, polling while there is work.
//!
//! The sleep itself is [`RxQueue::arm_interrupt`] on every queue (which looks at each ring once
//! more after unmasking, so a frame that landed after the last empty poll is never slept on),
//! a wait on all their eventfds at once, and [`RxQueue::disarm_interrupt`].

use std::time::Duration;

use crate::device::RxQueue;
use crate::error::Result;
use crate::platform::irq::{wait_any, Interrupt};

/// When an idle loop sleeps, and for how long at most.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdlePolicy {
    /// Rounds in a row with no frame on any queue before the loop sleeps. Larger: fewer
    /// sleeps (and their wake-up latency) under sparse traffic, more polling before sleeping.
    pub idle_polls: u32,
    /// The longest single sleep: how late the loop may notice a stop request.
    pub max_sleep: Duration,
}

impl Default for IdlePolicy {
    /// 256 empty rounds (a few tens of microseconds of polling), sleeps of at most 100 ms.
    fn default() -> Self {
        IdlePolicy {
            idle_polls: 256,
            max_sleep: Duration::from_millis(100),
        }
    }
}

/// What an idle loop did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct IdleStats {
    /// Times it slept (or tried to: frames already waiting end a sleep before it starts).
    pub sleeps: u64,
    /// Sleeps ended by an interrupt or by frames found on arming, not by the time limit.
    pub wakeups: u64,
}

/// The idle counter of one polling loop.
#[derive(Debug)]
pub struct Idle {
    policy: IdlePolicy,
    empty: u32,
    stats: IdleStats,
}

impl Idle {
    /// A loop that sleeps as `policy` says.
    pub fn new(policy: IdlePolicy) -> Idle {
        Idle {
            policy,
            empty: 0,
            stats: IdleStats::default(),
        }
    }

    /// After one round over the loop's queues, which received `got` frames in all: whether the
    /// loop should [`sleep`](Idle::sleep) now.
    pub fn after_round(&mut self, got: usize) -> bool {
        if got > 0 {
            self.empty = 0;
            return false;
        }
        self.empty = self.empty.saturating_add(1);
        self.empty >= self.policy.idle_polls
    }

    /// Sleeps on the interrupts of `queues` until one of them has frames or the policy's
    /// longest sleep passes; returns whether frames arrived (or were already there). The
    /// queues are polled again afterwards (their interrupts disarmed).
    pub fn sleep(&mut self, queues: &mut [&mut dyn RxQueue]) -> Result<bool> {
        self.empty = 0;
        self.stats.sleeps += 1;
        let armed = arm_all(queues);
        let ready = match armed {
            Ok(true) => Ok(true),
            Ok(false) => {
                let irqs: Vec<Interrupt> = queues
                    .iter()
                    .filter_map(|q| q.interrupt().cloned())
                    .collect();
                wait_any(&irqs, self.policy.max_sleep)
            }
            Err(e) => Err(e),
        };
        for q in queues.iter_mut() {
            q.disarm_interrupt();
        }
        if let Ok(true) = ready {
            self.stats.wakeups += 1;
        }
        ready
    }

    /// What the loop did so far.
    pub fn stats(&self) -> IdleStats {
        self.stats
    }
}

/// Arms every queue (all of them, even after one reported frames, so that disarming all is
/// right); whether any had frames waiting.
fn arm_all(queues: &mut [&mut dyn RxQueue]) -> Result<bool> {
    let mut ready = false;
    for q in queues.iter_mut() {
        ready |= q.arm_interrupt()?;
    }
    Ok(ready)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{QueueError, QueueStats};
    use crate::platform::dma::{IdentityMapper, Packet, Pool, PoolConfig};
    use std::sync::Arc;
    use std::time::Instant;

    /// A queue whose "device" is a test: frames are a counter, the interrupt a real eventfd
    /// signalled only while armed, as the chips do (the cause is raised while masked, the
    /// message sent only when unmasked).
    struct FakeRx {
        pool: Pool,
        frames: usize,
        armed: bool,
        irq: Interrupt,
        log: Vec<&'static str>,
    }

    impl FakeRx {
        fn new() -> FakeRx {
            FakeRx {
                pool: Pool::new(PoolConfig::default(), Arc::new(IdentityMapper)).unwrap(),
                frames: 0,
                armed: false,
                irq: Interrupt::new(0).unwrap(),
                log: Vec::new(),
            }
        }
    }

    impl RxQueue for FakeRx {
        fn rx_burst(&mut self, _: &mut Vec<Packet>, _: usize) -> Result<usize, QueueError> {
            Ok(std::mem::take(&mut self.frames))
        }
        fn stats(&self) -> QueueStats {
            QueueStats::default()
        }
        fn pool(&self) -> &Pool {
            &self.pool
        }
        fn interrupt(&self) -> Option<&Interrupt> {
            Some(&self.irq)
        }
        fn arm_interrupt(&mut self) -> Result<bool> {
            self.armed = true;
            self.log.push("arm");
            Ok(self.frames > 0)
        }
        fn disarm_interrupt(&mut self) {
            self.armed = false;
            self.log.push("disarm");
        }
    }

    #[test]
    fn it_sleeps_only_after_enough_empty_rounds() {
        let mut idle = Idle::new(IdlePolicy {
            idle_polls: 3,
            max_sleep: Duration::from_millis(10),
        });
        assert!(!idle.after_round(0));
        assert!(!idle.after_round(0));
        assert!(
            !idle.after_round(5),
            "a round with frames starts the count again"
        );
        assert!(!idle.after_round(0));
        assert!(!idle.after_round(0));
        assert!(idle.after_round(0));
    }

    #[test]
    fn a_frame_that_landed_before_arming_is_not_slept_on() {
        // The classic race: the frame arrives after the last empty poll, before the unmask.
        let mut q = FakeRx::new();
        q.frames = 1;
        let mut idle = Idle::new(IdlePolicy {
            idle_polls: 1,
            max_sleep: Duration::from_secs(30),
        });
        let t = Instant::now();
        assert!(idle.sleep(&mut [&mut q]).unwrap());
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "it slept on a waiting frame"
        );
        assert_eq!(q.log, ["arm", "disarm"]);
        assert!(!q.armed);
        assert_eq!(
            idle.stats(),
            IdleStats {
                sleeps: 1,
                wakeups: 1
            }
        );
    }

    #[test]
    fn an_interrupt_wakes_it_and_the_time_limit_ends_a_quiet_sleep() {
        let mut a = FakeRx::new();
        let mut b = FakeRx::new();
        let mut idle = Idle::new(IdlePolicy {
            idle_polls: 1,
            max_sleep: Duration::from_millis(30),
        });
        // Quiet: the sleep lasts its limit and reports nothing.
        let t = Instant::now();
        assert!(!idle.sleep(&mut [&mut a, &mut b]).unwrap());
        assert!(t.elapsed() >= Duration::from_millis(30));
        // The second queue's interrupt, from another thread, during a long sleep.
        let irq = b.irq.clone();
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            irq.trigger().unwrap();
        });
        idle.policy.max_sleep = Duration::from_secs(30);
        let t = Instant::now();
        assert!(idle.sleep(&mut [&mut a, &mut b]).unwrap());
        assert!(t.elapsed() < Duration::from_secs(10));
        h.join().unwrap();
        assert!(!a.armed && !b.armed, "both disarmed after the sleep");
        assert_eq!(
            idle.stats(),
            IdleStats {
                sleeps: 2,
                wakeups: 1
            }
        );
    }
}
