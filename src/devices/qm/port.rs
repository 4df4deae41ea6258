//! [`QmPort`]: a DPNI brought up through management commands, its buffer pool, link,
//! counters and VLAN filter (the part its queues share is `shared.rs`).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use super::config::QmConfig;
use super::mc::McPortal;
use super::rx::QmRx;
use super::shared::{register_lender, Lender, Shared};
use super::tx::QmTx;
use super::QmBus;
use crate::device::{LinkStatus, MacAddr, Port, PortInfo, PortStats, QueueSet};
use crate::error::{Error, Result};
use crate::platform::dma::{LentBuffers, Pool};
use crate::platform::mmio::Mmio;
use crate::platform::regs::qbman::cmd::*;
use crate::platform::regs::McParam;
use crate::vlan::{Tpid, Vid, VlanCaps, VlanFilter, VlanHardware};

/// A DPAA2-like port on a queue-manager device.
pub struct QmPort<B: QmBus> {
    shared: Arc<Shared<B>>,
    config: QmConfig,
    mac: MacAddr,
    vlan_entries: usize,
    vlan: VlanFilter,
    vlan_on: bool,
    taken: bool,
}

fn param(f: McParam, v: u64) -> [u64; 7] {
    let mut p = [0; 7];
    f.put(&mut p, v);
    p
}

/// What opening the port's objects found out.
struct Objects {
    dpni: u16,
    dpbp: u16,
    bpid: u16,
    attr: [u64; 7],
    mac: [u8; 6],
    rx_fqid: u32,
    tx_fqid: u32,
}

/// Opens (and resets) the DPNI and opens and enables the DPBP; a failure on the way closes
/// what was opened, so no token is left behind.
fn open_objects<M: Mmio>(mc: &McPortal<M>, dpni_id: u32, dpbp_id: u32) -> Result<Objects> {
    let dpni = mc
        .send(DPNI_OPEN, 0, param(dpni_open::DPNI_ID, dpni_id.into()))?
        .token;
    let r = (|| {
        mc.send(DPNI_RESET, dpni, [0; 7])?;
        let attr = mc.send(DPNI_GET_ATTR, dpni, [0; 7])?.params;
        let m = dpni_get_primary_mac_addr::MAC
            .get(&mc.send(DPNI_GET_PRIMARY_MAC_ADDR, dpni, [0; 7])?.params);
        let mut mac = [0u8; 6];
        mac.copy_from_slice(&m.to_le_bytes()[..6]);
        mac.reverse();
        let fqid = |qtype| -> Result<u32> {
            let r = mc.send(DPNI_GET_QUEUE, dpni, param(dpni_get_queue::QTYPE, qtype))?;
            Ok(dpni_get_queue::FQID.get(&r.params) as u32)
        };
        let (rx_fqid, tx_fqid) = (fqid(0)?, fqid(1)?);
        let dpbp = mc
            .send(DPBP_OPEN, 0, param(dpbp_open::DPBP_ID, dpbp_id.into()))?
            .token;
        let bpid = (|| {
            mc.send(DPBP_ENABLE, dpbp, [0; 7])?;
            let attr = mc.send(DPBP_GET_ATTR, dpbp, [0; 7])?.params;
            Ok::<_, Error>(dpbp_get_attr::BPID.get(&attr) as u16)
        })()
        .inspect_err(|_| {
            let _ = mc.send(DPBP_CLOSE, dpbp, [0; 7]);
        })?;
        Ok(Objects {
            dpni,
            dpbp,
            bpid,
            attr,
            mac,
            rx_fqid,
            tx_fqid,
        })
    })();
    r.inspect_err(|_| {
        let _ = mc.send(DPNI_CLOSE, dpni, [0; 7]);
    })
}

