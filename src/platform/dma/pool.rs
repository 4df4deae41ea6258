//! The packet buffer pool and the [`Packet`] that owns one buffer.
//!
//! Why it looks like this:
//! - Buffers are fixed-size slots in one [`DmaMemory`] block, so a buffer is named by its byte
//!   offset in the block: its address is `base + offset`, its bus address `iova + offset`, and
//!   no per-buffer bookkeeping lives in DMA memory. Offsets rather than indices because the
//!   per-packet paths then add instead of multiplying (a pool is at most 4 GiB).
//! - Free buffers wait in the freeing thread's cache, a LIFO stack of offsets per pool (the
//!   buffer freed last, still warm in cache, is the one handed out next), and go home to the
//!   pool in lock-free batches when that thread frees more than it allocates
//!   (`platform::dma::recycle`, private: page_pool's and DPDK mempool's fast and slow paths).
//! - Descriptor rings keep offsets, not packets, in their slots ([`super::slots`]): a
//!   [`Packet`] is built only when a frame is handed to the application.
//! - Every buffer has `headroom` bytes in front of the frame; software VLAN insertion prepends the
//!   4-byte tag there and moves only the 12 MAC bytes.
//! - Bursts allocate and free in bulk: one cache operation per burst, not per packet, with no
//!   atomic read-modify-write and no lock when the buffers are freed on the allocating thread.
//!   Freeing on any other thread is just as sound (a pipeline's transmit stage does it all the
//!   time): the buffers come home through the lock-free path.
//! - The pool's memory is freed only when the last handle *and* the last buffer are gone: a
//!   packet can outlive every [`Pool`] handle (it keeps the memory alive), so no buffer can ever
//!   point into unmapped memory.

use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use super::memory::{DmaMapper, DmaMemory};
use super::recycle::{self, Home, PoolRef};
use crate::error::{Error, Result};

/// How a pool is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    /// Number of buffers.
    pub buffers: usize,
    /// Bytes per buffer, headroom included. A multiple of 128 (descriptor alignment) and at
    /// most [`MAX_BUF_SIZE`] (32,640): longer frames are chains of buffers.
    pub buf_size: usize,
    /// Bytes reserved in front of the frame (at least 128).
    pub headroom: usize,
}

impl Default for PoolConfig {
    /// 4,096 buffers of 2,048 + 128 bytes: one 2 KiB receive buffer behind the headroom.
    fn default() -> Self {
        PoolConfig {
            buffers: 4096,
            buf_size: 2048 + 128,
            headroom: 128,
        }
    }
}

/// Counters of a pool, as the calling thread sees them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Buffers in the pool.
    pub capacity: usize,
    /// Buffers this thread could allocate now: at the pool's home and in this thread's cache.
    pub free: usize,
    /// The others: owned by packets (in the application or in a device ring), or waiting in
    /// another thread's cache (see [`Pool::flush_thread_cache`]).
    pub in_use: usize,
    /// Allocation requests that could not be met in full (pool exhausted).
    pub alloc_failures: u64,
    /// Buffers that went home from a thread's cache so far: the slow path, taken by buffers
    /// freed on a thread that frees more than it allocates (a pipeline's transmit stage), and
    /// when a thread exits or flushes. A one-core forwarding loop in its steady state adds
    /// nothing here.
    pub slow_returns: u64,
}

/// The shared part of a pool; freed by whoever drops the last handle or the last buffer.
pub(super) struct Shared {
    mem: DmaMemory,
    pub(super) base: NonNull<u8>,
    pub(super) iova: u64,
    pub(super) buf_size: usize,
    pub(super) headroom: u16,
    capacity: usize,
    /// Free buffers not in any thread's cache, and the count of handles and buffers away.
    pub(super) home: Home,
    /// Which DMA domain (IOMMU container, software IOMMU, identity) the buffers are mapped in
    /// ([`DmaMapper::domain`]), compared by [`crate::platform::dma::slots::TxSlots`].
    pub(super) domain: usize,
    /// Each buffer's [`Ext`], by buffer index (offset / `buf_size`).
    pub(super) ext: Box<[std::cell::UnsafeCell<Ext>]>,
}

impl Shared {
    /// The pool `ptr` points to, as [`super::recycle`] sees it.
    ///
    /// # Safety
    /// `ptr` points to a live `Shared` created by `Pool::new`.
    #[inline(always)]
    pub(super) unsafe fn pool_ref(ptr: NonNull<Shared>) -> PoolRef {
        // SAFETY: live, as the caller guarantees.
        let home = NonNull::from(unsafe { &ptr.as_ref().home });
        PoolRef {
            key: ptr.cast(),
            home,
            free: Shared::free,
        }
    }

    /// Frees the pool (its memory is unmapped).
    ///
    /// # Safety
    /// `key` is a `Shared` made by `Pool::new` that nothing refers to any more: no handle, no
    /// buffer away from home ([`super::recycle`] calls this once, when the count reaches 0).
    unsafe fn free(key: NonNull<()>) {
        // SAFETY: as the caller guarantees, we own the box.
        drop(unsafe { Box::from_raw(key.cast::<Shared>().as_ptr()) });
    }

    #[inline(always)]
    /// Returns buffer offsets (`a`, then `b`) to the pool, through this thread's cache; frees
    /// the pool if nothing references it any more. Nothing to return (`a` and `b` empty)
    /// touches nothing: `ptr` may then be a pool that is gone (an empty transmit run of a pool
    /// freed since).
    ///
    /// # Safety
    /// `ptr` must point to a live `Shared` created by `Pool::new`, and each offset must come from
    /// a buffer this pool handed out that is not referenced any more.
    pub(super) unsafe fn release(ptr: NonNull<Shared>, a: &[u32], b: &[u32]) {
        if a.is_empty() && b.is_empty() {
            return;
        }
        // SAFETY: as the caller guarantees (the buffers keep the pool alive during the call).
        unsafe { recycle::give(Shared::pool_ref(ptr), a, b) };
    }

