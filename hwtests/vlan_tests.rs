//! VLAN tests through the device-independent layer (`vfio_nic::vlan`) on the driver's hardware:
//! every receive mode x transmit mode gives the same TCIs and the same untagged bytes; the
//! filter table passes members, drops non-members and always passes untagged frames; a TPID
//! of 0x88a8 is recognised only once configured.
//!
//! One pair of ports is opened per test and the modes are switched on the running ports (that
//! is the layer's promise); frames are drained between steps.

use std::time::Duration;

use vfio_nic::device::{MacAddr, Port, RxQueue};
use vfio_nic::devices::any::AnyPort;
use vfio_nic::platform::dma::Packet;
use vfio_nic::vlan::{
    PacketVlan, RxMode, Tci, Tpid, TxMode, Vid, VlanConfig, VlanControl, VlanFilter, VlanHardware,
};

use super::drv::{self, drain, frame, mixed_sizes, packet, pump};
use super::{Ctx, Outcome};

const QUIET: Duration = Duration::from_millis(30);
/// How long to wait for frames that must not arrive.
const LINGER: Duration = Duration::from_millis(60);

fn e(x: impl std::fmt::Display) -> String {
    x.to_string()
}

/// The two ports with a VLAN control each, A's transmit and B's receive queue wrapped.
struct Pair {
    a: AnyPort,
    b: AnyPort,
    ctl_a: VlanControl,
    ctl_b: VlanControl,
    ma: MacAddr,
    mb: MacAddr,
    txa: vfio_nic::vlan::VlanTx<vfio_nic::devices::any::AnyTx>,
    rxb: vfio_nic::vlan::VlanRx<vfio_nic::devices::any::AnyRx>,
    pool: vfio_nic::platform::dma::Pool,
    // Kept so their Drop runs with the ports'.
    _rest: (
        Vec<vfio_nic::devices::any::AnyRx>,
        Vec<vfio_nic::devices::any::AnyTx>,
    ),
}

fn pair(ctx: &Ctx, cfg_b: &VlanConfig) -> Result<Pair, String> {
    let mut a = drv::open(ctx.ports[0], false)?;
    let mut b = drv::open(ctx.ports[1], false)?;
    let ctl_a = VlanControl::new(&mut a, &VlanConfig::default()).map_err(e)?;
    let ctl_b = VlanControl::new(&mut b, cfg_b).map_err(e)?;
    let (ma, mb) = (a.info().mac, b.info().mac);
    let (mut rxa, mut txa) = a.take_queues().map_err(e)?;
    let (mut rxb, txb) = b.take_queues().map_err(e)?;
    let pool = rxa[0].pool().clone();
    let txa = ctl_a.wrap_tx(txa.remove(0));
    let mut rxb = ctl_b.wrap_rx(rxb.remove(0));
    drain(&mut rxb, QUIET)?;
    drain(&mut rxa[0], QUIET)?;
    Ok(Pair {
        a,
        b,
        ctl_a,
        ctl_b,
        ma,
        mb,
        txa,
        rxb,
        pool,
        _rest: (rxa, txb),
    })
}

/// The receive modes a port can take: hardware only where the device strips (a virtio-net
/// device cannot, and refuses it: checked here, so a device that silently accepted would fail).
pub(crate) fn rx_modes(port: &mut AnyPort, ctl: &VlanControl) -> Result<Vec<RxMode>, String> {
    if port.vlan_caps().rx_strip {
        return Ok(RxMode::ALL.to_vec());
    }
    if ctl.set_rx_mode(port, RxMode::Hardware).is_ok() {
        return Err("receive mode hardware was accepted by a device without a VLAN strip".into());
    }
    Ok(RxMode::ALL
        .into_iter()
        .filter(|&m| m != RxMode::Hardware)
        .collect())
}

/// The transmit modes a port can take (as [`rx_modes`]).
pub(crate) fn tx_modes(port: &mut AnyPort, ctl: &VlanControl) -> Result<Vec<TxMode>, String> {
    if port.vlan_caps().tx_insert {
        return Ok(TxMode::ALL.to_vec());
    }
    if ctl.set_tx_mode(port, TxMode::Hardware).is_ok() {
        return Err(
            "transmit mode hardware was accepted by a device without VLAN insertion".into(),
        );
    }
    Ok(TxMode::ALL
        .into_iter()
        .filter(|&m| m != TxMode::Hardware)
        .collect())
}

