//! [`QmPort`]: a DPNI brought up through management commands, its buffer pool, link,
//! counters and VLAN filter; and the shared part every queue keeps, whose drop stops the
//! device and takes every buffer back.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::layout::BUFS_PER_CMD;
use super::mc::McPortal;
use super::portal::SwPortal;
use super::rx::QmRx;
use super::tx::QmTx;
use super::QmBus;
use crate::device::{LinkStatus, MacAddr, Port, PortInfo, PortStats, QueueSet};
use crate::error::{Error, Result};
use crate::platform::dma::{LentBuffers, Meta, Packet, Pool, PoolConfig};
use crate::platform::mmio::Mmio;
use crate::platform::regs::qbman::cmd::*;
use crate::platform::regs::{McCommand, McParam};
use crate::vlan::{Tpid, Vid, VlanCaps, VlanFilter, VlanHardware};

/// Configuration of a qm port.
#[derive(Clone, Debug)]
pub struct QmConfig {
    /// The receive queue's pool (its buffers' headroom is where the device writes the frame,
    /// behind the 64-byte annotation).
    pub pool: PoolConfig,
    /// Buffers kept with the device (Linux's `DPAA2_ETH_NUM_BUFS` is 1280); the queue tops the
    /// hardware pool up when fewer than this minus 7 are there.
    pub hw_buffers: usize,
    /// Frames per pull (1 to 32; DPDK pulls 32 on an LX2160A).
    pub pull: usize,
    /// Largest frame received, FCS included (DPDK sets MTU + 14 + 4 for a tag + 4 FCS).
    pub max_frame: u16,
    /// Tail drop of the receive frame queue, in frames.
    pub taildrop: u32,
    /// Queue pairs (only 1: flow distribution is not modelled).
    pub queues: u16,
}

impl Default for QmConfig {
    fn default() -> Self {
        QmConfig {
            pool: PoolConfig::default(),
            hw_buffers: 1280,
            pull: 32,
            max_frame: 1522,
            taildrop: 1024,
            queues: 1,
        }
    }
}

/// What a qm receive queue counted of the device's mistakes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QmStats {
    /// Dequeue results whose token was not the pull's (ignored; their buffers are not taken).
    pub stale_results: u64,
    /// Frame descriptors naming a buffer the device was not lent (refused).
    pub refused_fds: u64,
    /// Frames with error bits in their descriptor (dropped).
    pub error_frames: u64,
}

/// A pool some qm port lends to its queue manager: its table, its pool id, and whether the
/// port is still up (a transmit queue caches this; a port going away clears `alive`, and the
/// pool's packets are copied from then on instead of being sent with a pool id nobody serves).
#[derive(Clone)]
pub(super) struct Lender {
    pub table: Arc<LentBuffers>,
    pub bpid: u16,
    pub alive: Arc<AtomicBool>,
}

impl Lender {
    /// Whether `p` can go out with this lender's pool id.
    #[inline(always)]
    pub fn takes(&self, p: &Packet) -> bool {
        p.is_from(self.table.pool()) && self.alive.load(Ordering::Relaxed)
    }
}

/// Every lender, by DMA domain: how a transmit queue finds the pool id of a packet from
/// another port's pool.
static LENDERS: Mutex<Vec<(usize, Lender)>> = Mutex::new(Vec::new());

/// The lender of `p`'s pool in DMA domain `domain`, if a live port lends it.
pub(super) fn lender_of(domain: usize, p: &Packet) -> Option<Lender> {
    let l = LENDERS.lock().unwrap_or_else(|e| e.into_inner());
    l.iter()
        .filter(|e| e.0 == domain)
        .find(|e| e.1.takes(p))
        .map(|e| e.1.clone())
}

/// What the port and its queues share; dropped with the last of them.
pub(super) struct Shared<B: QmBus> {
    pub bus: B,
    pub name: String,
    pub mc: McPortal<B::Mmio>,
    pub dpni: u16,
    pub dpbp: u16,
    pub bpid: u16,
    pub lent: Arc<LentBuffers>,
    /// This port as a lender (its `alive` goes false when the port goes).
    pub lender: Lender,
    pub rx_fqid: u32,
    pub tx_fqid: u32,
    pub domain: usize,
    /// Buffers of the pool the receive queue keeps with the device.
    pub target: usize,
}

impl<B: QmBus> Shared<B> {
    /// Sends a command to the DPNI.
    pub fn dpni_cmd(&self, c: McCommand, params: [u64; 7]) -> Result<[u64; 7]> {
        Ok(self.mc.send(c, self.dpni, params)?.params)
    }