    /// [`Shared::release`] straight home, past this thread's cache (a ring going away).
    ///
    /// # Safety
    /// As for [`Shared::release`].
    pub(super) unsafe fn release_home(ptr: NonNull<Shared>, a: &[u32], b: &[u32]) {
        if a.is_empty() && b.is_empty() {
            return;
        }
        // SAFETY: as the caller guarantees.
        unsafe { recycle::give_home(Shared::pool_ref(ptr), a, b) };
    }

    /// [`Shared::take`] without this thread's cache, for setting up a ring (see
    /// `recycle::take_uncached`).
    ///
    /// # Safety
    /// As for [`Shared::take`].
    #[inline(always)]
    pub(super) unsafe fn take_uncached(
        ptr: NonNull<Shared>,
        n: usize,
        f: impl FnMut(&[u32]),
    ) -> usize {
        // SAFETY: as the caller guarantees.
        unsafe { recycle::take_uncached(Shared::pool_ref(ptr), n, f) }
    }

    #[inline(always)]
    /// Takes up to `n` free buffers, passing them to `f` in runs (each run's next buffer to
    /// use last); returns how many. The caller counts a shortfall.
    ///
    /// # Safety
    /// `ptr` points to a live `Shared` whose handle the caller holds; the buffers passed to `f`
    /// are the caller's from then on.
    pub(super) unsafe fn take(ptr: NonNull<Shared>, n: usize, f: impl FnMut(&[u32])) -> usize {
        // SAFETY: as the caller guarantees.
        unsafe { recycle::take(Shared::pool_ref(ptr), n, f) }
    }
}

/// A handle to a buffer pool. Cloning makes another handle to the same pool.
pub struct Pool {
    shared: NonNull<Shared>,
}

// SAFETY: `Shared`'s mutable state is atomic or a lock-free queue; caches are thread-local;
// each buffer, and its `Ext` (reached only through the owning packet, `dma::chain`), is owned
// by one packet; the DMA memory is Send + Sync.
unsafe impl Send for Pool {}
// SAFETY: see `Send`.
unsafe impl Sync for Pool {}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("buf_size", &self.buf_size())
            .field("stats", &self.stats())
            .finish()
    }
}

/// The identity of a DMA domain ([`DmaMapper::domain`]: every VFIO port of a process shares
/// one container, every sim port one software IOMMU, every identity mapper one address space).
pub(crate) fn domain_of(m: &Arc<dyn DmaMapper>) -> usize {
    m.domain()
}

impl Pool {
    /// Allocates the pool's DMA memory through `mapper`.
    pub fn new(config: PoolConfig, mapper: Arc<dyn DmaMapper>) -> Result<Pool> {
        if config.buffers == 0 || config.buffers > u32::MAX as usize {
            return Err(Error::InvalidConfig(format!(
                "a pool needs between 1 and {} buffers, not {}",
                u32::MAX,
                config.buffers
            )));
        }
        if config.buf_size % 128 != 0 || config.buf_size > MAX_BUF_SIZE {
            return Err(Error::InvalidConfig(format!(
                "buffer size {} must be a multiple of 128 and at most {MAX_BUF_SIZE} (longer frames are chains of buffers)",
                config.buf_size
            )));
        }
        // checked: a huge headroom must not wrap around past the bound (and then be truncated
        // to 16 bits below)
        if config.headroom < 128
            || config
                .headroom
                .checked_add(64)
                .is_none_or(|end| end > config.buf_size)
        {
            return Err(Error::InvalidConfig(format!(
                "headroom {} must be at least 128 and leave room for a 64-byte frame in {}-byte buffers",
                config.headroom, config.buf_size
            )));
        }
        if config.buffers as u64 * config.buf_size as u64 > 1 << 32 {
            return Err(Error::InvalidConfig(format!(
                "a pool is at most 4 GiB ({} buffers of {} bytes is more); use fewer buffers or several pools",
                config.buffers, config.buf_size
            )));
        }
        let mem = DmaMemory::allocate(config.buffers * config.buf_size, mapper)?;
        let base = NonNull::new(mem.as_ptr()).expect("DMA memory is never null");
        let iova = mem.iova();
        // Reverse order so that the first allocations get the lowest addresses.
        let free: Vec<u32> = (0..config.buffers)
            .rev()
            .map(|i| (i * config.buf_size) as u32)
            .collect();
        let home = Home::new(&free);
        let shared = Box::new(Shared {
            domain: domain_of(mem.mapper()),
            mem,
            base,
            iova,
            buf_size: config.buf_size,
            // fits: headroom + 64 <= buf_size <= MAX_BUF_SIZE, checked above
            headroom: u16::try_from(config.headroom).expect("headroom checked above"),
            capacity: config.buffers,
            home,
            ext: (0..config.buffers).map(|_| Default::default()).collect(),
        });
        Ok(Pool {
            shared: NonNull::from(Box::leak(shared)),
        })
    }

    /// The shared part, for the ring slot types of this module's siblings.
    #[inline(always)]
    pub(super) fn shared_ptr(&self) -> NonNull<Shared> {
        self.shared
    }

    #[inline(always)]
    pub(super) fn shared(&self) -> &Shared {
        // SAFETY: a live handle keeps `Shared` allocated (handles > 0).
        unsafe { self.shared.as_ref() }
    }

    /// Bytes per buffer, headroom included.
    pub fn buf_size(&self) -> usize {
        self.shared().buf_size
    }

    /// Headroom in front of every new packet.
    pub fn headroom(&self) -> usize {
        self.shared().headroom as usize
    }

