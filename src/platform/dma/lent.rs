//! Buffers lent to a device that keeps its own free list: a hardware buffer pool.
//!
//! An Intel ring holds a buffer per descriptor slot, so the ring's own slots say which buffer
//! came back ([`super::RxSlots`]). A queue-manager device (DPAA2's BMan) works the other way
//! round: the driver releases buffer addresses into the device's pool, and a received frame
//! names its buffer by bus address in a frame descriptor, in any order, possibly a buffer that
//! another port's transmit put back. So a driver needs to turn a bus address back into the
//! [`Packet`] that owns the buffer, and must not trust the address: a device (or a model) that
//! names a buffer it was never given must not get a second owner of a live buffer.
//!
//! [`LentBuffers`] is that table, one per pool: a bit per buffer, set while the device holds the
//! buffer. The bits are kept per 128-byte granule of the pool (a buffer size is a multiple of
//! 128, [`Pool::new`]), the bit of a buffer being its first granule's: so a bus address is
//! checked and turned into its bit by one subtraction, one rotation by a constant and one
//! compare (an address off a granule boundary rotates its low bits to the top, past every
//! granule), and only a buffer's start can ever have its bit set. That takes one bit per 128
//! bytes of the pool (8.5 KiB for 4096 buffers of 2176 bytes), against a 64-bit division (or a
//! multiplication and a variable rotation) per buffer with one bit per buffer.
//! [`lend`](LentBuffers::lend) consumes a packet and sets its bit;
//! [`take_back`](LentBuffers::take_back) clears the bit of a buffer named by its address and
//! builds the packet, or refuses an address that is not the start of a lent buffer of this
//! pool. A burst uses [`lend_run`](LentBuffers::lend_run) and
//! [`take_backs`](LentBuffers::take_backs), which move the count of lent buffers once per burst
//! (up before the bits are set, down after they are cleared: never below the bits) instead of
//! once per buffer. Bits are atomic, so a transmit queue on one core lends while a receive
//! queue on another takes back (a buffer sent by port B returns to port A's pool). A buffer whose bit is
//! set counts as away from its pool's home, so the pool's memory stays mapped while the device
//! may still write it; buffers still lent when the table goes are left there (never freed to
//! the pool while a device might hold them). Drivers take every buffer back before that, by
//! draining the device's pool and queues.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use super::pool::{Meta, Packet, Pool, Shared};

/// The bytes per bit of a table: every pool's buffer size is a multiple of this
/// ([`Pool::new`]), so every buffer starts on one.
const GRANULE: usize = 128;

/// Why [`LentBuffers::take_back`] refused a bus address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotLent {
    /// The address is outside the pool, or not the start of one of its buffers.
    #[error("bus address {0:#x} is not the start of a buffer of this pool")]
    NotABuffer(u64),
    /// The buffer is not lent to the device (it is free, or owned by a packet).
    #[error("the buffer at bus address {0:#x} is not lent to the device")]
    NotLent(u64),
    /// The frame's offset and length do not fit the buffer.
    #[error("a frame at offset {offset} of length {len} does not fit a {buf_size}-byte buffer")]
    TooLong {
        /// Frame offset in the buffer.
        offset: u16,
        /// Frame length.
        len: u32,
        /// The pool's buffer size.
        buf_size: usize,
    },
}

/// The buffers of one pool that a device holds.
pub struct LentBuffers {
    pool: Pool,
    shared: NonNull<Shared>,
    iova: u64,
    buf_size: usize,
    /// 128-byte granules in the pool.
    granules: u64,
    /// Bit `i % 64` of word `i / 64`: the buffer starting at granule `i` is lent.
    bits: Box<[AtomicU64]>,
    lent: AtomicUsize,
}

// SAFETY: the bits and the count are atomics; the pool handle is Send + Sync and `shared` is
// the pool that handle keeps alive. Buffers are handed between threads only through the bits,
// whose atomic swap gives each buffer to exactly one taker.
unsafe impl Send for LentBuffers {}
// SAFETY: see `Send`.
unsafe impl Sync for LentBuffers {}

