//! VLAN modes on host devices: the null device (Software and Deferred receive, Software
//! transmit) and a fake VLAN-capable device (adds Hardware receive and transmit), checked
//! against the rules of `docs/vlan-rules.md`: the same stimulus gives the same bytes and the same
//! TCI whatever the mode.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering::*};
use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use vfio_nic::device::{Port, QueueError, QueueStats, RxQueue, TxQueue};
use vfio_nic::devices::null::{NullConfig, NullPort, NullRx};
use vfio_nic::error::{Error, Result};
use vfio_nic::platform::dma::{IdentityMapper, Meta, Packet, Pool, PoolConfig};
use vfio_nic::vlan::frame::rx_wire_frame_into;
use vfio_nic::vlan::{
    find_tag, tx_wire_frame, Lookup, PacketVlan, RxMode, SwVlanTx, Tci, Tpid, TxMode, Vid,
    VlanCaps, VlanConfig, VlanControl, VlanFilter, VlanHardware, VlanRxCtx,
};

// ---------------------------------------------------------------------------------------------
// Frames

/// MAC addresses 1..=12, then the tags, the ethertype and a counting payload.
fn eth(tags: &[(u16, u16)], ethertype: u16, payload: usize) -> Vec<u8> {
    let mut f: Vec<u8> = (1..=12).collect();
    for &(tpid, tci) in tags {
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&tci.to_be_bytes());
    }
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend((0..payload).map(|i| (i * 7) as u8));
    f
}

const C: u16 = 0x8100;
const S: u16 = 0x88a8;
const IPV4: u16 = 0x0800;

fn tci(vid: u16, pcp: u8, dei: bool) -> Tci {
    Tci::new(Vid::new(vid).unwrap(), pcp, dei).unwrap()
}

/// A "random" VID, fixed by a seed so failures reproduce.
fn random_vid() -> u16 {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    (x % 4093 + 1) as u16
}

// ---------------------------------------------------------------------------------------------
// A fake VLAN-capable device: a null receive queue behind a model of a NIC's strip and filter,
// with a "ring" that delivers packets one burst after the device handled them (so a mode switch
// meets packets received under the old setting).

#[derive(Default)]
struct FakeState {
    strip: AtomicBool,
    filter_on: AtomicBool,
    table: Mutex<Vec<u16>>,
    tpid: AtomicU16,
    extended: AtomicBool,
    outer: AtomicU16,
    calls: AtomicU64,
    hw_stripped: AtomicU64,
    /// The device ignores its VLAN table (a best-effort filter that lets everything by).
    leaky: AtomicBool,
}

impl FakeState {
    fn ctx(&self) -> VlanRxCtx {
        let tpid = Tpid::new(self.tpid.load(SeqCst)).unwrap_or(Tpid::C_TAG);
        if self.extended.load(SeqCst) {
            VlanRxCtx::extended(tpid, Tpid::new(self.outer.load(SeqCst)).unwrap())
        } else {
            VlanRxCtx::new(tpid)
        }
    }
}

struct FakeHw {
    st: Arc<FakeState>,
    caps: VlanCaps,
}

impl VlanHardware for FakeHw {
    fn vlan_caps(&self) -> VlanCaps {
        self.caps.clone()
    }
    fn set_rx_strip(&mut self, queue: u16, on: bool) -> Result<()> {
        assert_eq!(queue, 0);
        assert!(self.caps.rx_strip);
        self.st.calls.fetch_add(1, SeqCst);
        self.st.strip.store(on, SeqCst);
        Ok(())
    }
    fn set_vlan_filter(&mut self, on: bool) -> Result<()> {
        assert!(self.caps.filter);
        self.st.filter_on.store(on, SeqCst);
        Ok(())
    }
    fn add_vlan(&mut self, vid: Vid) -> Result<()> {
        assert!(self.caps.filter);
        let mut t = self.st.table.lock().unwrap();
        if !t.contains(&vid.get()) {
            t.push(vid.get());
        }
        Ok(())
    }
    fn remove_vlan(&mut self, vid: Vid) -> Result<()> {
        self.st.table.lock().unwrap().retain(|&v| v != vid.get());
        Ok(())
    }
    fn set_tpid(&mut self, tpid: Tpid) -> Result<()> {
        self.st.tpid.store(tpid.get(), SeqCst);
        Ok(())
    }
    fn set_extended_vlan(&mut self, on: bool, outer_tpid: Tpid) -> Result<()> {
        self.st.extended.store(on, SeqCst);
        self.st.outer.store(outer_tpid.get(), SeqCst);
        Ok(())
    }
}

struct FakeRx {
    inner: NullRx,
    st: Arc<FakeState>,
    ring: VecDeque<Packet>,
}

impl RxQueue for FakeRx {
    fn rx_burst(&mut self, batch: &mut Vec<Packet>, max: usize) -> Result<usize, QueueError> {
        let mut fresh = Vec::new();
        self.inner.rx_burst(&mut fresh, max)?;
        let ctx = self.st.ctx();
        for mut p in fresh {
            if self.st.filter_on.load(SeqCst) && !self.st.leaky.load(SeqCst) {
                if let Lookup::Tagged(t) = find_tag(p.data(), ctx) {
                    if t.vid() != 0 && !self.st.table.lock().unwrap().contains(&t.vid()) {
                        continue;
                    }
                }
            }
            if self.st.strip.load(SeqCst) {
                if let Lookup::Tagged(t) = p.pop_vlan(ctx) {
                    p.meta.vlan_tci = t.raw();
                    p.meta.flags |= Meta::VLAN_STRIPPED;
                    self.st.hw_stripped.fetch_add(1, Relaxed);
                }
            }
            self.ring.push_back(p);
        }
        // Keep half a burst back in the ring: handled under the old setting, delivered later.
        let n = self.ring.len().saturating_sub(max / 2).min(max);
        batch.extend(self.ring.drain(..n));
        Ok(n)
    }
    fn stats(&self) -> QueueStats {
        self.inner.stats()
    }
    fn pool(&self) -> &Pool {
        self.inner.pool()
    }
}

