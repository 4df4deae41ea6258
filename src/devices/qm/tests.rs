//! The qm driver on its model: bring-up, traffic both ways, buffers, and every fault the
//! issue names (an error status, a portal not clean, pool depletion, the device gone, the
//! valid bit after thousands of wraps, a stale token, a descriptor naming a foreign buffer).

use std::sync::Arc;

use super::layout::Fd;
use super::mc::{McPortal, McStatus};
use super::model::QmDevice;
use super::*;
use crate::device::{Port, QueueError, RxQueue, TxQueue};
use crate::platform::dma::{IdentityMapper, Packet, Pool, PoolConfig};
use crate::platform::regs::qbman::cmd;
use crate::vlan::{RxMode, Vid, VlanConfig, VlanControl, VlanHardware};

fn small() -> QmConfig {
    QmConfig {
        pool: PoolConfig {
            buffers: 256,
            ..PoolConfig::default()
        },
        hw_buffers: 128,
        ..QmConfig::default()
    }
}

struct Pair {
    rx: QmRx<QmDevice>,
    tx: QmTx<QmDevice>,
    a: QmPort<QmDevice>,
    b: QmPort<QmDevice>,
    da: QmDevice,
    db: QmDevice,
}

fn pair(cfg: QmConfig) -> Pair {
    pair_with(cfg.clone(), cfg)
}

/// A (transmitting) and B (receiving) with configurations of their own.
fn pair_with(cfg_a: QmConfig, cfg_b: QmConfig) -> Pair {
    let (da, db) = QmDevice::pair();
    let mut a = QmPort::open(da.clone(), cfg_a).unwrap();
    let mut b = QmPort::open(db.clone(), cfg_b).unwrap();
    let (_, mut tx) = a.take_queues().unwrap();
    let (mut rx, _) = b.take_queues().unwrap();
    Pair {
        rx: rx.remove(0),
        tx: tx.remove(0),
        a,
        b,
        da,
        db,
    }
}

fn frame(seq: u32, len: usize) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x88, 0xb5]);
    f.extend_from_slice(&seq.to_be_bytes());
    f.resize(len, seq as u8);
    f
}

fn packets(pool: &Pool, n: u32, len: usize) -> Vec<Packet> {
    (0..n)
        .map(|i| {
            let mut p = pool.alloc().unwrap();
            assert!(p.set_data(&frame(i, len)));
            p
        })
        .collect()
}

fn receive(rx: &mut QmRx<QmDevice>, want: usize) -> Vec<Packet> {
    let mut got = Vec::new();
    for _ in 0..want + 4 {
        rx.rx_burst(&mut got, 32).unwrap();
        if got.len() >= want {
            break;
        }
    }
    got
}

#[test]
fn a_port_comes_up_through_management_commands() {
    let p = pair(small());
    let i = p.a.info();
    assert_eq!((i.driver, i.name.as_str()), ("qm", "qm:0"));
    assert_eq!(
        i.mac.to_string(),
        "02:51:4d:00:00:00",
        "the MAC read back through GET_PRIMARY_MAC_ADDR, byte-reversed"
    );
    assert!(p.a.link().unwrap().up);
    assert_eq!(p.a.link().unwrap().speed_mbps, 10_000);
    assert_eq!(
        p.db.pool_fill(),
        128,
        "the receive queue seeded its hardware pool"
    );
    assert_eq!(p.rx.lent(), 128);
}