impl LentBuffers {
    /// An empty table for `pool`'s buffers.
    pub fn new(pool: &Pool) -> LentBuffers {
        let buffers = pool.stats().capacity;
        let buf_size = pool.buf_size();
        assert!(
            buf_size > 0 && buf_size % GRANULE == 0,
            "a pool's buffer size is a multiple of {GRANULE}"
        );
        let granules = (buffers * buf_size / GRANULE) as u64;
        LentBuffers {
            pool: pool.clone(),
            shared: pool.shared_ptr(),
            iova: pool.iova(),
            buf_size,
            granules,
            bits: (0..granules.div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
            lent: AtomicUsize::new(0),
        }
    }

    /// The pool whose buffers this table lends.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Buffers the device holds now.
    pub fn lent(&self) -> usize {
        self.lent.load(Ordering::Relaxed)
    }

    /// Lends `p`'s buffer to the device and returns the buffer's bus address (its start, not
    /// the frame's); the packet is consumed. A packet of another pool, or a chained one (its
    /// segments would be lost), is given back.
    pub fn lend(&self, p: Packet) -> Result<u64, Packet> {
        if !p.is_from(&self.pool) || p.is_chained() {
            return Err(p);
        }
        // Counted before the bit is set, so that a take-back racing with this never sees the
        // count below the bits.
        self.lent.fetch_add(1, Ordering::Relaxed);
        Ok(self.set_bit(std::mem::ManuallyDrop::new(p)))
    }

    /// Lends the packets at the front of `batch`, at most `max`, and removes them from it;
    /// returns how many. The run ends at the first packet of another pool or chained (as
    /// [`lend`](Self::lend) refuses them), or for which `send` says no; that packet and the
    /// rest stay in the batch. `send` is called with each packet's buffer address, and whether
    /// it is plain ([`Packet::is_plain`], which the run's pool test has found out), before its
    /// buffer is lent (a transmit queue writes its descriptor there): the caller hands the
    /// buffers to the device only after this returns (its doorbell), never inside `send`.
    ///
    /// The count moves twice per run instead of once per packet: the run's most before the
    /// first bit is set, what it did not lend after the last (the count never below the bits).
    /// If `send` panics, the packets lent so far stay lent and the rest of the batch is
    /// leaked (as `Vec::drain` leaks on a panic): none is dropped while its bit is set.
    #[inline]
    pub fn lend_run(
        &self,
        batch: &mut Vec<Packet>,
        max: usize,
        mut send: impl FnMut(u64, &Packet, bool) -> bool,
    ) -> usize {
        let len = batch.len();
        let most = max.min(len);
        if most == 0 {
            return 0;
        }
        self.lent.fetch_add(most, Ordering::Relaxed);
        // From here the batch owns nothing (a panic in `send` leaks its packets, which is
        // safe); its packets are read in place and the unlent tail is put back below.
        // SAFETY: a length of 0 is always valid (nothing to initialize); the packets stay in
        // the buffer, read below through `base`.
        unsafe { batch.set_len(0) };
        let base = batch.as_mut_ptr();
        // The table's fields as values the loop keeps in registers.
        let (shared, iova, bits) = (self.shared, self.iova, &self.bits[..]);
        let mut k = 0;
        while k < most {
            // SAFETY: `k < len`: an initialized packet of the batch's buffer, not moved out
            // (packets before `k` are lent and no longer touched).
            let p = unsafe { &*base.add(k) };
            // A plain packet of this pool is one compare (its pool pointer, mark bit clear);
            // a marked one (chain or offload request) is looked at further.
            let plain = p.pool == shared;
            if !plain && (p.shared_ptr() != shared || p.is_chained()) {
                break;
            }
            let off = u64::from(p.off());
            let buf = iova + off;
            if !send(buf, p, plain) {
                break;
            }
            // The packet is of this pool: `off` is one of its buffers, so its granule is below
            // `granules` and its bit's word exists.
            let i = (off / GRANULE as u64) as usize;
            debug_assert!((i as u64) < self.granules);
            // SAFETY: `i < granules` (above) and `bits` has `granules.div_ceil(64)` words.
            let word = unsafe { bits.get_unchecked(i / 64) };
            let was = word.fetch_or(1 << (i % 64), Ordering::AcqRel);
            // A packet owns its buffer exclusively, so the buffer cannot be lent already.
            debug_assert_eq!(was & 1 << (i % 64), 0, "buffer at granule {i} lent twice");
            // SAFETY: as above; the packet is consumed here, its ownership going to its bit,
            // and the batch never drops it (its slot is overwritten or cut off below).
            std::mem::forget(unsafe { base.add(k).read() });
            k += 1;
        }
        // SAFETY: packets `k..len` are initialized and owned by nobody else; they move to the
        // front (the slots of the lent ones, whose packets are not dropped) and the batch owns
        // them again.
        unsafe {
            if k < len {
                std::ptr::copy(base.add(k), base, len - k);
            }
            batch.set_len(len - k);
        }
        if k < most {
            self.lent.fetch_sub(most - k, Ordering::Relaxed);
        }
        k
    }

    /// Sets the bit of `p`'s buffer (the packet is consumed: its bit owns the buffer now);
    /// returns the buffer's bus address. The caller checked the pool and counted it.
    #[inline(always)]
    fn set_bit(&self, p: std::mem::ManuallyDrop<Packet>) -> u64 {
        let i = p.off() as usize / GRANULE;
        let was = self.bits[i / 64].fetch_or(1 << (i % 64), Ordering::AcqRel);
        // A packet owns its buffer exclusively, so the buffer cannot be lent already.
        debug_assert_eq!(was & 1 << (i % 64), 0, "buffer at granule {i} lent twice");
        self.iova + u64::from(p.off())
    }

    /// The granule of byte offset `rel` in the pool, when `rel` is a multiple of 128; any
    /// other offset gives 2^57 or more (its low 7 bits rotated to the top), which is more
    /// than the granules of any pool (at most 4 GiB: 2^25), so one compare with `granules`
    /// both checks the boundary and the range. Whether the granule starts a lent buffer is
    /// its bit's to say: only a buffer's start is ever set.
    #[inline(always)]
    fn index(rel: u64) -> u64 {
        rel.rotate_right(GRANULE.trailing_zeros())
    }

    /// Takes a lent buffer back from the device: the packet owning the buffer at bus address
    /// `buf_iova`, with its frame at `offset` bytes into the buffer, `len` bytes long.
    pub fn take_back(
        &self,
        buf_iova: u64,
        offset: u16,
        len: u32,
        meta: Meta,
    ) -> Result<Packet, NotLent> {
        let p = self.claim(buf_iova, offset, len, meta)?;
        self.lent.fetch_sub(1, Ordering::Relaxed);
        Ok(p)
    }

    /// A run of take-backs (a receive burst) that moves the count once, when it ends: each
    /// [`TakeBacks::take`] checks and clears as [`take_back`](Self::take_back) does.
    pub fn take_backs(&self) -> TakeBacks<'_> {
        TakeBacks {
            table: self,
            iova: self.iova,
            granules: self.granules,
            buf_size: self.buf_size,
            taken: 0,
            refused: None,
        }
    }

