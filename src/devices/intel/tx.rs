//! The transmit ring of the 82576 and the 82599: from packets to descriptors, and back to the
//! pool once the device is done.
//!
//! The discipline is the receive ring's ([`super::rx`]): descriptors are written as atomic words
//! ([`TxData`], [`TxContext`]), [`dma_wmb`](crate::platform::barrier::dma_wmb) goes before the
//! one doorbell of a burst ([`Mmio::doorbell`]: Linux's `writel`), and completion is seen with a
//! load of DD followed by [`dma_rmb`] (the buffers go back to the pool, to be written again,
//! only after the device's write-back was seen).
//!
//! One path per burst: packets are written in runs (`TxRing::send_run`, one data descriptor
//! each, no wrap inside a run); a run ends at the end of the ring, at the end of the batch or
//! room, or before a packet that needs something first, which `TxRing::unblock` gives it: a
//! copy into a buffer the device can reach, padding to the minimum length, its tag pushed into
//! the frame (software VLAN mode, [`insert_front`]), or a context descriptor with its tag
//! (hardware mode). The burst's last descriptor asks for a write-back (RS) once `RS_INTERVAL`
//! descriptors have gone out since the last request, and buffers are reclaimed in whole groups.
//!
//! A ring does not own its queue's enable bit: the driver's queue type disables the queue in its
//! `Drop` before the ring (and its memory) is dropped.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use super::config::{check_ring_size, RS_INTERVAL};
use super::desc::{TxContext, TxData, TxDone, DESC_SIZE};
use super::offload::asks_offload;
use crate::device::{QueueError, QueueStats};
use crate::error::Result;
use crate::platform::barrier::dma_rmb;
use crate::platform::dma::{Desc, DescTable, Meta, Packet, TxSlots};
use crate::platform::mmio::Mmio;
use crate::vlan::insert::{insert_front, SwVlanCounts};
use crate::vlan::Tpid;

mod frame;
pub use frame::{MAX_TX_FRAME, MAX_TX_SEGS};

/// Writes a data descriptor for `p` (`len` bytes, as the transmit walk read it) with command
/// bits `cmd`.
#[inline(always)]
fn put_data(d: &Desc, p: &Packet, len: u32, cmd: u32) {
    let [w0, w1] = TxData {
        addr: p.data_iova(),
        len,
        cmd,
    }
    .words();
    d.store(0, w0, Relaxed);
    d.store(1, w1, Relaxed);
}

/// A transmit ring.
pub struct TxRing<M: Mmio> {
    mmio: Arc<M>,
    tail: usize,
    head: usize,
    desc: DescTable,
    mask: usize,
    /// Next slot to fill.
    next: usize,
    /// Oldest slot not yet reclaimed.
    clean: usize,
    /// TCI programmed in context slot 0, if any.
    ctx_tci: Option<u16>,
    /// The offload context programmed in slot 1 (its two words), if any.
    ctx_offload: Option<[u64; 2]>,
    /// A refused offload request has been logged (once per queue).
    refusal_logged: bool,
    /// Descriptors written since the last one that asked for a write-back.
    since_rs: usize,
    /// Descriptors between two write-back requests: `RS_INTERVAL`, or half the ring for rings
    /// so small that a full ring might otherwise hold no descriptor with RS (and never drain).
    rs_interval: usize,
    /// Descriptors in flight from which a burst first reclaims: four write-back groups, or
    /// half a small ring. (DPDK's ixgbe frees only once fewer than 32 descriptors are free;
    /// this keeps far fewer buffers out and still frees a few bursts' worth per pool lock.)
    reclaim_at: usize,
    /// Descriptors with RS set, oldest first, with the buffer position queued up to them: when
    /// one is done, every slot up to it and every buffer before that position are.
    rs_marks: Marks,
    /// The buffers of the queued data descriptors, in order.
    slots: TxSlots,
    stats: QueueStats,
}

/// The write-back requests in flight, oldest first: a descriptor slot with RS set and the
/// transmit FIFO position queued up to it. A fixed ring: there are never more than one per
/// `rs_interval` descriptors in flight, plus one.
struct Marks {
    buf: Box<[(usize, usize)]>,
    head: usize,
    tail: usize,
}

