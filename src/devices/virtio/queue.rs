//! The receive and transmit queues of a virtio-net port.
//!
//! Every frame travels behind the 12-byte `struct virtio_net_hdr_v1` (virtio 1.2, 5.1.6; 12
//! bytes with VERSION_1 even without MRG_RXBUF). No offload is negotiated, so the header
//! the driver sends is all zeros and the one the device writes carries nothing the driver
//! needs:
//! - receive: each descriptor points 12 bytes before the frame start of its buffer, into the
//!   pool's headroom (at least 128 bytes), so the device writes the header there and the frame
//!   lands where a packet expects it: no copy, as in DPDK's virtio driver. One descriptor per
//!   slot, for good: descriptor `i` always holds slot `i`'s buffer ([`RxSlots`]), so a used
//!   entry names the slot to harvest, in whatever order the device returns them;
//! - transmit: descriptor pairs. The first of pair `k` (descriptor `2k`) always points at one
//!   shared zeroed header in the ring's driver area, and chains to `2k + 1`, which takes the
//!   frame. Pairs go in send order ([`TxSlots`] is a FIFO); a pair the device returns early is
//!   marked done and released when every older one is. The ring keeps no chain states for
//!   them: every pair the FIFO holds was published by the burst that queued it, so a used
//!   entry must name one of them that has not come back yet (checked against the FIFO), and
//!   one naming the next in send order (what QEMU returns) costs one compare.
//!
//! Split rings only: packed ones (VIRTIO_F_RING_PACKED) were built and measured against them
//! on the instruction count of the burst paths (commit e0eca3d: 150.4 against 135.4 per
//! forwarded packet, `bench/instructions`), and lost: a packed ring rewrites a whole
//! descriptor (two words) per buffer posted, where the split ring's descriptors keep their
//! length and flags and take one available entry. See bench/README.md.
//!
//! A virtio device cannot stop one queue without VIRTIO_F_RING_RESET, so a dropped queue does
//! not free its ring and buffers: it leaves them to the port's shared state, which frees them
//! after the device's reset, when the last of the port and its queues is dropped. The other
//! queue goes on working meanwhile.

use crate::devices::offload::{soft, TxCaps};
use std::cell::Cell;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use super::ring::{held_state, SplitRing, DESC_F_NEXT, DESC_F_WRITE};
use super::shared::Shared;
use super::transport::{Doorbell, NO_VECTOR};
use crate::device::{QueueError, QueueStats, RxQueue, TxQueue};
use crate::error::{Error, Result};
use crate::platform::dma::{DmaMapper, Meta, Packet, Pool, RxSlots, TxSlots};
use crate::platform::irq::Interrupt;
use crate::platform::mmio::Mmio;
use crate::vlan::SwVlanTx;

/// Bytes of `struct virtio_net_hdr_v1`.
pub const NET_HDR_LEN: usize = 12;
/// The smallest receive buffer without VIRTIO_NET_F_MRG_RXBUF: a full-size tagged frame (1518
/// bytes: 14 of header, 4 of tag, 1500 of payload) and the 12-byte header. The spec's 1526
/// (virtio 1.2, 5.1.6.3.1) leaves no room for the tag, which this crate receives in the frame;
/// Linux's `virtio_net` sizes its small buffers the same way (`GOOD_PACKET_LEN` = ETH_HLEN +
/// VLAN_HLEN + ETH_DATA_LEN, plus the header).
pub const MIN_RX_BUFFER: u32 = 1530;
/// What a shorter frame is padded to: the minimum Ethernet frame without FCS. A virtio device
/// sends the bytes it is given, so the driver pads, as Intel MACs do in hardware.
pub const PAD_TX_LEN: usize = 60;

