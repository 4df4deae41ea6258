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
use std::time::Instant;

use crate::device::{QueueError, QueueStats, RxQueue};
use crate::devices::intel::irq::{ivar_entry, IrqRegs, QueueIrq};
use crate::devices::intel::queue::{ring_regs, RingRegs};
use crate::devices::intel::rx::ChipRx;
use crate::devices::intel::rxq::{rx_regs, IntelRx, RxRegs};
use crate::devices::intel::IntelTx;
use crate::error::{Error, Result};
use crate::platform::bus::Bus;
use crate::platform::dma::{DmaMapper, Packet, Pool};
use crate::platform::irq::Interrupt;
use crate::platform::mmio::{wait_for, Mmio};
use crate::platform::regs::ixgbe::{self as r};
use crate::platform::regs::Reg;

use super::IxgbeConfig;

/// The 82599's interrupt registers (`regs/ixgbe.toml`; Linux `ixgbe_setup_gpie`: GPIE =
/// MSIX_MODE | PBA_SUPPORT | OCD | EIAME and EIAM_EX(0..1) all ones, "use EIAM to auto-mask
/// when MSI-X interrupt is asserted"; this driver keeps all but OCD, no "other" cause having a
/// vector, and sets EIAM_EX(0) for its queue vectors). Vectors 0-15: the EICR queue bits
/// (16-63 would need EIMS_EX).
pub(crate) static IRQ: IrqRegs = IrqRegs {
    eicr: r::EICR,
    eics: r::EICS,
    eims: r::EIMS,
    eimc: r::EIMC,
    eiac: r::EIAC,
    eiam: r::EIAM_EX.at(0),
    gpie: (
        r::GPIE,
        r::gpie::MSIX_MODE.bit() | r::gpie::PBA_SUPPORT.bit() | r::gpie::EIAME.bit(),
    ),
    eitr: r::EITR,
    // ITR_INTERVAL counts 2 us (Linux `ixgbe_write_eitr` writes usecs << 2 masked to 11:3);
    // an odd interval rounds up.
    eitr_value: |us| r::eitr::ITR_INTERVAL.val(u32::from(us).div_ceil(2)),
    max_vectors: 16,
    ivar_rx,
    flush: r::STATUS,
};

/// IVAR for receive queue `queue` on `vector`: IVAR[queue >> 1], byte 0 for even queues and
/// byte 2 for odd ones (Linux `ixgbe_set_ivar` for the 82599: index 16 * (queue & 1)).
fn ivar_rx(queue: u32, vector: u32) -> (Reg, u32, u32) {
    use r::ivar::*;
    let (vec, valid) = if queue & 1 == 0 {
        (RX_EVEN_VEC, RX_EVEN_VALID)
    } else {
        (RX_ODD_VEC, RX_ODD_VALID)
    };
    ivar_entry(r::IVAR.at(queue >> 1), vec, valid, vector)
}

/// TXDCTL thresholds: prefetch 36 and host 8 as ixy; write-back threshold 0 because the ring
/// asks for write-backs with RS only every few descriptors (DPDK refuses WTHRESH > 0 with an
/// RS threshold above 1: the device would then write back in batches that ignore RS).
const TX_PTHRESH: u32 = 36;
const TX_HTHRESH: u32 = 8;
const TX_WTHRESH: u32 = 0;

/// The 82599's receive queue registers. Write-back error bits (notes 3.2): RXE b29, L4E/TCPE
/// b30, IPE b31; VP means only "a tag matching VET was seen"; UDP's L4E is not to be believed.
pub(crate) static RX: RxRegs = rx_regs!(
    r,
    ChipRx::errors(29, 31, 30).udp_l4_error_unreliable(),
    rxdctl
);

/// RXDCTL for the 82599: the reset's thresholds kept, VME as the queue strips, ENABLE clear.
fn rxdctl(old: u32, strip: bool) -> u32 {
    let vme = r::rxdctl::VME.bit();
    old & !vme | if strip { vme } else { 0 }
}

/// The 82599's transmit ring registers.
pub(crate) static TX_RING: RingRegs = ring_regs!(r, tx);

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

