//! Driver-level traffic tests: link, MAC and counters after open; 10,000 frames from one port to
//! the other, byte-identical and in order, with the device counters agreeing; MAC loopback on
//! one port; dropping ports mid-traffic (also by a panic) and reopening them.
//!
//! Counter checks allow for what the datasheets and QEMU agree on: octet counters include the
//! 4-byte CRC of every frame (QEMU adds 4 for its fake CRC). Frames are at least 60 bytes, so
//! no runt padding (and no RUC) is involved.

use std::time::Duration;

use vfio_nic::device::{MacAddr, Port, RxQueue, TxQueue};
use vfio_nic::platform::dma::Packet;

use super::drv::{self, deltas, drain, frame, mixed_sizes, packet, pump, pump_into, run};
use super::{Ctx, Outcome};

/// Frames in the two-port transfer.
const FRAMES: usize = 10_000;
/// How long a receive queue must stay quiet before a test starts.
const QUIET: Duration = Duration::from_millis(50);

/// Link up, the MAC the environment expects, and counters that start at zero (but for stale
/// frames QEMU may deliver as soon as the ring is armed, which must then match exactly).
pub fn driver_open_link_mac_counters(ctx: &Ctx) -> Outcome {
    run(|| {
        let mut seen = Vec::new();
        for (i, &addr) in ctx.ports.iter().enumerate() {
            let mut p = drv::open(addr, false)?;
            let info = p.info();
            let link = p.link().map_err(|e| e.to_string())?;
            if !link.up {
                return Err(format!("{addr}: link is down after open ({link:?})"));
            }
            if let Some(expect) = ctx.expect_macs.as_ref().and_then(|v| v.get(i)) {
                if info.mac != *expect {
                    return Err(format!("{addr}: MAC {}, expected {expect}", info.mac));
                }
            }
            let (mut rx, _tx) = p.take_queues().map_err(|e| e.to_string())?;
            let stale = drain(&mut rx[0], QUIET)?;
            let s = drv::stats(&mut p)?;
            for (name, v) in &s.hw {
                let want = match *name {
                    "GPRC" | "TPR" | "rx_packets" => stale as u64,
                    "GORC" | "TOR" | "BPRC" | "MPRC" | "RUC" | "rx_bytes" if stale > 0 => continue,
                    _ if name.starts_with("PRC") && stale > 0 => continue,
                    _ => 0,
                };
                if *v != want {
                    return Err(format!(
                        "{addr}: counter {name} = {v} right after open, expected {want} ({stale} stale frames drained)"
                    ));
                }
            }
            seen.push(format!(
                "{addr} {} {} link {} Mb/s {} MAC {} ({} counters zero, {stale} stale)",
                info.driver,
                info.model,
                link.speed_mbps,
                if link.full_duplex { "FD" } else { "HD" },
                info.mac,
                s.hw.len()
            ));
        }
        Ok(seen.join("; "))
    })
}

/// Checks `got` against the frames `want` (byte-identical, in order).
fn same_frames(got: &[Packet], want: &[Vec<u8>]) -> Result<(), String> {
    for (i, (p, w)) in got.iter().zip(want).enumerate() {
        if p.data() != &w[..] {
            let seq = |d: &[u8]| {
                d.get(14..18)
                    .map(|s| u32::from_be_bytes(s.try_into().unwrap()))
            };
            return Err(format!(
                "frame {i}: received {} bytes (seq {:?}), sent {} bytes (seq {:?}); first difference at byte {:?}",
                p.len(),
                seq(p.data()),
                w.len(),
                seq(w),
                p.data().iter().zip(w.iter()).position(|(a, b)| a != b)
            ));
        }
    }
    if got.len() != want.len() {
        return Err(format!(
            "received {} frames, sent {}",
            got.len(),
            want.len()
        ));
    }
    Ok(())
}