/// What one frame looked like to the application: its tag and its untagged bytes.
type Seen = (Option<u16>, Vec<u8>);

impl Pair {
    /// Sends `frames` (bytes, optional transmit tag) from A; returns what B's application saw,
    /// waiting `LINGER` for frames beyond `expect`.
    fn send(
        &mut self,
        frames: &[(Vec<u8>, Option<Tci>)],
        expect: usize,
    ) -> Result<Vec<Seen>, String> {
        let pool = self.pool.clone();
        let got = pump(
            &mut self.txa,
            &mut self.rxb,
            frames.len(),
            |i| {
                let mut p = packet(&pool, &frames[i].0)?;
                if let Some(t) = frames[i].1 {
                    p.set_tx_vlan(t).map_err(e)?;
                }
                Ok(p)
            },
            expect,
            LINGER,
        )?;
        let ctx = self.rxb.ctx();
        Ok(got
            .into_iter()
            .map(|mut p: Packet| {
                let t = p.take_vlan(ctx).map(|t| t.raw());
                (t, p.data().to_vec())
            })
            .collect())
    }
}

fn tci(i: usize) -> Option<Tci> {
    if i % 10 == 0 {
        return None;
    }
    let vid = Vid::new(1 + (i as u16).wrapping_mul(37) % 4094).ok()?;
    Tci::new(vid, (i % 8) as u8, i % 3 == 0).ok()
}

fn describe(s: &Seen) -> String {
    let seq =
        s.1.get(14..18)
            .map(|b| u32::from_be_bytes(b.try_into().unwrap()));
    format!(
        "tag {:?} len {} seq {:?}",
        s.0.map(Tci::from_raw),
        s.1.len(),
        seq
    )
}

fn expect_seen(got: &[Seen], want: &[Seen], what: &str) -> Result<(), String> {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if g != w {
            return Err(format!(
                "{what}: frame {i}: got {}, expected {}",
                describe(g),
                describe(w)
            ));
        }
    }
    if got.len() != want.len() {
        return Err(format!(
            "{what}: {} frames arrived, expected {}",
            got.len(),
            want.len()
        ));
    }
    Ok(())
}

/// Every receive mode x transmit mode: same TCIs, same untagged bytes, and the same results.
pub fn vlan_modes_matrix(ctx: &Ctx) -> Outcome {
    if ctx.ports.len() < 2 {
        return Outcome::Skip("needs two ports wired to each other".into());
    }
    super::verdict(|| {
        let mut p = pair(ctx, &VlanConfig::default())?;
        const N: usize = 300;
        let frames: Vec<(Vec<u8>, Option<Tci>)> = mixed_sizes(N)
            .iter()
            .enumerate()
            .map(|(i, &len)| (frame(p.mb, p.ma, 0x7100_0000 + i as u32, len), tci(i)))
            .collect();
        let want: Vec<Seen> = frames
            .iter()
            .map(|(f, t)| (t.map(|t| t.raw()), f.clone()))
            .collect();
        let mut first: Option<Vec<Seen>> = None;
        let mut done = Vec::new();
        let rx_all = rx_modes(&mut p.b, &p.ctl_b)?;
        let tx_all = tx_modes(&mut p.a, &p.ctl_a)?;
        for &rx in &rx_all {
            for &tx in &tx_all {
                p.ctl_a.set_tx_mode(&mut p.a, tx).map_err(e)?;
                p.ctl_b.set_rx_mode(&mut p.b, rx).map_err(e)?;
                let got = p.send(&frames, N)?;
                let what = format!("receive {rx} / transmit {tx}");
                expect_seen(&got, &want, &what)?;
                match &first {
                    None => first = Some(got),
                    Some(f) => expect_seen(&got, f, &format!("{what} vs the first mode"))?,
                }
                done.push(format!("{rx}/{tx}"));
            }
        }
        Ok(format!(
            "{N} frames ({} tagged) identical in every mode: {}",
            want.iter().filter(|w| w.0.is_some()).count(),
            done.join(", ")
        ))
    })
}

