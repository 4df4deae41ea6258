//! Host tests of the software virtio-net device with the unchanged driver: frames cross a wired
//! pair byte-identical, the source and the void count what they did, and the driver rings one
//! doorbell per burst.

use std::sync::Arc;

use super::{ModelConfig, VirtioModel};
use crate::device::{MacAddr, Port, RxQueue, TxQueue};
use crate::devices::sim::Source;
use crate::devices::virtio::transport::status;
use crate::devices::virtio::{VirtioConfig, VirtioPort};
use crate::platform::dma::{PoolConfig, SoftIommu};
use crate::platform::mmio::Mmio;

fn cfg() -> VirtioConfig {
    VirtioConfig {
        rx_ring: 16,
        tx_ring: 16,
        pool: PoolConfig {
            buffers: 128,
            ..PoolConfig::default()
        },
        ..VirtioConfig::default()
    }
}

fn frame(n: usize, seq: u8) -> Vec<u8> {
    let mut f = vec![0u8; n];
    f[..6].copy_from_slice(&[0x52, 0x54, 0, 0x12, 0x34, 0x56]);
    f[12..14].copy_from_slice(&[0x88, 0xb5]);
    for (i, b) in f.iter_mut().enumerate().skip(14) {
        *b = seq.wrapping_add(i as u8);
    }
    f
}

#[test]
fn a_wired_pair_carries_frames_byte_identical_and_counts_them() {
    let iommu = Arc::new(SoftIommu::new("virtio model test"));
    let da = VirtioModel::new(ModelConfig::default(), iommu.clone());
    let db = VirtioModel::new(
        ModelConfig {
            mac: MacAddr([0x52, 0x54, 0, 0x12, 0x34, 0x57]),
            ..ModelConfig::default()
        },
        iommu.clone(),
    );
    VirtioModel::wire(&da, &db);
    let mut a = VirtioPort::open_model(&da, "virtio:0", cfg()).unwrap();
    let mut b = VirtioPort::open_model(&db, "virtio:1", cfg()).unwrap();
    assert_eq!(b.info().mac, MacAddr([0x52, 0x54, 0, 0x12, 0x34, 0x57]));
    assert!(a.link().unwrap().up);
    let (arx, mut atx) = a.take_queues().unwrap();
    let (mut brx, _btx) = b.take_queues().unwrap();
    let pool = arx[0].pool().clone();
    let mut sent = Vec::new();
    let mut got = Vec::new();
    let mut batch = Vec::new();
    // 100 frames of many lengths, in bursts of up to 5, through rings of 16: both wrap.
    for round in 0..20u32 {
        for k in 0..5u32 {
            let i = round * 5 + k;
            let f = frame(60 + (i as usize * 53) % 1450, i as u8);
            let mut p = pool.alloc().unwrap();
            p.set_data(&f);
            batch.push(p);
            sent.push(f);
        }
        assert_eq!(atx[0].tx_burst(&mut batch).unwrap(), 5);
        let mut rx = Vec::new();
        assert_eq!(brx[0].rx_burst(&mut rx, 32).unwrap(), 5);
        got.extend(rx.iter().map(|p| p.data().to_vec()));
    }
    assert_eq!(got, sent, "byte-identical, in order");
    let bytes: u64 = sent.iter().map(|f| f.len() as u64).sum();
    let (ca, cb) = (da.counters(), db.counters());
    assert_eq!((ca.tx_frames, ca.tx_bytes), (100, bytes));
    assert_eq!((cb.rx_frames, cb.rx_bytes, cb.rx_dropped), (100, bytes, 0));
    assert_eq!(ca.notifies[1], 20, "one transmit doorbell per burst");
    assert_eq!(brx[0].stats().packets, 100);
    assert_eq!(iommu.faults(), 0);
}

