//! Where a pool's free buffers wait, and how buffers freed on other threads come home.
//!
//! Linux's page_pool and DPDK's mempool, in Rust's terms:
//! - **Fast path: same-thread recycling.** Each thread keeps, per pool it touched, a stack of
//!   free buffer offsets (its cache). A buffer freed on the thread that allocates from the pool
//!   (a forwarding loop receiving and transmitting on one core) goes onto that stack and comes
//!   off it at the next allocation: no atomic read-modify-write, no lock. The cache is
//!   thread-local, so it is sound by construction: nothing but its own thread can reach it.
//! - **Slow path: cross-thread returns.** A thread that frees more than it allocates (the
//!   transmit stage of a pipeline) lets its cache grow to a limit (a quarter of the pool, at
//!   most [`CACHE_MAX`]), then sends half of it home in batches of [`BATCH`]. Home is a
//!   lock-free queue of batches (crossbeam's `SegQueue`); a thread whose cache runs dry pops a
//!   batch. Per 64 buffers: one push or pop and one counter update, never a lock.
//! - **Why per thread, not per queue.** page_pool's cache belongs to the NAPI context that
//!   allocates, and a free takes the fast path when it runs in that context. Rust code cannot
//!   tell whether it runs in "the allocating queue's context" without an atomic test (queues
//!   move between threads); a thread-local cache needs no test. It is DPDK's per-lcore cache.
//! - **When the memory is freed.** One atomic word counts the pool's handles (high half) and
//!   its buffers away from home (low half: in packets, in rings, or in some thread's cache), so
//!   exactly one thread sees it reach zero, whether the last handle or the last buffer goes
//!   last; that thread frees the pool.
//! - **What it costs.** Buffers in another thread's cache cannot be allocated until they come
//!   home: when that thread's cache overflows, when the thread exits (its cache's destructor
//!   sends everything home), when it frees a buffer of a pool with no handle left, when it
//!   first touches a pool it has no way for (it then sends home the buffers of every pool
//!   whose last handle is gone), or when it calls `Pool::flush_thread_cache`. Size pools for
//!   it (README, "Sizing pools"). A pool whose last handle is gone is freed when its last
//!   buffer is home, so a thread that cached some of its buffers and then idles keeps its
//!   memory until then. Setting up a ring takes its buffers without leaving any in the
//!   setting-up thread's cache ([`take_uncached`]), since rings are often made on one thread
//!   and used on another.
//!
//! Ordering: a batch is pushed before the count of its buffers is taken off (`AcqRel`), and
//! the thread that brings the count to zero has seen every such push (the decrements form one
//! release sequence), so the queue it drops holds every buffer. A batch is popped only by a
//! thread holding a handle (a `Pool`, or a ring that keeps one), so the count cannot reach zero
//! between a pop and the increment that counts its buffers away.

use std::cell::RefCell;
use std::ptr::NonNull;

// The model-checking build (`--cfg loom`, scripts/loom) swaps the atomics, the queue and the
// thread-local cache for loom's, which explore every interleaving of the threads that use
// them (`recycle_loom.rs`); every other build uses the standard and crossbeam ones.
#[cfg(not(loom))]
use crossbeam_queue::SegQueue;
#[cfg(loom)]
use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(loom)]
use loom_queue::SegQueue;
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU64, Ordering};

/// crossbeam's `SegQueue` as the model checker sees a lock-free queue: each push and pop one
/// atomic step (a loom mutex), so that loom explores the orders of the pushes, pops and count
/// updates around them. (crossbeam's own correctness is crossbeam's, checked with loom there.)
#[cfg(loom)]
mod loom_queue {
    use std::collections::VecDeque;

    pub(super) struct SegQueue<T>(loom::sync::Mutex<VecDeque<T>>);

    impl<T> SegQueue<T> {
        pub(super) fn new() -> Self {
            SegQueue(loom::sync::Mutex::new(VecDeque::new()))
        }
        pub(super) fn push(&self, t: T) {
            self.0.lock().unwrap().push_back(t);
        }
        pub(super) fn pop(&self) -> Option<T> {
            self.0.lock().unwrap().pop_front()
        }
    }
}