#[test]
fn frames_cross_the_pair_without_copies_and_buffers_go_home() {
    let mut p = pair(small());
    let pool = p.rx.pool().clone();
    // Packets of B's own pool, sent by A: their buffers go back to B's hardware pool.
    let mut batch = packets(&pool, 20, 100);
    assert_eq!(p.tx.tx_burst(&mut batch).unwrap(), 20);
    assert_eq!(
        p.tx.stats().copied,
        0,
        "a pool some qm port lends goes as it is"
    );
    let got = receive(&mut p.rx, 20);
    assert_eq!(got.len(), 20);
    for (i, pk) in got.iter().enumerate() {
        assert_eq!(pk.data(), &frame(i as u32, 100)[..]);
        assert_eq!(
            pk.headroom(),
            128,
            "the frame lands behind annotation and head room"
        );
    }
    let mut stats = p.a.stats().unwrap();
    assert_eq!(stats.get("egress_all_frames"), Some(20));
    stats = p.b.stats().unwrap();
    assert_eq!(stats.get("ingress_all_frames"), Some(20));
    assert_eq!(stats.get("ingress_all_bytes"), Some(20 * 104));
    assert_eq!(stats.get("ingress_broadcast_frames"), Some(20));
    drop(got);
    drop(p);
    pool.flush_thread_cache();
    assert_eq!(
        pool.stats().in_use,
        0,
        "every buffer is home after the ports are gone"
    );
}

#[test]
fn a_packet_of_a_pool_no_port_lends_is_copied() {
    let mut p = pair(small());
    let other = Pool::new(PoolConfig::default(), Arc::new(IdentityMapper)).unwrap();
    let mut batch = packets(&other, 3, 64);
    assert_eq!(p.tx.tx_burst(&mut batch).unwrap(), 3);
    assert_eq!(p.tx.stats().copied, 3);
    assert_eq!(other.stats().in_use, 0, "the originals went back at once");
    assert_eq!(receive(&mut p.rx, 3).len(), 3);
}

#[test]
fn a_burst_of_several_pools_goes_out_in_order_as_runs() {
    let (da, db) = QmDevice::pair();
    let mut a = QmPort::open(da, small()).unwrap();
    let mut b = QmPort::open(db, small()).unwrap();
    let (a_rx, mut tx) = a.take_queues().unwrap();
    let (mut rx, _) = b.take_queues().unwrap();
    let (mut tx, mut rx) = (tx.remove(0), rx.remove(0));
    let (a_pool, b_pool) = (a_rx[0].pool().clone(), rx.pool().clone());
    let other = Pool::new(PoolConfig::default(), Arc::new(IdentityMapper)).unwrap();
    // Runs of B's pool, A's pool and a pool no port lends (copied), in one burst.
    let pools = [
        &b_pool, &b_pool, &a_pool, &other, &b_pool, &a_pool, &a_pool, &other,
    ];
    let mut batch: Vec<Packet> = pools
        .iter()
        .enumerate()
        .map(|(i, pool)| {
            let mut pk = pool.alloc().unwrap();
            assert!(pk.set_data(&frame(i as u32, 80)));
            pk
        })
        .collect();
    assert_eq!(tx.tx_burst(&mut batch).unwrap(), 8);
    assert!(batch.is_empty());
    assert_eq!((tx.stats().packets, tx.stats().copied), (8, 2));
    let got = receive(&mut rx, 8);
    let seqs: Vec<u8> = got.iter().map(|pk| pk.data()[17]).collect();
    assert_eq!(
        seqs,
        (0..8).collect::<Vec<u8>>(),
        "sent in the batch's order"
    );
}

#[test]
fn a_chained_frame_in_a_burst_is_linearized_in_its_place() {
    let mut p = pair(small());
    let pool = p.rx.pool().clone();
    let mut batch = packets(&pool, 4, 100);
    // Frame 2 as a chain of two buffers: the run stops there, the fallback linearizes it.
    let whole = frame(2, 100);
    let (mut head, mut tail) = (pool.alloc().unwrap(), pool.alloc().unwrap());
    assert!(head.set_data(&whole[..40]) && tail.set_data(&whole[40..]));
    head.push_segment(tail);
    assert!(head.is_chained());
    batch[2] = head;
    assert_eq!(p.tx.tx_burst(&mut batch).unwrap(), 4);
    assert!(batch.is_empty());
    let got = receive(&mut p.rx, 4);
    assert_eq!(got.len(), 4);
    for (i, pk) in got.iter().enumerate() {
        assert_eq!(pk.data(), &frame(i as u32, 100)[..], "frame {i}");
    }
}

