//! The 82576's receive and transmit queues: ring registers, enable, and disable in `Drop`.
//!
//! A queue owns its ring (descriptors and buffers), so it is the queue's `Drop` that stops the
//! hardware queue (ENABLE off, bounded poll; [`crate::devices::intel::queue`]) before the memory goes.
//! The transmit queue is the type shared with the 82599 driver ([`IntelTx`]).
//!
//! Unlike the 82599's, these queues have no VLAN strip switch of their own: the 82576 strips
//! port-wide (CTRL.VME), and its VP bit is set only on frames it actually stripped, so each
//! descriptor says by itself whether its tag was removed (`ChipRx::vp_means_stripped`). A strip
//! change therefore needs no stop-and-drain of the queues: frames written back before the
//! change report "not stripped", those after it "stripped", each one truthfully.

use std::sync::Arc;
use std::time::Duration;

use crate::device::{QueueError, QueueStats, RxQueue};
use crate::devices::intel::queue::RingRegs;
use crate::devices::intel::rx::{ChipRx, RxRing};
use crate::devices::intel::IntelTx;
use crate::error::Result;
use crate::platform::bus::Bus;
use crate::platform::dma::{DmaMapper, Packet, Pool};
use crate::platform::mmio::Mmio;
use crate::platform::regs::igb::{self as r};

use super::IgbConfig;

/// 82576 receive write-back error bits (notes 3.2): RXE b31, IPE b30, L4E/TCPE b29; VP set
/// only when the tag was stripped (notes 4.1, 5.5).
pub(crate) const CHIP_RX: ChipRx = ChipRx {
    frame_error: 1 << 31,
    ip_error: 1 << 30,
    l4_error: 1 << 29,
    vp_means_stripped: true,
    udp_l4_error_unreliable: false,
};

/// RXDCTL thresholds (Linux igb: prefetch 8, host 8), write-back threshold 1 so every
/// descriptor is written back at once: the driver polls, there is no interrupt to flush a batch.
const RX_PTHRESH: u32 = 8;
const RX_HTHRESH: u32 = 8;
const RX_WTHRESH: u32 = 1;
/// TXDCTL thresholds (Linux igb for the 82576: prefetch 8, host 1, write-back 1).
const TX_PTHRESH: u32 = 8;
const TX_HTHRESH: u32 = 1;
const TX_WTHRESH: u32 = 1;

/// The 82576's receive ring registers.
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

/// The 82576's transmit ring registers.
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

/// A transmit queue of an 82576 port: the transmit queue shared with the 82599 driver.
pub type IgbTx<B> = IntelTx<B>;

/// TXDCTL for the 82576: thresholds, ENABLE clear.
pub(crate) fn txdctl(_old: u32) -> u32 {
    use r::txdctl::*;
    PTHRESH.val(TX_PTHRESH) | HTHRESH.val(TX_HTHRESH) | WTHRESH.val(TX_WTHRESH)
}

/// A receive queue of an 82576 port.
pub struct IgbRx<B: Bus> {
    ring: RxRing<B::Mmio>,
    regs: Arc<B::Mmio>,
    name: Arc<str>,
    queue: u32,
    timeout: Duration,
}

impl<B: Bus> IgbRx<B> {
    /// Allocates the ring and programs the queue's registers with the queue disabled
    /// (notes 1.2 step 7, 2.x: SRRCTL one-buffer advanced, base, length, head = tail = 0).
    pub(crate) fn setup(
        regs: Arc<B::Mmio>,
        name: Arc<str>,
        queue: u32,
        cfg: &IgbConfig,
        mapper: Arc<dyn DmaMapper>,
    ) -> Result<Self> {
        let pool = Pool::new(cfg.pool, mapper)?;
        let ring = RxRing::new(
            regs.clone(),
            r::RDT.at(queue).offset(),
            r::RDH.at(queue).offset(),
            cfg.rx_ring,
            pool,
            CHIP_RX,
        )?;
        let q = IgbRx {
            ring,
            regs,
            name,
            queue,
            timeout: cfg.reg_timeout,
        };
        let m: &B::Mmio = &q.regs;
        RX_RING.ctl(queue).clear(m);
        // One buffer per frame, advanced descriptors (QEMU has no legacy receive), buffer size
        // in KB rounded down; drop when the ring is empty rather than stall the packet buffer.
        let srrctl = r::srrctl::DESCTYPE.val(1)
            | r::srrctl::BSIZEPKT.val(cfg.rx_buffer_kb()?)
            | r::srrctl::DROP_EN.bit();
        m.write(r::SRRCTL.at(queue), srrctl);
        RX_RING.program(m, queue, q.ring.desc_iova(), q.ring.desc_len());
        use r::rxdctl::*;
        m.write(
            r::RXDCTL.at(queue),
            PTHRESH.val(RX_PTHRESH) | HTHRESH.val(RX_HTHRESH) | WTHRESH.val(RX_WTHRESH),
        );
        Ok(q)
    }

    /// Sets RXDCTL.ENABLE and waits for it to read back.
    pub(crate) fn enable(&mut self) -> Result<()> {
        RX_RING
            .ctl(self.queue)
            .enable(&*self.regs, &self.name, self.timeout)
    }

    /// Hands the buffers over (RDT = size - 1): the last step, after RCTL.EN.
    pub(crate) fn start(&mut self) {
        self.ring.start();
    }

    /// The queue's number on its port.
    pub fn index(&self) -> u32 {
        self.queue
    }
}

impl<B: Bus> RxQueue for IgbRx<B> {
    #[inline]
    fn rx_burst(&mut self, batch: &mut Vec<Packet>, max: usize) -> Result<usize, QueueError> {
        self.ring.rx_burst(batch, max)
    }

    fn stats(&self) -> QueueStats {
        self.ring.stats()
    }

    fn pool(&self) -> &Pool {
        self.ring.pool()
    }
}

impl<B: Bus> Drop for IgbRx<B> {
    /// Clear ENABLE, poll until it reads 0, give in-flight writes time to land; only then may
    /// the ring and its buffers be freed (which happens right after).
    fn drop(&mut self) {
        RX_RING
            .ctl(self.queue)
            .stop_rx(&*self.regs, &self.name, self.queue, self.timeout);
    }
}
