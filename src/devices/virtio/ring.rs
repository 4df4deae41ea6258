//! The split virtqueue (virtio 1.2, 2.7): a descriptor table, the available ring the driver
//! writes and the used ring the device writes, in one piece of DMA memory.
//!
//! The discipline is the Intel rings' (`devices/intel/rx.rs`): nothing here makes a Rust
//! reference to memory the device writes; every descriptor and ring word is an atomic load or
//! store of [`DmaMemory`]. Ordering is Linux's (`drivers/virtio/virtio_ring.c`, with the
//! barriers of `include/linux/virtio_ring.h`, from [`crate::platform::barrier`]): the available
//! index is stored after [`virtio_wmb`] (the descriptors and ring entries before it are
//! visible first: `virtqueue_add_split`), the used index is read and then [`virtio_rmb`] (the
//! used entries and the buffers behind it are read after the device wrote them:
//! `virtqueue_get_buf_ctx_split`), and [`virtio_mb`] separates publishing from reading the
//! device's "do not notify" flag (`virtqueue_kick_prepare_split`). Which barriers those are is
//! the ring's [`VirtioOrder`]: the SMP ones unless `VIRTIO_F_ORDER_PLATFORM` was negotiated
//! ([`SplitRing::set_order`]); on x86-64 both kinds compile to the same.
//!
//! A ring trusts nothing the device writes. It keeps the state of every chain by its head
//! descriptor: free (the driver's), queued (in the available ring, not yet published) or held
//! (published: the device's). A used entry naming a descriptor the device does not hold (one
//! it already returned, even if the driver queued it again since, or one never published), or a
//! used index that moved further than the chains published, is a
//! [`QueueError::ProtocolViolation`]: the entry is not consumed, nothing is handed out twice,
//! and the ring refuses every later call.
//!
//! Event suppression without `VIRTIO_F_EVENT_IDX` (not negotiated): the driver sets
//! `VIRTQ_AVAIL_F_NO_INTERRUPT` (it polls), and skips the doorbell while the device sets
//! `VIRTQ_USED_F_NO_NOTIFY`.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use crate::device::{QueueError, Violation};
use crate::error::{Error, Result};
use crate::platform::barrier::{virtio_mb, virtio_rmb, virtio_wmb, VirtioOrder};
use crate::platform::dma::{DmaMapper, DmaMemory, DmaSpan, DmaWords};

/// `VIRTQ_DESC_F_NEXT`: the chain continues in the `next` field.
pub const DESC_F_NEXT: u16 = 1;
/// `VIRTQ_DESC_F_WRITE`: the device writes this buffer (receive).
pub const DESC_F_WRITE: u16 = 2;
/// `VIRTQ_AVAIL_F_NO_INTERRUPT`: the driver polls; the device need not interrupt.
pub const AVAIL_F_NO_INTERRUPT: u16 = 1;
/// `VIRTQ_USED_F_NO_NOTIFY`: the device polls; the driver need not ring the doorbell.
pub const USED_F_NO_NOTIFY: u16 = 1;

/// The largest split queue (virtio 1.2, 2.7: Queue Size is at most 32768).
pub const MAX_SIZE: u16 = 32768;

/// The state of a chain the driver owns (any other value: the publish epoch it was queued in).
const FREE: u32 = 0;

/// Where the parts of a split ring of `size` descriptors sit in its memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Descriptors.
    pub size: u16,
    /// Offset of the available ring (the descriptor table is at 0, 16 bytes per descriptor).
    pub avail: usize,
    /// Offset of the used ring (4-byte aligned: 4 bytes into a page here, so that its
    /// 8-byte elements are 8-byte aligned and each is read as one word).
    pub used: usize,
    /// Offset of the driver's own area behind the rings (headers, control commands).
    pub extra: usize,
    /// Bytes in all.
    pub total: usize,
}

impl Layout {
    /// The layout of a ring of `size` descriptors with `extra` bytes of driver area.
    pub fn new(size: u16, extra: usize) -> Layout {
        let n = usize::from(size);
        let avail = 16 * n;
        let used = (avail + 6 + 2 * n).next_multiple_of(4096) + 4;
        let used_end = used + 6 + 8 * n;
        let extra_at = used_end.next_multiple_of(64);
        Layout {
            size,
            avail,
            used,
            extra: extra_at,
            total: (extra_at + extra).next_multiple_of(4096),
        }
    }
}

/// Checks a queue size: a power of two from 1 to 32768 (what split rings index with a mask;
/// the device's maximum is checked by the caller).
pub fn check_size(size: u16, what: &str) -> Result<()> {
    if size == 0 || !size.is_power_of_two() || size > MAX_SIZE {
        return Err(Error::InvalidConfig(format!(
            "{what}: a virtqueue of {size} descriptors; give a power of two from 1 to {MAX_SIZE}"
        )));
    }
    Ok(())
}

/// Whether a chain in state `s` is held by the device in publish epoch `epoch`: queued in an
/// earlier epoch, so published and not returned ([`RingState::holds`] for one id).
#[inline(always)]
pub fn held(state: &[u32], epoch: u32, id: u32) -> bool {
    state
        .get(id as usize)
        .is_some_and(|&s| held_state(s, epoch))
}

/// Whether a chain in state `s` is held by the device in publish epoch `epoch` ([`held`] of
/// one state).
#[inline(always)]
pub fn held_state(s: u32, epoch: u32) -> bool {
    // Stamps never exceed the current epoch, so `FREE < s < epoch` is one unsigned compare:
    // `s - 1` wraps to the largest value for FREE and equals `epoch - 1` for the current one.
    s.wrapping_sub(1) < epoch.wrapping_sub(1)
}

