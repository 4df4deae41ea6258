//! Interrupt mode on the device: MSI-X through VFIO to an eventfd, and a receive queue that
//! sleeps on it.
//!
//! Two tests. `interrupt_wakes_a_sleeping_queue`: three steps on the first port, opened with
//! interrupt mode:
//! 1. nothing arrives: `wait` sleeps its whole timeout and reports no frame (no interrupt
//!    without a cause; a stale cause from the bring-up would wake it at once);
//! 2. EICS: the queue armed, its cause set by hand, the vector's message reaches the eventfd
//!    (what `selftest` checks);
//! 3. frames sent after the queue has slept for a while wake it (from the second port, wired
//!    to it; with one port, from the port itself in MAC loopback), and arrive intact.
//!
//! `interrupt_wakes_the_steered_queue`: four receive queues on four vectors, every one armed;
//! a frame that RSS steers to queue 1, then one steered to queue 3, wakes exactly that queue.

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

/// Receive queues in the steered-wake test: queue q on vector q, so that queues 1 and 3 use
/// the odd queues' IVAR entries (the 82599: byte 2 of `IVAR[q >> 1]`; the 82576: byte 0 of
/// `IVAR[q]`, a register of their own).
const STEERED_QUEUES: u16 = 4;

/// A frame that RSS steers to queue 1, then one steered to queue 3, wakes exactly that queue's
/// eventfd, every queue armed (the first port, four queues in interrupt mode; the second port
/// sends). The flows are found first with every queue polled: where each lands is the device's
/// RSS (QEMU's igb hashes IPv4/UDP with the driver's key, `igb_rss_parse_packet`).
pub fn interrupt_wakes_the_steered_queue(ctx: &Ctx) -> Outcome {
    if ctx.ports.len() < 2 {
        return Outcome::Skip("needs two wired ports (one sends, one receives)".into());
    }
    let mut cfg = drv::config(false);
    for c in [&mut cfg.igb.interrupts, &mut cfg.ixgbe.interrupts] {
        *c = Some(IrqConfig::default());
    }
    cfg.igb.rx_queues = STEERED_QUEUES;
    cfg.igb.tx_queues = STEERED_QUEUES;
    cfg.ixgbe.rx_queues = STEERED_QUEUES;
    cfg.ixgbe.tx_queues = STEERED_QUEUES;
    step(format!(
        "opening {} with {STEERED_QUEUES} receive queues in interrupt mode",
        ctx.ports[0]
    ));
    let a = match devices::open(&ctx.ports[0].to_string(), &cfg) {
        Ok(p) => p,
        Err(e @ Error::NotSupported { .. }) => return Outcome::Skip(e.to_string()),
        Err(e) => return Outcome::Fail(format!("{}: open: {e}", ctx.ports[0])),
    };
    if !matches!(a, AnyPort::Igb(_) | AnyPort::Ixgbe(_)) {
        return Outcome::Skip(format!(
            "{}: one receive queue only (RSS steering is the Intel drivers')",
            ctx.ports[0]
        ));
    }
    match steered(ctx, a) {
        Ok(d) => Outcome::Pass(d),
        Err(e) => Outcome::Fail(e),
    }
}

fn steered(ctx: &Ctx, mut a: AnyPort) -> Result<String, String> {
    use vfio_nic::app::wire::{build_udp_frame, UdpFlow};
    let mac = a.info().mac;
    let (mut rxs, _txa) = a.take_queues().map_err(|e| e.to_string())?;
    let mut b = drv::open(ctx.ports[1], false)?;
    let src = b.info().mac;
    let (_rxb, mut txb) = b.take_queues().map_err(|e| e.to_string())?;
    let pool = rxs[0].pool().clone();
    let flow = |sport: u16| {
        let mut out = Vec::new();
        let f = UdpFlow {
            dst_mac: mac,
            src_mac: src,
            src_ip: [10, 9, 0, 1].into(),
            dst_ip: [10, 9, 0, 2].into(),
            src_port: sport,
            dst_port: 9,
            size: 64,
        };
        build_udp_frame(&f, u64::from(sport), &mut out);
        out
    };
    let mut send = |f: &[u8]| -> Result<(), String> {
        let mut batch = vec![packet(&pool, f)?];
        let deadline = Instant::now() + Duration::from_secs(5);
        while !batch.is_empty() && Instant::now() < deadline {
            txb[0].tx_burst(&mut batch).map_err(|e| e.to_string())?;
        }
        if batch.is_empty() {
            Ok(())
        } else {
            Err(format!("{}: a frame not queued within 5 s", ctx.ports[1]))
        }
    };
    for rx in rxs.iter_mut() {
        drain(rx, QUIET)?;
    }
    step("1. where flows land, every queue polled");
    let mut landing: [Option<u16>; STEERED_QUEUES as usize] = [None; STEERED_QUEUES as usize];
    for sport in 2000..2064u16 {
        if landing[1].is_some() && landing[3].is_some() {
            break;
        }
        send(&flow(sport))?;
        let mut got = None;
        let deadline = Instant::now() + Duration::from_secs(5);
        while got.is_none() && Instant::now() < deadline {
            for (q, rx) in rxs.iter_mut().enumerate() {
                let mut batch = Vec::new();
                if rx.rx_burst(&mut batch, 8).map_err(|e| e.to_string())? > 0 {
                    got = Some(q);
                }
            }
        }
        let q = got.ok_or(format!(
            "the frame of flow {sport} reached no queue within 5 s"
        ))?;
        landing[q].get_or_insert(sport);
    }
    let mut woke = Vec::new();
    for target in [1usize, 3] {
        let sport = landing[target].ok_or(format!(
            "no flow of 64 landed on queue {target} (landings {landing:?}): is RSS on?"
        ))?;
        step(format!(
            "2. every queue armed; flow {sport} steered to queue {target}"
        ));
        for rx in rxs.iter_mut() {
            drain(rx, QUIET)?;
            if rx.arm_interrupt().map_err(|e| e.to_string())? {
                return Err("frames were waiting although nothing was sent".into());
            }
        }
        let t = Instant::now();
        send(&flow(sport))?;
        let irq = rxs[target]
            .interrupt()
            .cloned()
            .ok_or("the queue has no interrupt")?;
        if !irq
            .wait(Duration::from_secs(5))
            .map_err(|e| e.to_string())?
        {
            return Err(format!(
                "a frame steered to queue {target} did not wake it within 5 s"
            ));
        }
        woke.push(format!(
            "queue {target} in {:.1} ms",
            t.elapsed().as_secs_f64() * 1e3
        ));
        // Others: give a stray message time to come, then none may have.
        std::thread::sleep(QUIET);
        for (q, rx) in rxs.iter_mut().enumerate() {
            let signals = rx
                .interrupt()
                .ok_or("the queue has no interrupt")?
                .take()
                .map_err(|e| e.to_string())?;
            rx.disarm_interrupt();
            if q != target && signals > 0 {
                return Err(format!(
                    "queue {q}'s eventfd was signalled by a frame steered to queue {target}"
                ));
            }
        }
        let got = drain(&mut rxs[target], QUIET)?;
        if got != 1 {
            return Err(format!("queue {target} received {got} frames, not 1"));
        }
    }
    Ok(format!(
        "{STEERED_QUEUES} queues on {STEERED_QUEUES} vectors; flows {:?} steered to queues 1 and 3 woke exactly {}",
        [landing[1], landing[3]],
        woke.join(" and ")
    ))
}