#[test]
fn short_frames_leave_padded_to_sixty_bytes() {
    let mut p = pair(small());
    let pool = p.rx.pool().clone();
    let mut batch = vec![pool.alloc().unwrap()];
    batch[0].set_data(&frame(1, 20));
    p.tx.tx_burst(&mut batch).unwrap();
    let got = receive(&mut p.rx, 1);
    assert_eq!(got[0].len(), 60);
    assert_eq!(&got[0].data()[..20], &frame(1, 20)[..]);
    assert!(got[0].data()[20..].iter().all(|&b| b == 0));
}

#[test]
fn the_valid_bit_holds_after_thousands_of_wraps() {
    let mut p = pair(small());
    let pool = p.rx.pool().clone();
    let mut total = 0;
    // Bursts of 7 against a ring of 32: every entry index, both polarities, 3,000 wraps.
    for round in 0..(3000 * 32 / 7) {
        let mut batch = packets(&pool, 7, 60 + round % 3);
        while !batch.is_empty() {
            p.tx.tx_burst(&mut batch).unwrap();
        }
        total += receive(&mut p.rx, 7).len();
    }
    assert_eq!(total, 3000 * 32 / 7 * 7);
    assert_eq!(
        p.da.faults(),
        (0, 0, 0),
        "no stale entry, no DMA fault, no bad command"
    );
}

#[test]
fn pool_depletion_drops_and_counts_and_traffic_resumes() {
    let b = QmConfig {
        pool: PoolConfig {
            buffers: 64,
            ..PoolConfig::default()
        },
        hw_buffers: 32,
        ..QmConfig::default()
    };
    let mut p = pair_with(QmConfig::default(), b);
    // A copies these into its own (large) pool: the sender never runs short.
    let src = Pool::new(PoolConfig::default(), p.da.dma_mapper()).unwrap();
    // The application keeps what it receives: the 64-buffer pool runs dry.
    let mut held = Vec::new();
    for _ in 0..6 {
        let mut batch = packets(&src, 16, 64);
        p.tx.tx_burst(&mut batch).unwrap();
        held.extend(receive(&mut p.rx, 16));
    }
    let drops =
        p.b.stats()
            .unwrap()
            .get("ingress_nobuffer_discards")
            .unwrap();
    assert!(drops > 0, "frames that found no buffer are counted");
    assert_eq!(held.len() as u64 + drops, 96);
    drop(held);
    let mut batch = packets(&src, 16, 64);
    p.tx.tx_burst(&mut batch).unwrap();
    // The first burst tops the hardware pool up again from the buffers that came home.
    receive(&mut p.rx, 0);
    let mut batch = packets(&src, 16, 64);
    p.tx.tx_burst(&mut batch).unwrap();
    assert_eq!(
        receive(&mut p.rx, 16).len(),
        16,
        "traffic resumes once buffers return"
    );
}

#[test]
fn an_error_status_is_a_typed_error_naming_command_and_status() {
    let mut p = pair(small());
    p.db.fail_next_command(McStatus::ConfigErr);
    let e = p.b.add_vlan(Vid::new(5).unwrap()).unwrap_err().to_string();
    assert!(
        e.contains("qm:1") && e.contains("DPNI_ADD_VLAN_ID") && e.contains("CONFIG_ERR"),
        "{e}"
    );
    assert!(matches!(p.b.add_vlan(Vid::new(5).unwrap()), Ok(())));
}

#[test]
fn commands_out_of_order_unknown_or_unauthenticated_get_the_real_status() {
    let (d, _) = QmDevice::pair();
    let mc = McPortal::new(d.regs().clone(), "qm:0");
    let status = |r: crate::Result<_>| match r.unwrap_err() {
        crate::Error::McCommand { status, .. } => status,
        e => panic!("{e}"),
    };
    assert_eq!(status(mc.send(cmd::DPNI_ENABLE, 77, [0; 7])), "AUTH_ERR");
    let t = mc.send(cmd::DPNI_OPEN, 0, [0; 7]).unwrap().token;
    assert_ne!(t, 0);
    assert_eq!(
        status(mc.send(cmd::DPNI_ENABLE, t, [0; 7])),
        "INVALID_STATE",
        "no pools yet"
    );
    let v9 = crate::platform::regs::McCommand {
        version: 9,
        ..cmd::DPNI_GET_ATTR
    };
    assert_eq!(status(mc.send(v9, t, [0; 7])), "UNSUPPORTED_OP");
    assert_eq!(
        status(mc.send(cmd::DPNI_OPEN, 0, [99, 0, 0, 0, 0, 0, 0])),
        "CONFIG_ERR"
    );
}

