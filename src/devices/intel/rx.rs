//! The receive ring of the 82576 and the 82599: from written-back descriptors to packets.
//!
//! The discipline (after Hubris' drivers, shared with [`super::tx`]):
//! - descriptors are read and written only as atomic words of a [`DescTable`], decoded by the
//!   typed views of [`super::desc`], never through a Rust reference;
//! - ownership moves to the driver when a load of the write-back's second word sees the DD bit,
//!   followed by [`dma_rmb`], so the frame bytes and the rest of the write-back are read after
//!   the device wrote them (Linux `igb_clean_rx_irq`: the status test, then `dma_rmb()`);
//! - a burst ends with at most one doorbell, written by [`Mmio::doorbell`], which puts
//!   [`dma_wmb`](crate::platform::barrier::dma_wmb) in front of it so the device sees the
//!   re-armed descriptors before the new tail (Linux `writel`);
//! - slots hold one word per buffer ([`RxSlots`]); a packet is built when a frame reaches the
//!   application;
//! - refills come from a reserve topped up when a burst needs it (one pool lock every three busy
//!   bursts) and every received slot is re-armed in place, so the ring never has holes; a short
//!   reserve receives fewer;
//! - one path per burst: plain good frames (whole, no error) take one mask test and a table
//!   lookup for their flags; anything else is dealt with one descriptor at a time
//!   (`RxRing::slow_one`).
//!
//! A ring does not own its queue's enable bit: the driver's queue type disables the queue in its
//! `Drop` before the ring (and its memory) is dropped.
//!
//! Changing how the device writes descriptors back (for example whether it strips VLAN tags, which
//! [`RxRing::hw_strip`] mirrors) is the driver's job too, and it must not race with descriptors
//! already written under the old setting: stop the queue, harvest every finished descriptor
//! ([`RxRing::done_pending`] tells when none is left), change the setting and `hw_strip`, program
//! the head at [`RxRing::restart_slot`], re-enable, then [`RxRing::rearm_all`].

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use super::config::check_ring_size;
use super::desc::{RxInfo, RxRead, RxStatus, DESC_SIZE};
use crate::device::{QueueError, QueueStats};
use crate::error::Result;
use crate::platform::barrier::dma_rmb;
use crate::platform::dma::slots::RX_RESERVE;
use crate::platform::dma::{Desc, DescTable, Meta, Packet, Pool, RxSlots};
use crate::platform::mmio::Mmio;

/// What differs between the chips for the receive ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChipRx {
    /// Write-back error bits that mean "drop this frame" (82576 RXE b31, 82599 RXE b29).
    pub frame_error: u32,
    /// IPv4 checksum error bit.
    pub ip_error: u32,
    /// L4 checksum error bit.
    pub l4_error: u32,
    /// The device sets VP only when it stripped the tag (82576, and QEMU's model of it; DPDK's
    /// igb reads VP the same way), so every descriptor says by itself whether its frame was
    /// stripped and [`RxRing::hw_strip`] is not consulted. False on the 82599, where VP means
    /// only "a tag matching VET was seen" and stripping must come from the queue's setting.
    pub vp_means_stripped: bool,
    /// The L4 error bit is not to be believed for UDP (write-back pkt_info bit 9): the 82599
    /// can flag L4E on UDP frames whose checksum field is 0 ("no checksum"). Linux
    /// (`ixgbe_rx_checksum`, `__IXGBE_RX_CSUM_UDP_ZERO_ERR`) and DPDK (`rx_udp_csum_zero_err`)
    /// then report the checksum as not verified; so do we (neither OK nor BAD).
    pub udp_l4_error_unreliable: bool,
}

impl ChipRx {
    /// A chip whose write-back error bits are `frame_error`, `ip_error` and `l4_error` (bit
    /// numbers in the status/error dword), with VP meaning only "a tag was seen" and every L4
    /// error believed; the builders below say otherwise.
    pub const fn errors(frame_error: u32, ip_error: u32, l4_error: u32) -> ChipRx {
        ChipRx {
            frame_error: 1 << frame_error,
            ip_error: 1 << ip_error,
            l4_error: 1 << l4_error,
            vp_means_stripped: false,
            udp_l4_error_unreliable: false,
        }
    }