fn full_caps(name: &str) -> VlanCaps {
    VlanCaps {
        device: name.into(),
        rx_strip: true,
        tx_insert: true,
        filter: true,
        extended: true,
        tx_insert_extended: true,
        any_tpid: true,
        rx_queues: 1,
        per_queue_strip: false,
        rx_pre_stripped: false,
        filter_best_effort: false,
    }
}

fn null_port(frame: &[u8]) -> NullPort {
    NullPort::new(
        0,
        NullConfig {
            copy: true,
            frame_size: frame.len().max(1),
            template: Some(frame.to_vec()),
            pool: PoolConfig {
                buffers: 256,
                ..PoolConfig::default()
            },
            ..NullConfig::default()
        },
    )
    .unwrap()
}

/// Which device a case runs on.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Dev {
    /// The null device (no VLAN hardware).
    Null,
    /// The fake device with these capabilities: strip+filter, or strip only.
    Fake { filter: bool },
    /// The fake device with strip and a best-effort filter that lets every frame by (as
    /// QEMU's virtio-net was seen to).
    Leaky,
}

/// Every (device, mode) pair that can run.
fn setups() -> Vec<(Dev, RxMode)> {
    let mut v = vec![(Dev::Null, RxMode::Software), (Dev::Null, RxMode::Deferred)];
    for filter in [true, false] {
        for m in RxMode::ALL {
            v.push((Dev::Fake { filter }, m));
        }
    }
    v
}

/// A port, its control, a wrapped receive queue, and the fake's hardware handle (if any).
struct Rig {
    ctl: VlanControl,
    rx: vfio_nic::vlan::VlanRx<AnyQ>,
    hw: Box<dyn VlanHardware + Send>,
    st: Option<Arc<FakeState>>,
}

/// Either device's receive queue.
struct AnyQ(Box<dyn RxQueue>);

impl RxQueue for AnyQ {
    fn rx_burst(&mut self, batch: &mut Vec<Packet>, max: usize) -> Result<usize, QueueError> {
        self.0.rx_burst(batch, max)
    }
    fn stats(&self) -> QueueStats {
        self.0.stats()
    }
    fn pool(&self) -> &Pool {
        self.0.pool()
    }
}

fn rig(dev: Dev, frame: &[u8], cfg: &VlanConfig) -> Result<Rig> {
    let mut port = null_port(frame);
    match dev {
        Dev::Null => {
            let ctl = VlanControl::new(&mut port, cfg)?;
            let (rx, _) = port.take_queues()?;
            let q = AnyQ(Box::new(rx.into_iter().next().unwrap()));
            Ok(Rig {
                rx: ctl.wrap_rx(q),
                ctl,
                hw: Box::new(port),
                st: None,
            })
        }
        Dev::Fake { .. } | Dev::Leaky => {
            let leaky = dev == Dev::Leaky;
            let st = Arc::new(FakeState::default());
            st.tpid.store(C, SeqCst);
            st.leaky.store(leaky, SeqCst);
            let mut hw = FakeHw {
                st: st.clone(),
                caps: VlanCaps {
                    filter: dev != (Dev::Fake { filter: false }),
                    filter_best_effort: leaky,
                    ..full_caps("fake:0")
                },
            };
            let ctl = VlanControl::new(&mut hw, cfg)?;
            let (rx, _) = port.take_queues()?;
            let q = AnyQ(Box::new(FakeRx {
                inner: rx.into_iter().next().unwrap(),
                st: st.clone(),
                ring: VecDeque::new(),
            }));
            Ok(Rig {
                rx: ctl.wrap_rx(q),
                ctl,
                hw: Box::new(hw),
                st: Some(st),
            })
        }
    }
}

/// What an application observes: per packet delivered, the TCI and the untagged bytes.
type Seen = Vec<(Option<Tci>, Vec<u8>)>;

/// Receives `bursts` bursts of 8 and asks every packet for its tag (checking that peek agrees,
/// that a second take changes nothing, and that the wire view is the original frame).
fn observe(rig: &mut Rig, original: &[u8], bursts: usize) -> Seen {
    let mut seen = Vec::new();
    let mut batch = Vec::new();
    for _ in 0..bursts {
        rig.rx.rx_burst(&mut batch, 8).unwrap();
        let ctx = rig.rx.ctx();
        for p in batch.iter_mut() {
            let peeked = p.peek_vlan(ctx);
            let t = rig.rx.take(p);
            assert_eq!(peeked, t, "peek and take agree");
            let bytes = p.data().to_vec();
            assert_eq!(p.take_vlan(ctx), t, "asking twice");
            assert_eq!(p.data(), &bytes[..], "asking twice never strips twice");
            let mut wire = Vec::new();
            p.wire_frame_into(ctx, &mut wire);
            assert_eq!(wire, original, "the wire view is the frame as sent");
            seen.push((t, bytes));
        }
        Pool::free_bulk(batch.drain(..));
    }
    seen
}

