//! Queue wrappers that apply the port's VLAN modes to any receive or transmit queue.
//!
//! [`VlanRx`] and [`VlanTx`] implement [`RxQueue`] and [`TxQueue`] themselves, so an application
//! (or the forwarder) uses them exactly like the queues they wrap. Each burst begins with one
//! `Acquire` load of the control word; the per-packet work then depends on the snapshot:
//!
//! | receive mode | software filter off | software filter on |
//! |---|---|---|
//! | Hardware | nothing (no loop) | a flag test; frames the device did not strip are read |
//! | Software | a flag test; unflagged frames are read and stripped | + a table lookup per tagged frame |
//! | Deferred | nothing (no loop) | every unflagged frame's tag is read (the cost of filtering) |
//!
//! Transmit: Software mode pushes the tag of every packet marked
//! [`Meta::TX_VLAN`](crate::platform::dma::Meta::TX_VLAN) into its headroom and clears the mark; Hardware
//! mode passes the batch untouched, and the driver puts the TCI in its descriptors.
//!
//! Counters are plain `u64` fields of the wrapper (one thread owns a queue), counting what the
//! VLAN layer did in software; what the device did shows in the device's counters.

use crate::device::{QueueError, QueueStats, RxQueue, TxQueue};
use crate::error::Result;
use crate::platform::dma::{Meta, Packet, Pool};
use crate::platform::irq::Interrupt;

use super::control::{RxKey, VlanControl};
use super::frame::{find_tag, Lookup, VlanRxCtx, TAG_LEN};
use super::insert::{SwVlanCounts, SwVlanTx};
use super::tag::{RxMode, Tci, TxMode};

/// What the VLAN layer did on one queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VlanStats {
    /// Receive tags removed in software: in the burst (Software mode), or by [`VlanRx::take`].
    /// Tags the device removed, and Deferred-mode strips done with the free
    /// [`take_vlan`](super::PacketVlan::take_vlan), are not counted here.
    pub stripped: u64,
    /// Transmit tags written into frames in software.
    pub inserted: u64,
    /// Frames dropped by the software VID filter.
    pub filtered: u64,
    /// Receive: frames whose TPID field said "tagged" but too short for the tag (delivered as is,
    /// reported untagged), when software read them. Transmit: frames too short (< 12 bytes) or
    /// without 4 spare bytes to take their tag, dropped rather than sent untagged.
    pub malformed: u64,
}

/// Records the outcome of a lookup on a packet: strip (when `strip`), or mark it handled.
#[inline(always)]
fn finish(p: &mut Packet, ctx: VlanRxCtx, found: Lookup, strip: bool, stats: &mut VlanStats) {
    match found {
        Lookup::Tagged(tci) => {
            if strip {
                p.data_mut().copy_within(0..ctx.tag_offset(), TAG_LEN);
                p.pull_front(TAG_LEN);
                p.meta.vlan_tci = tci.raw();
                p.meta.flags |= Meta::VLAN_STRIPPED;
                stats.stripped += 1;
            }
        }
        Lookup::Untagged => p.meta.flags |= Meta::VLAN_HANDLED,
        Lookup::Malformed => {
            p.meta.flags |= Meta::VLAN_HANDLED | Meta::VLAN_MALFORMED;
            stats.malformed += 1;
        }
    }
}

/// A receive queue with the port's VLAN receive mode and software filter applied.
pub struct VlanRx<Q> {
    inner: Q,
    ctl: VlanControl,
    /// The queue number whose own receive mode applies (`None`: the port's mode).
    queue: Option<u16>,
    ctx: VlanRxCtx,
    stats: VlanStats,
    /// The VLAN state `ctx` and `work` were decoded from.
    key: RxKey,
    work: RxWork,
}

/// What a receive burst does beyond the wrapped queue's, decoded from the VLAN state when it
/// changes (not at every burst).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RxWork {
    /// Nothing (Hardware and Deferred modes without a software filter).
    Nothing,
    /// Software mode: strip in the burst.
    Strip,
    /// The software filter, stripping too in this receive mode if it is Software.
    Filter(RxMode),
}

