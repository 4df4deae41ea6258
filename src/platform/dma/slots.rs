//! The buffers behind a descriptor ring's slots.
//!
//! Why this exists: a ring touches a buffer three times per packet (arm a receive slot with it,
//! hand its frame to the application, take it back after transmit). Moving a whole [`Packet`]
//! (40 bytes) through ring arrays each time cost more than the descriptor work itself, so rings
//! keep one word per buffer and a [`Packet`] exists only while the application holds the frame:
//! - [`RxSlots`]: one buffer per receive slot, all from the queue's pool, kept as the bus
//!   address of its frame (what the descriptor points at and what the packet carries, so that
//!   neither re-arming nor building a packet computes an address), plus a reserve of 4-byte
//!   pool offsets taken from the pool in one operation every few bursts. Harvesting a slot swaps
//!   its buffer for a reserved one and builds the packet directly in the caller's batch.
//! - [`TxSlots`]: a FIFO of the offsets of buffers queued for transmit, in send order, with the
//!   pool each run of them came from; finished buffers go back to their pools a whole run at a
//!   time (one copy), not packet by packet.
//!
//! Ownership: a buffer held here is owned here exactly as a packet owns its buffer, and these
//! types never hand one out, so safe code cannot make two owners of one buffer. The
//! descriptor format stays with the ring, which passes closures that decode a write-back and
//! arm a slot. Both loops keep their bookkeeping in a guard that commits on unwind too, so a
//! panicking closure loses at most buffers (leaked, never doubly owned).
//!
//! Instruction counts shaped the loops (`bench/instructions`): each is a walk over a few arrays
//! with nothing else live and no call inside, so that its values stay in registers.

use std::collections::VecDeque;
use std::ptr::NonNull;
use std::sync::Arc;

use super::memory::DmaMapper;
use super::pool::{domain_of, Meta, Packet, Pool, Shared};
use crate::error::{Error, Result};

/// Most buffers a receive ring keeps in reserve beyond its slots: three bursts of 32, so that
/// a busy queue goes to the pool once every three bursts.
pub const RX_RESERVE: usize = 96;

/// The buffers of a receive ring: one per slot, all from one pool.
pub struct RxSlots {
    pool: Pool,
    shared: NonNull<Shared>,
    /// Bus address of a frame in the buffer at offset 0: the pool's plus the headroom.
    data_iova: u64,
    /// What turns a frame's bus address into a packet's location word (offset in bits 31:0,
    /// headroom in bits 47:32): `(headroom << 32) - data_iova`, wrapping.
    loc_of_dma: u64,
    max_len: u16,
    fast_len: u16,
    /// Bus address of the frame in the buffer armed in each slot: what its descriptor points
    /// at, kept so that neither re-arming nor building a packet has to compute it.
    bufs: Box<[u64]>,
    /// Offsets of buffers taken from the pool for re-arming, used from the top.
    fresh: Vec<u32>,
}

// SAFETY: the offsets are owned data, the pool handle is Send + Sync, and `shared` points to
// the pool that handle keeps alive; nothing here is tied to a thread.
unsafe impl Send for RxSlots {}

/// Commits a harvest (also on unwind): the packets written into the batch's spare capacity
/// become part of it, and the reserved offsets moved into slots leave the reserve.
struct Harvest<'a> {
    fresh: &'a mut Vec<u32>,
    batch: &'a mut Vec<Packet>,
    batch_len: usize,
    /// Where the run's part of the reserve starts (its top `n` entries).
    base: usize,
    used: usize,
}

impl Drop for Harvest<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        // SAFETY: the `used` elements behind `batch_len` were initialised with packets before
        // `used` counted them, and capacity for them was reserved.
        unsafe { self.batch.set_len(self.batch_len + self.used) };
        // The run used the reserve's top entries from `base` on: keep those it did not use
        // (none when the whole run was harvested, the usual case).
        let end = self.fresh.len();
        let unused = self.base + self.used;
        if unused < end {
            self.fresh.copy_within(unused.., self.base);
        }
        self.fresh.truncate(end - self.used);
    }
}

impl RxSlots {
    /// Takes `n` buffers of `pool` for `n` slots.
    pub fn new(pool: Pool, n: usize) -> Result<RxSlots> {
        let s = pool.shared();
        let data_iova = s.iova + u64::from(s.headroom);
        let mut bufs = Vec::with_capacity(n);
        // Taken past this thread's cache: the ring may be used on another thread.
        // SAFETY: the handle `pool` keeps the pool alive; the buffers taken are the ring's.
        let got = unsafe {
            Shared::take_uncached(pool.shared_ptr(), n, |run| {
                bufs.extend(run.iter().rev().map(|&o| data_iova + u64::from(o)))
            })
        };
        if got < n {
            let offs: Vec<u32> = bufs.iter().map(|&a| (a - data_iova) as u32).collect();
            // SAFETY: the buffers just taken, owned by nothing else.
            unsafe { Shared::release_home(pool.shared_ptr(), &offs, &[]) };
            return Err(Error::InvalidConfig(format!(
                "the receive pool has {got} free buffers at home, fewer than the ring's {n} slots; give it more buffers (or, if other threads hold freed ones in their caches, have them call Pool::flush_thread_cache)"
            )));
        }
        let max_len = (s.buf_size - usize::from(s.headroom)).min(usize::from(u16::MAX)) as u16;
        let fast_len = ((1u32 << (31 - (u32::from(max_len) + 1).leading_zeros())) - 1) as u16;
        Ok(RxSlots {
            shared: pool.shared_ptr(),
            data_iova,
            loc_of_dma: (u64::from(s.headroom) << 32).wrapping_sub(data_iova),
            max_len,
            fast_len,
            bufs: bufs.into_boxed_slice(),
            fresh: Vec::with_capacity(RX_RESERVE),
            pool,
        })
    }

