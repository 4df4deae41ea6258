//! The soak: minutes of mixed traffic from A to B while everything an appliance changes at run
//! time changes, then the books are checked.
//!
//! For `VFIO_NIC_SOAK_SECS` seconds (default 60; docs/faults.md has the figures of a 10-minute
//! run): frames of every size from 60 to 1514 bytes, a third of them tagged (VIDs 100, 200,
//! 300, priorities 0 to 7), sent from A and checked at B in order with their tags; every
//! second the VLAN modes switch (B's receive mode hardware -> software -> deferred, A's
//! transmit mode hardware <-> software); every five seconds both queues restart on their
//! rings; every three seconds B flips between polling and sleeping on its interrupt; once,
//! A's cable is pulled and put back (through the fault injector; without one the soak runs
//! without the flap and says so). Traffic pauses around each restart and the flap, so that
//! every frame sent is accounted for.
//!
//! At the end: no frame lost or out of order and every tag right; A's driver count of frames
//! sent equal to A's device counter (GPTC) and to B's (GPRC), and B's driver count of frames
//! received equal to them too; every buffer back in its pool; the process's resident memory
//! (VmRSS) flat after the warm-up (the first 10 %, at least 5 s); and the runner checks the
//! guest's log for DMAR faults.

use std::time::{Duration, Instant};

use vfio_nic::device::{MacAddr, Port, RxQueue, TxQueue};
use vfio_nic::devices::intel::IrqConfig;
use vfio_nic::devices::{self, AnyRx, AnyTx};
use vfio_nic::platform::dma::Pool;
use vfio_nic::vlan::{
    PacketVlan, RxMode, Tci, TxMode, Vid, VlanConfig, VlanControl, VlanRx, VlanTx,
};

use super::drv;
use super::fault::{fail, health, outcome, tx_pool, wait_until, Injector, OrFail, Res};
use super::{step, Ctx, Outcome};

/// Seconds the soak runs (`VFIO_NIC_SOAK_SECS`, default 60); also what the suite adds to the
/// test's time limit.
pub fn seconds() -> u64 {
    std::env::var("VFIO_NIC_SOAK_SECS")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(60)
}

/// Resident memory growth allowed after the warm-up.
const RSS_SLACK_KIB: u64 = 1024;

