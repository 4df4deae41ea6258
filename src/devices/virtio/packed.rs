//! The packed virtqueue (virtio 1.2, 2.8; VIRTIO_F_RING_PACKED): one ring of 16-byte
//! descriptors that the driver and the device both write, and two event-suppression words.
//!
//! A descriptor is `le64 addr; le32 len; le16 id; le16 flags`. The driver makes one available by
//! writing it with AVAIL equal to its wrap counter and USED the inverse; the device returns a
//! buffer by writing a used element (its buffer id, the bytes written, AVAIL and USED both equal
//! to the device's wrap counter) into the next slot of its own, in the order it finishes them,
//! and skips as many slots as the buffer had descriptors (virtio 1.2, 2.8.1-2.8.7; QEMU
//! `virtqueue_packed_fill_desc`). A chain's buffer id is in its last descriptor (virtio 1.3,
//! 2.8.6); this driver writes it in every descriptor of a chain, which suits devices that read
//! the first one too (QEMU before its 2024 fix).
//!
//! What the split ring ([`super::ring`]) spreads over three arrays is here one word: the length,
//! id and flags of a descriptor are its second 64-bit word, so the receive burst reads one
//! word per returned buffer and writes two per buffer it posts again, and nothing else.
//!
//! The discipline is the split ring's: no Rust reference to memory the device writes (every
//! descriptor word is an atomic of [`DmaMemory`]); a used element is read after its flags with
//! an acquire load; a descriptor's flags are written after its other fields with a release
//! store, and a chain's head after its tail. The descriptors written since the last
//! [`publish`](PackedRing::publish) are not the device's yet: the first of them is written with
//! its flags cleared (the device cannot read past it, as it takes slots in order) and gets them
//! at the publish (DPDK's `virtqueue_enqueue_recv_refill_packed` and Linux's
//! `virtqueue_add_packed` write the head's flags last too). So, as on the split ring, a chain is
//! free, queued (written, not published) or held by the device, stamped with a publish epoch,
//! and a used element naming a chain the device does not hold (one it returned already, even if
//! queued again since, or one never published) is a [`QueueError::ProtocolViolation`] that
//! breaks the ring.
//!
//! Event suppression without VIRTIO_F_EVENT_IDX (not negotiated): the driver's word (at the
//! queue's driver address) says DISABLE while it polls, ENABLE when an interrupt is armed; the
//! device's word (at the device address) is read after a full fence at each publish, and a
//! device that says DISABLE gets no doorbell (QEMU `virtio_queue_packed_set_notification`).

use std::sync::atomic::fence;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::sync::Arc;

use super::ring::{check_size, Virtqueue};
use crate::device::{QueueError, Violation};
use crate::error::Result;
use crate::platform::dma::{DmaMapper, DmaMemory, DmaWords};

/// `VRING_PACKED_DESC_F_AVAIL`.
pub const DESC_F_AVAIL: u16 = 1 << 7;
/// `VRING_PACKED_DESC_F_USED`.
pub const DESC_F_USED: u16 = 1 << 15;
/// Both wrap flags.
pub const DESC_F_WRAP: u16 = DESC_F_AVAIL | DESC_F_USED;
/// `RING_EVENT_FLAGS_ENABLE`: notifications wanted.
pub const EVENT_ENABLE: u16 = 0;
/// `RING_EVENT_FLAGS_DISABLE`: no notifications.
pub const EVENT_DISABLE: u16 = 1;

/// A chain the driver owns (any other state: the publish epoch it was queued in).
const FREE: u32 = 0;

/// A descriptor's second word: the length, the buffer id and the flags.
#[inline(always)]
pub const fn word1(len: u32, id: u16, flags: u16) -> u64 {
    len as u64 | (id as u64) << 32 | (flags as u64) << 48
}

/// The length of a descriptor's second word.
#[inline(always)]
pub const fn w_len(w: u64) -> u32 {
    w as u32
}