fn tagged(f: &[u8], tpid: u16, tci: u16) -> Vec<u8> {
    let mut v = f[..12].to_vec();
    v.extend_from_slice(&tpid.to_be_bytes());
    v.extend_from_slice(&tci.to_be_bytes());
    v.extend_from_slice(&f[12..]);
    v
}

/// The filter: VID in the table received, VID not in it dropped, untagged and priority-tagged
/// frames always received; in every receive mode.
pub fn vlan_filter_table(ctx: &Ctx) -> Outcome {
    if ctx.ports.len() < 2 {
        return Outcome::Skip("needs two ports wired to each other".into());
    }
    super::verdict(|| {
        let cfg = VlanConfig {
            filter: true,
            table: VlanFilter::with([100]).map_err(e)?,
            ..VlanConfig::default()
        };
        let mut p = pair(ctx, &cfg)?;
        let base = |i: u32| frame(p.mb, p.ma, 0x7200_0000 + i, 100 + i as usize);
        let t = |vid: u16| Tci::new(Vid::new(vid).unwrap(), 3, false).unwrap();
        let frames = vec![
            (base(0), Some(t(100))),
            (base(1), Some(t(200))),
            (base(2), None),
            (base(3), Some(t(0))),
            (base(4), Some(t(100))),
        ];
        let want: Vec<Seen> = [0usize, 2, 3, 4]
            .iter()
            .map(|&i| (frames[i].1.map(|t| t.raw()), frames[i].0.clone()))
            .collect();
        for rx in rx_modes(&mut p.b, &p.ctl_b)? {
            p.ctl_b.set_rx_mode(&mut p.b, rx).map_err(e)?;
            let got = p.send(&frames, want.len())?;
            expect_seen(&got, &want, &format!("filter {{100}}, receive {rx}"))?;
        }
        // Adding 200 lets it through; removing it drops it again.
        p.ctl_b.add_vlan(&mut p.b, 200).map_err(e)?;
        let got = p.send(&frames[1..2], 1)?;
        expect_seen(
            &got,
            &[(Some(t(200).raw()), frames[1].0.clone())],
            "after adding 200",
        )?;
        p.ctl_b.remove_vlan(&mut p.b, 200).map_err(e)?;
        let got = p.send(&frames[1..2], 0)?;
        expect_seen(&got, &[], "after removing 200")?;
        Ok(format!(
            "in every receive mode: VID 100 and untagged and VID 0 received, VID 200 dropped; filter in {}",
            if p.ctl_b.filter_in_software() { "software" } else { "the device" }
        ))
    })
}

/// A 0x88a8 tag is an ordinary ethertype until the TPID is configured; then it is the tag that
/// is stripped and filtered, and 0x8100 frames are the untagged ones.
pub fn vlan_tpid_88a8(ctx: &Ctx) -> Outcome {
    if ctx.ports.len() < 2 {
        return Outcome::Skip("needs two ports wired to each other".into());
    }
    if drv::is_virtio(ctx.ports[1]) {
        // The refusal itself is checked by the host tests (virtio::tests) and by the CLI test.
        return Outcome::Skip(
            "virtio-net's VLAN table knows 0x8100 tags only: set_tpid(0x88a8) is refused".into(),
        );
    }
    super::verdict(|| {
        let cfg = VlanConfig {
            rx_mode: RxMode::Hardware,
            filter: true,
            ..VlanConfig::default()
        };
        let mut p = pair(ctx, &cfg)?;
        let tci = Tci::new(Vid::new(300).unwrap(), 5, false).unwrap().raw();
        let plain = frame(p.mb, p.ma, 0x7300_0000, 120);
        let s_tagged = tagged(&plain, 0x88a8, tci);
        let c_tagged = tagged(&plain, 0x8100, tci);
        let frames = vec![(s_tagged.clone(), None), (c_tagged.clone(), None)];

        // TPID 0x8100: the 0x88a8 frame is untagged (passes the filter, keeps its bytes); the
        // 0x8100 frame with VID 300 is filtered.
        let got = p.send(&frames, 1)?;
        expect_seen(&got, &[(None, s_tagged.clone())], "TPID 0x8100")?;
        // TPID 0x88a8: the 0x88a8 frame is now tagged with VID 300, not in the table: dropped;
        // the 0x8100 frame is untagged now and passes intact.
        p.ctl_b.set_tpid(&mut p.b, Tpid::S_TAG).map_err(e)?;
        let got = p.send(&frames, 1)?;
        expect_seen(
            &got,
            &[(None, c_tagged.clone())],
            "TPID 0x88a8, VID 300 not in the table",
        )?;
        // With 300 in the table, the 0x88a8 tag is stripped and reported, in every mode.
        p.ctl_b.add_vlan(&mut p.b, 300).map_err(e)?;
        for rx in RxMode::ALL {
            p.ctl_b.set_rx_mode(&mut p.b, rx).map_err(e)?;
            let got = p.send(&frames, 2)?;
            expect_seen(
                &got,
                &[(Some(tci), plain.clone()), (None, c_tagged.clone())],
                &format!("TPID 0x88a8, VID 300 in the table, receive {rx}"),
            )?;
        }
        Ok("0x88a8 ignored under TPID 0x8100; after set_tpid(0x88a8) filtered, then stripped with TCI in every receive mode".into())
    })
}

