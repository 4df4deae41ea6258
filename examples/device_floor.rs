//! The floor under `model_cost`: the least a CPU core playing the NIC costs per frame on this
//! machine, with the same traffic pattern and none of the model.
//!
//! Two threads, pinned as `model_cost` pins them (forwarder CPU 0, "device" CPU 1), share a
//! receive ring and a transmit ring of 512 16-byte descriptors and 2,048 buffers of 2 KiB. The
//! device writes a 64-byte frame into each receive buffer and a write-back with DD, and for each
//! transmit descriptor reads its first eight bytes and sets DD where RS asks; the forwarder
//! receives bursts of 32, refills from a LIFO of free buffers, transmits them with RS on each
//! burst's last descriptor and frees a burst when its DD comes back. Tails are separate cache
//! lines written with release stores. No registers, IOMMU, checks, counters or locks: what is
//! left is the lines that cross between the cores and a few instructions a frame.
//!
//!     cargo run --release --example device_floor -- 20000000
//!
//! It prints the forwarder's ns per packet and both sides' busy time (polls that found work),
//! as `model_cost` does, so the two can be read side by side. Argument: PACKETS (default
//! 20,000,000).

#[path = "common/out.rs"]
mod out;

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
use std::time::{Duration, Instant};

use vfio_nic::devices::sim::pin_current_thread;

const RING: usize = 512;
const BUFFERS: usize = 2048;
/// A buffer's size in 64-bit words (2 KiB).
const BUF_WORDS: usize = 256;
const BURST: usize = 32;
const DD: u64 = 1;
const RS: u64 = 2;

/// A tail register on its own cache line.
#[repr(align(64))]
#[derive(Default)]
struct Tail(AtomicU32);

/// What the two threads share: two rings (two words a descriptor), buffers, tails.
struct Shared {
    rx: Vec<AtomicU64>,
    tx: Vec<AtomicU64>,
    bufs: Vec<AtomicU64>,
    rdt: Tail,
    tdt: Tail,
    stop: AtomicBool,
}

fn next(i: usize) -> usize {
    if i + 1 == RING {
        0
    } else {
        i + 1
    }
}

fn main() {
    let packets: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000_000);
    let words = |n| (0..n).map(|_| AtomicU64::new(0)).collect::<Vec<_>>();
    let s = Shared {
        rx: words(2 * RING),
        tx: words(2 * RING),
        bufs: words(BUFFERS * BUF_WORDS),
        rdt: Tail::default(),
        tdt: Tail::default(),
        stop: AtomicBool::new(false),
    };
    if let Err(e) = pin_current_thread(0) {
        eprintln!("device_floor: {e}");
        std::process::exit(1);
    }
    let (took, sent, driver_busy, device_busy) = std::thread::scope(|sc| {
        let dev = sc.spawn(|| device(&s));
        let (took, sent, driver_busy) = forwarder(&s, packets);
        s.stop.store(true, Relaxed);
        (took, sent, driver_busy, dev.join().expect("device thread"))
    });
    let per = |d: Duration| d.as_nanos() as f64 / sent as f64;
    let report = out::line(format_args!(
        "{sent} packets in {:.3} s: {:.1} ns per packet forwarded; the forwarder busy {:.1} ns per packet; the device busy {:.1} ns per frame (receive and transmit)",
        took.as_secs_f64(),
        per(took),
        per(driver_busy),
        per(device_busy),
    ));
    out::exit("device_floor", report);
}