impl<B: QmBus> QmPort<B> {
    /// Opens the DPNI and its DPBP on `bus` and brings the interface up.
    pub fn open(bus: B, config: QmConfig) -> Result<QmPort<B>> {
        let name = bus.name().to_string();
        if config.queues != 1 {
            return Err(Error::NotSupported {
                device: name,
                what: format!("{} queue pairs", config.queues),
                why: "flow distribution over several queues is not implemented; use 1".into(),
            });
        }
        if !(1..=super::layout::pull::MAX_FRAMES).contains(&config.pull)
            || config.hw_buffers < 8
            || config.max_frame < 64
            || config.pool.headroom > 0xfff
        {
            return Err(Error::InvalidConfig(format!(
                "{name}: pull must be 1..32 frames, hw_buffers at least 8, max_frame >= 64, \
                 and the pool's headroom at most 4095 (a frame descriptor's offset has 12 bits)"
            )));
        }
        // The device holds the buffers kept in its hardware pool.
        crate::devices::pool_rule::check_rx_pool(
            &name,
            "hw_buffers",
            config.hw_buffers,
            config.pool.buffers,
        )?;
        let pool = Pool::new(config.pool, bus.dma_mapper())?;
        let mc = McPortal::new(bus.regs().clone(), name.clone());
        let o = open_objects(&mc, bus.dpni_id(), bus.dpbp_id())?;
        let domain = bus.dma_mapper().domain();
        let lender = Lender {
            table: Arc::new(LentBuffers::new(&pool)),
            bpid: o.bpid,
            alive: Arc::new(AtomicBool::new(true)),
        };
        register_lender(domain, lender.clone());
        let shared = Arc::new(Shared {
            bus,
            name,
            mc,
            dpni: o.dpni,
            dpbp: o.dpbp,
            lender,
            rx_fqid: o.rx_fqid,
            tx_fqid: o.tx_fqid,
            domain,
            target: config.hw_buffers,
        });
        let mut port = QmPort {
            shared,
            config,
            mac: MacAddr(o.mac),
            vlan_entries: dpni_get_attr::VLAN_FILTER_ENTRIES.get(&o.attr) as usize,
            vlan: VlanFilter::new(),
            vlan_on: false,
            taken: false,
        };
        port.configure()?;
        Ok(port)
    }

    /// The DPNI's receive configuration, the VLAN filter from the shadow, and enable.
    fn configure(&mut self) -> Result<()> {
        let s = &self.shared;
        let c = &self.config;
        let mut p = [0u64; 7];
        // Frame status, parser result, head room: the frame lands `headroom` bytes into the
        // buffer, behind the 64-byte annotation (DPDK dpaa2_attach_bp_list).
        dpni_set_buffer_layout::OPTIONS.put(&mut p, LAYOUT_OPTIONS);
        dpni_set_buffer_layout::FLAGS.put(&mut p, LAYOUT_PARSER_RESULT | LAYOUT_FRAME_STATUS);
        dpni_set_buffer_layout::DATA_ALIGN.put(&mut p, 64);
        let head = c.pool.headroom - super::layout::hwa::SIZE;
        dpni_set_buffer_layout::HEAD_ROOM.put(&mut p, head as u64);
        s.dpni_cmd(DPNI_SET_BUFFER_LAYOUT, p)?;
        let mut p = [0u64; 7];
        dpni_set_pools::NUM_DPBP.put(&mut p, 1);
        dpni_set_pools::DPBP_ID_0.put(&mut p, s.bus.dpbp_id().into());
        dpni_set_pools::BUFFER_SIZE_0.put(&mut p, c.pool.buf_size as u64);
        s.dpni_cmd(DPNI_SET_POOLS, p)?;
        let len = dpni_set_max_frame_length::MAX_FRAME_LENGTH;
        s.dpni_cmd(DPNI_SET_MAX_FRAME_LENGTH, param(len, c.max_frame.into()))?;
        let mut p = [0u64; 7];
        dpni_set_taildrop::ENABLE.put(&mut p, 1);
        dpni_set_taildrop::UNITS.put(&mut p, 1);
        dpni_set_taildrop::THRESHOLD.put(&mut p, c.taildrop.into());
        s.dpni_cmd(DPNI_SET_TAILDROP, p)?;
        for vid in self.vlan.iter() {
            s.dpni_cmd(
                DPNI_ADD_VLAN_ID,
                param(dpni_add_vlan_id::VLAN_ID, vid.into()),
            )?;
        }
        let en = dpni_enable_vlan_filter::EN;
        s.dpni_cmd(DPNI_ENABLE_VLAN_FILTER, param(en, self.vlan_on.into()))?;
        s.bus.enable_bus_master()?;
        s.dpni_cmd(DPNI_ENABLE, [0; 7])?;
        Ok(())
    }

