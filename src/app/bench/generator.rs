//! The af_packet rig's generator: a thread sending one frame into an af_packet port as fast as
//! the kernel takes it, which a repetition can pause so that draining the receiver's ring times
//! the receiver alone. Its own file, below the rig that holds one (`rig.rs`) and the afp
//! repetitions that use it (`afp.rs`).

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::device::{Port, RxQueue, TxQueue};
use crate::devices::sim::pin_current_thread;
use crate::devices::AnyPort;
use crate::{Error, Result};

/// A thread sending one frame into an af_packet port as fast as the kernel takes it, which
/// can be paused (so that a drain times the receiver alone).
pub(super) struct Generator {
    stop: Arc<AtomicBool>,
    /// Asked to pause, and paused (the thread's answer).
    pause: Arc<(AtomicBool, AtomicBool)>,
    thread: Option<std::thread::JoinHandle<Result<u64>>>,
}

impl Generator {
    /// Starts sending `frame` through `port` (on CPU `cpu`, if given).
    pub(super) fn start(
        mut port: AnyPort,
        frame: Vec<u8>,
        cpu: Option<usize>,
    ) -> Result<Generator> {
        let stop = Arc::new(AtomicBool::new(false));
        let pause = Arc::new((AtomicBool::new(false), AtomicBool::new(false)));
        let (flag, hold) = (stop.clone(), pause.clone());
        let thread = std::thread::spawn(move || -> Result<u64> {
            if let Some(c) = cpu {
                pin_current_thread(c)?;
            }
            let (rx, mut tx) = port.take_queues()?;
            let pool = rx[0].pool().clone();
            let mut batch = Vec::with_capacity(32);
            let mut sent = 0u64;
            while !flag.load(Relaxed) {
                if hold.0.load(Relaxed) {
                    hold.1.store(true, Relaxed);
                    std::thread::sleep(Duration::from_micros(50));
                    continue;
                }
                hold.1.store(false, Relaxed);
                while batch.len() < 32 {
                    let Some(mut p) = pool.alloc() else { break };
                    p.set_data(&frame);
                    batch.push(p);
                }
                sent += tx[0].tx_burst(&mut batch)? as u64;
                if !batch.is_empty() {
                    std::thread::yield_now();
                }
            }
            Ok(sent)
        });
        Ok(Generator {
            stop,
            pause,
            thread: Some(thread),
        })
    }

    /// Pauses (true) or resumes sending; a pause waits (1 s at most) until the thread has
    /// stopped, and 1 ms more for the frames it sent to arrive.
    pub(super) fn hold(&self, on: bool) -> Result<()> {
        self.pause.0.store(on, Relaxed);
        if !on {
            return Ok(());
        }
        let deadline = Instant::now() + Duration::from_secs(1);
        while !self.pause.1.load(Relaxed) {
            if Instant::now() > deadline || self.thread.as_ref().is_none_or(|t| t.is_finished()) {
                return Err(Error::Stalled {
                    stage: "afp bench",
                    what: "the generator thread to pause (it failed, or is not scheduled)",
                    waited_ms: 1000,
                });
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        std::thread::sleep(Duration::from_millis(1));
        Ok(())
    }
}

impl Drop for Generator {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