    /// Clears the bit of the lent buffer at `buf_iova` and builds its packet; the caller
    /// counts it (after this: the count never below the bits).
    #[inline(always)]
    fn claim(&self, buf_iova: u64, offset: u16, len: u32, meta: Meta) -> Result<Packet, NotLent> {
        let rel = buf_iova.wrapping_sub(self.iova);
        let refused = || refusal(rel, buf_iova, offset, len, self.buf_size, self.granules);
        // Inside the pool and on a granule boundary, in one compare (see `index`).
        let i = Self::index(rel);
        if i >= self.granules || usize::from(offset) + len as usize > self.buf_size {
            return Err(refused());
        }
        let i = i as usize;
        let bit = 1u64 << (i % 64);
        // SAFETY: `i < granules` (checked above) and `bits` has `granules.div_ceil(64)` words.
        let word = unsafe { self.bits.get_unchecked(i / 64) };
        if word.fetch_and(!bit, Ordering::AcqRel) & bit == 0 {
            return Err(refused());
        }
        let (off, data) = (rel as u32, self.iova + u64::from(offset));
        // Its bit was set, so `lend` lent the buffer starting there and consumed its packet
        // (only a buffer's first granule is ever set); the `fetch_and` above, which cleared
        // the bit, gave it to this call alone.
        // SAFETY: the pool is alive (this table holds a handle); `off` is one of its buffers
        // (its bit was set), owned by nobody else (above), and `offset + len` fits it
        // (checked).
        let p = unsafe { Packet::from_parts(self.shared, data, off, offset, len as u16, meta) };
        Ok(p)
    }
}

