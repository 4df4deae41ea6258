//! Helpers for the driver-level tests: opening ports through the public API, building test
//! frames (chains too), sending and pumping frames from one queue to another with timeouts,
//! reading counters, and turning a test's `Result` into its `Outcome`.
//!
//! Everything goes through `vfio_nic::devices::any::open` and the burst API, so the same tests run on
//! QEMU's 82576, a real 82576 and a real 82599. Waits are bounded by wall-clock timeouts
//! (real hardware is asynchronous; QEMU delivers synchronously inside the tail write).
//!
//! Test frames are either non-IP (ethertype 0x88b5, "local experimental") or valid IPv4/UDP:
//! QEMU parses L3 headers on transmit and silently drops what it cannot parse.

use std::time::{Duration, Instant};

use vfio_nic::device::{MacAddr, Port, PortStats, RxQueue, TxQueue};
use vfio_nic::devices::ids;
use vfio_nic::devices::igb::IgbConfig;
use vfio_nic::devices::ixgbe::IxgbeConfig;
use vfio_nic::devices::virtio::VirtioConfig;
use vfio_nic::devices::{self, AnyPort, PortConfig};
use vfio_nic::platform::dma::{Packet, Pool, PoolConfig};
use vfio_nic::platform::pci::{PciAddress, Sysfs};
use vfio_nic::platform::vfio::VfioOptions;

use super::Outcome;

/// Ethertype of the test frames (IEEE local experimental 1).
pub const TEST_ETHERTYPE: u16 = 0x88b5;
/// How long a transfer may make no progress before a test gives up.
pub const STALL: Duration = Duration::from_secs(5);
/// How long one transfer may take in all (frames that keep arriving, say from a chatty peer,
/// must not keep a test running for ever).
pub const TRANSFER_LIMIT: Duration = Duration::from_secs(60);
/// How long any one wait of the chain and offload tests may take (a frame, a counter, room in a
/// ring).
pub const WAIT: Duration = Duration::from_secs(10);

/// A test's body as its outcome: `Ok` passes with its details, `Err` fails with the reason.
pub fn run(f: impl FnOnce() -> Result<String, String>) -> Outcome {
    match f() {
        Ok(d) => Outcome::Pass(d),
        Err(e) => Outcome::Fail(e),
    }
}