    /// Number of slots.
    pub fn len(&self) -> usize {
        self.bufs.len()
    }

    /// Never empty (a ring has slots); for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        self.bufs.is_empty()
    }

    /// The pool the buffers come from.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The longest frame a buffer takes behind its headroom ([`take`](Self::take) delivers
    /// frames up to this length).
    pub fn max_len(&self) -> u16 {
        self.max_len
    }

    /// Bus address of the frame start in slot `i`'s buffer: what its descriptor points at.
    pub fn data_iova(&self, i: usize) -> u64 {
        self.bufs[i]
    }

    /// Buffers in reserve.
    #[inline(always)]
    pub fn reserved(&self) -> usize {
        self.fresh.len()
    }

    /// Whether a slot could be harvested now (a reserved or free buffer exists).
    pub fn can_refill(&self) -> bool {
        !self.fresh.is_empty() || self.pool.stats().free > 0
    }

    /// Tops the reserve up towards `target` buffers (at most [`RX_RESERVE`]) in one pool
    /// operation, when it holds fewer than `need`; returns the reserve's size. A pool that
    /// cannot give `need` counts an allocation failure. (Topping up beyond what a burst needs
    /// halves the pool round trips of a busy queue.)
    pub fn reserve(&mut self, need: usize, target: usize) -> usize {
        let need = need.min(RX_RESERVE);
        let want = target.clamp(need, RX_RESERVE);
        let have = self.fresh.len();
        if have < need {
            let fresh = &mut self.fresh;
            // SAFETY: the ring's handle keeps the pool alive; the buffers taken are the ring's.
            let got = unsafe {
                Shared::take(self.shared, want - have, |run| fresh.extend_from_slice(run))
            };
            if have + got < need {
                self.pool.shared().home.count_failure();
            }
        }
        self.fresh.len()
    }

    /// The slow path's harvest of one slot `i`, for frames up to [`max_len`](Self::max_len):
    /// swaps its buffer for a reserved one (re-armed through `arm(data_iova)`) and appends the
    /// frame to `batch` as a packet. Returns false, changing nothing, when the frame is too
    /// long or the reserve is empty.
    pub fn take(
        &mut self,
        i: usize,
        len: u16,
        meta: Meta,
        batch: &mut Vec<Packet>,
        arm: impl FnOnce(u64),
    ) -> bool {
        self.take_one(i, len, meta, arm)
            .map(|p| batch.push(p))
            .is_some()
    }

    /// [`take`](Self::take) returning the packet instead of appending it to a batch: for a
    /// segment of a frame that spans slots, which joins a chain.
    pub fn take_one(
        &mut self,
        i: usize,
        len: u16,
        meta: Meta,
        arm: impl FnOnce(u64),
    ) -> Option<Packet> {
        if len > self.max_len || i >= self.bufs.len() {
            return None;
        }
        let new = self.data_iova + u64::from(self.fresh.pop()?);
        arm(new);
        let old = std::mem::replace(&mut self.bufs[i], new);
        let loc = old.wrapping_add(self.loc_of_dma) | u64::from(len) << 48;
        // SAFETY: as in `harvest`: `old` passes from the slot to the packet alone, and `len`
        // fits behind the headroom (checked above).
        Some(unsafe { Packet::from_dma(self.shared, old, loc, meta) })
    }

    /// The longest frame [`harvest`](Self::harvest) takes as is: the largest `2^k - 1` that
    /// fits behind the headroom. A decoder can test it with a mask, and longer frames (which
    /// standard frames never are) go to its careful path.
    pub fn fast_len(&self) -> u16 {
        self.fast_len
    }

    /// Harvests the slots of `descs`, the descriptors of slots `start..start + descs.len()`
    /// (a run that does not wrap, no longer than [`reserved`](Self::reserved)). For each in
    /// turn, `decode(desc)` reads the write-back and returns the frame's length and metadata,
    /// or `None` to stop there (not done yet, or anything unusual, which the caller handles on
    /// its slow path). The length must not exceed [`fast_len`](Self::fast_len); it is masked to
    /// it, so that no decoder can make a packet reach past its buffer. The slot is re-armed
    /// with a reserved buffer through `arm(desc, data_iova)`, and its old buffer is appended
    /// to `batch` as a packet. Returns how many slots were harvested and their frames' bytes.
    ///
    /// # Panics
    /// If the run exceeds the slots or the reserve.
    #[inline(always)]
    pub fn harvest<D>(
        &mut self,
        start: usize,
        descs: &[D],
        batch: &mut Vec<Packet>,
        mut decode: impl FnMut(&D) -> Option<(u16, Meta)>,
        mut arm: impl FnMut(&D, u64),
    ) -> (usize, u64) {
        let n = descs.len();
        assert!(n <= self.fresh.len(), "harvest beyond the reserve");
        let bufs = &mut self.bufs[start..start + n];
        batch.reserve(n);
        let (shared, loc_of_dma, len_mask) = (self.shared, self.loc_of_dma, self.fast_len);
        let data_iova = self.data_iova;
        let base = self.fresh.len() - n;
        let mut g = Harvest {
            batch_len: batch.len(),
            fresh: &mut self.fresh,
            batch,
            base,
            used: 0,
        };
        // SAFETY: `base + n == fresh.len()`: the reserve's top `n` entries.
        let fresh = unsafe { g.fresh.as_ptr().add(base) };
        // SAFETY: `batch_len + n <= capacity` after the reserve above: the `n` spare slots.
        let out = unsafe { g.batch.as_mut_ptr().add(g.batch_len) };
        let mut bytes = 0u64;
        for k in 0..n {
            // SAFETY: `k < n == descs.len()`.
            let d = unsafe { descs.get_unchecked(k) };
            let Some((len, meta)) = decode(d) else {
                break;
            };
            debug_assert!(
                len <= len_mask,
                "decoder passed a frame longer than fast_len"
            );
            let len = len & len_mask;
            bytes += u64::from(len);
            // SAFETY: `k < n`, within the reserve's top `n` entries.
            let new = data_iova + u64::from(unsafe { *fresh.add(k) });
            arm(d, new);
            // SAFETY: `k < n == bufs.len()`.
            let old = std::mem::replace(unsafe { bufs.get_unchecked_mut(k) }, new);
            // Offset and headroom from the frame's bus address: one add (`loc_of_dma`).
            let loc = old.wrapping_add(loc_of_dma) | u64::from(len) << 48;
            // SAFETY: `old` was this slot's buffer, owned by the slot alone until now and
            // handed to the new packet alone (the slot holds `new` from here on); the length
            // fits behind the headroom (masked above). `out + k` is a reserved spare slot.
            unsafe { out.add(k).write(Packet::from_dma(shared, old, loc, meta)) };
            g.used = k + 1;
        }
        (g.used, bytes)
    }
}