impl<Q: RxQueue> VlanRx<Q> {
    /// Wraps `inner`; the modes come from `ctl` at every burst.
    pub fn new(inner: Q, ctl: &VlanControl) -> VlanRx<Q> {
        VlanRx {
            inner,
            queue: None,
            ctx: ctl.rx_ctx(),
            ctl: ctl.clone(),
            stats: VlanStats::default(),
            key: RxKey::NONE,
            work: RxWork::Nothing,
        }
    }

    /// The receive context of the last burst: pass it to
    /// [`take_vlan`](super::PacketVlan::take_vlan) for the packets that burst delivered (it is `Copy`;
    /// it can travel with the packets to another thread).
    #[inline(always)]
    pub fn ctx(&self) -> VlanRxCtx {
        self.ctx
    }

    /// [`take_vlan`](super::PacketVlan::take_vlan) with the last burst's context, counting what it
    /// strips (Deferred mode) in this queue's [`VlanStats`].
    #[inline]
    pub fn take(&mut self, p: &mut Packet) -> Option<Tci> {
        let f = p.meta.flags;
        if f & Meta::VLAN_STRIPPED != 0 {
            return Some(Tci::from_raw(p.meta.vlan_tci));
        }
        if f & Meta::VLAN_HANDLED != 0 {
            return None;
        }
        let found = find_tag(p.data(), self.ctx);
        finish(p, self.ctx, found, true, &mut self.stats);
        found.tci()
    }

    /// What the VLAN layer did on this queue.
    pub fn vlan_stats(&self) -> VlanStats {
        self.stats
    }

    /// The control handle.
    pub fn control(&self) -> &VlanControl {
        &self.ctl
    }

    /// The wrapped queue.
    pub fn inner(&self) -> &Q {
        &self.inner
    }

    /// The wrapped queue, mutably.
    pub fn inner_mut(&mut self) -> &mut Q {
        &mut self.inner
    }

    /// Unwraps.
    pub fn into_inner(self) -> Q {
        self.inner
    }

    /// Takes the context and the burst's work from a changed VLAN state.
    #[cold]
    fn decode(&mut self, key: RxKey) {
        let snap = key.snapshot();
        let mode = key.rx_mode();
        self.ctx = snap.rx_ctx();
        self.work = if snap.sw_filter() {
            RxWork::Filter(mode)
        } else if mode == RxMode::Software {
            RxWork::Strip
        } else {
            RxWork::Nothing
        };
        self.key = key;
    }

    /// The burst's work on the `n` packets from `start` on; returns how many stay.
    #[inline(never)]
    fn work(&mut self, batch: &mut Vec<Packet>, start: usize, n: usize) -> usize {
        match self.work {
            RxWork::Nothing => n,
            RxWork::Filter(mode) => self.filter(batch, start, mode),
            RxWork::Strip => {
                let ctx = self.ctx;
                for p in &mut batch[start..] {
                    if p.meta.flags & (Meta::VLAN_STRIPPED | Meta::VLAN_HANDLED) != 0 {
                        // The device stripped it (or it was examined): never twice.
                        continue;
                    }
                    let found = find_tag(p.data(), ctx);
                    finish(p, ctx, found, true, &mut self.stats);
                }
                n
            }
        }
    }

    /// The software filter (and Software-mode strip) over the packets from `start` on; drops
    /// non-members in one bulk free. Returns how many were kept.
    #[inline]
    fn filter(&mut self, batch: &mut Vec<Packet>, start: usize, mode: RxMode) -> usize {
        let ctx = self.ctx;
        let table = &self.ctl.shared.filter;
        let strip = mode == RxMode::Software;
        let mut keep = start;
        for r in start..batch.len() {
            let p = &mut batch[r];
            let f = p.meta.flags;
            let pass = if f & Meta::VLAN_STRIPPED != 0 {
                let vid = Tci::from_raw(p.meta.vlan_tci).vid();
                vid == 0 || table.contains(vid)
            } else if f & Meta::VLAN_HANDLED != 0 {
                true
            } else {
                let found = find_tag(p.data(), ctx);
                let pass = match found {
                    Lookup::Tagged(t) => t.vid() == 0 || table.contains(t.vid()),
                    _ => true,
                };
                if pass {
                    finish(p, ctx, found, strip, &mut self.stats);
                }
                pass
            };
            if pass {
                batch.swap(keep, r);
                keep += 1;
            }
        }
        let dropped = batch.len() - keep;
        if dropped > 0 {
            self.stats.filtered += dropped as u64;
            Pool::free_bulk(batch.drain(keep..));
        }
        keep - start
    }
}