/// The tag frame `seq` carries, if any: a third of the frames, VIDs 100/200/300, every PCP.
fn tag_of(seq: u32) -> Option<Tci> {
    (seq % 3 == 0).then(|| {
        let vid = Vid::new(100 * (1 + (seq / 3 % 3) as u16)).expect("a valid VID");
        Tci::new(vid, (seq % 8) as u8, false).expect("a valid TCI")
    })
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// A and B's traffic state.
struct Soak {
    tx: VlanTx<AnyTx>,
    rx: VlanRx<AnyRx>,
    pool: Pool,
    sizes: Vec<usize>,
    macs: (MacAddr, MacAddr),
    sent: u32,
    received: u32,
    irq: bool,
    wakeups: u64,
}

impl Soak {
    /// One round: up to 16 new frames sent (unless `paused`), what arrived checked. In
    /// interrupt mode B's queue is armed before the frames go, and the round sleeps on its
    /// interrupt until they land (the wake-up counted).
    fn round(&mut self, paused: bool) -> Res<()> {
        let armed = self.irq && !self.rx.arm_interrupt().or_fail()?;
        if !paused {
            let mut batch = Vec::with_capacity(16);
            for k in 0..16 {
                let seq = self.sent + k;
                let len = self.sizes[seq as usize % self.sizes.len()];
                let mut p = match self.pool.alloc() {
                    Some(p) => p,
                    None => break,
                };
                if !p.set_data(&drv::frame(self.macs.1, self.macs.0, seq, len)) {
                    return fail(format!("a {len}-byte frame does not fit a buffer"));
                }
                if let Some(t) = tag_of(seq) {
                    p.set_tx_vlan(t).or_fail()?;
                }
                batch.push(p);
            }
            let before = batch.len();
            let n = self.tx.tx_burst(&mut batch).or_fail()?;
            debug_assert_eq!(before - batch.len(), n);
            self.sent += n as u32;
            // What the ring did not take is built again next round (same numbers).
            Pool::free_vec(&mut batch);
        }
        if armed && self.received < self.sent {
            let irq = self.rx.interrupt().cloned();
            if let Some(i) = irq {
                if i.wait(Duration::from_millis(50)).or_fail()? {
                    self.wakeups += 1;
                }
            }
        }
        if self.irq {
            self.rx.disarm_interrupt();
        }
        let mut got = Vec::with_capacity(64);
        self.rx.rx_burst(&mut got, 64).or_fail()?;
        let ctx = self.rx.ctx();
        for mut p in got {
            let tci = p.take_vlan(ctx);
            let seq = u32::from_be_bytes(p.data()[14..18].try_into().expect("4 bytes"));
            if seq != self.received {
                return fail(format!(
                    "frame {seq} arrived where {} was due (lost or reordered; mode rx {}, tx {})",
                    self.received,
                    self.rx.control().rx_mode(),
                    self.tx.control().tx_mode()
                ));
            }
            if tci.map(Tci::raw) != tag_of(seq).map(Tci::raw) {
                return fail(format!(
                    "frame {seq} arrived with tag {tci:?}, sent with {:?} (rx {}, tx {})",
                    tag_of(seq),
                    self.rx.control().rx_mode(),
                    self.tx.control().tx_mode()
                ));
            }
            let len = self.sizes[seq as usize % self.sizes.len()];
            if p.len() != len {
                return fail(format!("frame {seq}: {} bytes, sent {len}", p.len()));
            }
            self.received += 1;
        }
        Ok(())
    }

    /// Stops sending until every frame sent has arrived (at most 10 s).
    fn settle(&mut self) -> Res<()> {
        let t0 = Instant::now();
        while self.received < self.sent {
            self.round(true)?;
            if t0.elapsed() > Duration::from_secs(10) {
                return fail(format!(
                    "{} frames sent, {} arrived, nothing more for 10 s",
                    self.sent, self.received
                ));
            }
        }
        Ok(())
    }
}

/// The soak (module doc).
pub fn soak_mixed_traffic(ctx: &Ctx) -> Outcome {
    outcome(|| {
        if ctx.ports.len() < 2 {
            return Err(Outcome::Skip("needs two ports wired to each other".into()));
        }
        let inj = Injector::from_env().ok();
        let secs = seconds();
        let (a_addr, b_addr) = (ctx.ports[0], ctx.ports[1]);
        let mut cfg = drv::config(false);
        let irq = Some(IrqConfig { throttle_us: 50 });
        cfg.igb.interrupts = irq;
        cfg.ixgbe.interrupts = irq;
        step(format!("opening {a_addr} and {b_addr} with interrupts"));
        let mut a = devices::open(&a_addr.to_string(), &cfg).or_fail()?;
        let mut b = devices::open(&b_addr.to_string(), &cfg).or_fail()?;
        let ha = health(&a)?;
        let a_ctl = VlanControl::new(&mut a, &VlanConfig::default()).or_fail()?;
        let b_ctl = VlanControl::new(&mut b, &VlanConfig::default()).or_fail()?;
        let (_a_rx, a_tx) = super::fault::queues(&mut a)?;
        let (b_rx, _b_tx) = super::fault::queues(&mut b)?;
        let mut s = Soak {
            tx: a_ctl.wrap_tx(a_tx),
            rx: b_ctl.wrap_rx(b_rx),
            pool: tx_pool(2048)?,
            sizes: drv::mixed_sizes(997),
            macs: (a.info().mac, b.info().mac),
            sent: 0,
            received: 0,
            irq: false,
            wakeups: 0,
        };
        drv::drain(&mut s.rx, Duration::from_millis(100)).or_fail()?;
        let (a0, b0) = (drv::stats(&mut a).or_fail()?, drv::stats(&mut b).or_fail()?);
        let rx_modes = [RxMode::Hardware, RxMode::Software, RxMode::Deferred];
        let tx_modes = [TxMode::Hardware, TxMode::Software];
        let start = Instant::now();
        let end = start + Duration::from_secs(secs);
        let warm = start + Duration::from_secs((secs / 10).max(5));
        let flap_at = start + Duration::from_secs(secs * 2 / 5);
        let (mut next_switch, mut next_restart, mut next_flip) = (1u64, 5u64, 3u64);
        let (mut switches, mut restarts, mut flips) = (0u32, 0u32, 0u32);
        let mut rss_warm = None;
        let mut flap = match &inj {
            Some(_) => "pending".to_string(),
            None => "none (no fault injector: VFIO_NIC_FAULT_INJECT unset)".to_string(),
        };
        step(format!("soaking for {secs} s"));
        while Instant::now() < end {
            s.round(false)?;
            let t = start.elapsed().as_secs();
            if t >= next_switch {
                next_switch = t + 1;
                switches += 1;
                let rx = rx_modes[switches as usize % rx_modes.len()];
                let tx = tx_modes[switches as usize % tx_modes.len()];
                b_ctl.set_rx_mode(&mut b, rx).or_fail()?;
                a_ctl.set_tx_mode(&mut a, tx).or_fail()?;
            }
            if t >= next_flip {
                next_flip = t + 3;
                flips += 1;
                s.irq = !s.irq;
            }
            if t >= next_restart {
                next_restart = t + 5;
                restarts += 1;
                s.settle()?;
                s.tx.inner_mut().restart().or_fail()?;
                s.rx.inner_mut().restart().or_fail()?;
            }
            if rss_warm.is_none() && Instant::now() >= warm {
                rss_warm = Some(rss_kib());
            }
            if let (Some(inj), true) = (&inj, flap == "pending" && Instant::now() >= flap_at) {
                s.settle()?;
                let a_s = a_addr.to_string();
                inj.ask(&["link", &a_s, "down"])?;
                let down = wait_until("A's link is seen down", Duration::from_secs(10), || {
                    Ok(!ha.link().status.up)
                })?;
                std::thread::sleep(Duration::from_secs(1));
                inj.ask(&["link", &a_s, "up"])?;
                let up = wait_until("A's link is seen up", Duration::from_secs(10), || {
                    Ok(ha.link().status.up)
                })?;
                flap = format!(
                    "link down seen in {:.2} s, up in {:.2} s",
                    down.as_secs_f64(),
                    up.as_secs_f64()
                );
            }
        }
        s.settle()?;
        let rss_end = rss_kib();
        let (a1, b1) = (drv::stats(&mut a).or_fail()?, drv::stats(&mut b).or_fail()?);
        let gptc = drv::counter(&a1, "GPTC").or_fail()? - drv::counter(&a0, "GPTC").or_fail()?;
        let gprc = drv::counter(&b1, "GPRC").or_fail()? - drv::counter(&b0, "GPRC").or_fail()?;
        let (tx_q, rx_q) = (s.tx.stats(), s.rx.stats());
        let books = [
            ("A's driver (frames sent)", u64::from(s.sent)),
            ("A's GPTC", gptc),
            ("B's GPRC", gprc),
            ("B's driver (frames received)", rx_q.packets),
            ("frames checked at B", u64::from(s.received)),
        ];
        if books.iter().any(|&(_, n)| n != books[0].1) || tx_q.dropped + rx_q.dropped > 0 {
            return fail(format!(
                "the books do not balance: {books:?}; dropped tx {} rx {}",
                tx_q.dropped, rx_q.dropped
            ));
        }
        let rss_warm = rss_warm.unwrap_or(rss_end);
        if rss_end > rss_warm + RSS_SLACK_KIB {
            return fail(format!(
                "resident memory grew from {rss_warm} KiB after the warm-up to {rss_end} KiB"
            ));
        }
        let link_changes = ha.counts().link_changes;
        let pool = s.pool.clone();
        let rx_pool = s.rx.pool().clone();
        let wakeups = s.wakeups;
        if flips > 1 && wakeups == 0 {
            return fail("B's queue never woke on its interrupt in the interrupt phases");
        }
        drop(s);
        drop((a, b));
        for (what, p) in [("the transmit pool", &pool), ("B's receive pool", &rx_pool)] {
            let st = p.stats();
            if st.in_use != 0 {
                return fail(format!(
                    "{what}: {} of {} buffers leaked",
                    st.in_use, st.capacity
                ));
            }
        }
        Ok(format!(
            "{secs} s: {} frames (60-1514 bytes, a third tagged) sent and checked in order with their tags; {switches} VLAN mode switches, {restarts} queue restarts, {flips} poll/interrupt flips ({wakeups} interrupt wake-ups), link flap: {flap} ({link_changes} link changes); A GPTC = B GPRC = driver counts = {}; 0 buffers leaked; RSS {rss_warm} KiB after warm-up, {rss_end} KiB at the end",
            books[0].1, books[0].1
        ))
    })
}