/// An error as the tests' message text.
pub fn text(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// How the suite opens VFIO devices: `VFIO_NIC_VFIO_BACKEND` and `VFIO_NIC_ALLOW_NOIOMMU`
/// (the QEMU runner sets them per layout; unset on a real machine: automatic, no-IOMMU refused).
/// A bad value stops the test with its message.
pub fn vfio() -> VfioOptions {
    static OPTIONS: std::sync::OnceLock<VfioOptions> = std::sync::OnceLock::new();
    *OPTIONS.get_or_init(|| VfioOptions::from_env().unwrap_or_else(|e| panic!("{e}")))
}

/// Port settings for the tests: small rings, enough buffers for a ring plus frames in flight.
pub fn config(loopback: bool) -> PortConfig {
    let pool = PoolConfig {
        buffers: 2048,
        ..PoolConfig::default()
    };
    PortConfig {
        igb: IgbConfig {
            rx_ring: 256,
            tx_ring: 256,
            pool,
            loopback,
            link_timeout: Duration::from_secs(5),
            ..IgbConfig::default()
        },
        ixgbe: IxgbeConfig {
            rx_ring: 256,
            tx_ring: 256,
            pool,
            loopback,
            link_timeout: Duration::from_secs(5),
            ..IxgbeConfig::default()
        },
        virtio: VirtioConfig {
            rx_ring: 256,
            tx_ring: 256,
            pool,
            ..VirtioConfig::default()
        },
        vfio: vfio(),
        ..PortConfig::default()
    }
}

/// The counters a driver reports for the transfer checks: sent frames and bytes, received
/// frames and bytes, the CRC bytes per frame the byte counters include, and the receive error
/// counters that must not move. The Intel chips count in hardware (GPTC/GOTC, GPRC/GORC, with
/// CRC); a virtio device has no counters, so its port reports the driver's.
pub struct CounterNames {
    pub tx: [&'static str; 2],
    pub rx: [&'static str; 2],
    pub crc: u64,
    pub rx_errors: &'static [&'static str],
}

/// [`CounterNames`] of a port's driver (`PortInfo::driver`).
pub fn counter_names(driver: &str) -> CounterNames {
    if driver == "virtio" {
        CounterNames {
            tx: ["tx_packets", "tx_bytes"],
            rx: ["rx_packets", "rx_bytes"],
            crc: 0,
            rx_errors: &["rx_dropped", "rx_no_buffer"],
        }
    } else {
        CounterNames {
            tx: ["GPTC", "GOTC"],
            rx: ["GPRC", "GORC"],
            crc: 4,
            rx_errors: &["MPC", "RNBC", "RUC", "ROC", "CRCERRS"],
        }
    }
}

/// Whether the device at `addr` is a virtio device (by its PCI id in sysfs).
pub fn is_virtio(addr: PciAddress) -> bool {
    Sysfs::default()
        .vendor_device(addr)
        .is_ok_and(|(v, d)| matches!(ids::lookup(v, d), Some((ids::Family::Virtio, _))))
}

/// Why a virtio port skips what needs MAC loopback.
pub const NO_LOOPBACK: &str = "virtio-net has no MAC loopback; the two-port tests cover its rings";

/// Opens a port through the public API.
pub fn open(addr: PciAddress, loopback: bool) -> Result<AnyPort, String> {
    super::step(format!(
        "opening {addr}{} (reset, link)",
        if loopback { " in MAC loopback" } else { "" }
    ));
    devices::open(&addr.to_string(), &config(loopback)).map_err(|e| format!("{addr}: open: {e}"))
}

/// A test frame: `dst`, `src`, ethertype 0x88b5, a 4-byte sequence number, then a pattern
/// derived from the sequence number. `len` is the frame length without CRC (>= 18).
pub fn frame(dst: MacAddr, src: MacAddr, seq: u32, len: usize) -> Vec<u8> {
    let mut f = Vec::with_capacity(len);
    f.extend_from_slice(&dst.0);
    f.extend_from_slice(&src.0);
    f.extend_from_slice(&TEST_ETHERTYPE.to_be_bytes());
    f.extend_from_slice(&seq.to_be_bytes());
    let mut x = seq.wrapping_mul(2_654_435_761);
    while f.len() < len {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        f.push((x >> 16) as u8);
    }
    f.truncate(len);
    f
}

/// Frame lengths from 60 to 1514 bytes, mixed deterministically (both ends included).
pub fn mixed_sizes(n: usize) -> Vec<usize> {
    let mut x: u32 = 0x1234_5678;
    (0..n)
        .map(|i| match i % 50 {
            0 => 60,
            1 => 1514,
            _ => {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                60 + (x as usize % (1514 - 60 + 1))
            }
        })
        .collect()
}

/// Copies `bytes` into a packet from `pool`.
pub fn packet(pool: &Pool, bytes: &[u8]) -> Result<Packet, String> {
    let mut p = pool.alloc().ok_or("the transmit pool ran out of buffers")?;
    if !p.set_data(bytes) {
        return Err(format!(
            "a {}-byte frame does not fit a buffer",
            bytes.len()
        ));
    }
    Ok(p)
}

/// `bytes` as a packet of `pool` (a chain when it is longer than a buffer).
pub fn chain(pool: &Pool, bytes: &[u8]) -> Result<Packet, String> {
    pool.packet_from(bytes).ok_or_else(|| {
        format!(
            "the pool has too few free buffers for a {}-byte frame",
            bytes.len()
        )
    })
}

/// Queues every packet of `batch`, retrying while the ring is full, at most [`WAIT`].
pub fn send_all(tx: &mut impl TxQueue, batch: &mut Vec<Packet>) -> Result<(), String> {
    let start = Instant::now();
    while !batch.is_empty() {
        tx.tx_burst(batch).map_err(text)?;
        if start.elapsed() > WAIT {
            return Err(format!(
                "the transmit queue took none of {} packets for {} s",
                batch.len(),
                WAIT.as_secs()
            ));
        }
    }
    Ok(())
}

/// Where two frames first differ, for messages.
pub fn first_difference(a: &[u8], b: &[u8]) -> String {
    match a.iter().zip(b).position(|(x, y)| x != y) {
        Some(i) => format!("first difference at byte {i}"),
        None => format!("lengths {} and {}", a.len(), b.len()),
    }
}

/// Receives and frees whatever arrives until the queue has been quiet for `quiet` (stale
/// frames: QEMU queues frames for a receiver that is not ready and delivers them later).
/// Returns how many were dropped.
pub fn drain(rx: &mut impl RxQueue, quiet: Duration) -> Result<usize, String> {
    let mut batch = Vec::new();
    let mut n = 0;
    let mut last = Instant::now();
    let start = Instant::now();
    while last.elapsed() < quiet && start.elapsed() < STALL {
        let got = rx.rx_burst(&mut batch, 64).map_err(|e| e.to_string())?;
        if got > 0 {
            n += got;
            batch.clear();
            last = Instant::now();
        } else {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    Ok(n)
}

/// Sends `count` frames (built by `make` from an index) through `tx` while receiving on `rx`
/// and handing every received frame to `sink` (which frees it, so the receive pool never runs
/// dry), until `expect` frames arrived or nothing moved for [`STALL`] (or, when `expect` is
/// reached, until the receive side has been quiet for `linger`). Returns how many arrived.
pub fn pump_into<T: TxQueue, R: RxQueue>(
    tx: &mut T,
    rx: &mut R,
    count: usize,
    mut make: impl FnMut(usize) -> Result<Packet, String>,
    expect: usize,
    linger: Duration,
    mut sink: impl FnMut(Packet) -> Result<(), String>,
) -> Result<usize, String> {
    let mut got = 0;
    let mut batch = Vec::with_capacity(64);
    let mut pending: Vec<Packet> = Vec::with_capacity(32);
    let mut next = 0;
    let mut progress = Instant::now();
    let mut done_at: Option<Instant> = None;
    super::step(format!("sending {count} frames, expecting {expect} back"));
    let started = Instant::now();
    loop {
        if pending.is_empty() && next < count {
            while pending.len() < 32 && next < count {
                pending.push(make(next)?);
                next += 1;
            }
        }
        if !pending.is_empty() {
            let before = pending.len();
            tx.tx_burst(&mut pending).map_err(|e| e.to_string())?;
            if pending.len() < before {
                progress = Instant::now();
            }
        }
        let n = rx.rx_burst(&mut batch, 64).map_err(|e| e.to_string())?;
        if n > 0 {
            progress = Instant::now();
            got += n;
            for p in batch.drain(..) {
                sink(p)?;
            }
        }
        let sent_all = next == count && pending.is_empty();
        if sent_all && got >= expect {
            let t = *done_at.get_or_insert_with(Instant::now);
            if t.elapsed() >= linger || got > expect {
                return Ok(got);
            }
        }
        if started.elapsed() > TRANSFER_LIMIT {
            return Err(format!(
                "transfer did not finish within {} s: {next} of {count} frames built, {} still waiting to be queued, {got} received (expected {expect})",
                TRANSFER_LIMIT.as_secs(),
                pending.len(),
            ));
        }
        if progress.elapsed() > STALL {
            if sent_all {
                return Ok(got);
            }
            return Err(format!(
                "transfer stalled: {next} of {count} frames built, {} still waiting to be queued, {got} received",
                pending.len(),
            ));
        }
        if n == 0 {
            std::thread::yield_now();
        }
    }
}

/// [`pump_into`] collecting the received frames (for transfers smaller than the receive pool).
pub fn pump<T: TxQueue, R: RxQueue>(
    tx: &mut T,
    rx: &mut R,
    count: usize,
    make: impl FnMut(usize) -> Result<Packet, String>,
    expect: usize,
    linger: Duration,
) -> Result<Vec<Packet>, String> {
    let mut out = Vec::with_capacity(expect);
    pump_into(tx, rx, count, make, expect, linger, |p| {
        out.push(p);
        Ok(())
    })?;
    Ok(out)
}

/// A device counter, or an error naming it.
pub fn counter(s: &PortStats, name: &str) -> Result<u64, String> {
    s.get(name)
        .ok_or_else(|| format!("the port reports no counter {name}"))
}

/// Counter differences `after - before` for `names`, as "NAME=value" text and values.
pub fn deltas(before: &PortStats, after: &PortStats, names: &[&str]) -> Result<Vec<u64>, String> {
    names
        .iter()
        .map(|n| Ok(counter(after, n)? - counter(before, n)?))
        .collect()
}

/// Checks that none of the receive error counters `names` moved from `before` to `after`;
/// the error names the first that did as "`who` NAME rose by N".
pub fn rx_errors_quiet(
    before: &PortStats,
    after: &PortStats,
    names: &[&str],
    who: &str,
) -> Result<(), String> {
    for &name in names {
        let d = counter(after, name)? - counter(before, name)?;
        if d != 0 {
            return Err(format!("{who} {name} rose by {d}"));
        }
    }
    Ok(())
}

/// Port `i` of the context's list and its expected MAC, if given.
pub fn stats(p: &mut AnyPort) -> Result<PortStats, String> {
    p.stats().map_err(|e| e.to_string())
}