    /// VP is set only on frames the device stripped ([`ChipRx::vp_means_stripped`]).
    pub const fn vp_means_stripped(mut self) -> ChipRx {
        self.vp_means_stripped = true;
        self
    }

    /// L4E is not to be believed for UDP ([`ChipRx::udp_l4_error_unreliable`]).
    pub const fn udp_l4_error_unreliable(mut self) -> ChipRx {
        self.udp_l4_error_unreliable = true;
        self
    }
}

// The branchless flag decoding in `RxRing::rx_burst` relies on BAD being OK shifted by one.
const _: () = assert!(
    Meta::RX_IP_CSUM_BAD == Meta::RX_IP_CSUM_OK << 1
        && Meta::RX_L4_CSUM_BAD == Meta::RX_L4_CSUM_OK << 1
);

/// Arms a receive descriptor with a buffer at `iova` (read format; clears the previous
/// write-back's DD).
#[inline(always)]
fn arm(d: &Desc, iova: u64) {
    let [pkt, hdr] = RxRead { pkt_addr: iova }.words();
    d.store(0, pkt, Relaxed);
    d.store(1, hdr, Relaxed);
}

/// What the fast receive path stores as the low half of [`Meta`] (TCI mask in bits 15:0, flags
/// in bits 31:16), indexed by the low byte of the status (VP, L4CS, IPCS are bits 3, 5, 6).
/// Frames with an error bit never use it (they take the slow path), so only the "checked and
/// good" flags appear.
fn flag_table(chip: ChipRx, hw_strip: bool) -> [u32; 256] {
    let vp_stripped = hw_strip || chip.vp_means_stripped;
    let mut t = [0u32; 256];
    for (i, e) in t.iter_mut().enumerate() {
        let status = i as u32;
        let vp = status & RxStatus::VP != 0;
        let mut flags = 0u16;
        if vp {
            flags |= if vp_stripped {
                Meta::VLAN_STRIPPED
            } else {
                Meta::RX_VLAN_SEEN
            };
        }
        if status & RxStatus::L4CS != 0 {
            flags |= Meta::RX_L4_CSUM_OK;
        }
        if status & RxStatus::IPCS != 0 {
            flags |= Meta::RX_IP_CSUM_OK;
        }
        let tci_mask = if vp && vp_stripped { 0xffff } else { 0 };
        *e = u32::from(flags) << 16 | tci_mask;
    }
    t
}

/// A receive ring.
pub struct RxRing<M: Mmio> {
    mmio: Arc<M>,
    tail: usize,
    head: usize,
    desc: DescTable,
    slots: RxSlots,
    mask: usize,
    next: usize,
    chip: ChipRx,
    /// Hardware strips tags on this queue: VP means "stripped, TCI in the descriptor".
    hw_strip: bool,
    /// Metadata of the fast path by status bits (see [`flag_table`]).
    flags: [u32; 256],
    /// Bits of the write-back's second word that the fast path requires to read exactly
    /// DD | EOP: done, whole frame, no error, and no length bit at or above `fast_len`.
    fast_mask: u64,
    /// The first segments of a frame that spans descriptors, until its EOP descriptor comes
    /// (kept across bursts: a frame is delivered whole or not at all).
    partial: Option<Packet>,
    /// The frame being assembled is dropped at its EOP (a segment could not be kept).
    discard: bool,
    idle_polls: u32,
    stats: QueueStats,
}

/// The most descriptors one received frame may span: a 16 KiB frame (more than either chip
/// receives) in 1 KiB buffers. A frame that goes on longer is dropped whole.
const MAX_RX_SEGS: usize = 16;

/// Empty polls between two liveness checks of an idle device (an MMIO read of the head register).
const IDLE_CHECK: u32 = 1024;

