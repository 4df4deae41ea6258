//! Host tests of the init sequence, register by register, against [`RecordingMmio`].
//!
//! The fake register file is plain storage; read hooks model what the tests need of the chip:
//! self-clearing reset bits, EEPROM auto-read done, DMA init done, link up.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::*;
use crate::device::Port;
use crate::device::RxQueue;
use crate::devices::intel::testkit::{self, find, pos, TestBus};
use crate::error::Error;
use crate::platform::dma::PoolConfig;
use crate::platform::mmio::{Access, RecordingMmio};
use crate::platform::regs::ixgbe as r;
use crate::platform::regs::Reg;

struct Fake {
    regs: Arc<RecordingMmio>,
    events: Arc<Mutex<Vec<&'static str>>>,
    dmaidone: Arc<AtomicBool>,
}

/// A fake 82599 whose reset completes, whose EEPROM and DMA are ready and whose link is up.
fn fake() -> (TestBus, Fake) {
    let regs = Arc::new(RecordingMmio::new(0x2_0000));
    let rst = r::ctrl::RST.bit() | r::ctrl::LNK_RST.bit();
    regs.on_read(r::CTRL.offset(), move |_, v| v & !rst);
    regs.on_read(r::EEC.offset(), |_, v| v | r::eec::ARD.bit());
    let dmaidone = Arc::new(AtomicBool::new(true));
    let d = dmaidone.clone();
    regs.on_read(r::RDRXCTL.offset(), move |_, v| {
        if d.load(Ordering::Relaxed) {
            v | r::rdrxctl::DMAIDONE.bit()
        } else {
            v
        }
    });
    regs.on_read(r::LINKS.offset(), |_, _| {
        r::links::UP.bit() | r::links::LINK_SPEED.val(3)
    });
    // The receive security block is always idle (the order of the handshake is checked on
    // the write log).
    regs.on_read(r::SECRXSTAT.offset(), |_, v| {
        v | r::secrxstat::SECRX_RDY.bit()
    });
    regs.preset(r::RAL.at(0).offset(), 0x1200_5452);
    regs.preset(r::RAH.at(0).offset(), r::rah::AV.bit() | 0x5634);
    let bus = TestBus::new(regs.clone(), (0x8086, 0x10fb));
    let events = bus.events.clone();
    (
        bus,
        Fake {
            regs,
            events,
            dmaidone,
        },
    )
}

fn small() -> IxgbeConfig {
    testkit::small()
}