impl<Q: RxQueue> RxQueue for VlanRx<Q> {
    #[inline]
    fn rx_burst(&mut self, batch: &mut Vec<Packet>, max: usize) -> Result<usize, QueueError> {
        let key = self.ctl.rx_key(self.queue);
        if key != self.key {
            self.decode(key);
        }
        let start = batch.len();
        let n = self.inner.rx_burst(batch, max)?;
        if n == 0 || self.work == RxWork::Nothing {
            return Ok(n);
        }
        Ok(self.work(batch, start, n))
    }

    fn stats(&self) -> QueueStats {
        self.inner.stats()
    }

    fn pool(&self) -> &Pool {
        self.inner.pool()
    }

    fn interrupt(&self) -> Option<&Interrupt> {
        self.inner.interrupt()
    }

    fn arm_interrupt(&mut self) -> Result<bool> {
        self.inner.arm_interrupt()
    }

    fn disarm_interrupt(&mut self) {
        self.inner.disarm_interrupt();
    }
}

/// A transmit queue with the port's VLAN transmit mode applied.
pub struct VlanTx<Q> {
    inner: Q,
    ctl: VlanControl,
    stats: VlanStats,
}

impl<Q: SwVlanTx> VlanTx<Q> {
    /// Wraps `inner`; the mode comes from `ctl` at every burst.
    pub fn new(inner: Q, ctl: &VlanControl) -> VlanTx<Q> {
        VlanTx {
            inner,
            ctl: ctl.clone(),
            stats: VlanStats::default(),
        }
    }

    /// What the VLAN layer did on this queue.
    pub fn vlan_stats(&self) -> VlanStats {
        self.stats
    }

    /// The control handle.
    pub fn control(&self) -> &VlanControl {
        &self.ctl
    }

    /// The wrapped queue.
    pub fn inner(&self) -> &Q {
        &self.inner
    }

    /// The wrapped queue, mutably.
    pub fn inner_mut(&mut self) -> &mut Q {
        &mut self.inner
    }

    /// Unwraps.
    pub fn into_inner(self) -> Q {
        self.inner
    }
}

impl<Q: SwVlanTx> TxQueue for VlanTx<Q> {
    /// In Software mode, tags are pushed first; a packet that cannot take its tag (shorter than
    /// 12 bytes, or no 4 bytes to spare in its buffer) is dropped and counted as malformed
    /// rather than sent untagged onto the wrong VLAN. The count returned is the number of packets
    /// removed from `batch`: those queued plus those dropped.
    #[inline]
    fn tx_burst(&mut self, batch: &mut Vec<Packet>) -> Result<usize, QueueError> {
        let snap = self.ctl.snapshot();
        if snap.tx_mode() == TxMode::Hardware {
            return self.inner.tx_burst(batch);
        }
        let mut c = SwVlanCounts::default();
        let sent = self
            .inner
            .tx_burst_sw_vlan(batch, snap.rx_ctx().push_tpid(), &mut c)?;
        self.stats.inserted += c.inserted;
        self.stats.malformed += c.malformed;
        Ok(sent + c.malformed as usize)
    }

    fn stats(&self) -> QueueStats {
        self.inner.stats()
    }
}

impl VlanControl {
    /// Wraps a receive queue ([`VlanRx::new`]).
    pub fn wrap_rx<Q: RxQueue>(&self, q: Q) -> VlanRx<Q> {
        VlanRx::new(q, self)
    }

    /// Wraps receive queue number `q`: like [`wrap_rx`](Self::wrap_rx), but the queue's own
    /// receive mode ([`set_queue_rx_mode`](Self::set_queue_rx_mode)) applies when it has one.
    pub fn wrap_rx_queue<Q: RxQueue>(&self, q: u16, inner: Q) -> VlanRx<Q> {
        let mut rx = VlanRx::new(inner, self);
        rx.queue = Some(q);
        rx
    }

    /// Wraps a transmit queue ([`VlanTx::new`]).
    pub fn wrap_tx<Q: SwVlanTx>(&self, q: Q) -> VlanTx<Q> {
        VlanTx::new(q, self)
    }
}