/// A receive queue of a virtio-net port.
pub struct VirtioRx<M: Mmio> {
    /// The ring and its buffers: the device's as long as it runs, so a dropped queue leaves
    /// them to the port ([`Shared`]), which frees them after its reset.
    parts: Option<RxParts>,
    bell: Doorbell<M>,
    /// Bytes each descriptor offers: the header and the longest frame a buffer takes.
    desc_len: u32,
    stats: QueueStats,
    /// Interrupt mode's vector (None: polled).
    irq: Option<Interrupt>,
    // Last: it may be the port's last handle, whose drop resets the device and only then
    // frees what this queue's `Drop` left it.
    shared: Arc<Shared<M>>,
}

/// What one receive burst did: frames taken, their bytes, frames dropped, and whether the
/// device wants a doorbell for the buffers posted again.
type RxDone = (usize, u64, u64, bool);

/// What a receive queue lends the device.
struct RxParts {
    ring: SplitRing,
    slots: RxSlots,
}

/// The queue's parts are only taken by `Drop`.
const LIVE: &str = "a virtio queue has its ring until it is dropped";

impl<M: Mmio> VirtioRx<M> {
    /// Sets up queue `q` with `size` descriptors and one buffer of `pool` each, all posted;
    /// with `irq`, on that MSI-X vector (interrupt mode; it stays quiet until armed).
    pub(crate) fn new(
        shared: Arc<Shared<M>>,
        q: u16,
        size: u16,
        pool: Pool,
        irq: Option<Interrupt>,
    ) -> Result<Self> {
        let mapper = pool.mapper().clone();
        let mut ring = SplitRing::new(size, 0, mapper)?;
        let slots = RxSlots::new(pool, usize::from(size))?;
        let desc_len = u32::from(slots.max_len()) + NET_HDR_LEN as u32;
        if desc_len < MIN_RX_BUFFER {
            return Err(Error::InvalidConfig(format!(
                "receive buffers of {desc_len} bytes (header included); without merged receive buffers a buffer must hold a tagged 1518-byte frame and the header, {MIN_RX_BUFFER} bytes (virtio 1.2, 5.1.6.3.1, plus the tag; Linux's GOOD_PACKET_LEN): use a pool with larger buffers"
            )));
        }
        let vector = irq.as_ref().map_or(NO_VECTOR, Interrupt::vector);
        let bell = shared.transport.setup_queue(q, &mut ring, vector)?;
        let mut rx = VirtioRx {
            parts: Some(RxParts { ring, slots }),
            bell,
            desc_len,
            stats: QueueStats::default(),
            irq,
            shared,
        };
        let p = rx.parts.as_mut().expect(LIVE);
        for id in 0..size {
            let at = p.slots.data_iova(usize::from(id)) - NET_HDR_LEN as u64;
            p.ring.set_desc(id, at, desc_len, DESC_F_WRITE, 0);
            p.ring.push(id);
        }
        Ok(rx)
    }

    /// Hands the posted buffers to the device (after DRIVER_OK).
    pub(crate) fn start(&mut self) {
        if self.parts.as_mut().expect(LIVE).ring.publish() {
            self.bell.ring();
        }
    }

    /// Receive buffers the device holds.
    pub fn posted(&self) -> u16 {
        self.parts.as_ref().expect(LIVE).ring.in_flight()
    }
}