impl Marks {
    fn new(at_most: usize) -> Marks {
        Marks {
            buf: vec![(0, 0); at_most.next_power_of_two()].into_boxed_slice(),
            head: 0,
            tail: 0,
        }
    }

    #[inline(always)]
    fn front(&self) -> Option<(usize, usize)> {
        (self.head != self.tail).then(|| self.buf[self.head & (self.buf.len() - 1)])
    }

    #[inline(always)]
    fn back(&self) -> Option<(usize, usize)> {
        (self.head != self.tail).then(|| self.buf[self.tail.wrapping_sub(1) & (self.buf.len() - 1)])
    }

    #[inline(always)]
    fn pop_front(&mut self) {
        self.head = self.head.wrapping_add(1);
    }

    #[inline(always)]
    fn push_back(&mut self, mark: (usize, usize)) {
        let mask = self.buf.len() - 1;
        assert!(
            self.tail.wrapping_sub(self.head) <= mask,
            "more write-back marks than descriptors"
        );
        self.buf[self.tail & mask] = mark;
        self.tail = self.tail.wrapping_add(1);
    }

    fn clear(&mut self) {
        self.head = self.tail;
    }
}

/// Where a burst stands: where it started and with how much room and how many packets, what
/// it queued, and what it dropped.
struct Burst {
    /// The descriptor it started at, and the descriptors free then.
    start: usize,
    room: usize,
    /// Packets in the batch at the start.
    total: usize,
    /// Packets queued and their bytes.
    sent: usize,
    bytes: u64,
    /// Packets dropped: frames that could not take their software tag, and others (a buffer
    /// the device cannot reach and no bounce buffer for it).
    malformed: u64,
    dropped: u64,
}

impl Burst {
    #[inline(always)]
    fn new(start: usize, room: usize, total: usize) -> Burst {
        Burst {
            start,
            room,
            total,
            sent: 0,
            bytes: 0,
            malformed: 0,
            dropped: 0,
        }
    }

    /// `k` more packets of `bytes` bytes were queued.
    #[inline(always)]
    fn took(&mut self, k: usize, bytes: u64) {
        self.sent += k;
        self.bytes += bytes;
    }
}

/// What [`TxRing::put_tagged`] and [`TxRing::put_frame`] did with the packet at the front of
/// the batch.
enum Tagged {
    /// Queued; its frame length.
    Sent(u32),
    /// Left in the batch: no room for it (and its context descriptor) in this burst.
    NoRoom,
    /// Dropped and counted: a request that cannot be honoured.
    Dropped,
}

/// Frames shorter than this are padded by the driver before they get a descriptor: a data
/// descriptor of length 0 hangs the 82599's transmit DMA, and Linux pads every frame to at
/// least 17 bytes on both chips (`ixgbe_xmit_frame_ring` and `igb_xmit_frame`: "the minimum
/// packet size ... is 17"; DPDK refuses frames under 14).
pub const MIN_TX_LEN: usize = crate::platform::dma::slots::MIN_TX_LEN;
/// What a frame shorter than [`MIN_TX_LEN`] is padded to, with zeros: the minimum Ethernet
/// frame without FCS, which the MAC pads every shorter frame to anyway (82599 HLREG0.TXPADEN,
/// 82576 TCTL.PSP), so the wire sees the same frame either way.
pub const PAD_TX_LEN: usize = 60;

/// Pads a frame shorter than [`MIN_TX_LEN`] to [`PAD_TX_LEN`] bytes with zeros
/// ([`Packet::pad_to`]: behind the pool's own headroom every buffer has room for 64 bytes, which
/// the pool checks). Returns false only if the buffer has no room for that.
#[cold]
#[inline(never)]
fn pad_short(p: &mut Packet) -> bool {
    let len = p.len();
    if !p.pad_to(PAD_TX_LEN) {
        return false;
    }
    tracing::debug!(
        len,
        "transmit: frame shorter than 17 bytes padded to 60 with zeros"
    );
    true
}