#[test]
fn init_follows_the_datasheet_order() {
    let (bus, f) = fake();
    let port = IxgbePort::open(bus, small()).unwrap();
    assert_eq!(port.mac().to_string(), "52:54:00:12:34:56");
    let w = f.regs.writes();
    let all = u32::MAX;
    let rst = r::ctrl::RST.bit() | r::ctrl::LNK_RST.bit();

    // Interrupts masked before the reset, and again after it.
    let mask1 = pos(&w, r::EIMC, all, 0x7FFF_FFFF);
    let reset = pos(&w, r::CTRL, rst, rst);
    let mask2 = find(&w, reset, r::EIMC, all, 0x7FFF_FFFF).expect("EIMC after reset");
    assert!(mask1 < reset && reset < mask2);

    // EEC.ARD and RDRXCTL.DMAIDONE were polled after the reset and before any receive setup.
    let log = f.regs.log();
    let read_at = |reg: Reg| {
        log.iter()
            .position(|a| matches!(a, Access::Read { offset, .. } if *offset == reg.offset()))
            .unwrap()
    };
    let write_at = |reg: Reg| {
        log.iter()
            .position(|a| matches!(a, Access::Write { offset, .. } if *offset == reg.offset()))
            .unwrap()
    };
    assert!(read_at(r::EEC) < write_at(r::RXPBSIZE.at(0)));
    assert!(read_at(r::EEC) < read_at(r::RDRXCTL));

    // CRC strip in both registers.
    assert!(r::hlreg0::RXCRCSTRP.is_set(f.regs.peek(r::HLREG0.offset())));
    assert!(r::rdrxctl::CRCSTRIP.is_set(f.regs.peek(r::RDRXCTL.offset())));
    // Broadcast plus promiscuous.
    let fctrl = f.regs.peek(r::FCTRL.offset());
    assert!(
        r::fctrl::BAM.is_set(fctrl) && r::fctrl::UPE.is_set(fctrl) && r::fctrl::MPE.is_set(fctrl)
    );

    // Receive ring registers, the queue enable, RDT = N - 1; then, after every queue, RXEN
    // through the erratum workaround (Linux/DPDK ixgbe_enable_rx_dma_82599): SECRXCTRL.RX_DIS
    // set, SECRXSTAT.SECRX_RDY polled, RXEN, RX_DIS cleared.
    let rxen_off = pos(&w, r::RXCTRL, r::rxctrl::RXEN.bit(), 0);
    let srrctl = pos(&w, r::SRRCTL.at(0), all, 0x0200_0000 | 2 | 1 << 28);
    let rdlen = pos(&w, r::RDLEN.at(0), all, 64 * 16);
    let en = r::rxdctl::ENABLE.bit();
    let enable = pos(&w, r::RXDCTL.at(0), en, en);
    let rdt = pos(&w, r::RDT.at(0), all, 63);
    let dis = r::secrxctrl::RX_DIS.bit();
    let sec_off = pos(&w, r::SECRXCTRL, dis, dis);
    let rxen = pos(&w, r::RXCTRL, r::rxctrl::RXEN.bit(), r::rxctrl::RXEN.bit());
    let sec_on = find(&w, sec_off + 1, r::SECRXCTRL, dis, 0).expect("RX_DIS cleared again");
    assert!(rxen_off < srrctl && srrctl < rdlen && rdlen < enable && enable < rdt);
    assert!(rdt < sec_off && sec_off < rxen && rxen < sec_on);
    let ready_polled = log.iter().any(
        |a| matches!(a, Access::Read { offset, value } if *offset == r::SECRXSTAT.offset() && *value & 1 == 1),
    );
    assert!(ready_polled, "SECRXSTAT.SECRX_RDY was not polled");
    // Every transmit queue is enabled before receive too, and the driver owns the port.
    let ten = r::txdctl::ENABLE.bit();
    assert!(pos(&w, r::TXDCTL.at(0), ten, ten) < rxen);
    assert!(r::ctrl_ext::DRV_LOAD.is_set(f.regs.peek(r::CTRL_EXT.offset())));
    // RDRXCTL as Linux's ixgbe_setup_rdrxctl: RSCACKC and FCOE_WRFIX set, RSCFRSTSIZE 0.
    let rdrxctl = f.regs.peek(r::RDRXCTL.offset());
    assert!(r::rdrxctl::RSCACKC.is_set(rdrxctl) && r::rdrxctl::FCOE_WRFIX.is_set(rdrxctl));
    assert_eq!(r::rdrxctl::RSCFRSTSIZE.get(rdrxctl), 0);
    // Buffer address registers point at the ring.
    assert_ne!(f.regs.peek(r::RDBAL.at(0).offset()), 0);
    assert!(r::ctrl_ext::NS_DIS.is_set(f.regs.peek(r::CTRL_EXT.offset())));
    assert_eq!(f.regs.peek(r::DCA_RXCTRL.at(0).offset()) & 1 << 12, 0);

    // Transmit: CRC and padding, buffers, DTXMXSZRQ, arbiter on, TE before queue enable.
    let h = f.regs.peek(r::HLREG0.offset());
    assert!(r::hlreg0::TXCRCEN.is_set(h) && r::hlreg0::TXPADEN.is_set(h));
    // Packet buffers as Linux's ixgbe_set_rxpba_generic with one TC: all 512 KB to receive,
    // 160 KB to transmit with a threshold of 160 - 10 KB.
    assert_eq!(f.regs.peek(r::TXPBSIZE.at(0).offset()), 0x2_8000);
    assert_eq!(f.regs.peek(r::RXPBSIZE.at(0).offset()), 0x8_0000);
    assert_eq!(f.regs.peek(r::TXPBTHRESH.at(0).offset()), 150);
    assert_eq!(f.regs.peek(r::DTXMXSZRQ.offset()), 0xFFFF);
    assert!(!r::rttdcs::ARBDIS.is_set(f.regs.peek(r::RTTDCS.offset())));
    let te = pos(
        &w,
        r::DMATXCTL,
        r::dmatxctl::TE.bit(),
        r::dmatxctl::TE.bit(),
    );
    let ten = r::txdctl::ENABLE.bit();
    let tx_enable = pos(&w, r::TXDCTL.at(0), ten, ten);
    assert!(te < tx_enable);
    let txdctl = f.regs.peek(r::TXDCTL.at(0).offset());
    assert_eq!(r::txdctl::PTHRESH.get(txdctl), 36);
    assert_eq!(r::txdctl::WTHRESH.get(txdctl), 0);

    // VFTA cleared, then the shadow (VID 0) restored.
    let clear = pos(&w, r::VFTA.at(0), all, 0);
    let cleared_last = pos(&w, r::VFTA.at(127), all, 0);
    let restore = find(&w, clear + 1, r::VFTA.at(0), all, 1).expect("VID 0 restored");
    assert!(clear < cleared_last && cleared_last < restore);

    // Link: 10G serial, AN restart (an SFP+ part, 8086:10fb).
    let autoc = f.regs.peek(r::AUTOC.offset());
    assert_eq!(r::autoc::LMS.get(autoc), 3);
    assert!(r::autoc::AN_RESTART.is_set(autoc));
    // AUTOC is written under the MAC CSR semaphore (prot_autoc_write_82599): SWSM taken (SMBI
    // read clear, SWESMBI set), SW_FW_SYNC's software bit set, SWSM released; AUTOC; then the
    // bit cleared again under SWSM.
    let sw = r::sw_fw_sync::SW_MAC_CSR_SM.bit();
    let take = pos(&w, r::SW_FW_SYNC, sw, sw);
    let autoc_w = find(&w, take, r::AUTOC, 0, 0).expect("AUTOC after the semaphore");
    let give = find(&w, autoc_w, r::SW_FW_SYNC, sw, 0).expect("semaphore released");
    let swesmbi = r::swsm::SWESMBI.bit();
    let sem = pos(&w, r::SWSM, swesmbi, swesmbi);
    assert!(sem < take && take < autoc_w && autoc_w < give);
    assert_eq!(f.regs.peek(r::SW_FW_SYNC.offset()) & sw, 0, "released");
    let l = port.link().unwrap();
    assert!(l.up && l.speed_mbps == 10_000);
    assert_eq!(f.events.lock().unwrap().as_slice(), ["bus master on"]);

    // No RSS with one queue.
    assert_eq!(f.regs.peek(r::MRQC.offset()), 0);
    let info = port.info();
    assert_eq!(
        (info.driver, info.rx_ring, info.tx_queues),
        ("ixgbe", 64, 1)
    );
    assert!(info.model.contains("82599"));
}

