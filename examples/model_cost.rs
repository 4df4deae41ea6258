//! What the software 82599 costs per frame in threaded mode, on its own core: forwards a fixed
//! number of packets from port A (a traffic source, 64-byte UDP frames) to port B (which
//! transmits into the void), with this thread on CPU 0 and the ports' one device thread on
//! CPU 1, and prints the forwarder's ns per packet, the driver's busy time per packet (its
//! bursts that received something) and the model's busy time per frame. Whichever of the two
//! busy times is the larger sets the pace; the other side then waits.
//!
//!     cargo run --release --example model_cost -- 20000000
//!
//! Under callgrind the device thread's instructions per frame are its thread's total over the
//! packets printed (deterministic enough to compare versions of the model; the bench's timed
//! figures are the ones to quote):
//!
//!     valgrind --tool=callgrind --fair-sched=yes --separate-threads=yes \
//!         --callgrind-out-file=cg.out target/release/examples/model_cost 300000
//!     grep totals: cg.out-02     # the device thread
//!
//! Argument: PACKETS (default 20,000,000).

#[macro_use]
#[path = "common/out.rs"]
mod out;

use std::time::{Duration, Instant};

use vfio_nic::device::{MacAddr, Port, RxQueue, TxQueue};
use vfio_nic::devices::ixgbe::{IxgbeConfig, IxgbePort};
use vfio_nic::devices::sim::{pin_current_thread, DeviceThread, Mode, SimConfig, SimPort, Source};
use vfio_nic::platform::dma::PoolConfig;

fn main() {
    out::exit("model_cost", run());
}

fn run() -> vfio_nic::Result<()> {
    let packets: u64 = match std::env::args().nth(1) {
        Some(a) => a.parse().map_err(|_| {
            vfio_nic::Error::InvalidConfig("the argument is a number of packets".into())
        })?,
        None => 20_000_000,
    };
    pin_current_thread(0)?;
    let cfg = SimConfig {
        mode: Mode::Threaded,
        thread: Some(DeviceThread::pinned(1)),
        ..SimConfig::default()
    };
    let dst = MacAddr([0x02, 0, 0, 0, 0, 2]);
    let sa = SimPort::with_source(cfg.clone(), Source::udp(dst, 64));
    // B's own source never sends: B only transmits.
    let sb = SimPort::with_source(cfg, Source::udp(dst, 64).with_count(0));
    let icfg = IxgbeConfig {
        rx_ring: 512,
        tx_ring: 512,
        pool: PoolConfig {
            buffers: 2048,
            ..PoolConfig::default()
        },
        link_timeout: Duration::from_secs(2),
        ..IxgbeConfig::default()
    };
    let mut a = IxgbePort::open(sa.clone(), icfg.clone())?;
    let mut b = IxgbePort::open(sb.clone(), icfg)?;
    let (mut rx, _) = a.take_queues()?;
    let (_, mut tx) = b.take_queues()?;
    let mut batch = Vec::with_capacity(32);
    let (mut sent, start) = (0u64, Instant::now());
    let queue = |e| vfio_nic::Error::InvalidConfig(format!("burst failed: {e}"));
    // The forwarder's own busy time: the iterations that received something (one clock read
    // an iteration; an iteration runs from its clock read to the next one).
    let (mut driver_busy, mut empty, mut t0, mut got) = (Duration::ZERO, 0u64, start, 1);
    while sent < packets {
        let t = Instant::now();
        if got > 0 {
            driver_busy += t - t0;
        } else {
            empty += 1;
        }
        t0 = t;
        got = rx[0].rx_burst(&mut batch, 32).map_err(queue)?;
        sent += tx[0].tx_burst(&mut batch).map_err(queue)? as u64;
        batch.clear(); // (anything the ring did not take is freed)
    }
    let took = start.elapsed();
    driver_busy += took.saturating_sub(t0 - start);
    let busy = sa.counters().busy_ns + sb.counters().busy_ns;
    let per = |ns: u128| ns as f64 / sent as f64;
    outln!(
        "{sent} packets in {:.3} s: {:.1} ns per packet forwarded; the driver busy {:.1} ns per packet on its core ({empty} polls found nothing); the model busy {:.1} ns per frame on its core (receive {:.1}, transmit {:.1})",
        took.as_secs_f64(),
        per(took.as_nanos()),
        per(driver_busy.as_nanos()),
        per(u128::from(busy)),
        per(u128::from(sa.counters().busy_ns)),
        per(u128::from(sb.counters().busy_ns)),
    );
    let (pa, pb) = (sa.counters().busy_polls, sb.counters().busy_polls);
    outln!(
        "the device thread worked in {pa} polls of the receiving port ({:.1} frames each) and {pb} of the transmitting one ({:.1} frames each)",
        sent as f64 / pa.max(1) as f64,
        sent as f64 / pb.max(1) as f64,
    );
    Ok(())
}