#[test]
fn the_source_fills_posted_buffers_and_the_void_counts() {
    let iommu = Arc::new(SoftIommu::new("virtio model test"));
    let src = Source::udp(MacAddr([2, 0, 0, 0, 0, 2]), 64)
        .with_vlan(0x8100, 0xa064)
        .with_count(40);
    let want = src.frame();
    let da = VirtioModel::new(
        ModelConfig {
            source: Some(src),
            ..ModelConfig::default()
        },
        iommu.clone(),
    );
    let db = VirtioModel::new(ModelConfig::default(), iommu.clone());
    let mut a = VirtioPort::open_model(&da, "virtio:0", cfg()).unwrap();
    let mut b = VirtioPort::open_model(&db, "virtio:1", cfg()).unwrap();
    // DRIVER_OK and the first doorbell: every one of the 16 buffers filled.
    assert_eq!(da.counters().rx_frames, 16);
    let (mut arx, _) = a.take_queues().unwrap();
    let (_, mut btx) = b.take_queues().unwrap();
    let mut batch = Vec::new();
    let mut total = 0;
    for _ in 0..10 {
        let n = arx[0].rx_burst(&mut batch, 8).unwrap();
        assert!(batch.iter().all(|p| p.data() == &want[..]));
        total += n;
        assert_eq!(btx[0].tx_burst(&mut batch).unwrap(), n);
    }
    assert_eq!(total, 40, "exactly the source's count");
    let (ca, cb) = (da.counters(), db.counters());
    assert_eq!(ca.rx_frames, 40);
    assert_eq!(ca.rx_bytes, 40 * want.len() as u64);
    assert_eq!((cb.tx_frames, cb.tx_bytes), (40, 40 * want.len() as u64));
    assert_eq!(iommu.faults(), 0);
    drop((arx, btx, a, b));
    assert_eq!(iommu.faults(), 0, "rings mapped until the resets");
    assert_eq!(
        da.counters().resets,
        2,
        "at bring-up and when the port went"
    );
}

#[test]
fn only_natural_width_accesses_are_answered() {
    let m = VirtioModel::new(ModelConfig::default(), Arc::new(SoftIommu::new("t")));
    assert_eq!(m.read8(0x14), 0);
    assert_eq!(m.read16(0x12), 3);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| m.read32(0x14)));
    assert!(r.is_err(), "a 32-bit read of the 8-bit device_status");
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| m.read32(0x10)));
    assert!(r.is_err(), "a 32-bit read of two 16-bit fields");
}

/// The transmit walk leaves chains and short frames to its careful path: a chain arrives
/// linearized, a short frame padded to 60 bytes, each in its place among plain frames.
#[test]
fn chains_and_short_frames_among_plain_ones_arrive_in_order() {
    let iommu = Arc::new(SoftIommu::new("virtio model test"));
    let da = VirtioModel::new(ModelConfig::default(), iommu.clone());
    let db = VirtioModel::new(ModelConfig::default(), iommu.clone());
    VirtioModel::wire(&da, &db);
    let mut a = VirtioPort::open_model(&da, "virtio:0", cfg()).unwrap();
    let mut b = VirtioPort::open_model(&db, "virtio:1", cfg()).unwrap();
    let (arx, mut atx) = a.take_queues().unwrap();
    let (mut brx, _btx) = b.take_queues().unwrap();
    let pool = arx[0].pool().clone();
    let (f0, f2) = (frame(100, 1), frame(20, 3));
    let (h, t) = (frame(300, 2), vec![0x5a; 200]);
    let mut batch = Vec::new();
    for (i, f) in [&f0, &h, &f2].into_iter().enumerate() {
        let mut p = pool.alloc().unwrap();
        p.set_data(f);
        if i == 1 {
            let mut seg = pool.alloc().unwrap();
            seg.set_data(&t);
            p.push_segment(seg);
        }
        batch.push(p);
    }
    assert_eq!(atx[0].tx_burst(&mut batch).unwrap(), 3);
    let mut rx = Vec::new();
    assert_eq!(brx[0].rx_burst(&mut rx, 32).unwrap(), 3);
    let mut chained = h.clone();
    chained.extend_from_slice(&t);
    let mut padded = f2.clone();
    padded.resize(60, 0);
    let got: Vec<Vec<u8>> = rx.iter().map(|p| p.data().to_vec()).collect();
    assert_eq!(got, [f0, chained, padded]);
    assert_eq!(iommu.faults(), 0);
}

