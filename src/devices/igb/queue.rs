//! The 82576's receive and transmit queues: its ring registers, write-back bits and thresholds.
//!
//! Both queue types are the ones shared with the 82599 driver ([`IntelRx`], [`IntelTx`]): a
//! queue owns its ring (descriptors and buffers), so it is the queue's `Drop` that stops the
//! hardware queue (ENABLE off, bounded poll; [`crate::devices::intel::queue`]) before the memory
//! goes.
//!
//! Unlike the 82599's, these queues have no VLAN strip switch of their own: the 82576 strips
//! port-wide (CTRL.VME), and its VP bit is set only on frames it actually stripped, so each
//! descriptor says by itself whether its tag was removed (`ChipRx::vp_means_stripped`). A strip
//! change therefore needs no stop-and-drain of the queues: frames written back before the
//! change report "not stripped", those after it "stripped", each one truthfully.

use std::sync::Arc;

use crate::devices::intel::irq::{ivar_entry, IrqRegs};
use crate::devices::intel::queue::{ring_regs, RingRegs};
use crate::devices::intel::rx::ChipRx;
use crate::devices::intel::rxq::{rx_regs, IntelRx, RxRegs};
use crate::devices::intel::IntelTx;
use crate::error::Result;
use crate::platform::bus::Bus;
use crate::platform::dma::DmaMapper;
use crate::platform::regs::igb::{self as r};
use crate::platform::regs::Reg;

use super::IgbConfig;

/// RXDCTL thresholds (Linux igb: prefetch 8, host 8), write-back threshold 1 so every
/// descriptor is written back at once: the driver polls, there is no interrupt to flush a batch.
const RX_PTHRESH: u32 = 8;
const RX_HTHRESH: u32 = 8;
const RX_WTHRESH: u32 = 1;
/// TXDCTL thresholds (Linux igb for the 82576: prefetch 8, host 1, write-back 1).
const TX_PTHRESH: u32 = 8;
const TX_HTHRESH: u32 = 1;
const TX_WTHRESH: u32 = 1;

/// The 82576's receive queue registers. Write-back error bits (notes 3.2): RXE b31, IPE b30,
/// L4E/TCPE b29; VP set only when the tag was stripped (notes 4.1, 5.5).
pub(crate) static RX: RxRegs = rx_regs!(r, ChipRx::errors(31, 30, 29).vp_means_stripped(), rxdctl);

/// RXDCTL for the 82576: its thresholds, ENABLE clear (the 82576 strips port-wide, in CTRL).
fn rxdctl(_old: u32, _strip: bool) -> u32 {
    use r::rxdctl::*;
    PTHRESH.val(RX_PTHRESH) | HTHRESH.val(RX_HTHRESH) | WTHRESH.val(RX_WTHRESH)
}

/// The 82576's transmit ring registers.
pub(crate) static TX_RING: RingRegs = ring_regs!(r, tx);

/// The 82576's interrupt registers (notes 1.1; `regs/igb.toml`; Linux `igb_configure_msix` for
/// the 82576: GPIE = MSIX_MODE | PBA | EIAME | NSICR, and `igb_irq_enable`: EIAM gets the
/// queue vectors, so a vector is masked when its message goes out).
pub(crate) static IRQ: IrqRegs = IrqRegs {
    eicr: r::EICR,
    eics: r::EICS,
    eims: r::EIMS,
    eimc: r::EIMC,
    eiac: r::EIAC,
    eiam: r::EIAM,
    gpie: (
        r::GPIE,
        r::gpie::MSIX_MODE.bit() | r::gpie::PBA.bit() | r::gpie::EIAME.bit() | r::gpie::NSICR.bit(),
    ),
    eitr: r::EITR,
    eitr_value: |us| r::eitr::INTERVAL.val(us.into()),
    // EICR's MSI-X field, bits 24:0 (QEMU: IGB_MSIX_VEC_NUM, 10 on the PF).
    max_vectors: 10,
    ivar_rx,
    flush: r::STATUS,
};

/// IVAR for receive queue `queue` on `vector`: IVAR[queue & 7], byte 0 for queues 0-7, byte 2
/// for 8-15 (Linux `igb_assign_vector`, 82576 case; QEMU `igb_ivar_entry_rx`).
fn ivar_rx(queue: u32, vector: u32) -> (Reg, u32, u32) {
    use r::ivar::*;
    let (vec, valid) = if queue < 8 {
        (RX_LO_VEC, RX_LO_VALID)
    } else {
        (RX_HI_VEC, RX_HI_VALID)
    };
    ivar_entry(r::IVAR.at(queue & 7), vec, valid, vector)
}

/// A receive queue of an 82576 port: the receive queue shared with the 82599 driver.
pub type IgbRx<B> = IntelRx<B>;

/// A transmit queue of an 82576 port: the transmit queue shared with the 82599 driver.
pub type IgbTx<B> = IntelTx<B>;

/// TXDCTL for the 82576: thresholds, ENABLE clear.
pub(crate) fn txdctl(_old: u32) -> u32 {
    use r::txdctl::*;
    PTHRESH.val(TX_PTHRESH) | HTHRESH.val(TX_HTHRESH) | WTHRESH.val(TX_WTHRESH)
}

/// Allocates receive queue `queue` and programs it, disabled (notes 1.2 step 7, 2.x): the
/// shared setup, then the 82576's RXDCTL thresholds.
pub(crate) fn setup_rx<B: Bus>(
    regs: Arc<B::Mmio>,
    name: Arc<str>,
    queue: u32,
    cfg: &IgbConfig,
    mapper: Arc<dyn DmaMapper>,
) -> Result<IgbRx<B>> {
    let q: IgbRx<B> = IntelRx::setup(&RX, regs, name, queue, cfg, mapper)?;
    q.write_ctl();
    Ok(q)
}
