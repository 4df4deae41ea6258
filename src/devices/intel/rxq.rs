//! The receive queue both Intel drivers build on.
//!
//! An 82576 and an 82599 receive queue are set up the same way (one buffer per frame, advanced
//! descriptors, drop when the ring is empty; base, length, head = tail = 0 with the queue
//! disabled), enabled the same way and stopped the same way before their memory goes
//! (`QueueCtl::stop_rx`: clear ENABLE, poll, let in-flight writes land). [`IntelRx`] is that
//! queue: the 82576 driver exports it as `IgbRx`; the 82599's `IxgbeRx` wraps it with its
//! per-queue VLAN strip switch. Each chip passes its registers ([`RxRegs`]).

use std::sync::Arc;
use std::time::Duration;

use super::config::{Chip, IntelConfig};
use super::irq::QueueIrq;
use super::queue::{RingRegs, RX_QUIESCE};
use super::recovery::{QueueWatch, Verdict};
use super::rx::{ChipRx, RxRing};
use crate::device::{QueueError, QueueStats, RxQueue};
use crate::error::{Error, Result};
use crate::platform::bus::Bus;
use crate::platform::dma::{DmaMapper, Packet, Pool};
use crate::platform::irq::Interrupt;
use crate::platform::mmio::{wait_for, Mmio};
use crate::platform::regs::RegArray;

/// A chip's receive queue registers and write-back bits.
#[derive(Debug)]
pub struct RxRegs {
    /// Base, length, head, tail and RXDCTL.
    pub ring: RingRegs,
    /// SRRCTL.
    pub srrctl: RegArray,
    /// SRRCTL's value for one buffer per frame of `kb` KB, advanced one-buffer descriptors and
    /// DROP_EN.
    pub one_buffer: fn(kb: u32) -> u32,
    /// RXDCTL's value, ENABLE clear, from its value after a reset `old` and whether the queue
    /// strips VLAN tags `strip`: the chip's thresholds (and, on the 82599, RXDCTL.VME).
    pub ctl: fn(old: u32, strip: bool) -> u32,
    /// What the ring needs to know about the write-back.
    pub chip: ChipRx,
}

/// A chip's [`RxRegs`] from its register map (both chips name the ring registers and the
/// SRRCTL fields alike) and its write-back bits. SRRCTL: one buffer per frame, advanced
/// one-buffer descriptors (QEMU's 82576 has no legacy receive), drop when the ring is empty
/// rather than block the shared packet buffer (ixy, DPDK).
macro_rules! rx_regs {
    ($r:ident, $chip:expr, $ctl:expr) => {
        $crate::devices::intel::rxq::RxRegs {
            ring: $crate::devices::intel::queue::ring_regs!($r, rx),
            srrctl: $r::SRRCTL,
            one_buffer: |kb| {
                $r::srrctl::DESCTYPE.val(1)
                    | $r::srrctl::BSIZEPKT.val(kb)
                    | $r::srrctl::DROP_EN.bit()
            },
            ctl: $ctl,
            chip: $chip,
        }
    };
}
pub(crate) use rx_regs;

/// A receive queue of an Intel port: its ring, and what it needs to stop itself in `Drop`.
pub struct IntelRx<B: Bus> {
    /// Interrupt mode's vector (None: polled). Before `regs`, so that the routing it shares is
    /// taken down before the register window can be unmapped.
    pub(crate) irq: Option<QueueIrq>,
    pub(crate) ring: RxRing<B::Mmio>,
    pub(crate) regs: Arc<B::Mmio>,
    pub(crate) name: Arc<str>,
    pub(crate) queue: u32,
    pub(crate) timeout: Duration,
    rr: &'static RingRegs,
    rx: &'static RxRegs,
    /// SRRCTL as programmed (for a restart).
    srrctl: u32,
    /// The port's health, once the queue is handed out by a port that watches its device.
    pub(crate) watch: Option<QueueWatch>,
}

impl<B: Bus> IntelRx<B> {
    /// Allocates the ring and its pool and programs queue `queue` with the queue disabled:
    /// SRRCTL (one buffer per frame, the pool's buffer size rounded down to KB, drop when
    /// the ring is empty rather than stall the packet buffer), base, length, head = tail = 0.
    /// The chip writes its RXDCTL thresholds and bits afterwards.
    pub(crate) fn setup<C: Chip>(
        rx: &'static RxRegs,
        regs: Arc<B::Mmio>,
        name: Arc<str>,
        queue: u32,
        cfg: &IntelConfig<C>,
        mapper: Arc<dyn DmaMapper>,
    ) -> Result<Self> {
        let rr = &rx.ring;
        let pool = Pool::new(cfg.pool, mapper)?;
        let ring = RxRing::new(
            regs.clone(),
            rr.tail.at(queue).offset(),
            rr.head.at(queue).offset(),
            cfg.rx_ring,
            pool,
            rx.chip,
        )?;
        let q = IntelRx {
            irq: None,
            ring,
            regs,
            name,
            queue,
            timeout: cfg.reg_timeout,
            rr,
            rx,
            srrctl: (rx.one_buffer)(cfg.rx_buffer_kb()?),
            watch: None,
        };
        let m: &B::Mmio = &q.regs;
        rr.ctl(queue).clear(m);
        m.write(rx.srrctl.at(queue), q.srrctl);
        rr.program(m, queue, q.ring.desc_iova(), q.ring.desc_len());
        Ok(q)
    }

