//! The transmit queue of both Intel drivers.
//!
//! An 82576 and an 82599 transmit queue differ only in register offsets and the threshold
//! fields of TXDCTL: same ring ([`TxRing`]), same enable protocol, same shutdown (let queued
//! frames leave briefly, clear ENABLE, poll it; `QueueCtl::stop_tx`). So there is one type,
//! [`IntelTx`], exported by the drivers as `IgbTx` and `IxgbeTx`; each driver passes its
//! ring registers (`RingRegs`) and TXDCTL value at setup.

use std::sync::Arc;
use std::time::Duration;

use crate::device::{QueueError, QueueStats, TxQueue};
use crate::devices::intel::recovery::{QueueWatch, Verdict};
use crate::devices::intel::tx::TxRing;
use crate::error::Result;
use crate::platform::bus::Bus;
use crate::platform::dma::Packet;
use crate::platform::mmio::Mmio;
use crate::vlan::{SwVlanCounts, SwVlanTx, Tpid};

use super::queue::{QueueCtl, RingRegs};

/// A transmit queue of an Intel port (82576 or 82599).
pub struct IntelTx<B: Bus> {
    ring: TxRing<B::Mmio>,
    regs: Arc<B::Mmio>,
    name: Arc<str>,
    queue: u32,
    timeout: Duration,
    rr: &'static RingRegs,
    /// TXDCTL as programmed, ENABLE clear (for a restart).
    txdctl: u32,
    /// The port's health, once the queue is handed out by a port that watches its device.
    pub(crate) watch: Option<QueueWatch>,
}

impl<B: Bus> IntelTx<B> {
    /// Allocates the ring and programs queue `queue` with the queue disabled: base, length,
    /// head = tail = 0, then the control register as `ctl` computes it from its current value
    /// (thresholds; ENABLE must stay clear).
    pub(crate) fn setup(
        rr: &'static RingRegs,
        bus: &B,
        name: Arc<str>,
        queue: u32,
        size: usize,
        timeout: Duration,
        ctl: impl FnOnce(u32) -> u32,
    ) -> Result<Self> {
        let regs = bus.regs().clone();
        let ring = TxRing::new(
            regs.clone(),
            rr.tail.at(queue).offset(),
            rr.head.at(queue).offset(),
            size,
            bus.dma_mapper(),
        )?;
        let mut q = IntelTx {
            ring,
            regs,
            name,
            queue,
            timeout,
            rr,
            txdctl: 0,
            watch: None,
        };
        let m: &B::Mmio = &q.regs;
        let c = q.ctl();
        c.clear(m);
        rr.program(m, queue, q.ring.desc_iova(), q.ring.desc_len());
        let v = m.read(c.reg);
        q.txdctl = ctl(v) & !c.enable;
        m.write(c.reg, q.txdctl);
        Ok(q)
    }

    /// Stops the queue and starts it again on the same ring: what was queued may leave
    /// (briefly), ENABLE is cleared and polled, what the device sent is taken back, then
    /// `IntelTx::resync`. Packets queued but not sent are dropped (counted in `dropped`).
    pub fn restart(&mut self) -> Result<()> {
        self.stop();
        // A device that stopped answering is reported by the resync's enable.
        let _ = self.ring.reclaim_by_head();
        self.resync()
    }

    /// Lets what is queued leave (briefly), clears ENABLE and polls it
    /// (`QueueCtl::stop_tx`).
    fn stop(&self) {
        self.ctl().stop_tx(
            &*self.regs,
            &self.name,
            self.queue,
            self.rr.head.at(self.queue),
            self.ring.tail_slot() as u32,
            self.timeout,
        );
    }