#[test]
fn non_sfp_parts_keep_the_link_mode_of_their_nvm() {
    // A KX4 part (8086:10f7): its NVM loaded KX4/KX/KR autonegotiation (LMS 4) into AUTOC;
    // forcing 10G serial there would take the link down (Linux starts from orig_autoc).
    let (mut bus, f) = fake();
    bus.id = (0x8086, 0x10f7);
    f.regs.preset(
        r::AUTOC.offset(),
        r::autoc::LMS.val(4) | r::autoc::_10G_PMA_PMD.val(1),
    );
    let _port = IxgbePort::open(bus, small()).unwrap();
    let autoc = f.regs.peek(r::AUTOC.offset());
    assert_eq!(r::autoc::LMS.get(autoc), 4, "{autoc:#x}");
    assert_eq!(r::autoc::_10G_PMA_PMD.get(autoc), 1, "{autoc:#x}");
    assert!(r::autoc::AN_RESTART.is_set(autoc));
}

#[test]
fn firmware_holding_the_mac_csrs_is_waited_for_then_reported() {
    // Firmware's bit of SW_FW_SYNC stays set: AUTOC is not written; the error names who holds
    // it (after Linux's 200 x 5 ms).
    let (bus, f) = fake();
    f.regs
        .preset(r::SW_FW_SYNC.offset(), r::sw_fw_sync::FW_MAC_CSR_SM.bit());
    let e = IxgbePort::open(bus, small()).err().unwrap().to_string();
    assert!(e.contains("SW_FW_SYNC") && e.contains("firmware"), "{e}");
    assert!(f.regs.writes().iter().all(|&(o, _)| o != r::AUTOC.offset()));
}