impl<M: Mmio> TxRing<M> {
    /// Allocates `size` descriptors in memory mapped through `mapper` (the device's domain).
    pub fn new(
        mmio: Arc<M>,
        tail: usize,
        head: usize,
        size: usize,
        mapper: Arc<dyn crate::platform::dma::DmaMapper>,
    ) -> Result<Self> {
        check_ring_size(size)?;
        let slots = TxSlots::new(size, &mapper);
        let desc = DescTable::new(size, mapper)?;
        Ok(TxRing {
            mmio,
            tail,
            head,
            desc,
            mask: size - 1,
            next: 0,
            clean: 0,
            ctx_tci: None,
            ctx_offload: None,
            refusal_logged: false,
            since_rs: 0,
            rs_interval: RS_INTERVAL.min(size / 2),
            reclaim_at: (4 * RS_INTERVAL).min(size / 2),
            rs_marks: Marks::new(size / RS_INTERVAL.min(size / 2) + 2),
            slots,
            stats: QueueStats::default(),
        })
    }

    /// Bus address of the descriptor ring (for TDBAL/TDBAH).
    pub fn desc_iova(&self) -> u64 {
        self.desc.iova()
    }

    /// Descriptor ring length in bytes (for TDLEN).
    pub fn desc_len(&self) -> u32 {
        ((self.mask + 1) * DESC_SIZE) as u32
    }

    /// Software counters.
    pub fn stats(&self) -> QueueStats {
        self.stats
    }

    /// The tail value last written (the slot the next descriptor goes to), for a driver that
    /// waits for the head to catch up before disabling the queue.
    pub fn tail_slot(&self) -> usize {
        self.next
    }

    /// Descriptors in flight (not yet reclaimed).
    pub fn in_flight(&self) -> usize {
        self.next.wrapping_sub(self.clean) & self.mask
    }

    /// Descriptors burst `b` may still write (data and context descriptors alike).
    #[inline(always)]
    fn left(&self, b: &Burst) -> usize {
        b.room - (self.next.wrapping_sub(b.start) & self.mask)
    }

    /// Reclaims the buffers of every finished group of descriptors: the newest done mark
    /// completes all before it, so their buffers go back in one release.
    #[inline(always)]
    fn reclaim(&mut self) {
        let desc = &self.desc;
        Self::release_marks(
            &mut self.rs_marks,
            &mut self.slots,
            &mut self.clean,
            self.mask,
            |slot| {
                let wb = TxDone(desc.load_dword(slot, 3, Relaxed));
                dma_rmb();
                wb.done()
            },
        );
    }

    /// Pops the oldest marks while `done(slot)` holds and releases everything up to the last
    /// one popped, in one go. The device finishes descriptors in order, so when the newest mark
    /// is done all are, and one test does.
    #[inline(always)]
    fn release_marks(
        marks: &mut Marks,
        slots: &mut TxSlots,
        clean: &mut usize,
        mask: usize,
        done: impl Fn(usize) -> bool,
    ) {
        if let Some((slot, pos)) = marks.back() {
            if done(slot) {
                marks.clear();
                slots.release(pos);
                *clean = (slot + 1) & mask;
                return;
            }
        }
        let mut last = None;
        while let Some((slot, pos)) = marks.front() {
            if !done(slot) {
                break;
            }
            marks.pop_front();
            last = Some((slot, pos));
        }
        if let Some((slot, pos)) = last {
            slots.release(pos);
            *clean = (slot + 1) & mask;
        }
    }

    /// Queues packets from the front of `batch`; leaves the rest there (module doc).
    #[inline]
    pub fn tx_burst(&mut self, batch: &mut Vec<Packet>) -> Result<usize, QueueError> {
        self.burst(batch, None, &mut SwVlanCounts::default())
    }

    /// [`TxRing::tx_burst`] with software tag insertion (TPID `tpid`) for the packets that ask
    /// for a tag, done where a run stops for them anyway: untagged bursts pay nothing. Adds the
    /// tags inserted and the frames dropped (too short to take one) to `counts`.
    #[inline]
    pub fn tx_burst_sw_vlan(
        &mut self,
        batch: &mut Vec<Packet>,
        tpid: Tpid,
        counts: &mut SwVlanCounts,
    ) -> Result<usize, QueueError> {
        self.burst(batch, Some(tpid), counts)
    }

