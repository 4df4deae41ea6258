//! Bringing an 82599 up, in the datasheet's order (section 4.6.3 "Initialization sequence", as
//! summarised step by step in `docs/intel-nics.md` 1.4, which follows ixy's `reset_and_init`).
//!
//! Why this order: the reset wipes everything, so interrupts are masked before and after it; the
//! EEPROM auto-read (EEC.ARD) and the receive DMA init (RDRXCTL.DMAIDONE) must finish before any
//! receive register is touched; every ring is programmed while receive and the queue are off;
//! a queue's tail is written only after its enable bit reads back, because the device samples
//! the descriptors between head and tail as soon as it sees the tail move.
//!
//! Every poll goes through [`wait_for`], so a device that never answers gives an error naming
//! the register instead of a hang.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::platform::bus::Bus;
use crate::platform::mmio::{wait_for, Mmio};
use crate::platform::regs::ixgbe::{self as r};

use crate::devices::intel::rss;

use super::queue::{txdctl, IxgbeRx};
use super::{swfw, IxgbeConfig, IxgbePort};

/// Receive packet buffer 0 gets all 512 KB with one traffic class and no Flow Director
/// (Linux/DPDK `ixgbe_set_rxpba_generic`, PBA_STRATEGY_EQUAL: IXGBE_RXPBSIZE_MAX 0x80000).
/// ixy's 128 KB is the 82598's layout and left three quarters of the buffer unused.
const RXPB_SIZE: u32 = 0x8_0000;
/// Transmit packet buffer 0 gets 160 KB (IXGBE_TXPBSIZE_MAX 0x28000, same function); ixy's
/// 40 KB is the 82598's.
const TXPB_SIZE: u32 = 0x2_8000;
/// Its threshold in KB: size / 1024 - IXGBE_TXPKT_SIZE_MAX (10), as `ixgbe_set_rxpba_generic`
/// computes it; a threshold above the buffer would hold transmit DMA.
const TXPB_THRESH: u32 = TXPB_SIZE / 1024 - 10;
/// How long the receive security block may take to stop before RXCTRL is written (Linux's
/// `ixgbe_disable_rx_buff_generic`: 40 polls of 1 ms; DPDK: 4000 of 10 us).
const SECRX_TIMEOUT: Duration = Duration::from_millis(40);
/// Settling time after the reset bits clear (datasheet 4.6.3.2: at least 10 ms).
pub(super) const RESET_SETTLE: Duration = Duration::from_millis(10);
/// Interrupt mask clear: bits 30:0 (bit 31 is reserved in EIMC), as ixy writes it.
const EIMC_ALL: u32 = 0x7FFF_FFFF;

/// Notes 1.4 steps 1 to 3: interrupts masked; the global reset (datasheet 4.6.3.2: RST|LNK_RST,
/// wait until both clear, settle); masked and cleared again as the datasheet says; then the
/// EEPROM auto-read and the receive DMA init done. Shared by the bring-up and the restore after
/// an error.
pub(super) fn reset_chip<M: Mmio + ?Sized>(m: &M, name: &str, t: Duration) -> Result<()> {
    m.write(r::EIMC, EIMC_ALL);
    m.read(r::EICR);
    let rst = r::ctrl::RST.bit() | r::ctrl::LNK_RST.bit();
    m.modify(r::CTRL, 0, rst);
    wait_for(m, name, r::CTRL, "CTRL.RST|LNK_RST", rst, 0, t)?;
    std::thread::sleep(RESET_SETTLE);
    m.write(r::EIMC, EIMC_ALL);
    m.read(r::EICR);
    let ard = r::eec::ARD.bit();
    wait_for(m, name, r::EEC, "EEC.ARD", ard, ard, t)?;
    let dmaidone = r::rdrxctl::DMAIDONE.bit();
    wait_for(
        m,
        name,
        r::RDRXCTL,
        "RDRXCTL.DMAIDONE",
        dmaidone,
        dmaidone,
        t,
    )?;
    Ok(())
}