/// The buffer id of a descriptor's second word.
#[inline(always)]
pub const fn w_id(w: u64) -> u16 {
    (w >> 32) as u16
}

/// The flags of a descriptor's second word.
#[inline(always)]
pub const fn w_flags(w: u64) -> u16 {
    (w >> 48) as u16
}

/// What a used element's upper half (id, flags) is compared with, under [`USED_MASK`]: buffer
/// `id` with the used flags of this pass (`used_flags`).
#[inline(always)]
pub const fn used_key(id: u16, used_flags: u16) -> u64 {
    id as u64 | (used_flags as u64) << 16
}

/// The bits of a descriptor's upper half that [`used_key`] sets: the id and the wrap flags.
pub const USED_MASK: u64 = 0xffff | (DESC_F_WRAP as u64) << 16;

/// Where the parts of a packed ring of `size` descriptors sit in its memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackedLayout {
    /// Descriptors (at offset 0, 16 bytes each).
    pub size: u16,
    /// Offset of the driver's event suppression word (the queue's driver area).
    pub driver_event: usize,
    /// Offset of the device's event suppression word (the queue's device area).
    pub device_event: usize,
    /// Offset of the driver's own area (headers, control commands).
    pub extra: usize,
    /// Bytes in all.
    pub total: usize,
}

impl PackedLayout {
    /// The layout of a ring of `size` descriptors with `extra` bytes of driver area; each event
    /// word on a cache line of its own.
    pub fn new(size: u16, extra: usize) -> PackedLayout {
        let driver_event = (16 * usize::from(size)).next_multiple_of(64);
        let device_event = driver_event + 64;
        let extra_at = device_event + 64;
        PackedLayout {
            size,
            driver_event,
            device_event,
            extra: extra_at,
            total: (extra_at + extra).next_multiple_of(4096),
        }
    }
}

/// Whether a chain in state `s` is held by the device in publish epoch `epoch` (queued in an
/// earlier epoch: published, not returned). As the split ring's `held`: one unsigned compare.
#[inline(always)]
pub fn held(s: u32, epoch: u32) -> bool {
    s.wrapping_sub(1) < epoch.wrapping_sub(1)
}

/// One packed virtqueue.
pub struct PackedRing {
    mem: DmaMemory,
    layout: PackedLayout,
    st: PackedState,
}

/// The driver's bookkeeping of a packed ring (everything but its memory), apart so that a burst
/// can hold the descriptor words ([`PackedView`]) and change it at once.
pub struct PackedState {
    pub(super) mask: u16,
    /// The next slot the driver writes, and the flags that make a descriptor available in
    /// its pass (AVAIL on the first pass; they swap at each wrap).
    pub(super) next_avail: u16,
    pub(super) avail_flags: u16,
    /// The next slot the device writes a used element into, and the flags a used element
    /// carries in its pass (AVAIL and USED on the first pass; none after a wrap, and so on).
    pub(super) next_used: u16,
    pub(super) used_flags: u16,
    /// Slots the device holds (published, not returned).
    pub(super) in_flight: u16,
    /// Slots written since the last publish.
    pub(super) queued: u16,
    /// The first slot written since the last publish and its second word, whose flags are
    /// written at the publish.
    pub(super) withheld: Option<(u16, u64)>,
    /// The state of each buffer id: [`FREE`] or the publish epoch it was queued in.
    pub(super) state: Box<[u32]>,
    /// The current publish epoch (from 1).
    pub(super) epoch: u32,
    broken: Option<Violation>,
}

/// A ring's descriptors as 64-bit words (address at word `2 slot`, length, id and flags at
/// `2 slot + 1`), checked once per burst ([`DmaWords`]).
#[derive(Clone, Copy)]
pub struct PackedView<'m> {
    desc: DmaWords<'m, u64>,
}

