//! The 82599's receive and transmit queues: ring registers, enable and disable, and the
//! per-queue VLAN strip switch.
//!
//! A queue owns its ring (descriptors and buffers), so it is the queue's `Drop` that stops the
//! hardware queue (ENABLE off, bounded poll; datasheet 4.6.7.1 / 4.6.8.1) before the memory goes.
//!
//! # Switching VLAN stripping on a running queue
//!
//! RXDCTL.VME decides, per frame, whether the device strips the tag; the ring's `hw_strip` flag
//! decides how a write-back is reported (on the 82599 the VP bit is set for every tagged frame,
//! stripped or not, so "stripped" can only come from our own setting). If the register and the
//! flag changed at different moments, frames already written back under the old setting would
//! be reported under the new one: a stripped tag lost, or a tag reported that is still in the
//! frame, the double handling FreeBSD once shipped. So the flag never changes while descriptors
//! written under the other setting may exist. The procedure, done by the queue itself:
//!
//! 1. clear RXDCTL.ENABLE; the device finishes the frame it is writing, then stops (frames that
//!    arrive for the queue meanwhile are dropped by the device and counted there);
//! 2. harvest every finished descriptor under the *old* setting and deliver it;
//! 3. once ENABLE reads 0 and no finished descriptor is left: write VME, program RDH at the
//!    ring's current slot, set ENABLE, poll it, flip `hw_strip`, write RDT.
//!
//! The port cannot touch a queue that another thread owns, so [`IxgbePort::set_rx_strip`]
//! only posts the wish in a shared [`StripCtl`]; the queue reads it once per burst (one relaxed
//! load) and runs the procedure over its next bursts, never blocking for more than one register
//! poll: harvested frames come out of `rx_burst` as usual, at most `max` at a time. When it is
//! done the new setting is visible through [`IxgbePort::rx_strip`]. A queue still held by the
//! port, or a caller that owns the queue ([`IxgbeRx::set_vlan_strip`]), does it synchronously.
//!
//! Guarantee: every frame is reported under exactly the setting it was written with. Cost: the
//! queue is stopped for the harvest (microseconds), and frames arriving then are dropped.
//!
//! [`IxgbePort::set_rx_strip`]: super::IxgbePort::set_rx_strip
//! [`IxgbePort::rx_strip`]: super::IxgbePort::rx_strip

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::device::{QueueError, QueueStats, RxQueue};
use crate::devices::intel::queue::RingRegs;
use crate::devices::intel::rx::{ChipRx, RxRing};
use crate::devices::intel::IntelTx;
use crate::error::{Error, Result};
use crate::platform::bus::Bus;
use crate::platform::dma::{DmaMapper, Packet, Pool};
use crate::platform::mmio::{wait_for, Mmio};
use crate::platform::regs::ixgbe::{self as r};

use super::IxgbeConfig;

/// 82599 receive write-back error bits (notes 3.2): RXE b29, L4E/TCPE b30, IPE b31.
pub(crate) const CHIP_RX: ChipRx = ChipRx {
    frame_error: 1 << 29,
    ip_error: 1 << 31,
    l4_error: 1 << 30,
    vp_means_stripped: false,
    udp_l4_error_unreliable: true,
};

/// TXDCTL thresholds: prefetch 36 and host 8 as ixy; write-back threshold 0 because the ring
/// asks for write-backs with RS only every few descriptors (DPDK refuses WTHRESH > 0 with an
/// RS threshold above 1: the device would then write back in batches that ignore RS).
const TX_PTHRESH: u32 = 36;
const TX_HTHRESH: u32 = 8;
const TX_WTHRESH: u32 = 0;

/// The 82599's receive ring registers.
pub(crate) static RX_RING: RingRegs = RingRegs {
    bal: r::RDBAL,
    bah: r::RDBAH,
    len: r::RDLEN,
    head: r::RDH,
    tail: r::RDT,
    ctl: r::RXDCTL,
    enable: r::rxdctl::ENABLE.bit(),
    what: "RXDCTL.ENABLE",
};

/// The 82599's transmit ring registers.
pub(crate) static TX_RING: RingRegs = RingRegs {
    bal: r::TDBAL,
    bah: r::TDBAH,
    len: r::TDLEN,
    head: r::TDH,
    tail: r::TDT,
    ctl: r::TXDCTL,
    enable: r::txdctl::ENABLE.bit(),
    what: "TXDCTL.ENABLE",
};

/// TXDCTL for the 82599 (notes 1.4 step 7): thresholds replaced, other bits kept.
pub(crate) fn txdctl(old: u32) -> u32 {
    use r::txdctl::*;
    old & !(PTHRESH.mask() | HTHRESH.mask() | WTHRESH.mask())
        | PTHRESH.val(TX_PTHRESH)
        | HTHRESH.val(TX_HTHRESH)
        | WTHRESH.val(TX_WTHRESH)
}

/// The strip setting of one receive queue, shared between the port and the queue.
#[derive(Debug)]
pub struct StripCtl {
    /// What the port asked for.
    want: AtomicBool,
    /// What the queue's hardware and ring use now.
    applied: AtomicBool,
}