#[test]
fn a_portal_that_is_not_clean_is_refused_at_init() {
    let (d, _) = QmDevice::pair();
    let mut port = QmPort::open(d.clone(), small()).unwrap();
    d.dirty_portal(0);
    let e = port.take_queues().err().unwrap().to_string();
    assert!(e.contains("not clean") && e.contains("DQPI"), "{e}");
}

#[test]
fn a_device_that_disappears_is_reported_by_both_queues() {
    let mut p = pair(small());
    let pool = p.rx.pool().clone();
    p.db.surprise_remove();
    p.da.surprise_remove();
    let mut got = Vec::new();
    let e = (0..200).find_map(|_| p.rx.rx_burst(&mut got, 32).err());
    assert_eq!(e, Some(QueueError::DeviceGone));
    let e = (0..10).find_map(|_| {
        let mut b = packets(&pool, 8, 64);
        p.tx.tx_burst(&mut b).err()
    });
    assert_eq!(
        e,
        Some(QueueError::DeviceGone),
        "the ring fills, and CI reads all ones"
    );
}

#[test]
fn results_with_a_stale_token_are_not_taken() {
    let mut p = pair(small());
    let pool = p.rx.pool().clone();
    assert!(receive(&mut p.rx, 0).is_empty());
    p.db.stale_token_next();
    let mut batch = packets(&pool, 4, 64);
    p.tx.tx_burst(&mut batch).unwrap();
    let got = receive(&mut p.rx, 4);
    assert!(
        got.len() < 4,
        "the pull answered with the wrong token delivered nothing"
    );
    assert!(p.rx.qm_stats().stale_results > 0);
    let mut batch = packets(&pool, 4, 64);
    p.tx.tx_burst(&mut batch).unwrap();
    assert_eq!(receive(&mut p.rx, 4).len(), 4, "the next pull works");
}

#[test]
fn a_descriptor_naming_a_buffer_never_lent_is_refused() {
    let mut p = pair(small());
    let foreign = p.rx.pool().alloc().unwrap();
    p.db.inject_fd(Fd::simple(foreign.buf_iova(), 60, p.b.bpid(), 128))
        .unwrap();
    p.db.inject_fd(Fd::simple(0xdead_0000, 60, p.b.bpid(), 128))
        .unwrap();
    // One the model's pool holds cannot be handed out twice: the first buffer the queue
    // released is still in the pool (the pool has more than one burst's worth).
    assert!(p.db.pool_fill() > 0);
    let held = p.rx.pool().iova();
    assert!(p
        .db
        .inject_fd(Fd::simple(held, 60, p.b.bpid(), 128))
        .is_err());
    assert!(receive(&mut p.rx, 1).is_empty());
    assert_eq!(p.rx.qm_stats().refused_fds, 2);
    assert_eq!(
        foreign.len(),
        0,
        "the packet the application holds is untouched"
    );
}

/// A refused descriptor in the middle of a pull's results ends the receive loop's run there:
/// the frames before and after it are delivered, in order, and it alone is counted.
#[test]
fn a_refused_descriptor_between_good_frames_costs_only_itself() {
    let mut p = pair(small());
    let pool = p.rx.pool().clone();
    let mut batch = packets(&pool, 3, 64);
    p.tx.tx_burst(&mut batch).unwrap();
    p.db.inject_fd(Fd::simple(0xdead_0000, 60, p.b.bpid(), 128))
        .unwrap();
    let mut batch = packets(&pool, 3, 64);
    p.tx.tx_burst(&mut batch).unwrap();
    let got = receive(&mut p.rx, 6);
    let seqs: Vec<u8> = got.iter().map(|p| p.data()[17]).collect();
    assert_eq!(seqs, [0, 1, 2, 0, 1, 2]);
    assert_eq!(p.rx.qm_stats().refused_fds, 1);
    assert_eq!(p.rx.stats().packets, 6);
}