impl PackedView<'_> {
    /// The second word of slot `slot`, with an acquire load: read before anything the device
    /// wrote for it.
    #[inline(always)]
    pub fn word(&self, slot: usize) -> u64 {
        self.desc.load(2 * slot + 1, Acquire)
    }

    /// Writes the address of slot `slot`.
    #[inline(always)]
    pub fn set_addr(&self, slot: usize, addr: u64) {
        self.desc.store(2 * slot, addr, Relaxed);
    }

    /// Writes the second word of slot `slot` with a release store (after its address).
    #[inline(always)]
    pub fn set_word(&self, slot: usize, w: u64) {
        self.desc.store(2 * slot + 1, w, Release);
    }
}

impl PackedRing {
    /// A ring of `size` descriptors (a power of two) for `ids` buffer ids, with `extra` bytes
    /// of driver area, in memory mapped through `mapper`. Polled: the device is asked not to
    /// notify the driver.
    pub fn new(
        size: u16,
        ids: u16,
        extra: usize,
        mapper: Arc<dyn DmaMapper>,
    ) -> Result<PackedRing> {
        check_size(size, "virtqueue")?;
        let layout = PackedLayout::new(size, extra);
        let mem = DmaMemory::allocate(layout.total, mapper)?;
        mem.store_u16(layout.driver_event + 2, EVENT_DISABLE, Relaxed);
        Ok(PackedRing {
            mem,
            layout,
            st: PackedState {
                mask: size - 1,
                next_avail: 0,
                avail_flags: DESC_F_AVAIL,
                next_used: 0,
                used_flags: DESC_F_WRAP,
                in_flight: 0,
                queued: 0,
                withheld: None,
                state: vec![FREE; usize::from(ids)].into_boxed_slice(),
                epoch: 1,
                broken: None,
            },
        })
    }

    /// Descriptors in the ring.
    pub fn size(&self) -> u16 {
        self.layout.size
    }

    /// Where the parts sit.
    pub fn layout(&self) -> PackedLayout {
        self.layout
    }

    /// The ring's memory (the device side of the host tests reads and writes it too).
    pub fn memory(&self) -> &DmaMemory {
        &self.mem
    }

    /// Bus address of byte `offset` of the driver area.
    pub fn extra_iova(&self, offset: usize) -> u64 {
        self.mem.iova() + (self.layout.extra + offset) as u64
    }

    /// Copies `bytes` to byte `offset` of the driver area.
    pub fn write_extra(&self, offset: usize, bytes: &[u8]) {
        self.mem.write_bytes(self.layout.extra + offset, bytes);
    }

    /// Copies bytes from byte `offset` of the driver area.
    pub fn read_extra(&self, offset: usize, out: &mut [u8]) {
        self.mem.read_bytes(self.layout.extra + offset, out);
    }

    /// Slots the device holds.
    pub fn in_flight(&self) -> u16 {
        self.st.in_flight
    }

    /// The descriptor words and the bookkeeping, to change both in a burst; refused once the
    /// ring is broken.
    #[inline(always)]
    pub fn burst(&mut self) -> Result<(PackedView<'_>, &mut PackedState), QueueError> {
        if let Some(why) = self.st.broken {
            return Err(QueueError::ProtocolViolation(why));
        }
        let n = 2 * usize::from(self.layout.size);
        Ok((
            PackedView {
                desc: self.mem.words(0, n),
            },
            &mut self.st,
        ))
    }

    /// Makes the chains written since the last call the device's (the withheld first flags
    /// written with a release store) and returns whether the device wants a doorbell for
    /// them: its event suppression word is read after a full fence (Linux
    /// `virtqueue_kick_prepare_packed`), so a device going to sleep is never missed.
    #[inline(always)]
    pub fn publish(&mut self) -> bool {
        let st = &mut self.st;
        if st.queued == 0 {
            return false;
        }
        if let Some((slot, w)) = st.withheld.take() {
            self.mem.store_u64(16 * usize::from(slot) + 8, w, Release);
        }
        st.in_flight += st.queued;
        st.queued = 0;
        st.next_epoch();
        fence(SeqCst);
        self.mem.load_u16(self.layout.device_event + 2, Relaxed) != EVENT_DISABLE
    }