/// One split virtqueue.
///
/// Its memory is the driver's and the device's alone: the driver copies its own area (control
/// commands, headers) with plain copies while the device holds no chain of it, so no
/// reference to the memory leaves the crate, where safe code could race those copies.
///
/// ```compile_fail,E0599
/// use std::sync::Arc;
/// use vfio_nic::devices::virtio::ring::SplitRing;
/// use vfio_nic::platform::dma::IdentityMapper;
/// let ring = SplitRing::new(8, 64, Arc::new(IdentityMapper)).unwrap();
/// let _ = ring.memory(); // none: the ring's memory does not leave the crate
/// ```
pub struct SplitRing {
    mem: DmaMemory,
    layout: Layout,
    /// The descriptor table, the available ring's entries and the used ring's elements as
    /// word arrays, checked once here ([`burst`](Self::burst) makes their views).
    spans: (DmaSpan<u64>, DmaSpan<u16>, DmaSpan<u64>),
    /// The barriers the device asked for (Linux `weak_barriers`).
    order: VirtioOrder,
    st: RingState,
}

/// The driver's bookkeeping of a ring (everything but its memory), apart so that a burst can
/// hold the ring's word arrays ([`RingView`], borrowing the memory) and change it at once.
pub struct RingState {
    mask: u16,
    /// The driver's next available index (published up to `published`).
    avail_idx: u16,
    published: u16,
    /// The next used entry to read.
    last_used: u16,
    /// The used index last read from the device.
    seen_used: u16,
    /// The state of the chain headed by each descriptor: [`FREE`], or the publish epoch in
    /// which it was queued. A chain queued in the current epoch is not published yet (the
    /// device must not return it); one of an earlier epoch is held by the device. So a publish
    /// hands every queued chain over by counting the epoch on, without touching them.
    state: Box<[u32]>,
    /// The current publish epoch (from 1; [`SplitRing::publish`] counts it on).
    epoch: u32,
    /// Chains the device holds (published, not returned).
    in_flight: u16,
    /// The entry [`SplitRing::peek_used`] returned, which [`SplitRing::consume`] takes.
    peeked: Option<u16>,
    /// A protocol violation was seen: every later call fails with it.
    broken: Option<Violation>,
    /// Every available slot holds the chain of its own number (what posting descriptors
    /// `0..size` in order leaves), so a receive run that queues chain `s` again in slot `s`
    /// finds it there already ([`requeue_parts`](Self::requeue_parts)). Cleared when a chain
    /// goes to a slot of another number.
    avail_identity: bool,
}

/// A ring's descriptor table and rings as word arrays, checked once per burst instead of once
/// per access ([`DmaWords`]): what the burst paths read and write.
#[derive(Clone, Copy)]
pub struct RingView<'m> {
    /// The descriptor table as 64-bit words: the address of descriptor `id` at word `2 id`,
    /// its length, flags and next at word `2 id + 1` (little-endian: length in the low half).
    desc: DmaWords<'m, u64>,
    /// The available ring's entries.
    avail: DmaWords<'m, u16>,
    /// The used ring's elements, one word each: the id in the low half, the length in the
    /// high half (little-endian `struct virtq_used_elem`).
    used: DmaWords<'m, u64>,
}

impl<'m> RingView<'m> {
    /// Writes descriptor `id` whole with no chain (`next` 0): two 64-bit stores. The caller
    /// owns it (the device does not hold its chain).
    #[inline(always)]
    pub fn set_desc(&self, id: u16, addr: u64, len: u32, flags: u16) {
        let at = 2 * usize::from(id);
        self.desc.store(at, addr, Relaxed);
        self.desc
            .store(at + 1, u64::from(len) | u64::from(flags) << 32, Relaxed);
    }

    /// Writes the address of descriptor `id`, keeping its length, flags and next: a receive
    /// descriptor gets a fresh buffer of the same size.
    #[inline(always)]
    pub fn set_addr(&self, id: u16, addr: u64) {
        self.desc.store(2 * usize::from(id), addr, Relaxed);
    }

    /// The used ring's elements (a copy, for a loop to keep in registers): element `slot` is
    /// word `slot`, its id the low half and its length the high half.
    #[inline(always)]
    pub fn used(&self) -> DmaWords<'m, u64> {
        self.used
    }

    /// The available ring's entries (a copy, for a loop to keep in registers).
    #[inline(always)]
    pub fn avail(&self) -> DmaWords<'m, u16> {
        self.avail
    }
}

impl SplitRing {
    /// A ring of `size` descriptors (a power of two) with `extra` bytes of driver area, in
    /// memory mapped through `mapper`. Polled: the device is asked not to interrupt.
    pub fn new(size: u16, extra: usize, mapper: Arc<dyn DmaMapper>) -> Result<SplitRing> {
        check_size(size, "virtqueue")?;
        let layout = Layout::new(size, extra);
        let mem = DmaMemory::allocate(layout.total, mapper)?;
        // The model-checking build: the words the device shares (the descriptor table, the
        // available and used rings) and the driver's area, which it copies plainly.
        #[cfg(loom)]
        {
            let n = usize::from(size);
            mem.loom_words(0, 16 * n);
            mem.loom_words(layout.avail, 6 + 2 * n);
            mem.loom_words(layout.used, 6 + 8 * n);
            mem.loom_bytes(layout.extra, extra);
        }
        mem.store_u16(layout.avail, AVAIL_F_NO_INTERRUPT, Relaxed);
        let n = usize::from(size);
        let spans = (
            mem.span(0, 2 * n),
            mem.span(layout.avail + 4, n),
            mem.span(layout.used + 4, n),
        );
        Ok(SplitRing {
            mem,
            layout,
            spans,
            order: VirtioOrder::Smp,
            st: RingState {
                mask: size - 1,
                avail_idx: 0,
                published: 0,
                last_used: 0,
                seen_used: 0,
                state: vec![FREE; usize::from(size)].into_boxed_slice(),
                epoch: 1,
                in_flight: 0,
                peeked: None,
                broken: None,
                avail_identity: true,
            },
        })
    }