/// Take-backs from one [`LentBuffers`] whose count moves once, when this goes (see
/// [`LentBuffers::take_backs`]): the count is then above the bits for the run's length,
/// never below them. It keeps the table's fields the checks read, so that a receive loop
/// holds them in registers.
pub struct TakeBacks<'a> {
    table: &'a LentBuffers,
    iova: u64,
    granules: u64,
    buf_size: usize,
    taken: usize,
    /// Why the last [`take_run`](TakeBacks::take_run) stopped at a frame it refused, if it
    /// did (set out of its loop).
    refused: Option<NotLent>,
}

/// What [`TakeBacks::take_run`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TakenRun {
    /// Entries `next` returned a frame for (each one consumed: taken, or refused).
    pub decoded: usize,
    /// Packets appended to the batch.
    pub taken: usize,
    /// Their frames' bytes.
    pub bytes: u64,
    /// Why the run's last decoded entry was refused, if it was (the run stopped there).
    pub refused: Option<NotLent>,
}

impl TakeBacks<'_> {
    /// [`LentBuffers::take_back`], counted when the run ends.
    #[inline(always)]
    pub fn take(
        &mut self,
        buf_iova: u64,
        offset: u16,
        len: u32,
        meta: Meta,
    ) -> Result<Packet, NotLent> {
        let p = self.table.claim(buf_iova, offset, len, meta)?;
        self.taken += 1;
        Ok(p)
    }

    /// Takes back up to `n` buffers in one pass and appends their packets to `batch`: for
    /// each `k` in turn, `next(k)` returns the frame of entry `k` (the buffer's bus address,
    /// the frame's offset in it and its length), or `None` to stop there (the entry is not
    /// there yet, or unusual: the caller's careful path handles it). Each frame is checked as
    /// [`take_back`](LentBuffers::take_back) checks it; the first one refused ends the run
    /// with its error (it counts as decoded: `next` consumed it). The packets carry no
    /// metadata. A receive burst's loop: the batch is reserved once, the table's fields and
    /// the run's position are values, not memory.
    #[inline(always)]
    pub fn take_run(
        &mut self,
        batch: &mut Vec<Packet>,
        n: usize,
        mut next: impl FnMut(usize) -> Option<(u64, u16, u32)>,
    ) -> TakenRun {
        batch.reserve(n);
        let mut g = Appended {
            len: batch.len(),
            batch,
            added: 0,
        };
        // SAFETY: `len + n <= capacity` after the reserve: the `n` spare slots.
        let out = unsafe { g.batch.as_mut_ptr().add(g.len) };
        let (iova, granules, buf_size) = (self.iova, self.granules, self.buf_size);
        let (shared, bits) = (self.table.shared, &self.table.bits[..]);
        let mut bytes = 0u64;
        self.refused = None;
        // One count for the entries and the packets: every entry decoded is a packet, but for
        // a refused one, which ends the run.
        while g.added < n {
            let k = g.added;
            let Some((buf_iova, offset, len)) = next(k) else {
                break;
            };
            let rel = buf_iova.wrapping_sub(iova);
            // Inside the pool and on a granule boundary, in one compare (see `index`).
            let i = LentBuffers::index(rel);
            if i >= granules || usize::from(offset) + len as usize > buf_size {
                self.refused = Some(refusal(rel, buf_iova, offset, len, buf_size, granules));
                break;
            }
            let i = i as usize;
            let bit = 1u64 << (i % 64);
            // SAFETY: `i < granules` (checked above) and `bits` has `granules.div_ceil(64)`
            // words.
            let word = unsafe { bits.get_unchecked(i / 64) };
            if word.fetch_and(!bit, Ordering::AcqRel) & bit == 0 {
                self.refused = Some(refusal(rel, buf_iova, offset, len, buf_size, granules));
                break;
            }
            // As in `claim`: the bit was set, so `lend` lent the buffer starting there and
            // consumed its packet, and the `fetch_and` that cleared it gave it to this call
            // alone.
            // SAFETY: the pool is alive (the table holds a handle); `rel` is one of its
            // buffers (its bit was set), owned by nobody else (above), and `offset + len`
            // fits it (checked). `out + k` is a spare slot (`k < n`).
            unsafe {
                // `rel` is a buffer's offset in a pool of at most 4 GiB: 32 bits, as a
                // location word's offset field.
                let loc = rel | u64::from(offset) << 32 | u64::from(len) << 48;
                let p =
                    Packet::from_dma(shared, buf_iova + u64::from(offset), loc, Meta::default());
                out.add(k).write(p);
            }
            g.added = k + 1;
            bytes += u64::from(len);
        }
        self.taken += g.added;
        TakenRun {
            decoded: g.added + usize::from(self.refused.is_some()),
            taken: g.added,
            bytes,
            refused: self.refused,
        }
    }
}