/// Buffers per batch on the way home.
pub const BATCH: usize = 64;
/// Most buffers of one pool that one thread's cache keeps (DPDK's largest mempool cache is the
/// same, `RTE_MEMPOOL_CACHE_MAX_SIZE`).
pub const CACHE_MAX: usize = 512;
/// Pools one thread's cache holds buffers of at once; one more evicts a pool (sends its
/// buffers home).
const WAYS: usize = 8;

/// One handle in the count word; the low half counts buffers away from home.
const HANDLE: u64 = 1 << 32;

/// Up to [`BATCH`] free buffers on their way home.
struct Batch {
    len: usize,
    offs: [u32; BATCH],
}

/// A pool's home: the free buffers not in any thread's cache, and the count that decides when
/// the pool may be freed.
pub(super) struct Home {
    batches: SegQueue<Batch>,
    /// Handles << 32 | buffers away from home.
    count: AtomicU64,
    alloc_failures: AtomicU64,
    /// Buffers that came home from a thread's cache or a caller (the slow path).
    homecomings: AtomicU64,
    capacity: usize,
    /// Most buffers of this pool a thread's cache keeps.
    cache_limit: usize,
}

impl Home {
    /// A home holding every buffer of `stack` (offsets, the next to hand out last), with one
    /// handle.
    pub(super) fn new(stack: &[u32]) -> Home {
        let home = Home {
            batches: SegQueue::new(),
            count: AtomicU64::new(HANDLE),
            alloc_failures: AtomicU64::new(0),
            homecomings: AtomicU64::new(0),
            capacity: stack.len(),
            cache_limit: (stack.len() / 4).clamp(1, CACHE_MAX),
        };
        push(&home.batches, stack);
        home
    }

    /// Pops one batch onto `stack`; false when home is empty.
    fn pop(&self, stack: &mut Vec<u32>) -> bool {
        let Some(b) = self.batches.pop() else {
            return false;
        };
        self.count.fetch_add(b.len as u64, Ordering::Relaxed);
        stack.extend_from_slice(&b.offs[..b.len]);
        true
    }

    /// Counts a new handle (the caller holds one already). Aborts the process, as `Arc` does,
    /// if the handle count would reach 2^31: only leaked handles (`mem::forget`) get there, and
    /// a count that wrapped would free a pool still in use.
    pub(super) fn add_handle(&self) {
        let before = self.count.fetch_add(HANDLE, Ordering::Relaxed);
        if before >> 32 >= 1 << 31 {
            std::process::abort();
        }
    }

    /// Handles left.
    fn handles(&self) -> u64 {
        self.count.load(Ordering::Relaxed) >> 32
    }

    /// Buffers at home (not in packets, rings or thread caches).
    pub(super) fn at_home(&self) -> usize {
        let away = (self.count.load(Ordering::Relaxed) & (HANDLE - 1)) as usize;
        self.capacity.saturating_sub(away)
    }

    /// Records an allocation that could not be met in full.
    pub(super) fn count_failure(&self) {
        self.alloc_failures.fetch_add(1, Ordering::Relaxed);
    }

    /// Allocations that could not be met in full.
    pub(super) fn failures(&self) -> u64 {
        self.alloc_failures.load(Ordering::Relaxed)
    }

    /// Buffers that came home so far (each time one did).
    pub(super) fn homecomings(&self) -> u64 {
        self.homecomings.load(Ordering::Relaxed)
    }
}

/// Pushes `offs` home in batches, the top of the stack (its end) first, so that the first
/// batch popped holds the buffers that were next in line.
fn push(batches: &SegQueue<Batch>, offs: &[u32]) {
    for chunk in offs.rchunks(BATCH) {
        let mut b = Batch {
            len: chunk.len(),
            offs: [0; BATCH],
        };
        b.offs[..chunk.len()].copy_from_slice(chunk);
        batches.push(b);
    }
}

