//! [`QmTx`]: transmit by batched enqueue.
//!
//! A burst writes one enqueue entry per packet (its frame descriptor names the buffer, the
//! frame's offset and the pool the buffer goes back to) and rings the EQCR_PI doorbell once.
//! The buffer is lent to the device with the descriptor: the device releases it to its pool
//! after sending, so there is no transmit completion to wait for, and the receive queue that
//! owns the pool gets it back from a later frame. A packet of a pool no qm port of this
//! queue manager lends is copied into a buffer of the port's own pool (`copied`).
//!
//! A port that sends packets of its own pool (a generator) fills its hardware pool with
//! them, and nothing but received frames brings them back; so when the device holds more than
//! the receive queue's target plus a burst's worth, the transmit queue acquires the surplus
//! back through its portal (DPDK never needs this: its mempool is the hardware pool).

use crate::devices::offload::{soft, TxCaps};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::portal::SwPortal;
use super::shared::{lender_of, Lender, Shared};
use super::QmBus;
use crate::device::{QueueError, QueueStats, TxQueue};
use crate::error::Result;
use crate::platform::dma::{Meta, Packet};
use crate::vlan::insert::insert_all;
use crate::vlan::{SwVlanCounts, SwVlanTx, Tpid};

/// Buffers the device may hold beyond the receive queue's target before the transmit queue
/// takes the surplus back (and the most it takes per burst).
const RECLAIM_SLACK: usize = 64;

/// How long dropping the queue waits for the device to take its last entries.
const DRAIN: Duration = Duration::from_millis(200);

/// A transmit queue of a qm port.
pub struct QmTx<B: QmBus> {
    portal: SwPortal<B::Mmio>,
    fqid: u32,
    /// The lender of the last packet's pool: most bursts send packets of one pool.
    last: Lender,
    stats: QueueStats,
    /// A frame dropped by the software offloads has been logged (once per queue).
    offload_logged: bool,
    shared: Arc<Shared<B>>,
}

/// Why a packet cannot be copied into the port's own pool.
enum NoCopy {
    /// The pool has no free buffer now (the packet waits in the batch).
    Empty,
    /// The frame does not fit one of its buffers (the packet is dropped).
    TooLong,
}

impl<B: QmBus> QmTx<B> {
    pub(super) fn new(shared: Arc<Shared<B>>) -> Result<QmTx<B>> {
        let (cena, cinh) = shared
            .bus
            .portal(1)
            .ok_or_else(|| crate::Error::DeviceState {
                device: shared.name.clone(),
                what: "the bus offers no software portal 1 for the transmit queue".into(),
            })?;
        Ok(QmTx {
            portal: SwPortal::init(cena, cinh, shared.name.clone())?,
            fqid: shared.tx_fqid,
            last: shared.lender.clone(),
            stats: QueueStats::default(),
            offload_logged: false,
            shared,
        })
    }

    /// Makes the cached lender the one of `p`'s pool; false when no live port lends it, or
    /// when the frame's offset does not fit a frame descriptor (12 bits). No reference count
    /// moves unless the pool changes.
    #[inline]
    fn lender(&mut self, p: &Packet) -> bool {
        if p.headroom() > MAX_FD_OFFSET {
            return false;
        }
        if self.last.takes(p) {
            return true;
        }
        match lender_of(self.shared.domain, p) {
            Some(found) => {
                self.last = found;
                true
            }
            None => false,
        }
    }

    /// A copy of `p` in a buffer of the port's own pool.
    fn copy_of(&mut self, p: &Packet) -> Result<Packet, NoCopy> {
        let mut c = self
            .shared
            .lender
            .table
            .pool()
            .alloc()
            .ok_or(NoCopy::Empty)?;
        if !c.set_data(p.data()) {
            return Err(NoCopy::TooLong);
        }
        c.meta = p.meta;
        self.stats.copied += 1;
        Ok(c)
    }

    /// Makes `batch[i]` a packet some live port lends (a copy when it is not), with
    /// `self.last` its lender; false when it must wait (no buffer to copy into), true
    /// otherwise. A frame too long for a copy is dropped and counted, and the next packet
    /// takes its place.
    fn make_sendable(&mut self, batch: &mut Vec<Packet>, i: usize) -> bool {
        while i < batch.len() {
            if self.lender(&batch[i]) {
                return true;
            }
            match self.copy_of(&batch[i]) {
                Ok(c) => {
                    if !self.last.takes(&c) {
                        self.last = self.shared.lender.clone();
                    }
                    batch[i] = c;
                    return true;
                }
                Err(NoCopy::Empty) => return false,
                Err(NoCopy::TooLong) => {
                    drop(batch.remove(i));
                    self.stats.dropped += 1;
                }
            }
        }
        false
    }
}

/// The largest frame offset a frame descriptor holds (12 bits, `FD_OFFSET_MASK`).
const MAX_FD_OFFSET: usize = 0xfff;