    /// Lets the device interrupt when it returns buffers (ENABLE), or asks it not to again
    /// (DISABLE); on, it returns whether a used element is already waiting (then do not
    /// sleep). The flag store and the look at the ring are ordered by a full fence.
    pub fn set_interrupts(&self, on: bool) -> bool {
        let flags = if on { EVENT_ENABLE } else { EVENT_DISABLE };
        self.mem
            .store_u16(self.layout.driver_event + 2, flags, Relaxed);
        if !on {
            return false;
        }
        fence(SeqCst);
        let w = self
            .mem
            .load_u64(16 * usize::from(self.st.next_used) + 8, Acquire);
        self.st.in_flight > 0 && w_flags(w) & DESC_F_WRAP == self.st.used_flags
    }

    /// The violation this ring has seen, if any.
    pub fn broken(&self) -> Option<Violation> {
        self.st.broken
    }

    /// Whether buffer `id` is out of the driver's hands (queued or held).
    pub fn is_out(&self, id: u16) -> bool {
        self.st
            .state
            .get(usize::from(id))
            .is_some_and(|&s| s != FREE)
    }

    /// Writes the chain `descs` (address, length, flags: NEXT between them and WRITE as the
    /// caller says) for buffer `id` at the next slots, the head last; it is the device's at the
    /// next [`publish`](Self::publish).
    ///
    /// # Panics
    /// If the buffer is already queued or held, or the chain does not fit the free slots (a
    /// driver bug).
    pub fn post(&mut self, id: u16, descs: &[(u64, u32, u16)]) {
        let v = PackedView {
            desc: self.mem.words(0, 2 * usize::from(self.layout.size)),
        };
        self.st.post(&v, id, descs);
    }

    /// The next used element (buffer id, bytes written), consumed, its buffer's `slots`
    /// descriptors skipped; `None` when the device has returned nothing new. A used element
    /// naming a buffer the device does not hold breaks the ring.
    pub fn pop_used(&mut self, slots: u16) -> Result<Option<(u16, u32)>, QueueError> {
        let (v, st) = self.burst()?;
        let Some(w) = st.used(&v) else {
            return Ok(None);
        };
        let id = st.take_used(w, slots)?;
        Ok(Some((id, w_len(w))))
    }
}

/// The queue addresses of a packed ring: the descriptors, the driver's and the device's event
/// suppression words (virtio 1.2, 4.1.4.3: queue_desc, queue_driver, queue_device).
impl Virtqueue for PackedRing {
    fn size(&self) -> u16 {
        self.layout.size
    }
    fn desc_iova(&self) -> u64 {
        self.mem.iova()
    }
    fn driver_iova(&self) -> u64 {
        self.mem.iova() + self.layout.driver_event as u64
    }
    fn device_iova(&self) -> u64 {
        self.mem.iova() + self.layout.device_event as u64
    }
}

impl PackedState {
    /// Slots the device holds.
    #[inline(always)]
    pub fn in_flight(&self) -> u16 {
        self.in_flight
    }

    /// Descriptors in the ring.
    #[inline(always)]
    pub fn size(&self) -> u16 {
        self.mask + 1
    }

    /// The second word of the used element at the device's next slot, if the device has
    /// written one there (and holds anything): its flags are this pass's used flags.
    #[inline(always)]
    pub fn used(&self, v: &PackedView<'_>) -> Option<u64> {
        if self.in_flight == 0 {
            return None;
        }
        let w = v.word(usize::from(self.next_used));
        (w_flags(w) & DESC_F_WRAP == self.used_flags).then_some(w)
    }

    /// Takes the used element `w` read at the device's next slot ([`used`](Self::used)):
    /// its buffer is the driver's again, and the next used element is `slots` slots on (the
    /// buffer's descriptors). Refused, breaking the ring and consuming nothing, unless the
    /// device holds that buffer, and `slots` of them.
    #[inline(always)]
    pub fn take_used(&mut self, w: u64, slots: u16) -> Result<u16, QueueError> {
        let id = w_id(w);
        let ok = self
            .state
            .get(usize::from(id))
            .is_some_and(|&s| held(s, self.epoch));
        if !ok || slots > self.in_flight {
            return Err(self.not_held(w));
        }
        self.state[usize::from(id)] = FREE;
        self.used_moved(slots);
        Ok(id)
    }