impl Drop for RxSlots {
    /// Returns every buffer to the pool. The ring's owner stopped the queue first, so the
    /// device no longer writes them.
    fn drop(&mut self) {
        let slots: Vec<u32> = self
            .bufs
            .iter()
            .map(|&a| (a - self.data_iova) as u32)
            .collect();
        // Straight home: the ring may be dropped on a thread that never uses the pool again.
        // SAFETY: the pool handle in `self` keeps `shared` alive, and the offsets are buffers
        // this ring owns and nothing references any more.
        unsafe { Shared::release_home(self.shared, &slots, &self.fresh) };
    }
}

impl std::fmt::Debug for RxSlots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RxSlots")
            .field("slots", &self.bufs.len())
            .field("reserved", &self.fresh.len())
            .finish()
    }
}

/// The buffers a transmit ring has queued, in send order.
pub struct TxSlots {
    fifo: Box<[u32]>,
    mask: usize,
    /// Position (free-running) of the oldest queued buffer.
    head: usize,
    /// Position of the next buffer queued.
    tail: usize,
    /// Runs of buffers from one pool, oldest first: the pool and the position of the run's
    /// first buffer. The last run is the current one and stays when it empties.
    runs: Runs,
    /// The pool of the last run (dangling before the first), kept apart from `runs` so that
    /// checking a packet against it is one compare.
    cur: NonNull<Shared>,
    /// Buffers mapped in the device's domain for packets of pools it cannot reach; kept
    /// here, out of the ring's hot fields.
    bounce: Box<Bounce>,
}

/// The bounce pool of a transmit queue: made at the first packet the device cannot reach, one
/// buffer per descriptor (so it never runs dry while the ring has room), as large as that
/// packet's pool's buffers. A pool that could not be made is not retried for every packet:
/// the error is kept and returned (and logged once).
struct Bounce {
    mapper: Arc<dyn DmaMapper>,
    pool: Option<Pool>,
    failed: Option<String>,
}

// SAFETY: the offsets are owned buffers of the pools named in `runs`, which stay alive while
// any of their buffers is out; the pools' shared state is synchronized.
unsafe impl Send for TxSlots {}

/// Runs of buffers from one pool, oldest first: the pool and the position of the run's first
/// buffer; the last run is the current one and stays when it empties. With them the DMA
/// domain of the device (see [`domain_of`]): a packet of a pool from another domain ends a
/// send before it, checked only when the pool changes (a new run), never per packet.
struct Runs {
    q: VecDeque<(NonNull<Shared>, usize)>,
    domain: usize,
    /// A handle of the current pool (`cur`), taken when it became current: it keeps that pool
    /// allocated, so its address cannot be reused by a new pool (of another DMA domain, say)
    /// that would then pass the one-compare check as the current one. Taken only when the pool
    /// changes, so a queue fed from one pool pays for it once.
    cur_pool: Option<Pool>,
}