    /// The DMA memory backing the pool, for this crate's rings and models only: its safe
    /// byte and word accessors could write bytes that a live [`Packet::data_mut`] slice covers,
    /// so it is not handed to code outside the crate. Outside, use [`Pool::iova`],
    /// [`Pool::mem_len`] and [`Pool::mapper`].
    ///
    /// ```compile_fail
    /// # fn f(pool: &vfio_nic::platform::dma::Pool) {
    /// pool.memory().write_bytes(0, &[0; 4]); // not public: could alias a packet's bytes
    /// # }
    /// ```
    pub(crate) fn memory(&self) -> &DmaMemory {
        &self.shared().mem
    }

    /// Bus address (IOVA) of the pool's first byte: buffers lie in `iova()..iova() + mem_len()`.
    pub fn iova(&self) -> u64 {
        self.shared().mem.iova()
    }

    /// Bytes of DMA memory the pool spans (all its buffers).
    pub fn mem_len(&self) -> usize {
        self.shared().mem.len()
    }

    /// The mapper through which the pool's memory is visible to a device (the DMA domain).
    pub fn mapper(&self) -> &Arc<dyn DmaMapper> {
        self.shared().mem.mapper()
    }

    /// Whether two handles refer to the same pool.
    pub fn same_pool(&self, other: &Pool) -> bool {
        self.shared == other.shared
    }

    /// Current counters, as this thread sees them (buffers in other threads' caches are not
    /// free here).
    pub fn stats(&self) -> PoolStats {
        let s = self.shared();
        // SAFETY: this handle keeps the pool alive.
        let here = recycle::cached_here(unsafe { Shared::pool_ref(self.shared) });
        let free = (s.home.at_home() + here).min(s.capacity);
        PoolStats {
            capacity: s.capacity,
            free,
            in_use: s.capacity - free,
            alloc_failures: s.home.failures(),
            slow_returns: s.home.homecomings(),
        }
    }

    /// Sends the free buffers of this pool that this thread's cache holds home, where any
    /// thread can allocate them. A pipeline stage that frees buffers and then stops for a
    /// while (or for good, without exiting) calls it; a thread that exits does it anyway.
    pub fn flush_thread_cache(&self) {
        // SAFETY: this handle keeps the pool alive.
        unsafe { recycle::flush_here(Shared::pool_ref(self.shared)) };
    }

    /// Allocates one packet of length 0, or `None` when the pool is exhausted.
    pub fn alloc(&self) -> Option<Packet> {
        let mut v = Vec::with_capacity(1);
        (self.alloc_bulk(1, &mut v) == 1).then(|| v.pop().expect("one packet"))
    }

    /// Appends up to `n` fresh packets (length 0, headroom reset, metadata cleared) to `out`.
    /// Returns how many it could allocate; a short count is recorded in `alloc_failures`.
    #[inline]
    pub fn alloc_bulk(&self, n: usize, out: &mut Vec<Packet>) -> usize {
        self.alloc_with_len(n, 0, out)
    }

    /// Appends up to `n` packets of length `len` (contents: whatever the buffers held, or
    /// zeros when new) to `out`; `len` is clamped to the buffer. This is the allocation of
    /// receive paths that fill the frame afterwards.
    #[inline]
    pub fn alloc_bulk_len(&self, n: usize, len: usize, out: &mut Vec<Packet>) -> usize {
        let room = self.buf_size() - self.headroom();
        // fits: room <= MAX_BUF_SIZE
        self.alloc_with_len(n, len.min(room) as u16, out)
    }

    /// [`alloc_bulk_len`](Self::alloc_bulk_len) with `len` already clamped: one thread-local
    /// look-up per burst, then a loop that builds each packet with four stores.
    #[inline(always)]
    fn alloc_with_len(&self, n: usize, len: u16, out: &mut Vec<Packet>) -> usize {
        let s = self.shared();
        let (shared, headroom) = (self.shared, s.headroom);
        let data_iova = s.iova + u64::from(headroom);
        let loc = u64::from(headroom) << 32 | u64::from(len) << 48;
        // `move`: the closure keeps its own copies of the three words, so the loop need not
        // load them again after every store into `out`.
        let to_packets = move |run: &[u32]| {
            out.extend(run.iter().rev().map(|&off| {
                // SAFETY: `off` is the offset of a free buffer of this pool, handed over to
                // the new packet alone; `headroom + len` fits the buffer (clamped above).
                unsafe {
                    Packet::from_dma(
                        shared,
                        data_iova + u64::from(off),
                        loc | u64::from(off),
                        Meta::default(),
                    )
                }
            }));
        };
        // SAFETY: this handle keeps the pool alive; the buffers taken are ours.
        let got = unsafe { Shared::take(shared, n, to_packets) };
        if got < n {
            s.home.count_failure();
        }
        got
    }

    /// Frees every packet of `batch`, which is left empty with its room kept: the free of a
    /// burst (DPDK's `rte_pktmbuf_free_bulk`). The usual burst, packets of one pool with
    /// neither segments nor an offload request, costs a pass to check that and a pass that
    /// puts their offsets on this thread's free stack; any other goes through
    /// [`Pool::free_bulk`].
    #[inline]
    pub fn free_vec(batch: &mut Vec<Packet>) {
        let Some(first) = batch.first() else {
            return;
        };
        let pool = first.pool;
        if pool.addr().get() & EXT != 0 || batch.iter().any(|p| p.pool != pool) {
            Pool::free_bulk(batch.drain(..));
            return;
        }
        let n = batch.len();
        // SAFETY: the packets leave the vector unfreed; their buffers go to the pool below,
        // where nothing else refers to them (should anything panic first, they are lost, never
        // freed twice). Their bytes stay where they are, initialised, for the read below.
        unsafe { batch.set_len(0) };
        // SAFETY: the `n` packets just left behind in the vector's buffer, which nothing
        // writes until this function returns.
        let gone = unsafe { std::slice::from_raw_parts(batch.as_ptr(), n) };
        // SAFETY: every packet is of `pool` (unmarked, so the pointer is the pool's) and owned
        // its buffer alone; they keep the pool alive during the call.
        unsafe {
            recycle::give_with(Shared::pool_ref(pool), n, |stack| {
                stack.extend(gone.iter().map(Packet::off))
            })
        };
    }