#[test]
fn a_device_thread_serves_both_queues_and_asks_for_no_doorbells() {
    use crate::devices::worker::DeviceThread;
    use std::time::{Duration, Instant};
    let iommu = Arc::new(SoftIommu::new("virtio model test"));
    let src = Source::udp(MacAddr([2, 0, 0, 0, 0, 2]), 64).with_count(400);
    let want = src.frame();
    let thread = DeviceThread::new();
    let da = VirtioModel::new(
        ModelConfig {
            source: Some(src),
            thread: Some(thread.clone()),
            ..ModelConfig::default()
        },
        iommu.clone(),
    );
    let db = VirtioModel::new(
        ModelConfig {
            thread: Some(thread),
            ..ModelConfig::default()
        },
        iommu.clone(),
    );
    assert!(da.threaded() && db.threaded() && da.thread_alive());
    let mut a = VirtioPort::open_model(&da, "virtio:0", cfg()).unwrap();
    let mut b = VirtioPort::open_model(&db, "virtio:1", cfg()).unwrap();
    let (mut arx, _) = a.take_queues().unwrap();
    let (_, mut btx) = b.take_queues().unwrap();
    let mut batch = Vec::new();
    let (mut total, mut sent) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(10);
    while (total < 400 || db.counters().tx_frames < 400) && Instant::now() < deadline {
        let n = arx[0].rx_burst(&mut batch, 8).unwrap();
        assert!(batch.iter().all(|p| p.data() == &want[..]));
        total += n;
        sent += btx[0].tx_burst(&mut batch).unwrap();
        // Frames the full transmit ring refused stay in the batch for the next burst.
        if n == 0 {
            std::thread::yield_now();
        }
    }
    assert_eq!((total, sent), (400, 400), "the device thread stalled");
    assert_eq!(db.counters().tx_frames, 400);
    assert_eq!(da.counters().rx_frames, 400);
    // Once the device has published with VIRTQ_USED_F_NO_NOTIFY, the driver rings no more:
    // only publishes before the device's first on that queue do. Receive: the buffers posted
    // at bring-up (nothing is re-posted before the first frames come back). Transmit: each
    // doorbell publishes at least one frame, and no more than the ring's 8 pairs can be out
    // before the device returns some.
    let (na, nb) = (da.counters().notifies[0], db.counters().notifies[1]);
    assert!(
        na <= 1 && nb <= 8,
        "doorbells: rx {na}, tx {nb} (of 50 bursts or more)"
    );
    let (busy_ns, polls) = da.busy();
    assert!(busy_ns > 0 && polls > 0);
    assert_eq!(iommu.faults(), 0);
}

/// A DMA fault stops the model, which sets DEVICE_NEEDS_RESET (virtio 1.2, 2.1.2): the port's
/// `link()` reports it. The fault: B's receive buffers taken out of the IOMMU while B runs.
#[test]
fn a_dma_fault_sets_device_needs_reset_which_link_reports() {
    use crate::platform::dma::DmaMapper;
    let iommu = Arc::new(SoftIommu::new("virtio model test"));
    let da = VirtioModel::new(ModelConfig::default(), iommu.clone());
    let db = VirtioModel::new(ModelConfig::default(), iommu.clone());
    VirtioModel::wire(&da, &db);
    let mut a = VirtioPort::open_model(&da, "virtio:0", cfg()).unwrap();
    let mut b = VirtioPort::open_model(&db, "virtio:1", cfg()).unwrap();
    let (arx, mut atx) = a.take_queues().unwrap();
    let (brx, _btx) = b.take_queues().unwrap();
    assert!(b.link().unwrap().up);
    let bpool = brx[0].pool().clone();
    // (The pool's own unmap then fails when it goes, and its memory is kept: logged.)
    iommu.unmap(bpool.iova(), bpool.mem_len()).unwrap();
    let mut batch = vec![arx[0].pool().alloc().unwrap()];
    batch[0].set_data(&frame(64, 1));
    assert_eq!(atx[0].tx_burst(&mut batch).unwrap(), 1);
    assert!(iommu.faults() > 0, "B's write of the frame faulted");
    assert_ne!(db.status() & status::DEVICE_NEEDS_RESET, 0);
    let e = b.link().unwrap_err().to_string();
    assert!(e.contains("DEVICE_NEEDS_RESET"), "{e}");
    assert!(a.link().unwrap().up, "A is not affected");
}