    /// The one transmit path: runs of packets until the batch or the room is used up, each
    /// stop dealt with by `TxRing::unblock`. `sw` is the TPID of software insertion.
    #[inline(always)]
    fn burst(
        &mut self,
        batch: &mut Vec<Packet>,
        sw: Option<Tpid>,
        counts: &mut SwVlanCounts,
    ) -> Result<usize, QueueError> {
        // Reclaim only once four write-back groups are in flight: each release then returns
        // every finished group (up to four bursts' worth of buffers) in one pool lock.
        if self.in_flight() >= self.reclaim_at {
            self.reclaim();
        }
        // One slot stays empty so that tail == head means "empty", never "full".
        let mut b = Burst::new(self.next, self.mask - self.in_flight(), batch.len());
        loop {
            let want = batch.len().min(self.left(&b));
            let run = want.min(self.mask + 1 - self.next);
            let (k, bytes) = self.send_run(batch, run, sw.is_some());
            b.took(k, bytes);
            if k == want {
                break;
            }
            if k < run && !self.unblock(batch, &mut b, sw, counts) {
                break;
            }
        }
        self.end(b, counts)
    }

    /// Queues up to `run` packets from the front of `batch` at `next` (no wrap), stopping
    /// before a packet that asks for a tag the run cannot give: in hardware mode one the
    /// context slot does not hold, in software mode (`sw`) any.
    #[inline(always)]
    fn send_run(&mut self, batch: &mut Vec<Packet>, run: usize, sw: bool) -> (usize, u64) {
        let vle_tci = if sw { None } else { self.ctx_tci };
        let at = self.next;
        let (k, bytes) = self
            .slots
            .send(batch, &self.desc.descs()[at..at + run], |d, p, len| {
                let mut cmd = TxData::CMD;
                if p.meta.flags & Meta::TX_VLAN != 0 {
                    if vle_tci != Some(p.meta.vlan_tci) {
                        return false;
                    }
                    cmd |= TxData::VLE;
                }
                put_data(d, p, len, cmd);
                true
            });
        self.next = (at + k) & self.mask;
        (k, bytes)
    }

    /// A run stopped before the packet now at the front of `batch`; gives it what it needs:
    /// a copy the device can reach, padding, its tag in the frame (software mode) or a context
    /// descriptor and VLE (hardware mode). Returns whether the burst goes on.
    #[cold]
    #[inline(never)]
    fn unblock(
        &mut self,
        batch: &mut Vec<Packet>,
        b: &mut Burst,
        sw: Option<Tpid>,
        counts: &mut SwVlanCounts,
    ) -> bool {
        let p = &batch[0];
        if !self.slots.reaches(p) {
            return match self.bounce(batch) {
                Ok(copied) => copied,
                Err(e) => {
                    // Counted as dropped (and logged once per queue, in `bounce`).
                    tracing::debug!(error = %e, "transmit: dropping a packet the device cannot reach");
                    self.drop_front(batch, b);
                    true
                }
            };
        }
        let tagged = p.meta.flags & Meta::TX_VLAN != 0;
        if let (Some(tpid), true) = (sw, tagged) {
            // Push the tags of the packets at the front that ask for one; the next run sends
            // them as they are now.
            let n = batch.len().min(self.left(b));
            let (inserted, bad) = insert_front(batch, n, tpid);
            counts.inserted += inserted;
            if bad && inserted == 0 {
                // The front packet cannot take its tag (one behind packets that took theirs
                // waits until they are queued and it is at the front).
                tracing::debug!("VLAN: dropping a frame that cannot take its transmit tag");
                drop(batch.remove(0));
                b.malformed += 1;
            }
            return true;
        }
        if p.is_chained() || asks_offload(p) {
            return match self.put_frame(batch, b) {
                Tagged::Sent(len) => {
                    b.took(1, u64::from(len));
                    true
                }
                Tagged::Dropped => true,
                Tagged::NoRoom => false,
            };
        }
        if p.len() < MIN_TX_LEN {
            if !pad_short(&mut batch[0]) {
                // Cannot happen with a pool's buffers (64 bytes behind the headroom at least);
                // dropped rather than retried, so the burst always moves on.
                self.drop_front(batch, b);
            }
            return true;
        }
        match self.put_tagged(batch, b) {
            Tagged::Sent(len) => {
                b.took(1, u64::from(len));
                true
            }
            Tagged::Dropped => true,
            Tagged::NoRoom => false,
        }
    }