impl StripCtl {
    pub(crate) fn new(on: bool) -> Self {
        StripCtl {
            want: AtomicBool::new(on),
            applied: AtomicBool::new(on),
        }
    }

    pub(crate) fn request(&self, on: bool) {
        self.want.store(on, Ordering::Relaxed);
    }

    pub(crate) fn wanted(&self) -> bool {
        self.want.load(Ordering::Relaxed)
    }

    pub(crate) fn applied(&self) -> bool {
        self.applied.load(Ordering::Acquire)
    }
}

/// A receive queue of an 82599 port.
pub struct IxgbeRx<B: Bus> {
    ring: RxRing<B::Mmio>,
    regs: Arc<B::Mmio>,
    name: Arc<str>,
    queue: u32,
    timeout: Duration,
    strip: Arc<StripCtl>,
    /// Set while a strip switch has the queue stopped: when the disable was written.
    stopping: Option<Instant>,
    /// Frames harvested by a synchronous switch on a queue nobody was receiving from yet;
    /// delivered first by the next bursts.
    held: Vec<Packet>,
}

impl<B: Bus> IxgbeRx<B> {
    /// Allocates the ring and programs the queue's registers with the queue disabled
    /// (notes 1.4 step 6, datasheet 4.6.7: SRRCTL, base, length, head = tail = 0, VME).
    pub(crate) fn setup(
        regs: Arc<B::Mmio>,
        name: Arc<str>,
        queue: u32,
        cfg: &IxgbeConfig,
        mapper: Arc<dyn DmaMapper>,
        strip: Arc<StripCtl>,
    ) -> Result<Self> {
        let pool = Pool::new(cfg.pool, mapper)?;
        let mut ring = RxRing::new(
            regs.clone(),
            r::RDT.at(queue).offset(),
            r::RDH.at(queue).offset(),
            cfg.rx_ring,
            pool,
            CHIP_RX,
        )?;
        let on = strip.applied();
        ring.set_hw_strip(on);
        let q = IxgbeRx {
            ring,
            regs,
            name,
            queue,
            timeout: cfg.reg_timeout,
            strip,
            stopping: None,
            held: Vec::new(),
        };
        let m: &B::Mmio = &q.regs;
        m.modify(r::RXDCTL.at(queue), r::rxdctl::ENABLE.bit(), 0);
        // One buffer per frame, advanced descriptors, buffer size in KB rounded down; drop
        // when the ring is empty rather than block the shared packet buffer (ixy, DPDK).
        let srrctl = r::srrctl::DESCTYPE.val(1)
            | r::srrctl::BSIZEPKT.val(cfg.rx_buffer_kb()?)
            | r::srrctl::DROP_EN.bit();
        m.write(r::SRRCTL.at(queue), srrctl);
        RX_RING.program(m, queue, q.ring.desc_iova(), q.ring.desc_len());
        m.modify(
            r::RXDCTL.at(queue),
            r::rxdctl::VME.bit(),
            if on { r::rxdctl::VME.bit() } else { 0 },
        );
        Ok(q)
    }

    /// Notes 1.4 step 8: enable, wait for ENABLE to read back, then hand the buffers over
    /// (RDT = size - 1; the tail is written last).
    pub(crate) fn start(&mut self) -> Result<()> {
        RX_RING
            .ctl(self.queue)
            .enable(&*self.regs, &self.name, self.timeout)?;
        self.ring.start();
        Ok(())
    }

    /// The queue's number on its port.
    pub fn index(&self) -> u32 {
        self.queue
    }

    /// Whether the device strips VLAN tags on this queue now (RXDCTL.VME as the ring uses it).
    pub fn vlan_strip(&self) -> bool {
        self.ring.hw_strip()
    }

    /// Turns VLAN stripping on this queue on or off, synchronously (see the module doc):
    /// frames finished under the old setting are appended to `batch` (as many as the ring held;
    /// they may exceed one burst). Returns how many were appended.
    pub fn set_vlan_strip(&mut self, on: bool, batch: &mut Vec<Packet>) -> Result<usize> {
        self.strip.request(on);
        let before = batch.len();
        batch.append(&mut self.held);
        self.switch_now(batch)?;
        Ok(batch.len() - before)
    }

    /// Keeps frames harvested on the queue's behalf for its next bursts.
    pub(crate) fn hold(&mut self, mut frames: Vec<Packet>) {
        self.held.append(&mut frames);
    }