/// Transmit tags of the wire-capture test: PCP, DEI and VID boundaries.
const WIRE_TCIS: [u16; 6] = [0x0064, 0xa064, 0x3001, 0xeffe, 0x1000, 0x6020];
/// Sequence numbers of the wire-capture frames start with "WI" so the host finds them.
const WIRE_SEQ: u32 = 0x5749_0000;

/// Hardware and software insertion put the same bytes on the wire. The guest sends the same
/// tagged frames twice from A, first inserted by the NIC, then by the driver, and checks that B
/// receives them with the right tags both times; the runner captures the wire (QEMU
/// filter-dump, `hwtests/qemu/run --pcap`) and `hwtests/qemu/check-wire` verifies on the host
/// that the captured frames carry TPID 0x8100 and exactly these TCIs (PCP, DEI, VID) and that
/// the two rounds are byte-identical. The expected TCIs are printed on an `@@HWT wire-expect`
/// line for it.
pub fn vlan_wire_capture(ctx: &Ctx) -> Outcome {
    if ctx.ports.len() < 2 {
        return Outcome::Skip("needs two ports wired to each other".into());
    }
    if std::env::var_os("VFIO_NIC_PCAP").is_none() {
        return Outcome::Skip(
            "needs a wire capture: run it with `hwtests/qemu/run --pcap FILE`".into(),
        );
    }
    super::verdict(|| {
        let mut p = pair(ctx, &VlanConfig::default())?;
        let frames: Vec<(Vec<u8>, Option<Tci>)> = WIRE_TCIS
            .iter()
            .enumerate()
            .map(|(i, &t)| {
                let f = frame(p.mb, p.ma, WIRE_SEQ + i as u32, 64 + 32 * i);
                (f, Some(Tci::from_raw(t)))
            })
            .collect();
        let want: Vec<Seen> = frames
            .iter()
            .map(|(f, t)| (t.map(|t| t.raw()), f.clone()))
            .collect();
        // Without transmit insertion in the device (virtio-net), both rounds are the
        // driver's: the capture then checks software insertion's bytes and its repeatability.
        let rounds = match tx_modes(&mut p.a, &p.ctl_a)?.contains(&TxMode::Hardware) {
            true => [TxMode::Hardware, TxMode::Software],
            false => [TxMode::Software, TxMode::Software],
        };
        for tx in rounds {
            p.ctl_a.set_tx_mode(&mut p.a, tx).map_err(e)?;
            let got = p.send(&frames, frames.len())?;
            expect_seen(&got, &want, &format!("transmit {tx}"))?;
        }
        let list: Vec<String> = WIRE_TCIS.iter().map(|t| format!("{t:04x}")).collect();
        println!(
            "@@HWT wire-expect rounds=2 tpid=8100 tcis={}",
            list.join(",")
        );
        Ok(format!(
            "{} tagged frames sent with {} insertion, then software insertion; the host checks the capture",
            frames.len(),
            if rounds[0] == TxMode::Hardware { "hardware" } else { "software (the device has none)" }
        ))
    })
}