/// Runs a frame through every device and mode with `cfg` and checks that all give `expect`
/// (the TCI and the bytes every delivered packet must have) or all drop it (`None`).
fn same_everywhere(frame: &[u8], cfg: &VlanConfig, expect: Option<(Option<Tci>, &[u8])>) {
    for (dev, mode) in setups() {
        let cfg = VlanConfig {
            rx_mode: mode,
            ..cfg.clone()
        };
        let mut r = rig(dev, frame, &cfg).unwrap();
        let seen = observe(&mut r, frame, 3);
        match expect {
            Some((t, bytes)) => {
                assert!(!seen.is_empty(), "{dev:?} {mode}: nothing received");
                for (st, sb) in &seen {
                    assert_eq!(*st, t, "{dev:?} {mode}: TCI");
                    assert_eq!(&sb[..], bytes, "{dev:?} {mode}: bytes");
                }
            }
            None => assert!(seen.is_empty(), "{dev:?} {mode}: should be dropped"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Receive: the same results in every mode

#[test]
fn tagged_frame_gives_tci_and_untagged_bytes_in_every_mode() {
    let t = tci(100, 5, true);
    let f = eth(&[(C, t.raw())], IPV4, 46);
    same_everywhere(
        &f,
        &VlanConfig::default(),
        Some((Some(t), &eth(&[], IPV4, 46))),
    );
}

#[test]
fn untagged_frame_reports_none_in_every_mode() {
    let f = eth(&[], IPV4, 50);
    same_everywhere(&f, &VlanConfig::default(), Some((None, &f)));
}

#[test]
fn priority_tagged_frame_is_received_and_stripped() {
    let t = tci(0, 6, false);
    let f = eth(&[(C, t.raw())], IPV4, 46);
    let expect = eth(&[], IPV4, 46);
    same_everywhere(&f, &VlanConfig::default(), Some((Some(t), &expect)));
    let filtered = VlanConfig {
        filter: true,
        ..VlanConfig::default()
    };
    same_everywhere(&f, &filtered, Some((Some(t), &expect)));
}

#[test]
fn double_tag_without_extended_mode_acts_on_the_outer_tag() {
    let (outer, inner) = (tci(10, 1, false), tci(20, 2, true));
    let f = eth(&[(C, outer.raw()), (C, inner.raw())], IPV4, 40);
    let expect = eth(&[(C, inner.raw())], IPV4, 40);
    same_everywhere(&f, &VlanConfig::default(), Some((Some(outer), &expect)));
    // An S-tag outside is not a C-tag: untagged with TPID 0x8100.
    let f = eth(&[(S, outer.raw()), (C, inner.raw())], IPV4, 40);
    same_everywhere(&f, &VlanConfig::default(), Some((None, &f)));
}

#[test]
fn double_tag_with_extended_mode_acts_on_the_inner_tag() {
    let (outer, inner) = (tci(10, 1, false), tci(20, 2, true));
    let cfg = VlanConfig {
        extended: true,
        outer_tpid: Tpid::S_TAG,
        ..VlanConfig::default()
    };
    let f = eth(&[(S, outer.raw()), (C, inner.raw())], IPV4, 40);
    let expect = eth(&[(S, outer.raw())], IPV4, 40);
    same_everywhere(&f, &cfg, Some((Some(inner), &expect)));
    // Filter on the inner VID: 20 passes only when in the table; the outer VID does not matter.
    let mut table = VlanFilter::new();
    table.add(10).unwrap();
    let filtered = VlanConfig {
        filter: true,
        table,
        ..cfg.clone()
    };
    same_everywhere(&f, &filtered, None);
    let filtered = VlanConfig {
        table: VlanFilter::with([20]).unwrap(),
        ..filtered
    };
    same_everywhere(&f, &filtered, Some((Some(inner), &expect)));
    // A single C-tag has no outer tag: untagged in extended mode.
    let single = eth(&[(C, inner.raw())], IPV4, 44);
    same_everywhere(&single, &cfg, Some((None, &single)));
}

#[test]
fn truncated_tagged_frames_are_delivered_as_is_and_untagged() {
    let full = eth(&[(C, 0x0064)], IPV4, 0); // 18 bytes
    for n in [14, 15, 16, 17] {
        let f = &full[..n];
        same_everywhere(f, &VlanConfig::default(), Some((None, f)));
    }
    // 18 bytes is the shortest tagged frame.
    same_everywhere(
        &full,
        &VlanConfig::default(),
        Some((
            Some(Tci::from_raw(0x64)),
            &full[..12]
                .iter()
                .chain(&full[16..])
                .copied()
                .collect::<Vec<_>>(),
        )),
    );
    // Extended mode: up to 21 bytes is too short for outer + inner + ethertype.
    let cfg = VlanConfig {
        extended: true,
        ..VlanConfig::default()
    };
    let q = eth(&[(S, 1), (C, 2)], IPV4, 0);
    for n in 14..22 {
        same_everywhere(&q[..n], &cfg, Some((None, &q[..n])));
    }
    // Shorter than a MAC header: untagged, no panic.
    for n in 1..14 {
        same_everywhere(&full[..n], &VlanConfig::default(), Some((None, &full[..n])));
    }
}

#[test]
fn malformed_frames_are_counted_where_software_reads_them() {
    let f = &eth(&[(C, 5)], IPV4, 0)[..16];
    let mut r = rig(Dev::Null, f, &VlanConfig::default()).unwrap();
    let mut batch = Vec::new();
    r.rx.rx_burst(&mut batch, 4).unwrap();
    assert!(batch.iter().all(|p| p.vlan_malformed()));
    assert_eq!(r.rx.vlan_stats().malformed, 4);
    assert_eq!(r.rx.vlan_stats().stripped, 0);
}

// ---------------------------------------------------------------------------------------------
// Filter

fn received(r: &mut Rig, n: usize) -> usize {
    let mut batch = Vec::new();
    let mut got = 0;
    // Two bursts per check: the fake device delivers from its ring one burst late.
    for _ in 0..2 {
        got += r.rx.rx_burst(&mut batch, n).unwrap();
        Pool::free_bulk(batch.drain(..));
    }
    got
}

#[test]
fn filter_on_off_add_remove_at_every_boundary() {
    let vids = [1u16, 31, 32, 4094, random_vid()];
    for (dev, mode) in setups() {
        for &vid in &vids {
            let f = eth(&[(C, tci(vid, 3, false).raw())], IPV4, 46);
            let cfg = VlanConfig {
                rx_mode: mode,
                ..VlanConfig::default()
            };
            let mut r = rig(dev, &f, &cfg).unwrap();
            let what = format!("{dev:?} {mode} vid {vid}");
            assert!(received(&mut r, 8) > 0, "{what}: filter off receives");
            r.ctl.set_filter(r.hw.as_mut(), true).unwrap();
            received(&mut r, 8); // flush the fake device's ring
            assert_eq!(received(&mut r, 8), 0, "{what}: filter on, not a member");
            r.ctl.add_vlan(r.hw.as_mut(), vid).unwrap();
            received(&mut r, 8);
            assert!(received(&mut r, 8) > 0, "{what}: added");
            assert!(r.ctl.filter_table().contains(vid));
            r.ctl.remove_vlan(r.hw.as_mut(), vid).unwrap();
            received(&mut r, 8);
            assert_eq!(received(&mut r, 8), 0, "{what}: removed");
            r.ctl.set_filter(r.hw.as_mut(), false).unwrap();
            received(&mut r, 8);
            assert!(received(&mut r, 8) > 0, "{what}: filter off again");
        }
        // Untagged and VID 0 always pass a filter with an empty table.
        for f in [eth(&[], IPV4, 46), eth(&[(C, 0x6000)], IPV4, 46)] {
            let cfg = VlanConfig {
                rx_mode: mode,
                filter: true,
                ..VlanConfig::default()
            };
            let mut r = rig(dev, &f, &cfg).unwrap();
            assert!(
                received(&mut r, 8) > 0,
                "{dev:?} {mode}: untagged / VID 0 pass"
            );
        }
    }
}

#[test]
fn software_filter_runs_only_where_the_device_cannot_filter() {
    let f = eth(&[(C, 7)], IPV4, 46);
    let on = VlanConfig {
        filter: true,
        ..VlanConfig::default()
    };
    for (dev, sw) in [
        (Dev::Null, true),
        (Dev::Fake { filter: false }, true),
        (Dev::Fake { filter: true }, false),
        (Dev::Leaky, true),
    ] {
        let r = rig(dev, &f, &on).unwrap();
        assert_eq!(r.ctl.filter_in_software(), sw, "{dev:?}");
    }
    // A best-effort device table is written (it may save the device work) and the software
    // filter still drops what the device let by: VID 7 is not in the table.
    let mut r = rig(Dev::Leaky, &f, &on).unwrap();
    let mut batch = Vec::new();
    assert_eq!(r.rx.rx_burst(&mut batch, 8).unwrap(), 0);
    assert!(r.rx.vlan_stats().filtered > 0);
    r.ctl.add_vlan(r.hw.as_mut(), 7).unwrap();
    assert!(r.st.as_ref().unwrap().table.lock().unwrap().contains(&7));
    let _ = r.rx.rx_burst(&mut batch, 8).unwrap();
    assert!(
        r.rx.rx_burst(&mut batch, 8).unwrap() > 0,
        "VID 7 added: received"
    );
    let mut r = rig(Dev::Null, &f, &on).unwrap();
    let mut batch = Vec::new();
    assert_eq!(r.rx.rx_burst(&mut batch, 8).unwrap(), 0);
    assert_eq!(r.rx.vlan_stats().filtered, 8);
    assert_eq!(
        r.rx.pool().stats().in_use,
        0,
        "dropped frames go back to the pool"
    );
}

#[test]
fn vid_4095_is_refused_with_the_reason() {
    let f = eth(&[], IPV4, 46);
    let mut r = rig(Dev::Null, &f, &VlanConfig::default()).unwrap();
    let e = r.ctl.add_vlan(r.hw.as_mut(), 4095).unwrap_err();
    assert!(matches!(e, Error::ReservedVlanId { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("802.1Q reserves it") && msg.contains("filter"),
        "{msg}"
    );
    assert!(r.ctl.add_vlan(r.hw.as_mut(), 4096).is_err());
    assert!(VlanFilter::new().add(4095).is_err());
    let pool = Pool::new(PoolConfig::default(), Arc::new(IdentityMapper)).unwrap();
    let mut p = pool.alloc().unwrap();
    let e: Error = p.set_tx_vlan(Tci::from_raw(0x2fff)).unwrap_err().into();
    assert!(e.to_string().contains("transmit tag"), "{e}");
    assert!("4095:1".parse::<Tci>().is_err());
}

#[test]
fn vlan_zero_is_always_a_member() {
    let f = eth(&[], IPV4, 46);
    let mut r = rig(Dev::Fake { filter: true }, &f, &VlanConfig::default()).unwrap();
    r.ctl.remove_vlan(r.hw.as_mut(), 0).unwrap();
    assert!(r.ctl.filter_table().contains(0));
    assert_eq!(
        r.ctl.filter_table().words()[0] & 1,
        1,
        "VFTA bit 0 stays set"
    );
}

// ---------------------------------------------------------------------------------------------
// TPID

#[test]
fn tpid_0x88a8_is_recognised_only_when_configured() {
    let t = tci(300, 4, false);
    let s_tagged = eth(&[(S, t.raw())], IPV4, 46);
    let c_tagged = eth(&[(C, t.raw())], IPV4, 46);
    let untagged = eth(&[], IPV4, 46);
    same_everywhere(&s_tagged, &VlanConfig::default(), Some((None, &s_tagged)));
    let s = VlanConfig {
        tpid: Tpid::S_TAG,
        ..VlanConfig::default()
    };
    same_everywhere(&s_tagged, &s, Some((Some(t), &untagged)));
    same_everywhere(&c_tagged, &s, Some((None, &c_tagged)));
    // Filtering follows the TPID too.
    let sf = VlanConfig {
        filter: true,
        ..s.clone()
    };
    same_everywhere(&s_tagged, &sf, None);
    same_everywhere(&c_tagged, &sf, Some((None, &c_tagged)));
}

#[test]
fn tpid_change_at_run_time() {
    let t = tci(300, 4, false);
    let f = eth(&[(S, t.raw())], IPV4, 46);
    for (dev, mode) in setups() {
        let cfg = VlanConfig {
            rx_mode: mode,
            ..VlanConfig::default()
        };
        let mut r = rig(dev, &f, &cfg).unwrap();
        let before = observe(&mut r, &f, 2);
        assert!(before.iter().all(|(x, _)| x.is_none()), "{dev:?} {mode}");
        r.ctl.set_tpid(r.hw.as_mut(), Tpid::S_TAG).unwrap();
        observe(&mut r, &f, 1); // the fake's ring holds frames from before the change
        let after = observe(&mut r, &f, 2);
        assert!(!after.is_empty());
        assert!(after.iter().all(|(x, _)| *x == Some(t)), "{dev:?} {mode}");
    }
}

// ---------------------------------------------------------------------------------------------
// Hardware mode where there is no hardware

#[test]
fn hardware_modes_on_the_null_device_are_configuration_errors() {
    let f = eth(&[], IPV4, 46);
    let mut port = null_port(&f);
    for cfg in [
        VlanConfig {
            rx_mode: RxMode::Hardware,
            ..VlanConfig::default()
        },
        VlanConfig {
            tx_mode: TxMode::Hardware,
            ..VlanConfig::default()
        },
    ] {
        let e = VlanControl::new(&mut port, &cfg).unwrap_err().to_string();
        assert!(e.contains("null:0") && e.contains("mode hw"), "{e}");
    }
    let ctl = VlanControl::new(&mut port, &VlanConfig::default()).unwrap();
    let e = ctl.set_rx_mode(&mut port, RxMode::Hardware).unwrap_err();
    assert!(e.to_string().contains("receive mode hw"), "{e}");
    let e = ctl.set_tx_mode(&mut port, TxMode::Hardware).unwrap_err();
    assert!(e.to_string().contains("transmit mode hw"), "{e}");
    assert_eq!(
        ctl.rx_mode(),
        RxMode::Software,
        "a refused switch changes nothing"
    );
    // A strip-less device refuses extended mode with hardware tagging, not in software.
    let st = Arc::new(FakeState::default());
    let mut hw = FakeHw {
        st,
        caps: VlanCaps {
            extended: false,
            ..full_caps("fake:1")
        },
    };
    let ctl = VlanControl::new(
        &mut hw,
        &VlanConfig {
            rx_mode: RxMode::Hardware,
            ..VlanConfig::default()
        },
    )
    .unwrap();
    let e = ctl.set_extended(&mut hw, true, Tpid::S_TAG).unwrap_err();
    assert!(
        e.to_string().contains("fake:1") && e.to_string().contains("QinQ"),
        "{e}"
    );
    ctl.set_rx_mode(&mut hw, RxMode::Deferred).unwrap();
    ctl.set_extended(&mut hw, true, Tpid::S_TAG).unwrap();
}

#[test]
fn hardware_insertion_in_extended_mode_is_refused_where_unconfirmed() {
    // The 82599 advertises this (which TPID it inserts in QinQ mode is unconfirmed): extended
    // mode works with hardware receive and software transmit, not with hardware transmit.
    let caps = VlanCaps {
        tx_insert_extended: false,
        ..full_caps("fake:2")
    };
    let mut hw = FakeHw {
        st: Arc::new(FakeState::default()),
        caps: caps.clone(),
    };
    let qinq = |rx_mode, tx_mode| VlanConfig {
        rx_mode,
        tx_mode,
        extended: true,
        ..VlanConfig::default()
    };
    let e = VlanControl::new(&mut hw, &qinq(RxMode::Deferred, TxMode::Hardware)).unwrap_err();
    assert!(
        matches!(e, Error::NotSupported { .. })
            && e.to_string().contains("fake:2")
            && e.to_string().contains("extended (QinQ)")
            && e.to_string().contains("use transmit mode sw"),
        "{e}"
    );
    let ctl = VlanControl::new(&mut hw, &qinq(RxMode::Hardware, TxMode::Software)).unwrap();
    assert!(ctl.set_tx_mode(&mut hw, TxMode::Hardware).is_err());
    ctl.set_extended(&mut hw, false, Tpid::S_TAG).unwrap();
    ctl.set_tx_mode(&mut hw, TxMode::Hardware).unwrap();
    assert!(ctl.set_extended(&mut hw, true, Tpid::S_TAG).is_err());
}

#[test]
fn leaving_hardware_mode_clears_the_strip_and_reapply_restores_it() {
    let st = Arc::new(FakeState::default());
    let mut hw = FakeHw {
        st: st.clone(),
        caps: full_caps("fake:0"),
    };
    let ctl = VlanControl::new(
        &mut hw,
        &VlanConfig {
            rx_mode: RxMode::Hardware,
            filter: true,
            table: VlanFilter::with([5, 4094]).unwrap(),
            ..VlanConfig::default()
        },
    )
    .unwrap();
    assert!(st.strip.load(SeqCst) && st.filter_on.load(SeqCst));
    ctl.set_rx_mode(&mut hw, RxMode::Software).unwrap();
    assert!(!st.strip.load(SeqCst));
    ctl.set_rx_mode(&mut hw, RxMode::Hardware).unwrap();
    // A reset wipes the device; reapply writes everything back.
    st.strip.store(false, SeqCst);
    st.filter_on.store(false, SeqCst);
    st.table.lock().unwrap().clear();
    ctl.reapply(&mut hw).unwrap();
    assert!(st.strip.load(SeqCst) && st.filter_on.load(SeqCst));
    let mut t = st.table.lock().unwrap().clone();
    t.sort();
    assert_eq!(t, vec![0, 5, 4094]);
}

// ---------------------------------------------------------------------------------------------
// Transmit

/// A transmit queue that records what would go on the wire; as "hardware" it inserts tags
/// itself (with the reference function the software 82599 uses).
struct CaptureTx {
    wire: Arc<Mutex<Vec<Vec<u8>>>>,
    tpid: Tpid,
}

/// Software insertion by the VLAN layer's default pass.
impl SwVlanTx for CaptureTx {}

impl TxQueue for CaptureTx {
    fn tx_burst(&mut self, batch: &mut Vec<Packet>) -> Result<usize, QueueError> {
        let n = batch.len();
        let mut w = self.wire.lock().unwrap();
        for p in batch.drain(..) {
            let t = p
                .meta
                .has(Meta::TX_VLAN)
                .then(|| Tci::from_raw(p.meta.vlan_tci));
            w.push(tx_wire_frame(p.data(), self.tpid, t).unwrap());
        }
        Ok(n)
    }
    fn stats(&self) -> QueueStats {
        QueueStats::default()
    }
}

fn send(mode: TxMode, cfg: &VlanConfig, frames: &[(Vec<u8>, Option<Tci>)]) -> Vec<Vec<u8>> {
    let st = Arc::new(FakeState::default());
    let mut hw = FakeHw {
        st,
        caps: full_caps("fake:0"),
    };
    let ctl = VlanControl::new(
        &mut hw,
        &VlanConfig {
            tx_mode: mode,
            ..cfg.clone()
        },
    )
    .unwrap();
    let wire = Arc::new(Mutex::new(Vec::new()));
    let mut tx = ctl.wrap_tx(CaptureTx {
        wire: wire.clone(),
        tpid: cfg.rx_ctx().push_tpid(),
    });
    let pool = Pool::new(PoolConfig::default(), Arc::new(IdentityMapper)).unwrap();
    let mut batch = Vec::new();
    for (f, t) in frames {
        let mut p = pool.alloc().unwrap();
        assert!(p.set_data(f));
        if let Some(t) = t {
            p.set_tx_vlan(*t).unwrap();
        }
        batch.push(p);
    }
    assert_eq!(tx.tx_burst(&mut batch).unwrap(), frames.len());
    let inserted = frames.iter().filter(|(_, t)| t.is_some()).count() as u64;
    let expect = if mode == TxMode::Software {
        inserted
    } else {
        0
    };
    assert_eq!(tx.vlan_stats().inserted, expect);
    let w = wire.lock().unwrap().clone();
    w
}

#[test]
fn insertion_is_byte_identical_in_both_transmit_modes() {
    let t = tci(100, 5, true);
    let frames = vec![
        (eth(&[], IPV4, 46), Some(t)),
        (eth(&[], IPV4, 46), None),
        (eth(&[(C, 7)], IPV4, 42), Some(t)), // a new outermost tag
        (eth(&[], IPV4, 46), Some(tci(0, 7, false))),
        (eth(&[], IPV4, 1400), Some(tci(4094, 0, false))),
    ];
    for cfg in [
        VlanConfig::default(),
        VlanConfig {
            tpid: Tpid::S_TAG,
            ..VlanConfig::default()
        },
        VlanConfig {
            extended: true,
            ..VlanConfig::default()
        },
    ] {
        let sw = send(TxMode::Software, &cfg, &frames);
        let hw = send(TxMode::Hardware, &cfg, &frames);
        assert_eq!(sw, hw, "{cfg:?}");
        let push = cfg.rx_ctx().push_tpid().get();
        assert_eq!(sw[0], eth(&[(push, t.raw())], IPV4, 46));
        assert_eq!(sw[1], frames[1].0, "no tag asked, none sent");
        assert_eq!(sw[2], eth(&[(push, t.raw()), (C, 7)], IPV4, 42));
    }
}

#[test]
fn software_insertion_on_the_null_device_and_its_limits() {
    let f = eth(&[], IPV4, 46);
    let mut port = null_port(&f);
    let ctl = VlanControl::new(&mut port, &VlanConfig::default()).unwrap();
    let (mut rx, tx) = port.take_queues().unwrap();
    let mut tx = ctl.wrap_tx(tx.into_iter().next().unwrap());
    let mut batch = Vec::new();
    rx[0].rx_burst(&mut batch, 4).unwrap();
    batch[0].set_tx_vlan(tci(9, 1, false)).unwrap();
    batch[1].set_tx_vlan(tci(9, 1, false)).unwrap();
    batch[1].set_len(11); // too short to carry a tag: dropped, never sent untagged
    assert_eq!(tx.tx_burst(&mut batch).unwrap(), 4);
    let s = tx.vlan_stats();
    assert_eq!((s.inserted, s.malformed), (1, 1));
    assert_eq!(tx.stats().packets, 3);
    assert_eq!(tx.stats().bytes, 3 * f.len() as u64 + 4);
}

#[test]
fn a_retried_packet_is_tagged_once_across_a_transmit_mode_switch() {
    let st = Arc::new(FakeState::default());
    let mut hw = FakeHw {
        st,
        caps: full_caps("fake:0"),
    };
    let ctl = VlanControl::new(&mut hw, &VlanConfig::default()).unwrap();
    let pool = Pool::new(PoolConfig::default(), Arc::new(IdentityMapper)).unwrap();
    let wire = Arc::new(Mutex::new(Vec::new()));
    // A transmit queue that takes nothing the first time.
    struct Full(bool, CaptureTx);
    impl SwVlanTx for Full {}
    impl TxQueue for Full {
        fn tx_burst(&mut self, b: &mut Vec<Packet>) -> Result<usize, QueueError> {
            if std::mem::replace(&mut self.0, false) {
                return Ok(0);
            }
            self.1.tx_burst(b)
        }
        fn stats(&self) -> QueueStats {
            QueueStats::default()
        }
    }
    let mut tx = ctl.wrap_tx(Full(
        true,
        CaptureTx {
            wire: wire.clone(),
            tpid: Tpid::C_TAG,
        },
    ));
    let f = eth(&[], IPV4, 46);
    let mut p = pool.alloc().unwrap();
    p.set_data(&f);
    p.set_tx_vlan(tci(5, 0, false)).unwrap();
    let mut batch = vec![p];
    assert_eq!(tx.tx_burst(&mut batch).unwrap(), 0);
    ctl.set_tx_mode(&mut hw, TxMode::Hardware).unwrap();
    assert_eq!(tx.tx_burst(&mut batch).unwrap(), 1);
    assert_eq!(wire.lock().unwrap()[0], eth(&[(C, 5)], IPV4, 46));
}

// ---------------------------------------------------------------------------------------------
// Switching modes under traffic

fn switch_under_traffic(dev: Dev, modes: &'static [RxMode], extended: bool) {
    let (outer, inner) = (tci(100, 5, false), tci(200, 2, true));
    let (cfg, f, expect_tci, expect) = if extended {
        (
            VlanConfig {
                extended: true,
                ..VlanConfig::default()
            },
            eth(&[(S, outer.raw()), (C, inner.raw())], IPV4, 40),
            inner,
            eth(&[(S, outer.raw())], IPV4, 40),
        )
    } else {
        (
            VlanConfig::default(),
            eth(&[(C, outer.raw()), (C, inner.raw())], IPV4, 40),
            outer,
            eth(&[(C, inner.raw())], IPV4, 40),
        )
    };
    let mut r = rig(dev, &f, &cfg).unwrap();
    let ctl = r.ctl.clone();
    let mut hw = std::mem::replace(&mut r.hw, Box::new(null_port(&f)));
    let mut unflagged = 0u64; // reached the application with the tag still in the frame
    let stop = Arc::new(AtomicBool::new(false));
    let flips = Arc::new(AtomicU64::new(0));
    let flipper = {
        let (stop, flips) = (stop.clone(), flips.clone());
        std::thread::spawn(move || {
            let mut i = 0usize;
            while !stop.load(Relaxed) {
                ctl.set_rx_mode(hw.as_mut(), modes[i % modes.len()])
                    .unwrap();
                i = i.wrapping_mul(31).wrapping_add(7);
                flips.fetch_add(1, Relaxed);
                std::thread::yield_now();
            }
        })
    };
    let mut batch = Vec::new();
    let mut packets = 0u64;
    let start = std::time::Instant::now();
    while (packets < 200_000 || flips.load(Relaxed) < 200)
        && start.elapsed() < std::time::Duration::from_secs(10)
    {
        r.rx.rx_burst(&mut batch, 32).unwrap();
        let ctx = r.rx.ctx();
        for p in batch.iter_mut() {
            unflagged += u64::from(p.meta.flags & (Meta::VLAN_STRIPPED | Meta::VLAN_HANDLED) == 0);
            assert_eq!(p.take_vlan(ctx), Some(expect_tci), "tag lost or wrong");
            assert_eq!(p.data(), &expect[..], "stripped twice or not at all");
        }
        packets += batch.len() as u64;
        Pool::free_bulk(batch.drain(..));
    }
    stop.store(true, Relaxed);
    flipper.join().unwrap();
    assert!(
        packets > 1000 && flips.load(Relaxed) > 10,
        "{packets} packets, {flips:?} flips"
    );
    // Every path was taken: stripped in the burst, left for take_vlan, and (on the fake) by the
    // device.
    assert!(
        r.rx.vlan_stats().stripped > 0 && unflagged > 0,
        "{:?} {unflagged}",
        r.rx.vlan_stats()
    );
    if let Some(st) = &r.st {
        assert!(st.hw_stripped.load(Relaxed) > 0);
    }
}

#[test]
fn mode_switches_under_traffic_never_double_strip_or_lose_a_tag() {
    static ALL: [RxMode; 3] = RxMode::ALL;
    static SOFT: [RxMode; 2] = [RxMode::Software, RxMode::Deferred];
    switch_under_traffic(Dev::Null, &SOFT, false);
    switch_under_traffic(Dev::Fake { filter: true }, &ALL, false);
    switch_under_traffic(Dev::Fake { filter: true }, &ALL, true);
}

// ---------------------------------------------------------------------------------------------
// Properties

fn pool() -> Pool {
    Pool::new(
        PoolConfig {
            buffers: 4,
            ..PoolConfig::default()
        },
        Arc::new(IdentityMapper),
    )
    .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn push_then_pop_returns_frame_and_tag(
        frame in proptest::collection::vec(any::<u8>(), 12..300),
        raw in any::<u16>(),
        tpid in prop_oneof![Just(0x8100u16), Just(0x88a8), 0x0600u16..],
    ) {
        // Frames of 12 or 13 bytes take a tag but have no ethertype behind it: the result is too
        // short to count as tagged (documented in vlan::frame), so pop leaves it alone.
        let pool = pool();
        let mut p = pool.alloc().unwrap();
        prop_assert!(p.set_data(&frame));
        let (tpid, t) = (Tpid::new(tpid).unwrap(), Tci::from_raw(raw));
        prop_assert!(p.push_vlan(tpid, t));
        prop_assert_eq!(p.data(), &tx_wire_frame(&frame, tpid, Some(t)).unwrap()[..]);
        if frame.len() < 14 {
            prop_assert_eq!(p.pop_vlan(VlanRxCtx::new(tpid)), Lookup::Malformed);
            return Ok(());
        }
        prop_assert_eq!(p.pop_vlan(VlanRxCtx::new(tpid)), Lookup::Tagged(t));
        prop_assert_eq!(p.data(), &frame[..]);
    }

    #[test]
    fn capture_of_a_stripped_packet_is_the_original_frame(
        body in proptest::collection::vec(any::<u8>(), 12..300),
        raw in any::<u16>(),
        s_tag in any::<bool>(),
    ) {
        let tpid = if s_tag { Tpid::S_TAG } else { Tpid::C_TAG };
        let original = tx_wire_frame(&body, tpid, Some(Tci::from_raw(raw))).unwrap();
        let ctx = VlanRxCtx::new(tpid);
        let pool = pool();
        let mut p = pool.alloc().unwrap();
        p.set_data(&original);
        let t = p.take_vlan(ctx);
        if original.len() >= 18 {
            prop_assert_eq!(t, Some(Tci::from_raw(raw)));
            prop_assert_eq!(p.data(), &body[..]);
        } else {
            prop_assert_eq!(t, None);
            prop_assert!(p.vlan_malformed());
        }
        let mut wire = Vec::new();
        p.wire_frame_into(ctx, &mut wire);
        prop_assert_eq!(&wire, &original);
        let mut buf = [0u8; 400];
        let n = p.wire_frame_to_slice(ctx, &mut buf).unwrap();
        prop_assert_eq!(&buf[..n], &original[..]);
    }

    #[test]
    fn extended_strip_and_reinsert_round_trip(
        rest in proptest::collection::vec(any::<u8>(), 2..200),
        outer in any::<u16>(),
        inner in any::<u16>(),
    ) {
        let mut original: Vec<u8> = (1..=12).collect();
        original.extend_from_slice(&S.to_be_bytes());
        original.extend_from_slice(&outer.to_be_bytes());
        original.extend_from_slice(&C.to_be_bytes());
        original.extend_from_slice(&inner.to_be_bytes());
        original.extend_from_slice(&rest);
        let ctx = VlanRxCtx::extended(Tpid::C_TAG, Tpid::S_TAG);
        let pool = pool();
        let mut p = pool.alloc().unwrap();
        p.set_data(&original);
        prop_assert_eq!(p.pop_vlan(ctx), Lookup::Tagged(Tci::from_raw(inner)));
        let mut expect = original[..16].to_vec();
        expect.extend_from_slice(&rest);
        prop_assert_eq!(p.data(), &expect[..], "the outer tag stays");
        let mut wire = Vec::new();
        rx_wire_frame_into(p.data(), Some(Tci::from_raw(inner)), ctx, &mut wire);
        prop_assert_eq!(&wire, &original);
    }
}

#[test]
fn per_queue_modes_mix_freely_in_software_and_need_per_queue_strip_for_hardware() {
    let st = Arc::new(FakeState::default());
    let mut hw = FakeHw {
        st,
        caps: full_caps("fake:2"),
    };
    let ctl = VlanControl::new(&mut hw, &VlanConfig::default()).unwrap();
    // Software and Deferred can differ per queue on any device.
    ctl.set_queue_rx_mode(&mut hw, 0, Some(RxMode::Deferred))
        .unwrap();
    assert_eq!(ctl.queue_rx_mode(0), RxMode::Deferred);
    assert_eq!(ctl.queue_rx_mode(1), RxMode::Software);
    // A port-wide stripper cannot put one queue in Hardware mode alone.
    let e = ctl
        .set_queue_rx_mode(&mut hw, 0, Some(RxMode::Hardware))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("fake:2") && e.contains("queue 0") && e.contains("port-wide"),
        "{e}"
    );
    assert_eq!(
        ctl.queue_rx_mode(0),
        RxMode::Deferred,
        "a refused change changes nothing"
    );
    ctl.set_queue_rx_mode(&mut hw, 0, None).unwrap();
    assert_eq!(ctl.queue_rx_mode(0), RxMode::Software);
}
