//! Interrupt mode on the device: MSI-X through VFIO to an eventfd, and a receive queue that
//! sleeps on it.
//!
//! One test, three steps on the first port, opened with interrupt mode:
//! 1. nothing arrives: `wait` sleeps its whole timeout and reports no frame (no interrupt
//!    without a cause; a stale cause from the bring-up would wake it at once);
//! 2. EICS: the queue armed, its cause set by hand, the vector's message reaches the eventfd
//!    (what `selftest` checks);
//! 3. frames sent after the queue has slept for a while wake it (from the second port, wired
//!    to it; with one port, from the port itself in MAC loopback), and arrive intact.

use std::time::{Duration, Instant};

use vfio_nic::device::{Port, RxQueue, TxQueue};
use vfio_nic::devices::intel::IrqConfig;
use vfio_nic::devices::{self, AnyPort, AnyRx};
use vfio_nic::Error;

use super::drv::{self, drain, frame, packet};
use super::{step, Ctx, Outcome};

/// How long a receive queue must stay quiet before the test starts.
const QUIET: Duration = Duration::from_millis(50);
/// How long the queue sleeps before the frames are sent.
const ASLEEP: Duration = Duration::from_millis(300);
/// Frames sent to wake it.
const FRAMES: u32 = 8;

/// The three steps above; a port whose driver has no interrupt mode is skipped with the reason.
pub fn interrupt_wakes_a_sleeping_queue(ctx: &Ctx) -> Outcome {
    let two = ctx.ports.len() >= 2;
    let mut cfg = drv::config(!two);
    cfg.igb.interrupts = Some(IrqConfig::default());
    cfg.ixgbe.interrupts = Some(IrqConfig::default());
    cfg.virtio.interrupts = true;
    step(format!(
        "opening {} with interrupt mode{}",
        ctx.ports[0],
        if two { "" } else { " in MAC loopback" }
    ));
    let a = match devices::open(&ctx.ports[0].to_string(), &cfg) {
        Ok(p) => p,
        Err(e @ Error::NotSupported { .. }) => return Outcome::Skip(e.to_string()),
        Err(e) => return Outcome::Fail(format!("{}: open with interrupts: {e}", ctx.ports[0])),
    };
    if !matches!(a, AnyPort::Igb(_) | AnyPort::Ixgbe(_) | AnyPort::Virtio(_)) {
        return Outcome::Skip(vfio_nic::devices::kinds::no_interrupt_mode());
    }
    match steps(ctx, a, two) {
        Ok(d) => Outcome::Pass(d),
        Err(e) => Outcome::Fail(e),
    }
}

fn steps(ctx: &Ctx, mut a: AnyPort, two: bool) -> Result<String, String> {
    let vectors = match &a {
        AnyPort::Igb(p) => p.interrupts().len(),
        AnyPort::Ixgbe(p) => p.interrupts().len(),
        AnyPort::Virtio(p) => p.interrupts().len(),
        _ => 0,
    };
    let by_hand = !matches!(a, AnyPort::Virtio(_));
    let mac = a.info().mac;
    let (mut rxa, mut txa) = a.take_queues().map_err(|e| e.to_string())?;
    let mut b = if two {
        Some(drv::open(ctx.ports[1], false)?)
    } else {
        None
    };
    let mut txb = match b.as_mut() {
        Some(b) => Some(b.take_queues().map_err(|e| e.to_string())?.1),
        None => None,
    };
    let stale = drain(&mut rxa[0], QUIET)?;

    step("1. sleeping 300 ms with nothing sent");
    let t = Instant::now();
    if rxa[0].wait(ASLEEP).map_err(|e| e.to_string())? {
        return Err(format!(
            "the queue woke after {:?} although nothing was sent (a stale cause?)",
            t.elapsed()
        ));
    }
    let slept = t.elapsed();

    // 2. On the Intel chips: arm the queue and set its cause by hand (EICS). virtio-net has no
    // such register: its interrupt is proven by step 3 alone.
    let eics = if by_hand {
        step("2. arming the queue and setting its cause by hand (EICS)");
        let q: &mut AnyRx = &mut rxa[0];
        if q.arm_interrupt().map_err(|e| e.to_string())? {
            return Err("frames were waiting although nothing was sent".into());
        }
        let t = Instant::now();
        q.trigger_interrupt().map_err(|e| e.to_string())?;
        let irq = q.interrupt().cloned().ok_or("the queue has no interrupt")?;
        let fired = irq
            .wait(Duration::from_secs(5))
            .map_err(|e| e.to_string())?;
        q.disarm_interrupt();
        if !fired {
            return Err("EICS set the queue's cause but no interrupt arrived within 5 s".into());
        }
        Some(t.elapsed())
    } else {
        None
    };

    step("3. frames sent while the queue sleeps");
    let src = if two { ctx.ports[1] } else { ctx.ports[0] };
    let frames: Vec<Vec<u8>> = (0..FRAMES)
        .map(|i| frame(mac, mac, 0x1a00_0000 + i, 60 + 8 * i as usize))
        .collect();
    let tx = match txb.as_mut() {
        Some(t) => &mut t[0],
        None => &mut txa[0],
    };
    let pool = rxa[0].pool().clone();
    let mut batch = frames
        .iter()
        .map(|f| packet(&pool, f))
        .collect::<Result<Vec<_>, _>>()?;
    let (woke, latency) = std::thread::scope(|s| {
        let sender = s.spawn(move || {
            std::thread::sleep(ASLEEP);
            let sent_at = Instant::now();
            let deadline = sent_at + Duration::from_secs(5);
            while !batch.is_empty() && Instant::now() < deadline {
                if let Err(e) = tx.tx_burst(&mut batch) {
                    return Err(format!("{src}: transmit: {e}"));
                }
            }
            if batch.is_empty() {
                Ok(sent_at)
            } else {
                Err(format!(
                    "{src}: {} frames not queued within 5 s",
                    batch.len()
                ))
            }
        });
        let woke = rxa[0].wait(Duration::from_secs(10));
        let woke_at = Instant::now();
        let sent_at = sender
            .join()
            .map_err(|_| "the sender panicked".to_string())??;
        Ok::<_, String>((
            woke.map_err(|e| e.to_string())?,
            woke_at.saturating_duration_since(sent_at),
        ))
    })?;
    if !woke {
        return Err(format!(
            "{FRAMES} frames were sent after {ASLEEP:?} of sleep, but the queue was not woken within 10 s"
        ));
    }
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.len() < frames.len() && Instant::now() < deadline {
        rxa[0].rx_burst(&mut got, 64).map_err(|e| e.to_string())?;
    }
    if got.len() != frames.len() {
        return Err(format!(
            "woken, but {} of {FRAMES} frames arrived within 5 s",
            got.len()
        ));
    }
    for (p, want) in got.iter().zip(&frames) {
        if p.data() != &want[..] {
            return Err("a frame that woke the queue arrived changed".into());
        }
    }
    let by_hand = match eics {
        Some(t) => format!("EICS woke the queue in {:.1} ms", t.as_secs_f64() * 1e3),
        None => "no cause set by hand (the device has no EICS)".into(),
    };
    Ok(format!(
        "{vectors} MSI-X vector(s); slept {} ms with nothing sent; {by_hand}; {FRAMES} frames sent after {} ms of sleep woke it {:.1} ms after the send and arrived intact ({stale} stale frames drained first)",
        slept.as_millis(),
        ASLEEP.as_millis(),
        latency.as_secs_f64() * 1e3,
    ))
}
