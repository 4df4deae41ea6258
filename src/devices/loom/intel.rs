//! The Intel receive ring under loom: the driver's real `RxRing` (`start`, `rx_burst`: it
//! arms descriptors with buffers, writes the tail through `Mmio::doorbell`, polls DD and reads
//! the write-back and the frame) on its thread, the software 82599's receive write-back on the
//! device's (`Device::place`, step by step as `SimRegs::place_one` does it), through the
//! software IOMMU. The ring is the real one's smallest, 32 descriptors; what the models do
//! before their threads start runs on one thread (loom explores nothing there).
//!
//! What is checked, over every interleaving loom explores:
//! - a descriptor the driver re-arms is handed over by the tail it writes after, and the device
//!   reads the new buffer address, never the old write-back (an old word would be a bus address
//!   nothing maps: a software IOMMU fault); this rests on the doorbell's `dma_wmb`
//!   (`Mmio::doorbell`, Linux's `writel`) and the device's acquire read of the tail;
//! - the driver takes a frame only after DD, and reads the rest of the write-back (the packet
//!   type, on the slow path) and the frame's bytes after the device wrote them (the copies are
//!   loom-checked); this rests on the device's release store of the write-back's second word
//!   and the driver's relaxed load of it followed by `dma_rmb` (`RxRing::harvest`, `slow_one`:
//!   Linux `igb_clean_rx_irq`);
//!
//! Without its barrier each fails (the `_fails_without_` tests): without `dma_wmb` the device
//! can take the re-armed descriptor before the driver's stores to it, and the driver's store of
//! its second word (clearing DD) lands after the device's write-back, which is lost: loom finds
//! a frame missing ("intel: frame ..."; the device reading the old write-back as the buffer
//! address, a software IOMMU fault, is the other way it fails); without `dma_rmb` the driver's
//! read of the frame races the device's write of it (loom's "Causality violation").

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::Arc as StdArc;

use loom::sync::atomic::AtomicBool;
use loom::sync::Arc;

use super::{model, Regs};
use crate::devices::intel::desc::RxStatus;
use crate::devices::intel::rx::{ChipRx, RxRing};
use crate::platform::barrier::loom_model::{omitting, Barrier};
use crate::platform::dma::{DmaView, Meta, Packet, Pool, PoolConfig, SoftIommu};

/// Descriptors: the smallest ring the driver takes (`MIN_RING`).
const N: usize = 32;
/// The queue's registers (RDH, RDT) at the software 82599's offsets in its queue block.
const HEAD: usize = 0x10;
const TAIL: usize = 0x18;
/// The 82599's receive error bits (`ixgbe::queue::RX`): L4E at bit 30.
const CHIP: ChipRx = ChipRx::errors(29, 31, 30).udp_l4_error_unreliable();
const L4E: u32 = 1 << 30;
/// Write-back word 0 (pkt_info): IPv4 and TCP, or IPv4 and UDP (bit 9).
const TCP: u64 = 0x110;
const UDP: u64 = 0x210;
/// A good frame's status: DD, EOP, IP and L4 checksums checked.
const GOOD: u32 = RxStatus::DD | RxStatus::EOP | RxStatus::IPCS | RxStatus::L4CS;
const FRAME: usize = 60;

/// Frame `k`'s bytes.
fn frame(k: u8) -> [u8; FRAME] {
    [k; FRAME]
}

/// Checks that `p` holds frame `k` (its bytes read through `Packet::data`, loom-checked).
fn check(p: &Packet, k: u8) {
    assert_eq!(p.data(), frame(k), "intel: frame {k}'s bytes");
}

/// The software 82599's view of the ring: its cursor (`RingCursor`, sim/engine.rs).
struct Device {
    base: u64,
    head: usize,
    tail: usize,
}

impl Device {
    /// Free descriptors between the head and the tail last read (`RingCursor::free`).
    fn free(&self) -> usize {
        (self.tail + N - self.head) % N
    }

    /// Places frame `k` in the descriptor at the head, with write-back word 0 `lo` and status
    /// `staterr`; false when the ring has no free descriptor, even after reading RDT again.
    /// `SimRegs::place` and `place_one` (sim/rx_ring.rs), step by step: RDT read again when the
    /// descriptors known are used up (`reread_tail`: an acquire load of the register), the
    /// descriptor's buffer address read (acquire), the frame written into the buffer, word 0
    /// stored, then word 1 (DD, EOP, status, length: `wb_hi`) with a release store, and RDH
    /// advanced (`advance`).
    fn place(&mut self, v: &DmaView<'_>, regs: &Regs, k: u8, lo: u64, staterr: u32) -> bool {
        if self.free() == 0 {
            self.tail = regs.get(TAIL) as usize;
            if self.free() == 0 {
                return false;
            }
        }
        let d = self.base + (self.head * 16) as u64;
        let addr = v.load_u64(d, Acquire).unwrap();
        v.write(addr, &frame(k))
            .expect("intel: the device's DMA faulted (a descriptor read before its re-arm?)");
        v.store_u64(d, lo, Relaxed).unwrap();
        let hi = u64::from(staterr) | (FRAME as u64) << 32;
        v.store_u64(d + 8, hi, Release).unwrap();
        self.head = (self.head + 1) % N;
        regs.set(HEAD, self.head as u32);
        true
    }

    /// [`place`](Self::place), waiting (loom's turn to the others) until the ring has room.
    fn place_waiting(&mut self, v: &DmaView<'_>, regs: &Regs, k: u8) {
        while !self.place(v, regs, k, TCP, GOOD) {
            loom::thread::yield_now();
        }
    }
}

