//! Intel advanced descriptor rings, shared by the 82576 (igb) and 82599 (ixgbe) drivers.
//!
//! Both chips use the same 16-byte "advanced" descriptors and the same head/tail protocol, so the
//! per-packet code lives here once; a driver supplies only the tail register's offset and the
//! chip's error bits. The discipline (after Hubris' drivers):
//! - descriptors are read and written only as atomic words of a [`DescTable`], never through a
//!   Rust reference;
//! - ownership moves to the driver when an *acquire* load sees the DD bit, so the frame bytes and
//!   the rest of the write-back are read after the device wrote them;
//! - every burst ends with at most one doorbell, written by [`Mmio::doorbell`], which puts a
//!   release fence in front of it so the device sees descriptors before the new tail;
//! - slots hold one word per buffer, not packets ([`RxSlots`], [`TxSlots`]); a packet is built
//!   when a frame reaches the application, and a transmitted one is reduced to its offset;
//! - receive refills from a reserve topped up when a burst needs it (one pool lock every three
//!   busy bursts) and every received slot is re-armed in place, so the ring never has holes; a
//!   short reserve receives fewer;
//! - each direction has a straight path for a burst that fits one run of descriptors and needs
//!   nothing unusual, and a general path (`rx_rest`, `burst_rest`) that takes over where it stops;
//! - receive has a fast path for the common case (whole frame, no error: one mask test and a
//!   table lookup for the flags) and a cold path for everything else, one descriptor at a time;
//! - transmit asks for a write-back (RS) at the end of a burst once `RS_INTERVAL` descriptors
//!   have gone out since the last request, and reclaims whole groups of buffers at once.
//!
//! A ring does not own its queue's enable bit: the driver's queue type disables the queue in its
//! `Drop` before the ring (and its memory) is dropped.
//!
//! Changing how the device writes descriptors back (for example whether it strips VLAN tags, which
//! [`RxRing::hw_strip`] mirrors) is the driver's job too, and it must not race with descriptors
//! already written under the old setting: stop the queue, harvest every finished descriptor
//! ([`RxRing::done_pending`] tells when none is left), change the setting and `hw_strip`, program
//! the head at [`RxRing::restart_slot`], re-enable, then [`RxRing::rearm_all`].

use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::sync::Arc;

use crate::device::{QueueError, QueueStats};
use crate::error::{Error, Result};
use crate::platform::dma::slots::RX_RESERVE;
use crate::platform::dma::{Desc, DescTable, Meta, Packet, Pool, RxSlots, TxSlots};
use crate::platform::mmio::Mmio;
use crate::vlan::insert::{insert_front, SwVlanCounts};
use crate::vlan::Tpid;

/// Descriptor size in bytes (both directions, both chips).
pub const DESC_SIZE: usize = 16;
/// Transmit descriptors between two write-back requests.
pub const RS_INTERVAL: usize = 32;

/// Receive write-back status bits (dword 2).
pub mod rx {
    /// Descriptor done.
    pub const DD: u32 = 1 << 0;
    /// End of packet.
    pub const EOP: u32 = 1 << 1;
    /// VLAN packet (igb: stripped; 82599: a tag matching VET was seen).
    pub const VP: u32 = 1 << 3;
    /// L4 (UDP) checksum computed.
    pub const UDPCS: u32 = 1 << 4;
    /// L4 (TCP/UDP) checksum computed.
    pub const L4CS: u32 = 1 << 5;
    /// IPv4 header checksum computed.
    pub const IPCS: u32 = 1 << 6;
}

/// Transmit descriptor bits.
pub mod tx {
    /// cmd_type_len: end of packet.
    pub const EOP: u32 = 1 << 24;
    /// cmd_type_len: insert FCS.
    pub const IFCS: u32 = 1 << 25;
    /// cmd_type_len: report status (write DD back).
    pub const RS: u32 = 1 << 27;
    /// cmd_type_len: advanced descriptor.
    pub const DEXT: u32 = 1 << 29;
    /// cmd_type_len: insert the VLAN tag of the referenced context.
    pub const VLE: u32 = 1 << 30;
    /// cmd_type_len: data descriptor type (0011 in bits 23:20).
    pub const DTYP_DATA: u32 = 0x3 << 20;
    /// cmd_type_len: context descriptor type (0010 in bits 23:20).
    pub const DTYP_CTXT: u32 = 0x2 << 20;
    /// Context type_tucmd_mlhl: L4 type "reserved" (no checksum offload).
    pub const L4T_RSV: u32 = 0x3 << 11;
    /// olinfo_status / write-back: descriptor done.
    pub const DD: u32 = 1 << 0;
    /// olinfo_status: PAYLEN shift.
    pub const PAYLEN_SHIFT: u32 = 14;
    /// Context: MACLEN shift (in vlan_macip_lens).
    pub const MACLEN_SHIFT: u32 = 9;
}