/// Why a frame at byte `rel` of the pool (bus address `buf_iova`) was refused, once the fast
/// checks said it was (out of the loops): not a buffer's start, then too long, then not lent.
#[cold]
#[inline(never)]
fn refusal(
    rel: u64,
    buf_iova: u64,
    offset: u16,
    len: u32,
    buf_size: usize,
    granules: u64,
) -> NotLent {
    let pool_len = granules * GRANULE as u64;
    if rel >= pool_len || rel % buf_size as u64 != 0 {
        NotLent::NotABuffer(buf_iova)
    } else if usize::from(offset) + len as usize > buf_size {
        NotLent::TooLong {
            offset,
            len,
            buf_size,
        }
    } else {
        NotLent::NotLent(buf_iova)
    }
}

/// Commits the packets a run wrote into a batch's spare capacity (also on unwind).
struct Appended<'a> {
    batch: &'a mut Vec<Packet>,
    len: usize,
    added: usize,
}

impl Drop for Appended<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        // SAFETY: the `added` slots behind `len` were initialised with packets before
        // `added` counted them, within the capacity reserved.
        unsafe { self.batch.set_len(self.len + self.added) };
    }
}

impl TakeBacks<'_> {
    /// [`take`](Self::take), the packet appended to `batch`: built in place, after the
    /// capacity test (a receive burst reserves its batch first, so that test never grows it).
    #[inline(always)]
    pub fn take_to(
        &mut self,
        batch: &mut Vec<Packet>,
        buf_iova: u64,
        offset: u16,
        len: u32,
    ) -> Result<(), NotLent> {
        if batch.len() == batch.capacity() {
            grow(batch);
        }
        let p = self.table.claim(buf_iova, offset, len, Meta::default())?;
        self.taken += 1;
        let n = batch.len();
        // SAFETY: `n < capacity` (tested above; `claim` does not touch the batch), so slot `n`
        // is allocated and uninitialized; writing the packet there and counting it moves it
        // into the batch, as `push` would.
        unsafe {
            batch.as_mut_ptr().add(n).write(p);
            batch.set_len(n + 1);
        }
        Ok(())
    }
}

/// Room for another burst in a full batch (kept out of the take-back's path).
#[cold]
#[inline(never)]
fn grow(batch: &mut Vec<Packet>) {
    batch.reserve(32);
}

impl Drop for TakeBacks<'_> {
    fn drop(&mut self) {
        if self.taken > 0 {
            self.table.lent.fetch_sub(self.taken, Ordering::Relaxed);
        }
    }
}