    /// Uses the barriers `order` names from now on: [`VirtioOrder::Platform`] once the device
    /// negotiated `VIRTIO_F_ORDER_PLATFORM` (the transport sets it when it hands the ring to
    /// the device), [`VirtioOrder::Smp`] (the default) otherwise.
    pub fn set_order(&mut self, order: VirtioOrder) {
        self.order = order;
    }

    /// The barriers the ring uses.
    pub fn order(&self) -> VirtioOrder {
        self.order
    }

    /// Descriptors in the ring.
    pub fn size(&self) -> u16 {
        self.layout.size
    }

    /// Where the parts sit.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Bus address of the descriptor table (queue_desc).
    pub fn desc_iova(&self) -> u64 {
        self.mem.iova()
    }

    /// Bus address of the available ring (queue_driver).
    pub fn avail_iova(&self) -> u64 {
        self.mem.iova() + self.layout.avail as u64
    }

    /// Bus address of the used ring (queue_device).
    pub fn used_iova(&self) -> u64 {
        self.mem.iova() + self.layout.used as u64
    }

    /// Bus address of byte `offset` of the driver area.
    pub fn extra_iova(&self, offset: usize) -> u64 {
        self.mem.iova() + (self.layout.extra + offset) as u64
    }

    /// Copies `bytes` to byte `offset` of the driver area (which the device holds no chain of).
    /// A plain copy ([`DmaMemory`]'s `write_bytes`), so crate-private: only this crate's
    /// drivers, which write the area while no chain of it is published, may make it; safe code
    /// elsewhere could race it against an atomic access through another `&SplitRing`.
    ///
    /// ```compile_fail,E0624
    /// use std::sync::Arc;
    /// use vfio_nic::devices::virtio::ring::SplitRing;
    /// use vfio_nic::platform::dma::IdentityMapper;
    /// let ring = SplitRing::new(8, 64, Arc::new(IdentityMapper)).unwrap();
    /// ring.write_extra(0, &[0; 12]); // private: a plain copy into device-visible memory
    /// ```
    pub(crate) fn write_extra(&self, offset: usize, bytes: &[u8]) {
        self.mem.write_bytes(self.layout.extra + offset, bytes);
    }

    /// Copies bytes from byte `offset` of the driver area (crate-private, as
    /// [`write_extra`](Self::write_extra)).
    ///
    /// ```compile_fail,E0624
    /// use std::sync::Arc;
    /// use vfio_nic::devices::virtio::ring::SplitRing;
    /// use vfio_nic::platform::dma::IdentityMapper;
    /// let ring = SplitRing::new(8, 64, Arc::new(IdentityMapper)).unwrap();
    /// let mut ack = [0u8; 1];
    /// ring.read_extra(0, &mut ack); // private: a plain copy out of device-writable memory
    /// ```
    pub(crate) fn read_extra(&self, offset: usize, out: &mut [u8]) {
        self.mem.read_bytes(self.layout.extra + offset, out);
    }

    /// Chains the device holds.
    pub fn in_flight(&self) -> u16 {
        self.st.in_flight
    }

    /// Whether the chain headed by `id` is out of the driver's hands (queued or held).
    pub fn held(&self, id: u16) -> bool {
        self.st
            .state
            .get(usize::from(id))
            .is_some_and(|&s| s != FREE)
    }

    /// Writes descriptor `id` whole. The caller owns it (the device does not hold its chain).
    #[inline(always)]
    pub fn set_desc(&self, id: u16, addr: u64, len: u32, flags: u16, next: u16) {
        let at = 16 * usize::from(id & self.st.mask);
        self.mem.store_u64(at, addr, Relaxed);
        self.mem.store_u32(at + 8, len, Relaxed);
        self.mem
            .store_u32(at + 12, u32::from(flags) | u32::from(next) << 16, Relaxed);
    }

    /// Writes the buffer of descriptor `id`, keeping its flags and next.
    #[inline(always)]
    pub fn set_buffer(&self, id: u16, addr: u64, len: u32) {
        let at = 16 * usize::from(id & self.st.mask);
        self.mem.store_u64(at, addr, Relaxed);
        self.mem.store_u32(at + 8, len, Relaxed);
    }

    /// Puts the chain headed by `id` in the next available slot (visible to the device at the
    /// next [`publish`](Self::publish)).
    ///
    /// # Panics
    /// If that chain is already queued or held, or `id` is outside the ring: a driver bug,
    /// which would give one buffer to the device twice.
    #[inline(always)]
    pub fn push(&mut self, id: u16) {
        let (v, st) = self.burst();
        st.push(&v, id);
    }