/// A receive queue of an 82599 port: the shared receive queue ([`IntelRx`]) with its VLAN
/// strip switch.
pub struct IxgbeRx<B: Bus> {
    q: IntelRx<B>,
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
        let mut q: IntelRx<B> = IntelRx::setup(&RX, regs, name, queue, cfg, mapper)?;
        q.ring.set_hw_strip(strip.applied());
        q.write_ctl();
        Ok(IxgbeRx {
            q,
            strip,
            stopping: None,
            held: Vec::new(),
        })
    }

    /// Notes 1.4 step 8: enable, wait for ENABLE to read back, then hand the buffers over
    /// (RDT = size - 1; the tail is written last).
    pub(crate) fn start(&mut self) -> Result<()> {
        self.q.enable()?;
        self.q.start();
        Ok(())
    }

    /// The queue's number on its port.
    pub fn index(&self) -> u32 {
        self.q.index()
    }

    /// The shared receive queue inside (the shell's fault handling reaches its ring).
    pub(crate) fn intel(&mut self) -> &mut IntelRx<B> {
        &mut self.q
    }

    /// Stops the queue and starts it again on the same ring, its strip setting kept
    /// ([`IntelRx::restart`]).
    pub fn restart(&mut self) -> Result<()> {
        self.q.restart()
    }

    /// Whether the device strips VLAN tags on this queue now (RXDCTL.VME as the ring uses it).
    pub fn vlan_strip(&self) -> bool {
        self.q.ring.hw_strip()
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
        if self.stopping.is_none() && on == self.q.ring.hw_strip() {
            return Ok(());
        }
        let m = &*self.q.regs;
        let reg = r::RXDCTL.at(self.q.queue);
        let en = r::rxdctl::ENABLE.bit();
        m.modify(reg, en, 0);
        self.stopping.get_or_insert_with(Instant::now);
        wait_for(m, &self.q.name, reg, "RXDCTL.ENABLE", en, 0, self.q.timeout)?;
        let size = self.q.ring.size();
        while self.q.ring.done_pending() {
            if !self.q.ring.can_refill() {
                // Finished frames but no buffers to re-arm their slots with: keep the old
                // setting rather than report them wrongly.
                let old = self.q.ring.hw_strip();
                self.strip.request(old);
                self.restart_with_strip(old)?;
                return Err(Error::InvalidConfig(format!(
                    "{} rx queue {}: the pool has no free buffer to harvest the ring before switching VLAN stripping; free some packets and retry",
                    self.q.name, self.q.queue
                )));
            }
            self.q.ring.rx_burst(out, size)?;
        }
        self.restart_with_strip(on)
    }

    /// Step 3 of the procedure: the queue is stopped and drained; program VME and the head,
    /// enable, poll, then flip the ring's flag and give the slots back.
    fn restart_with_strip(&mut self, on: bool) -> Result<()> {
        let m = &*self.q.regs;
        let reg = r::RXDCTL.at(self.q.queue);
        let vme = r::rxdctl::VME.bit();
        let en = r::rxdctl::ENABLE.bit();
        let v = m.read(reg) & !(vme | en);
        m.write(reg, v | if on { vme } else { 0 });
        m.write(r::RDH.at(self.q.queue), self.q.ring.restart_slot() as u32);
        m.write(reg, v | if on { vme } else { 0 } | en);
        self.stopping = None;
        wait_for(
            m,
            &self.q.name,
            reg,
            "RXDCTL.ENABLE",
            en,
            en,
            self.q.timeout,
        )?;
        self.q.ring.set_hw_strip(on);
        self.strip.applied.store(on, Ordering::Release);
        self.q.ring.rearm_all();
        tracing::debug!(port = %self.q.name, queue = self.q.queue, strip = on, "VLAN strip switched");
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
                || self.stopping.is_none() && self.strip.wanted() == self.q.ring.hw_strip()
            {
                return Ok(n);
            }
        }
        let m = &*self.q.regs;
        let reg = r::RXDCTL.at(self.q.queue);
        let en = r::rxdctl::ENABLE.bit();
        let since = match self.stopping {
            Some(t) => t,
            None => {
                m.modify(reg, en, 0);
                *self.stopping.insert(Instant::now())
            }
        };
        let room = max - (batch.len() - before);
        self.q.ring.rx_burst(batch, room)?;
        let v = m.read(reg);
        if v == u32::MAX {
            return Err(QueueError::DeviceGone);
        }
        if v & en != 0 {
            if since.elapsed() > self.q.timeout {
                // The queue would not stop: give up the switch and keep the old setting.
                tracing::error!(
                    port = %self.q.name, queue = self.q.queue,
                    timeout_ms = self.q.timeout.as_millis() as u64,
                    "RXDCTL.ENABLE did not clear; VLAN strip switch abandoned"
                );
                m.write(reg, v | en);
                self.stopping = None;
                self.strip.request(self.q.ring.hw_strip());
            }
            return Ok(batch.len() - before);
        }
        if !self.q.ring.done_pending() {
            let on = self.strip.wanted();
            if let Err(e) = self.restart_with_strip(on) {
                tracing::error!(port = %self.q.name, queue = self.q.queue, error = %e, "restarting the queue after a VLAN strip switch failed");
                return Err(QueueError::DeviceGone);
            }
        }
        Ok(batch.len() - before)
    }
}

impl<B: Bus> RxQueue for IxgbeRx<B> {
    #[inline]
    fn rx_burst(&mut self, batch: &mut Vec<Packet>, max: usize) -> Result<usize, QueueError> {
        if self.strip.wanted() != self.q.ring.hw_strip()
            || self.stopping.is_some()
            || !self.held.is_empty()
        {
            return self.slow_burst(batch, max);
        }
        self.q.rx_burst(batch, max)
    }

    fn stats(&self) -> QueueStats {
        self.q.ring.stats()
    }

    fn pool(&self) -> &Pool {
        self.q.ring.pool()
    }

    fn interrupt(&self) -> Option<&Interrupt> {
        self.q.interrupt()
    }

    /// Frames a strip switch is holding, or a switch in progress, count as waiting.
    fn arm_interrupt(&mut self) -> Result<bool> {
        let pending = self.q.arm_interrupt()?;
        Ok(pending || !self.held.is_empty() || self.stopping.is_some())
    }

    fn disarm_interrupt(&mut self) {
        self.q.disarm_interrupt();
    }
}

impl<B: Bus> IxgbeRx<B> {
    /// For init: the queue's interrupt vector (interrupt mode).
    pub(crate) fn set_irq(&mut self, irq: QueueIrq) {
        self.q.irq = Some(irq);
    }

    /// Sets the queue's interrupt cause by hand (EICS): the self-test's interrupt check.
    pub fn trigger_interrupt(&self) -> Result<()> {
        self.q.trigger_interrupt()
    }
}

/// A transmit queue of an 82599 port: the transmit queue shared with the 82576 driver
/// ([`IntelTx`]; notes 1.4 steps 7 and 8, datasheet 4.6.8 and 4.6.8.1).
pub type IxgbeTx<B> = IntelTx<B>;