    /// Returns packets to their pools, one cache operation per run of up to 64 packets from
    /// the same pool. Packets of other pools are fine; they go home.
    #[inline]
    pub fn free_bulk(packets: impl IntoIterator<Item = Packet>) {
        let mut run = [0u32; 64];
        let mut k = 0;
        let mut cur: Option<NonNull<Shared>> = None;
        for mut p in packets {
            if p.is_chained() {
                Pool::free_bulk(p.take_segments());
            }
            let p = std::mem::ManuallyDrop::new(p);
            let pool = p.shared_ptr();
            if cur != Some(pool) || k == run.len() {
                if let Some(c) = cur {
                    // SAFETY: the run's buffers are of `c` (kept alive by them) and were
                    // owned by packets that are gone (forgotten, not dropped).
                    unsafe { Shared::release(c, &run[..k], &[]) };
                }
                cur = Some(pool);
                k = 0;
            }
            run[k] = p.off();
            k += 1;
        }
        if let Some(c) = cur {
            // SAFETY: as above.
            unsafe { Shared::release(c, &run[..k], &[]) };
        }
    }
}

impl Pool {
    /// A new handle of the pool whose shared state `shared` is.
    ///
    /// # Safety
    /// `shared` must be the `Shared` of a live pool or packet (its handle count or a buffer
    /// out keeps it allocated during the call).
    pub(super) unsafe fn from_shared(shared: NonNull<Shared>) -> Pool {
        let p = std::mem::ManuallyDrop::new(Pool { shared });
        // A clone counts the new handle; the borrowed one is not dropped.
        Pool::clone(&p)
    }
}

impl Clone for Pool {
    fn clone(&self) -> Self {
        self.shared().home.add_handle();
        Pool {
            shared: self.shared,
        }
    }
}

impl Drop for Pool {
    /// Drops the handle. The pool's memory goes with the last handle or the last buffer,
    /// whichever is later.
    fn drop(&mut self) {
        // SAFETY: this handle is given up here and not used again.
        unsafe { recycle::drop_handle(Shared::pool_ref(self.shared)) };
    }
}

/// Per-packet metadata: what the device or the driver learnt about the frame, and what the
/// application asks of the transmitter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Meta {
    /// The VLAN TCI (PCP, DEI, VID). Meaningful when `flags` has [`Meta::VLAN_STRIPPED`] (it was
    /// removed from the frame on receive) or [`Meta::TX_VLAN`] (insert it on transmit).
    pub vlan_tci: u16,
    /// Bit flags, see the associated constants.
    pub flags: u16,
    /// RSS hash reported by the device (0 when none).
    pub rss_hash: u32,
}

/// A transmit offload request: what to compute ([`TxOffload::IP_CSUM`],
/// [`TxOffload::TCP_CSUM`], [`TxOffload::UDP_CSUM`], [`TxOffload::TSO`]), where the headers
/// are and TSO's segment size (DPDK's `RTE_MBUF_F_TX_*` flags with the l2/l3/l4 lengths and
/// `tso_segsz` of an mbuf). Set with [`Packet::set_tx_offload`].
///
/// Kept beside the packet (in its pool, one per buffer) rather than in [`Meta`]: a larger
/// packet cost the forwarding path 3 instructions per packet for every 8 bytes, and an offload
/// bit in `Meta::flags` that the transmit loop tests cost 4 more (`bench/instructions`), for
/// what only frames with offloads read. Setting a request marks the packet (bit 0 of its pool
/// pointer), so the transmit loop stops at it with the compare it makes anyway.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TxOffload {
    /// What to compute: bits of [`TxOffload::IP_CSUM`], [`TxOffload::TCP_CSUM`],
    /// [`TxOffload::UDP_CSUM`], [`TxOffload::TSO`].
    pub flags: u16,
    /// Bytes of the L2 header (Ethernet and any tags in the frame).
    pub l2_len: u8,
    /// Bytes of the L4 header (TCP with options; 8 for UDP). TSO needs it.
    pub l4_len: u8,
    /// Bytes of the L3 header (IPv4 with options, IPv6 with extensions).
    pub l3_len: u16,
    /// TSO: the most TCP payload bytes per segment (the MSS). 0 with [`TxOffload::TSO`] is
    /// refused.
    pub tso_mss: u16,
}

impl TxOffload {
    /// Write the IPv4 header checksum (`l2_len` and `l3_len` say where the header is).
    pub const IP_CSUM: u16 = 1 << 0;
    /// Write the TCP checksum (pseudo-header included) over the whole frame behind
    /// `l2_len + l3_len`. The application leaves the field as it likes: the driver prepares it.
    pub const TCP_CSUM: u16 = 1 << 1;
    /// Write the UDP checksum, as [`TxOffload::TCP_CSUM`] does TCP's (a sum of 0 is sent as
    /// 0xffff, RFC 768).
    pub const UDP_CSUM: u16 = 1 << 2;
    /// TCP segmentation. The frame (usually chained) is one header of
    /// `l2_len + l3_len + l4_len` bytes and a payload; it leaves as frames of that header and
    /// at most `tso_mss` payload bytes each, with IPv4 total length, identification (+1 per
    /// segment) and header checksum, TCP sequence number and checksum per segment, and the TCP
    /// flags the 82599's default masks leave (DTXTCPFLGL/H: FIN and PSH on the last segment
    /// only, CWR cleared on the last). Implies [`TxOffload::TCP_CSUM`] and, for IPv4,
    /// [`TxOffload::IP_CSUM`].
    pub const TSO: u16 = 1 << 3;
    /// Every request bit.
    pub const ALL: u16 = Self::IP_CSUM | Self::TCP_CSUM | Self::UDP_CSUM | Self::TSO;
}