    /// Publishes the chains pushed since the last call (the available index, after
    /// [`virtio_wmb`]) and returns whether the device wants a doorbell for them. Out of line on
    /// arm64 only, so that `scripts/arm64 barriers` finds it in the disassembly.
    #[cfg_attr(target_arch = "aarch64", inline(never))]
    #[cfg_attr(not(target_arch = "aarch64"), inline(always))]
    pub fn publish(&mut self) -> bool {
        if self.st.avail_idx == self.st.published {
            return false;
        }
        // The chains queued since the last publish (stamped with this epoch) become the
        // device's now: the next epoch begins.
        self.st.next_epoch();
        self.st.in_flight += self.st.avail_idx.wrapping_sub(self.st.published);
        // The descriptors and ring entries before the index (Linux `virtqueue_add_split`:
        // "Descriptors and available array need to be set before we expose the new available
        // array entries", `virtio_wmb`).
        virtio_wmb(self.order);
        self.mem
            .store_u16(self.layout.avail + 2, self.st.avail_idx, Relaxed);
        self.st.published = self.st.avail_idx;
        // The index store must be visible before the flag is read, or a device that is just
        // going to sleep is never woken (Linux: virtio_mb in virtqueue_kick_prepare_split).
        virtio_mb(self.order);
        self.mem.load_u16(self.layout.used, Relaxed) & USED_F_NO_NOTIFY == 0
    }

    /// The used entries the device returned that the driver has not taken yet: the used index
    /// read once, then [`virtio_rmb`] (the entries and the buffers behind them are read after
    /// it: Linux `virtqueue_get_buf_ctx_split`, "Only get used array entries after they have
    /// been exposed by host"), and refused when it moved further than the chains the device
    /// holds. The burst paths read it once per burst and then the entries
    /// ([`used_at`](Self::used_at)), as DPDK's `virtqueue_nused` and Linux's `more_used_split`
    /// do. Out of line on arm64 only, for the barrier check.
    #[cfg_attr(target_arch = "aarch64", inline(never))]
    #[cfg_attr(not(target_arch = "aarch64"), inline(always))]
    pub fn used_pending(&mut self) -> Result<u16, QueueError> {
        if let Some(why) = self.st.broken {
            return Err(QueueError::ProtocolViolation(why));
        }
        let idx = self.mem.load_u16(self.layout.used + 2, Relaxed);
        virtio_rmb(self.order);
        let returned = idx.wrapping_sub(self.st.last_used);
        if returned > self.st.in_flight {
            return Err(self.st.index_jumped(idx));
        }
        self.st.seen_used = idx;
        Ok(returned)
    }

    /// The ring's word arrays and its bookkeeping, to change both in a burst.
    #[inline(always)]
    pub fn burst(&mut self) -> (RingView<'_>, &mut RingState) {
        let (d, a, u) = &self.spans;
        (
            RingView {
                desc: self.mem.words_in(d),
                avail: self.mem.words_in(a),
                used: self.mem.words_in(u),
            },
            &mut self.st,
        )
    }

    /// See [`RingState::used_at`].
    pub fn used_at(&mut self, k: u16) -> (u32, u32) {
        let (v, st) = self.burst();
        st.used_at(&v, k)
    }

    /// See [`RingState::holds`].
    pub fn holds(&self, id: u32) -> bool {
        self.st.holds(id)
    }

    /// See [`RingState::take_used`].
    pub fn take_used(&mut self, id: u32, len: u32) -> Result<u16, QueueError> {
        self.st.take_used(id, len)
    }

    /// The next used entry (head descriptor, bytes written), without consuming it; `None`
    /// when the device has returned nothing new. A used entry that names a descriptor the
    /// device does not hold, or a used index past what was posted, breaks the ring.
    #[inline(always)]
    pub fn peek_used(&mut self) -> Result<Option<(u16, u32)>, QueueError> {
        if let Some(why) = self.st.broken {
            return Err(QueueError::ProtocolViolation(why));
        }
        if self.st.last_used == self.st.seen_used && self.used_pending()? == 0 {
            return Ok(None);
        }
        let (id, len) = self.used_at(0);
        if !self.st.holds(id) {
            return Err(self.st.not_held(id, len));
        }
        self.st.peeked = Some(id as u16);
        Ok(Some((id as u16, len)))
    }

    /// Consumes the entry [`peek_used`](Self::peek_used) returned: its chain is the driver's
    /// again.
    ///
    /// # Panics
    /// If no entry was peeked since the last consume (a driver bug).
    #[inline(always)]
    pub fn consume(&mut self) {
        let id = self
            .st
            .peeked
            .take()
            .expect("virtqueue: consume without peek_used");
        self.st.state[usize::from(id)] = FREE;
        self.st.in_flight -= 1;
        self.st.last_used = self.st.last_used.wrapping_add(1);
    }

    /// The next used entry, consumed.
    #[inline(always)]
    pub fn pop_used(&mut self) -> Result<Option<(u16, u32)>, QueueError> {
        let e = self.peek_used()?;
        if e.is_some() {
            self.consume();
        }
        Ok(e)
    }

    /// Lets the device interrupt when it returns chains (clears `VIRTQ_AVAIL_F_NO_INTERRUPT`),
    /// or asks it not to again; on, it returns whether used entries are already waiting
    /// (then do not sleep). The flag store and the used-index load are ordered by
    /// [`virtio_mb`] (Linux `virtqueue_poll`): a chain returned in between is either seen here
    /// or interrupts. The entries themselves are read later, after
    /// [`used_pending`](Self::used_pending)'s `virtio_rmb`.
    pub fn set_interrupts(&self, on: bool) -> bool {
        let flags = if on { 0 } else { AVAIL_F_NO_INTERRUPT };
        self.mem.store_u16(self.layout.avail, flags, Relaxed);
        if !on {
            return false;
        }
        virtio_mb(self.order);
        self.mem.load_u16(self.layout.used + 2, Relaxed) != self.st.last_used
    }

