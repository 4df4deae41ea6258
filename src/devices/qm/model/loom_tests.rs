//! The queue-manager portal's rings under loom, in threaded mode: the driver's real
//! `SwPortal` (`eq_write`, `eq_doorbell`, `pull`) on its thread, through the model's real
//! regions (`QmRegion`: CENA words and the CINH triggers), and the model's real device thread
//! work (`Inner::poll`: `engine::eqcr_consume`, `engine::pull`) on another; the driver's
//! reading of pull results is `QmRx::harvest`'s, step by step (`read_results`). Every CENA
//! word the models use is a loom atomic (`cena_loom.rs`), every result word a shadowed DMA
//! word, every frame copy loom-checked (`platform/dma/shadow.rs`).
//!
//! What is checked, over every interleaving loom explores:
//! - the enqueue ring (EQCR, memory-backed, EQCR_PI doorbell): the device reads each entry the
//!   driver wrote before its doorbell, whole, with the valid bit of its pass (the ring starts
//!   one entry before its wrap, so the second entry carries the flipped valid bit over an
//!   entry of the previous pass): no stale entry is counted, each frame goes out once with
//!   its bytes, and its buffer comes back to its pool. This rests on the doorbell's `dma_wmb`
//!   (`Mmio::doorbell`; DPDK's `dma_wmb()` before the EQCR_PI write; the model's trigger
//!   store is relaxed in this build, as a register write, `region.rs`) and the device's
//!   acquire load of the producer index (`Inner::poll`);
//! - pull results: the driver sees a result only once its first word carries the pull's token,
//!   and reads the frame descriptor and the frame after it; this rests on the device's release
//!   store of the first word, written last (`engine::pull`), and the driver's relaxed load of
//!   it followed by `dma_rmb` (`QmRx::harvest`);
//! - with three threads (a transmit and a receive queue on their own portals, as a port has
//!   them), a frame enqueued on one portal to the receive queue is pulled on the other, its
//!   bytes written by the one thread and read by the other.
//!
//! Without its barrier each fails (the `_fails_without_` tests): without `dma_wmb` the device
//! reads the entry before the driver's words ("qm: the device read a stale enqueue entry"; or
//! the frame's bytes racing the driver's write); without `dma_rmb` the driver reads the frame
//! descriptor before the device wrote it ("qm: FD of frame ...").

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::{Arc, Mutex};

use loom::sync::atomic::AtomicBool as LoomBool;

use super::*;
use crate::devices::qm::layout::{dq, eq, Fd, EQCR_SIZE, VALID_BIT};
use crate::devices::qm::portal::SwPortal;
use crate::devices::worker::Polled;
use crate::platform::barrier::dma_rmb;
use crate::platform::barrier::loom_model::{omitting, Barrier};
use crate::platform::dma::DmaMemory;
use state::{rx_fqid, tx_fqid};

/// Bytes per frame, and per buffer.
const FRAME: usize = 60;
const BUF: usize = 128;

/// Frame `k`'s bytes.
fn frame(k: usize) -> [u8; FRAME] {
    [0x60 + k as u8; FRAME]
}