#[test]
fn hardware_vlan_strip_is_refused_by_name_and_the_filter_runs_in_the_device() {
    let mut p = pair(small());
    let hw = VlanConfig {
        rx_mode: RxMode::Hardware,
        ..VlanConfig::default()
    };
    let e = VlanControl::new(&mut p.b, &hw).err().unwrap().to_string();
    assert!(e.contains("qm:1"), "{e}");
    let sw = VlanConfig {
        rx_mode: RxMode::Software,
        filter: true,
        table: crate::vlan::VlanFilter::with([10]).unwrap(),
        ..VlanConfig::default()
    };
    let ctl = VlanControl::new(&mut p.b, &sw).unwrap();
    assert!(
        !ctl.filter_in_software(),
        "the device filters, not software"
    );
    let pool = p.rx.pool().clone();
    let tagged = |vid: u16| {
        let mut f = frame(0, 60);
        f.splice(12..12, [0x81, 0x00, 0, vid as u8]);
        let mut pk = pool.alloc().unwrap();
        pk.set_data(&f);
        pk
    };
    let mut batch = vec![tagged(10), tagged(11)];
    p.tx.tx_burst(&mut batch).unwrap();
    assert_eq!(receive(&mut p.rx, 1).len(), 1);
    assert_eq!(p.b.stats().unwrap().get("ingress_filtered_frames"), Some(1));
    // A reset clears the device's table; the shadow puts VID 10 back.
    p.b.reset().unwrap();
    let mut batch = vec![tagged(10), tagged(11)];
    p.tx.tx_burst(&mut batch).unwrap();
    assert_eq!(receive(&mut p.rx, 1).len(), 1);
    assert_eq!(p.b.stats().unwrap().get("ingress_filtered_frames"), Some(2));
}

#[test]
fn a_port_that_only_sends_its_own_pool_never_runs_dry() {
    let (da, _db) = QmDevice::pair();
    let mut a = QmPort::open(da.clone(), small()).unwrap();
    let (rx, mut tx) = a.take_queues().unwrap();
    let pool = rx[0].pool().clone();
    // Each sent buffer goes back to A's hardware pool, and A receives nothing: without the
    // transmit queue taking the surplus back, the 128 free buffers would last 4 bursts.
    for round in 0..50 {
        let mut batch = Vec::new();
        assert_eq!(pool.alloc_bulk_len(32, 60, &mut batch), 32, "round {round}");
        assert_eq!(tx[0].tx_burst(&mut batch).unwrap(), 32);
    }
    assert!(rx[0].lent() <= 128 + 64 + 32, "{} lent", rx[0].lent());
    assert_eq!(tx[0].stats().copied, 0);
}

fn threaded(ports: usize, wired: bool) -> model::QmSoc {
    model::QmSoc::build(model::QmSocConfig {
        ports,
        wired,
        mode: model::Mode::Threaded,
        thread: None,
    })
    .unwrap()
}