/// Buffers come home (`a`, then `b`), counted in the slow-path statistics when `slow`. True
/// when that made the count zero (no handle and nothing away): the caller must free the pool.
///
/// A free function over a pointer, not a method: once the count is decremented, another
/// thread may free the pool, so no reference to the whole `Home` (with its plain fields) may
/// live across that; only its atomic and lock-free parts are referenced, the count last.
///
/// # Safety
/// `home` is live when called (the buffers being returned keep it allocated).
unsafe fn arrive(home: NonNull<Home>, a: &[u32], b: &[u32], slow: bool) -> bool {
    let n = (a.len() + b.len()) as u64;
    if n == 0 {
        return false;
    }
    let h = home.as_ptr();
    // SAFETY: live, as the caller guarantees; the fields are reached through the raw pointer,
    // and each is interior-mutable (a lock-free queue, atomics).
    let (batches, homecomings, count) = unsafe {
        (
            &*std::ptr::addr_of!((*h).batches),
            &*std::ptr::addr_of!((*h).homecomings),
            &*std::ptr::addr_of!((*h).count),
        )
    };
    push(batches, a);
    push(batches, b);
    if slow {
        homecomings.fetch_add(n, Ordering::Relaxed);
    }
    let before = count.fetch_sub(n, Ordering::AcqRel);
    debug_assert!(
        before & (HANDLE - 1) >= n,
        "more buffers came home than were away"
    );
    before == n
}

/// A pool as this module sees it: its identity, its home, and how to free it.
#[derive(Clone, Copy)]
pub(super) struct PoolRef {
    /// The pool's shared state (compared, and passed to `free`).
    pub(super) key: NonNull<()>,
    /// Its home, inside the shared state.
    pub(super) home: NonNull<Home>,
    /// Frees the pool `key` names; called once, by whoever brings its count to zero.
    // SAFETY: a function pointer, not a call: each call site states why it holds (the count
    // reached zero there, once in the pool's life; see `Frees::run`).
    pub(super) free: unsafe fn(NonNull<()>),
}

/// Pools whose count an operation brought to zero, freed once the cache is let go (freeing
/// unmaps memory, which may run code that frees buffers and so needs the cache again). A `Vec`,
/// which allocates only when a pool is freed: the fast path pays for an empty one only.
#[derive(Default)]
struct Frees(Vec<PoolRef>);

impl Frees {
    fn add(&mut self, p: Option<PoolRef>) {
        self.0.extend(p);
    }

    fn run(self) {
        for p in self.0 {
            // SAFETY: `arrive` or `drop_handle` returned true for this pool, which happens
            // once in its life: nothing refers to it any more, and we are the one to free it.
            unsafe { (p.free)(p.key) };
        }
    }
}

/// One pool's stack in a thread's cache. An empty way's pool may be gone: it is compared,
/// never dereferenced.
struct Way {
    pool: PoolRef,
    stack: Vec<u32>,
}

/// A thread's cache: a stack of free buffers per pool it touched.
struct Cache {
    ways: Vec<Way>,
    /// The way a pool not yet cached evicts when every way is in use (round robin).
    victim: usize,
    /// The way used last, tried first.
    last: usize,
}

#[cfg(not(loom))]
thread_local! {
    static CACHE: RefCell<Cache> = const {
        RefCell::new(Cache {
            ways: Vec::new(),
            victim: 0,
            last: 0,
        })
    };
}

// A loom thread's cache lives and dies with the loom thread (its destructor sends it home).
#[cfg(loom)]
loom::thread_local! {
    static CACHE: RefCell<Cache> = RefCell::new(Cache {
        ways: Vec::new(),
        victim: 0,
        last: 0,
    });
}

/// Sends all but the top `keep` buffers of `way` home (the oldest, coldest ones: the top was
/// freed last). Returns the pool if that freed its last reference.
fn flush(way: &mut Way, keep: usize) -> Option<PoolRef> {
    let len = way.stack.len();
    if len <= keep {
        return None;
    }
    // SAFETY: the way holds buffers of its pool (more than `keep`), and buffers away from
    // home keep the pool allocated.
    let last = unsafe { arrive(way.pool.home, &way.stack[..len - keep], &[], true) };
    way.stack.drain(..len - keep);
    last.then_some(way.pool)
}