/// The device: places a frame per free receive descriptor and completes transmit descriptors,
/// up to 128 of each a poll; returns its busy time.
fn device(s: &Shared) -> Duration {
    if let Err(e) = pin_current_thread(1) {
        eprintln!("device_floor: {e}");
        std::process::exit(1);
    }
    let (mut rh, mut th, mut busy, mut seen) = (0usize, 0usize, Duration::ZERO, 0u64);
    while !s.stop.load(Relaxed) {
        let t0 = Instant::now();
        let mut did = false;
        let rdt = s.rdt.0.load(Acquire) as usize;
        for _ in 0..128 {
            if rh == rdt {
                break;
            }
            let at = s.rx[2 * rh].load(Relaxed) as usize;
            for (i, w) in s.bufs[at..at + 8].iter().enumerate() {
                w.store(0x5a5a_5a5a_0000_0000 | i as u64, Relaxed);
            }
            s.rx[2 * rh].store(0, Relaxed);
            s.rx[2 * rh + 1].store(64 << 32 | DD, Release);
            rh = next(rh);
            did = true;
        }
        let tdt = s.tdt.0.load(Acquire) as usize;
        for _ in 0..128 {
            if th == tdt {
                break;
            }
            let at = s.tx[2 * th].load(Relaxed) as usize;
            let cmd = s.tx[2 * th + 1].load(Relaxed);
            seen = seen.wrapping_add(s.bufs[at].load(Relaxed));
            if cmd & RS != 0 {
                s.tx[2 * th + 1].store(cmd | DD, Release);
            }
            th = next(th);
            did = true;
        }
        if did {
            busy += t0.elapsed();
        }
    }
    std::hint::black_box(seen);
    busy
}

/// The forwarder: receive a burst, refill, transmit it, free what completed; returns the
/// elapsed time, the packets sent and its busy time (iterations that received something).
fn forwarder(s: &Shared, packets: u64) -> (Duration, u64, Duration) {
    let mut free: Vec<usize> = (0..BUFFERS).map(|b| b * BUF_WORDS).collect();
    let mut rx_buf = [0usize; RING];
    let mut tx_buf = [0usize; RING];
    for (i, b) in rx_buf.iter_mut().enumerate().take(RING - 1) {
        *b = free.pop().expect("enough buffers");
        s.rx[2 * i].store(*b as u64, Relaxed);
    }
    s.rdt.0.store((RING - 1) as u32, Release);
    let (mut rnext, mut rtail, mut tnext, mut tclean) = (0, RING - 1, 0, 0);
    // Transmit descriptors with RS, oldest first (each burst's last).
    let mut rs = std::collections::VecDeque::<usize>::new();
    let (mut sent, mut busy) = (0u64, Duration::ZERO);
    let start = Instant::now();
    let mut got = [0usize; BURST];
    while sent < packets {
        let t0 = Instant::now();
        let mut g = 0;
        while g < BURST && s.rx[2 * rnext + 1].load(Acquire) & DD != 0 {
            got[g] = rx_buf[rnext];
            g += 1;
            rnext = next(rnext);
        }
        for _ in 0..g {
            let b = free.pop().expect("a buffer for every descriptor");
            rx_buf[rtail] = b;
            s.rx[2 * rtail].store(b as u64, Relaxed);
            s.rx[2 * rtail + 1].store(0, Relaxed);
            rtail = next(rtail);
        }
        if g > 0 {
            s.rdt.0.store(rtail as u32, Release);
        }
        while let Some(&last) = rs.front() {
            if s.tx[2 * last + 1].load(Acquire) & DD == 0 {
                break;
            }
            rs.pop_front();
            loop {
                free.push(tx_buf[tclean]);
                let done = tclean == last;
                tclean = next(tclean);
                if done {
                    break;
                }
            }
        }
        let room = (tclean + RING - tnext - 1) % RING;
        let n = g.min(room);
        for (i, &b) in got[..n].iter().enumerate() {
            tx_buf[tnext] = b;
            s.tx[2 * tnext].store(b as u64, Relaxed);
            let rs_bit = if i + 1 == n { RS } else { 0 };
            s.tx[2 * tnext + 1].store(64 << 32 | rs_bit, Relaxed);
            tnext = next(tnext);
        }
        free.extend_from_slice(&got[n..g]);
        if n > 0 {
            rs.push_back((tnext + RING - 1) % RING);
            s.tdt.0.store(tnext as u32, Release);
            sent += n as u64;
        }
        if g > 0 {
            busy += t0.elapsed();
        }
    }
    (start.elapsed(), sent, busy)
}
