//! The 82599's transmit offloads against their software fallback: for random frames, cuts and
//! requests, the frames the ixgbe driver and the software 82599 put on the wire are the bytes
//! `devices::offload::soft` makes on a device without offloads. The model follows the
//! datasheet's rules (`devices::sim`, `tx_offload.rs`); only a card can confirm them.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use super::{IxgbeConfig, IxgbePort};
use crate::device::{Port, RxQueue, TxQueue};
use crate::devices::offload::soft::resolve;
use crate::devices::offload::tests::{cut_every, every_offload, frame, request, verify, Kind};
use crate::devices::offload::TxCaps;
use crate::devices::sim::{SimConfig, SimPort};
use crate::platform::bus::Bus;
use crate::platform::dma::{Meta, Pool, PoolConfig};
use crate::vlan::frame::tx_wire_frame;
use crate::vlan::{Tci, Tpid};

fn cfg() -> IxgbeConfig {
    IxgbeConfig {
        rx_ring: 256,
        tx_ring: 256,
        mtu: 9000,
        pool: PoolConfig {
            buffers: 1024,
            ..PoolConfig::default()
        },
        link_timeout: Duration::from_millis(200),
        reg_timeout: Duration::from_millis(200),
        ..IxgbeConfig::default()
    }
}

#[test]
fn hardware_offloads_put_the_software_fallbacks_bytes_on_the_wire() {
    let (a, b) = SimPort::pair(SimConfig::default());
    let mut pa = IxgbePort::open(a.clone(), cfg()).unwrap();
    let mut pb = IxgbePort::open(b.clone(), cfg()).unwrap();
    let (_, mut txa) = pa.take_queues().unwrap();
    let (mut rxb, _) = pb.take_queues().unwrap();
    // The runner takes a `Fn`: the queues are borrowed per case.
    let queues = std::cell::RefCell::new((txa.remove(0), rxb.remove(0)));
    let pool = Pool::new(
        PoolConfig {
            buffers: 1024,
            ..PoolConfig::default()
        },
        a.dma_mapper(),
    )
    .unwrap();
    let strategy = (
        0usize..6000,
        // The headers (at most 90 bytes here) in the first segment, as every device needs.
        96usize..2048,
        200usize..2048,
        prop_oneof![Just(Kind::Tcp4), Just(Kind::Udp4), Just(Kind::Tcp6)],
        0usize..2,
        prop_oneof![Just(20usize), Just(32)],
        536u16..3000,
        any::<bool>(),
        proptest::option::of(0u16..4095),
    );
    let mut runner = TestRunner::new(Config {
        cases: 96,
        ..Config::default()
    });
    runner
        .run(
            &strategy,
            |(len, ca, cb, kind, tags, tcp_hdr, mss, tso, vlan)| {
                let payload: Vec<u8> = (0..len).map(|i| (i * 29 + 5) as u8).collect();
                let f = frame(kind, tags, tcp_hdr, 0x99, &payload);
                let flags = every_offload(kind, tso);
                let ask = request(kind, tags, tcp_hdr, flags, mss);
                let mut sw = cut_every(&pool, &f, ca, cb);
                sw.set_tx_offload(ask);
                let mut hw = cut_every(&pool, &f, ca, cb);
                hw.set_tx_offload(ask);
                // Hardware tag insertion (VLE) through the offload context, against the software
                // tag pushed into each frame the fallback made.
                if let Some(vid) = vlan {
                    hw.meta.vlan_tci = vid;
                    hw.meta.flags |= Meta::TX_VLAN;
                }
                let mut want = vec![sw];
                prop_assert_eq!(resolve(&mut want, TxCaps::CHAINS).dropped, 0);
                let want: Vec<Vec<u8>> = want
                    .iter()
                    .map(|p| match vlan {
                        Some(vid) => {
                            tx_wire_frame(&p.to_vec(), Tpid::C_TAG, Some(Tci::from_raw(vid)))
                                .unwrap()
                        }
                        None => p.to_vec(),
                    })
                    .collect();
                let mut q = queues.borrow_mut();
                let (txa, rxb) = &mut *q;
                let mut batch = vec![hw];
                prop_assert_eq!(txa.tx_burst(&mut batch).unwrap(), 1);
                let mut got = Vec::new();
                let deadline = Instant::now() + Duration::from_secs(5);
                while got.len() < want.len() && Instant::now() < deadline {
                    rxb.rx_burst(&mut got, 64).unwrap();
                }
                prop_assert_eq!(got.len(), want.len(), "frames received");
                for (g, w) in got.iter().zip(&want) {
                    let g = g.to_vec();
                    verify(&g, 14 + 4 * tags + if vlan.is_some() { 4 } else { 0 });
                    // The MAC pads a short frame to 60 bytes with zeros (HLREG0.TXPADEN).
                    let mut w = w.clone();
                    if w.len() < 60 {
                        w.resize(60, 0);
                    }
                    prop_assert_eq!(g, w);
                }
                Ok(())
            },
        )
        .unwrap();
    let q = queues.borrow();
    assert_eq!(q.0.stats().dropped, 0);
    assert!(
        q.1.stats().packets >= 96,
        "every case put frames on the wire"
    );
}