impl Cache {
    /// The way of pool `p`: the one used last (a queue's pool), another one found by its key
    /// (the second pool of a forwarding pair, which alternates with the first), or, for a pool
    /// this cache has no way for, an empty one, a new one or an evicted one.
    #[inline(always)]
    fn way(&mut self, p: PoolRef, frees: &mut Frees) -> &mut Way {
        // A key names one pool's home and free function (both follow from it), so a way
        // whose key matches is that pool's, even when it is empty and was made for an
        // earlier pool at the same address.
        let i = match self.ways.get(self.last) {
            Some(w) if w.pool.key == p.key => self.last,
            _ => match self.ways.iter().position(|w| w.pool.key == p.key) {
                Some(i) => i,
                None => self.new_way(p, frees),
            },
        };
        self.last = i;
        &mut self.ways[i]
    }

    /// A way for a pool this cache has none for. It also sends home the buffers of every pool
    /// whose last handle is gone, so that their memory can go.
    #[cold]
    fn new_way(&mut self, p: PoolRef, frees: &mut Frees) -> usize {
        for w in &mut self.ways {
            // SAFETY: a way with buffers keeps its pool allocated.
            if !w.stack.is_empty() && unsafe { w.pool.home.as_ref() }.handles() == 0 {
                frees.add(flush(w, 0));
            }
        }
        let i = match self.ways.iter().position(|w| w.stack.is_empty()) {
            Some(i) => i,
            None if self.ways.len() < WAYS => {
                self.ways.push(Way {
                    pool: p,
                    stack: Vec::new(),
                });
                self.ways.len() - 1
            }
            None => {
                let i = self.victim;
                self.victim = (i + 1) % WAYS;
                frees.add(flush(&mut self.ways[i], 0));
                i
            }
        };
        self.ways[i].pool = p;
        i
    }
}

impl Drop for Cache {
    /// The thread exits: everything it cached goes home.
    fn drop(&mut self) {
        let mut frees = Vec::new();
        for w in &mut self.ways {
            frees.extend(flush(w, 0));
        }
        for p in frees {
            // SAFETY: as in `Frees::run`.
            unsafe { (p.free)(p.key) };
        }
    }
}

/// Runs `f` on this thread's cache; `None` when it cannot be had (the thread is exiting and
/// its cache is gone, or `f`'s caller already holds it: freeing a pool ran code that freed
/// buffers). The caller then goes home directly.
#[inline(always)]
fn with_cache<R>(f: impl FnOnce(&mut Cache) -> R) -> Option<R> {
    CACHE
        .try_with(|c| c.try_borrow_mut().ok().map(|mut c| f(&mut c)))
        .ok()
        .flatten()
}

#[inline]
/// Gives buffers back (`a`, then `b`): see [`give_with`].
///
/// # Safety
/// `p` names a pool whose buffers `a` and `b` are, owned by the caller and referenced by
/// nothing else; they count as away from home, so the pool is alive during the call.
pub(super) unsafe fn give(p: PoolRef, a: &[u32], b: &[u32]) {
    // SAFETY: as the caller guarantees.
    unsafe {
        give_with(p, a.len() + b.len(), |stack| {
            stack.extend_from_slice(a);
            stack.extend_from_slice(b);
        })
    }
}