impl<M: Mmio + 'static> RxQueue for VirtioRx<M> {
    /// One burst, as DPDK's `virtio_recv_pkts` and `virtqueue_enqueue_recv_refill`: the used
    /// index read once, then the entries. While the device returns buffers in the order they
    /// were posted (QEMU does), the entries name consecutive descriptors and a run is harvested
    /// in one pass ([`RxSlots::harvest`]: each slot re-armed with a fresh buffer, its chain
    /// queued again in the same pass: [`RingState::requeue_parts`](super::ring::RingState::requeue_parts)).
    /// An entry out of that order, or with a length the buffer cannot have, ends the run and
    /// goes through the careful path of one entry; every entry is checked either way. One
    /// publish and at most one doorbell end the burst.
    fn rx_burst(&mut self, batch: &mut Vec<Packet>, max: usize) -> Result<usize, QueueError> {
        let desc_len = self.desc_len;
        let RxParts { ring, slots } = self.parts.as_mut().expect(LIVE);
        let have = slots.reserve(max, 2 * max);
        let want = max.min(have);
        let (got, bytes, dropped, bell) = rx_split(ring, slots, batch, want, desc_len)?;
        if bell {
            self.bell.ring();
        }
        if want < max && got == want {
            self.stats.no_room += 1;
            self.shared.counters.rx_no_buffer.fetch_add(1, Relaxed);
        }
        self.stats.packets += got as u64;
        self.stats.bytes += bytes;
        self.stats.dropped += dropped;
        if got > 0 || dropped > 0 {
            let c = &self.shared.counters;
            c.rx_packets.fetch_add(got as u64, Relaxed);
            c.rx_bytes.fetch_add(bytes, Relaxed);
            c.rx_dropped.fetch_add(dropped, Relaxed);
        }
        Ok(got)
    }

    fn stats(&self) -> QueueStats {
        self.stats
    }

    fn pool(&self) -> &Pool {
        self.parts.as_ref().expect(LIVE).slots.pool()
    }

    fn interrupt(&self) -> Option<&Interrupt> {
        self.irq.as_ref()
    }

    /// Clears `VIRTQ_AVAIL_F_NO_INTERRUPT`: the device interrupts on the next frame it returns.
    /// No event index is negotiated, so an armed queue is interrupted once per returned chain
    /// until disarmed, which is what a sleeping queue wants (it disarms when it wakes).
    fn arm_interrupt(&mut self) -> crate::error::Result<bool> {
        let Some(irq) = &self.irq else {
            return Err(Error::NotSupported {
                device: self.shared.transport.name.to_string(),
                what: "interrupt mode".into(),
                why: "the port was opened polled; open it with interrupts (VirtioConfig::interrupts, --interrupts)".into(),
            });
        };
        // A signal left from before would end the next sleep at once.
        irq.take()?;
        Ok(self.parts.as_ref().expect(LIVE).ring.set_interrupts(true))
    }

    fn disarm_interrupt(&mut self) {
        self.parts.as_ref().expect(LIVE).ring.set_interrupts(false);
    }
}