impl<B: Bus> IxgbePort<B> {
    /// The whole bring-up. Called once by `open`, on a port whose `Drop` already cleans up.
    pub(super) fn init(&mut self) -> Result<()> {
        let regs = self.regs.clone();
        let m = &*regs;
        let name = self.name.clone();
        let t = self.cfg.reg_timeout;

        // Notes 1.4 steps 1 to 3: bus master on (done by the shell, `IntelPort::open`), mask,
        // reset, mask, EEPROM and receive DMA ready.
        reset_chip(m, &name, t)?;

        // The MAC address the EEPROM loaded into receive address 0.
        self.mac =
            crate::devices::intel::read_mac(m, &name, r::RAL.at(0), r::RAH.at(0), r::rah::AV.bit());

        // Step 4 (datasheet 4.6.4 "Link setup"), or step 11 for MAC loopback.
        let (_, device) = self.bus.pci_id();
        setup_link(m, &name, self.cfg.loopback, sfp_part(device))?;

        // Step 5: clear the read-to-clear statistics; totals start at zero.
        self.clear_stats();

        // Step 6 (datasheet 4.6.7 "Receive initialization"): global part with receive off.
        rx_global(m, &self.cfg, self.cfg.promiscuous);
        // VLAN: the filter table is not cleared by reset (notes 1.4 step 10), so clear it and
        // write the shadow back; then TPID and filter enable.
        self.restore_vlan();
        self.rx = (0..self.cfg.rx_queues)
            .map(|q| {
                IxgbeRx::setup(
                    regs.clone(),
                    name.clone(),
                    q.into(),
                    &self.cfg,
                    self.bus.dma_mapper(),
                    self.strip[usize::from(q)].clone(),
                )
            })
            .collect::<Result<_>>()?;
        rx_dma(m, self.cfg.rx_queues);
        if self.cfg.rx_queues > 1 {
            rss::setup(m, &RSS, self.cfg.rx_queues);
        }
        // Interrupt mode (when opened with it): a vector per receive queue, masked while polled.
        self.setup_interrupts(IxgbeRx::set_irq)?;

        // Step 7 (datasheet 4.6.8 "Transmit initialization").
        tx_global(m);
        self.setup_tx(txdctl)?;
        m.modify(r::DMATXCTL, 0, r::dmatxctl::TE.bit());

        // Step 8: enable each queue, wait for the enable bit, and only then write the tail.
        for q in &mut self.rx {
            q.start()?;
        }
        for q in &mut self.tx {
            q.start()?;
        }
        // The receive unit last, after every queue is set up (Linux's ixgbe_configure_rx and
        // DPDK's ixgbe_dev_rxtx_start), through the erratum workaround.
        set_rx_enable(m, &name, true)?;
        // The port is ours: firmware (manageability) is told so until `shutdown` (Linux's
        // ixgbe_get_hw_control / ixgbe_release_hw_control).
        m.modify(r::CTRL_EXT, 0, r::ctrl_ext::DRV_LOAD.bit());

        // Step 9: wait for the link. Down after the timeout is not an error.
        self.wait_link()
    }
}

/// No snoop off (DMA stays cache coherent), then the DCA bit ixy and the datasheet clear, for
/// each of `queues` receive queues.
pub(super) fn rx_dma<M: Mmio + ?Sized>(m: &M, queues: u16) {
    m.modify(r::CTRL_EXT, 0, r::ctrl_ext::NS_DIS.bit());
    for q in 0..u32::from(queues) {
        m.modify(r::DCA_RXCTRL.at(q), r::dca_rxctrl::RSVD12.bit(), 0);
    }
}