impl<M: Mmio> RxRing<M> {
    /// Allocates descriptors and buffers for `size` slots. The caller programs base, length,
    /// head and enable, then calls [`RxRing::start`].
    pub fn new(
        mmio: Arc<M>,
        tail: usize,
        head: usize,
        size: usize,
        pool: Pool,
        chip: ChipRx,
    ) -> Result<Self> {
        check_ring_size(size)?;
        let desc = DescTable::new(size, pool.memory().mapper().clone())?;
        let slots = RxSlots::new(pool, size)?;
        let fast_len = slots.fast_len();
        for (i, d) in desc.descs().iter().enumerate() {
            arm(d, slots.data_iova(i));
        }
        Ok(RxRing {
            mmio,
            tail,
            head,
            desc,
            slots,
            mask: size - 1,
            next: 0,
            chip,
            hw_strip: false,
            flags: flag_table(chip, false),
            fast_mask: u64::from(
                RxStatus::DD | RxStatus::EOP | chip.frame_error | chip.ip_error | chip.l4_error,
            ) | u64::from(!fast_len) << 32,
            partial: None,
            discard: false,
            idle_polls: 0,
            stats: QueueStats::default(),
        })
    }

    /// Bus address of the descriptor ring (for RDBAL/RDBAH).
    pub fn desc_iova(&self) -> u64 {
        self.desc.iova()
    }

    /// Descriptor ring length in bytes (for RDLEN).
    pub fn desc_len(&self) -> u32 {
        (self.size() * DESC_SIZE) as u32
    }

    /// Number of slots.
    pub fn size(&self) -> usize {
        self.mask + 1
    }

    /// Whether the hardware strips tags on this queue (VP then means "stripped, TCI in the
    /// descriptor").
    pub fn hw_strip(&self) -> bool {
        self.hw_strip
    }

    /// Changes how VP is read. Only while the queue is stopped and drained (module doc).
    pub fn set_hw_strip(&mut self, on: bool) {
        self.hw_strip = on;
        self.flags = flag_table(self.chip, on);
    }

    /// Hands every slot but one to the device (RDT = size - 1).
    pub fn start(&mut self) {
        self.next = 0;
        self.ring_doorbell(self.mask as u32);
    }

    /// Writes the tail register (the doorbell, with its `dma_wmb`): the device owns every slot
    /// up to the one before `tail`. On arm64 it stays a function of its own, so that
    /// `scripts/arm64 barriers` finds it in the disassembly and checks the barrier before the
    /// store; on x86-64 it is inlined as before.
    #[cfg_attr(target_arch = "aarch64", inline(never))]
    #[cfg_attr(not(target_arch = "aarch64"), inline(always))]
    fn ring_doorbell(&self, tail: u32) {
        self.mmio.doorbell(self.tail, tail);
    }

    /// Whether the next slot holds a finished descriptor not yet harvested (a load of its DD
    /// bit, then [`dma_rmb`]; no register access).
    pub fn done_pending(&self) -> bool {
        let wb = RxStatus(self.desc.load(self.next, 1, Relaxed));
        dma_rmb();
        wb.done()
    }

    /// Whether a finished slot could be harvested now (a buffer to re-arm it with exists).
    pub fn can_refill(&self) -> bool {
        self.slots.can_refill()
    }

    /// For a restart of a stopped and drained queue: the slot the device must resume at
    /// (program it as the head before re-enabling). Every slot is armed at that point: harvested
    /// slots were re-armed in place, the others were never written back. A frame whose first
    /// descriptors were harvested but whose EOP never came is abandoned and counted as dropped.
    pub fn restart_slot(&mut self) -> usize {
        if self.partial.take().is_some() || self.discard {
            self.discard = false;
            self.stats.dropped += 1;
        }
        self.next
    }

    /// After a restart at [`RxRing::restart_slot`]: hands every slot but one back to the device
    /// (tail = the slot before the head).
    pub fn rearm_all(&mut self) {
        self.idle_polls = 0;
        self.ring_doorbell((self.next.wrapping_sub(1) & self.mask) as u32);
    }