/// What differs between chips for the ring code.
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

/// Write-back pkt_info (low 16 bits of the first quadword): the packet is UDP.
const PKT_UDP: u64 = 1 << 9;

// The branchless flag decoding in `RxRing::rx_burst` relies on BAD being OK shifted by one.
const _: () = assert!(
    Meta::RX_IP_CSUM_BAD == Meta::RX_IP_CSUM_OK << 1
        && Meta::RX_L4_CSUM_BAD == Meta::RX_L4_CSUM_OK << 1
);

/// Checks a ring size: a power of two, multiple of 8 (128-byte DMA length granularity), <= 32768.
pub fn check_ring_size(n: usize) -> Result<()> {
    if !n.is_power_of_two() || !(RS_INTERVAL..=32768).contains(&n) {
        return Err(Error::InvalidConfig(format!(
            "ring size {n} must be a power of two between {RS_INTERVAL} and 32768"
        )));
    }
    Ok(())
}

/// Arms a receive descriptor with a buffer at `iova` (advanced read format: packet address,
/// header address 0, which also clears the previous write-back's DD).
#[inline(always)]
fn arm(d: &Desc, iova: u64) {
    d.store(0, iova, Relaxed);
    d.store(1, 0, Relaxed);
}

/// Writes a transmit data descriptor for `p` with command bits `cmd` (type, EOP, VLE...).
#[inline(always)]
fn put_data(d: &Desc, p: &Packet, cmd: u32) {
    let len = p.len() as u32;
    d.store(0, p.data_iova(), Relaxed);
    d.store(
        1,
        u64::from(cmd | len) | u64::from(len) << (32 + tx::PAYLEN_SHIFT),
        Relaxed,
    );
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
        let vp = status & rx::VP != 0;
        let mut flags = 0u16;
        if vp {
            flags |= if vp_stripped {
                Meta::VLAN_STRIPPED
            } else {
                Meta::RX_VLAN_SEEN
            };
        }
        if status & rx::L4CS != 0 {
            flags |= Meta::RX_L4_CSUM_OK;
        }
        if status & rx::IPCS != 0 {
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
    /// Inside a frame that spans descriptors: drop until its EOP.
    in_fragment: bool,
    idle_polls: u32,
    stats: QueueStats,
}

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
                rx::DD | rx::EOP | chip.frame_error | chip.ip_error | chip.l4_error,
            ) | u64::from(!fast_len) << 32,
            in_fragment: false,
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
        self.mmio.doorbell(self.tail, self.mask as u32);
    }

    /// Whether the next slot holds a finished descriptor not yet harvested (an acquire load of
    /// its DD bit; no register access).
    pub fn done_pending(&self) -> bool {
        self.desc.load_dword(self.next, 2, Acquire) & rx::DD != 0
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
        if self.in_fragment {
            self.in_fragment = false;
            self.stats.dropped += 1;
        }
        self.next
    }

    /// After a restart at [`RxRing::restart_slot`]: hands every slot but one back to the device
    /// (tail = the slot before the head).
    pub fn rearm_all(&mut self) {
        self.idle_polls = 0;
        self.mmio
            .doorbell(self.tail, (self.next.wrapping_sub(1) & self.mask) as u32);
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
    /// The fast path harvests runs of whole, error-free frames (status exactly DD | EOP among
    /// the bits that matter) with a table lookup for their flags; the first descriptor that is
    /// anything else stops it, and [`RxRing::slow_one`] deals with that one descriptor.
    #[inline]
    pub fn rx_burst(&mut self, batch: &mut Vec<Packet>, max: usize) -> Result<usize, QueueError> {
        let max = max.min(self.mask);
        let start = self.next;
        // The common case, straight through: the reserve covers the burst (topped up first if
        // a frame is waiting), the run does not wrap, no fragment is open, and every slot
        // harvested is a plain good frame. Anything else continues in `rx_rest`.
        if self.slots.reserved() < max && self.done_pending() {
            self.slots.reserve(max, RX_RESERVE);
        }
        if self.slots.reserved() >= max && start + max <= self.mask + 1 && !self.in_fragment {
            let (k, bytes) = self.harvest(batch, start, max);
            self.next = (start + k) & self.mask;
            if k == max && k > 0 {
                return Ok(self.finish(k, bytes));
            }
            if k == 0 && !self.done_pending() {
                return self.idle();
            }
            return self.rx_rest(batch, max, k, bytes);
        }
        self.rx_rest(batch, max, 0, 0)
    }

    /// The fast path over slots `start..start + want` (no wrap, within the reserve).
    #[inline(always)]
    fn harvest(&mut self, batch: &mut Vec<Packet>, start: usize, want: usize) -> (usize, u64) {
        let (table, fast) = (&self.flags, self.fast_mask);
        self.slots.harvest(
            start,
            &self.desc.descs()[start..start + want],
            batch,
            |d| {
                let wb = d.load(1, Acquire);
                if wb & fast != u64::from(rx::DD | rx::EOP) {
                    return None;
                }
                let len = (wb >> 32) as u16;
                let e = table[wb as u8 as usize];
                Some((len, Meta::from_low(e & ((wb >> 48) as u32 | 0xffff_0000))))
            },
            arm,
        )
    }

    /// Ends a burst that received `got > 0` frames: hands the re-armed slots back (the device
    /// owns everything up to the slot before `next`) and counts.
    #[inline(always)]
    fn finish(&mut self, got: usize, bytes: u64) -> usize {
        self.idle_polls = 0;
        self.mmio
            .doorbell(self.tail, (self.next.wrapping_sub(1) & self.mask) as u32);
        self.stats.packets += got as u64;
        self.stats.bytes += bytes;
        got
    }

    /// The rest of a burst after `got` frames (`bytes` bytes) came through the straight path:
    /// tops the reserve up, wraps around the ring, and takes unusual descriptors one at a time.
    #[inline(never)]
    fn rx_rest(
        &mut self,
        batch: &mut Vec<Packet>,
        max: usize,
        mut got: usize,
        mut bytes: u64,
    ) -> Result<usize, QueueError> {
        let size = self.mask + 1;
        let mut busy = got > 0;
        while got < max {
            let left = max - got;
            if self.slots.reserved() < left {
                if !self.done_pending() {
                    break;
                }
                busy = true;
                if self.slots.reserve(left, RX_RESERVE) == 0 {
                    self.stats.no_room += 1;
                    break;
                }
            }
            let start = self.next;
            let want = left.min(size - start).min(self.slots.reserved());
            let k = if self.in_fragment {
                0
            } else {
                let (k, b) = self.harvest(batch, start, want);
                bytes += b;
                k
            };
            got += k;
            self.next = (start + k) & self.mask;
            if k == want {
                busy |= k > 0;
                continue;
            }
            if !self.done_pending() {
                busy |= k > 0;
                break;
            }
            busy = true;
            got += self.slow_one(batch);
        }
        if !busy {
            return self.idle();
        }
        Ok(self.finish(got, bytes))
    }

    /// The descriptor at `next` is done but not a plain good frame: a fragment of a frame
    /// larger than a buffer, a frame with a MAC error or too long (dropped whole; the slot is
    /// re-armed with its own buffer), or a frame with a checksum error (delivered with BAD
    /// flags). Returns the packets delivered (0 or 1). Needs one reserved buffer.
    #[cold]
    #[inline(never)]
    fn slow_one(&mut self, batch: &mut Vec<Packet>) -> usize {
        let i = self.next;
        let wb = self.desc.load(i, 1, Acquire);
        let status = wb as u32;
        let len = (wb >> 32) as u16;
        let vlan = (wb >> 48) as u16;
        self.next = (i + 1) & self.mask;
        let eop = status & rx::EOP != 0;
        if self.in_fragment
            || !eop
            || status & self.chip.frame_error != 0
            || len > self.slots.max_len()
        {
            self.in_fragment = !eop;
            self.stats.dropped += u64::from(eop);
            arm(self.desc.view().at(i), self.slots.data_iova(i));
            return 0;
        }
        // The fast path's table, then each "checked and good" flag that has its error bit set
        // turns into its BAD twin (BAD is OK shifted left by one).
        let e = self.flags[status as u8 as usize];
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
            && self.desc.load(i, 0, Relaxed) & PKT_UDP != 0
        {
            flags &= !Meta::RX_L4_CSUM_BAD;
        }
        let meta = Meta::from_low(u32::from(flags) << 16 | u32::from(vlan) & e);
        let d = self.desc.view().at(i);
        if self.slots.take(i, len, meta, batch, |iova| arm(d, iova)) {
            self.stats.bytes += u64::from(len);
            1
        } else {
            // No reserve (the caller makes sure there is one): leave the slot for later.
            self.next = i;
            0
        }
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

/// What [`TxRing::put_tagged`] did with the packet at the front of the batch.
enum Tagged {
    /// Queued; its frame length.
    Sent(u32),
    /// Left in the batch: no room for it (and its context descriptor) in this burst.
    NoRoom,
}

/// cmd_type_len of every data descriptor (the length goes in bits 15:0).
const TX_DATA_CMD: u32 = tx::DTYP_DATA | tx::DEXT | tx::IFCS | tx::EOP;

/// Frames shorter than this are padded by the driver before they get a descriptor: a data
/// descriptor of length 0 hangs the 82599's transmit DMA, and Linux pads every frame to at
/// least 17 bytes on both chips (`ixgbe_xmit_frame_ring` and `igb_xmit_frame`: "the minimum
/// packet size ... is 17"; DPDK refuses frames under 14).
pub const MIN_TX_LEN: usize = crate::platform::dma::slots::MIN_TX_LEN;
/// What a frame shorter than [`MIN_TX_LEN`] is padded to, with zeros: the minimum Ethernet
/// frame without FCS, which the MAC pads every shorter frame to anyway (82599 HLREG0.TXPADEN,
/// 82576 TCTL.PSP), so the wire sees the same frame either way.
pub const PAD_TX_LEN: usize = 60;

/// Pads a frame shorter than [`MIN_TX_LEN`] to [`PAD_TX_LEN`] bytes with zeros. Behind the
/// pool's own headroom every buffer has room for 64 bytes (the pool refuses less); a frame
/// moved far back with `pull_front` may not, so such a frame first moves back to the default
/// headroom (at most 16 bytes are copied). Returns false only if even that leaves no room.
#[cold]
#[inline(never)]
fn pad_short(p: &mut Packet) -> bool {
    let len = p.len();
    if p.capacity() < PAD_TX_LEN {
        let mut keep = [0u8; MIN_TX_LEN];
        keep[..len].copy_from_slice(p.data());
        let meta = p.meta;
        p.reset_for_rx();
        p.meta = meta;
        if !p.set_data(&keep[..len]) {
            return false;
        }
    }
    if !p.set_len(PAD_TX_LEN) {
        return false;
    }
    p.data_mut()[len..].fill(0);
    tracing::debug!(
        len,
        "transmit: frame shorter than 17 bytes padded to 60 with zeros"
    );
    true
}

impl<M: Mmio> TxRing<M> {
    /// Allocates `size` descriptors through `mapper`-backed memory of `pool_for_mapper`.
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

    /// Reclaims the buffers of every finished group of descriptors: the newest done mark
    /// completes all before it, so their buffers go back in one release.
    #[inline]
    fn reclaim(&mut self) {
        let desc = &self.desc;
        Self::release_marks(
            &mut self.rs_marks,
            &mut self.slots,
            &mut self.clean,
            self.mask,
            |slot| desc.load_dword(slot, 3, Acquire) & tx::DD != 0,
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

    /// Queues packets from the front of `batch`; leaves the rest there.
    ///
    /// Each packet takes one data descriptor, plus a context descriptor when it asks for a
    /// tag other than the one the context slot holds. Runs of packets that need nothing new go
    /// through the fast loop (one descriptor each, no wrap inside a run); a packet that needs a
    /// new context goes through [`TxRing::put_tagged`]. The descriptor that ends the burst asks
    /// for a write-back when `rs_interval` descriptors have gone out since the last request.
    #[inline]
    pub fn tx_burst(&mut self, batch: &mut Vec<Packet>) -> Result<usize, QueueError> {
        self.burst(batch, None, &mut SwVlanCounts::default())
    }

    /// [`TxRing::tx_burst`] with software tag insertion (TPID `tpid`) for the packets that ask
    /// for a tag, done where the fast loop stops for them anyway: untagged bursts pay nothing.
    /// Adds the tags inserted and the frames dropped (too short to take one) to `counts`.
    #[inline]
    pub fn tx_burst_sw_vlan(
        &mut self,
        batch: &mut Vec<Packet>,
        tpid: Tpid,
        counts: &mut SwVlanCounts,
    ) -> Result<usize, QueueError> {
        self.burst(batch, Some(tpid), counts)
    }

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
        let room = self.mask - self.in_flight();
        let n = batch.len();
        let start = self.next;
        // The common case, straight through: the whole batch fits without wrapping and every
        // packet goes as it is. Anything else continues in `burst_rest`.
        if n > 0 && n <= room && start + n <= self.mask + 1 {
            let (k, bytes) = self.send_run(batch, start, n, sw.is_some());
            self.next = (start + k) & self.mask;
            if k == n {
                self.finish(start, k, bytes);
                return Ok(k);
            }
            return self.burst_rest(batch, sw, counts, start, room, n, k, bytes);
        }
        self.burst_rest(batch, sw, counts, start, room, n, 0, 0)
    }

    /// Queues up to `run` packets from the front of `batch` in descriptors `at..at + run` (no
    /// wrap), stopping before a packet that asks for a tag the loop cannot give inline: in
    /// hardware mode one the context slot does not hold, in software mode (`sw`) any.
    #[inline(always)]
    fn send_run(
        &mut self,
        batch: &mut Vec<Packet>,
        at: usize,
        run: usize,
        sw: bool,
    ) -> (usize, u64) {
        let vle_tci = if sw { None } else { self.ctx_tci };
        self.slots
            .send(batch, &self.desc.descs()[at..at + run], |d, p| {
                let mut cmd = TX_DATA_CMD;
                if p.meta.flags & Meta::TX_VLAN != 0 {
                    if vle_tci != Some(p.meta.vlan_tci) {
                        return false;
                    }
                    cmd |= tx::VLE;
                }
                put_data(d, p, cmd);
                true
            })
    }

    /// Ends a burst that queued `sent > 0` packets (`bytes` bytes) from descriptor `start` on:
    /// the write-back request if one is due, the doorbell, the counters.
    #[inline(always)]
    fn finish(&mut self, start: usize, sent: usize, bytes: u64) {
        self.since_rs += self.next.wrapping_sub(start) & self.mask;
        if self.since_rs >= self.rs_interval {
            // The burst's last descriptor is a data descriptor (a context one always precedes
            // its packet's), and still ours: the tail has not moved past it yet.
            let last = self.next.wrapping_sub(1) & self.mask;
            let cmd = self.desc.load_dword(last, 2, Relaxed);
            self.desc.store_dword(last, 2, cmd | tx::RS, Relaxed);
            self.rs_marks.push_back((last, self.slots.tail()));
            self.since_rs = 0;
        }
        self.mmio.doorbell(self.tail, self.next as u32);
        self.stats.packets += sent as u64;
        self.stats.bytes += bytes;
    }

    /// The rest of a burst that started at descriptor `start` with `room` descriptors free and
    /// `total` packets, after the straight path queued `sent` of them (`bytes` bytes): wraps
    /// around the ring, writes context descriptors, inserts tags in software (adding to
    /// `counts`), counts what found no room. Returns the packets queued.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn burst_rest(
        &mut self,
        batch: &mut Vec<Packet>,
        sw: Option<Tpid>,
        counts: &mut SwVlanCounts,
        start: usize,
        room: usize,
        total: usize,
        mut sent: usize,
        mut bytes: u64,
    ) -> Result<usize, QueueError> {
        let size = self.mask + 1;
        let mut malformed = 0;
        // Dropped for other reasons than a tag (a buffer the device cannot reach and no bounce
        // buffer for it), counted in `stats.dropped`.
        let mut unsent = 0;
        loop {
            let left = room - (self.next.wrapping_sub(start) & self.mask);
            let want = batch.len().min(left);
            if want == 0 {
                break;
            }
            if let Some(tpid) = sw {
                if batch[0].meta.flags & Meta::TX_VLAN != 0 {
                    // Push the tags of the packets at the front that ask for one; the loop
                    // then sends them as they are now.
                    let (inserted, bad) = insert_front(batch, want, tpid);
                    counts.inserted += inserted;
                    if bad && inserted == 0 {
                        // The front packet cannot take its tag (one behind packets that took
                        // theirs waits until they are queued and it is at the front).
                        tracing::debug!("VLAN: dropping a frame that cannot take its transmit tag");
                        drop(batch.remove(0));
                        malformed += 1;
                        continue;
                    }
                }
            }
            let run = want.min(size - self.next);
            let (k, b) = self.send_run(batch, self.next, run, sw.is_some());
            bytes += b;
            sent += k;
            self.next = (self.next + k) & self.mask;
            if k == want {
                break;
            }
            if k == run {
                // The run ended at the end of the ring: the next pass goes on from slot 0.
                continue;
            }
            // The walk stopped before the packet now at the front; why decides what to do.
            if !self.slots.reaches(&batch[0]) {
                match self.bounce(batch) {
                    Ok(true) => continue,
                    Ok(false) => break,
                    Err(e) => {
                        // Counted as dropped (and logged once per queue, in `bounce`).
                        tracing::debug!(error = %e, "transmit: dropping a packet the device cannot reach");
                        self.drop_front(batch);
                        unsent += 1;
                        continue;
                    }
                }
            }
            // A frame too short for a descriptor is padded, unless it waits for a software
            // tag (then the next pass drops it as too short to take one, the VLAN rule).
            let p = &batch[0];
            if p.len() < MIN_TX_LEN && (sw.is_none() || p.meta.flags & Meta::TX_VLAN == 0) {
                if !pad_short(&mut batch[0]) {
                    // Cannot happen with a pool's buffers (64 bytes behind the headroom at
                    // least); dropped rather than retried, so the burst always moves on.
                    self.drop_front(batch);
                    unsent += 1;
                }
                continue;
            }
            if sw.is_none() {
                match self.put_tagged(batch, left - k, want - k) {
                    Tagged::Sent(len) => {
                        sent += 1;
                        bytes += u64::from(len);
                    }
                    Tagged::NoRoom => break,
                }
            }
        }
        counts.malformed += malformed as u64;
        self.stats.no_room += (total - sent - malformed - unsent) as u64;
        if sent == 0 {
            if total > 0 && malformed + unsent == 0 && self.mmio.read32(self.head) == u32::MAX {
                return Err(QueueError::DeviceGone);
            }
            return Ok(0);
        }
        self.finish(start, sent, bytes);
        Ok(sent)
    }

    /// Drops the packet at the front of `batch`, counted in `stats.dropped`.
    #[cold]
    fn drop_front(&mut self, batch: &mut Vec<Packet>) {
        drop(batch.remove(0));
        self.stats.dropped += 1;
    }

    /// Replaces the packet at the front of `batch`, whose pool the device cannot reach, by a
    /// copy in a buffer of the ring's own bounce pool (made now if this is the first such
    /// packet). Returns false when every bounce buffer is in flight (the burst stops there, as
    /// on a full ring), and an error when no bounce pool can be made or the frame does not
    /// fit one of its buffers.
    #[cold]
    #[inline(never)]
    fn bounce(&mut self, batch: &mut [Packet]) -> Result<bool> {
        let size = self.mask + 1;
        let Some(mut q) = self.slots.bounce_buffer(size, batch[0].buf_size())? else {
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
        batch[0] = q;
        self.stats.copied += 1;
        Ok(true)
    }

    /// Deals with the packet at the front of `batch` in hardware mode, which asks for a tag
    /// the context slot does not hold: a context descriptor with the new tag, then the data
    /// descriptor with VLE.
    /// `room` is the descriptors left in this burst and `packets` the packets still to queue
    /// in it (this one included); a context descriptor is written only if every one of them
    /// still gets its slot.
    #[cold]
    #[inline(never)]
    fn put_tagged(&mut self, batch: &mut Vec<Packet>, room: usize, packets: usize) -> Tagged {
        let Some(p) = batch.first_mut() else {
            return Tagged::NoRoom;
        };
        let tci = p.meta.vlan_tci;
        // (The loop sends tagged packets inline while the context holds their tag.)
        if self.ctx_tci != Some(tci) {
            if packets + 1 > room {
                return Tagged::NoRoom;
            }
            // A context descriptor carrying the tag; it stays valid for later packets.
            let d = self.desc.view().at(self.next);
            d.store(0, u64::from(tci) << 16 | 14 << tx::MACLEN_SHIFT, Relaxed);
            d.store(
                1,
                u64::from(tx::DTYP_CTXT | tx::DEXT | tx::L4T_RSV),
                Relaxed,
            );
            self.next = (self.next + 1) & self.mask;
            self.ctx_tci = Some(tci);
        }
        let cmd = TX_DATA_CMD | tx::VLE;
        let len = p.len() as u32;
        let i = self.next;
        let (taken, _) = self.slots.send(batch, &self.desc.descs()[i..=i], |d, p| {
            put_data(d, p, cmd);
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

    /// Forgets the cached context (after a reset the device lost it).
    pub fn reset_context(&mut self) {
        self.ctx_tci = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::dma::{IdentityMapper, PoolConfig};
    use crate::platform::mmio::RecordingMmio;
    use crate::vlan::Tpid;

    /// A transmit ring of `size` slots on a recording register file, and a pool of `buffers`.
    fn tx_ring(size: usize, buffers: usize) -> (TxRing<RecordingMmio>, Pool) {
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
            if cmd & tx::RS != 0 {
                ring.desc.store_dword(i, 3, tx::DD, Relaxed);
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
            .filter(|&i| ring.desc.load_dword(i, 2, Relaxed) & tx::RS != 0)
            .collect();
        assert_eq!(rs, [31, 63, 95, 127], "RS on each burst's last descriptor");
        // The device finished the first two groups, not the newest: the walk from the oldest
        // frees exactly those 64 buffers.
        for &i in &rs[..2] {
            ring.desc.store_dword(i, 3, tx::DD, Relaxed);
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
        let vle = |r: &TxRing<RecordingMmio>, i| r.desc.load_dword(i, 2, Relaxed) & tx::VLE != 0;
        assert_eq!(ring.tail_slot(), 6);
        assert_eq!(
            (0..6).map(|i| dtyp(&ring, i)).collect::<Vec<_>>(),
            [
                tx::DTYP_DATA,
                tx::DTYP_CTXT,
                tx::DTYP_DATA,
                tx::DTYP_DATA,
                tx::DTYP_CTXT,
                tx::DTYP_DATA
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
        assert!(!vle(&ring, 6) && dtyp(&ring, 6) == tx::DTYP_DATA);
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

    #[test]
    fn receive_flags_on_the_fast_and_the_slow_path() {
        let mmio = Arc::new(RecordingMmio::new(0x100));
        let mapper: Arc<dyn crate::platform::dma::DmaMapper> = Arc::new(IdentityMapper);
        let pool = Pool::new(
            PoolConfig {
                buffers: 256,
                ..PoolConfig::default()
            },
            mapper,
        )
        .unwrap();
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
            let w = u64::from(status | rx::DD | rx::EOP) | 60 << 32 | 0x64 << 48;
            r.desc.store(i, 0, pkt, Relaxed);
            r.desc.store(i, 1, w, Relaxed);
        };
        let wb = |r: &RxRing<RecordingMmio>, i: usize, status: u32| wb_pkt(r, i, status, 0x110);
        let good = rx::IPCS | rx::L4CS;
        wb(&ring, 0, good); // fast path
        wb(&ring, 1, good | rx::VP); // fast path, stripped tag
        wb(&ring, 2, good | chip.ip_error); // slow path: IP checksum bad, L4 good
        wb(&ring, 3, good | rx::VP | chip.l4_error); // slow path: L4 bad, stripped tag
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
        wb(&ring, 5, good | rx::VP);
        wb(&ring, 6, good | rx::VP | chip.ip_error);
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