#[test]
fn the_threaded_model_moves_frames_written_on_another_core() {
    let soc = threaded(2, true);
    let (da, db) = (soc.port(0).unwrap(), soc.port(1).unwrap());
    let mut a = QmPort::open(da, small()).unwrap();
    let mut b = QmPort::open(db.clone(), small()).unwrap();
    let (_, mut tx) = a.take_queues().unwrap();
    let (mut rx, _) = b.take_queues().unwrap();
    let pool = rx[0].pool().clone();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let (mut sent, mut got) = (0u32, Vec::new());
    // In steps of a burst, each sent once the receiver's hardware pool holds a burst's worth
    // of buffers (its releases go through the device thread too) and received before the
    // next: a frame that finds the pool empty is dropped, as on the hardware (another test).
    while got.len() < 2000 {
        while db.pool_fill() < 32 {
            assert!(
                std::time::Instant::now() < deadline,
                "the pool never filled"
            );
            let mut r = Vec::new();
            rx[0].rx_burst(&mut r, 32).unwrap();
            assert!(r.is_empty());
        }
        let mut batch: Vec<Packet> = (sent..sent + 32)
            .map(|i| {
                let mut p = pool.alloc().expect("a buffer");
                p.set_data(&frame(i, 64));
                p
            })
            .collect();
        sent += 32;
        while !batch.is_empty() {
            tx[0].tx_burst(&mut batch).unwrap();
        }
        while got.len() < sent as usize {
            assert!(
                std::time::Instant::now() < deadline,
                "{} of {sent} frames arrived; {:?}",
                got.len(),
                b.stats().unwrap()
            );
            let mut r = Vec::new();
            rx[0].rx_burst(&mut r, 32).unwrap();
            got.extend(r.iter().map(|p| p.data().to_vec()));
        }
    }
    for (i, f) in got.iter().enumerate() {
        assert_eq!(f, &frame(i as u32, 64), "frame {i}");
    }
    assert!(soc.busy().1 > 0, "the device thread did the work");
    assert!(soc.thread_alive());
    drop((rx, tx, a, b));
    pool.flush_thread_cache();
    assert_eq!(
        pool.stats().in_use,
        0,
        "every buffer came home through the device thread"
    );
}

#[test]
fn a_source_feeds_the_receive_queue_and_the_void_takes_what_is_sent() {
    let soc = threaded(2, false);
    let (da, db) = (soc.port(0).unwrap(), soc.port(1).unwrap());
    da.set_source(Some(frame(9, 60)));
    let mut a = QmPort::open(da.clone(), small()).unwrap();
    let mut b = QmPort::open(db.clone(), small()).unwrap();
    let (mut rx, _) = a.take_queues().unwrap();
    let (_, mut tx) = b.take_queues().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut moved = 0;
    let mut batch = Vec::new();
    while moved < 10_000 {
        assert!(
            std::time::Instant::now() < deadline,
            "{moved} frames forwarded"
        );
        rx[0].rx_burst(&mut batch, 32).unwrap();
        moved += tx[0].tx_burst(&mut batch).unwrap();
    }
    assert_eq!(
        tx[0].stats().copied,
        0,
        "A's buffers go out through B as they are"
    );
    let sent = db.counters().egress[0];
    assert!(sent >= 9_000, "the void counted {sent}");
}

#[test]
fn the_transmit_engine_releases_a_buffer_unless_ivp_is_set() {
    use crate::platform::dma::DmaMemory;
    // A raw portal on A's transmit portal (no queue holds it), and frames in memory of the
    // set's IOMMU that belong to no pool.
    let (da, db) = QmDevice::pair();
    let a = QmPort::open(da.clone(), small()).unwrap();
    let mut b = QmPort::open(db.clone(), small()).unwrap();
    let (mut rx, _) = b.take_queues().unwrap();
    let (cena, cinh) = da.portal(1).unwrap();
    let mut portal = portal::SwPortal::init(cena, cinh, "qm:0").unwrap();
    let mem = DmaMemory::allocate(4096, da.dma_mapper()).unwrap();
    mem.write_bytes(128, &frame(5, 60));
    let fill = da.pool_fill();
    let tx_fqid = a.fqids().1;
    let mut fd = Fd::simple(mem.iova(), 60, a.bpid(), 128);
    fd.set_ivp();
    assert_eq!(portal.eq_room(1).unwrap(), 32);
    portal.eq_write(tx_fqid, &fd);
    portal.eq_doorbell();
    assert_eq!(receive(&mut rx[0], 1).len(), 1, "the frame went out");
    assert_eq!(
        da.pool_fill(),
        fill,
        "IVP: the buffer was not released to A's pool"
    );
    let plain = Fd::simple(mem.iova(), 60, a.bpid(), 128);
    portal.eq_write(tx_fqid, &plain);
    portal.eq_doorbell();
    assert_eq!(receive(&mut rx[0], 1).len(), 1);
    assert_eq!(
        da.pool_fill(),
        fill + 1,
        "without IVP the buffer goes to the FD's pool"
    );
    // That address is not one of A's buffers: take it back out before the teardown drains
    // the pool (which would refuse it, and say so).
    let back = portal.acquire(a.bpid(), 1).unwrap();
    assert_eq!(back, [mem.iova()]);
}

