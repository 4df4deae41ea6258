//! Forwarding as a two-stage pipeline: receive on the calling thread, transmit on another, with
//! the packets handed over in whole bursts.
//!
//! Appliances split work this way (one core receives, another classifies or transmits), and it
//! is what makes buffers come home from another core: the transmit stage frees what the receive
//! stage allocated, so every buffer takes the pool's slow path (the freeing thread's cache,
//! then home in batches; see `platform::dma::recycle`). `vfio-nic bench` runs it against the
//! same traffic forwarded on one core ([`crate::app::forward`]), where every buffer takes the
//! fast path.
//!
//! [`recycle_pipelined`] isolates the pool's part: the same two stages and hand-off without a
//! device, the buffers freed on the other core or handed back and freed where they were
//! allocated. Its difference is the slow path's cost, not the cost of moving packets between
//! cores, which both sides pay.
//!
//! The hand-off is a bounded lock-free queue of bursts (crossbeam's `ArrayQueue`, one producer
//! and one consumer), with a second queue sending the emptied vectors back, so that nothing is
//! allocated per burst. It holds at most [`IN_FLIGHT`] bursts: size the receive pool for them
//! (README, "Sizing pools"). Every wait has a deadline and fails with what it waited for.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;

use crate::app::forward::{send_or_drop, FwdStats};
use crate::device::{RxQueue, TxQueue};
use crate::error::{Error, Result};
use crate::platform::dma::{Packet, Pool};

/// Bursts in flight between the stages at most.
pub const IN_FLIGHT: usize = 8;
/// How long a stage waits for the other before it gives up.
pub const PATIENCE: Duration = Duration::from_secs(5);

/// The queues between the stages.
struct Handoff {
    full: ArrayQueue<Vec<Packet>>,
    empty: ArrayQueue<Vec<Packet>>,
    /// The first stage is done: the second drains `full` and stops.
    done: AtomicBool,
    /// The second stage stopped (failed or panicked): the first stops too.
    gone: AtomicBool,
}

/// Sets `gone` when the second stage ends, however it ends.
struct Gone<'a>(&'a AtomicBool);

impl Drop for Gone<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

impl Handoff {
    /// Queues for bursts of up to `burst` packets, with every empty vector made now.
    fn new(burst: usize) -> Handoff {
        let h = Handoff {
            full: ArrayQueue::new(IN_FLIGHT),
            empty: ArrayQueue::new(IN_FLIGHT + 1),
            done: AtomicBool::new(false),
            gone: AtomicBool::new(false),
        };
        for _ in 0..IN_FLIGHT + 1 {
            let _ = h.empty.push(Vec::with_capacity(burst));
        }
        h
    }

    /// Runs `first` here and `second` on a new thread (after `setup`), tells the second that
    /// the first is done, and returns both results (a panic of the second resumes here).
    fn run<A, B: Send>(
        &self,
        first: impl FnOnce(&Handoff) -> A,
        second: impl FnOnce(&Handoff) -> Result<B> + Send,
        setup: impl FnOnce() -> Result<()> + Send,
    ) -> (A, Result<B>) {
        std::thread::scope(|s| {
            let t = s.spawn(|| {
                let _gone = Gone(&self.gone);
                setup()?;
                second(self)
            });
            let a = first(self);
            self.done.store(true, Ordering::Release);
            let b = t.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
            (a, b)
        })
    }

    /// The first stage's check while it waits: the second stage is gone, or took too long.
    fn stalled(&self, since: Instant, what: &'static str) -> Result<()> {
        if self.gone.load(Ordering::Acquire) || since.elapsed() > PATIENCE {
            return Err(Error::Stalled {
                stage: "pipeline first stage",
                what,
                waited_ms: since.elapsed().as_millis() as u64,
            });
        }
        Ok(())
    }

    /// An emptied vector from the second stage (first stage).
    fn take_empty(&self) -> Result<Vec<Packet>> {
        let since = Instant::now();
        loop {
            if let Some(v) = self.empty.pop() {
                return Ok(v);
            }
            self.stalled(since, "the second stage to return an emptied burst")?;
            std::hint::spin_loop();
        }
    }

    /// Hands a burst to the second stage (first stage).
    fn hand_over(&self, mut b: Vec<Packet>) -> Result<()> {
        let since = Instant::now();
        while let Err(back) = self.full.push(b) {
            b = back;
            self.stalled(since, "the second stage to take a burst")?;
            std::hint::spin_loop();
        }
        Ok(())
    }

    /// The next burst for the second stage, `None` once the first is done and nothing is
    /// left; `since` is when the last one came.
    fn next_full(&self, since: &mut Instant) -> Result<Option<Vec<Packet>>> {
        loop {
            if let Some(b) = self.full.pop() {
                *since = Instant::now();
                return Ok(Some(b));
            }
            if self.done.load(Ordering::Acquire) && self.full.is_empty() {
                return Ok(None);
            }
            if since.elapsed() > PATIENCE {
                return Err(Error::Stalled {
                    stage: "pipeline second stage",
                    what: "a burst from the first stage",
                    waited_ms: since.elapsed().as_millis() as u64,
                });
            }
            std::hint::spin_loop();
        }
    }
}