impl Meta {
    /// The frame's outermost tag was removed on receive and is in `vlan_tci`.
    pub const VLAN_STRIPPED: u16 = 1 << 0;
    /// Insert `vlan_tci` on transmit.
    pub const TX_VLAN: u16 = 1 << 1;
    /// The device checked the IPv4 header checksum and it was good.
    pub const RX_IP_CSUM_OK: u16 = 1 << 2;
    /// The device checked the IPv4 header checksum and it was bad.
    pub const RX_IP_CSUM_BAD: u16 = 1 << 3;
    /// The device checked the L4 checksum and it was good.
    pub const RX_L4_CSUM_OK: u16 = 1 << 4;
    /// The device checked the L4 checksum and it was bad.
    pub const RX_L4_CSUM_BAD: u16 = 1 << 5;
    /// `rss_hash` is valid.
    pub const RX_RSS_HASH: u16 = 1 << 6;
    /// The device set its "VLAN packet" bit (informational: on the 82599 it does not mean stripped).
    pub const RX_VLAN_SEEN: u16 = 1 << 7;
    /// The receive-side VLAN work on this packet is done and found no tag to remove: the VLAN
    /// layer (or a driver that knows it from the descriptor) saw an untagged or
    /// [`Meta::VLAN_MALFORMED`] frame, or the application replaced the receive tag by a transmit
    /// tag. Asking for the tag again answers "none" without reading the frame.
    pub const VLAN_HANDLED: u16 = 1 << 8;
    /// The frame's ethertype says "tagged" but it is too short to hold the tag and an ethertype;
    /// it is delivered as is and reported untagged (set with [`Meta::VLAN_HANDLED`]).
    pub const VLAN_MALFORMED: u16 = 1 << 9;

    /// Metadata from its low half as one word (TCI in bits 15:0, flags in bits 31:16), the form
    /// the receive fast path computes it in; no RSS hash.
    #[inline(always)]
    pub fn from_low(word: u32) -> Meta {
        Meta {
            vlan_tci: word as u16,
            flags: (word >> 16) as u16,
            rss_hash: 0,
        }
    }

    /// Whether all bits of `flag` are set.
    #[inline(always)]
    pub fn has(&self, flag: u16) -> bool {
        self.flags & flag == flag
    }
}

/// Bit 0 of a packet's pool pointer (a pool's shared state is 8-byte aligned, so the bit is
/// free): its buffer's [`Ext`] holds something, further segments of the frame or a transmit
/// offload request (`platform::dma::chain`). The transmit loop compares a packet's pool
/// pointer with the pool of its run anyway, so a marked packet stops it for nothing more.
pub(super) const EXT: usize = 1;
/// The largest buffer (a frame length is 16 bits); longer frames are chains.
pub const MAX_BUF_SIZE: usize = 65408;

/// What a buffer carries beside its bytes, while a packet owns it: the further segments of a
/// chained frame and the transmit offload lengths. One per buffer, in the pool (not in DMA
/// memory, where a device could write it), reached only through the packet that owns the
/// buffer, exactly as its bytes are.
#[derive(Default)]
pub(super) struct Ext {
    /// The segments after the head (meaningful while the head's [`EXT`] bit is set).
    pub(super) segs: Vec<Packet>,
    /// The offload request (meaningful while the head's [`EXT`] bit is set).
    pub(super) tx: TxOffload,
}

/// One frame in one pool buffer (or, chained, in several).
///
/// The packet owns its buffer exclusively: while the application holds it no device can touch
/// the bytes, so it is safe to look at them as a slice. Dropping it returns the buffer to its
/// pool (prefer [`Pool::free_bulk`] for many at once).
#[repr(C)]
pub struct Packet {
    /// The pool's shared state, with [`EXT`] in bit 0 ([`Packet::shared_ptr`] is the pointer).
    pub(super) pool: NonNull<Shared>,
    /// Bus address of the first frame byte (kept in step with `data`, so that a transmit
    /// descriptor takes it as is).
    dma: u64,
    /// Bits 31:0: offset of the buffer in its pool (what goes back on the free stack);
    /// bits 47:32: headroom (where the frame starts in the buffer); bits 63:48: frame length.
    /// One word, so that building a packet is one store for the three.
    loc: u64,
    /// Metadata (VLAN, checksum flags, RSS hash, transmit offload requests).
    pub meta: Meta,
}

// SAFETY: the packet owns its buffer exclusively and its pool's shared state is synchronized, so
// it may be moved to (and dropped on) another thread.
unsafe impl Send for Packet {}

impl fmt::Debug for Packet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Packet")
            .field("offset", &self.off())
            .field("headroom", &self.hr())
            .field("len", &self.ln())
            .field("meta", &self.meta)
            .finish()
    }
}

impl Packet {
    #[inline(always)]
    /// The packet owning the buffer at offset `off` of the pool `shared` points to;
    /// `data_iova` is the pool's bus address plus `data` (passed in so that loops compute it
    /// once). A packet is 32 bytes: the buffer's address is not kept but computed from the
    /// pool's base when the frame is read, which the forwarding path never does.
    ///
    /// # Safety
    /// `shared` is a live pool with that bus address, `off` one of its buffers owned by nobody
    /// else (off the free stack, in no other packet or slot), and `data + len` fits in it.
    pub(super) unsafe fn from_parts(
        shared: NonNull<Shared>,
        data_iova: u64,
        off: u32,
        data: u16,
        len: u16,
        meta: Meta,
    ) -> Packet {
        Packet {
            pool: shared,
            dma: data_iova + u64::from(off),
            loc: u64::from(off) | u64::from(data) << 32 | u64::from(len) << 48,
            meta,
        }
    }