    /// Resets the DPNI and configures it again, the VLAN filter table restored from the
    /// shadow. Frames waiting in the receive queue are lost.
    pub fn reset(&mut self) -> Result<()> {
        self.shared.dpni_cmd(DPNI_DISABLE, [0; 7])?;
        self.shared.dpni_cmd(DPNI_RESET, [0; 7])?;
        self.configure()
    }

    /// The port's MAC address.
    pub fn mac(&self) -> MacAddr {
        self.mac
    }

    /// The bus the port is on.
    pub fn bus(&self) -> &B {
        &self.shared.bus
    }

    /// The receive and transmit frame queue ids the MC reported (`DPNI_GET_QUEUE`).
    pub fn fqids(&self) -> (u32, u32) {
        (self.shared.rx_fqid, self.shared.tx_fqid)
    }

    /// The pool id of the port's hardware buffer pool.
    pub fn bpid(&self) -> u16 {
        self.shared.lender.bpid
    }

    fn refuse(&self, what: &str, why: &str) -> Error {
        Error::NotSupported {
            device: self.shared.name.clone(),
            what: what.into(),
            why: why.into(),
        }
    }
}

/// `DPNI_SET_BUFFER_LAYOUT` options (DPDK `fsl_dpni.h` `DPNI_BUF_LAYOUT_OPT_*`): parser
/// result, frame status, data alignment, data head room (what `dpaa2_attach_bp_list` sets,
/// less the timestamp and private data we do not use).
const LAYOUT_OPTIONS: u64 = 0x02 | 0x04 | 0x10 | 0x20;
/// The command's flags byte: pass the parser result (bit 1) and the frame status (bit 2).
const LAYOUT_PARSER_RESULT: u64 = 1 << 1;
/// See [`LAYOUT_PARSER_RESULT`].
const LAYOUT_FRAME_STATUS: u64 = 1 << 2;

/// Counter names, page by page, as DPDK's `dpni_statistics` calls them.
const COUNTERS: [&[&str]; 3] = [
    &[
        "ingress_all_frames",
        "ingress_all_bytes",
        "ingress_multicast_frames",
        "ingress_multicast_bytes",
        "ingress_broadcast_frames",
        "ingress_broadcast_bytes",
    ],
    &[
        "egress_all_frames",
        "egress_all_bytes",
        "egress_multicast_frames",
        "egress_multicast_bytes",
        "egress_broadcast_frames",
        "egress_broadcast_bytes",
    ],
    &[
        "ingress_filtered_frames",
        "ingress_discarded_frames",
        "ingress_nobuffer_discards",
        "egress_discarded_frames",
        "egress_confirmed_frames",
    ],
];

impl<B: QmBus> Port for QmPort<B> {
    type Rx = QmRx<B>;
    type Tx = QmTx<B>;

    fn info(&self) -> PortInfo {
        PortInfo {
            name: self.shared.name.clone(),
            driver: "qm",
            model: "DPAA2-like queue manager (QBMan portals, DPNI)".into(),
            pci_id: None,
            mac: self.mac,
            rx_queues: 1,
            tx_queues: 1,
            rx_ring: 0,
            tx_ring: 0,
            mtu: Some(u32::from(self.config.max_frame).saturating_sub(22)),
        }
    }

