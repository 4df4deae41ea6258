//! Forwards frames between two ports, like DPDK testpmd's io mode: whatever arrives on one port
//! leaves through the other, untouched.
//!
//!     cargo run --release --example forward                       # sim:0 <-> sim:1
//!     cargo run --release --example forward -- null:0 null:1
//!     cargo run --release --example forward -- 0000:01:00.0 0000:02:00.0 --seconds 10
//!
//! The default is the ixgbe driver on two software 82599 ports wired to each other. Like
//! testpmd's `--tx-first`, each port first sends one burst of 64-byte IPv4/UDP frames
//! (`--tx-first N` frames, 0 to skip); on a wired pair those frames then circle through both
//! ports, receive and transmit rings, and the driver's every per-packet step, for as long as it
//! runs. Prints packets and Mpps per direction once a second, and a summary at the end.

#[macro_use]
#[path = "common/out.rs"]
mod out;

use std::time::{Duration, Instant};

use vfio_nic::app::wire::{build_udp_frame, UdpFlow};
use vfio_nic::device::{Port, RxQueue, TxQueue};
use vfio_nic::devices::{self, AnyRx, AnyTx, PortConfig};
use vfio_nic::platform::dma::{Packet, Pool};

const BURST: usize = 32;

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    out::exit("forward", run());
}

fn run() -> vfio_nic::Result<()> {
    let mut args = std::env::args().skip(1);
    let mut names = Vec::new();
    let mut seconds = 3.0f64;
    let mut tx_first = 64usize;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--tx-first" => {
                tx_first = args.next().and_then(|s| s.parse().ok()).ok_or_else(|| {
                    vfio_nic::Error::InvalidConfig("--tx-first takes a number of frames".into())
                })?
            }
            "--seconds" => {
                seconds = args.next().and_then(|s| s.parse().ok()).ok_or_else(|| {
                    vfio_nic::Error::InvalidConfig("--seconds takes a number".into())
                })?
            }
            "-h" | "--help" => {
                outln!(
                    "usage: forward [PORT_A PORT_B] [--seconds S] [--tx-first N]   (default: sim:0 sim:1, 3 s, 64 frames)"
                );
                return Ok(());
            }
            _ => names.push(a),
        }
    }
    if names.is_empty() {
        names = vec!["sim:0".into(), "sim:1".into()];
    }
    if names.len() != 2 {
        return Err(vfio_nic::Error::InvalidConfig(
            "give two ports, or none for sim:0 sim:1".into(),
        ));
    }
    let config = PortConfig::default();
    let mut a = devices::open(&names[0], &config)?;
    let mut b = devices::open(&names[1], &config)?;
    let (mut a_rx, mut a_tx) = a.take_queues()?;
    let (mut b_rx, mut b_tx) = b.take_queues()?;
    outln!(
        "forwarding {} <-> {} for {seconds} s, burst {BURST}",
        a.info().name,
        b.info().name
    );

    let mut batch: Vec<Packet> = Vec::with_capacity(BURST);
    prime(
        &mut a_rx[0],
        &mut a_tx[0],
        &a.info(),
        &b.info(),
        tx_first,
        &mut batch,
    )?;
    prime(
        &mut b_rx[0],
        &mut b_tx[0],
        &b.info(),
        &a.info(),
        tx_first,
        &mut batch,
    )?;
    let start = Instant::now();
    let mut last = start;
    let mut last_counts = [0u64; 2];
    let mut counts = [0u64; 2];
    let end = start + Duration::from_secs_f64(seconds);
    loop {
        counts[0] += forward(&mut a_rx[0], &mut b_tx[0], &mut batch)?;
        counts[1] += forward(&mut b_rx[0], &mut a_tx[0], &mut batch)?;
        let now = Instant::now();
        if now.duration_since(last) >= Duration::from_secs(1) || now >= end {
            let dt = now.duration_since(last).as_secs_f64();
            outln!(
                "{:6.1} s  {} -> {}: {:>12} pkts {:8.2} Mpps   {} -> {}: {:>12} pkts {:8.2} Mpps",
                now.duration_since(start).as_secs_f64(),
                names[0],
                names[1],
                counts[0],
                (counts[0] - last_counts[0]) as f64 / dt / 1e6,
                names[1],
                names[0],
                counts[1],
                (counts[1] - last_counts[1]) as f64 / dt / 1e6,
            );
            last = now;
            last_counts = counts;
            if now >= end {
                break;
            }
        }
    }
    let total = counts[0] + counts[1];
    let secs = start.elapsed().as_secs_f64();
    outln!(
        "total {total} packets in {secs:.2} s: {:.2} Mpps, {:.1} ns per packet; buffers held by rings and in flight: {}",
        total as f64 / secs / 1e6,
        secs * 1e9 / total.max(1) as f64,
        a_rx[0].pool().stats().in_use + b_rx[0].pool().stats().in_use
    );
    // What the figure measures, so that nobody reads a model's speed as the driver's.
    let inline_sim = [&a, &b].iter().any(|p| p.info().name.starts_with("sim:"));
    if inline_sim {
        outln!(
            "what this measures: the ixgbe driver AND the software 82599 doing the device's work inside the driver's register writes, on this one thread; the driver's own cost is about 70 instructions per packet (bench/instructions), the model's the rest; `vfio-nic bench` compares VLAN placements with the device on another core"
        );
    } else if [&a, &b].iter().all(|p| p.info().driver == "null") {
        outln!(
            "what this measures: the burst API, the buffer pools and the forwarding loop, with no device in the way (the null device)"
        );
    } else {
        outln!("what this measures: forwarding between the two ports as the hardware delivers");
    }
    if total == 0 && tx_first > 0 {
        return Err(vfio_nic::Error::InvalidConfig(format!(
            "nothing was forwarded although each port sent {tx_first} frames first: are {} and {} wired to each other?",
            names[0], names[1]
        )));
    }
    Ok(())
}

/// Sends `n` IPv4/UDP frames out of a port (buffers from its receive pool), like testpmd's
/// `--tx-first`, so that a wired pair has traffic to forward.
fn prime(
    rx: &mut AnyRx,
    tx: &mut AnyTx,
    from: &vfio_nic::device::PortInfo,
    to: &vfio_nic::device::PortInfo,
    n: usize,
    batch: &mut Vec<Packet>,
) -> vfio_nic::Result<()> {
    let flow = UdpFlow {
        dst_mac: to.mac,
        src_mac: from.mac,
        src_ip: [198, 18, 0, 1].into(),
        dst_ip: [198, 18, 0, 2].into(),
        src_port: 1024,
        dst_port: 1025,
        size: 64,
    };
    let mut frame = Vec::new();
    for seq in 0..n as u64 {
        let Some(mut p) = rx.pool().alloc() else {
            break;
        };
        build_udp_frame(&flow, seq, &mut frame);
        p.set_data(&frame);
        batch.push(p);
    }
    while !batch.is_empty() {
        if tx.tx_burst(batch)? == 0 {
            break;
        }
    }
    Pool::free_vec(batch);
    Ok(())
}

/// One burst from `rx` to `tx`; what the transmitter cannot take is freed (and counted by it).
#[inline]
fn forward(rx: &mut AnyRx, tx: &mut AnyTx, batch: &mut Vec<Packet>) -> vfio_nic::Result<u64> {
    let n = rx.rx_burst(batch, BURST)?;
    if n > 0 {
        tx.tx_burst(batch)?;
        Pool::free_vec(batch);
    }
    Ok(n as u64)
}