/// One port (DPNI 0, enabled, its pool DPBP 0 enabled) in threaded mode with its two
/// portals (0 receives, 1 transmits), whose enqueue rings stand at `eq_at`; in each portal's
/// CENA only the words the models use exist: the enqueue entries `eq_at` and the one after,
/// the written-back consumer index and the pull command.
fn soc(eq_at: u32) -> Arc<Inner> {
    let entries = [eq_at, (eq_at + 1) % EQCR_SIZE].map(cena::eqcr);
    let used = |w: usize| {
        let b = 4 * w;
        entries.iter().any(|&e| (e..e + 64).contains(&b))
            || b == cena::EQCR_CI
            || (cena::VDQCR..cena::VDQCR + 16).contains(&b)
    };
    let cena_words = || -> Box<[CenaWord]> {
        (0..cena::SIZE / 4)
            .map(|w| {
                if used(w) {
                    CenaWord::new(0)
                } else {
                    CenaWord::absent()
                }
            })
            .collect()
    };
    let mut s = SocState::new(&[MacAddr([2, 0, 0, 0, 0, 1])], &[None]);
    s.dpnis[0].enabled = true;
    s.dpnis[0].master = true;
    s.dpbps[0].enabled = true;
    let hot: Box<[Hot]> = (0..PORTALS_PER_PORT).map(|_| Hot::default()).collect();
    for h in hot.iter() {
        // Initialised (`before_ready`), the ring at `eq_at`, its entries before it consumed.
        h.driver.ready.store(true, Relaxed);
        h.driver.pi.store(eq_at, Relaxed);
        h.device.ci.store(eq_at, Relaxed);
    }
    Arc::new(Inner {
        iommu: Arc::new(SoftIommu::new("loom")),
        state: Mutex::new(s),
        mode: Mode::Threaded,
        hot,
        busy: Busy::default(),
        alive: Arc::new(std::sync::atomic::AtomicBool::new(true)),
        cena: (0..PORTALS_PER_PORT).map(|_| cena_words()).collect(),
        mcp: (0..1).map(|_| Default::default()).collect(),
        gone: (0..1)
            .map(|_| std::sync::atomic::AtomicBool::new(false))
            .collect(),
    })
}

/// The driver's portal `p` of DPNI 0, taken over as it stands (`SwPortal::attach`: its
/// initialisation is taken as done, `soc`).
fn portal(soc: &Arc<Inner>, p: usize) -> SwPortal<QmRegion> {
    let region = |kind| {
        Arc::new(QmRegion {
            soc: soc.clone(),
            d: 0,
            kind,
        })
    };
    SwPortal::attach(region(Kind::Cena(p)), region(Kind::Cinh(p)), "loom").unwrap()
}

/// `n` buffers through the model's IOMMU, their bytes checked by loom.
fn buffers(soc: &Inner, n: usize) -> Arc<DmaMemory> {
    let m = DmaMemory::allocate(n * BUF, soc.iommu.clone()).unwrap();
    m.loom_bytes(0, n * BUF);
    Arc::new(m)
}

/// The FD of frame `k` in buffer `k` of `bufs`, released to DPBP 0's pool after transmit.
fn fd(bufs: &DmaMemory, k: usize) -> Fd {
    Fd::simple(
        bufs.iova() + (k * BUF) as u64,
        FRAME as u32,
        state::bpid_of(0),
        0,
    )
}

/// The device thread (`DeviceThread`'s loop over `Polled::poll`), until `stop` is set and a
/// poll finds nothing to do.
fn device(soc: &Inner, stop: &LoomBool) {
    loop {
        let last = stop.load(Acquire);
        let busy = soc.poll();
        // An entry behind the producer index with the valid bit of the previous pass: the
        // device read it before the driver's words (the model counts it and waits, which
        // loom would explore for ever).
        assert_eq!(
            soc.lock().faults.stale_commands,
            0,
            "qm: the device read a stale enqueue entry behind the producer index"
        );
        if !busy {
            if last {
                return;
            }
            loom::thread::yield_now();
        }
    }
}