/// Port A sends 10,000 frames of mixed sizes to port B; B gets all of them byte-identical and
/// in order, and the hardware counters on both sides agree with the software counts.
pub fn traffic_10k_mixed_sizes(ctx: &Ctx) -> Outcome {
    if ctx.ports.len() < 2 {
        return Outcome::Skip("needs two ports wired to each other".into());
    }
    run(|| {
        let mut a = drv::open(ctx.ports[0], false)?;
        let mut b = drv::open(ctx.ports[1], false)?;
        let (ma, mb) = (a.info().mac, b.info().mac);
        let (mut rxa, mut txa) = a.take_queues().map_err(|e| e.to_string())?;
        let (mut rxb, _txb) = b.take_queues().map_err(|e| e.to_string())?;
        let stale = drain(&mut rxb[0], QUIET)? + drain(&mut rxa[0], QUIET)?;
        let (a0, b0) = (drv::stats(&mut a)?, drv::stats(&mut b)?);

        let sizes = mixed_sizes(FRAMES);
        let frames: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &len)| frame(mb, ma, i as u32, len))
            .collect();
        let bytes: u64 = sizes.iter().map(|&l| l as u64).sum();
        let pool = rxa[0].pool().clone();
        let t0 = std::time::Instant::now();
        let mut seen = 0usize;
        let got = pump_into(
            &mut txa[0],
            &mut rxb[0],
            FRAMES,
            |i| packet(&pool, &frames[i]),
            FRAMES,
            Duration::from_millis(20),
            |p| {
                let want = frames
                    .get(seen)
                    .ok_or("more frames arrived than were sent")?;
                same_frames(std::slice::from_ref(&p), std::slice::from_ref(want))
                    .map_err(|e| format!("frame {seen}: {e}"))?;
                seen += 1;
                Ok(())
            },
        )?;
        let secs = t0.elapsed().as_secs_f64();
        if got != FRAMES {
            return Err(format!("received {got} frames, sent {FRAMES}"));
        }
        let rx_sw = rxb[0].stats();

        let (a1, b1) = (drv::stats(&mut a)?, drv::stats(&mut b)?);
        let names = drv::counter_names(a.info().driver);
        let tx = deltas(&a0, &a1, &names.tx)?;
        let rx = deltas(&b0, &b1, &names.rx)?;
        let n = FRAMES as u64;
        let crc = names.crc * n;
        if tx != [n, bytes + crc] {
            return Err(format!(
                "sender counters {:?} = {tx:?}, software sent {n} frames of {bytes} bytes (+{crc} CRC)",
                names.tx
            ));
        }
        if rx != [n, bytes + crc] {
            return Err(format!(
                "receiver counters {:?} = {rx:?}, software received {n} frames of {bytes} bytes (+{crc} CRC)",
                names.rx
            ));
        }
        if rx_sw.dropped != 0 {
            return Err(format!("the receive ring dropped {} frames", rx_sw.dropped));
        }
        drv::rx_errors_quiet(&b0, &b1, names.rx_errors, "receiver counter")?;
        Ok(format!(
            "{n} frames, {bytes} bytes, in order and byte-identical in {secs:.2} s; {:?} {tx:?}, {:?} {rx:?}; {stale} stale frames drained first",
            names.tx, names.rx
        ))
    })
}

/// MAC loopback on one port: the port receives its own frames.
pub fn mac_loopback(ctx: &Ctx) -> Outcome {
    if drv::is_virtio(ctx.ports[0]) {
        return Outcome::Skip(drv::NO_LOOPBACK.into());
    }
    run(|| {
        const N: usize = 500;
        let mut p = drv::open(ctx.ports[0], true)?;
        let mac = p.info().mac;
        let (mut rx, mut tx) = p.take_queues().map_err(|e| e.to_string())?;
        let stale = drain(&mut rx[0], QUIET)?;
        let s0 = drv::stats(&mut p)?;
        let frames: Vec<Vec<u8>> = mixed_sizes(N)
            .iter()
            .enumerate()
            .map(|(i, &len)| frame(mac, mac, 0x4c00_0000 + i as u32, len))
            .collect();
        let pool = rx[0].pool().clone();
        let got = pump(
            &mut tx[0],
            &mut rx[0],
            N,
            |i| packet(&pool, &frames[i]),
            N,
            Duration::from_millis(20),
        )?;
        same_frames(&got, &frames)?;
        drop(got);
        let s1 = drv::stats(&mut p)?;
        let d = deltas(&s0, &s1, &["GPTC", "GPRC"])?;
        if d != [N as u64, N as u64] {
            return Err(format!("GPTC/GPRC rose by {d:?}, expected {N} each"));
        }
        Ok(format!(
            "{N} frames came back byte-identical; GPTC/GPRC +{d:?}; {stale} stale frames drained"
        ))
    })
}