    fn link(&self) -> Result<LinkStatus> {
        let r = self.shared.dpni_cmd(DPNI_GET_LINK_STATE, [0; 7])?;
        let up = dpni_get_link_state::UP.get(&r) == 1;
        Ok(LinkStatus {
            up,
            speed_mbps: if up {
                dpni_get_link_state::RATE.get(&r) as u32
            } else {
                0
            },
            full_duplex: up,
        })
    }

    fn stats(&mut self) -> Result<PortStats> {
        let mut hw = Vec::new();
        for (page, names) in COUNTERS.iter().enumerate() {
            let r = self.shared.dpni_cmd(
                DPNI_GET_STATISTICS,
                param(dpni_get_statistics::PAGE_NUMBER, page as u64),
            )?;
            hw.extend(names.iter().zip(r).map(|(n, v)| (*n, v)));
        }
        Ok(PortStats { hw })
    }

    fn take_queues(&mut self) -> Result<QueueSet<QmRx<B>, QmTx<B>>> {
        if self.taken {
            return Err(Error::InvalidConfig(format!(
                "{}: queues were already taken",
                self.shared.name
            )));
        }
        let rx = QmRx::new(self.shared.clone(), &self.config)?;
        let tx = QmTx::new(self.shared.clone())?;
        self.taken = true;
        Ok((vec![rx], vec![tx]))
    }
}

/// A DPNI filters VIDs and neither strips nor inserts tags.
impl<B: QmBus> VlanHardware for QmPort<B> {
    fn vlan_caps(&self) -> VlanCaps {
        VlanCaps {
            filter: self.vlan_entries > 0,
            rx_queues: 1,
            ..VlanCaps::none(self.shared.name.clone())
        }
    }
    fn set_rx_strip(&mut self, _queue: u16, _on: bool) -> Result<()> {
        Err(self.refuse(
            "VLAN tag stripping",
            "a DPNI has no VLAN strip (DPDK's dpaa2 stripped in software); use rx mode sw or deferred",
        ))
    }
    fn set_vlan_filter(&mut self, on: bool) -> Result<()> {
        let en = dpni_enable_vlan_filter::EN;
        self.shared
            .dpni_cmd(DPNI_ENABLE_VLAN_FILTER, param(en, on.into()))?;
        self.vlan_on = on;
        Ok(())
    }
    fn add_vlan(&mut self, vid: Vid) -> Result<()> {
        let v = vid.get();
        self.shared
            .dpni_cmd(DPNI_ADD_VLAN_ID, param(dpni_add_vlan_id::VLAN_ID, v.into()))?;
        self.vlan.add(v)?;
        Ok(())
    }
    fn remove_vlan(&mut self, vid: Vid) -> Result<()> {
        let v = vid.get();
        if v == 0 {
            // VID 0 stays a member (priority tags always pass), in the device too.
            return Ok(());
        }
        self.shared.dpni_cmd(
            DPNI_REMOVE_VLAN_ID,
            param(dpni_remove_vlan_id::VLAN_ID, v.into()),
        )?;
        self.vlan.remove(v)?;
        Ok(())
    }
    fn set_tpid(&mut self, tpid: Tpid) -> Result<()> {
        if tpid == Tpid::C_TAG {
            return Ok(());
        }
        Err(self.refuse(
            "a TPID other than 0x8100",
            "the DPNI's VLAN filter knows 0x8100 tags",
        ))
    }
    fn set_extended_vlan(&mut self, on: bool, _outer_tpid: Tpid) -> Result<()> {
        if !on {
            return Ok(());
        }
        Err(self.refuse(
            "extended (QinQ) VLAN mode",
            "a DPNI has no extended VLAN mode",
        ))
    }
}