    /// For a ring the device lost (a function reset) or a queue stopped to restart: every slot
    /// armed again with the buffer it holds, frames the device finished but nobody received
    /// yet dropped, a frame half gathered dropped, and the ring back at slot 0. Returns the
    /// frames dropped (also counted in `dropped`). Only while the queue is disabled; program
    /// the head at 0, enable, then [`RxRing::start`].
    ///
    /// Every slot is re-armed, not only the harvested ones: a slot whose frame could not be
    /// taken (no buffer in reserve) still holds the device's write-back, whose words overwrote
    /// the buffer address, and the device must never see that as an address.
    pub fn reset_slots(&mut self) -> u64 {
        let mut lost = u64::from(self.partial.take().is_some() || self.discard);
        self.discard = false;
        // The queue is disabled: the device writes none of these words now, and the status
        // word is the only one read, so a plain load needs no barrier after it.
        for (i, d) in self.desc.descs().iter().enumerate() {
            let wb = RxStatus(d.load(1, Relaxed));
            lost += u64::from(wb.done() && wb.bits() & RxStatus::EOP != 0);
            arm(d, self.slots.data_iova(i));
        }
        self.next = 0;
        self.idle_polls = 0;
        self.stats.dropped += lost;
        lost
    }

    /// The pool buffers come from.
    pub fn pool(&self) -> &Pool {
        self.slots.pool()
    }

    /// Software counters.
    pub fn stats(&self) -> QueueStats {
        self.stats
    }

    /// Receives up to `max` frames into `batch`.
    ///
    /// One path: each pass takes a window of slots (within the reserve, not wrapping) and
    /// harvests plain good frames from it (`RxRing::harvest`: one mask test and a table
    /// lookup each); a descriptor that is done but anything else stops the pass, and
    /// `RxRing::slow_one` deals with it. A busy burst is one pass.
    ///
    /// Always inlined into the queue's burst: as a call of its own (LLVM's choice once the
    /// queue's fault check made the caller larger) its prologue and register saves cost 0.5
    /// instructions per forwarded packet (bench/instruction-budget).
    #[inline(always)]
    pub fn rx_burst(&mut self, batch: &mut Vec<Packet>, max: usize) -> Result<usize, QueueError> {
        let max = max.min(self.mask);
        let start = self.next;
        let (mut got, mut bytes) = (0, 0);
        loop {
            let want = self.window(max - got);
            let (k, b) = self.harvest(batch, want);
            got += k;
            bytes += b;
            if got == max || want == 0 {
                break;
            }
            if k < want {
                if !self.done_pending() {
                    break;
                }
                got += self.slow_one(batch);
            }
        }
        if self.next == start {
            return self.idle();
        }
        Ok(self.finish(got, bytes))
    }

    /// How many slots the next pass may harvest, at most `left`: up to the end of the ring and
    /// no more than the reserve holds, which is topped up first (one pool lock) if it is short
    /// and a frame is waiting. 0 when there is nothing to harvest with.
    #[inline(always)]
    fn window(&mut self, left: usize) -> usize {
        let want = left.min(self.mask + 1 - self.next);
        if self.slots.reserved() >= want {
            return want;
        }
        if self.done_pending() && self.slots.reserve(left, RX_RESERVE) == 0 {
            self.stats.no_room += 1;
        }
        want.min(self.slots.reserved())
    }

    /// The fast path over the next `want` slots (no wrap, within the reserve): harvests them
    /// while each holds a plain good frame, re-arming each with a reserved buffer. Inside a
    /// frame that spans descriptors, nothing (the slow path gathers the rest of it). Out of
    /// line on arm64 only, as [`RxRing::ring_doorbell`], for the barrier check (its `dma_rmb`).
    #[cfg_attr(target_arch = "aarch64", inline(never))]
    #[cfg_attr(not(target_arch = "aarch64"), inline(always))]
    fn harvest(&mut self, batch: &mut Vec<Packet>, want: usize) -> (usize, u64) {
        if self.partial.is_some() || self.discard {
            return (0, 0);
        }
        let (table, fast, start) = (&self.flags, self.fast_mask, self.next);
        let (k, bytes) = self.slots.harvest(
            start,
            &self.desc.descs()[start..start + want],
            batch,
            |d| {
                let wb = RxStatus(d.load(1, Relaxed));
                // The DD word first, the frame (and anything else of the write-back) after.
                dma_rmb();
                if !wb.is_plain(fast) {
                    return None;
                }
                let e = table[usize::from(wb.status_byte())];
                let meta = Meta::from_low(e & (u32::from(wb.vlan_tci()) | 0xffff_0000));
                Some((wb.len(), meta))
            },
            arm,
        );
        self.next = (start + k) & self.mask;
        (k, bytes)
    }