#[inline]
/// Gives back the buffers whose offsets `fill` appends to the stack it is handed (at most
/// `max`, for which room is made first): onto this thread's cache, or home when the cache is
/// over its limit, when the pool has no handle left (so that its memory is freed as soon as
/// its last buffer is back), or when the cache cannot be had. The free of a burst: one
/// thread-local look-up, and `fill`'s pass over the packets, with no atomic read-modify-write.
///
/// # Safety
/// Each offset `fill` appends (at most `max`) is a buffer of pool `p` that the caller owns
/// alone; being away from home, they keep the pool alive during the call.
pub(super) unsafe fn give_with(p: PoolRef, max: usize, mut fill: impl FnMut(&mut Vec<u32>)) {
    // SAFETY: the buffers being given keep the pool allocated.
    let home = unsafe { p.home.as_ref() };
    let mut frees = Frees::default();
    let cached = with_cache(|c| {
        let way = c.way(p, &mut frees);
        way.stack.reserve(max);
        fill(&mut way.stack);
        let keep = if home.handles() == 0 {
            0
        } else if way.stack.len() > home.cache_limit {
            home.cache_limit / 2
        } else {
            return;
        };
        frees.add(flush(way, keep));
    });
    if cached.is_none() {
        // `fill` did not run (the closure above runs only when the cache is had).
        let mut offs = Vec::with_capacity(max);
        fill(&mut offs);
        // SAFETY: as above (`home` is not used after this).
        if unsafe { arrive(p.home, &offs, &[], true) } {
            frees.add(Some(p));
        }
    }
    frees.run();
}

/// Gives buffers back straight home, past this thread's cache: for a ring that goes away
/// (its buffers should be where any thread can take them, not in the cache of the thread
/// that happened to drop it).
///
/// # Safety
/// As for [`give`].
pub(super) unsafe fn give_home(p: PoolRef, a: &[u32], b: &[u32]) {
    // SAFETY: as the caller guarantees.
    if unsafe { arrive(p.home, a, b, false) } {
        // SAFETY: the count reached zero here, once in the pool's life.
        unsafe { (p.free)(p.key) };
    }
}

#[inline]
/// Takes up to `n` free buffers of `p`, from this thread's cache refilled from home a batch
/// at a time, passing them to `f` in runs (each run's next buffer to use last: iterate it in
/// reverse for LIFO order). Returns how many were taken; the caller counts a shortfall.
///
/// # Safety
/// `p` names a live pool whose handle the caller holds. The buffers passed to `f` are the
/// caller's from then on (away from home).
pub(super) unsafe fn take(p: PoolRef, n: usize, mut f: impl FnMut(&[u32])) -> usize {
    // SAFETY: the caller's handle keeps the pool allocated.
    let home = unsafe { p.home.as_ref() };
    let mut frees = Frees::default();
    let got = with_cache(|c| take_from(&mut c.way(p, &mut frees).stack, home, n, &mut f));
    // SAFETY: as the caller guarantees.
    let got = got.unwrap_or_else(|| unsafe { take_uncached(p, n, &mut f) });
    frees.run();
    got
}

/// [`take`] for setting up a ring: up to `n` buffers straight from home, the rest of the last
/// batch sent back, so that none is left in this thread's cache (a ring is often made on one
/// thread and used on another, and the maker may never touch the pool again).
///
/// # Safety
/// As for [`take`].
pub(super) unsafe fn take_uncached(p: PoolRef, n: usize, mut f: impl FnMut(&[u32])) -> usize {
    // What this thread caches goes home first, so that a ring as large as the pool can be
    // made again on the thread that dropped the last one.
    // SAFETY: the caller's handle keeps the pool allocated (so the flush cannot free it).
    unsafe { flush_here(p) };
    // SAFETY: as above.
    let home = unsafe { p.home.as_ref() };
    let mut stack = Vec::new();
    let got = take_from(&mut stack, home, n, &mut f);
    // The rest of the last batch goes back; it never left, so it is not a slow-path return.
    // SAFETY: the caller's handle keeps the count above 0.
    unsafe { arrive(p.home, &stack, &[], false) };
    got
}