#[test]
fn a_portal_used_without_its_initialisation_is_refused() {
    use crate::platform::dma::DmaMemory;
    use crate::platform::mmio::Mmio;
    use crate::platform::regs::qbman as r;
    // A's transmit portal, taken over by a driver that writes CFG and then enqueues, without
    // the initialisation writes (EQCR_PI and RCR_PI to RT, SDQCR to 0).
    let (da, db) = QmDevice::pair();
    let a = QmPort::open(da.clone(), small()).unwrap();
    let mut b = QmPort::open(db.clone(), small()).unwrap();
    let (mut rx, _) = b.take_queues().unwrap();
    let (cena, cinh) = da.portal(1).unwrap();
    let mem = DmaMemory::allocate(4096, da.dma_mapper()).unwrap();
    mem.write_bytes(128, &frame(5, 60));
    let mut fd = Fd::simple(mem.iova(), 60, a.bpid(), 128);
    fd.set_ivp();
    let tx_fqid = a.fqids().1;
    cinh.write(r::CFG, portal::CFG);
    let mut raw = portal::SwPortal::attach(cena.clone(), cinh.clone(), "qm:0").unwrap();
    assert_eq!(raw.eq_room(1).unwrap(), 32);
    raw.eq_write(tx_fqid, &fd);
    raw.eq_doorbell();
    assert!(receive(&mut rx[0], 1).is_empty(), "the enqueue was refused");
    assert_eq!(da.uninitialised_uses(), 1);
    assert!(!raw.eq_drained(), "the entry was not consumed");
    // Initialised as Linux and DPDK do it, the same portal carries the frame.
    let mut portal = portal::SwPortal::init(cena, cinh, "qm:0").unwrap();
    portal.eq_write(tx_fqid, &fd);
    portal.eq_doorbell();
    assert_eq!(receive(&mut rx[0], 1).len(), 1, "the frame went out");
    assert_eq!(da.uninitialised_uses(), 1, "nothing refused since");
}

#[test]
fn a_bring_up_that_fails_leaves_no_object_open() {
    let (d, _) = QmDevice::pair();
    d.fail_next_command(McStatus::NoResource);
    let e = QmPort::open(d.clone(), small()).err().unwrap().to_string();
    assert!(e.contains("DPNI_RESET") && e.contains("NO_RESOURCE"), "{e}");
    assert_eq!(
        d.open_tokens(),
        0,
        "the DPNI opened before the failure was closed"
    );
    let port = QmPort::open(d.clone(), small()).unwrap();
    assert_eq!(d.open_tokens(), 2, "a DPNI and a DPBP");
    drop(port);
    assert_eq!(d.open_tokens(), 0, "the teardown closed both");
}

#[test]
fn a_full_receive_queue_drops_at_its_tail_and_counts() {
    let mut p = pair_with(
        small(),
        QmConfig {
            taildrop: 8,
            ..small()
        },
    );
    let pool = p.rx.pool().clone();
    // The receive queue holds a pull's worth of results already (issued at its first burst);
    // nothing is pulled until the next burst, so frames wait on the frame queue.
    assert!(receive(&mut p.rx, 0).is_empty());
    let mut batch = packets(&pool, 20, 64);
    assert_eq!(p.tx.tx_burst(&mut batch).unwrap(), 20);
    assert_eq!(
        p.db.rx_queued(),
        8,
        "the frame queue stops at its threshold"
    );
    let st = p.b.stats().unwrap();
    assert_eq!(st.get("ingress_discarded_frames"), Some(12));
    assert_eq!(receive(&mut p.rx, 8).len(), 8);
}