/// Commits a send (also on unwind): the FIFO's new tail, and the first `taken` packets leave
/// the batch without being dropped, since their buffers are now queued.
struct Taken<'a> {
    batch: &'a mut Vec<Packet>,
    taken: usize,
    fifo_tail: &'a mut usize,
}

impl Drop for Taken<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        *self.fifo_tail = self.fifo_tail.wrapping_add(self.taken);
        let len = self.batch.len();
        let rest = len - self.taken;
        // SAFETY: the first `taken` packets are owned by the FIFO now; moving the remaining
        // `rest` to the front (overlapping copy) and shortening the vector forgets them
        // without dropping them.
        unsafe {
            let p = self.batch.as_mut_ptr();
            if rest > 0 {
                std::ptr::copy(p.add(self.taken), p, rest);
            }
            self.batch.set_len(rest);
        }
    }
}

impl TxSlots {
    /// A FIFO for up to `capacity` buffers (rounded up to a power of two) of a device that
    /// sees DMA domain `domain` (the mapper its descriptors were mapped through): packets of
    /// pools mapped elsewhere are refused by [`TxSlots::send`].
    pub fn new(capacity: usize, domain: &Arc<dyn DmaMapper>) -> TxSlots {
        let cap = capacity.next_power_of_two();
        TxSlots {
            fifo: vec![0; cap].into_boxed_slice(),
            mask: cap - 1,
            head: 0,
            tail: 0,
            runs: Runs {
                q: VecDeque::with_capacity(4),
                domain: domain_of(domain),
                cur_pool: None,
            },
            cur: NonNull::dangling(),
            bounce: Box::new(Bounce {
                mapper: domain.clone(),
                pool: None,
                failed: None,
            }),
        }
    }

    /// A buffer of the bounce pool (made now, with `buffers` buffers of `buf_size` bytes, if
    /// this is the first): for a copy of a packet the device cannot reach. `None` while every
    /// bounce buffer is in flight.
    pub(crate) fn bounce_buffer(
        &mut self,
        buffers: usize,
        buf_size: usize,
    ) -> Result<Option<Packet>> {
        let b = &mut *self.bounce;
        if let Some(why) = &b.failed {
            return Err(Error::DmaAlloc {
                bytes: buffers * buf_size,
                reason: why.clone(),
            });
        }
        if b.pool.is_none() {
            let cfg = super::PoolConfig {
                buffers,
                buf_size: buf_size
                    .next_multiple_of(128)
                    .clamp(2048, super::MAX_BUF_SIZE),
                ..super::PoolConfig::default()
            };
            match Pool::new(cfg, b.mapper.clone()) {
                Ok(p) => {
                    tracing::info!(
                        buffers,
                        mapper = %b.mapper.describe(),
                        "transmit: packets from a pool the device cannot reach are copied (bounce pool made)"
                    );
                    b.pool = Some(p);
                }
                Err(e) => {
                    let why = format!(
                        "no bounce pool for packets the device cannot reach ({e}); they are dropped: send from a pool of this port's DMA domain instead"
                    );
                    tracing::error!("{why}");
                    b.failed = Some(why);
                    return Err(e);
                }
            }
        }
        Ok(b.pool.as_ref().and_then(Pool::alloc))
    }

    /// Replaces the packet at the front of `batch`, whose pool the device cannot reach, by a
    /// copy in a bounce buffer (the bounce pool made now, with `buffers` buffers, if this is
    /// the first). Returns false when every bounce buffer is in flight (the caller stops there,
    /// as on a full ring), and an error when no bounce pool can be made or the frame does not
    /// fit one of its buffers.
    pub(crate) fn bounce_front(&mut self, batch: &mut [Packet], buffers: usize) -> Result<bool> {
        if batch[0].is_chained() {
            return self.bounce_chain(batch, buffers);
        }
        let Some(mut q) = self.bounce_buffer(buffers, batch[0].buf_size())? else {
            return Ok(false);
        };
        if !q.set_data(batch[0].data()) {
            return Err(Error::InvalidConfig(format!(
                "a {}-byte frame from a pool the device cannot reach does not fit a {}-byte bounce buffer; send it from a pool of this port (or of another VFIO port of the process), which needs no copy",
                batch[0].len(),
                q.capacity()
            )));
        }
        q.meta = batch[0].meta;
        q.set_tx_offload(batch[0].tx_offload());
        batch[0] = q;
        Ok(true)
    }

