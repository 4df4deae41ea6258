//! The fault injector, and what the fault tests share: traffic in a thread of its own, waits
//! with deadlines, the ports' health, and a port's place in sysfs.
//!
//! A fault test needs something outside the machine to pull a cable, take a card out or make
//! the link signal an error. That comes from the environment, like the ports:
//! `VFIO_NIC_FAULT_INJECT` names a program the tests run as
//!
//! ```text
//! INJECT link BDF down|up          the port's cable out, or back in
//! INJECT unplug BDF                the card removed (hot unplug)
//! INJECT replug BDF                the card put back in the same slot
//! INJECT aer BDF correctable|uncorrectable   a PCIe error reported by the port
//! ```
//!
//! It exits 0 once the fault is done (or asked for: a removal completes when the driver lets
//! go of the device), 2 when it cannot do that fault here (the test is then skipped, saying
//! so), and anything else when it failed. In the QEMU test bed it is `/bin/hwt-fault`
//! (hwtests/qemu/fault-request), which has the host's QEMU monitor do it; on a bench it can
//! drive a managed switch port, power a slot off (`/sys/bus/pci/slots/N/power`), inject with
//! Linux's aer-inject, or ask a person and wait for their Enter. Without it the fault tests
//! are skipped with the reason, never faked.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use vfio_nic::device::{MacAddr, Port, QueueError, RxQueue, TxQueue};
use vfio_nic::devices::{AnyPort, AnyRx, AnyTx};
use vfio_nic::health::Health;
use vfio_nic::platform::dma::{DmaMapper, Packet, Pool, PoolConfig};
use vfio_nic::platform::pci::PciAddress;
use vfio_nic::platform::vfio::Container;

use super::proc;
use super::{step, Outcome};

/// A fault test's result: `Err` is its outcome (a failure, or a skip with the reason).
pub type Res<T> = Result<T, Outcome>;

/// The vfio-nic tool the fault tests run, or a skip that says how to name it.
pub fn tool() -> Res<String> {
    super::cli_tests::cli().ok_or_else(|| {
        Outcome::Skip("no vfio-nic binary (set VFIO_NIC_CLI or put it on PATH)".into())
    })
}

/// Turns a fault test's body into its outcome.
pub fn outcome(f: impl FnOnce() -> Res<String>) -> Outcome {
    match f() {
        Ok(detail) => Outcome::Pass(detail),
        Err(o) => o,
    }
}

/// A failure with `why`.
pub fn fail<T>(why: impl Into<String>) -> Res<T> {
    Err(Outcome::Fail(why.into()))
}

/// A `Result<T, String>` of the shared helpers as a fault test's.
pub trait OrFail<T> {
    /// The error as the test's failure.
    fn or_fail(self) -> Res<T>;
}

impl<T, E: std::fmt::Display> OrFail<T> for Result<T, E> {
    fn or_fail(self) -> Res<T> {
        self.map_err(|e| Outcome::Fail(e.to_string()))
    }
}

/// How long one fault request may take (the QEMU bed's answers come in well under a second;
/// a person at a bench gets more through their own program's prompt).
const ASK_LIMIT: Duration = Duration::from_secs(60);

/// The fault injector named by `VFIO_NIC_FAULT_INJECT`.
pub struct Injector {
    cmd: String,
}

impl Injector {
    /// The injector, or the skip that says how to give one.
    pub fn from_env() -> Res<Injector> {
        match std::env::var("VFIO_NIC_FAULT_INJECT") {
            Ok(cmd) if !cmd.trim().is_empty() => Ok(Injector { cmd }),
            _ => Err(Outcome::Skip(
                "no fault injector: set VFIO_NIC_FAULT_INJECT to a program that takes `link BDF down|up`, `unplug BDF`, `replug BDF` or `aer BDF correctable|uncorrectable` and exits 0 once it is done (hwtests/fault.rs; the QEMU test bed's is hwtests/qemu/fault-request)".into(),
            )),
        }
    }