/// Reads the results of the pull with token `tok` from `storage` as `QmRx::harvest` does,
/// waiting for each (loom's turn to the others): the first word (a relaxed load, then
/// `dma_rmb`) until it carries a token, zeroed again, then (for a frame) the four FD words; until the result
/// marked EXPIRED. The FDs of the frames.
fn read_results(storage: &DmaMemory, tok: u8) -> Vec<Fd> {
    let results = storage.words::<u64>(0, 2 * dq::SIZE / 8);
    let mut fds = Vec::new();
    for next in 0.. {
        let at = next * dq::SIZE / 8;
        let w0 = loop {
            let w0 = results.load(at, Relaxed);
            dma_rmb();
            if dq::tok(w0) != 0 {
                break w0;
            }
            loom::thread::yield_now();
        };
        results.store(at, 0, Relaxed);
        assert_eq!(dq::tok(w0), tok, "qm: a result of another pull");
        assert_eq!(dq::verb(w0) & dq::VERB_MASK, dq::VERB_DQ, "qm: result verb");
        let stat = dq::stat(w0);
        if stat & dq::STAT_VALIDFRAME != 0 {
            fds.push(Fd::from_u64s(std::array::from_fn(|k| {
                results.load(at + dq::FD / 8 + k, Relaxed)
            })));
        }
        if stat & dq::STAT_EXPIRED != 0 {
            break;
        }
    }
    fds
}

/// Reads frame `fd` from `bufs` (loom-checked) and checks it is frame `k`.
fn check(bufs: &DmaMemory, fd: &Fd, k: usize) {
    assert_eq!(
        fd.addr(),
        bufs.iova() + (k * BUF) as u64,
        "qm: FD of frame {k}"
    );
    assert_eq!(fd.len() as usize, FRAME, "qm: length of frame {k}");
    let mut b = [0u8; FRAME];
    bufs.read_bytes(k * BUF, &mut b);
    assert_eq!(b, frame(k), "qm: bytes of frame {k}");
}

/// After the threads: nothing refused or faulted, and the pool holds `released` buffers.
fn check_faults(soc: &Inner, released: usize) {
    let s = soc.lock();
    assert_eq!(s.faults.stale_commands, 0, "qm: stale enqueue entries seen");
    assert_eq!(s.faults.bad_commands, 0, "qm: commands refused");
    assert_eq!(s.faults.dma_faults, 0, "qm: DMA faults");
    assert_eq!(
        s.dpbps[0].bufs.len(),
        released,
        "qm: buffers back in the pool"
    );
    assert_eq!(soc.iommu.faults(), 0);
}

/// Two threads, the enqueue ring: the driver writes two frames and enqueues each to the
/// transmit queue (an entry and an EQCR_PI doorbell each), across the ring's wrap (entry 31,
/// then entry 0 with the other valid bit, over an entry of the previous pass); the device
/// thread consumes them. Each goes out once with its bytes, its buffer back in the pool.
fn enqueue_ring() {
    crate::devices::loom::model(3, || {
        let soc = soc(EQCR_SIZE - 1);
        // Entry 0 as the previous pass left it: a valid entry of that pass.
        soc.cena[1][0].store(eq::VERB_REJECTS_TO_FQ | VALID_BIT, Relaxed);
        let bufs = buffers(&soc, 2);
        let stop = loom::sync::Arc::new(LoomBool::new(false));
        let (s, b, st) = (soc.clone(), bufs.clone(), stop.clone());
        let driver = crate::devices::loom::spawn(move || {
            let mut tx = portal(&s, 1);
            for k in 0..2 {
                b.write_bytes(k * BUF, &frame(k));
                assert!(tx.eq_room(1).unwrap() >= 1);
                tx.eq_write(tx_fqid(0), &fd(&b, k));
                tx.eq_doorbell();
            }
            st.store(true, Release);
        });
        device(&soc, &stop);
        driver.join().unwrap();
        check_faults(&soc, 2);
        let s = soc.lock();
        assert_eq!(s.dpnis[0].counters.egress[0], 2, "qm: frames sent");
        assert_eq!(s.dpnis[0].counters.egress[1], 2 * (FRAME as u64 + 4));
        assert_eq!(soc.hot[1].device.ci.load(Relaxed), EQCR_SIZE + 1);
    });
}