#[test]
fn rss_jumbo_and_loopback_are_programmed() {
    let (bus, f) = fake();
    let cfg: IxgbeConfig = testkit::rss_jumbo_loopback();
    let _port = IxgbePort::open(bus, cfg).unwrap();
    let mrqc = f.regs.peek(r::MRQC.offset());
    assert_eq!(r::mrqc::MRQE.get(mrqc), 1);
    assert!(r::mrqc::RSS_FIELD_IPV4_TCP.is_set(mrqc));
    assert_eq!(f.regs.peek(r::RETA.at(0).offset()), 0x0302_0100);
    assert_eq!(f.regs.peek(r::RSSRK.at(0).offset()), 0x5a6d_5a6d);
    let h = f.regs.peek(r::HLREG0.offset());
    assert!(r::hlreg0::JUMBOEN.is_set(h) && r::hlreg0::LPBK.is_set(h));
    assert_eq!(r::maxfrs::MFS.get(f.regs.peek(r::MAXFRS.offset())), 9018);
    let autoc = f.regs.peek(r::AUTOC.offset());
    assert_eq!(r::autoc::LMS.get(autoc), 1);
    assert!(r::autoc::FLU.is_set(autoc));
    for q in 0..4 {
        assert_eq!(
            r::srrctl::BSIZEPKT.get(f.regs.peek(r::SRRCTL.at(q).offset())),
            10
        );
        assert_eq!(f.regs.peek(r::RDT.at(q).offset()), 63);
    }
}

#[test]
fn dmaidone_timeout_names_the_register() {
    let (bus, f) = fake();
    f.dmaidone.store(false, Ordering::Relaxed);
    let e = IxgbePort::open(bus, small()).err().unwrap().to_string();
    assert!(e.contains("RDRXCTL.DMAIDONE"), "{e}");
    // The failed open still reset the device and released bus mastering.
    assert_eq!(
        f.events.lock().unwrap().as_slice(),
        ["bus master on", "bus master off"]
    );
}