impl Drop for LentBuffers {
    /// Buffers still lent stay away from home: the device may hold them, so they are never
    /// reused, and the pool's memory stays mapped (it goes when every buffer is home).
    fn drop(&mut self) {
        let n = self.lent();
        if n > 0 {
            tracing::warn!(
                buffers = n,
                "buffers still lent to a device when its table went; they are not reused"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::dma::{IdentityMapper, PoolConfig};
    use std::sync::Arc;

    fn pool(n: usize) -> Pool {
        Pool::new(
            PoolConfig {
                buffers: n,
                ..PoolConfig::default()
            },
            Arc::new(IdentityMapper),
        )
        .unwrap()
    }

    #[test]
    fn a_lent_buffer_comes_back_once_and_only_by_its_address() {
        let p = pool(70);
        let t = LentBuffers::new(&p);
        let mut pk = p.alloc().unwrap();
        pk.set_data(b"hello");
        let addr = t.lend(pk).unwrap();
        assert_eq!(t.lent(), 1);
        assert_eq!(p.stats().in_use, 1, "a lent buffer is away from home");
        assert_eq!(
            t.take_back(addr + 64, 128, 5, Meta::default()).unwrap_err(),
            NotLent::NotABuffer(addr + 64)
        );
        assert!(matches!(
            t.take_back(addr, 2100, 100, Meta::default()),
            Err(NotLent::TooLong { .. })
        ));
        let back = t.take_back(addr, 128, 5, Meta::default()).unwrap();
        assert_eq!(back.data(), b"hello");
        assert_eq!(back.buf_iova(), addr);
        assert_eq!(
            t.take_back(addr, 128, 5, Meta::default()).unwrap_err(),
            NotLent::NotLent(addr),
            "a buffer comes back once"
        );
        drop(back);
        assert_eq!(p.stats().in_use, 0);
        let far = p.iova() + 70 * p.buf_size() as u64 * 2;
        assert!(matches!(
            t.take_back(far, 128, 0, Meta::default()),
            Err(NotLent::NotABuffer(_))
        ));
        assert!(matches!(
            t.take_back(p.iova().wrapping_sub(4096), 128, 0, Meta::default()),
            Err(NotLent::NotABuffer(_))
        ));
    }

    #[test]
    fn only_a_lent_buffers_start_comes_back_and_every_other_address_says_why() {
        for buf_size in [256, 384, 1152, 2048, 2176, 9216 + 128, 32_640] {
            let p = Pool::new(
                PoolConfig {
                    buffers: 37,
                    buf_size,
                    headroom: 128,
                },
                Arc::new(IdentityMapper),
            )
            .unwrap();
            let t = LentBuffers::new(&p);
            let mut all = Vec::new();
            p.alloc_bulk(37, &mut all);
            let lent: Vec<u64> = all.into_iter().map(|pk| t.lend(pk).unwrap()).collect();
            for rel in (0..40 * buf_size as u64).step_by(64) {
                let a = p.iova() + rel;
                let got = t.take_back(a, 0, 0, Meta::default());
                if rel % buf_size as u64 == 0 && rel / (buf_size as u64) < 37 {
                    assert!(got.is_ok(), "buf_size {buf_size}, offset {rel:#x}: {got:?}");
                    // Back once only.
                    assert_eq!(
                        t.take_back(a, 0, 0, Meta::default()).unwrap_err(),
                        NotLent::NotLent(a)
                    );
                } else {
                    assert_eq!(got.unwrap_err(), NotLent::NotABuffer(a), "offset {rel:#x}");
                }
            }
            assert_eq!((t.lent(), lent.len()), (0, 37));
            for rel in [u64::MAX, u64::MAX - 127, 1 << 63, (1 << 63) + 128, 1] {
                assert!(LentBuffers::index(rel) >= t.granules, "offset {rel:#x}");
            }
        }
    }

    #[test]
    fn a_run_lends_its_pools_packets_and_stops_at_another_or_at_no() {
        let (a, b) = (pool(8), pool(8));
        let t = LentBuffers::new(&a);
        let mut batch = Vec::new();
        a.alloc_bulk(3, &mut batch);
        batch.push(b.alloc().unwrap());
        a.alloc_bulk(2, &mut batch);
        let want: Vec<u64> = batch[..3].iter().map(|p| p.buf_iova()).collect();
        let mut seen = Vec::new();
        assert_eq!(
            t.lend_run(&mut batch, 8, |a, _, plain| {
                assert!(plain);
                seen.push(a);
                true
            }),
            3
        );
        assert_eq!((seen, t.lent(), batch.len()), (want.clone(), 3, 3));
        assert!(
            batch[0].is_from(&b),
            "the packet of another pool stays, first"
        );
        drop(batch.remove(0));
        // At most `max`, and `send` ends the run: the packet it refused stays.
        let mut fourth = 0;
        assert_eq!(
            t.lend_run(&mut batch, 1, |a, _, _| {
                fourth = a;
                true
            }),
            1
        );
        assert_eq!(t.lend_run(&mut batch, 8, |_, _, _| false), 0);
        assert_eq!((t.lent(), batch.len()), (4, 1));
        let mut back = t.take_backs();
        for a in &want {
            drop(back.take(*a, 128, 0, Meta::default()).unwrap());
        }
        assert_eq!(
            back.take(want[0], 128, 0, Meta::default()).unwrap_err(),
            NotLent::NotLent(want[0])
        );
        assert_eq!(t.lent(), 4, "a run of take-backs is counted when it ends");
        drop(back);
        assert_eq!(t.lent(), 1);
        // The last one back too, so that the pool can go (a buffer still lent keeps it).
        drop(t.take_back(fourth, 128, 0, Meta::default()).unwrap());
        assert_eq!(t.lent(), 0);
    }

    /// A run of take-backs: `next` ends it with `None` (nothing consumed), a refused frame
    /// ends it with its error (consumed, not taken), and the count moves when the run ends.
    #[test]
    fn a_run_of_take_backs_stops_where_next_says_or_at_a_refusal() {
        let p = pool(8);
        let t = LentBuffers::new(&p);
        let mut v = Vec::new();
        p.alloc_bulk(4, &mut v);
        let addrs: Vec<u64> = v.into_iter().map(|pk| t.lend(pk).unwrap()).collect();
        let mut back = t.take_backs();
        let mut batch = Vec::new();
        let run = back.take_run(&mut batch, 4, |k| (k < 2).then(|| (addrs[k], 128, 60)));
        assert_eq!(
            (run.decoded, run.taken, run.bytes, run.refused),
            (2, 2, 120, None)
        );
        // Taken already: refused, consumed, and the run stops there.
        let again = [addrs[1], addrs[2]];
        let run = back.take_run(&mut batch, 2, |k| Some((again[k], 128, 60)));
        assert_eq!(
            (run.decoded, run.taken, run.refused),
            (1, 0, Some(NotLent::NotLent(addrs[1])))
        );
        let run = back.take_run(&mut batch, 1, |_| Some((addrs[2], 2000, 600)));
        assert!(matches!(run.refused, Some(NotLent::TooLong { .. })));
        let run = back.take_run(&mut batch, 2, |k| Some((addrs[2 + k], 128, 64)));
        assert_eq!((run.decoded, run.taken), (2, 2));
        assert_eq!(t.lent(), 4, "counted when the run ends");
        drop(back);
        assert_eq!((t.lent(), batch.len()), (0, 4));
        assert_eq!(batch[0].buf_iova(), addrs[0]);
        assert_eq!((batch[3].len(), batch[3].headroom()), (64, 128));
    }

    #[test]
    fn a_packet_of_another_pool_is_refused() {
        let (a, b) = (pool(4), pool(4));
        let t = LentBuffers::new(&a);
        let pk = b.alloc().unwrap();
        assert!(t.lend(pk).is_err());
        assert_eq!(t.lent(), 0);
    }

    #[test]
    fn buffers_lent_on_one_thread_come_back_on_another() {
        let p = pool(256);
        let t = Arc::new(LentBuffers::new(&p));
        let mut v = Vec::new();
        p.alloc_bulk(256, &mut v);
        let addrs: Vec<u64> = v.into_iter().map(|pk| t.lend(pk).unwrap()).collect();
        let t2 = t.clone();
        std::thread::spawn(move || {
            for a in addrs {
                drop(t2.take_back(a, 128, 60, Meta::default()).unwrap());
            }
        })
        .join()
        .unwrap();
        assert_eq!(t.lent(), 0);
        p.flush_thread_cache();
        assert_eq!(p.stats().in_use, 0);
    }
}