/// Two threads, pull results: two frames wait on the receive queue; the driver pulls them
/// (the VDQCR command and its read trigger) and reads the results as they come; the device
/// thread answers the pull. Each frame arrives once, with its descriptor and its bytes.
fn pull_results() {
    crate::devices::loom::model(3, || {
        let soc = soc(0);
        let bufs = buffers(&soc, 2);
        for k in 0..2 {
            bufs.write_bytes(k * BUF, &frame(k));
            soc.lock().dpnis[0].rx_fq.push_back(fd(&bufs, k));
        }
        let storage = DmaMemory::allocate(2 * dq::SIZE, soc.iommu.clone()).unwrap();
        storage.loom_words(0, 2 * dq::SIZE);
        let storage = Arc::new(storage);
        let stop = loom::sync::Arc::new(LoomBool::new(false));
        let (s, b, m, st) = (soc.clone(), bufs.clone(), storage.clone(), stop.clone());
        let driver = crate::devices::loom::spawn(move || {
            let rx = portal(&s, 0);
            rx.pull(m.iova(), rx_fqid(0), 2, 1);
            let fds = read_results(&m, 1);
            assert_eq!(fds.len(), 2, "qm: frames pulled");
            for (k, fd) in fds.iter().enumerate() {
                check(&b, fd, k);
            }
            st.store(true, Release);
        });
        device(&soc, &stop);
        driver.join().unwrap();
        check_faults(&soc, 0);
    });
}

/// Three threads, a port's two queues: the transmit thread writes a frame and enqueues it on
/// its portal (1) to the receive queue (a portal may enqueue to any frame queue); the receive
/// thread pulls on its portal (0) until a pull brings the frame, and reads it; the device
/// thread serves both portals. The frame's bytes, written by the one thread, are read by the
/// other after the enqueue ring, the device and the pull result ordered them.
#[test]
fn loom_qm_enqueue_to_pull_three_threads() {
    crate::devices::loom::model(2, || {
        let soc = soc(0);
        let bufs = buffers(&soc, 1);
        let storage = DmaMemory::allocate(2 * dq::SIZE, soc.iommu.clone()).unwrap();
        storage.loom_words(0, 2 * dq::SIZE);
        let storage = Arc::new(storage);
        let stop = loom::sync::Arc::new(LoomBool::new(false));
        let (s, b) = (soc.clone(), bufs.clone());
        let sender = crate::devices::loom::spawn(move || {
            let mut tx = portal(&s, 1);
            b.write_bytes(0, &frame(0));
            assert!(tx.eq_room(1).unwrap() >= 1);
            tx.eq_write(rx_fqid(0), &fd(&b, 0));
            tx.eq_doorbell();
        });
        let (s, b, m, st) = (soc.clone(), bufs.clone(), storage.clone(), stop.clone());
        let receiver = crate::devices::loom::spawn(move || {
            let rx = portal(&s, 0);
            // (A few pulls: a schedule that runs every one of them before the enqueue leaves
            // the frame queued, which is checked below.)
            let mut got = false;
            for tok in 1..=3 {
                rx.pull(m.iova(), rx_fqid(0), 1, tok);
                if let Some(fd) = read_results(&m, tok).first() {
                    check(&b, fd, 0);
                    got = true;
                    break;
                }
            }
            st.store(true, Release);
            got
        });
        device(&soc, &stop);
        sender.join().unwrap();
        let got = receiver.join().unwrap();
        check_faults(&soc, 0);
        let queued = soc.lock().dpnis[0].rx_fq.len();
        assert_eq!(
            usize::from(!got),
            queued,
            "qm: the frame is received or still queued"
        );
    });
}

#[test]
fn loom_qm_enqueue_ring_two_threads() {
    enqueue_ring();
}

#[test]
#[should_panic(expected = "qm: the device read")]
fn loom_qm_enqueue_ring_fails_without_dma_wmb() {
    omitting(&[Barrier::DmaWmb], enqueue_ring);
}

#[test]
fn loom_qm_pull_results_two_threads() {
    pull_results();
}

#[test]
#[should_panic(expected = "qm: FD of frame")]
fn loom_qm_pull_results_fails_without_dma_rmb() {
    omitting(&[Barrier::DmaRmb], pull_results);
}