/// Starts a transfer, then drops the receiving port (queues first, then the port) and the
/// sending port while frames are in flight; then a port whose thread panics mid-traffic; then
/// reopens both and checks that traffic flows again. The runner checks the guest log for DMAR
/// faults: a device still writing into unmapped memory would show there.
pub fn drop_mid_traffic_and_reopen(ctx: &Ctx) -> Outcome {
    run(|| {
        let two = ctx.ports.len() >= 2;
        let (a_addr, b_addr) = (ctx.ports[0], ctx.ports[if two { 1 } else { 0 }]);
        let loopback = !two;
        // 1. Mid-traffic drop: queues in flight, port dropped after its queues.
        {
            let mut a = drv::open(a_addr, loopback)?;
            let ma = a.info().mac;
            let (mut rxa, mut txa) = a.take_queues().map_err(|e| e.to_string())?;
            let mut b_port = if two {
                Some(drv::open(b_addr, false)?)
            } else {
                None
            };
            let mut b_queues = match b_port.as_mut() {
                Some(b) => Some(b.take_queues().map_err(|e| e.to_string())?),
                None => None,
            };
            let pool = rxa[0].pool().clone();
            let mut batch = Vec::new();
            let mut rxbatch = Vec::new();
            for round in 0..40u32 {
                for i in 0..32u32 {
                    batch.push(packet(
                        &pool,
                        &frame(
                            MacAddr::BROADCAST,
                            ma,
                            round * 32 + i,
                            200 + (i as usize) * 40,
                        ),
                    )?);
                }
                txa[0].tx_burst(&mut batch).map_err(|e| e.to_string())?;
                batch.clear();
                let rx = match b_queues.as_mut() {
                    Some((rx, _)) => &mut rx[0],
                    None => &mut rxa[0],
                };
                rx.rx_burst(&mut rxbatch, 16).map_err(|e| e.to_string())?;
                if round == 20 {
                    // Drop B's queues and B with frames still arriving.
                    b_queues = None;
                    b_port = None;
                }
            }
            drop(rxbatch);
            drop((b_queues, b_port));
            // A: the port first while its queues still hold frames, then the queues.
            drop(a);
            drop((rxa, txa));
        }
        // 2. A panic while traffic flows: Drop runs during unwinding.
        let panicked = std::thread::spawn(move || {
            let mut a = drv::open(a_addr, loopback).expect("open for the panic test");
            let ma = a.info().mac;
            let (rx, mut tx) = a.take_queues().expect("queues");
            let pool = rx[0].pool().clone();
            let mut batch: Vec<Packet> = (0..64)
                .map(|i| packet(&pool, &frame(MacAddr::BROADCAST, ma, i, 300)).expect("packet"))
                .collect();
            let _ = tx[0].tx_burst(&mut batch);
            panic!("deliberate panic with the port open and frames in flight");
        })
        .join()
        .is_err();
        if !panicked {
            return Err("the panic test thread did not panic".into());
        }
        // 3. Reopen and check traffic.
        let mut a = drv::open(a_addr, loopback)?;
        let ma = a.info().mac;
        let (mut rxa, mut txa) = a.take_queues().map_err(|e| e.to_string())?;
        let mut b = if two {
            Some(drv::open(b_addr, false)?)
        } else {
            None
        };
        let (mut rxb, _txb) = match b.as_mut() {
            Some(b) => b.take_queues().map_err(|e| e.to_string())?,
            None => (Vec::new(), Vec::new()),
        };
        let stale = if two { drain(&mut rxb[0], QUIET)? } else { 0 } + drain(&mut rxa[0], QUIET)?;
        let mb = b.as_ref().map_or(ma, |b| b.info().mac);
        let frames: Vec<Vec<u8>> = (0..200)
            .map(|i| frame(mb, ma, 0x5e00_0000 + i, 64 + i as usize * 7))
            .collect();
        let pool = rxa[0].pool().clone();
        let rx = if two { &mut rxb[0] } else { &mut rxa[0] };
        let got = pump(
            &mut txa[0],
            rx,
            frames.len(),
            |i| packet(&pool, &frames[i]),
            frames.len(),
            Duration::from_millis(20),
        )?;
        same_frames(&got, &frames)?;
        Ok(format!(
            "dropped mid-traffic and by a panic; after reopening {} frames arrived intact ({stale} stale frames drained){}",
            got.len(),
            if two { "" } else { " (one port: MAC loopback)" }
        ))
    })
}