    /// Has the fault `args` done; its answer on success. Exit 2 (cannot do it here) skips the
    /// test, anything else fails it.
    pub fn ask(&self, args: &[&str]) -> Res<String> {
        step(format!("asking the fault injector: {}", args.join(" ")));
        let out = proc::run(
            &format!("the fault injector `{} {}`", self.cmd, args.join(" ")),
            std::process::Command::new(&self.cmd).args(args),
            ASK_LIMIT,
        )
        .or_fail()?;
        match out.status.and_then(|s| s.code()) {
            Some(0) if !out.timed_out => Ok(out.stdout.trim().to_string()),
            Some(2) => Err(Outcome::Skip(format!(
                "the fault injector cannot do `{}` here: {}",
                args.join(" "),
                out.text()
            ))),
            _ => fail(format!(
                "the fault injector failed `{}` ({:?}{}): {}",
                args.join(" "),
                out.status,
                if out.timed_out { ", timed out" } else { "" },
                out.text()
            )),
        }
    }
}

/// Waits until `done` holds, at most `limit`, polling every 20 ms; returns how long it took.
pub fn wait_until(
    what: &str,
    limit: Duration,
    mut done: impl FnMut() -> Res<bool>,
) -> Res<Duration> {
    step(format!(
        "waiting (at most {} s) until {what}",
        limit.as_secs()
    ));
    let t0 = Instant::now();
    loop {
        if done()? {
            return Ok(t0.elapsed());
        }
        if t0.elapsed() > limit {
            return fail(format!("{what}: not within {:.1} s", limit.as_secs_f64()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The health a port's driver keeps (the Intel drivers on a VFIO port); a port whose driver
/// watches nothing skips the test.
pub fn health(p: &AnyPort) -> Res<Arc<Health>> {
    p.health().ok_or_else(|| {
        Outcome::Skip(format!(
            "{}: its driver ({}) does not watch its device (link changes, removal, PCIe errors are the Intel drivers' on VFIO)",
            p.info().name,
            p.info().driver
        ))
    })
}

/// A pool in the process's VFIO container (every port of the process reaches it), for frames
/// a test sends.
pub fn tx_pool(buffers: usize) -> Res<Pool> {
    let mapper: Arc<dyn DmaMapper> = Container::shared().or_fail()?;
    Pool::new(
        PoolConfig {
            buffers,
            ..PoolConfig::default()
        },
        mapper,
    )
    .or_fail()
}

/// Whether the PCI device is present (its sysfs directory exists).
pub fn present(addr: PciAddress) -> bool {
    std::path::Path::new(&format!("/sys/bus/pci/devices/{addr}")).exists()
}

/// Binds a (re-plugged) device to vfio-pci as the QEMU bed's /init does: driver_override,
/// then drivers_probe; waits for the binding.
pub fn bind_vfio(addr: PciAddress) -> Res<()> {
    let dev = format!("/sys/bus/pci/devices/{addr}");
    std::fs::write(format!("{dev}/driver_override"), "vfio-pci")
        .or_fail()
        .map_err(|_| Outcome::Fail(format!("cannot set {dev}/driver_override")))?;
    let _ = std::fs::write("/sys/bus/pci/drivers_probe", addr.to_string());
    wait_until(
        &format!("{addr} is bound to vfio-pci"),
        Duration::from_secs(10),
        || Ok(std::fs::read_link(format!("{dev}/driver")).is_ok_and(|d| d.ends_with("vfio-pci"))),
    )?;
    Ok(())
}

/// What a traffic thread saw.
#[derive(Debug, Default)]
pub struct FlowReport {
    /// Frames sent, and received.
    pub sent: u64,
    pub received: u64,
    /// Every burst error, in order (receive or transmit), with the frames received before it.
    pub errors: Vec<(u64, QueueError)>,
}

/// Frames sent from one queue and received on another, in a thread of its own, until stopped
/// (or until a burst fails with `DeviceRemoved`: then the queues are dropped at once, as an
/// application must, and the thread ends).
pub struct Flow {
    name: String,
    stop: Arc<AtomicBool>,
    received: Arc<AtomicU64>,
    report: Arc<Mutex<FlowReport>>,
    thread: Option<JoinHandle<()>>,
}

impl Flow {
    /// Starts sending frames built by `make(seq)` through `tx` (sixteen per round, a round a
    /// millisecond: enough to see, little enough not to starve a one-vCPU guest), receiving
    /// and freeing what arrives on `rx`.
    pub fn start(
        name: &str,
        mut tx: AnyTx,
        mut rx: AnyRx,
        pool: Pool,
        make: impl Fn(u64) -> Vec<u8> + Send + 'static,
    ) -> Flow {
        let stop = Arc::new(AtomicBool::new(false));
        let received = Arc::new(AtomicU64::new(0));
        let report = Arc::new(Mutex::new(FlowReport::default()));
        let (s, r, rep) = (stop.clone(), received.clone(), report.clone());
        let thread = std::thread::spawn(move || {
            let mut seq = 0u64;
            let mut out: Vec<Packet> = Vec::new();
            let mut batch = Vec::new();
            let (mut sent, mut got, mut errors) = (0u64, 0u64, Vec::new());
            while !s.load(Relaxed) {
                while out.len() < 16 {
                    let Some(mut p) = pool.alloc() else { break };
                    if !p.set_data(&make(seq)) {
                        break;
                    }
                    seq += 1;
                    out.push(p);
                }
                let before = out.len();
                let tx_r = tx.tx_burst(&mut out);
                sent += (before - out.len()) as u64;
                // What the ring would not take now is dropped: a flow is a stream, not a queue.
                Pool::free_vec(&mut out);
                let rx_r = rx.rx_burst(&mut batch, 64);
                got += batch.len() as u64;
                r.store(got, Relaxed);
                Pool::free_vec(&mut batch);
                let mut removed = false;
                for e in [tx_r.err(), rx_r.err()].into_iter().flatten() {
                    removed |= e == QueueError::DeviceRemoved;
                    errors.push((got, e));
                }
                if removed {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            // Dropped here (each queue stops its DMA) before the report is handed over.
            drop((tx, rx));
            *rep.lock().unwrap_or_else(|p| p.into_inner()) = FlowReport {
                sent,
                received: got,
                errors,
            };
        });
        Flow {
            name: name.to_string(),
            stop,
            received,
            report,
            thread: Some(thread),
        }
    }

    /// Frames received so far.
    pub fn received(&self) -> u64 {
        self.received.load(Relaxed)
    }

    /// Whether the thread ended by itself (its port was removed).
    pub fn ended(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Waits until at least `more` frames more than now arrived (at most `limit`).
    pub fn wait_more(&self, more: u64, limit: Duration) -> Res<Duration> {
        let from = self.received();
        wait_until(
            &format!("{} receives {more} more frames (from {from})", self.name),
            limit,
            || Ok(self.received() >= from + more),
        )
    }

    /// Stops the thread (its queues dropped) and returns what it saw.
    pub fn stop(mut self) -> FlowReport {
        self.stop.store(true, Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        std::mem::take(&mut *self.report.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl Drop for Flow {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A test frame from `src` to `dst` (ethertype 0x88b5, the sequence number, 64 bytes).
pub fn test_frame(dst: MacAddr, src: MacAddr, seq: u64) -> Vec<u8> {
    super::drv::frame(dst, src, seq as u32, 64)
}

/// The port's first receive and transmit queue, the rest dropped.
pub fn queues(p: &mut AnyPort) -> Res<(AnyRx, AnyTx)> {
    let (mut rx, mut tx) = p.take_queues().or_fail()?;
    if rx.is_empty() || tx.is_empty() {
        return fail(format!("{}: no queues", p.info().name));
    }
    Ok((rx.swap_remove(0), tx.swap_remove(0)))
}