    /// Ends a burst: the write-back request if one is due, the doorbell and the counters; or,
    /// when nothing was queued, a check that the device is still there.
    #[inline(always)]
    fn end(&mut self, b: Burst, counts: &mut SwVlanCounts) -> Result<usize, QueueError> {
        if b.sent != b.total {
            counts.malformed += b.malformed;
            self.stats.no_room += (b.total - b.sent) as u64 - b.malformed - b.dropped;
        }
        if b.sent == 0 {
            if b.total > 0
                && b.malformed + b.dropped == 0
                && self.mmio.read32(self.head) == u32::MAX
            {
                return Err(QueueError::DeviceGone);
            }
            return Ok(0);
        }
        self.finish(b.start, b.sent, b.bytes);
        Ok(b.sent)
    }

    /// The doorbell of a burst that queued `sent > 0` packets (`bytes` bytes) from descriptor
    /// `start` on, after the write-back request if one is due; and the counters.
    #[inline(always)]
    fn finish(&mut self, start: usize, sent: usize, bytes: u64) {
        self.since_rs += self.next.wrapping_sub(start) & self.mask;
        if self.since_rs >= self.rs_interval {
            // The burst's last descriptor is a data descriptor (a context one always precedes
            // its packet's), and still ours: the tail has not moved past it yet.
            let last = self.next.wrapping_sub(1) & self.mask;
            let cmd = self.desc.load_dword(last, 2, Relaxed);
            self.desc.store_dword(last, 2, cmd | TxData::RS, Relaxed);
            self.rs_marks.push_back((last, self.slots.tail()));
            self.since_rs = 0;
        }
        self.ring_doorbell();
        self.stats.packets += sent as u64;
        self.stats.bytes += bytes;
    }

    /// Writes the tail register (the doorbell, with its `dma_wmb`): the device owns every
    /// descriptor before `next`. Out of line on arm64 only, so that `scripts/arm64 barriers`
    /// finds it in the disassembly; inlined on x86-64 as before.
    #[cfg_attr(target_arch = "aarch64", inline(never))]
    #[cfg_attr(not(target_arch = "aarch64"), inline(always))]
    fn ring_doorbell(&self) {
        self.mmio.doorbell(self.tail, self.next as u32);
    }

    /// Drops the packet at the front of `batch`, counted in `stats.dropped`.
    #[cold]
    fn drop_front(&mut self, batch: &mut Vec<Packet>, b: &mut Burst) {
        drop(batch.remove(0));
        self.stats.dropped += 1;
        b.dropped += 1;
    }

    /// Replaces the packet at the front of `batch`, whose pool the device cannot reach, by a
    /// copy in a buffer of the ring's own bounce pool (made now if this is the first such
    /// packet). Returns false when every bounce buffer is in flight (the burst stops there, as
    /// on a full ring), and an error when no bounce pool can be made or the frame does not
    /// fit one of its buffers.
    #[cold]
    #[inline(never)]
    fn bounce(&mut self, batch: &mut [Packet]) -> Result<bool> {
        let copied = self.slots.bounce_front(batch, self.mask + 1)?;
        self.stats.copied += u64::from(copied);
        Ok(copied)
    }