    /// The device's next slot moves `n` on (used elements taken), flipping the used flags at
    /// the wrap.
    #[inline(always)]
    pub fn used_moved(&mut self, n: u16) {
        self.in_flight -= n;
        let next = self.next_used + n;
        if next > self.mask {
            self.used_flags ^= DESC_F_WRAP;
        }
        self.next_used = next & self.mask;
    }

    /// The driver's next slot moves `n` on (descriptors written), flipping the available flags
    /// at the wrap; `first` is the second word the first of them got, withheld when it is the
    /// first written since the last publish (the caller wrote it with its flags cleared: see
    /// [`hold_first`](Self::hold_first)).
    #[inline(always)]
    pub fn avail_moved(&mut self, n: u16, first: u64) {
        if n == 0 {
            return;
        }
        if self.queued == 0 {
            self.withheld = Some((self.next_avail, first));
        }
        self.queued += n;
        let next = self.next_avail + n;
        if next > self.mask {
            self.avail_flags ^= DESC_F_WRAP;
        }
        self.next_avail = next & self.mask;
    }

    /// The driver's next slot moves `n` on, for descriptors the device may take at once (no
    /// flags withheld: the caller reads no used element before the publish).
    #[inline(always)]
    pub fn avail_moved_visible(&mut self, n: u16) {
        self.queued += n;
        let next = self.next_avail + n;
        if next > self.mask {
            self.avail_flags ^= DESC_F_WRAP;
        }
        self.next_avail = next & self.mask;
    }

    /// Whether the next descriptor written is the first since the last publish, whose flags
    /// are withheld until it: the caller writes its second word with the flags cleared
    /// (`& !FLAGS_MASK`) and passes the whole word to [`avail_moved`](Self::avail_moved).
    #[inline(always)]
    pub fn hold_first(&self) -> bool {
        self.queued == 0
    }

    /// Queues buffer `id` (its descriptors written by the caller): it is the device's at the
    /// next publish.
    ///
    /// # Panics
    /// If it is already queued or held, or `id` is outside the ring's ids (a driver bug).
    #[inline(always)]
    pub fn queue_id(&mut self, id: u16) {
        let s = &mut self.state[usize::from(id)];
        assert!(*s == FREE, "virtqueue: buffer {id} posted twice");
        *s = self.epoch;
    }

    /// Writes a chain at the next slots, as [`PackedRing::post`].
    pub fn post(&mut self, v: &PackedView<'_>, id: u16, descs: &[(u64, u32, u16)]) {
        assert!(
            !descs.is_empty()
                && descs.len() <= usize::from(self.size() - self.in_flight - self.queued),
            "virtqueue: a chain of {} descriptors does not fit the free slots",
            descs.len()
        );
        self.queue_id(id);
        let hold = self.hold_first();
        let (start, start_flags) = (self.next_avail, self.avail_flags);
        let mut first = 0;
        // The tail first, the head last (its flags make the chain the device's).
        for (k, &(addr, len, flags)) in descs.iter().enumerate().rev() {
            let pos = usize::from(start) + k;
            let slot = pos & usize::from(self.mask);
            let wrap = if pos > usize::from(self.mask) {
                DESC_F_WRAP
            } else {
                0
            };
            let w = word1(len, id, flags | start_flags ^ wrap);
            v.set_addr(slot, addr);
            if k == 0 {
                first = w;
                v.set_word(slot, if hold { w & !FLAGS_MASK } else { w });
            } else {
                v.set_word(slot, w);
            }
        }
        self.avail_moved(descs.len() as u16, first);
    }

    /// Starts the next publish epoch (as the split ring's: restamped before the 32-bit epoch
    /// would wrap).
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