    /// Programs the queue's ring again and enables it, for a ring the device lost (after the
    /// port's function reset) or a stopped queue: every buffer still queued released
    /// ([`TxRing::reset_slots`]), base, length, TXDCTL, head = tail = 0, ENABLE.
    pub(crate) fn resync(&mut self) -> Result<()> {
        let (m, q) = (&*self.regs, self.queue);
        let c = self.ctl();
        c.clear(m);
        let lost = self.ring.reset_slots();
        self.rr
            .program(m, q, self.ring.desc_iova(), self.ring.desc_len());
        m.write(c.reg, self.txdctl);
        self.start()?;
        tracing::debug!(port = %self.name, queue = q, dropped = lost, "transmit queue restarted");
        Ok(())
    }

    /// The burst of a queue whose port's epoch moved (cold): what the port's state says.
    #[cold]
    #[inline(never)]
    fn watched(&mut self) -> Result<bool, QueueError> {
        let verdict = self
            .watch
            .as_ref()
            .map_or(Verdict::Run, QueueWatch::verdict);
        match verdict {
            Verdict::Run => Ok(true),
            Verdict::Wait => Ok(false),
            Verdict::Removed => Err(QueueError::DeviceRemoved),
            Verdict::Failed => Err(QueueError::DeviceGone),
            Verdict::Resync(e) => match self.resync() {
                Ok(()) => {
                    tracing::info!(port = %self.name, queue = self.queue, "transmit queue back after the port's reset");
                    if let Some(w) = &mut self.watch {
                        w.synced(e);
                    }
                    Ok(true)
                }
                // Tried again at the next burst (a second reset may be under way).
                Err(err) => {
                    tracing::warn!(port = %self.name, queue = self.queue, error = %err, "transmit queue not back yet after the port's reset");
                    Ok(false)
                }
            },
        }
    }

    /// Whether a burst may use the ring: true at once unless the port's epoch moved.
    #[inline(always)]
    fn may_send(&mut self) -> Result<bool, QueueError> {
        match &self.watch {
            Some(w) if w.moved() => self.watched(),
            _ => Ok(true),
        }
    }

    fn ctl(&self) -> QueueCtl {
        self.rr.ctl(self.queue)
    }

    /// Head = tail = 0, set ENABLE and wait for it to read back.
    pub(crate) fn start(&mut self) -> Result<()> {
        let m = &*self.regs;
        m.write(self.rr.head.at(self.queue), 0);
        m.write(self.rr.tail.at(self.queue), 0);
        self.ctl().enable(m, &self.name, self.timeout)
    }

    /// The queue's number on its port.
    pub fn index(&self) -> u32 {
        self.queue
    }

    /// Reclaims every buffer the device has finished with, by reading the head register (an
    /// MMIO read: for idle queues, not for every burst). Returns the descriptors still queued.
    pub fn reclaim(&mut self) -> Result<usize, QueueError> {
        self.ring.reclaim_by_head()
    }
}

impl<B: Bus> TxQueue for IntelTx<B> {
    #[inline]
    fn tx_burst(&mut self, batch: &mut Vec<Packet>) -> Result<usize, QueueError> {
        if !self.may_send()? {
            return Ok(0);
        }
        self.ring.tx_burst(batch)
    }

    fn stats(&self) -> QueueStats {
        self.ring.stats()
    }
}

/// Software insertion inside the ring's transmit loop, where it stops for a tagged packet
/// anyway: untagged bursts pay nothing for it.
impl<B: Bus> SwVlanTx for IntelTx<B> {
    #[inline]
    fn tx_burst_sw_vlan(
        &mut self,
        batch: &mut Vec<Packet>,
        tpid: Tpid,
        counts: &mut SwVlanCounts,
    ) -> Result<usize, QueueError> {
        if !self.may_send()? {
            return Ok(0);
        }
        self.ring.tx_burst_sw_vlan(batch, tpid, counts)
    }
}

impl<B: Bus> Drop for IntelTx<B> {
    /// Let what is queued leave (briefly), clear ENABLE and poll it; the ring frees the buffers
    /// afterwards (datasheets: 82576 4.5.10, 82599 4.6.8.1).
    fn drop(&mut self) {
        self.stop();
    }
}