    #[inline(always)]
    /// [`from_parts`](Self::from_parts) for a loop that keeps frame bus addresses: `dma` is
    /// the frame's bus address and `loc` the location word (offset, headroom << 32,
    /// length << 48) that goes with it.
    ///
    /// # Safety
    /// As for `from_parts`, with `dma` = the pool's bus address + offset + headroom (`loc`).
    pub(super) unsafe fn from_dma(
        shared: NonNull<Shared>,
        dma: u64,
        loc: u64,
        meta: Meta,
    ) -> Packet {
        Packet {
            pool: shared,
            dma,
            loc,
            meta,
        }
    }

    /// Offset of the buffer in its pool.
    #[inline(always)]
    pub(super) fn off(&self) -> u32 {
        self.loc as u32
    }

    #[inline(always)]
    fn hr(&self) -> u16 {
        (self.loc >> 32) as u16
    }

    #[inline(always)]
    fn ln(&self) -> u16 {
        (self.loc >> 48) as u16
    }

    #[inline(always)]
    fn set_hr_ln(&mut self, hr: u16, ln: u16) {
        self.loc = self.loc & 0xffff_ffff | u64::from(hr) << 32 | u64::from(ln) << 48;
    }

    /// The pool's shared state ([`Packet::pool`] without the [`EXT`] bit).
    #[inline(always)]
    pub(super) fn shared_ptr(&self) -> NonNull<Shared> {
        self.pool.map_addr(|a| {
            std::num::NonZeroUsize::new(a.get() & !EXT).expect("a pool pointer is never 0")
        })
    }

    /// Whether the [`EXT`] bit is set.
    #[inline(always)]
    pub(super) fn has_ext(&self) -> bool {
        self.pool.addr().get() & EXT != 0
    }

    /// Sets or clears the [`EXT`] bit.
    #[inline(always)]
    pub(super) fn set_ext(&mut self, on: bool) {
        self.pool = self.shared_ptr().map_addr(|a| a | if on { EXT } else { 0 });
    }

    /// Bytes per buffer of the packet's pool, headroom included.
    #[inline(always)]
    pub fn buf_size(&self) -> usize {
        // SAFETY: a packet keeps its pool's `Shared` alive.
        unsafe { self.shared_ptr().as_ref() }.buf_size
    }

    /// Address of the first frame byte.
    #[inline(always)]
    fn start(&self) -> *mut u8 {
        // SAFETY: a packet keeps its pool's `Shared` alive; `off + data` is inside the pool's
        // memory (`off` is one of its buffers and `data <= buf_size`).
        unsafe {
            self.shared_ptr()
                .as_ref()
                .base
                .as_ptr()
                .add(self.off() as usize + self.hr() as usize)
        }
    }

    /// The frame.
    #[inline(always)]
    pub fn data(&self) -> &[u8] {
        // (Checked by loom in the model-checking build, where the pool's bytes are declared.)
        super::word::copied_from(self.start(), self.ln() as usize);
        // SAFETY: `data + len <= buf_size` is an invariant of every mutator; the buffer is owned
        // by this packet, so no device or other packet writes it while the slice lives.
        unsafe { std::slice::from_raw_parts(self.start(), self.ln() as usize) }
    }

    /// The frame, writable.
    #[inline(always)]
    pub fn data_mut(&mut self) -> &mut [u8] {
        super::word::copied_to(self.start(), self.ln() as usize);
        // SAFETY: as in `data`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.start(), self.ln() as usize) }
    }

    /// Frame length in bytes.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.ln() as usize
    }

    /// Whether the frame is empty.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.ln() == 0
    }

    /// Bytes free in front of the frame.
    #[inline(always)]
    pub fn headroom(&self) -> usize {
        self.hr() as usize
    }

    /// Bytes free behind the frame.
    pub fn tailroom(&self) -> usize {
        self.buf_size() - self.hr() as usize - self.ln() as usize
    }

    /// Largest frame that fits behind the current headroom.
    pub fn capacity(&self) -> usize {
        self.buf_size() - self.hr() as usize
    }

    /// Sets the frame length (bytes beyond the old length keep whatever the buffer held).
    /// Returns false, changing nothing, if it does not fit.
    #[inline]
    pub fn set_len(&mut self, len: usize) -> bool {
        if len > self.capacity() {
            return false;
        }
        self.set_hr_ln(self.hr(), len as u16);
        true
    }

    /// Grows a frame shorter than `len` to `len` bytes with zeros behind it (Ethernet
    /// padding). A frame moved so far back (`pull_front`) that `len` bytes no longer fit
    /// behind it first moves back to the pool's headroom. Returns false, changing nothing,
    /// when `len` bytes do not fit behind the pool's headroom (a buffer always has room for
    /// 64: the pool checks it).
    pub fn pad_to(&mut self, len: usize) -> bool {
        let old = self.len();
        if old >= len {
            return true;
        }
        if self.capacity() < len {
            // SAFETY: a packet keeps its pool's `Shared` alive.
            let headroom = usize::from(unsafe { self.shared_ptr().as_ref() }.headroom);
            if self.buf_size() - headroom < len {
                return false;
            }
            let frame = self.data().to_vec();
            let meta = self.meta;
            self.reset_for_rx();
            self.meta = meta;
            self.set_data(&frame);
        }
        self.set_len(len);
        self.data_mut()[old..].fill(0);
        true
    }

    /// Replaces the frame with `bytes`. Returns false, changing nothing, if it does not fit.
    pub fn set_data(&mut self, bytes: &[u8]) -> bool {
        if !self.set_len(bytes.len()) {
            return false;
        }
        self.data_mut().copy_from_slice(bytes);
        true
    }

    /// Grows the frame at the front by `n` bytes taken from the headroom and returns the whole
    /// new frame, or `None` if the headroom is too small.
    #[inline]
    pub fn push_front(&mut self, n: usize) -> Option<&mut [u8]> {
        if n > self.hr() as usize {
            return None;
        }
        self.set_hr_ln(self.hr() - n as u16, self.ln() + n as u16);
        self.dma -= n as u64;
        Some(self.data_mut())
    }

    /// Removes `n` bytes from the front of the frame (they become headroom). Returns false,
    /// changing nothing, if the frame is shorter than `n`.
    #[inline]
    pub fn pull_front(&mut self, n: usize) -> bool {
        if n > self.ln() as usize {
            return false;
        }
        self.set_hr_ln(self.hr() + n as u16, self.ln() - n as u16);
        self.dma += n as u64;
        true
    }

    /// Bus address of the first frame byte (what a transmit descriptor points at).
    #[inline(always)]
    pub fn data_iova(&self) -> u64 {
        self.dma
    }

    /// Bus address of the buffer start.
    #[inline(always)]
    pub fn buf_iova(&self) -> u64 {
        self.dma - u64::from(self.hr())
    }

    /// Resets the packet for receive: headroom back to the pool default, length 0, metadata
    /// cleared. Returns the bus address a receive descriptor should point at.
    #[inline(always)]
    pub fn reset_for_rx(&mut self) -> u64 {
        // SAFETY: a packet keeps its pool's `Shared` alive.
        let headroom = unsafe { self.shared_ptr().as_ref() }.headroom;
        self.dma = self.buf_iova() + u64::from(headroom);
        self.set_hr_ln(headroom, 0);
        self.meta = Meta::default();
        self.data_iova()
    }

    /// Sets the length a device reported, clamped to the buffer; returns whether it fit.
    #[inline(always)]
    pub fn set_rx_len(&mut self, len: u16) -> bool {
        self.set_len(len as usize)
    }

    /// A handle of the packet's pool.
    pub fn pool_handle(&self) -> Pool {
        // SAFETY: a live packet keeps its pool's `Shared` allocated; the new handle counts.
        unsafe { Pool::from_shared(self.shared_ptr()) }
    }

    /// Whether this packet's buffer belongs to `pool`.
    pub fn is_from(&self, pool: &Pool) -> bool {
        self.shared_ptr() == pool.shared
    }
}