    /// A used element naming a buffer the device does not hold: the ring breaks.
    #[cold]
    pub fn not_held(&mut self, w: u64) -> QueueError {
        tracing::error!(
            id = w_id(w),
            len = w_len(w),
            slot = self.next_used,
            "virtqueue: a used element names a buffer the device does not hold"
        );
        self.broken = Some(Violation::NotHeld);
        QueueError::ProtocolViolation(Violation::NotHeld)
    }

    /// Sets the publish epoch: only for the host test of its wrap-around, on a fresh ring.
    #[cfg(test)]
    pub(crate) fn set_epoch(&mut self, epoch: u32) {
        assert!(self.state.iter().all(|&s| s == FREE));
        self.epoch = epoch;
    }
}

/// The flags of a second word: what a withheld descriptor is written without.
pub const FLAGS_MASK: u64 = 0xffff << 48;

#[cfg(test)]
impl PackedRing {
    /// The bookkeeping (host tests).
    pub(crate) fn state_mut(&mut self) -> &mut PackedState {
        &mut self.st
    }
}

/// The device's side of a packed ring, for host tests: what QEMU's `virtqueue_packed_pop` and
/// `virtqueue_packed_fill_desc` do, against the same memory.
#[cfg(test)]
pub(crate) mod model {
    use super::*;