    /// Ends a burst that moved past slots (received `got` frames, `bytes` bytes, or dropped
    /// some): hands the re-armed slots back (the device owns everything up to the slot before
    /// `next`) and counts.
    #[inline(always)]
    fn finish(&mut self, got: usize, bytes: u64) -> usize {
        self.idle_polls = 0;
        self.ring_doorbell((self.next.wrapping_sub(1) & self.mask) as u32);
        self.stats.packets += got as u64;
        self.stats.bytes += bytes;
        got
    }

    /// The descriptor at `next` is done but not a plain good frame: a segment of a frame larger
    /// than a buffer (kept until its EOP, then delivered as a chain), a frame with a MAC error
    /// or too long (dropped whole, every segment; the slot is re-armed with its own buffer), or
    /// a frame with a checksum error (delivered with BAD flags). The frame's status, VLAN and
    /// checksum fields are read from its EOP descriptor, where both chips (and QEMU's igb,
    /// `igb_write_adv_rx_descr`) write them. Returns the packets delivered (0 or 1). Needs one
    /// reserved buffer.
    #[cold]
    #[inline(never)]
    fn slow_one(&mut self, batch: &mut Vec<Packet>) -> usize {
        let i = self.next;
        let wb = RxStatus(self.desc.load(i, 1, Relaxed));
        dma_rmb();
        let (status, len, eop) = (wb.bits(), wb.len(), wb.eop());
        self.next = (i + 1) & self.mask;
        let bad = status & self.chip.frame_error != 0 || len > self.slots.max_len();
        if self.discard || bad || (!eop && self.partial_segments() >= MAX_RX_SEGS) {
            // Drop this descriptor's bytes and, at the EOP, the whole frame.
            arm(self.desc.view().at(i), self.slots.data_iova(i));
            self.partial = None;
            self.discard = !eop;
            self.stats.dropped += u64::from(eop);
            return 0;
        }
        let meta = if eop {
            self.eop_meta(i, wb)
        } else {
            Meta::default()
        };
        let d = self.desc.view().at(i);
        let Some(seg) = self.slots.take_one(i, len, meta, |iova| arm(d, iova)) else {
            // No reserve (the caller makes sure there is one): leave the slot for later.
            self.next = i;
            return 0;
        };
        let frame = match self.partial.take() {
            None => seg,
            Some(mut head) => {
                head.push_segment(seg);
                head.meta = meta;
                head
            }
        };
        if !eop {
            self.partial = Some(frame);
            return 0;
        }
        self.stats.bytes += frame.frame_len() as u64;
        batch.push(frame);
        1
    }

    /// Segments of the frame being gathered.
    fn partial_segments(&self) -> usize {
        self.partial.as_ref().map_or(0, Packet::segment_count)
    }

    /// The metadata of the frame whose EOP descriptor is slot `i` (write-back `wb`): the fast
    /// path's table, then each "checked and good" flag that has its error bit set turns into its
    /// BAD twin (BAD is OK shifted left by one).
    fn eop_meta(&self, i: usize, wb: RxStatus) -> Meta {
        let status = wb.bits();
        let e = self.flags[usize::from(wb.status_byte())];
        let mut flags = (e >> 16) as u16;
        for (ok, err) in [
            (Meta::RX_IP_CSUM_OK, self.chip.ip_error),
            (Meta::RX_L4_CSUM_OK, self.chip.l4_error),
        ] {
            if flags & ok != 0 && status & err != 0 {
                flags = flags & !ok | ok << 1;
            }
        }
        if flags & Meta::RX_L4_CSUM_BAD != 0
            && self.chip.udp_l4_error_unreliable
            && RxInfo(self.desc.load(i, 0, Relaxed)).is_udp()
        {
            flags &= !Meta::RX_L4_CSUM_BAD;
        }
        Meta::from_low(u32::from(flags) << 16 | u32::from(wb.vlan_tci()) & e)
    }