/// Forwards `rx` -> `tx` for `dur`: bursts of up to `burst` received here and transmitted on
/// a new thread, which runs `setup` first (to pin itself, say). Returns the counters (`rx` and
/// `empty_polls` of the receive stage, `tx` and `tx_dropped` of the transmit stage) and the
/// time from the start until the transmit stage sent its last packet.
pub fn forward_pipelined<R, T>(
    rx: &mut R,
    tx: &mut T,
    burst: usize,
    dur: Duration,
    setup: impl FnOnce() -> Result<()> + Send,
) -> Result<(FwdStats, Duration)>
where
    R: RxQueue + ?Sized,
    T: TxQueue + ?Sized,
{
    let h = Handoff::new(burst);
    let start = Instant::now();
    let (rx_st, tx_res) = h.run(
        |h| receive_stage(rx, burst, start + dur, h),
        |h| transmit_stage(tx, h),
        setup,
    );
    let (tx_st, end) = tx_res?;
    let mut st = rx_st?;
    st.tx = tx_st.tx;
    st.tx_dropped = tx_st.tx_dropped;
    Ok((st, end.duration_since(start)))
}

/// Receives until `deadline` and hands each burst over.
fn receive_stage<R: RxQueue + ?Sized>(
    rx: &mut R,
    burst: usize,
    deadline: Instant,
    h: &Handoff,
) -> Result<FwdStats> {
    let mut st = FwdStats::default();
    let mut batch = h.take_empty()?;
    let mut polls = 0u32;
    loop {
        // The clock is read every 256 polls, as the one-core loop does.
        polls = polls.wrapping_add(1);
        if polls % 256 == 0 && Instant::now() >= deadline {
            break;
        }
        let n = rx.rx_burst(&mut batch, burst)?;
        if n == 0 {
            st.empty_polls += 1;
            continue;
        }
        st.rx += n as u64;
        let b = std::mem::replace(&mut batch, h.take_empty()?);
        h.hand_over(b)?;
    }
    // (`batch` is empty: a burst that received nothing leaves it so.)
    Ok(st)
}

/// Transmits the bursts handed over until the receive stage is done and nothing is left; frees
/// what the transmitter could not take. Returns its counters and when it finished.
fn transmit_stage<T: TxQueue + ?Sized>(tx: &mut T, h: &Handoff) -> Result<(FwdStats, Instant)> {
    let mut st = FwdStats::default();
    let mut since = Instant::now();
    while let Some(mut batch) = h.next_full(&mut since)? {
        send_or_drop(tx, &mut batch, &mut st)?;
        // Room for it: the receive stage takes one empty vector per burst it pushes.
        let _ = h.empty.push(batch);
    }
    Ok((st, Instant::now()))
}

/// Where [`recycle_pipelined`] frees the buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FreeOn {
    /// The second stage hands each burst back and the first frees it: the pool's fast path.
    Allocating,
    /// The second stage frees each burst: the pool's slow path (cross-thread returns).
    Other,
}

/// The pool's fast and slow paths under a pipeline's traffic, without a device: this thread
/// allocates bursts of `burst` from `pool` and hands them over; a second thread (after
/// `setup`) reads each packet's length, as a transmitter would, and frees the burst or hands
/// it back ([`FreeOn`]). Every burst vector travels both ways in both cases. Returns the
/// packets that went through and the two stages' busy time added up: the clock is read around
/// each burst's work (pool calls and reads), so waits for the other stage are not counted.
/// (Elapsed time would measure the slower stage only, and the two cases split the work
/// differently: handing back makes the first stage do both pool calls.)
pub fn recycle_pipelined(
    pool: &Pool,
    burst: usize,
    dur: Duration,
    free_on: FreeOn,
    setup: impl FnOnce() -> Result<()> + Send,
) -> Result<(u64, Duration)> {
    let h = Handoff::new(burst);
    let start = Instant::now();
    let (deadline, stalled) = (start + dur, start + dur.max(STALL));
    let (first, second) = h.run(
        |h| first_stage(pool, burst, deadline, stalled, h),
        |h| second_stage(h, free_on),
        setup,
    );
    let busy2 = second?;
    let (packets, busy1) = first?;
    // What was handed back last is freed here.
    while let Some(mut v) = h.empty.pop() {
        Pool::free_vec(&mut v);
    }
    Ok((packets, busy1 + busy2))
}