/// The split ring's receive burst (see [`VirtioRx::rx_burst`]).
#[inline(always)]
fn rx_split(
    ring: &mut SplitRing,
    slots: &mut RxSlots,
    batch: &mut Vec<Packet>,
    want: usize,
    desc_len: u32,
) -> Result<RxDone, QueueError> {
    let pending = usize::from(ring.used_pending()?).min(want);
    let size = usize::from(ring.size());
    let fast = u32::from(slots.fast_len());
    let (mut got, mut bytes, mut dropped) = (0usize, 0u64, 0u64);
    let (v, st) = ring.burst();
    while got + (dropped as usize) < pending {
        let first = st.next_in_order();
        let run = (pending - got - dropped as usize).min(size - usize::from(first));
        // Entries decoded in this run (the decoder and the re-arm share it), and what the
        // loop reads, as values it keeps in registers across the ring's atomic stores.
        let k = Cell::new(0u16);
        // Each chain taken is queued again at once (its state stamped, its head in the next
        // available slot), in the same pass.
        let (at, epoch, states) = st.requeue_parts(first, run);
        // The available slot of chain `first + k` is `first + k + off`: on a receive queue
        // that keeps all its chains posted and got them back in order, the slot of its own
        // number, which holds it already (`at` is None: nothing to write).
        let off = at.map(|at| at.wrapping_sub(usize::from(first)));
        let (used, avail) = (v.used(), v.avail());
        // The harvest walks the run's chain states (one per slot, as cells): each decode gets
        // its own.
        let states = Cell::from_mut(states).as_slice_of_cells();
        let (n, b) = slots.harvest(
            usize::from(first),
            states,
            batch,
            |s| {
                // In a run `first + k` is below the ring size: it is both the used slot
                // (the next used index modulo the size) and the descriptor expected there.
                let i = k.get();
                let want = first + i;
                let e = used.load(usize::from(want), Relaxed);
                let (id, len) = (e as u32, (e >> 32) as u32);
                let frame = len.wrapping_sub(NET_HDR_LEN as u32);
                if id != u32::from(want) || frame > fast || !held_state(s.get(), epoch) {
                    return None;
                }
                s.set(epoch);
                if let Some(off) = off {
                    avail.store(usize::from(want).wrapping_add(off), want, Relaxed);
                }
                k.set(i + 1);
                Some((frame as u16, Meta::default()))
            },
            // The length, flags and next of a receive descriptor never change.
            |_, new| v.set_addr(first + k.get() - 1, new - NET_HDR_LEN as u64),
        );
        st.requeued(n as u16);
        got += n;
        bytes += b;
        if n == run {
            continue;
        }
        // The careful path: one entry.
        let (id, len) = st.used_at(&v, 0);
        let id = match st.take_used(id, len) {
            Ok(id) => id,
            // The frames already taken are delivered; the broken ring refuses the next call.
            Err(e) if got == 0 && dropped == 0 => return Err(e),
            Err(_) => break,
        };
        let frame = (len as usize).wrapping_sub(NET_HDR_LEN);
        if len as usize > desc_len as usize || (len as usize) < NET_HDR_LEN {
            // A length the buffer cannot have: the frame is dropped and the buffer posted
            // again as it is.
            st.push(&v, id);
            dropped += 1;
            continue;
        }
        let taken = slots.take(
            usize::from(id),
            frame as u16,
            Meta::default(),
            batch,
            |new| v.set_addr(id, new - NET_HDR_LEN as u64),
        );
        // The reserve covers `pending`, and the length was checked: a slot is always taken.
        debug_assert!(taken, "virtio receive: a checked frame was not taken");
        if !taken {
            st.push(&v, id);
            dropped += 1;
            continue;
        }
        st.push(&v, id);
        got += 1;
        bytes += frame as u64;
    }
    Ok((got, bytes, dropped, ring.publish()))
}

impl<M: Mmio> Drop for VirtioRx<M> {
    /// Leaves the ring and its buffers to the port: the device may still write them until
    /// it is reset, when the port's last handle goes.
    fn drop(&mut self) {
        if let Some(parts) = self.parts.take() {
            self.shared.keep_until_reset(Box::new(parts));
        }
    }
}

/// A transmit queue of a virtio-net port.
pub struct VirtioTx<M: Mmio> {
    /// The ring and the queued buffers (left to the port when the queue is dropped, as the
    /// receive queue's).
    parts: Option<TxParts>,
    bell: Doorbell<M>,
    /// Pair numbers 0..pairs, twice, so that a run from any FIFO position is one slice.
    pairs: Box<[u16]>,
    /// Pairs the device returned before an older one (`size / 2` of them, a power of two).
    done: Box<[bool]>,
    /// How many of `done` are set.
    early: usize,
    stats: QueueStats,
    /// A frame dropped by the software offloads has been logged (once per queue).
    offload_logged: bool,
    // Last: it may be the port's last handle, whose drop resets the device and only then
    // frees what this queue's `Drop` left it.
    shared: Arc<Shared<M>>,
}

/// What a transmit queue lends the device.
struct TxParts {
    ring: SplitRing,
    slots: TxSlots,
}