    /// The violation this ring has seen, if any.
    pub fn broken(&self) -> Option<Violation> {
        self.st.broken
    }

    /// Writes every available slot `s` with `head(s)` once, for a queue that only ever queues
    /// its chains in that fixed order ([`RingState::pushed_untracked`]): the transmit queue's
    /// pairs. DPDK's virtio transmit queues fix their available ring the same way
    /// (`virtio_dev_tx_queue_setup_finish`).
    pub fn fix_avail(&mut self, head: impl Fn(u16) -> u16) {
        let size = self.layout.size;
        let (v, st) = self.burst();
        for s in 0..size {
            v.avail.store(usize::from(s), head(s), Relaxed);
        }
        st.avail_identity = false;
    }

    /// Sets the publish epoch: only for the host test of its wrap-around, on a fresh ring.
    #[cfg(test)]
    pub(crate) fn set_epoch(&mut self, epoch: u32) {
        assert!(self.st.state.iter().all(|&s| s == FREE));
        self.st.epoch = epoch;
    }

    /// Starts the indices at `idx` instead of 0: only for the host tests of index wrap-around,
    /// on a ring the device has not seen yet (the device side starts there too).
    #[cfg(test)]
    pub(crate) fn start_indices_at(&mut self, idx: u16) {
        assert_eq!(self.st.in_flight, 0);
        self.st.avail_idx = idx;
        self.st.published = idx;
        self.st.last_used = idx;
        self.st.seen_used = idx;
        self.mem.store_u16(self.layout.avail + 2, idx, Relaxed);
        self.mem.store_u16(self.layout.used + 2, idx, Relaxed);
    }
}

impl RingState {
    /// Used entry `k` after the next one to take (`k` below [`SplitRing::used_pending`]'s
    /// count): the head it names and the bytes the device wrote, as the device wrote them
    /// (unchecked: [`take_used`](Self::take_used) and [`holds`](Self::holds) check the head).
    #[inline(always)]
    pub fn used_at(&self, v: &RingView<'_>, k: u16) -> (u32, u32) {
        let e = v
            .used
            .load(usize::from(self.last_used.wrapping_add(k)), Relaxed);
        (e as u32, (e >> 32) as u32)
    }

    /// Whether the device holds the chain headed by `id` (published, not returned): what a
    /// used entry may name. Anything else (a chain it returned already, even one queued again
    /// since but not published, or an id outside the ring) is a protocol violation.
    #[inline(always)]
    pub fn holds(&self, id: u32) -> bool {
        held(&self.state, self.epoch, id)
    }

    /// Takes the next used entry, which names chain `id` with `len` bytes written (as
    /// [`used_at(0)`](Self::used_at) read it): the chain is the driver's again. Refused,
    /// breaking the ring and consuming nothing, unless the device holds it.
    #[inline(always)]
    pub fn take_used(&mut self, id: u32, len: u32) -> Result<u16, QueueError> {
        if !self.holds(id) {
            return Err(self.not_held(id, len));
        }
        self.state[id as usize] = FREE;
        self.in_flight -= 1;
        self.last_used = self.last_used.wrapping_add(1);
        Ok(id as u16)
    }

    /// Puts the chain headed by `id` in the next available slot (visible to the device at the
    /// next [`SplitRing::publish`]).
    ///
    /// # Panics
    /// If that chain is already queued or held, or `id` is outside the ring: a driver bug,
    /// which would give one buffer to the device twice.
    #[inline(always)]
    pub fn push(&mut self, v: &RingView<'_>, id: u16) {
        let epoch = self.epoch;
        let st = &mut self.state[usize::from(id)];
        assert!(*st == FREE, "virtqueue: descriptor {id} posted twice");
        *st = epoch;
        let slot = usize::from(self.avail_idx);
        v.avail.store(slot, id, Relaxed);
        self.avail_identity &= slot & usize::from(self.mask) == usize::from(id);
        self.avail_idx = self.avail_idx.wrapping_add(1);
    }

    /// The descriptor the next used entry names when the device returns chains in the order
    /// they were made available and the driver queues each again at once, in the same order,
    /// as the receive queue does (virtio 1.2, 2.7.13: in order is what devices do, though
    /// without VIRTIO_F_IN_ORDER it is not promised).
    #[inline(always)]
    pub fn next_in_order(&self) -> u16 {
        self.last_used & self.mask
    }

    /// What a receive run that takes back the chains of descriptors `first..first + n` in
    /// order and queues each again at once needs, as values a loop keeps in registers: where
    /// the first goes in the available ring (`None`: to the available slot of its own number,
    /// which holds it already, see `avail_identity`; the loop writes nothing there), the epoch,
    /// and those descriptors' states (each checked with [`held`]`(s, epoch)` and stamped with the
    /// epoch, queued again, by the loop itself). [`requeued`](Self::requeued) then moves the
    /// indices.
    ///
    /// # Panics
    /// If the run leaves the ring or exceeds the chains held (a driver bug).
    #[inline(always)]
    pub fn requeue_parts(&mut self, first: u16, n: usize) -> (Option<usize>, u32, &mut [u32]) {
        let end = usize::from(first) + n;
        assert!(
            end <= self.state.len() && n <= usize::from(self.in_flight),
            "virtqueue: a run beyond the ring"
        );
        let at = usize::from(self.avail_idx);
        let in_place = self.avail_identity && at & usize::from(self.mask) == usize::from(first);
        (
            (!in_place).then_some(at),
            self.epoch,
            &mut self.state[usize::from(first)..end],
        )
    }