    /// [`TxSlots::bounce_front`] of a chained frame: each segment copied into a bounce buffer
    /// of its own, chained as the original was.
    #[cold]
    fn bounce_chain(&mut self, batch: &mut [Packet], buffers: usize) -> Result<bool> {
        let size = batch[0].buf_size();
        let mut copy: Option<Packet> = None;
        for s in batch[0].segments() {
            let Some(mut q) = self.bounce_buffer(buffers, size)? else {
                return Ok(false);
            };
            if !q.set_data(s) {
                return Err(Error::InvalidConfig(format!(
                    "a {}-byte segment from a pool the device cannot reach does not fit a {}-byte bounce buffer; send it from a pool of this port",
                    s.len(),
                    q.capacity()
                )));
            }
            match &mut copy {
                Some(head) => head.push_segment(q),
                None => copy = Some(q),
            }
        }
        let mut q = copy.expect("a frame has a head");
        q.meta = batch[0].meta;
        q.set_tx_offload(batch[0].tx_offload());
        batch[0] = q;
        Ok(true)
    }

    /// Whether the device can reach `p`'s buffer: its pool is mapped in this queue's DMA
    /// domain. (A packet of a null port's identity-mapped pool, say, holds a host address a
    /// real device must never be given.)
    pub fn reaches(&self, p: &Packet) -> bool {
        // SAFETY: a live packet keeps its pool's `Shared` allocated.
        unsafe { p.shared_ptr().as_ref() }.domain == self.runs.domain
    }

    /// Position after the newest queued buffer: `release` up to it frees
    /// everything queued so far.
    #[inline(always)]
    pub fn tail(&self) -> usize {
        self.tail
    }

    /// Buffers queued.
    pub fn queued(&self) -> usize {
        self.tail.wrapping_sub(self.head)
    }

    /// Takes the buffers of packets from the front of `batch`, one per element of `descs`
    /// (the descriptors they go to): for each packet in order, `put(desc, &packet)` writes
    /// its descriptor and returns `true`, or returns `false` to stop before it. It also stops
    /// before a packet the device cannot reach ([`TxSlots::reaches`]) and before a frame
    /// shorter than [`MIN_TX_LEN`]: the caller copies or pads those. The packets taken leave
    /// `batch`; the rest stay, in order. Returns how many were taken and their frames' bytes.
    ///
    /// # Panics
    /// If `descs` is longer than `batch` or the FIFO's free room.
    #[inline(always)]
    pub fn send<D>(
        &mut self,
        batch: &mut Vec<Packet>,
        descs: &[D],
        put: impl FnMut(&D, &Packet, u32) -> bool,
    ) -> (usize, u64) {
        self.send_min(batch, descs, MIN_TX_LEN, put)
    }

    /// [`send`](Self::send), stopping before a frame shorter than `min_len` (at least
    /// [`MIN_TX_LEN`]) instead: for a ring whose own shortest frame is longer (virtio-net pads
    /// to 60 bytes), which then tests the length once.
    #[inline(always)]
    pub fn send_min<D>(
        &mut self,
        batch: &mut Vec<Packet>,
        descs: &[D],
        min_len: usize,
        mut put: impl FnMut(&D, &Packet, u32) -> bool,
    ) -> (usize, u64) {
        let min_len = min_len.max(MIN_TX_LEN);
        let n = descs.len();
        assert!(
            n <= batch.len() && n <= self.fifo.len() - self.queued(),
            "send beyond the batch or the FIFO"
        );
        let cap = self.fifo.len();
        let first = self.tail & self.mask;
        let runs = &mut self.runs;
        let cur = &mut self.cur;
        let (fifo_a, fifo_b) = self.fifo.split_at_mut(first);
        let tail0 = self.tail;
        let mut g = Taken {
            batch,
            taken: 0,
            fifo_tail: &mut self.tail,
        };
        // The FIFO slots these packets go to: from `first` to the end, then from 0 on.
        let n1 = n.min(cap - first);
        let packets = g.batch[..n].as_ptr();
        let mut bytes = 0u64;
        let mut at = Part {
            packets,
            min_len,
            runs,
            cur,
            tail0,
            bytes: &mut bytes,
        };
        if at.part(&descs[..n1], &mut fifo_b[..n1], 0, &mut g, &mut put) && n > n1 {
            at.part(&descs[n1..], &mut fifo_a[..n - n1], n1, &mut g, &mut put);
        }
        (g.taken, bytes)
    }

    /// Takes every buffer of the frame at the front of `batch` (its head and its segments,
    /// [`Packet::segment_count`] of them): `put(i, segment)` writes the descriptor of segment
    /// `i`. Returns false, taking nothing, when the FIFO has
    /// no room for them all or a segment's pool is not in the device's DMA domain (the caller
    /// copies the frame first). The slow path of chained frames; [`TxSlots::send`] is the fast
    /// one.
    ///
    /// # Panics
    /// If `batch` is empty.
    pub fn send_segments(
        &mut self,
        batch: &mut Vec<Packet>,
        mut put: impl FnMut(usize, &Packet),
    ) -> bool {
        let p = &batch[0];
        let n = p.segment_count();
        let all = || std::iter::once(p).chain(p.tail_segments());
        if n > self.fifo.len() - self.queued() || !all().all(|s| self.reaches(s)) {
            return false;
        }
        for (i, s) in all().enumerate() {
            if s.shared_ptr() != self.cur {
                let at = self.tail;
                let ok = new_run(&mut self.runs, &mut self.cur, s.shared_ptr(), at);
                debug_assert!(ok, "reach checked above");
            }
            put(i, s);
            self.fifo[self.tail & self.mask] = s.off();
            self.tail = self.tail.wrapping_add(1);
        }
        let mut p = batch.remove(0);
        // Every buffer is owned by the FIFO now.
        p.forget_segments();
        std::mem::forget(p);
        true
    }