/// Notes 1.4 steps 6 and 10: everything global about receive, with RXCTRL.RXEN off, except
/// the VLAN registers (the caller writes its shadow back). `promiscuous`: the configuration's,
/// or as the port set it since.
pub(super) fn rx_global<M: Mmio + ?Sized>(m: &M, cfg: &IxgbeConfig, promiscuous: bool) {
    m.modify(r::RXCTRL, r::rxctrl::RXEN.bit(), 0);
    // Packet buffers: all of it to traffic class 0 (no DCB).
    m.write(r::RXPBSIZE.at(0), RXPB_SIZE);
    for i in 1..r::RXPBSIZE.count() {
        m.write(r::RXPBSIZE.at(i), 0);
    }
    // Per-queue statistics: queue q (< 16) counts into QPRC/QBRC/QPRDC index q (reset maps
    // every queue to index 0, which would sum all queues' drops in QPRDC0).
    for i in 0..4u32 {
        let q = 4 * i;
        m.write(
            r::RQSMR.at(i),
            r::rqsmr::Q_MAP0.val(q)
                | r::rqsmr::Q_MAP1.val(q + 1)
                | r::rqsmr::Q_MAP2.val(q + 2)
                | r::rqsmr::Q_MAP3.val(q + 3),
        );
    }
    // CRC strip must be set in both places (datasheet 8.2.3.8.8: RDRXCTL.CRCSTRIP must
    // match HLREG0.RXCRCSTRP), jumbo and loopback live in HLREG0 too.
    let mut set = r::hlreg0::RXCRCSTRP.bit();
    let mut clear = r::hlreg0::JUMBOEN.bit() | r::hlreg0::LPBK.bit();
    if cfg.mtu > 1500 {
        set |= r::hlreg0::JUMBOEN.bit();
        clear &= !r::hlreg0::JUMBOEN.bit();
    }
    if cfg.loopback {
        set |= r::hlreg0::LPBK.bit();
        clear &= !r::hlreg0::LPBK.bit();
    }
    m.modify(r::HLREG0, clear, set);
    // RDRXCTL as Linux's ixgbe_setup_rdrxctl leaves it on the 82599: CRC strip, RSC first
    // size 0, and RSCACKC and FCOE_WRFIX, which Linux sets "by default" although RSC and
    // FCoE are off (DPDK sets RSCACKC only with LRO and never FCOE_WRFIX; we follow Linux).
    m.modify(
        r::RDRXCTL,
        r::rdrxctl::RSCFRSTSIZE.mask(),
        r::rdrxctl::CRCSTRIP.bit() | r::rdrxctl::RSCACKC.bit() | r::rdrxctl::FCOE_WRFIX.bit(),
    );
    if cfg.mtu > 1500 {
        // MFS counts header and CRC but not VLAN tags (Linux: mtu + ETH_HLEN + ETH_FCS_LEN).
        let mfs = u32::from(cfg.mtu) + 14 + 4;
        m.modify(r::MAXFRS, r::maxfrs::MFS.mask(), r::maxfrs::MFS.val(mfs));
    }
    // Filters: broadcast always, unicast/multicast promiscuous on request.
    let mut fctrl = r::fctrl::BAM.bit();
    if promiscuous {
        fctrl |= r::fctrl::UPE.bit() | r::fctrl::MPE.bit();
    }
    m.modify(r::FCTRL, r::fctrl::UPE.bit() | r::fctrl::MPE.bit(), fctrl);
}

/// Notes 1.4 step 7: everything global about transmit.
pub(super) fn tx_global<M: Mmio + ?Sized>(m: &M) {
    m.modify(
        r::HLREG0,
        0,
        r::hlreg0::TXCRCEN.bit() | r::hlreg0::TXPADEN.bit(),
    );
    m.write(r::TXPBSIZE.at(0), TXPB_SIZE);
    m.write(r::TXPBTHRESH.at(0), r::txpbthresh::THRESH.val(TXPB_THRESH));
    for i in 1..r::TXPBSIZE.count() {
        m.write(r::TXPBSIZE.at(i), 0);
        m.write(r::TXPBTHRESH.at(i), 0);
    }
    // Without DCB: no per-request limit, and the DCB arbiter must run (ARBDIS = 0).
    m.write(r::DTXMXSZRQ, 0xFFFF);
    m.modify(r::RTTDCS, r::rttdcs::ARBDIS.bit(), 0);
}