impl<M: Mmio> VirtioTx<M> {
    /// Sets up queue `q` with `size` descriptors: `size / 2` frames in flight.
    pub(crate) fn new(
        shared: Arc<Shared<M>>,
        q: u16,
        size: u16,
        mapper: Arc<dyn DmaMapper>,
    ) -> Result<Self> {
        if size < 2 {
            return Err(Error::InvalidConfig(format!(
                "a transmit queue of {size} descriptors; it takes two per frame"
            )));
        }
        let mut ring = SplitRing::new(size, 64, mapper.clone())?;
        ring.write_extra(0, &[0u8; NET_HDR_LEN]);
        let n = size / 2;
        for k in 0..n {
            ring.set_desc(
                2 * k,
                ring.extra_iova(0),
                NET_HDR_LEN as u32,
                DESC_F_NEXT,
                2 * k + 1,
            );
            ring.set_desc(2 * k + 1, 0, 0, 0, 0);
        }
        // Pair `k` goes to the available slots `k` and `k + n` (FIFO positions modulo the size).
        ring.fix_avail(|s| 2 * (s % n));
        let bell = shared.transport.setup_queue(q, &mut ring, NO_VECTOR)?;
        Ok(VirtioTx {
            parts: Some(TxParts {
                ring,
                slots: TxSlots::new(usize::from(n), &mapper),
            }),
            bell,
            pairs: (0..2 * n).map(|i| i % n).collect(),
            done: vec![false; usize::from(n)].into_boxed_slice(),
            early: 0,
            stats: QueueStats::default(),
            offload_logged: false,
            shared,
        })
    }

    /// Frames the device holds.
    pub fn in_flight(&self) -> usize {
        self.parts.as_ref().expect(LIVE).slots.queued()
    }

    /// Takes back the pairs the device returned; releases buffers in send order. The used
    /// index is read once, then the entries (Linux: `virtqueue_get_buf_ctx_split`). A pair
    /// returned in send order (the oldest queued: what QEMU does) just moves the FIFO's head;
    /// one returned early is marked done and released when every older one is.
    fn reclaim(&mut self) -> Result<(), QueueError> {
        let mask = self.done.len() - 1;
        let TxParts { ring, slots } = self.parts.as_mut().expect(LIVE);
        let tail = slots.tail();
        let mut head = tail.wrapping_sub(slots.queued());
        let mut pending = ring.used_pending()?;
        let (v, st) = ring.burst();
        if self.early == 0 {
            // Every pair the FIFO holds is the device's: those it returns in send order (what
            // QEMU does) cost one compare each.
            let k = st.take_heads_in_order(&v, pending, head, mask);
            head = head.wrapping_add(usize::from(k));
            pending -= k;
        }
        // Any other entry is checked against the FIFO: it must name the head of a pair the
        // FIFO holds (from `head` to `tail`, published by the burst that queued it) that has
        // not come back yet.
        let mut r = Ok(());
        for _ in 0..pending {
            let (id, len) = st.used_at(&v, 0);
            let pair = (id / 2) as usize;
            let ahead = pair.wrapping_sub(head) & mask;
            if id % 2 != 0 || pair > mask || ahead >= tail.wrapping_sub(head) || self.done[pair] {
                r = Err(st.refuse(id, len));
                break;
            }
            st.took_untracked();
            if ahead == 0 {
                head = head.wrapping_add(1);
            } else {
                self.done[pair] = true;
                self.early += 1;
            }
        }
        self.release_done(head, tail, r)
    }

    /// Releases the buffers of the pairs before `head` (returned in send order), and of the
    /// ones after it that came back early, up to the first still out (or all the FIFO holds,
    /// `tail`); then reports `r` (a violation found, after releasing what came before it).
    fn release_done(
        &mut self,
        mut head: usize,
        tail: usize,
        r: Result<(), QueueError>,
    ) -> Result<(), QueueError> {
        let mask = self.done.len() - 1;
        if r.is_ok() {
            while self.early > 0 && head != tail && self.done[head & mask] {
                self.done[head & mask] = false;
                self.early -= 1;
                head = head.wrapping_add(1);
            }
        }
        self.parts.as_mut().expect(LIVE).slots.release(head);
        r
    }

    /// Replaces the packet at the front of `batch`, whose pool the device cannot reach, by a
    /// copy in the queue's bounce pool. False when every bounce buffer is in flight.
    #[cold]
    fn bounce(&mut self, batch: &mut [Packet]) -> Result<bool> {
        let n = self.done.len();
        let copied = self
            .parts
            .as_mut()
            .expect(LIVE)
            .slots
            .bounce_front(batch, n)?;
        self.stats.copied += u64::from(copied);
        Ok(copied)
    }
}