    /// Returns the buffers queued before position `upto` (a [`tail`](Self::tail) seen earlier)
    /// to their pools, one pool operation per run. The caller knows the device is done with them, which
    /// is why this is crate-private: only the ring that read the device's write-back can know.
    ///
    /// # Panics
    /// If `upto` is past the tail (or before the head): releasing past the tail would push
    /// stale offsets onto the free stack, giving one buffer to two packets.
    #[inline]
    pub(crate) fn release(&mut self, upto: usize) {
        assert!(
            upto.wrapping_sub(self.head) <= self.queued(),
            "TxSlots::release past the tail: {} of {} queued",
            upto.wrapping_sub(self.head),
            self.queued()
        );
        if self.runs.q.len() == 1 && self.head != upto {
            // One pool (the usual case): one copy, or two when the range wraps.
            let pool = self.runs.q[0].0;
            let a = self.head & self.mask;
            let len = upto.wrapping_sub(self.head);
            let cap = self.fifo.len();
            let (first, second) = if a + len <= cap {
                (&self.fifo[a..a + len], &[][..])
            } else {
                (&self.fifo[a..], &self.fifo[..a + len - cap])
            };
            // SAFETY: as below.
            unsafe { Shared::release(pool, first, second) };
            self.head = upto;
            return;
        }
        self.release_runs(upto);
    }

    #[cold]
    fn release_runs(&mut self, upto: usize) {
        while self.head != upto {
            let (pool, _) = self.runs.q[0];
            let run_end = self.runs.q.get(1).map_or(self.tail, |r| r.1);
            let end = if run_end.wrapping_sub(self.head) < upto.wrapping_sub(self.head) {
                run_end
            } else {
                upto
            };
            let a = self.head & self.mask;
            let len = end.wrapping_sub(self.head);
            let (first, second) = if a + len <= self.fifo.len() {
                (&self.fifo[a..a + len], &[][..])
            } else {
                (&self.fifo[a..], &self.fifo[..a + len - self.fifo.len()])
            };
            // SAFETY: these buffers came from packets of `pool` (a run holds one pool's
            // buffers), which stays alive while they are out; they are owned by this FIFO
            // alone and leave it here.
            unsafe { Shared::release(pool, first, second) };
            self.head = end;
            if end == run_end && self.runs.q.len() > 1 {
                self.runs.q.pop_front();
            }
        }
    }
}

/// What the parts of one [`TxSlots::send`] share.
struct Part<'a> {
    /// The batch's packets (borrowed, not moved, until the guard removes them).
    packets: *const Packet,
    /// The shortest frame the walk takes (see [`TxSlots::send_min`]).
    min_len: usize,
    runs: &'a mut Runs,
    cur: &'a mut NonNull<Shared>,
    tail0: usize,
    bytes: &'a mut u64,
}

impl Part<'_> {
    /// One part of a send, the packets `from..` into FIFO slots `slots`: `walk` over three
    /// arrays; a packet of another pool ends a walk, the new run is recorded here and the walk
    /// resumes. Whether the part went whole.
    #[inline(always)]
    fn part<D>(
        &mut self,
        descs: &[D],
        slots: &mut [u32],
        from: usize,
        g: &mut Taken,
        put: &mut impl FnMut(&D, &Packet, u32) -> bool,
    ) -> bool {
        let m = descs.len().min(slots.len());
        let mut k = 0;
        loop {
            // SAFETY: `from + m <= n <= len`; the packets stay in the vector (borrowed, not
            // moved) until the guard removes them.
            let ps = unsafe { std::slice::from_raw_parts(self.packets.add(from), m) };
            let (done, b) = walk(
                &descs[k..m],
                &mut slots[k..m],
                &ps[k..],
                *self.cur,
                self.min_len,
                put,
            );
            *self.bytes += b;
            k += done;
            g.taken = from + k;
            if k == m {
                return true;
            }
            if ps[k].pool == *self.cur
                || !new_run(
                    self.runs,
                    self.cur,
                    ps[k].pool,
                    self.tail0.wrapping_add(from + k),
                )
            {
                return false;
            }
        }
    }
}

/// Frames shorter than this never get a transmit descriptor from [`TxSlots::send`]: the walk
/// stops before them so that the ring can pad them first (see `devices::intel::tx::MIN_TX_LEN`).
pub const MIN_TX_LEN: usize = 17;