    /// Deals with the packet at the front of `batch` in hardware mode, which asks for a tag
    /// the context slot does not hold: a context descriptor with the new tag, then the data
    /// descriptor with VLE.
    /// A context descriptor is written only if this packet's data descriptor fits after it.
    #[cold]
    #[inline(never)]
    fn put_tagged(&mut self, batch: &mut Vec<Packet>, b: &Burst) -> Tagged {
        let Some(p) = batch.first() else {
            return Tagged::NoRoom;
        };
        let (tci, len) = (p.meta.vlan_tci, p.len() as u32);
        // (The loop sends tagged packets inline while the context holds their tag.)
        if self.ctx_tci != Some(tci) {
            // Room for the context descriptor and this packet's data descriptor. (Asking for
            // room for every packet still in the batch as well would never send a tagged batch
            // at least as large as the free room: nothing would go, burst after burst.)
            if self.left(b) < 2 {
                return Tagged::NoRoom;
            }
            // A context descriptor carrying the tag; it stays valid for later packets.
            let d = self.desc.view().at(self.next);
            let [w0, w1] = TxContext { vlan_tci: tci }.words();
            d.store(0, w0, Relaxed);
            d.store(1, w1, Relaxed);
            self.next = (self.next + 1) & self.mask;
            self.ctx_tci = Some(tci);
        }
        let cmd = TxData::CMD | TxData::VLE;
        let i = self.next;
        let (taken, _) = self
            .slots
            .send(batch, &self.desc.descs()[i..=i], |d, p, len| {
                put_data(d, p, len, cmd);
                true
            });
        debug_assert_eq!(taken, 1);
        self.next = (i + 1) & self.mask;
        Tagged::Sent(len)
    }

    /// Reclaims everything the device has finished, according to its head register (an MMIO
    /// read; for idle queues and shutdown, not for the fast path): every group whose RS
    /// descriptor is behind the head, and everything once the head has caught up with the
    /// tail. Returns the descriptors still in flight.
    pub fn reclaim_by_head(&mut self) -> Result<usize, QueueError> {
        let head = self.mmio.read32(self.head);
        if head == u32::MAX {
            return Err(QueueError::DeviceGone);
        }
        let head = head as usize & self.mask;
        if head == self.next {
            self.rs_marks.clear();
            self.slots.release(self.slots.tail());
            self.clean = head;
            return Ok(0);
        }
        // Marks behind the head are done (measured from the clean slot, which moves only
        // after the loop).
        let (clean, mask) = (self.clean, self.mask);
        let behind = head.wrapping_sub(clean) & mask;
        Self::release_marks(
            &mut self.rs_marks,
            &mut self.slots,
            &mut self.clean,
            mask,
            |slot| slot.wrapping_sub(clean) & mask < behind,
        );
        Ok(self.in_flight())
    }

    /// Forgets the cached contexts (after a reset the device lost them).
    pub fn reset_context(&mut self) {
        self.ctx_tci = None;
        self.ctx_offload = None;
    }

