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
//! buffer. [`lend`](LentBuffers::lend) consumes a packet and sets its bit;
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
    /// `buf_size` is `odd << shift`: the buffer index of an offset is the offset times
    /// `odd_inverse` (its inverse modulo 2^64), rotated right by `shift` (see `index`).
    shift: u32,
    odd_inverse: u64,
    /// Buffers in the pool.
    buffers: u64,
    /// Bit `i % 64` of word `i / 64`: buffer `i` is lent.
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
        assert!(buf_size > 0, "a pool's buffers are never empty");
        let shift = buf_size.trailing_zeros();
        LentBuffers {
            pool: pool.clone(),
            shared: pool.shared_ptr(),
            iova: pool.iova(),
            buf_size,
            shift,
            odd_inverse: inverse_mod_2_64((buf_size >> shift) as u64),
            buffers: buffers as u64,
            bits: (0..buffers.div_ceil(64))
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
    /// rest stay in the batch. `send` is called with each packet's buffer address before its
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
        mut send: impl FnMut(u64, &Packet) -> bool,
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
        let mut k = 0;
        while k < most {
            // SAFETY: `k < len`: an initialized packet of the batch's buffer, not moved out
            // (packets before `k` are lent and no longer touched).
            let p = unsafe { &*base.add(k) };
            if !p.is_from(&self.pool) || p.is_chained() {
                break;
            }
            let buf = self.iova + u64::from(p.off());
            if !send(buf, p) {
                break;
            }
            // SAFETY: as above; the packet is consumed here, its ownership going to its bit,
            // and the batch never drops it (its slot is overwritten or cut off below).
            self.set_bit(std::mem::ManuallyDrop::new(unsafe { base.add(k).read() }));
            k += 1;
        }
        // SAFETY: packets `k..len` are initialized and owned by nobody else; they move to the
        // front (the slots of the lent ones, whose packets are not dropped) and the batch owns
        // them again.
        unsafe {
            std::ptr::copy(base.add(k), base, len - k);
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
        let i = self.index(u64::from(p.off())) as usize;
        let was = self.bits[i / 64].fetch_or(1 << (i % 64), Ordering::AcqRel);
        // A packet owns its buffer exclusively, so the buffer cannot be lent already.
        debug_assert_eq!(was & 1 << (i % 64), 0, "buffer {i} lent twice");
        self.iova + u64::from(p.off())
    }

    /// The buffer index of byte offset `rel` in the pool, when `rel` is a multiple of the
    /// buffer size; any other offset gives a number of `buffers` or more (for a pool that
    /// fits 2^64 bytes), so one compare both checks and divides.
    ///
    /// Exact division by the modular inverse (Hacker's Delight, 2nd ed., 10-16; Granlund and
    /// Montgomery 1994): with `buf_size = odd << shift`, `x -> (x * odd^-1) rotr shift` is a
    /// bijection of the 64-bit numbers that maps `q * buf_size` to `q` for every `q` below
    /// 2^(64 - shift), so exactly the buffer starts map below `buffers`. Two instructions
    /// instead of a 64-bit division (the buffer size is a multiple of 128, seldom a power of 2).
    #[inline(always)]
    fn index(&self, rel: u64) -> u64 {
        rel.wrapping_mul(self.odd_inverse).rotate_right(self.shift)
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
            taken: 0,
        }
    }

    /// Clears the bit of the lent buffer at `buf_iova` and builds its packet; the caller
    /// counts it (after this: the count never below the bits).
    #[inline(always)]
    fn claim(&self, buf_iova: u64, offset: u16, len: u32, meta: Meta) -> Result<Packet, NotLent> {
        let rel = buf_iova.wrapping_sub(self.iova);
        // Inside the pool and on a buffer boundary, in one compare (see `index`).
        let i = self.index(rel);
        if i >= self.buffers {
            return Err(NotLent::NotABuffer(buf_iova));
        }
        if usize::from(offset) + len as usize > self.buf_size {
            return Err(NotLent::TooLong {
                offset,
                len,
                buf_size: self.buf_size,
            });
        }
        let i = i as usize;
        let bit = 1u64 << (i % 64);
        // SAFETY: `i < buffers` (checked above) and `bits` has `buffers.div_ceil(64)` words.
        let word = unsafe { self.bits.get_unchecked(i / 64) };
        if word.fetch_and(!bit, Ordering::AcqRel) & bit == 0 {
            return Err(NotLent::NotLent(buf_iova));
        }
        let (off, data) = (rel as u32, self.iova + u64::from(offset));
        // Its bit was set, so `lend` lent it and consumed its packet; the `fetch_and` above,
        // which cleared the bit, gave it to this call alone.
        // SAFETY: the pool is alive (this table holds a handle); `off` is one of its buffers
        // (checked: inside the pool, on a boundary), owned by nobody else (above), and
        // `offset + len` fits it (checked).
        let p = unsafe { Packet::from_parts(self.shared, data, off, offset, len as u16, meta) };
        Ok(p)
    }
}

/// Take-backs from one [`LentBuffers`] whose count moves once, when this goes (see
/// [`LentBuffers::take_backs`]): the count is then above the bits for the run's length,
/// never below them.
pub struct TakeBacks<'a> {
    table: &'a LentBuffers,
    taken: usize,
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

/// The inverse of odd `d` modulo 2^64, by Newton's iteration (Hacker's Delight 10-16): `d` is
/// its own inverse modulo 8, and each step doubles the bits that are right (3, 6, ..., 96).
const fn inverse_mod_2_64(d: u64) -> u64 {
    let mut x = d;
    let mut k = 0;
    while k < 5 {
        x = x.wrapping_mul(2u64.wrapping_sub(d.wrapping_mul(x)));
        k += 1;
    }
    x
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
    fn the_index_divides_exactly_and_refuses_every_other_offset() {
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
            assert_eq!(t.odd_inverse.wrapping_mul((buf_size >> t.shift) as u64), 1);
            for rel in (0..40 * buf_size as u64).step_by(8) {
                let want = (rel % buf_size as u64 == 0 && rel / (buf_size as u64) < 37)
                    .then_some(rel / buf_size as u64);
                let got = Some(t.index(rel)).filter(|&i| i < t.buffers);
                assert_eq!(got, want, "buf_size {buf_size}, offset {rel:#x}");
            }
            for rel in [u64::MAX, u64::MAX - 127, 1 << 63, (1 << 63) + 128, 1] {
                assert!(
                    t.index(rel) >= t.buffers,
                    "buf_size {buf_size}, offset {rel:#x}"
                );
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
            t.lend_run(&mut batch, 8, |a, _| {
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
            t.lend_run(&mut batch, 1, |a, _| {
                fourth = a;
                true
            }),
            1
        );
        assert_eq!(t.lend_run(&mut batch, 8, |_, _| false), 0);
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