/// Takes up to `n` buffers off `stack`, refilling it from home.
#[inline(always)]
fn take_from(stack: &mut Vec<u32>, home: &Home, n: usize, f: &mut impl FnMut(&[u32])) -> usize {
    let mut got = 0;
    loop {
        let k = (n - got).min(stack.len());
        if k > 0 {
            let top = stack.len() - k;
            // The run leaves the stack before `f` sees it: should `f` panic, these buffers
            // are lost (leaked), never both in the stack and with the caller.
            // SAFETY: `top <= len`; the elements behind it stay initialised (plain words).
            unsafe { stack.set_len(top) };
            // SAFETY: those `k` initialised words, which nothing writes until `f` returns
            // (the stack is not used meanwhile, and `f` cannot reach it: the cache is borrowed).
            let run = unsafe { std::slice::from_raw_parts(stack.as_ptr().add(top), k) };
            f(run);
            got += k;
        } else if got == n || !home.pop(stack) {
            return got;
        }
    }
}

/// Buffers of `p` in this thread's cache (0 when it cannot be had).
pub(super) fn cached_here(p: PoolRef) -> usize {
    CACHE
        .try_with(|c| {
            c.try_borrow().map_or(0, |c| {
                c.ways
                    .iter()
                    .find(|w| w.pool.key == p.key)
                    .map_or(0, |w| w.stack.len())
            })
        })
        .unwrap_or(0)
}

/// Sends the buffers of `p` in this thread's cache home.
///
/// # Safety
/// `p` names a pool that is live, or that this thread's cache holds no buffers of (then only
/// its key is compared, never dereferenced).
pub(super) unsafe fn flush_here(p: PoolRef) {
    let mut frees = Frees::default();
    with_cache(|c| {
        if let Some(w) = c.ways.iter_mut().find(|w| w.pool.key == p.key) {
            frees.add(flush(w, 0));
        }
    });
    frees.run();
}

/// Drops a handle of `p`; when it was the last, first sends this thread's cached buffers of
/// `p` home, so that a pool used on one thread is freed here and now. Frees the pool when
/// nothing refers to it any more.
///
/// # Safety
/// The caller gives up a handle of `p`, which it must not use afterwards.
pub(super) unsafe fn drop_handle(p: PoolRef) {
    // SAFETY: the handle being dropped keeps the pool allocated up to the decrement.
    let home = unsafe { p.home.as_ref() };
    let before = home.count.fetch_sub(HANDLE, Ordering::AcqRel);
    if before == HANDLE {
        // SAFETY: no handle and no buffer away: nothing refers to the pool, and only the
        // thread making the count zero frees it.
        unsafe { (p.free)(p.key) };
    } else if before >> 32 == 1 {
        // The last handle: buffers are away, maybe some in this thread's cache, which are
        // flushed (the flush frees the pool if they were all that was left). The pool is NOT
        // known to be alive: if this thread caches none of its buffers, another thread may
        // free it as soon as the decrement above is done.
        // SAFETY: `flush_here` is sound anyway: it only compares `p.key` with its ways' keys,
        // and dereferences the pool only through a way that holds buffers of it, which keep
        // it allocated.
        unsafe { flush_here(p) };
    }
}