    /// For a ring the device lost (a function reset) or a queue stopped to restart (after
    /// [`TxRing::reclaim_by_head`] took back what was sent): every buffer still queued is
    /// released, counted in `dropped` (the device will not send it any more), and the ring
    /// starts again at slot 0 with no context cached. Only while the queue is disabled;
    /// program head = tail = 0 before enabling it. Returns the buffers released.
    pub fn reset_slots(&mut self) -> u64 {
        let lost = self.slots.queued() as u64;
        self.rs_marks.clear();
        self.slots.release(self.slots.tail());
        self.next = 0;
        self.clean = 0;
        self.since_rs = 0;
        self.reset_context();
        self.stats.dropped += lost;
        lost
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::platform::dma::{IdentityMapper, Pool, PoolConfig};
    use crate::platform::mmio::RecordingMmio;
    use crate::vlan::Tpid;

    /// A transmit ring of `size` slots on a recording register file, and a pool of `buffers`.
    pub(super) fn tx_ring(size: usize, buffers: usize) -> (TxRing<RecordingMmio>, Pool) {
        let mmio = Arc::new(RecordingMmio::new(0x100));
        let mapper: Arc<dyn crate::platform::dma::DmaMapper> = Arc::new(IdentityMapper);
        let pool = Pool::new(
            PoolConfig {
                buffers,
                ..PoolConfig::default()
            },
            mapper.clone(),
        )
        .unwrap();
        (TxRing::new(mmio, 0x18, 0x10, size, mapper).unwrap(), pool)
    }

    /// Plays the device: marks every descriptor with RS done, as a write-back would.
    fn complete_rs(ring: &TxRing<RecordingMmio>) -> usize {
        let mut done = 0;
        for i in 0..ring.desc.len() {
            let cmd = ring.desc.load_dword(i, 2, Relaxed);
            if cmd & TxData::RS != 0 {
                ring.desc.store_dword(i, 3, TxDone::DD, Relaxed);
                done += 1;
            }
        }
        done
    }

    #[test]
    fn reclaim_frees_the_finished_groups_only() {
        // 512 slots: a write-back request every 32 descriptors, reclaim from 128 in flight.
        let (mut ring, pool) = tx_ring(512, 256);
        let mut batch = Vec::new();
        for _ in 0..4 {
            pool.alloc_bulk_len(32, 60, &mut batch);
            assert_eq!(ring.tx_burst(&mut batch).unwrap(), 32);
        }
        let rs: Vec<usize> = (0..512)
            .filter(|&i| ring.desc.load_dword(i, 2, Relaxed) & TxData::RS != 0)
            .collect();
        assert_eq!(rs, [31, 63, 95, 127], "RS on each burst's last descriptor");
        // The device finished the first two groups, not the newest: the walk from the oldest
        // frees exactly those 64 buffers.
        for &i in &rs[..2] {
            ring.desc.store_dword(i, 3, TxDone::DD, Relaxed);
        }
        pool.alloc_bulk_len(32, 60, &mut batch);
        assert_eq!(ring.tx_burst(&mut batch).unwrap(), 32);
        assert_eq!(pool.stats().in_use, 5 * 32 - 64);
        assert_eq!(ring.in_flight(), 5 * 32 - 64);
        // Then everything is done: the newest mark alone frees the rest.
        complete_rs(&ring);
        ring.reclaim();
        assert_eq!((pool.stats().in_use, ring.in_flight()), (0, 0));
        drop(ring);
        assert_eq!(pool.stats().in_use, 0);
    }

    #[test]
    fn smallest_transmit_ring_asks_for_write_backs_and_drains() {
        let (mut ring, pool) = tx_ring(RS_INTERVAL, 128);
        let mut batch = Vec::new();
        pool.alloc_bulk_len(64, 60, &mut batch);
        assert_eq!(ring.tx_burst(&mut batch).unwrap(), RS_INTERVAL - 1);
        assert!(
            complete_rs(&ring) > 0,
            "a full ring holds a descriptor with RS"
        );
        assert!(
            ring.tx_burst(&mut batch).unwrap() > 0,
            "and drains once it is done"
        );
        drop(batch);
        drop(ring);
        assert_eq!(pool.stats().in_use, 0);
    }

    #[test]
    fn tagged_packets_get_a_context_or_software_insertion_and_short_frames_are_dropped() {
        let (mut ring, pool) = tx_ring(64, 64);
        let mut batch = Vec::new();
        pool.alloc_bulk_len(4, 60, &mut batch);
        for (p, tci) in batch[1..].iter_mut().zip([100u16, 100, 200]) {
            p.meta.vlan_tci = tci;
            p.meta.flags |= Meta::TX_VLAN;
        }
        assert_eq!(ring.tx_burst(&mut batch).unwrap(), 4);
        // data, context(100), data+VLE, data+VLE (same tag), context(200), data+VLE
        let dtyp = |r: &TxRing<RecordingMmio>, i| r.desc.load_dword(i, 2, Relaxed) & (0xf << 20);
        let vle =
            |r: &TxRing<RecordingMmio>, i| r.desc.load_dword(i, 2, Relaxed) & TxData::VLE != 0;
        assert_eq!(ring.tail_slot(), 6);
        assert_eq!(
            (0..6).map(|i| dtyp(&ring, i)).collect::<Vec<_>>(),
            [
                TxData::DTYP,
                TxContext::DTYP,
                TxData::DTYP,
                TxData::DTYP,
                TxContext::DTYP,
                TxData::DTYP
            ]
        );
        assert_eq!(
            (vle(&ring, 0), vle(&ring, 2), vle(&ring, 3), vle(&ring, 5)),
            (false, true, true, true)
        );
        assert_eq!(
            ring.desc.load(4, 0, Relaxed) >> 16,
            200,
            "the second context's TCI"
        );

        // Software mode: the tag goes into the frame; a frame too short for it is dropped.
        pool.alloc_bulk_len(3, 60, &mut batch);
        batch[0].meta.flags |= Meta::TX_VLAN;
        batch[0].meta.vlan_tci = 5;
        batch[1].set_len(8);
        batch[1].meta.flags |= Meta::TX_VLAN;
        let mut c = SwVlanCounts::default();
        let sent = ring
            .tx_burst_sw_vlan(&mut batch, Tpid::C_TAG, &mut c)
            .unwrap();
        assert_eq!((sent, c.inserted, c.malformed), (2, 1, 1));
        assert!(batch.is_empty());
        assert_eq!(ring.tail_slot(), 8);
        assert_eq!(
            ring.desc.load_dword(6, 2, Relaxed) & 0xffff,
            64,
            "60 + the tag"
        );
        assert!(!vle(&ring, 6) && dtyp(&ring, 6) == TxData::DTYP);
        assert_eq!(ring.desc.load_dword(7, 2, Relaxed) & 0xffff, 60);
        assert_eq!(
            pool.stats().in_use,
            6,
            "the dropped frame went back to the pool"
        );
        drop(ring);
        assert_eq!(pool.stats().in_use, 0);
    }

    #[test]
    fn a_tagged_batch_larger_than_the_free_room_still_goes_out() {
        // The smallest ring: 31 free descriptors. 40 packets asking for a tag the context slot
        // does not hold: one context descriptor, then 30 data descriptors with VLE.
        let (mut ring, pool) = tx_ring(RS_INTERVAL, 128);
        let mut batch = Vec::new();
        pool.alloc_bulk_len(40, 60, &mut batch);
        for p in &mut batch {
            p.meta.vlan_tci = 7;
            p.meta.flags |= Meta::TX_VLAN;
        }
        assert_eq!(ring.tx_burst(&mut batch).unwrap(), 30);
        assert_eq!(batch.len(), 10);
        assert_eq!(ring.stats().no_room, 10);
        assert_eq!(
            ring.desc.load_dword(0, 2, Relaxed) & (0xf << 20),
            TxContext::DTYP
        );
        drop(batch);
        drop(ring);
        assert_eq!(pool.stats().in_use, 0);
    }

    #[test]
    fn buffers_of_several_pools_go_home_when_their_group_is_done() {
        let mmio = Arc::new(RecordingMmio::new(0x100));
        let mapper: Arc<dyn crate::platform::dma::DmaMapper> = Arc::new(IdentityMapper);
        let cfg = PoolConfig {
            buffers: 256,
            ..PoolConfig::default()
        };
        let a = Pool::new(cfg, mapper.clone()).unwrap();
        let b = Pool::new(cfg, mapper.clone()).unwrap();
        let mut ring = TxRing::new(mmio, 0x18, 0x10, 256, mapper).unwrap();
        let mut batch = Vec::new();
        for round in 0..20 {
            for _ in 0..4 {
                a.alloc_bulk_len(5, 60, &mut batch);
                b.alloc_bulk_len(3, 60, &mut batch);
            }
            let n = batch.len();
            assert_eq!(ring.tx_burst(&mut batch).unwrap(), n, "round {round}");
            complete_rs(&ring);
        }
        ring.tx_burst(&mut batch).unwrap();
        // Everything up to the last write-back request is home; the rest is in flight.
        let (ua, ub) = (a.stats().in_use, b.stats().in_use);
        assert!(ua + ub <= 32 + 32, "{ua} {ub}");
        assert_eq!(ring.in_flight(), ua + ub);
        drop(ring);
        assert_eq!((a.stats().in_use, b.stats().in_use), (0, 0));
    }
}