    #[cold]
    fn idle(&mut self) -> Result<usize, QueueError> {
        // The first empty poll after traffic checks at once (a device that vanished mid-traffic
        // is reported by the very next burst); a queue that stays idle checks every
        // `IDLE_CHECK` polls, so idle polling of a live device costs no register reads.
        self.idle_polls += 1;
        if self.idle_polls == 1 || self.idle_polls > IDLE_CHECK {
            self.idle_polls = 1;
            if self.mmio.read32(self.head) == u32::MAX {
                return Err(QueueError::DeviceGone);
            }
        }
        Ok(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::dma::{IdentityMapper, PoolConfig};
    use crate::platform::mmio::RecordingMmio;

    /// A recording register file and a pool of 256 buffers for a ring under test.
    fn bed() -> (Arc<RecordingMmio>, Pool) {
        let mapper: Arc<dyn crate::platform::dma::DmaMapper> = Arc::new(IdentityMapper);
        let cfg = PoolConfig {
            buffers: 256,
            ..PoolConfig::default()
        };
        (
            Arc::new(RecordingMmio::new(0x100)),
            Pool::new(cfg, mapper).unwrap(),
        )
    }

    #[test]
    fn a_frame_over_several_descriptors_arrives_whole_or_not_at_all() {
        let (mmio, pool) = bed();
        let chip = ChipRx::errors(29, 31, 30);
        let mut ring = RxRing::new(mmio, 0x18, 0x10, 64, pool.clone(), chip).unwrap();
        // Plays the device: slot `i` written back with `len` bytes (DD, EOP if `eop`, and
        // `status`), its buffer filled with `fill`.
        let wb = |r: &RxRing<RecordingMmio>, i: usize, len: u64, eop: bool, status: u32| {
            let eop = if eop { RxStatus::EOP } else { 0 };
            let w = u64::from(status | RxStatus::DD | eop) | len << 32;
            r.desc.store(i, 1, w, Relaxed);
        };
        let mut batch = Vec::new();
        // The first two pieces of a 4100-byte frame: nothing delivered yet, whatever the bursts.
        wb(&ring, 0, 2048, false, 0);
        wb(&ring, 1, 2048, false, 0);
        assert_eq!(ring.rx_burst(&mut batch, 32).unwrap(), 0);
        assert_eq!(ring.rx_burst(&mut batch, 32).unwrap(), 0);
        // Its end, with the checksum flags of the frame.
        wb(&ring, 2, 4, true, RxStatus::IPCS);
        assert_eq!(ring.rx_burst(&mut batch, 32).unwrap(), 1);
        let p = &batch[0];
        assert_eq!((p.segment_count(), p.frame_len()), (3, 4100));
        assert_eq!(p.meta.flags, Meta::RX_IP_CSUM_OK);
        assert_eq!(ring.stats().bytes, 4100);
        // A frame whose EOP descriptor carries a MAC error is dropped whole.
        wb(&ring, 3, 2048, false, 0);
        wb(&ring, 4, 100, true, chip.frame_error);
        wb(&ring, 5, 60, true, 0);
        assert_eq!(ring.rx_burst(&mut batch, 32).unwrap(), 1);
        assert_eq!(batch[1].frame_len(), 60);
        assert_eq!(ring.stats().dropped, 1);
        // A frame left unfinished at a restart is counted dropped, and its buffers go home.
        wb(&ring, 6, 2048, false, 0);
        assert_eq!(ring.rx_burst(&mut batch, 32).unwrap(), 0);
        ring.restart_slot();
        assert_eq!(ring.stats().dropped, 2);
        drop(batch);
        drop(ring);
        assert_eq!(pool.stats().in_use, 0);
    }

    #[test]
    fn receive_flags_on_the_fast_and_the_slow_path() {
        let (mmio, pool) = bed();
        // The 82599's bits (VP does not by itself mean stripped).
        let chip = ChipRx {
            frame_error: 1 << 29,
            ip_error: 1 << 31,
            l4_error: 1 << 30,
            vp_means_stripped: false,
            udp_l4_error_unreliable: true,
        };
        let mut ring = RxRing::new(mmio, 0x18, 0x10, 64, pool.clone(), chip).unwrap();
        ring.set_hw_strip(true);
        // Plays the device: writes back slot `i` with `status` (DD | EOP added), 60 bytes,
        // VLAN field 0x0064, packet type IPv4/TCP (pkt_info 0x110) or `pkt` when given.
        let wb_pkt = |r: &RxRing<RecordingMmio>, i: usize, status: u32, pkt: u64| {
            let w = u64::from(status | RxStatus::DD | RxStatus::EOP) | 60 << 32 | 0x64 << 48;
            r.desc.store(i, 0, pkt, Relaxed);
            r.desc.store(i, 1, w, Relaxed);
        };
        let wb = |r: &RxRing<RecordingMmio>, i: usize, status: u32| wb_pkt(r, i, status, 0x110);
        let good = RxStatus::IPCS | RxStatus::L4CS;
        wb(&ring, 0, good); // fast path
        wb(&ring, 1, good | RxStatus::VP); // fast path, stripped tag
        wb(&ring, 2, good | chip.ip_error); // slow path: IP checksum bad, L4 good
        wb(&ring, 3, good | RxStatus::VP | chip.l4_error); // slow path: L4 bad, stripped tag
        wb(&ring, 4, good); // fast path again
        let mut batch = Vec::new();
        assert_eq!(ring.rx_burst(&mut batch, 32).unwrap(), 5);
        let ok = Meta::RX_IP_CSUM_OK | Meta::RX_L4_CSUM_OK;
        let got: Vec<(u16, u16)> = batch
            .iter()
            .map(|p| (p.meta.flags, p.meta.vlan_tci))
            .collect();
        assert_eq!(
            got,
            [
                (ok, 0),
                (ok | Meta::VLAN_STRIPPED, 0x64),
                (Meta::RX_IP_CSUM_BAD | Meta::RX_L4_CSUM_OK, 0),
                (
                    Meta::RX_IP_CSUM_OK | Meta::RX_L4_CSUM_BAD | Meta::VLAN_STRIPPED,
                    0x64
                ),
                (ok, 0),
            ]
        );
        assert!(batch.iter().all(|p| p.len() == 60));
        // Without stripping, VP only says a tag was seen, and no TCI is reported.
        ring.set_hw_strip(false);
        wb(&ring, 5, good | RxStatus::VP);
        wb(&ring, 6, good | RxStatus::VP | chip.ip_error);
        batch.clear();
        assert_eq!(ring.rx_burst(&mut batch, 32).unwrap(), 2);
        assert_eq!(
            (batch[0].meta.flags, batch[0].meta.vlan_tci),
            (ok | Meta::RX_VLAN_SEEN, 0)
        );
        assert_eq!(
            (batch[1].meta.flags, batch[1].meta.vlan_tci),
            (
                Meta::RX_IP_CSUM_BAD | Meta::RX_L4_CSUM_OK | Meta::RX_VLAN_SEEN,
                0
            )
        );
        // The 82599's UDP erratum: L4E on a UDP frame (pkt_info 0x210) is not believed; the
        // L4 checksum is reported as not verified. On TCP it still means bad.
        wb_pkt(&ring, 7, good | chip.l4_error, 0x210);
        wb(&ring, 8, good | chip.l4_error);
        batch.clear();
        assert_eq!(ring.rx_burst(&mut batch, 32).unwrap(), 2);
        assert_eq!(batch[0].meta.flags, Meta::RX_IP_CSUM_OK);
        assert_eq!(
            batch[1].meta.flags,
            Meta::RX_IP_CSUM_OK | Meta::RX_L4_CSUM_BAD
        );
    }
}