    /// The synchronous switch: stop, harvest everything into `out`, switch, restart.
    pub(crate) fn switch_now(&mut self, out: &mut Vec<Packet>) -> Result<()> {
        let on = self.strip.wanted();
        if self.stopping.is_none() && on == self.ring.hw_strip() {
            return Ok(());
        }
        let m = &*self.regs;
        let reg = r::RXDCTL.at(self.queue);
        let en = r::rxdctl::ENABLE.bit();
        m.modify(reg, en, 0);
        self.stopping.get_or_insert_with(Instant::now);
        wait_for(m, &self.name, reg, "RXDCTL.ENABLE", en, 0, self.timeout)?;
        let size = self.ring.size();
        while self.ring.done_pending() {
            if !self.ring.can_refill() {
                // Finished frames but no buffers to re-arm their slots with: keep the old
                // setting rather than report them wrongly.
                let old = self.ring.hw_strip();
                self.strip.request(old);
                self.restart(old)?;
                return Err(Error::InvalidConfig(format!(
                    "{} rx queue {}: the pool has no free buffer to harvest the ring before switching VLAN stripping; free some packets and retry",
                    self.name, self.queue
                )));
            }
            self.ring.rx_burst(out, size)?;
        }
        self.restart(on)
    }

    /// Step 3 of the procedure: the queue is stopped and drained; program VME and the head,
    /// enable, poll, then flip the ring's flag and give the slots back.
    fn restart(&mut self, on: bool) -> Result<()> {
        let m = &*self.regs;
        let reg = r::RXDCTL.at(self.queue);
        let vme = r::rxdctl::VME.bit();
        let en = r::rxdctl::ENABLE.bit();
        let v = m.read(reg) & !(vme | en);
        m.write(reg, v | if on { vme } else { 0 });
        m.write(r::RDH.at(self.queue), self.ring.restart_slot() as u32);
        m.write(reg, v | if on { vme } else { 0 } | en);
        self.stopping = None;
        wait_for(m, &self.name, reg, "RXDCTL.ENABLE", en, en, self.timeout)?;
        self.ring.set_hw_strip(on);
        self.strip.applied.store(on, Ordering::Release);
        self.ring.rearm_all();
        tracing::debug!(port = %self.name, queue = self.queue, strip = on, "VLAN strip switched");
        Ok(())
    }

    /// The burst path while a switch is pending or running (see the module doc); never waits
    /// on the device.
    #[cold]
    fn slow_burst(&mut self, batch: &mut Vec<Packet>, max: usize) -> Result<usize, QueueError> {
        let before = batch.len();
        if !self.held.is_empty() {
            let n = self.held.len().min(max);
            batch.extend(self.held.drain(..n));
            if !self.held.is_empty()
                || self.stopping.is_none() && self.strip.wanted() == self.ring.hw_strip()
            {
                return Ok(n);
            }
        }
        let m = &*self.regs;
        let reg = r::RXDCTL.at(self.queue);
        let en = r::rxdctl::ENABLE.bit();
        let since = match self.stopping {
            Some(t) => t,
            None => {
                m.modify(reg, en, 0);
                *self.stopping.insert(Instant::now())
            }
        };
        let room = max - (batch.len() - before);
        self.ring.rx_burst(batch, room)?;
        let v = m.read(reg);
        if v == u32::MAX {
            return Err(QueueError::DeviceGone);
        }
        if v & en != 0 {
            if since.elapsed() > self.timeout {
                // The queue would not stop: give up the switch and keep the old setting.
                tracing::error!(
                    port = %self.name, queue = self.queue,
                    timeout_ms = self.timeout.as_millis() as u64,
                    "RXDCTL.ENABLE did not clear; VLAN strip switch abandoned"
                );
                m.write(reg, v | en);
                self.stopping = None;
                self.strip.request(self.ring.hw_strip());
            }
            return Ok(batch.len() - before);
        }
        if !self.ring.done_pending() {
            let on = self.strip.wanted();
            if let Err(e) = self.restart(on) {
                tracing::error!(port = %self.name, queue = self.queue, error = %e, "restarting the queue after a VLAN strip switch failed");
                return Err(QueueError::DeviceGone);
            }
        }
        Ok(batch.len() - before)
    }
}

impl<B: Bus> RxQueue for IxgbeRx<B> {
    #[inline]
    fn rx_burst(&mut self, batch: &mut Vec<Packet>, max: usize) -> Result<usize, QueueError> {
        if self.strip.wanted() != self.ring.hw_strip()
            || self.stopping.is_some()
            || !self.held.is_empty()
        {
            return self.slow_burst(batch, max);
        }
        self.ring.rx_burst(batch, max)
    }

    fn stats(&self) -> QueueStats {
        self.ring.stats()
    }

    fn pool(&self) -> &Pool {
        self.ring.pool()
    }
}

impl<B: Bus> Drop for IxgbeRx<B> {
    /// Datasheet 4.6.7.1: clear ENABLE, poll until it reads 0, give in-flight writes time to
    /// land; only then may the ring and its buffers be freed (which happens right after).
    fn drop(&mut self) {
        RX_RING
            .ctl(self.queue)
            .stop_rx(&*self.regs, &self.name, self.queue, self.timeout);
    }
}

/// A transmit queue of an 82599 port: the transmit queue shared with the 82576 driver
/// ([`IntelTx`]; notes 1.4 steps 7 and 8, datasheet 4.6.8 and 4.6.8.1).
pub type IxgbeTx<B> = IntelTx<B>;