    /// `n` chains of a [`requeue_parts`](Self::requeue_parts) run were taken back and queued
    /// again: the next used entry, the chains held and the next available slot move on.
    #[inline(always)]
    pub fn requeued(&mut self, n: u16) {
        self.in_flight -= n;
        self.last_used = self.last_used.wrapping_add(n);
        self.avail_idx = self.avail_idx.wrapping_add(n);
    }

    /// Takes the next used entries (at most `n`, [`SplitRing::used_pending`]'s count) while
    /// each names the head `2 ((first + k) & mask)`, the order the transmit queue sent its
    /// pairs in; returns how many. The transmit queue keeps no chain states (see
    /// [`pushed_untracked`](Self::pushed_untracked)): it calls this only while every pair its
    /// FIFO holds is the device's (none returned early), so an entry naming the next one in send
    /// order names a chain the device holds, at one compare per entry; it checks any other
    /// against its FIFO ([`used_at`](Self::used_at), [`took_untracked`](Self::took_untracked)).
    #[inline(always)]
    pub fn take_heads_in_order(
        &mut self,
        v: &RingView<'_>,
        n: u16,
        first: usize,
        mask: usize,
    ) -> u16 {
        let used = v.used;
        let pos = usize::from(self.last_used);
        // The head expected next: `2 (first + k)` modulo `2 (mask + 1)`.
        let heads = 2 * mask + 1;
        let mut want = (2 * first) & heads;
        let mut k = 0;
        while k < usize::from(n) {
            if used.load(pos + k, Relaxed) as u32 as usize != want {
                break;
            }
            want = (want + 2) & heads;
            k += 1;
        }
        let k = k as u16;
        self.last_used = self.last_used.wrapping_add(k);
        self.in_flight -= k;
        k
    }

    /// The next used entry was taken by a queue that keeps no chain states (it checked the
    /// entry itself).
    #[inline(always)]
    pub fn took_untracked(&mut self) {
        self.last_used = self.last_used.wrapping_add(1);
        self.in_flight -= 1;
    }

    /// `n` chains were queued by a queue that keeps no chain states and whose available ring
    /// holds a fixed map ([`SplitRing::fix_avail`]): the transmit queue, whose pair heads go to
    /// the available slots in FIFO order, so slot `s` always holds the head of pair
    /// `s mod pairs`, written once; it knows which chains the device holds from its FIFO (every
    /// pair there was published by the burst that queued it, and a used entry is checked
    /// against it), so their states stay FREE.
    #[inline(always)]
    pub fn pushed_untracked(&mut self, n: u16) {
        self.avail_idx = self.avail_idx.wrapping_add(n);
    }

    /// Breaks the ring for a used entry naming chain `id` (`len` bytes) that the device does
    /// not hold, as a queue that keeps no chain states found.
    #[cold]
    pub fn refuse(&mut self, id: u32, len: u32) -> QueueError {
        self.not_held(id, len)
    }

    /// Starts the next publish epoch. Before the 32-bit epoch would wrap (after 4 billion
    /// publishes), every chain out of the driver's hands is restamped as of epoch 1 and the
    /// count restarts at 2, so that an old stamp never looks current.
    #[inline(always)]
    fn next_epoch(&mut self) {
        if self.epoch == u32::MAX {
            self.restamp();
        }
        self.epoch += 1;
    }

    #[cold]
    fn restamp(&mut self) {
        for s in self.state.iter_mut().filter(|s| **s != FREE) {
            *s = 1;
        }
        self.epoch = 1;
    }

    #[cold]
    fn index_jumped(&mut self, idx: u16) -> QueueError {
        tracing::error!(
            from = self.last_used,
            to = idx,
            in_flight = self.in_flight,
            "virtqueue: the used index jumped past the chains the device holds"
        );
        self.break_ring(Violation::IndexJumped)
    }

    #[cold]
    fn not_held(&mut self, id: u32, len: u32) -> QueueError {
        tracing::error!(
            id,
            len,
            used = self.last_used,
            "virtqueue: a used entry names a descriptor the device does not hold"
        );
        self.break_ring(Violation::NotHeld)
    }

    #[cold]
    fn break_ring(&mut self, why: Violation) -> QueueError {
        self.broken = Some(why);
        QueueError::ProtocolViolation(why)
    }
}

/// The device's side of a split ring, for host tests: what QEMU's `virtqueue_pop` and
/// `virtqueue_push` do, written against the same memory (it follows chains, reads and writes
/// their buffers through a closure, and returns them in any order the test asks for).
#[cfg(test)]
pub(crate) mod model {
    use super::*;
    use std::sync::atomic::Ordering;