#[test]
fn wrong_ids_and_bad_configs_are_refused() {
    let (mut bus, f) = fake();
    bus.id = (0x8086, 0x10c9);
    let e = IxgbePort::open(bus, small()).err().unwrap();
    assert!(
        matches!(e, Error::UnsupportedDevice { device: 0x10c9, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("8086:10fb"), "{e}");
    assert!(
        f.regs.writes().is_empty(),
        "nothing touched on a foreign device"
    );

    let tiny_pool = IxgbeConfig {
        pool: PoolConfig {
            buffers: 128,
            buf_size: 1024,
            headroom: 128,
        },
        ..small()
    };
    let e = tiny_pool.rx_buffer_kb().unwrap_err().to_string();
    assert!(e.contains("1024"), "{e}");
    let jumbo_small_buffers = IxgbeConfig {
        mtu: 9000,
        ..small()
    };
    jumbo_small_buffers
        .check()
        .expect("jumbo frames in 2 KB buffers arrive as chains");
    assert_eq!(
        IxgbeConfig {
            pool: PoolConfig {
                buffers: 128,
                buf_size: 3200,
                headroom: 128
            },
            ..small()
        }
        .rx_buffer_kb()
        .unwrap(),
        3,
        "rounds down"
    );
}

#[test]
fn vlan_controls() {
    let (bus, f) = fake();
    let mut port = IxgbePort::open(
        bus,
        IxgbeConfig {
            vlans: vec![100],
            vlan_filter: true,
            ..small()
        },
    )
    .unwrap();
    let vfta = |i: u32| f.regs.peek(r::VFTA.at(i).offset());
    assert_eq!(vfta(100 >> 5), 1 << (100 & 31), "config shadow restored");
    assert!(r::vlnctrl::VFE.is_set(f.regs.peek(r::VLNCTRL.offset())));

    let e = port.add_vlan(4095).unwrap_err();
    assert!(e.to_string().contains("4095"), "{e}");
    assert!(port.remove_vlan(4095).is_err());
    for vid in [1u16, 31, 32, 4094] {
        port.add_vlan(vid).unwrap();
        assert!(vfta(u32::from(vid >> 5)) & 1 << (vid & 31) != 0, "{vid}");
    }
    port.remove_vlan(32).unwrap();
    assert_eq!(vfta(1), 0);
    port.remove_vlan(0).unwrap();
    assert_eq!(vfta(0) & 1, 1, "VID 0 always passes");
    assert_eq!(
        port.vlan_filter().table.iter().collect::<Vec<_>>(),
        [0, 1, 31, 100, 4094]
    );

    port.set_vlan_filter(false).unwrap();
    let v = f.regs.peek(r::VLNCTRL.offset());
    assert!(!r::vlnctrl::VFE.is_set(v) && !r::vlnctrl::CFIEN.is_set(v));

    port.set_tpid(0x88a8).unwrap();
    assert_eq!(
        r::vlnctrl::VET.get(f.regs.peek(r::VLNCTRL.offset())),
        0x88a8
    );
    assert_eq!(
        r::dmatxctl::VT.get(f.regs.peek(r::DMATXCTL.offset())),
        0x88a8
    );

    port.set_extended_vlan(true, 0x9100).unwrap();
    assert!(r::ctrl_ext::EXTENDED_VLAN.is_set(f.regs.peek(r::CTRL_EXT.offset())));
    assert!(r::dmatxctl::GDV.is_set(f.regs.peek(r::DMATXCTL.offset())));
    assert_eq!(
        r::exvet::VET_EXT.get(f.regs.peek(r::EXVET.offset())),
        0x9100
    );
    port.set_extended_vlan(false, 0).unwrap();
    assert!(!r::ctrl_ext::EXTENDED_VLAN.is_set(f.regs.peek(r::CTRL_EXT.offset())));
    assert!(!r::dmatxctl::GDV.is_set(f.regs.peek(r::DMATXCTL.offset())));
}

#[test]
fn strip_switch_on_a_held_queue_is_immediate() {
    let (bus, f) = fake();
    let mut port = IxgbePort::open(bus, small()).unwrap();
    let vme = r::rxdctl::VME.bit();
    assert_eq!(f.regs.peek(r::RXDCTL.at(0).offset()) & vme, 0);
    f.regs.clear_log();
    port.set_rx_strip(0, true).unwrap();
    assert_eq!(port.rx_strip(0), Some(true));
    assert!(!port.rx_strip_pending(0));
    let w = f.regs.writes();
    let en = r::rxdctl::ENABLE.bit();
    // Stop, then VME with the queue still off, head, enable, tail last.
    let stop = pos(&w, r::RXDCTL.at(0), en | vme, 0);
    let set = find(&w, stop, r::RXDCTL.at(0), en | vme, vme).unwrap();
    let head = find(&w, set, r::RDH.at(0), 0, 0).unwrap();
    let start = find(&w, head, r::RXDCTL.at(0), en | vme, en | vme).unwrap();
    let tail = find(&w, start, r::RDT.at(0), 0, 0).unwrap();
    assert!(stop < set && set < head && head < start && start < tail);
    assert!(port.set_rx_strip(1, true).is_err());
}

#[test]
fn strip_switch_on_a_taken_queue_happens_in_its_bursts() {
    let (bus, f) = fake();
    let mut port = IxgbePort::open(bus, small()).unwrap();
    let (mut rx, _tx) = port.take_queues().unwrap();
    port.set_rx_strip(0, true).unwrap();
    assert!(port.rx_strip_pending(0));
    assert_eq!(
        f.regs.peek(r::RXDCTL.at(0).offset()) & r::rxdctl::VME.bit(),
        0
    );
    let mut batch = Vec::new();
    for _ in 0..3 {
        rx[0].rx_burst(&mut batch, 32).unwrap();
    }
    assert!(!port.rx_strip_pending(0));
    assert_eq!(port.rx_strip(0), Some(true));
    assert!(rx[0].vlan_strip());
    let v = f.regs.peek(r::RXDCTL.at(0).offset());
    assert!(r::rxdctl::VME.is_set(v) && r::rxdctl::ENABLE.is_set(v));
}

#[test]
fn drop_disables_queues_before_reset_then_releases_bus_master() {
    let (bus, f) = fake();
    let port = IxgbePort::open(bus, small()).unwrap();
    f.regs.clear_log();
    drop(port);
    let w = f.regs.writes();
    let en = r::rxdctl::ENABLE.bit();
    let rx_off = pos(&w, r::RXDCTL.at(0), en, 0);
    let tx_off = pos(&w, r::TXDCTL.at(0), r::txdctl::ENABLE.bit(), 0);
    let rst = r::ctrl::RST.bit() | r::ctrl::LNK_RST.bit();
    let reset = pos(&w, r::CTRL, rst, rst);
    assert!(rx_off < reset && tx_off < reset);
    // Receive off through the security-block handshake, and the port handed back to firmware
    // (CTRL_EXT.DRV_LOAD cleared) before the reset.
    let dis = r::secrxctrl::RX_DIS.bit();
    let sec_off = pos(&w, r::SECRXCTRL, dis, dis);
    let rxen_off = pos(&w, r::RXCTRL, r::rxctrl::RXEN.bit(), 0);
    let drv = r::ctrl_ext::DRV_LOAD.bit();
    let released = pos(&w, r::CTRL_EXT, drv, 0);
    assert!(sec_off < rxen_off && rxen_off < released && released < reset);
    assert_eq!(
        f.events.lock().unwrap().as_slice(),
        ["bus master on", "bus master off"]
    );
}

#[test]
fn taken_queues_disable_themselves_on_drop() {
    let (bus, f) = fake();
    let mut port = IxgbePort::open(bus, small()).unwrap();
    let (rx, tx) = port.take_queues().unwrap();
    assert!(port.take_queues().is_err());
    f.regs.clear_log();
    drop(rx);
    drop(tx);
    let w = f.regs.writes();
    pos(&w, r::RXDCTL.at(0), r::rxdctl::ENABLE.bit(), 0);
    pos(&w, r::TXDCTL.at(0), r::txdctl::ENABLE.bit(), 0);
    assert!(find(&w, 0, r::CTRL, r::ctrl::RST.bit(), r::ctrl::RST.bit()).is_none());
    drop(port);
}

#[test]
fn stats_accumulate_wide_counters_low_half_first() {
    let (bus, f) = fake();
    let mut port = IxgbePort::open(bus, small()).unwrap();
    f.regs.preset(r::GPRC.offset(), 7);
    f.regs.preset(r::GORCL.offset(), 0xFFFF_FFF0);
    f.regs.preset(r::GORCH.offset(), 1);
    f.regs.preset(r::MPC.at(3).offset(), 2);
    f.regs.clear_log();
    let s = port.stats().unwrap();
    assert_eq!(s.get("GPRC"), Some(7));
    assert_eq!(s.get("GORC"), Some(0x1_FFFF_FFF0));
    assert_eq!(s.get("MPC"), Some(2));
    assert_eq!(s.get("QPRDC0"), Some(0));
    let log = f.regs.log();
    let at = |reg: Reg| {
        log.iter()
            .position(|a| matches!(a, Access::Read { offset, .. } if *offset == reg.offset()))
            .unwrap()
    };
    assert!(at(r::GORCL) < at(r::GORCH));
}
