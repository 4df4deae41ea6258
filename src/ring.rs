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
//! - receive refills in bulk (one pool round trip per burst) and every received slot is re-armed
//!   in place, so the ring never has holes; a short allocation receives fewer packets;
//! - transmit asks for a write-back (RS) only every `RS_INTERVAL` descriptors and reclaims whole
//!   groups of buffers at once.
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
use crate::dma::{DescTable, Meta, Packet, Pool};
use crate::error::{Error, Result};
use crate::mmio::Mmio;

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
}

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

/// A receive ring.
pub struct RxRing<M: Mmio> {
    mmio: Arc<M>,
    tail: usize,
    head: usize,
    desc: DescTable,
    bufs: Box<[Option<Packet>]>,
    mask: usize,
    next: usize,
    spare: Vec<Packet>,
    pool: Pool,
    chip: ChipRx,
    /// Hardware strips tags on this queue: VP means "stripped, TCI in the descriptor".
    /// Change it only while the queue is stopped and drained (see the module doc).
    pub hw_strip: bool,
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
        let mut spare = Vec::with_capacity(size);
        if pool.alloc_bulk(size, &mut spare) < size {
            return Err(Error::InvalidConfig(format!(
                "the receive pool has fewer free buffers than the ring's {size} slots; give it more buffers"
            )));
        }
        let mut bufs: Vec<Option<Packet>> = Vec::with_capacity(size);
        for (i, mut p) in spare.drain(..).enumerate() {
            let addr = p.reset_for_rx();
            desc.store(i, 0, addr, Relaxed);
            desc.store(i, 1, 0, Relaxed);
            bufs.push(Some(p));
        }
        Ok(RxRing {
            mmio,
            tail,
            head,
            desc,
            bufs: bufs.into_boxed_slice(),
            mask: size - 1,
            next: 0,
            spare,
            pool,
            chip,
            hw_strip: false,
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
        (self.bufs.len() * DESC_SIZE) as u32
    }

    /// Number of slots.
    pub fn size(&self) -> usize {
        self.bufs.len()
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
        &self.pool
    }

    /// Software counters.
    pub fn stats(&self) -> QueueStats {
        self.stats
    }

    /// Receives up to `max` frames into `batch`.
    #[inline]
    pub fn rx_burst(&mut self, batch: &mut Vec<Packet>, max: usize) -> Result<usize, QueueError> {
        // Count the finished descriptors first, so exactly that many buffers are allocated.
        let mut ready = 0;
        let max = max.min(self.mask);
        while ready < max {
            if self.desc.load_dword(self.next + ready, 2, Acquire) & rx::DD == 0 {
                break;
            }
            ready += 1;
        }
        if ready == 0 {
            return self.idle();
        }
        self.idle_polls = 0;
        let got = self.pool.alloc_bulk(ready, &mut self.spare);
        if got < ready {
            self.stats.no_room += 1;
        }
        let before = batch.len();
        let mut bytes = 0u64;
        let vp_stripped = self.hw_strip || self.chip.vp_means_stripped;
        let vp_flag = if vp_stripped {
            Meta::VLAN_STRIPPED
        } else {
            Meta::RX_VLAN_SEEN
        };
        for _ in 0..got {
            let i = self.next;
            let wb = self.desc.load(i, 1, Acquire);
            let status = wb as u32;
            let len = (wb >> 32) as u16;
            let vlan = (wb >> 48) as u16;
            // Fresh from the pool: default headroom, length 0, no metadata.
            let fresh = self.spare.pop().expect("allocated above");
            self.desc.store(i, 0, fresh.data_iova(), Relaxed);
            self.desc.store(i, 1, 0, Relaxed);
            let mut p = self.bufs[i]
                .replace(fresh)
                .expect("every slot holds a buffer");
            self.next = (i + 1) & self.mask;

            let eop = status & rx::EOP != 0;
            if self.in_fragment || !eop || status & self.chip.frame_error != 0 || !p.set_rx_len(len)
            {
                // Frames spanning descriptors (larger than a buffer) and frames with MAC errors
                // are dropped whole; the buffer goes back to the pool with `p`.
                self.in_fragment = !eop;
                self.stats.dropped += u64::from(eop);
                continue;
            }
            // Flags without branches: each "checked" bit selects OK or BAD by the error bit.
            let vp = status & rx::VP != 0;
            let ip = u16::from(status & rx::IPCS != 0);
            let ip_bad = u16::from(status & self.chip.ip_error != 0);
            let l4 = u16::from(status & rx::L4CS != 0);
            let l4_bad = u16::from(status & self.chip.l4_error != 0);
            p.meta.flags = if vp { vp_flag } else { 0 }
                | (ip * Meta::RX_IP_CSUM_OK) << ip_bad
                | (l4 * Meta::RX_L4_CSUM_OK) << l4_bad;
            if vp && vp_stripped {
                p.meta.vlan_tci = vlan;
            }
            bytes += len as u64;
            batch.push(p);
        }
        // Hand the re-armed slots back: the device owns everything up to the slot before `next`.
        self.mmio
            .doorbell(self.tail, (self.next.wrapping_sub(1) & self.mask) as u32);
        let n = batch.len() - before;
        self.stats.packets += n as u64;
        self.stats.bytes += bytes;
        Ok(n)
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
    bufs: Box<[Option<Packet>]>,
    mask: usize,
    /// Next slot to fill.
    next: usize,
    /// Oldest slot not yet reclaimed.
    clean: usize,
    /// TCI programmed in context slot 0, if any.
    ctx_tci: Option<u16>,
    /// Data descriptors written since the last one that asked for a write-back.
    since_rs: usize,
    /// Descriptors between two write-back requests: `RS_INTERVAL`, or half the ring for rings
    /// so small that a full ring might otherwise hold no descriptor with RS (and never drain).
    rs_interval: usize,
    /// Slots of descriptors with RS set, oldest first: each one, when done, completes every
    /// slot before it.
    rs_marks: std::collections::VecDeque<usize>,
    reclaim: Vec<Packet>,
    stats: QueueStats,
}

impl<M: Mmio> TxRing<M> {
    /// Allocates `size` descriptors through `mapper`-backed memory of `pool_for_mapper`.
    pub fn new(
        mmio: Arc<M>,
        tail: usize,
        head: usize,
        size: usize,
        mapper: Arc<dyn crate::dma::DmaMapper>,
    ) -> Result<Self> {
        check_ring_size(size)?;
        let desc = DescTable::new(size, mapper)?;
        Ok(TxRing {
            mmio,
            tail,
            head,
            desc,
            bufs: (0..size).map(|_| None).collect(),
            mask: size - 1,
            next: 0,
            clean: 0,
            ctx_tci: None,
            since_rs: 0,
            rs_interval: RS_INTERVAL.min(size / 2),
            rs_marks: std::collections::VecDeque::with_capacity(size / RS_INTERVAL + 1),
            reclaim: Vec::with_capacity(RS_INTERVAL),
            stats: QueueStats::default(),
        })
    }

    /// Bus address of the descriptor ring (for TDBAL/TDBAH).
    pub fn desc_iova(&self) -> u64 {
        self.desc.iova()
    }

    /// Descriptor ring length in bytes (for TDLEN).
    pub fn desc_len(&self) -> u32 {
        (self.bufs.len() * DESC_SIZE) as u32
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

    /// Reclaims the buffers of every finished group of descriptors.
    #[inline]
    fn reclaim(&mut self) {
        while let Some(&mark) = self.rs_marks.front() {
            if self.desc.load_dword(mark, 3, Acquire) & tx::DD == 0 {
                break;
            }
            self.rs_marks.pop_front();
            // Slots clean..=mark are done: free their buffers straight from the ring, in one
            // or two contiguous runs (the range may wrap), with one pool round trip per run.
            let end = mark + 1;
            if end > self.clean {
                Pool::free_bulk(
                    self.bufs[self.clean..end]
                        .iter_mut()
                        .filter_map(Option::take),
                );
            } else {
                Pool::free_bulk(self.bufs[self.clean..].iter_mut().filter_map(Option::take));
                Pool::free_bulk(self.bufs[..end].iter_mut().filter_map(Option::take));
            }
            self.clean = end & self.mask;
        }
    }

    /// Writes one descriptor. Data descriptors ask for a write-back every `rs_interval`
    /// descriptors (context descriptors never do: not every chip writes them back).
    #[inline(always)]
    fn put(&mut self, qword0: u64, mut cmd: u32, olinfo: u32, data: bool) {
        let i = self.next;
        self.since_rs += 1;
        if data && self.since_rs >= self.rs_interval {
            cmd |= tx::RS;
            self.since_rs = 0;
            self.rs_marks.push_back(i);
        }
        self.desc.store(i, 0, qword0, Relaxed);
        self.desc
            .store(i, 1, u64::from(cmd) | (u64::from(olinfo) << 32), Relaxed);
        self.next = (i + 1) & self.mask;
    }

    /// Queues packets from the front of `batch`; leaves the rest there.
    #[inline]
    pub fn tx_burst(&mut self, batch: &mut Vec<Packet>) -> Result<usize, QueueError> {
        self.reclaim();
        // One slot stays empty so that tail == head means "empty", never "full".
        let mut room = self.mask - self.in_flight();
        // How many packets fit, counting the context descriptors that a change of tag needs.
        let mut n = 0;
        let mut ctx = self.ctx_tci;
        for p in batch.iter() {
            let mut need = 1;
            if p.meta.has(Meta::TX_VLAN) && ctx != Some(p.meta.vlan_tci) {
                need = 2;
                ctx = Some(p.meta.vlan_tci);
            }
            if room < need {
                break;
            }
            room -= need;
            n += 1;
        }
        if n < batch.len() {
            self.stats.no_room += (batch.len() - n) as u64;
            if n == 0 {
                if !batch.is_empty() && self.mmio.read32(self.head) == u32::MAX {
                    return Err(QueueError::DeviceGone);
                }
                return Ok(0);
            }
        }
        let mut bytes = 0u64;
        for p in batch.drain(..n) {
            let len = p.len() as u32;
            let mut cmd = tx::DTYP_DATA | tx::DEXT | tx::IFCS | tx::EOP | len;
            if p.meta.has(Meta::TX_VLAN) {
                let tci = p.meta.vlan_tci;
                if self.ctx_tci != Some(tci) {
                    // A context descriptor carrying the tag; it stays valid for later packets.
                    self.put(
                        u64::from(tci) << 16 | 14 << tx::MACLEN_SHIFT,
                        tx::DTYP_CTXT | tx::DEXT | tx::L4T_RSV,
                        0,
                        false,
                    );
                    self.ctx_tci = Some(tci);
                }
                cmd |= tx::VLE;
            }
            let slot = self.next;
            self.put(p.data_iova(), cmd, len << tx::PAYLEN_SHIFT, true);
            bytes += u64::from(len);
            // The slot is empty (reclaimed, or a context slot); `replace` spares the drop check
            // that an assignment would make.
            let old = self.bufs[slot].replace(p);
            debug_assert!(old.is_none(), "transmit slot {slot} still held a packet");
            std::mem::forget(old);
        }
        self.mmio.doorbell(self.tail, self.next as u32);
        self.stats.packets += n as u64;
        self.stats.bytes += bytes;
        Ok(n)
    }

    /// Reclaims everything the device has finished, according to its head register (an MMIO
    /// read; for idle queues and shutdown, not for the fast path). Returns the descriptors still
    /// in flight.
    pub fn reclaim_by_head(&mut self) -> Result<usize, QueueError> {
        let head = self.mmio.read32(self.head);
        if head == u32::MAX {
            return Err(QueueError::DeviceGone);
        }
        let head = head as usize & self.mask;
        while self.clean != head {
            if let Some(p) = self.bufs[self.clean].take() {
                self.reclaim.push(p);
            }
            self.clean = (self.clean + 1) & self.mask;
        }
        while let Some(&m) = self.rs_marks.front() {
            // Marks behind the head are done.
            if (m.wrapping_sub(self.clean) & self.mask) < self.in_flight() {
                break;
            }
            self.rs_marks.pop_front();
        }
        Pool::free_bulk(self.reclaim.drain(..));
        Ok(self.in_flight())
    }

    /// Forgets the cached context (after a reset the device lost it).
    pub fn reset_context(&mut self) {
        self.ctx_tci = None;
    }
}

impl<M: Mmio> Drop for TxRing<M> {
    fn drop(&mut self) {
        // The driver stopped the queue before dropping the ring; return what is still queued.
        Pool::free_bulk(self.bufs.iter_mut().filter_map(Option::take));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dma::{IdentityMapper, PoolConfig};
    use crate::mmio::RecordingMmio;

    /// Plays the device: marks every descriptor with RS done, as a write-back would.
    fn complete_rs(ring: &TxRing<RecordingMmio>) -> usize {
        let mut done = 0;
        for i in 0..ring.bufs.len() {
            let cmd = ring.desc.load_dword(i, 2, Relaxed);
            if cmd & tx::RS != 0 {
                ring.desc.store_dword(i, 3, tx::DD, Relaxed);
                done += 1;
            }
        }
        done
    }

    #[test]
    fn smallest_transmit_ring_asks_for_write_backs_and_drains() {
        let mmio = Arc::new(RecordingMmio::new(0x100));
        let mapper: Arc<dyn crate::dma::DmaMapper> = Arc::new(IdentityMapper);
        let pool = Pool::new(
            PoolConfig {
                buffers: 128,
                ..PoolConfig::default()
            },
            mapper.clone(),
        )
        .unwrap();
        let mut ring = TxRing::new(mmio, 0x18, 0x10, RS_INTERVAL, mapper).unwrap();
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
}