    /// A descriptor as the device reads it.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Desc {
        pub addr: u64,
        pub len: u32,
        pub flags: u16,
        pub next: u16,
    }

    /// The device side of one ring.
    pub struct Device {
        pub last_avail: u16,
        pub used_idx: u16,
    }

    impl Device {
        pub fn new(start: u16) -> Device {
            Device {
                last_avail: start,
                used_idx: start,
            }
        }

        pub fn desc(ring: &SplitRing, id: u16) -> Desc {
            let m = &ring.mem;
            let at = 16 * usize::from(id);
            let w = m.load_u32(at + 12, Ordering::Relaxed);
            Desc {
                addr: m.load_u64(at, Ordering::Relaxed),
                len: m.load_u32(at + 8, Ordering::Relaxed),
                flags: w as u16,
                next: (w >> 16) as u16,
            }
        }

        /// The next available chain (its head and descriptors), if the driver published one.
        pub fn pop(&mut self, ring: &SplitRing) -> Option<(u16, Vec<Desc>)> {
            let l = ring.layout();
            let m = &ring.mem;
            let idx = m.load_u16(l.avail + 2, Ordering::Acquire);
            if idx == self.last_avail {
                return None;
            }
            let slot = l.avail + 4 + 2 * usize::from(self.last_avail & (l.size - 1));
            let head = m.load_u16(slot, Ordering::Relaxed);
            self.last_avail = self.last_avail.wrapping_add(1);
            let mut chain = vec![Self::desc(ring, head)];
            while chain.last().unwrap().flags & DESC_F_NEXT != 0 {
                assert!(chain.len() <= usize::from(l.size), "descriptor loop");
                chain.push(Self::desc(ring, chain.last().unwrap().next));
            }
            Some((head, chain))
        }

        /// Writes a used entry (not yet visible: see `publish`).
        pub fn push(&mut self, ring: &SplitRing, id: u32, len: u32) {
            let l = ring.layout();
            let at = l.used + 4 + 8 * usize::from(self.used_idx & (l.size - 1));
            ring.mem.store_u32(at, id, Ordering::Relaxed);
            ring.mem.store_u32(at + 4, len, Ordering::Relaxed);
            self.used_idx = self.used_idx.wrapping_add(1);
        }

        /// Publishes the used entries written.
        pub fn publish(&self, ring: &SplitRing) {
            ring.mem
                .store_u16(ring.layout().used + 2, self.used_idx, Ordering::Release);
        }

        /// Sets the used ring's flags (USED_F_NO_NOTIFY).
        pub fn set_flags(ring: &SplitRing, flags: u16) {
            ring.mem
                .store_u16(ring.layout().used, flags, Ordering::Relaxed);
        }

        /// The available ring's flags.
        pub fn avail_flags(ring: &SplitRing) -> u16 {
            ring.mem.load_u16(ring.layout().avail, Ordering::Relaxed)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::model::Device;
    use super::*;
    use crate::platform::dma::IdentityMapper;

    fn ring(size: u16) -> SplitRing {
        SplitRing::new(size, 64, Arc::new(IdentityMapper)).unwrap()
    }

    /// A ring of 4 with descriptors 0 and 1 (64-byte receive buffers) published, and the
    /// device that will answer it.
    fn two_posted() -> (SplitRing, Device) {
        let mut r = ring(4);
        for id in 0..2 {
            r.set_desc(id, 0x1000, 64, DESC_F_WRITE, 0);
            r.push(id);
        }
        r.publish();
        (r, Device::new(0))
    }

    #[test]
    fn sizes_must_be_powers_of_two() {
        for bad in [0u16, 3, 6, 100, 65535] {
            let e = SplitRing::new(bad, 0, Arc::new(IdentityMapper))
                .err()
                .unwrap()
                .to_string();
            assert!(e.contains("power of two"), "{bad}: {e}");
        }
        assert_eq!(ring(256).size(), 256);
        let l = Layout::new(256, 64);
        assert_eq!((l.avail, l.used % 4096, (l.used + 4) % 8), (4096, 4, 0));
        assert!(l.extra >= l.used + 6 + 8 * 256 && l.total % 4096 == 0);
    }

    /// Post, publish, the device returns; the used entries come back once each, across the
    /// 16-bit wrap of both indices.
    #[test]
    fn indices_wrap_at_65536() {
        let mut r = ring(8);
        r.start_indices_at(65530);
        let mut dev = Device::new(65530);
        let mut seen = Vec::new();
        for round in 0..5u16 {
            for id in 0..4 {
                r.set_desc(id, 0x1000 * u64::from(id + 1), 100, DESC_F_WRITE, 0);
                r.push(id);
            }
            assert!(r.publish(), "no NO_NOTIFY: a doorbell is wanted");
            while let Some((head, chain)) = dev.pop(&r) {
                assert_eq!(chain.len(), 1);
                dev.push(&r, u32::from(head), 60 + u32::from(round));
            }
            dev.publish(&r);
            while let Some((id, len)) = r.pop_used().unwrap() {
                seen.push((id, len));
            }
            assert_eq!(r.in_flight(), 0);
        }
        assert_eq!(seen.len(), 20);
        assert_eq!(seen[19], (3, 64));
        // 65530 + 20 wrapped.
        assert_eq!(dev.used_idx, 65530u16.wrapping_add(20));
    }

    /// Out-of-order completion is handled (virtio does not promise order without IN_ORDER).
    #[test]
    fn completions_in_any_order() {
        let mut r = ring(4);
        let mut dev = Device::new(0);
        for id in 0..4 {
            r.set_desc(id, 0x1000, 64, 0, 0);
            r.push(id);
        }
        r.publish();
        let heads: Vec<u16> = std::iter::from_fn(|| dev.pop(&r).map(|c| c.0)).collect();
        for &h in heads.iter().rev() {
            dev.push(&r, u32::from(h), 0);
        }
        dev.publish(&r);
        let got: Vec<u16> = std::iter::from_fn(|| r.pop_used().unwrap().map(|e| e.0)).collect();
        assert_eq!(got, [3, 2, 1, 0]);
        // Each can be posted again.
        r.push(2);
        assert!(r.held(2) && !r.held(1));
    }

    /// Event suppression: the driver asks for no interrupts; a device that sets NO_NOTIFY
    /// gets no doorbell, and one that clears it gets one again.
    #[test]
    fn event_suppression_both_ways() {
        let mut r = ring(4);
        assert_eq!(Device::avail_flags(&r), AVAIL_F_NO_INTERRUPT);
        r.set_desc(0, 0x1000, 64, 0, 0);
        r.push(0);
        Device::set_flags(&r, USED_F_NO_NOTIFY);
        assert!(!r.publish(), "the device polls: no doorbell");
        assert!(!r.publish(), "nothing new: no doorbell either");
        Device::set_flags(&r, 0);
        r.set_desc(1, 0x2000, 64, 0, 0);
        r.push(1);
        assert!(r.publish());
    }

    /// A chain (header + data, as the transmit queue posts) comes back by its head; a used
    /// entry naming the chain's second descriptor is refused.
    #[test]
    fn chains_come_back_by_their_head_and_nothing_else() {
        let mut r = ring(4);
        let mut dev = Device::new(0);
        r.set_desc(0, 0x100, 12, DESC_F_NEXT, 1);
        r.set_desc(1, 0x2000, 60, 0, 0);
        r.push(0);
        r.publish();
        let (head, chain) = dev.pop(&r).unwrap();
        assert_eq!((head, chain.len()), (0, 2));
        assert_eq!(chain[1].addr, 0x2000);
        dev.push(&r, 1, 0);
        dev.publish(&r);
        assert_eq!(
            r.pop_used(),
            Err(QueueError::ProtocolViolation(Violation::NotHeld))
        );
        assert!(r.held(0), "the chain is still the device's");
        // Broken for good: the valid entry behind it is not read either.
        assert!(r.pop_used().is_err());
    }

    /// A used index that moves past what was posted, or an id out of range, is refused
    /// without consuming anything; a descriptor returned twice is refused the second time.
    #[test]
    fn bad_used_entries_are_refused() {
        let mut r = ring(4);
        let mut dev = Device::new(0);
        r.set_desc(0, 0x1000, 64, DESC_F_WRITE, 0);
        r.push(0);
        r.publish();
        dev.pop(&r).unwrap();
        dev.push(&r, 0, 64);
        dev.push(&r, 0, 64);
        dev.publish(&r);
        let e = r.pop_used().unwrap_err();
        assert_eq!(e, QueueError::ProtocolViolation(Violation::IndexJumped));
        assert_eq!(r.in_flight(), 1, "nothing consumed");

        let (mut r, mut dev) = two_posted();
        dev.push(&r, 1, 64);
        dev.push(&r, 1, 64);
        dev.publish(&r);
        assert_eq!(r.pop_used().unwrap(), Some((1, 64)));
        assert!(r.pop_used().is_err(), "descriptor 1 handed back twice");

        let mut r = ring(4);
        let mut dev = Device::new(0);
        r.push(0);
        r.publish();
        dev.push(&r, 9, 0);
        dev.publish(&r);
        assert!(r.pop_used().is_err(), "id outside the ring");
    }

    /// A device that returns a descriptor twice in one batch, with the driver re-queueing it
    /// in between (as the receive burst does), is caught at the second entry: a queued chain is
    /// not the device's until it is published.
    #[test]
    fn a_descriptor_returned_twice_is_caught_even_after_a_requeue() {
        let (mut r, mut dev) = two_posted();
        dev.push(&r, 0, 64);
        dev.push(&r, 0, 64);
        dev.publish(&r);
        assert_eq!(r.pop_used().unwrap(), Some((0, 64)));
        r.push(0);
        assert!(
            r.pop_used().is_err(),
            "queued again but not published: not the device's"
        );
        // And a used index beyond the published chains counts only published ones.
        let mut r = ring(4);
        let mut dev = Device::new(0);
        r.push(0);
        r.publish();
        r.push(1);
        dev.push(&r, 0, 0);
        dev.push(&r, 1, 0);
        dev.publish(&r);
        assert_eq!(
            r.pop_used().unwrap_err(),
            QueueError::ProtocolViolation(Violation::IndexJumped)
        );
    }

    /// The 32-bit publish epoch wraps without a held chain looking queued or a queued one
    /// looking held: descriptor 0 stays with the device across the wrap while 1 cycles.
    #[test]
    fn the_publish_epoch_wraps_safely() {
        let mut r = ring(4);
        r.set_epoch(u32::MAX - 2);
        let mut dev = Device::new(0);
        r.push(0);
        r.publish();
        let (held0, _) = dev.pop(&r).unwrap();
        for _ in 0..6 {
            r.push(1);
            assert!(!r.holds(1), "queued, not published");
            r.publish();
            assert!(r.holds(0) && r.holds(1));
            let (h, _) = dev.pop(&r).unwrap();
            dev.push(&r, u32::from(h), 0);
            dev.publish(&r);
            assert_eq!(r.pop_used().unwrap(), Some((1, 0)));
        }
        assert!(r.holds(0), "held across the wrap");
        dev.push(&r, u32::from(held0), 0);
        dev.publish(&r);
        assert_eq!(r.pop_used().unwrap(), Some((0, 0)));
    }

    #[test]
    #[should_panic(expected = "posted twice")]
    fn posting_a_held_descriptor_is_a_driver_bug() {
        let mut r = ring(4);
        r.push(1);
        r.push(1);
    }
}