    /// Takes up to `most` buffers back from the device's pool (acquires of 7 until it is
    /// empty) and frees them to the software pool; returns how many.
    pub fn reclaim(&self, portal: &mut SwPortal<B::Mmio>, most: usize) -> Result<usize> {
        let mut n = 0;
        while n < most {
            let got = portal.acquire(self.bpid, BUFS_PER_CMD.min(most - n))?;
            if got.is_empty() {
                break;
            }
            for a in got {
                let off = self.lent.pool().headroom() as u16;
                match self.lent.take_back(a, off, 0, Meta::default()) {
                    Ok(p) => drop(p),
                    Err(e) => tracing::warn!(port = %self.name, error = %e, "reclaim: refused"),
                }
                n += 1;
            }
        }
        Ok(n)
    }

    /// Every step of the stop, each tried even when one before failed (a device gone fails
    /// them all); the first error is returned.
    fn teardown(&mut self) -> Result<()> {
        let mut first = Ok(());
        let mut step = |r: Result<()>| {
            if first.is_ok() {
                first = r;
            }
        };
        step(self.dpni_cmd(DPNI_DISABLE, [0; 7]).map(drop));
        // A reset of the DPNI returns the frames still queued to their pools (the model
        // does; what an MC firmware does with them is not documented), then the pool is
        // drained through the receive portal, whose queue is gone by now. The portal is
        // taken over as it stands (not cleared): a release the queue rang last may still be
        // waiting in it.
        step(self.dpni_cmd(DPNI_RESET, [0; 7]).map(drop));
        if let Some((c, i)) = self.bus.portal(0) {
            match SwPortal::attach(c, i, self.name.clone()) {
                Ok(mut portal) => step(self.reclaim(&mut portal, usize::MAX).map(drop)),
                Err(e) => step(Err(e)),
            }
        }
        step(self.mc.send(DPBP_DISABLE, self.dpbp, [0; 7]).map(drop));
        step(self.mc.send(DPBP_CLOSE, self.dpbp, [0; 7]).map(drop));
        step(self.dpni_cmd(DPNI_CLOSE, [0; 7]).map(drop));
        step(self.bus.disable_bus_master());
        first
    }
}

impl<B: QmBus> Drop for Shared<B> {
    /// Stops the device and takes the buffers back: DMA stops before the pool can go.
    fn drop(&mut self) {
        self.lender.alive.store(false, Ordering::Relaxed);
        LENDERS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|e| !Arc::ptr_eq(&e.1.table, &self.lent));
        if let Err(e) = self.teardown() {
            tracing::warn!(port = %self.name, error = %e, "qm port teardown incomplete");
        }
        let left = self.lent.lent();
        if left > 0 {
            tracing::warn!(port = %self.name, buffers = left, "buffers still with the device");
        }
    }
}

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
            || config.hw_buffers > config.pool.buffers
            || config.max_frame < 64
            || config.pool.headroom > 0xfff
        {
            return Err(Error::InvalidConfig(format!(
                "{name}: pull must be 1..32 frames, hw_buffers 8..pool buffers ({}), max_frame >= 64, \
                 and the pool's headroom at most 4095 (a frame descriptor's offset has 12 bits)",
                config.pool.buffers
            )));
        }
        let pool = Pool::new(config.pool, bus.dma_mapper())?;
        let mc = McPortal::new(bus.regs().clone(), name.clone());
        let o = open_objects(&mc, bus.dpni_id(), bus.dpbp_id())?;
        let (dpni, dpbp, bpid, attr, mac) = (o.dpni, o.dpbp, o.bpid, o.attr, o.mac);
        let (rx_fqid, tx_fqid) = (o.rx_fqid, o.tx_fqid);
        let lent = Arc::new(LentBuffers::new(&pool));
        let domain = bus.dma_mapper().domain();
        let lender = Lender {
            table: lent.clone(),
            bpid,
            alive: Arc::new(AtomicBool::new(true)),
        };
        LENDERS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((domain, lender.clone()));
        let shared = Arc::new(Shared {
            bus,
            name,
            mc,
            dpni,
            dpbp,
            bpid,
            lent,
            lender,
            rx_fqid,
            tx_fqid,
            domain,
            target: config.hw_buffers,
        });
        let mut port = QmPort {
            shared,
            config,
            mac: MacAddr(mac),
            vlan_entries: dpni_get_attr::VLAN_FILTER_ENTRIES.get(&attr) as usize,
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
        self.shared.bpid
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