impl<M: Mmio + 'static> TxQueue for VirtioTx<M> {
    fn tx_burst(&mut self, batch: &mut Vec<Packet>) -> Result<usize, QueueError> {
        self.reclaim()?;
        let cap = self.done.len();
        let (mut sent, mut bytes_all, mut dropped) = (0usize, 0u64, 0u64);
        loop {
            let TxParts { ring, slots } = self.parts.as_mut().expect(LIVE);
            let n = batch.len().min(cap - slots.queued());
            if n == 0 {
                break;
            }
            let first = slots.tail() & (cap - 1);
            let pairs = &self.pairs[first..first + n];
            // The walk stops before a chain or an offload request (marked pool pointer), a pool
            // the device cannot reach, and (here) a frame shorter than 60 bytes: each is
            // handled below and the walk resumes, so a burst of plain frames costs no pass of
            // its own for any of them.
            // The walk writes each frame's descriptor; its chain's head is in the available
            // slot of the FIFO position already (`fix_avail`); no chain states: the FIFO says
            // which pairs the device holds. It stops before a frame shorter than 60 bytes
            // (padded below).
            let (v, st) = ring.burst();
            let (k, bytes) = slots.send_min(batch, pairs, PAD_TX_LEN, move |&pair, p, len| {
                v.set_desc(2 * pair + 1, p.data_iova(), len, 0);
                true
            });
            st.pushed_untracked(k as u16);
            sent += k;
            bytes_all += bytes;
            if k == n {
                continue;
            }
            if !batch[0].is_plain() {
                // No VIRTIO_NET_F_CSUM/GSO negotiated and a descriptor pair per frame: chains
                // are linearized and offloads done in software, in place at the front.
                let mut one = vec![batch.remove(0)];
                soft::resolve_for_queue(
                    &mut one,
                    TxCaps::NONE,
                    &mut self.stats.dropped,
                    &mut self.offload_logged,
                );
                batch.splice(0..0, one);
                continue;
            }
            if !slots.reaches(&batch[0]) {
                match self.bounce(batch) {
                    Ok(true) => continue,
                    Ok(false) => break,
                    Err(e) => {
                        tracing::debug!(error = %e, "virtio transmit: dropping a packet the device cannot reach")
                    }
                }
            } else if batch[0].len() < PAD_TX_LEN {
                // A virtio device sends the bytes it is given: the driver pads short frames.
                if batch[0].pad_to(PAD_TX_LEN) {
                    continue;
                }
                tracing::debug!(
                    len = batch[0].len(),
                    "virtio transmit: dropping a short frame whose buffer cannot be padded to 60 bytes"
                );
            } else {
                break;
            }
            drop(batch.remove(0));
            dropped += 1;
        }
        if self.parts.as_mut().expect(LIVE).ring.publish() {
            self.bell.ring();
        }
        if !batch.is_empty() {
            self.stats.no_room += 1;
        }
        self.stats.packets += sent as u64;
        self.stats.bytes += bytes_all;
        self.stats.dropped += dropped;
        let c = &self.shared.counters;
        if sent > 0 || dropped > 0 {
            c.tx_packets.fetch_add(sent as u64, Relaxed);
            c.tx_bytes.fetch_add(bytes_all, Relaxed);
            c.tx_dropped.fetch_add(dropped, Relaxed);
        }
        c.tx_copied.store(self.stats.copied, Relaxed);
        Ok(sent)
    }

    fn stats(&self) -> QueueStats {
        self.stats
    }
}

/// Software insertion (the default: virtio-net has no transmit tag offload).
impl<M: Mmio + 'static> SwVlanTx for VirtioTx<M> {}

impl<M: Mmio> Drop for VirtioTx<M> {
    /// Leaves the ring and the queued buffers to the port until its reset (see `VirtioRx`).
    fn drop(&mut self) {
        if let Some(parts) = self.parts.take() {
            self.shared.keep_until_reset(Box::new(parts));
        }
    }
}