/// The transmit loop: for each packet of `packets` in turn (all of pool `pool`, stopping
/// before the first that is not, and before a frame shorter than [`MIN_TX_LEN`]), `put` writes
/// its descriptor (or returns false to stop) and its buffer's offset goes to the FIFO slot.
/// Returns how many went and their bytes.
/// Nothing but the three arrays is live in the loop and nothing is called from it (a new run
/// is recorded by the caller between walks), so its values stay in registers.
#[inline(always)]
fn walk<D>(
    descs: &[D],
    slots: &mut [u32],
    packets: &[Packet],
    pool: NonNull<Shared>,
    min_len: usize,
    put: &mut impl FnMut(&D, &Packet, u32) -> bool,
) -> (usize, u64) {
    let m = descs.len().min(slots.len()).min(packets.len());
    let mut bytes = 0u64;
    for k in 0..m {
        // SAFETY: `k < m`, within all three slices.
        let (d, slot, p) = unsafe {
            (
                descs.get_unchecked(k),
                slots.get_unchecked_mut(k),
                packets.get_unchecked(k),
            )
        };
        // A frame shorter than `min_len` ends the walk too (the ring pads it on its slow
        // path): the length is read for the byte count anyway. So does a chain or an offload
        // request: its pool pointer carries a mark (`pool::EXT`), so it is not `pool`.
        let len = p.len();
        if p.pool != pool || len < min_len || !put(d, p, len as u32) {
            return (k, bytes);
        }
        *slot = p.off();
        bytes += len as u64;
    }
    (m, bytes)
}

/// Starts a run of buffers from `pool` at FIFO position `at` (or renames the last run, if it
/// starts there and so is empty), and makes `pool` the current one.
/// Returns false, changing nothing, when `pool` is not mapped in the device's DMA domain, or is
/// a packet's marked pool pointer.
#[cold]
fn new_run(runs: &mut Runs, cur: &mut NonNull<Shared>, pool: NonNull<Shared>, at: usize) -> bool {
    // A marked pool pointer (`pool::EXT`: a chain or an offload request) is not a new run:
    // the caller deals with that packet.
    if pool.addr().get() & super::pool::EXT != 0 {
        return false;
    }
    // SAFETY: `pool` is the pool of a live packet, which keeps its `Shared` allocated.
    if unsafe { pool.as_ref() }.domain != runs.domain {
        return false;
    }
    // SAFETY: as above; the new handle counts like any other.
    runs.cur_pool = Some(unsafe { Pool::from_shared(pool) });
    *cur = pool;
    match runs.q.back_mut() {
        Some(last) if last.1 == at => last.0 = pool,
        _ => runs.q.push_back((pool, at)),
    }
    true
}

impl Drop for TxSlots {
    /// Returns every queued buffer (the ring's owner stopped the queue first).
    fn drop(&mut self) {
        self.release(self.tail);
    }
}