#[cfg(all(test, loom))]
#[path = "recycle_loom.rs"]
mod loom_tests;

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    /// A pool reduced to its home, and a flag its free function sets.
    struct Fake {
        home: Home,
        freed: Arc<AtomicBool>,
    }

    /// # Safety
    /// `key` is a `Fake` made by `fake` that nothing refers to any more.
    unsafe fn free_fake(key: NonNull<()>) {
        // SAFETY: as the caller guarantees.
        let f = unsafe { Box::from_raw(key.cast::<Fake>().as_ptr()) };
        f.freed.store(true, Ordering::SeqCst);
    }

    /// A fake pool of `n` buffers (offsets 0..n, 0 handed out first) with one handle.
    fn fake(n: u32) -> (PoolRef, Arc<AtomicBool>) {
        let freed = Arc::new(AtomicBool::new(false));
        let stack: Vec<u32> = (0..n).rev().collect();
        let ptr = NonNull::from(Box::leak(Box::new(Fake {
            home: Home::new(&stack),
            freed: freed.clone(),
        })));
        // SAFETY: just made, alive.
        let home = NonNull::from(unsafe { &ptr.as_ref().home });
        let p = PoolRef {
            key: ptr.cast(),
            home,
            free: free_fake,
        };
        (p, freed)
    }

    /// The home of a fake pool the test still holds a handle or a buffer of.
    fn home(p: &PoolRef) -> &Home {
        // SAFETY: the test keeps the fake alive while it calls this.
        unsafe { p.home.as_ref() }
    }

    fn take_n(p: PoolRef, n: usize) -> Vec<u32> {
        let mut v = Vec::new();
        // SAFETY: the test holds the fake's handle.
        unsafe { take(p, n, |run| v.extend(run.iter().rev())) };
        v
    }

    fn give_all(p: PoolRef, v: &[u32]) {
        // SAFETY: buffers the test took from this fake and holds alone.
        unsafe { give(p, v, &[]) };
    }

    /// A pool reference that may cross threads (the test keeps the fake alive).
    #[derive(Clone, Copy)]
    struct Sendable(PoolRef);
    // SAFETY: the fake's home is Sync, and every test keeps a handle or buffers while another
    // thread uses the reference.
    unsafe impl Send for Sendable {}

    impl Sendable {
        /// (A method, so that a closure captures the whole `Sendable`, not its field.)
        fn get(self) -> PoolRef {
            self.0
        }
    }

    #[test]
    fn same_thread_recycling_stays_in_the_cache() {
        let (p, freed) = fake(1024);
        give_all(p, &take_n(p, 96));
        let (count, batches) = (
            home(&p).count.load(Ordering::SeqCst),
            home(&p).batches.len(),
        );
        for _ in 0..1000 {
            let v = take_n(p, 32);
            assert_eq!(v.len(), 32);
            give_all(p, &v);
        }
        assert_eq!(
            home(&p).count.load(Ordering::SeqCst),
            count,
            "no buffer went home or left it"
        );
        assert_eq!(home(&p).batches.len(), batches);
        // SAFETY: the test's one handle.
        unsafe { drop_handle(p) };
        assert!(
            freed.load(Ordering::SeqCst),
            "the last handle sends this thread's cache home, which frees the pool"
        );
    }

    #[test]
    fn the_buffer_freed_last_is_taken_first() {
        let (p, freed) = fake(64);
        let v = take_n(p, 3);
        assert_eq!(v, [0, 1, 2], "the lowest offsets first");
        give_all(p, &v[1..2]);
        assert_eq!(take_n(p, 1), [1]);
        give_all(p, &v);
        // SAFETY: the test's one handle.
        unsafe { drop_handle(p) };
        assert!(freed.load(Ordering::SeqCst), "every buffer is back once");
    }

    #[test]
    fn a_freeing_thread_sends_batches_home_and_the_rest_when_it_exits() {
        let (p, freed) = fake(1024);
        let v = take_n(p, 1000);
        let s = Sendable(p);
        std::thread::spawn(move || {
            let p = s.get();
            for run in v.chunks(32) {
                give_all(p, run);
                assert!(
                    cached_here(p) <= home(&p).cache_limit,
                    "the cache stays within its limit"
                );
            }
        })
        .join()
        .unwrap();
        assert_eq!(
            home(&p).at_home() + cached_here(p),
            1024,
            "the exiting thread's cache went home (the rest of this one's last batch is here)"
        );
        let mut again = take_n(p, 1024);
        again.sort_unstable();
        assert_eq!(again, (0..1024).collect::<Vec<u32>>(), "each buffer once");
        give_all(p, &again);
        // SAFETY: the test's one handle.
        unsafe { drop_handle(p) };
        assert!(freed.load(Ordering::SeqCst));
    }

    #[test]
    fn the_last_handle_or_the_last_buffer_frees_whichever_goes_later() {
        let (p, freed) = fake(64);
        // SAFETY: the test's one handle.
        unsafe { drop_handle(p) };
        assert!(freed.load(Ordering::SeqCst), "nothing was away");

        let (p, freed) = fake(64);
        let v = take_n(p, 10);
        // SAFETY: the test's one handle; the ten buffers keep the fake alive.
        unsafe { drop_handle(p) };
        assert!(!freed.load(Ordering::SeqCst), "ten buffers are out");
        give_all(p, &v[..5]);
        assert!(!freed.load(Ordering::SeqCst), "five buffers are out");
        let s = Sendable(p);
        let rest = v[5..].to_vec();
        std::thread::spawn(move || give_all(s.get(), &rest))
            .join()
            .unwrap();
        assert!(
            freed.load(Ordering::SeqCst),
            "the last buffer came home on another thread"
        );
    }

    #[test]
    fn a_ninth_pool_evicts_one_whose_buffers_go_home() {
        let fakes: Vec<_> = (0..WAYS + 1).map(|_| fake(64)).collect();
        for (p, _) in &fakes {
            give_all(*p, &take_n(*p, 4));
        }
        // SAFETY: each fake is alive (its handle is held).
        let homes: Vec<usize> = fakes
            .iter()
            .map(|(p, _)| home(p).at_home() + cached_here(*p))
            .collect();
        assert!(homes.iter().all(|&n| n == 64), "{homes:?}");
        assert_eq!(home(&fakes[0].0).at_home(), 64, "the first way was evicted");
        for (p, freed) in fakes {
            // SAFETY: the test's handle of each.
            unsafe { drop_handle(p) };
            assert!(freed.load(Ordering::SeqCst));
        }
    }

    #[test]
    fn a_ring_set_up_here_leaves_nothing_in_this_threads_cache() {
        let (p, freed) = fake(1024);
        let mut v = Vec::new();
        // SAFETY: the test's handle.
        let got = unsafe { take_uncached(p, 100, |run| v.extend_from_slice(run)) };
        assert_eq!((got, cached_here(p)), (100, 0));
        assert_eq!(
            home(&p).at_home(),
            924,
            "the rest of the second batch went back"
        );
        give_all(p, &v);
        // SAFETY: the test's handle.
        unsafe { drop_handle(p) };
        assert!(freed.load(Ordering::SeqCst));
    }

    #[test]
    fn touching_a_new_pool_sends_home_the_buffers_of_pools_without_handles() {
        let (a, a_freed) = fake(64);
        give_all(a, &take_n(a, 10));
        assert!(cached_here(a) > 0, "some are cached here");
        let s = Sendable(a);
        // SAFETY: the test's one handle of `a`, given up on another thread, whose cache holds
        // none of its buffers (so they stay in this one's).
        std::thread::spawn(move || unsafe { drop_handle(s.get()) })
            .join()
            .unwrap();
        assert!(
            !a_freed.load(Ordering::SeqCst),
            "its buffers are cached here"
        );
        let (b, b_freed) = fake(64);
        give_all(b, &take_n(b, 1));
        assert!(
            a_freed.load(Ordering::SeqCst),
            "a new way swept the pool without handles"
        );
        // SAFETY: the test's handle of `b`.
        unsafe { drop_handle(b) };
        assert!(b_freed.load(Ordering::SeqCst));
    }

    #[test]
    fn a_panicking_taker_loses_buffers_but_never_doubles_them() {
        let (p, freed) = fake(64);
        let r = std::panic::catch_unwind(|| {
            // SAFETY: the test's handle.
            unsafe { take(p, 8, |_| panic!("taker fails")) }
        });
        assert!(r.is_err());
        let mut rest = take_n(p, 64);
        assert_eq!(rest.len(), 56, "the eight in the panicking run are lost");
        rest.sort_unstable();
        rest.dedup();
        assert_eq!(rest.len(), 56, "and none of the others is handed out twice");
        assert!(rest.iter().all(|&o| o >= 8));
        // The test knows which eight were lost and returns them, so that the fake is freed.
        give_all(p, &rest);
        give_all(p, &(0..8).collect::<Vec<u32>>());
        // SAFETY: the test's one handle.
        unsafe { drop_handle(p) };
        assert!(freed.load(Ordering::SeqCst), "every buffer is back");
    }
}
