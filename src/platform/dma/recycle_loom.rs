//! The cross-thread buffer return under the loom model checker: every interleaving (up to a
//! preemption bound) of two and three threads that take buffers, give them back on other
//! threads (their caches overflowing home, and flushed when the threads exit) and drop the
//! pool's handles. Checked in each: the pool is freed exactly once; when it is freed, home
//! holds every buffer exactly once (none lost, none twice); and the free happens after every
//! use of the pool by a thread that held its buffers or a handle (a loom `UnsafeCell` the
//! users read and the free writes: loom reports a free not ordered after a read).
//!
//! Run with `scripts/loom` (`RUSTFLAGS="--cfg loom" cargo test --release --lib loom`); the
//! normal build compiles none of this.

use super::*;
use loom::cell::UnsafeCell;
use loom::sync::atomic::AtomicUsize;
use loom::sync::Arc;

/// Buffers in the fake pool: a quarter of them is the per-thread cache limit (1), so every
/// give from a second buffer on goes home, the slow path under test.
const BUFFERS: u32 = 4;

/// A pool reduced to its home, the memory its users touch, and a count of its frees.
struct Fake {
    home: Home,
    memory: UnsafeCell<u64>,
    frees: Arc<AtomicUsize>,
}

/// # Safety
/// `key` is a `Fake` made by `fake` that nothing refers to any more.
unsafe fn free_fake(key: NonNull<()>) {
    // SAFETY: as the caller guarantees.
    let f = unsafe { Box::from_raw(key.cast::<Fake>().as_ptr()) };
    // Every buffer is home, once.
    let mut offs = Vec::new();
    while let Some(b) = f.home.batches.pop() {
        offs.extend_from_slice(&b.offs[..b.len]);
    }
    offs.sort_unstable();
    assert_eq!(offs, (0..BUFFERS).collect::<Vec<_>>(), "home at the free");
    // The free writes the memory: loom fails the run if a user's read is not ordered before.
    // SAFETY: loom's cell: a write, checked against every user's read.
    f.memory.with_mut(|m| unsafe { *m = u64::MAX });
    f.frees.fetch_add(1, Ordering::Relaxed);
}

/// A fake pool with one handle, and its count of frees.
fn fake() -> (PoolRef, Arc<AtomicUsize>) {
    let frees = Arc::new(AtomicUsize::new(0));
    let stack: Vec<u32> = (0..BUFFERS).rev().collect();
    let ptr = NonNull::from(Box::leak(Box::new(Fake {
        home: Home::new(&stack),
        memory: UnsafeCell::new(0),
        frees: frees.clone(),
    })));
    // SAFETY: just made, alive.
    let home = NonNull::from(unsafe { &ptr.as_ref().home });
    let p = PoolRef {
        key: ptr.cast(),
        home,
        free: free_fake,
    };
    (p, frees)
}

/// A use of the pool's memory by a thread that holds a handle or buffers of it.
fn touch(p: PoolRef) {
    // SAFETY: the caller holds a handle or buffers, which keep the fake allocated.
    let f = unsafe { p.key.cast::<Fake>().as_ref() };
    f.memory.with(|m| {
        // SAFETY: loom's cell: a read, checked against the free's write.
        assert_ne!(unsafe { *m }, u64::MAX, "the pool was freed while in use")
    });
}

/// A pool reference that crosses loom threads (each test keeps the fake alive meanwhile).
#[derive(Clone, Copy)]
struct Sendable(PoolRef);
// SAFETY: the fake's home is Sync (loom atomics and a loom mutex), and each thread holds a
// handle or buffers while it uses the reference.
unsafe impl Send for Sendable {}

impl Sendable {
    /// (A method, so that a closure captures the whole `Sendable`, not its field.)
    fn get(self) -> PoolRef {
        self.0
    }
}

/// Takes `n` buffers straight from home (the ring set-up path: nothing left in this thread's
/// cache, so the model's main thread holds none there at its end).
fn take_home(p: PoolRef, n: usize) -> Vec<u32> {
    let mut v = Vec::new();
    // SAFETY: the caller holds a handle.
    let got = unsafe { take_uncached(p, n, |run| v.extend(run.iter().rev())) };
    assert_eq!(got, n);
    v
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    // Bounded preemptions keep the three-thread models to seconds (loom's own advice: most
    // bugs need two or three); every schedule within the bound is explored.
    b.preemption_bound = Some(3);
    crate::platform::loom_threads::check(b, f);
}

/// Two threads: a transmit stage returns buffers it was handed (its cache overflows home, its
/// exit flushes the rest) while the allocating thread drops the last handle. Whichever side
/// brings the count to zero frees the pool, once, after the other is done with it.
#[test]
fn loom_two_threads_return_and_last_handle() {
    model(|| {
        let (p, frees) = fake();
        let bufs = take_home(p, 2);
        let s = Sendable(p);
        let t = crate::platform::loom_threads::spawn(move || {
            let p = s.get();
            touch(p);
            // SAFETY: the buffers are this thread's alone, of pool `p`.
            unsafe { give(p, &bufs, &[]) };
        });
        touch(p);
        // SAFETY: the main thread gives up its (only) handle and does not use `p` again.
        unsafe { drop_handle(p) };
        t.join().unwrap();
        assert_eq!(frees.load(Ordering::Relaxed), 1, "freed exactly once");
    });
}

/// Three threads: one returns buffers from its cache home, another takes buffers (popping a
/// batch home got, counting them away again) and gives them back before dropping its own
/// handle, and the main thread drops the first handle. No buffer is lost or doubled (checked
/// at the free), and the pool is freed exactly once, after every use.
#[test]
fn loom_three_threads_return_take_and_drop_handles() {
    model(|| {
        let (p, frees) = fake();
        let bufs = take_home(p, 2);
        // SAFETY: the main thread holds a handle; this one is the taker's.
        unsafe { p.home.as_ref() }.add_handle();
        let s = Sendable(p);
        let giver = crate::platform::loom_threads::spawn(move || {
            let p = s.get();
            touch(p);
            // SAFETY: the buffers are this thread's alone, of pool `p`.
            unsafe { give(p, &bufs, &[]) };
        });
        let taker = crate::platform::loom_threads::spawn(move || {
            let p = s.get();
            let mut got = Vec::new();
            // SAFETY: this thread holds a handle (added above).
            unsafe { take(p, 1, |run| got.extend_from_slice(run)) };
            touch(p);
            // SAFETY: the buffers taken are this thread's alone.
            unsafe { give(p, &got, &[]) };
            // SAFETY: this thread gives up its handle and does not use `p` again.
            unsafe { drop_handle(p) };
        });
        touch(p);
        // SAFETY: the main thread gives up its handle and does not use `p` again.
        unsafe { drop_handle(p) };
        giver.join().unwrap();
        taker.join().unwrap();
        assert_eq!(frees.load(Ordering::Relaxed), 1, "freed exactly once");
    });
}