/// A ring of [`N`] started (RDT = N - 1), over a pool of `buffers` buffers of 128 bytes behind
/// 128 of headroom through a software IOMMU, its bytes checked by loom; the device's cursor.
fn ring(buffers: usize) -> (StdArc<SoftIommu>, StdArc<Regs>, RxRing<Regs>, Device) {
    let iommu = StdArc::new(SoftIommu::new("loom"));
    let cfg = PoolConfig {
        buffers,
        buf_size: 256,
        headroom: 128,
    };
    let pool = Pool::new(cfg, iommu.clone()).unwrap();
    pool.memory().loom_bytes(0, buffers * 256);
    let regs = StdArc::new(Regs::new(8));
    let mut ring = RxRing::new(regs.clone(), TAIL, HEAD, N, pool, CHIP).unwrap();
    ring.start();
    let dev = Device {
        base: ring.desc_iova(),
        head: 0,
        tail: 0,
    };
    (iommu, regs, ring, dev)
}

/// Receives until `want` frames are in `got` (a burst at a time, the device's turn between).
fn receive(ring: &mut RxRing<Regs>, got: &mut Vec<Packet>, want: usize) {
    while got.len() < want {
        ring.rx_burst(got, want - got.len()).unwrap();
    }
}

/// After the threads: receives the frames `expect` names, in order, checking and freeing each
/// (its buffer re-arms a later slot), then checks that nothing more is there.
fn drain(ring: &mut RxRing<Regs>, expect: impl IntoIterator<Item = u8>) {
    let mut batch = Vec::new();
    for k in expect {
        assert_eq!(ring.rx_burst(&mut batch, 1).unwrap(), 1, "intel: frame {k}");
        check(&batch[0], k);
        batch.clear();
    }
    assert_eq!(
        ring.rx_burst(&mut batch, 1).unwrap(),
        0,
        "intel: no more frames"
    );
}

/// Two threads, the doorbell: the device has filled every descriptor it was given (the ring
/// is full, the device waits for the tail). The driver takes frames 0 and 1 in two bursts of
/// one, re-arming each slot with a fresh buffer and writing the tail after each; the device,
/// meanwhile, places two frames as the tail lets it: into slot 31 (armed since the start) and
/// slot 0 (re-armed by the first burst). Then everything is received in order, the two new
/// frames in their new buffers, and frames 0 and 1 were never written over.
fn rearm_and_tail() {
    model(2, || {
        let (iommu, regs, mut ring, mut dev) = ring(N + 2);
        let view = iommu.view();
        for k in 0..N as u8 - 1 {
            assert!(dev.place(&view, &regs, k, TCP, GOOD));
        }
        drop(view);
        let driver = super::spawn(move || {
            let mut got = Vec::new();
            receive(&mut ring, &mut got, 1);
            receive(&mut ring, &mut got, 2);
            check(&got[0], 0);
            check(&got[1], 1);
            (ring, got)
        });
        {
            let view = iommu.view();
            dev.place_waiting(&view, &regs, 0xa0);
            dev.place_waiting(&view, &regs, 0xa1);
        }
        let (mut ring, got) = driver.join().unwrap();
        // Frames 0 and 1 were not written over.
        check(&got[0], 0);
        check(&got[1], 1);
        drop(got);
        drain(&mut ring, (2..N as u8 - 1).chain([0xa0, 0xa1]));
        assert_eq!(iommu.faults(), 0);
    });
}

/// Two threads, the write-back: on a fresh ring the device writes back two frames while the
/// driver polls: a plain good one (the fast path: DD, length, the bytes) and a UDP frame with
/// the 82599's L4 error, which the slow path takes and reads write-back word 0 for (the packet
/// type: a UDP checksum error is not to be believed, `udp_l4_error_unreliable`). The driver
/// sees each with its bytes and its flags.
fn writeback_and_harvest() {
    model(3, || {
        let (iommu, regs, mut ring, mut dev) = ring(N + 2);
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        let driver = super::spawn(move || {
            let mut got = Vec::new();
            loop {
                let last = d.load(Acquire);
                ring.rx_burst(&mut got, 2).unwrap();
                if got.len() == 2 || last {
                    break;
                }
                loom::thread::yield_now();
            }
            for (k, p) in got.iter().enumerate() {
                check(p, k as u8);
            }
            let flags: Vec<u16> = got.iter().map(|p| p.meta.flags).collect();
            (ring, got.len(), flags)
        });
        {
            let view = iommu.view();
            assert!(dev.place(&view, &regs, 0, TCP, GOOD));
            assert!(dev.place(&view, &regs, 1, UDP, GOOD | L4E));
        }
        done.store(true, Release);
        let (_ring, n, flags) = driver.join().unwrap();
        assert_eq!(n, 2, "intel: frames received");
        let ok = Meta::RX_IP_CSUM_OK | Meta::RX_L4_CSUM_OK;
        assert_eq!(flags, [ok, Meta::RX_IP_CSUM_OK], "intel: receive flags");
        assert_eq!(iommu.faults(), 0);
    });
}

#[test]
fn loom_intel_rx_rearm_and_tail_two_threads() {
    rearm_and_tail();
}

#[test]
#[should_panic(expected = "intel: frame")]
fn loom_intel_rx_rearm_and_tail_fails_without_dma_wmb() {
    omitting(&[Barrier::DmaWmb], rearm_and_tail);
}

#[test]
fn loom_intel_rx_writeback_and_harvest_two_threads() {
    writeback_and_harvest();
}

#[test]
#[should_panic(expected = "Causality violation")]
fn loom_intel_rx_writeback_and_harvest_fails_without_dma_rmb() {
    omitting(&[Barrier::DmaRmb], writeback_and_harvest);
}