impl std::fmt::Debug for TxSlots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxSlots")
            .field("queued", &self.queued())
            .field("runs", &self.runs.q.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::super::pool::tests::pool;
    use super::*;

    #[test]
    fn receive_slots_swap_buffers_and_give_everything_back() {
        let p = pool(16);
        let mut s = RxSlots::new(p.clone(), 8).unwrap();
        assert!(RxSlots::new(p.clone(), 9).is_err());
        assert_eq!(p.stats().free, 8);
        assert_eq!(s.reserve(4, 4), 4);
        assert_eq!(
            s.reserve(2, 8),
            4,
            "enough for the need: no pool round trip"
        );
        let before: Vec<u64> = (0..8).map(|i| s.data_iova(i)).collect();
        let mut armed = Vec::new();
        let mut batch = Vec::new();
        let meta = Meta {
            vlan_tci: 7,
            ..Meta::default()
        };
        // Slot 4 stops the harvest.
        let idx: Vec<usize> = (0..8).collect();
        let (n, bytes) = s.harvest(
            2,
            &idx[2..6],
            &mut batch,
            |&i| (i < 4).then_some((60, meta)),
            |&i, a| armed.push((i, a)),
        );
        assert_eq!((n, bytes), (2, 120));
        assert_eq!(batch.len(), 2);
        assert_eq!(batch[0].data_iova(), before[2]);
        assert_eq!(batch[1].data_iova(), before[3]);
        assert_eq!((batch[0].len(), batch[0].meta), (60, meta));
        assert_eq!(armed.len(), 2);
        assert_eq!(armed[0].0, 2);
        assert_eq!(s.data_iova(2), armed[0].1);
        assert!(!before.contains(&armed[0].1));
        assert_eq!(s.reserved(), 2);
        assert_eq!(s.fast_len(), 2047);
        assert!(
            !s.take(4, 4000, meta, &mut batch, |_| ()),
            "longer than a buffer"
        );
        assert!(s.take(4, 2048, meta, &mut batch, |a| armed.push((4, a))));
        assert_eq!((batch[2].len(), s.data_iova(4)), (2048, armed[2].1));
        assert_eq!(s.reserved(), 1);
        assert!(batch.iter().all(|b| b.is_from(&p)));
        assert_eq!(p.stats().in_use, 8 + 3 + 1);
        drop(batch);
        drop(s);
        assert_eq!(p.stats().free, 16);
    }

    #[test]
    fn transmit_fifo_keeps_runs_of_pools_and_releases_them_home() {
        let a = pool(8);
        let b = pool(8);
        let mut t = TxSlots::new(8, &a.mapper().clone());
        let mut batch = Vec::new();
        a.alloc_bulk_len(3, 60, &mut batch);
        b.alloc_bulk_len(2, 60, &mut batch);
        a.alloc_bulk_len(2, 60, &mut batch);
        // The fifth packet is refused: it and the two behind it stay in the batch.
        let d: Vec<usize> = (0..8).collect();
        let (n, _) = t.send(&mut batch, &d[..7], |&k, _, _| k < 4);
        assert_eq!((n, batch.len(), t.queued()), (4, 3, 4));
        assert!(batch[0].is_from(&b) && batch[1].is_from(&a));
        let mark = t.tail();
        assert_eq!(t.send(&mut batch, &d[..3], |_, _, _| true).0, 3);
        assert_eq!((a.stats().free, b.stats().free), (3, 6));
        t.release(2);
        assert_eq!((a.stats().free, b.stats().free), (5, 6));
        t.release(mark);
        assert_eq!((a.stats().free, b.stats().free), (6, 7));
        // Wrap around the FIFO a few times with one pool.
        for _ in 0..5 {
            t.release(t.tail());
            a.alloc_bulk_len(5, 60, &mut batch);
            assert_eq!(t.send(&mut batch, &d[..5], |_, _, _| true), (5, 300));
        }
        drop(t);
        assert_eq!((a.stats().free, b.stats().free), (8, 8));
    }

    #[test]
    fn an_empty_run_of_a_pool_freed_since_is_not_touched() {
        // A run of pool A, all released; A's last handle goes when pool B's packet makes B the
        // current pool (A is freed then). The empty run of A left in front must not be
        // dereferenced by the next release (ASan: use-after-free).
        let a = pool(8);
        let b = pool(8);
        let mut t = TxSlots::new(8, &a.mapper().clone());
        let mut batch = Vec::new();
        a.alloc_bulk_len(2, 60, &mut batch);
        let d: Vec<usize> = (0..4).collect();
        assert_eq!(t.send(&mut batch, &d[..2], |_, _, _| true).0, 2);
        t.release(t.tail());
        drop(a);
        b.alloc_bulk_len(1, 60, &mut batch);
        assert_eq!(t.send(&mut batch, &d[..1], |_, _, _| true).0, 1);
        t.release(t.tail());
        drop(t);
        assert_eq!(b.stats().free, 8);
    }

    #[test]
    fn a_ring_as_large_as_the_pool_can_be_made_again_on_the_same_thread() {
        let p = pool(64);
        for _ in 0..3 {
            let r = RxSlots::new(p.clone(), 64).expect("every buffer is back home");
            drop(r);
        }
        // Buffers this thread freed into its cache go home for a new ring too.
        let mut v = Vec::new();
        assert_eq!(p.alloc_bulk(8, &mut v), 8);
        drop(v);
        assert!(RxSlots::new(p.clone(), 64).is_ok());
    }

    #[test]
    fn the_current_pool_stays_allocated_so_its_address_cannot_pass_for_another() {
        // If the current pool were freed, a new pool of another DMA domain could get its
        // address and pass the one-compare check unchecked: the FIFO keeps it alive.
        let a = pool(8);
        let mut t = TxSlots::new(8, &a.mapper().clone());
        let mut batch = Vec::new();
        a.alloc_bulk_len(2, 60, &mut batch);
        let d: Vec<usize> = (0..2).collect();
        assert_eq!(t.send(&mut batch, &d, |_, _, _| true).0, 2);
        assert_eq!(t.cur, a.shared_ptr());
        t.release(t.tail());
        drop(a);
        let kept = t
            .runs
            .cur_pool
            .as_ref()
            .expect("a handle of the current pool");
        assert_eq!((kept.shared_ptr(), kept.stats().free), (t.cur, 8));
        // A pool of another domain (a software IOMMU) is refused at the front of the batch.
        let other = Pool::new(
            super::super::PoolConfig {
                buffers: 8,
                ..super::super::PoolConfig::default()
            },
            Arc::new(super::super::SoftIommu::new("other")),
        )
        .unwrap();
        other.alloc_bulk_len(1, 60, &mut batch);
        assert!(!t.reaches(&batch[0]));
        assert_eq!(t.send(&mut batch, &d[..1], |_, _, _| true).0, 0);
    }

    #[test]
    #[should_panic(expected = "TxSlots::release past the tail")]
    fn releasing_past_the_tail_is_refused_in_every_build() {
        // Past the tail, stale FIFO words would go onto the free stack: one buffer, two owners.
        let a = pool(8);
        let mut t = TxSlots::new(8, &a.mapper().clone());
        let mut batch = Vec::new();
        a.alloc_bulk_len(2, 60, &mut batch);
        let d: Vec<usize> = (0..2).collect();
        t.send(&mut batch, &d, |_, _, _| true);
        t.release(t.tail() + 1);
    }
}
