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
        let q = IntelTx {
            ring,
            regs,
            name,
            queue,
            timeout,
            rr,
        };
        let m: &B::Mmio = &q.regs;
        let c = q.ctl();
        c.clear(m);
        rr.program(m, queue, q.ring.desc_iova(), q.ring.desc_len());
        let v = m.read(c.reg);
        m.write(c.reg, ctl(v) & !c.enable);
        Ok(q)
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
        self.ring.tx_burst_sw_vlan(batch, tpid, counts)
    }
}

impl<B: Bus> Drop for IntelTx<B> {
    /// Let what is queued leave (briefly), clear ENABLE and poll it; the ring frees the buffers
    /// afterwards (datasheets: 82576 4.5.10, 82599 4.6.8.1).
    fn drop(&mut self) {
        self.ctl().stop_tx(
            &*self.regs,
            &self.name,
            self.queue,
            self.rr.head.at(self.queue),
            self.ring.tail_slot() as u32,
            self.timeout,
        );
    }
}