/// Sets RXCTRL.RXEN to `on` the way Linux's and DPDK's `ixgbe_enable_rx_dma_82599` do (82599
/// erratum: changing it while the receive security block is busy can hang the receive DMA):
/// stop the security block (SECRXCTRL.RX_DIS), wait for SECRXSTAT.SECRX_RDY, write RXCTRL,
/// start the block again. Like Linux and DPDK, a block that does not report ready within
/// [`SECRX_TIMEOUT`] is logged and RXCTRL written anyway; only a removed device is an error.
pub(super) fn set_rx_enable<M: Mmio + ?Sized>(m: &M, name: &str, on: bool) -> Result<()> {
    let dis = r::secrxctrl::RX_DIS.bit();
    m.modify(r::SECRXCTRL, 0, dis);
    let rdy = r::secrxstat::SECRX_RDY.bit();
    let ready = wait_for(
        m,
        name,
        r::SECRXSTAT,
        "SECRXSTAT.SECRX_RDY",
        rdy,
        rdy,
        SECRX_TIMEOUT,
    );
    match ready {
        Ok(_) => {}
        Err(Error::RegisterTimeout { .. }) => tracing::warn!(
            port = %name,
            on,
            "the receive security block did not report ready (SECRXSTAT.SECRX_RDY) within 40 ms; writing RXCTRL.RXEN anyway, as Linux does"
        ),
        Err(e) => return Err(e),
    }
    let rxen = r::rxctrl::RXEN.bit();
    if on {
        m.modify(r::RXCTRL, 0, rxen);
    } else {
        m.modify(r::RXCTRL, rxen, 0);
    }
    m.modify(r::SECRXCTRL, dis, 0);
    Ok(())
}

/// Whether an 82599 of PCI device id `device` has SFP+/QSFP+ cages (SFI), the parts whose link
/// the driver sets to 10G serial. Every other part (KX4, KR, backplane, CX4, XAUI, BaseT LOM)
/// keeps the link mode its NVM loaded into AUTOC, as Linux does (`ixgbe_setup_mac_link_82599`
/// starts from `orig_autoc`; only multispeed fiber is set by the driver). Ids from
/// Linux/DPDK ixgbe_type.h (IXGBE_DEV_ID_82599_SFP*, _82599EN_SFP, _82599_QSFP_SF_QP).
pub(crate) fn sfp_part(device: u16) -> bool {
    matches!(
        device,
        0x10fb | 0x1529 | 0x1507 | 0x154d | 0x154a | 0x1557 | 0x1558
    )
}

/// Link mode (notes 1.4 step 4; datasheet 4.6.4). SFP+ parts: 10G serial, XAUI PMA/PMD, restart
/// AN (ixy's setting, for the 82599ES). Other parts: the NVM's link mode, AN restarted. In MAC
/// loopback (step 11, DPDK's setup_loopback_link_82599): 10G without AN, force link up, and the
/// AN restart resets the pipeline. AUTOC is written while holding the software/firmware
/// semaphore of the MAC CSRs, because manageability firmware may write it too (Linux/DPDK
/// `prot_autoc_write_82599`).
pub(super) fn setup_link<M: Mmio + ?Sized>(
    m: &M,
    name: &str,
    loopback: bool,
    sfp: bool,
) -> Result<()> {
    let a = r::autoc::LMS.mask() | r::autoc::_10G_PMA_PMD.mask() | r::autoc::FLU.bit();
    let v = if loopback {
        r::autoc::LMS.val(1) | r::autoc::FLU.bit()
    } else {
        r::autoc::LMS.val(3) | r::autoc::_10G_PMA_PMD.val(0)
    };
    let _csr = swfw::MacCsr::acquire(m, name)?;
    if loopback || sfp {
        m.modify(r::AUTOC, a, v);
    }
    m.modify(r::AUTOC, 0, r::autoc::AN_RESTART.bit());
    Ok(())
}

/// The RSS registers (datasheet 7.1.2.8): MRQE 1 is "RSS only" on the 82599.
pub(super) const RSS: rss::RssRegs = rss::rss_regs!(r, mrqe = 1);

/// The 82599's part of the shutdown, after every queue stopped (datasheet 4.6.7.1 / 4.6.8.1)
/// and before the global reset (4.6.3.2): receive off through the same erratum workaround as
/// on, the port handed back to firmware (DRV_LOAD clear), interrupts masked.
pub(super) fn stop<M: Mmio + ?Sized>(m: &M, name: &str) {
    if let Err(e) = set_rx_enable(m, name, false) {
        tracing::warn!(port = %name, error = %e, "could not stop receive through the security block");
    }
    m.modify(r::CTRL_EXT, r::ctrl_ext::DRV_LOAD.bit(), 0);
    m.write(r::EIMC, EIMC_ALL);
}
