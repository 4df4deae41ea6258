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
//! pool. Bits are atomic, so a transmit queue on one core lends while a receive queue on
//! another takes back (a buffer sent by port B returns to port A's pool). A buffer whose bit is
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
        LentBuffers {
            pool: pool.clone(),
            shared: pool.shared_ptr(),
            iova: pool.iova(),
            buf_size: pool.buf_size(),
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
        let p = std::mem::ManuallyDrop::new(p);
        let i = p.off() as usize / self.buf_size;
        // Counted before the bit is set, so that a take-back racing with this never sees the
        // count below the bits.
        self.lent.fetch_add(1, Ordering::Relaxed);
        let was = self.bits[i / 64].fetch_or(1 << (i % 64), Ordering::AcqRel);
        // A packet owns its buffer exclusively, so the buffer cannot be lent already.
        debug_assert_eq!(was & 1 << (i % 64), 0, "buffer {i} lent twice");
        Ok(self.iova + u64::from(p.off()))
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
        let rel = buf_iova.wrapping_sub(self.iova);
        let bufs = self.buffers;
        if rel % self.buf_size as u64 != 0 || rel / self.buf_size as u64 >= bufs {
            return Err(NotLent::NotABuffer(buf_iova));
        }
        if usize::from(offset) + len as usize > self.buf_size {
            return Err(NotLent::TooLong {
                offset,
                len,
                buf_size: self.buf_size,
            });
        }
        let i = (rel / self.buf_size as u64) as usize;
        let bit = 1u64 << (i % 64);
        if self.bits[i / 64].fetch_and(!bit, Ordering::AcqRel) & bit == 0 {
            return Err(NotLent::NotLent(buf_iova));
        }
        self.lent.fetch_sub(1, Ordering::Relaxed);
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
