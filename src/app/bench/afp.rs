//! The af_packet rig's own parts: its generator thread, and a repetition that drains a ring.
//!
//! `afp`: an af_packet port on a veth pair the bench does not make
//! ([`BenchConfig::afp_pair`]: SEND, RECV, both ends in this network namespace;
//! `bench/dpdk-compare --ports afp` makes one and runs `vfio-nic bench` on it). A generator
//! thread on the second [`BenchConfig::pin`] CPU sends tagged or untagged frames into SEND as
//! fast as the kernel takes them; the forwarder receives them on RECV and sends them into a null
//! port. The generator cannot keep up with the receiver, so a repetition does not time the
//! stream: it lets RECV's ring fill while nobody reads it, then times draining it
//! ([`Rig::rep_drain`]), which is the receive path's own cost per packet. Compared: Hardware vs
//! Deferred receive (the tag the kernel took delivered as metadata, or put back into the frame
//! while copying: the seed's 0.6 %), Hardware vs Software, and Deferred vs Software (the seed's
//! question, as the qm and virtio rigs ask it).

use std::time::{Duration, Instant};

use crate::app::forward::{forward_burst, FwdStats};
use crate::device::QueueError;
use crate::devices::null::{NullConfig, NullPort};
use crate::devices::AnyPort;
use crate::platform::dma::PoolConfig;
use crate::{Error, Result};

use super::generator::Generator;
use super::plan::{Device, Placement, Traffic, Work};
use super::rig::Rig;
use super::work::{frame, l2_burst};
use super::BenchConfig;

/// Frames per ring of the afp device's ports.
const AFP_RING: u32 = 4096;

impl Rig {
    /// An af_packet port on RECV of [`BenchConfig::afp_pair`], forwarding into a null port, with a
    /// generator sending into SEND. Rings of 4,096 frames: what one drain times.
    pub(super) fn afp(args: &BenchConfig, traffic: Traffic) -> Result<Rig> {
        let [send, recv] = args.afp_pair.as_slice() else {
            return Err(Error::InvalidConfig(
                "--device afp needs --afp-pair SEND,RECV (a veth pair in this network namespace; bench/dpdk-compare --ports afp makes one)".into(),
            ));
        };
        let cfg = crate::devices::PortConfig {
            afpacket: crate::devices::afpacket::AfPacketConfig {
                frames: AFP_RING,
                pool: PoolConfig {
                    buffers: 2 * AFP_RING as usize,
                    ..PoolConfig::default()
                },
                ..Default::default()
            },
            ..Default::default()
        };
        let a = crate::devices::open(&format!("afp:{recv}"), &cfg)?;
        let b = AnyPort::Null(NullPort::new(1, NullConfig::default())?);
        let gen_port = crate::devices::open(&format!("afp:{send}"), &cfg)?;
        let mut rig = Rig::new(Device::Afp, a, b, None)?;
        rig.generator = Some(Generator::start(
            gen_port,
            frame(traffic),
            args.pin.get(1).copied(),
        )?);
        Ok(rig)
    }

    /// One repetition on the afp device: five times, let the receive ring fill (nobody reads it
    /// for 10 ms per 1,000 frames it holds: the generator sends about 0.35 Mpps on this
    /// machine, so the ring is full three times over), pause the generator, then forward until
    /// the ring is empty, timing from the first burst to the last that received something;
    /// ns per packet over the five drains. The frames were written by the kernel on the
    /// generator's CPU: the lines arrive cold, as from a NIC.
    pub(super) fn rep_drain(
        &mut self,
        p: Placement,
        work: Work,
        args: &BenchConfig,
    ) -> Result<f64> {
        self.set(p)?;
        let fill = Duration::from_micros(10 * u64::from(AFP_RING));
        let err = |e: QueueError| Error::InvalidConfig(format!("burst failed: {e}"));
        let mut batch = Vec::with_capacity(args.burst);
        let (mut packets, mut busy) = (0u64, Duration::ZERO);
        let mut acc = 0u64;
        for _ in 0..5 {
            std::thread::sleep(fill);
            if let Some(g) = &self.generator {
                g.hold(true)?;
            }
            let mut st = FwdStats::default();
            let start = Instant::now();
            let mut last = start;
            let mut idle = 0;
            while idle < 2 {
                let before = st.rx;
                match work {
                    Work::Fwd => {
                        forward_burst(&mut self.rx, &mut self.tx, &mut batch, args.burst, &mut st)
                            .map_err(err)?;
                    }
                    Work::L2 => {
                        l2_burst(
                            &mut self.rx,
                            &mut self.tx,
                            &mut batch,
                            args.burst,
                            &mut st,
                            &mut acc,
                        )
                        .map_err(err)?;
                    }
                }
                if st.rx > before {
                    idle = 0;
                    last = Instant::now();
                } else {
                    idle += 1;
                }
            }
            packets += st.tx;
            busy += last - start;
            self.sent += st.tx;
            if let Some(g) = &self.generator {
                g.hold(false)?;
            }
        }
        std::hint::black_box(acc);
        if packets == 0 {
            return Err(Error::InvalidConfig(
                "afp: nothing arrived on the receive interface: is the pair a veth pair, both ends up?".into(),
            ));
        }
        Ok(busy.as_secs_f64() * 1e9 / packets as f64)
    }
}