/// How long past its time a timed run that has moved nothing goes on waiting for its first
/// packet, before its caller may call the device (or the run) stuck: the work runs on threads
/// (a pipeline's second stage, a threaded device model), which a loaded machine, or qemu-user
/// as the arm64 stage runs the tests, may not schedule within a short run (the tests time 10
/// to 30 ms). That is a late start, not an empty run, and the time it took is counted. Used
/// here and by the bench's repetitions (`bench::work`); found when a bench repetition on the
/// threaded qm model, and later a 30 ms run here under qemu-aarch64 beside four QEMU guests,
/// moved nothing.
pub(crate) const STALL: Duration = Duration::from_secs(5);

/// Allocates bursts until `deadline` (until `stalled` while nothing has moved), freeing what
/// comes back; returns the packets and the time spent in the pool.
fn first_stage(
    pool: &Pool,
    burst: usize,
    deadline: Instant,
    stalled: Instant,
    h: &Handoff,
) -> Result<(u64, Duration)> {
    let mut packets = 0u64;
    let mut busy = Duration::ZERO;
    loop {
        let mut v = h.take_empty()?;
        let t0 = Instant::now();
        Pool::free_vec(&mut v);
        if t0 >= deadline && (packets > 0 || t0 >= stalled) {
            let _ = h.empty.push(v);
            return Ok((packets, busy));
        }
        packets += pool.alloc_bulk(burst, &mut v) as u64;
        busy += t0.elapsed();
        h.hand_over(v)?;
    }
}

/// Reads every packet handed over and frees it or hands it back; returns the time spent.
fn second_stage(h: &Handoff, free_on: FreeOn) -> Result<Duration> {
    let mut since = Instant::now();
    let mut bytes = 0usize;
    let mut busy = Duration::ZERO;
    while let Some(mut v) = h.next_full(&mut since)? {
        bytes += v.iter().map(Packet::len).sum::<usize>();
        if free_on == FreeOn::Other {
            Pool::free_vec(&mut v);
        }
        busy += since.elapsed();
        let _ = h.empty.push(v);
    }
    std::hint::black_box(bytes);
    Ok(busy)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Port;
    use crate::devices::null::{NullConfig, NullPort};

    #[test]
    fn every_packet_received_is_sent_and_every_buffer_comes_home() {
        let mut a = NullPort::new(0, NullConfig::default()).unwrap();
        let mut b = NullPort::new(1, NullConfig::default()).unwrap();
        let (mut arx, _) = a.take_queues().unwrap();
        let (_, mut btx) = b.take_queues().unwrap();
        let (st, took) = forward_pipelined(
            &mut arx[0],
            &mut btx[0],
            32,
            Duration::from_millis(50),
            || Ok(()),
        )
        .unwrap();
        assert!(st.rx > 0 && took >= Duration::from_millis(50));
        assert_eq!(st.tx + st.tx_dropped, st.rx, "{st:?}");
        let pool = arx[0].pool().clone();
        assert_eq!(
            pool.stats().in_use,
            0,
            "the transmit thread's cache went home when it exited"
        );
    }

    #[test]
    fn the_slow_path_is_taken_only_when_the_other_stage_frees() {
        use crate::platform::dma::{IdentityMapper, PoolConfig};
        let pool = Pool::new(
            PoolConfig {
                buffers: 1024,
                ..PoolConfig::default()
            },
            std::sync::Arc::new(IdentityMapper),
        )
        .unwrap();
        // Bounds that hold however many packets the run moved (a loaded machine moves few):
        // freed by the second stage, every buffer goes home by the slow path (its cache
        // empties when the thread exits); handed back, only what the first stage frees at
        // the end can overflow its cache, at most the bursts in flight then.
        let in_flight = ((IN_FLIGHT + 1) * 32) as u64;
        for free_on in [FreeOn::Allocating, FreeOn::Other] {
            let before = pool.stats().slow_returns;
            let (n, _) =
                recycle_pipelined(&pool, 32, Duration::from_millis(30), free_on, || Ok(()))
                    .unwrap();
            let went_home = pool.stats().slow_returns - before;
            assert!(n > 0, "{free_on:?}: nothing moved");
            match free_on {
                FreeOn::Other => assert!(went_home >= n, "{went_home} of {n} came home"),
                FreeOn::Allocating => {
                    assert!(went_home <= in_flight, "{went_home} of {n} came home")
                }
            }
            assert_eq!(pool.stats().in_use, 0, "{free_on:?}: every buffer is back");
        }
    }

    #[test]
    fn a_failing_transmit_stage_stops_the_receive_stage() {
        let mut a = NullPort::new(0, NullConfig::default()).unwrap();
        let mut b = NullPort::new(1, NullConfig::default()).unwrap();
        let (mut arx, _) = a.take_queues().unwrap();
        let (_, mut btx) = b.take_queues().unwrap();
        let e = forward_pipelined(
            &mut arx[0],
            &mut btx[0],
            32,
            Duration::from_secs(60),
            || Err(Error::InvalidConfig("no such CPU".into())),
        )
        .unwrap_err();
        assert!(
            matches!(e, Error::InvalidConfig(_)),
            "the transmit stage's own error is the one reported: {e}"
        );
    }
}