    /// A descriptor as the device reads it.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Desc {
        pub addr: u64,
        pub len: u32,
        pub id: u16,
        pub flags: u16,
    }

    /// The device side of one ring.
    pub struct Device {
        pub avail: u16,
        pub avail_wrap: bool,
        pub used: u16,
        pub used_wrap: bool,
    }

    impl Device {
        pub fn new() -> Device {
            Device {
                avail: 0,
                avail_wrap: true,
                used: 0,
                used_wrap: true,
            }
        }

        fn desc(ring: &PackedRing, slot: u16) -> Desc {
            let m = ring.memory();
            let at = 16 * usize::from(slot);
            let w = m.load_u64(at + 8, Acquire);
            Desc {
                addr: m.load_u64(at, Relaxed),
                len: w_len(w),
                id: w_id(w),
                flags: w_flags(w),
            }
        }

        /// The next available chain (its buffer id, from its last descriptor, and its
        /// descriptors), if the driver made one available.
        pub fn pop(&mut self, ring: &PackedRing) -> Option<(u16, Vec<Desc>)> {
            let size = ring.size();
            let avail = |d: &Desc, wrap: bool| {
                (d.flags & DESC_F_AVAIL != 0) == wrap && (d.flags & DESC_F_USED != 0) != wrap
            };
            let head = Self::desc(ring, self.avail);
            if !avail(&head, self.avail_wrap) {
                return None;
            }
            let mut chain = vec![head];
            loop {
                self.avail += 1;
                if self.avail == size {
                    self.avail = 0;
                    self.avail_wrap = !self.avail_wrap;
                }
                if chain.last().unwrap().flags & super::super::ring::DESC_F_NEXT == 0 {
                    break;
                }
                assert!(chain.len() < usize::from(size), "descriptor loop");
                chain.push(Self::desc(ring, self.avail));
            }
            Some((chain.last().unwrap().id, chain))
        }

        /// Writes a used element for buffer `id` with `len` bytes written, whose chain had
        /// `n` descriptors (visible at once: its flags are written last).
        pub fn push(&mut self, ring: &PackedRing, id: u16, len: u32, n: u16) {
            let m = ring.memory();
            let at = 16 * usize::from(self.used);
            let flags = if self.used_wrap { DESC_F_WRAP } else { 0 };
            m.store_u64(at + 8, word1(len, id, flags), Release);
            self.used += n;
            if self.used >= ring.size() {
                self.used -= ring.size();
                self.used_wrap = !self.used_wrap;
            }
        }

        /// Sets the device's event suppression flags.
        pub fn set_event(ring: &PackedRing, flags: u16) {
            ring.memory()
                .store_u16(ring.layout().device_event + 2, flags, Relaxed);
        }

        /// The driver's event suppression flags.
        pub fn driver_event(ring: &PackedRing) -> u16 {
            ring.memory()
                .load_u16(ring.layout().driver_event + 2, Relaxed)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::model::Device;
    use super::*;
    use crate::devices::virtio::ring::{DESC_F_NEXT, DESC_F_WRITE};
    use crate::platform::dma::IdentityMapper;

    fn ring(size: u16) -> PackedRing {
        PackedRing::new(size, size, 64, Arc::new(IdentityMapper)).unwrap()
    }

    /// Buffers posted, published, returned in order and out of order, across many wraps of
    /// both wrap counters; each comes back once, with its length.
    #[test]
    fn buffers_come_back_once_across_wraps_in_any_order() {
        let mut r = ring(8);
        let mut dev = Device::new();
        let mut seen = 0;
        for round in 0..40u32 {
            for id in 0..5u16 {
                r.post(id, &[(0x1000 * u64::from(id + 1), 100, DESC_F_WRITE)]);
            }
            assert!(r.publish(), "the device wants doorbells");
            let mut popped: Vec<u16> = std::iter::from_fn(|| dev.pop(&r).map(|c| c.0)).collect();
            assert_eq!(popped, [0, 1, 2, 3, 4]);
            if round % 2 == 1 {
                popped.reverse();
            }
            for &id in &popped {
                dev.push(&r, id, 60 + round, 1);
            }
            let got: Vec<(u16, u32)> = std::iter::from_fn(|| r.pop_used(1).unwrap()).collect();
            assert_eq!(got.len(), 5);
            assert!(got.iter().all(|&(_, len)| len == 60 + round));
            assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), popped);
            seen += got.len();
            assert_eq!(r.in_flight(), 0);
        }
        assert_eq!(seen, 200);
    }

    /// A chain is read by the device head to tail, with its id in its last descriptor, and
    /// comes back as one used element that skips its slots.
    #[test]
    fn a_chain_is_one_used_element() {
        let mut r = ring(4);
        let mut dev = Device::new();
        for round in 0..6u32 {
            r.post(
                0,
                &[
                    (0x100, 12, DESC_F_NEXT),
                    (0x2000, 60, DESC_F_NEXT),
                    (0x3000, 1, DESC_F_WRITE),
                ],
            );
            r.publish();
            let (id, chain) = dev.pop(&r).unwrap();
            assert_eq!((id, chain.len()), (0, 3));
            assert_eq!(chain[1].addr, 0x2000);
            assert!(chain[2].flags & DESC_F_WRITE != 0);
            dev.push(&r, id, round, 3);
            assert_eq!(r.pop_used(3).unwrap(), Some((0, round)));
        }
    }

    /// The first descriptor written since the last publish is not available until the
    /// publish; the device sees nothing before it.
    #[test]
    fn nothing_is_the_devices_before_the_publish() {
        let mut r = ring(4);
        let mut dev = Device::new();
        r.post(0, &[(0x1000, 64, DESC_F_WRITE)]);
        r.post(1, &[(0x2000, 64, DESC_F_WRITE)]);
        assert!(dev.pop(&r).is_none(), "withheld until the publish");
        r.publish();
        assert_eq!(dev.pop(&r).map(|c| c.0), Some(0));
        assert_eq!(dev.pop(&r).map(|c| c.0), Some(1));
    }

    /// Event suppression: polled, the driver asks for no notifications; a device that says
    /// DISABLE gets no doorbell; armed, a used element already there is reported.
    #[test]
    fn event_suppression_both_ways() {
        let mut r = ring(4);
        let mut dev = Device::new();
        assert_eq!(Device::driver_event(&r), EVENT_DISABLE);
        Device::set_event(&r, EVENT_DISABLE);
        r.post(0, &[(0x1000, 64, DESC_F_WRITE)]);
        assert!(!r.publish(), "the device polls: no doorbell");
        assert!(!r.publish(), "nothing new: no doorbell either");
        Device::set_event(&r, EVENT_ENABLE);
        r.post(1, &[(0x2000, 64, DESC_F_WRITE)]);
        assert!(r.publish());
        assert!(!r.set_interrupts(true), "nothing used yet");
        assert_eq!(Device::driver_event(&r), EVENT_ENABLE);
        let (id, _) = dev.pop(&r).unwrap();
        dev.push(&r, id, 64, 1);
        assert!(r.set_interrupts(true), "a used element waits");
        r.set_interrupts(false);
        assert_eq!(Device::driver_event(&r), EVENT_DISABLE);
    }

    /// A used element naming a buffer the device does not hold (returned already, queued
    /// again but not published, or an id outside the ring) breaks the ring, consuming nothing.
    #[test]
    fn bad_used_elements_are_refused() {
        let posted = || {
            let mut r = ring(4);
            let mut dev = Device::new();
            r.post(0, &[(0x1000, 64, DESC_F_WRITE)]);
            r.post(1, &[(0x2000, 64, DESC_F_WRITE)]);
            r.publish();
            dev.pop(&r).unwrap();
            dev.pop(&r).unwrap();
            (r, dev)
        };
        // Returned twice.
        let (mut r, mut dev) = posted();
        dev.push(&r, 0, 64, 1);
        dev.push(&r, 0, 64, 1);
        assert_eq!(r.pop_used(1).unwrap(), Some((0, 64)));
        assert_eq!(
            r.pop_used(1),
            Err(QueueError::ProtocolViolation(Violation::NotHeld))
        );
        assert!(r.pop_used(1).is_err(), "broken for good");
        // Queued again but not published: not the device's.
        let (mut r, mut dev) = posted();
        dev.push(&r, 0, 64, 1);
        assert_eq!(r.pop_used(1).unwrap(), Some((0, 64)));
        r.post(0, &[(0x1000, 64, DESC_F_WRITE)]);
        dev.push(&r, 0, 64, 1);
        assert!(r.pop_used(1).is_err());
        // An id outside the ring.
        let (mut r, mut dev) = posted();
        dev.push(&r, 9, 0, 1);
        assert!(r.pop_used(1).is_err());
        // More used elements than slots held are never read.
        let mut r = ring(4);
        let mut dev = Device::new();
        r.post(0, &[(0x1000, 64, DESC_F_WRITE)]);
        r.publish();
        dev.pop(&r).unwrap();
        dev.push(&r, 0, 64, 1);
        dev.push(&r, 0, 64, 1);
        assert_eq!(r.pop_used(1).unwrap(), Some((0, 64)));
        assert_eq!(r.pop_used(1).unwrap(), None, "nothing held: nothing read");
    }

    /// The 32-bit publish epoch wraps without a held buffer looking queued or a queued one
    /// looking held.
    #[test]
    fn the_publish_epoch_wraps_safely() {
        let mut r = ring(4);
        r.state_mut().set_epoch(u32::MAX - 2);
        let mut dev = Device::new();
        r.post(0, &[(0x1000, 64, DESC_F_WRITE)]);
        r.publish();
        let (held0, _) = dev.pop(&r).unwrap();
        for _ in 0..6 {
            r.post(1, &[(0x2000, 64, DESC_F_WRITE)]);
            r.publish();
            let (h, _) = dev.pop(&r).unwrap();
            dev.push(&r, h, 0, 1);
            assert_eq!(r.pop_used(1).unwrap(), Some((1, 0)));
        }
        assert!(r.is_out(0), "held across the wrap");
        dev.push(&r, held0, 0, 1);
        assert_eq!(r.pop_used(1).unwrap(), Some((0, 0)));
    }

    #[test]
    #[should_panic(expected = "posted twice")]
    fn posting_a_held_buffer_is_a_driver_bug() {
        let mut r = ring(4);
        r.post(1, &[(0x1000, 64, 0)]);
        r.post(1, &[(0x1000, 64, 0)]);
    }
}