impl<B: QmBus> QmTx<B> {
    /// The transmit burst; with `SW_VLAN`, software VLAN insertion too (TPID `tpid`, the
    /// tags and drops counted in `counts`), as the VLAN layer's pass ([`insert_all`]) does
    /// before a burst, but only for a burst that has a packet asking for a tag (see below).
    /// Not inlined into the VLAN layer's wrapper: its loop keeps its values in registers.
    #[inline(never)]
    fn burst<const SW_VLAN: bool>(
        &mut self,
        batch: &mut Vec<Packet>,
        tpid: Tpid,
        counts: &mut SwVlanCounts,
    ) -> Result<usize, QueueError> {
        let mut room = self.portal.eq_room(batch.len() as u32)? as usize;
        // One pass: the packets at the front that the cached lender's pool lends go out as a
        // run (an enqueue entry each, written as its buffer is lent; the lender's `alive` read
        // once per run); the first that does not (another pool, a port gone, an offset too
        // large for an FD) makes the lender its own, or is copied into the port's pool, and
        // starts the next run. A burst of one pool is one run.
        //
        // A frame descriptor here names one buffer (no scatter-gather table) and the device
        // computes no checksum: the first frame that is chained or asks for an offload ends
        // the run too, and when a run ends early for any reason the rest of the batch goes
        // through the software fallback once (chains linearized, offloads done, order kept)
        // before the next run. The usual burst asks for neither and pays one bit test per
        // packet for it, in the run, instead of a pass of its own.
        //
        // Software VLAN insertion the same way: the first packet that asks for a tag ends the
        // run, and the rest of the batch gets its tags pushed ([`insert_all`]) before anything
        // else, so a burst without tags pays one test per packet instead of a pass.
        let (mut sent, mut bytes) = (0, 0u64);
        let (mut vouched, mut resolved) = (false, false);
        loop {
            let left = room - sent;
            if left == 0 || batch.is_empty() {
                break;
            }
            let k = if self.last.alive.load(Ordering::Relaxed) {
                let mut eq = self.portal.eq_run(self.fqid);
                let bpid = self.last.bpid;
                let k = self.last.table.lend_run(batch, left, |buf, p, plain| {
                    let software = !plain && soft::needs_software(p, TxCaps::NONE);
                    let tag = SW_VLAN && p.meta.flags & Meta::TX_VLAN != 0;
                    if p.headroom() > MAX_FD_OFFSET || (software && !resolved) || tag {
                        return false;
                    }
                    eq.push(buf, p.len() as u32, bpid, p.headroom() as u16);
                    bytes += p.len() as u64;
                    true
                });
                eq.finish();
                k
            } else {
                0
            };
            sent += k;
            if k == left || batch.is_empty() {
                break;
            }
            // Off the usual path: first the tags (as the VLAN layer's pass would have pushed
            // them before the burst), then (a copy reads a frame's data, which must be one
            // buffer's) the rest of the batch through the fallback, once.
            if SW_VLAN && batch[0].meta.flags & Meta::TX_VLAN != 0 {
                // Every tag pushed (or its packet dropped): no packet asks for one after this.
                let (inserted, malformed) = insert_all(batch, tpid);
                counts.inserted += inserted;
                counts.malformed += malformed;
                continue;
            }
            if !resolved {
                soft::resolve_for_queue(
                    batch,
                    TxCaps::NONE,
                    &mut self.stats.dropped,
                    &mut self.offload_logged,
                );
                resolved = true;
                // Segments of a TSO frame may have made the batch longer than the room seen.
                room = sent + self.portal.eq_room(batch.len() as u32)? as usize;
                continue;
            }
            // `make_sendable` vouched for the packet at the front and the run still took none:
            // cannot happen (the run checks what it checked), but never spin on it.
            if k == 0 && vouched {
                break;
            }
            if !self.make_sendable(batch, 0) {
                break;
            }
            vouched = true;
        }
        if sent > 0 {
            self.portal.eq_doorbell();
        }
        self.stats.no_room += batch.len() as u64;
        self.stats.packets += sent as u64;
        self.stats.bytes += bytes;
        let s = &self.shared;
        let lent = s.lender.table.lent();
        if lent > s.target + RECLAIM_SLACK {
            // A management command through this queue's own portal; errors are the device's
            // (gone, or not answering), and the next burst meets them on the ring.
            let surplus = lent - s.target;
            if let Err(e) = s.reclaim(&mut self.portal, surplus.min(RECLAIM_SLACK)) {
                tracing::debug!(port = %s.name, error = %e, "reclaim from the hardware pool failed");
            }
        }
        Ok(sent)
    }
}

impl<B: QmBus> TxQueue for QmTx<B> {
    fn tx_burst(&mut self, batch: &mut Vec<Packet>) -> Result<usize, QueueError> {
        self.burst::<false>(batch, Tpid::default(), &mut SwVlanCounts::default())
    }

    fn stats(&self) -> QueueStats {
        self.stats
    }
}

/// Software insertion inside the burst, where a run stops for a packet that asks for a tag
/// (a DPNI inserts no tags): a burst without tags pays one test per packet for them.
impl<B: QmBus> SwVlanTx for QmTx<B> {
    fn tx_burst_sw_vlan(
        &mut self,
        batch: &mut Vec<Packet>,
        tpid: Tpid,
        counts: &mut SwVlanCounts,
    ) -> Result<usize, QueueError> {
        self.burst::<true>(batch, tpid, counts)
    }
}

impl<B: QmBus> Drop for QmTx<B> {
    /// Waits until the device has taken every entry written (their buffers are then its).
    fn drop(&mut self) {
        let deadline = Instant::now() + DRAIN;
        while !self.portal.eq_drained() {
            if Instant::now() > deadline {
                tracing::warn!(port = %self.shared.name, "transmit queue dropped with entries the device did not take");
                return;
            }
            std::hint::spin_loop();
        }
    }
}