impl Drop for Packet {
    fn drop(&mut self) {
        if self.has_ext() {
            // Before the buffer (and its `Ext`) goes to its next owner.
            drop(self.take_segments());
        }
        // SAFETY: the packet keeps the pool alive, and its buffer is not referenced any more.
        unsafe { Shared::release(self.shared_ptr(), &[self.off()], &[]) };
    }
}

const _: () = assert!(std::mem::size_of::<Packet>() == 32);

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::platform::dma::IdentityMapper;
    use proptest::prelude::*;

    /// A pool of `n` default buffers in plain memory (tests of this module and its siblings).
    pub(in crate::platform::dma) fn pool(n: usize) -> Pool {
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
    fn lifo_reuse_and_counters() {
        let p = pool(8);
        let mut v = Vec::new();
        assert_eq!(p.alloc_bulk(3, &mut v), 3);
        assert_eq!(p.stats().in_use, 3);
        let last = v.last().unwrap().buf_iova();
        drop(v.pop());
        let again = p.alloc().unwrap();
        assert_eq!(
            again.buf_iova(),
            last,
            "the buffer freed last is reused first"
        );
        drop(again);
        Pool::free_bulk(v);
        assert_eq!(p.stats().free, 8);
    }

    #[test]
    fn exhaustion_returns_fewer_and_counts() {
        let p = pool(4);
        let mut v = Vec::new();
        assert_eq!(p.alloc_bulk(6, &mut v), 4);
        assert_eq!(p.stats().alloc_failures, 1);
        assert!(p.alloc().is_none());
        assert_eq!(p.stats().alloc_failures, 2);
    }

    #[test]
    fn headroom_and_frame_views() {
        let p = pool(2);
        let mut pkt = p.alloc().unwrap();
        assert_eq!(pkt.headroom(), 128);
        assert!(pkt.set_data(&[1, 2, 3, 4]));
        let f = pkt.push_front(2).unwrap();
        f[0] = 9;
        f[1] = 8;
        assert_eq!(pkt.data(), &[9, 8, 1, 2, 3, 4]);
        assert_eq!(pkt.headroom(), 126);
        assert!(pkt.pull_front(2));
        assert_eq!(pkt.data(), &[1, 2, 3, 4]);
        assert_eq!(pkt.data_iova(), pkt.buf_iova() + 128);
        assert!(!pkt.set_len(4096));
        assert!(pkt.push_front(200).is_none());
    }

    #[test]
    fn packets_keep_memory_alive_after_last_handle() {
        let p = pool(2);
        let mut pkt = p.alloc().unwrap();
        drop(p);
        assert!(pkt.set_data(b"still here"));
        assert_eq!(pkt.data(), b"still here");
        drop(pkt); // frees the pool; Miri/ASan would flag a leak or use-after-free here
    }

    #[test]
    fn packets_go_home_to_their_own_pool() {
        let a = pool(4);
        let b = pool(4);
        let mut v = Vec::new();
        a.alloc_bulk(2, &mut v);
        b.alloc_bulk(3, &mut v);
        a.alloc_bulk(1, &mut v);
        assert!(v[0].is_from(&a) && v[2].is_from(&b));
        Pool::free_bulk(v);
        assert_eq!(a.stats().free, 4);
        assert_eq!(b.stats().free, 4);
    }

    #[test]
    fn free_vec_frees_a_burst_of_one_pool_on_this_threads_stack() {
        // Large enough that the cache's limit (a quarter of the pool) holds a burst and the
        // rest of the batch it came from.
        let p = pool(1024);
        let mut v = Vec::with_capacity(32);
        assert_eq!(p.alloc_bulk(32, &mut v), 32);
        let last = v[31].buf_iova();
        Pool::free_vec(&mut v);
        assert!(v.is_empty() && v.capacity() >= 32, "emptied, its room kept");
        let s = p.stats();
        assert_eq!(
            (s.free, s.slow_returns),
            (1024, 0),
            "all back, none by the slow path"
        );
        assert_eq!(
            p.alloc().unwrap().buf_iova(),
            last,
            "the last one freed comes first"
        );
    }

    #[test]
    fn free_vec_takes_mixed_pools_and_chains_the_general_way() {
        let (a, b) = (pool(8), pool(8));
        let mut v = Vec::new();
        a.alloc_bulk(2, &mut v);
        b.alloc_bulk(2, &mut v);
        Pool::free_vec(&mut v);
        assert_eq!((a.stats().free, b.stats().free, v.len()), (8, 8, 0));
        let mut head = a.alloc().unwrap();
        head.push_segment(a.alloc().unwrap());
        v.push(head);
        a.alloc_bulk(1, &mut v);
        Pool::free_vec(&mut v);
        assert_eq!(a.stats().free, 8, "the chain's segment went too");
        Pool::free_vec(&mut v);
    }

    #[test]
    fn packets_cross_threads() {
        let p = pool(16);
        let mut v = Vec::new();
        p.alloc_bulk(16, &mut v);
        std::thread::spawn(move || drop(v)).join().unwrap();
        assert_eq!(p.stats().free, 16);
    }

    #[test]
    fn the_memory_goes_with_the_last_buffer_when_it_comes_home_from_another_thread() {
        use std::sync::mpsc::channel;
        use std::time::Duration;
        let m = Arc::new(crate::platform::dma::memory::tests::Spy::default());
        let p = Pool::new(
            PoolConfig {
                buffers: 64,
                ..PoolConfig::default()
            },
            m.clone(),
        )
        .unwrap();
        let mut v = Vec::new();
        assert_eq!(p.alloc_bulk(8, &mut v), 8);
        let (go, wait_go) = channel::<()>();
        let (done, wait_done) = channel::<()>();
        let t = std::thread::spawn(move || {
            let last = v.pop().unwrap();
            drop(v);
            done.send(()).unwrap();
            wait_go.recv_timeout(Duration::from_secs(30)).unwrap();
            drop(last);
        });
        drop(p);
        wait_done
            .recv_timeout(Duration::from_secs(30))
            .expect("the other thread dropped seven packets");
        assert_eq!(m.unmaps(), 0, "one buffer is out: the memory stays");
        go.send(()).unwrap();
        t.join().unwrap();
        assert_eq!(m.unmaps(), 1, "the last buffer came home: unmapped");
    }

    #[test]
    fn buffers_cached_by_another_thread_come_home_when_it_flushes() {
        use std::sync::mpsc::channel;
        use std::time::Duration;
        let p = pool(64);
        let mut v = Vec::new();
        assert_eq!(p.alloc_bulk(64, &mut v), 64);
        let (p2, (go, wait_go), (done, wait_done)) = (p.clone(), channel::<()>(), channel::<()>());
        let t = std::thread::spawn(move || {
            drop(v.split_off(60)); // four: within the cache's limit (16), kept there
            done.send(()).unwrap();
            wait_go.recv_timeout(Duration::from_secs(30)).unwrap();
            p2.flush_thread_cache();
            done.send(()).unwrap();
            wait_go.recv_timeout(Duration::from_secs(30)).unwrap();
            drop(v);
        });
        let wait = || wait_done.recv_timeout(Duration::from_secs(30)).unwrap();
        wait();
        assert_eq!(p.stats().free, 0, "four are in the other thread's cache");
        go.send(()).unwrap();
        wait();
        assert_eq!(p.stats().free, 4, "flushed home");
        go.send(()).unwrap();
        t.join().unwrap();
        assert_eq!(p.stats().free, 64, "the exiting thread's cache went home");
    }

    #[test]
    fn bad_configs_are_refused() {
        let m: Arc<dyn DmaMapper> = Arc::new(IdentityMapper);
        for c in [
            PoolConfig {
                buffers: 0,
                ..Default::default()
            },
            PoolConfig {
                buf_size: 1000,
                ..Default::default()
            },
            PoolConfig {
                headroom: 64,
                ..Default::default()
            },
            // would wrap around the `headroom + 64` bound (and truncate to 16 bits)
            PoolConfig {
                headroom: usize::MAX - 10,
                ..Default::default()
            },
        ] {
            assert!(
                matches!(Pool::new(c, m.clone()), Err(Error::InvalidConfig(_))),
                "{c:?}"
            );
        }
    }

    proptest! {
        #[test]
        fn conservation_under_random_alloc_free(ops in proptest::collection::vec((0usize..40, any::<bool>(), any::<bool>()), 1..300)) {
            let p = pool(64);
            let mut held: Vec<Packet> = Vec::new();
            for (n, free, bulk) in ops {
                if free {
                    let k = n.min(held.len());
                    let out: Vec<Packet> = held.drain(..k).collect();
                    if bulk { Pool::free_bulk(out) } else { drop(out) }
                } else {
                    let before = held.len();
                    let got = p.alloc_bulk(n, &mut held);
                    prop_assert_eq!(held.len(), before + got);
                }
                let s = p.stats();
                prop_assert_eq!(s.free + s.in_use, s.capacity);
                prop_assert_eq!(s.in_use, held.len());
            }
        }

        #[test]
        fn headroom_length_invariants(ops in proptest::collection::vec((0u8..4, 0usize..3000), 1..100)) {
            let p = pool(1);
            let mut pkt = p.alloc().unwrap();
            for (op, n) in ops {
                match op {
                    0 => { pkt.set_len(n); }
                    1 => { pkt.push_front(n % 300); }
                    2 => { pkt.pull_front(n % 300); }
                    _ => { pkt.reset_for_rx(); }
                }
                prop_assert!(pkt.headroom() + pkt.len() + pkt.tailroom() == p.buf_size());
                prop_assert_eq!(pkt.data().len(), pkt.len());
                prop_assert!(pkt.data_iova() >= pkt.buf_iova());
            }
        }
    }
}