    /// RXDCTL's value (ENABLE clear) from its current value: the chip's thresholds, and its
    /// strip bit as the ring reads write-backs (`RxRegs::ctl`).
    pub(crate) fn write_ctl(&self) {
        let reg = self.rr.ctl(self.queue).reg;
        let old = self.regs.read(reg);
        self.regs.write(
            reg,
            (self.rx.ctl)(old, self.ring.hw_strip()) & !self.rr.enable,
        );
    }

    /// Stops the queue and starts it again on the same ring: ENABLE cleared and polled, then
    /// what `IntelRx::resync` does. Frames the device finished that were not received yet
    /// are dropped (counted in the queue's `dropped`). For an application that restarts a
    /// queue (a soak test, a reconfiguration); the port goes on.
    pub fn restart(&mut self) -> Result<()> {
        let c = self.rr.ctl(self.queue);
        c.clear(&*self.regs);
        wait_for(
            &*self.regs,
            &self.name,
            c.reg,
            c.what,
            c.enable,
            0,
            self.timeout,
        )?;
        std::thread::sleep(RX_QUIESCE);
        self.resync()
    }

    /// Programs the queue's ring again and enables it, for a ring the device lost (after the
    /// port's function reset) or a stopped queue: SRRCTL, base, length, RXDCTL, every slot
    /// re-armed ([`RxRing::reset_slots`]), head 0, ENABLE, then the tail.
    pub(crate) fn resync(&mut self) -> Result<()> {
        let (m, q) = (&*self.regs, self.queue);
        self.rr.ctl(q).clear(m);
        m.write(self.rx.srrctl.at(q), self.srrctl);
        self.rr
            .program(m, q, self.ring.desc_iova(), self.ring.desc_len());
        self.write_ctl();
        let lost = self.ring.reset_slots();
        self.enable()?;
        self.ring.start();
        tracing::debug!(port = %self.name, queue = q, dropped = lost, "receive queue restarted");
        Ok(())
    }

    /// The burst of a queue whose port's epoch moved (cold): what the port's state says.
    #[cold]
    #[inline(never)]
    fn watched_burst(&mut self, batch: &mut Vec<Packet>, max: usize) -> Result<usize, QueueError> {
        let verdict = self
            .watch
            .as_ref()
            .map_or(Verdict::Run, QueueWatch::verdict);
        match verdict {
            Verdict::Run => self.ring.rx_burst(batch, max),
            Verdict::Wait => Ok(0),
            Verdict::Removed => Err(QueueError::DeviceRemoved),
            Verdict::Failed => Err(QueueError::DeviceGone),
            Verdict::Resync(e) => {
                match self.resync() {
                    Ok(()) => {
                        tracing::info!(port = %self.name, queue = self.queue, "receive queue back after the port's reset");
                        if let Some(w) = &mut self.watch {
                            w.synced(e);
                        }
                    }
                    // Tried again at the next burst (a second reset may be under way).
                    Err(err) => {
                        tracing::warn!(port = %self.name, queue = self.queue, error = %err, "receive queue not back yet after the port's reset")
                    }
                }
                Ok(0)
            }
        }
    }

    /// Sets RXDCTL.ENABLE and waits for it to read back.
    pub(crate) fn enable(&mut self) -> Result<()> {
        self.rr
            .ctl(self.queue)
            .enable(&*self.regs, &self.name, self.timeout)
    }

    /// Hands the buffers over (RDT = size - 1): the last step, after the enables.
    pub(crate) fn start(&mut self) {
        self.ring.start();
    }

    /// The queue's number on its port.
    pub fn index(&self) -> u32 {
        self.queue
    }

    /// The queue's interrupt vector, or why it has none.
    fn queue_irq(&self) -> Result<&QueueIrq> {
        self.irq.as_ref().ok_or_else(|| Error::NotSupported {
            device: self.name.to_string(),
            what: format!("sleeping on receive queue {}", self.queue),
            why: "the port was opened without interrupt mode; open it with interrupts (IntelConfig::interrupts, `--interrupts`)".into(),
        })
    }

    /// Sets the queue's interrupt cause by hand (EICS), as a frame would: with the queue armed,
    /// the device sends its vector's message. The self-test's interrupt check.
    pub fn trigger_interrupt(&self) -> Result<()> {
        self.queue_irq()?.trigger(&*self.regs);
        Ok(())
    }
}

impl<B: Bus> RxQueue for IntelRx<B> {
    #[inline]
    fn rx_burst(&mut self, batch: &mut Vec<Packet>, max: usize) -> Result<usize, QueueError> {
        if self.watch.as_ref().is_some_and(QueueWatch::moved) {
            return self.watched_burst(batch, max);
        }
        self.ring.rx_burst(batch, max)
    }

    fn stats(&self) -> QueueStats {
        self.ring.stats()
    }

    fn pool(&self) -> &Pool {
        self.ring.pool()
    }

    fn interrupt(&self) -> Option<&Interrupt> {
        self.irq.as_ref().map(QueueIrq::interrupt)
    }

    fn arm_interrupt(&mut self) -> Result<bool> {
        self.queue_irq()?.arm(&*self.regs)?;
        // The look after the unmask: a frame written back before it is in the ring now.
        Ok(self.ring.done_pending())
    }

    fn disarm_interrupt(&mut self) {
        if let Some(irq) = &self.irq {
            irq.disarm(&*self.regs);
        }
    }
}

impl<B: Bus> Drop for IntelRx<B> {
    /// Clear ENABLE, poll until it reads 0, give in-flight writes time to land; only then may
    /// the ring and its buffers be freed (which happens right after).
    fn drop(&mut self) {
        self.rr
            .ctl(self.queue)
            .stop_rx(&*self.regs, &self.name, self.queue, self.timeout);
    }
}
