//! Port names, and opening a port by name.
//!
//! Every tool and example takes ports the same way: a PCI address for a real NIC
//! (`0000:01:00.0`, or `01:00.0` for domain 0), an in-memory device (`null:0`, `sim:1`, `qm:0`, `virtio:0`, ...)
//! or a Linux interface through packet sockets (`afp:eth0`, `afp:veth1,queues=2,frames=1024`).
//! [`AnyPort`] lets a program that chooses its ports at run time use one code path for all of
//! them; a program that knows its driver can use the concrete port type and avoid the `match`.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::device::{
    LinkStatus, Port, PortInfo, PortStats, QueueError, QueueSet, QueueStats, RxQueue, TxQueue,
};
use crate::devices::afpacket::{self, AfPacketConfig, AfPacketPort, AfpRx, AfpTx};
use crate::devices::ids::{self, Family};
use crate::devices::igb::{IgbConfig, IgbPort, IgbRx, IgbTx};
use crate::devices::ixgbe::{IxgbeConfig, IxgbePort, IxgbeRx, IxgbeTx};
use crate::devices::kinds;
use crate::devices::null::{NullConfig, NullPort, NullRx, NullTx};
use crate::devices::qm::model::QmDevice;
use crate::devices::qm::{QmConfig, QmPort, QmRx, QmTx};
use crate::devices::sim::{SimConfig, SimPort};
use crate::devices::virtio::model::VirtioModel;
use crate::devices::virtio::{VirtioConfig, VirtioPort, VirtioRx, VirtioTx};
use crate::error::{Error, Result};
use crate::health::Health;
use crate::platform::bus::PciBus;
use crate::platform::dma::{Packet, Pool};
use crate::platform::irq::Interrupt;
use crate::platform::mmio::MmioRegion;
use crate::platform::pci::PciAddress;
use crate::platform::vfio::{VfioDevice, VfioOptions};
use crate::vlan::{SwVlanCounts, SwVlanTx, Tpid, Vid, VlanCaps, VlanHardware};

/// A parsed port name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PortName {
    /// A PCI device driven through VFIO.
    Pci(PciAddress),
    /// `null:N`, the null device.
    Null(u32),
    /// `sim:N`, the software 82599 (ports 2k and 2k+1 are wired to each other).
    Sim(u32),
    /// `qm:N`, the software DPAA2-like queue manager (ports 2k and 2k+1 are wired).
    Qm(u32),
    /// `virtio:N`, the software virtio-net device (ports 2k and 2k+1 are wired).
    VirtioModel(u32),
    /// `afp:IFNAME[,queues=N][,frames=N]`, a Linux interface through packet sockets (what
    /// follows `afp:`).
    AfPacket(String),
}

impl FromStr for PortName {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        if let Some((kind, index)) = s.split_once(':') {
            if kind == "afp" {
                afpacket::parse_name(index, &AfPacketConfig::default())?;
                return Ok(PortName::AfPacket(index.to_string()));
            }
            if kind.chars().all(|c| c.is_ascii_alphabetic()) && !kind.is_empty() {
                let index: u32 = index.parse().map_err(|_| Error::BadPortName {
                    input: s.into(),
                    reason: format!("'{index}' is not a port number"),
                })?;
                return match kind {
                    "null" => Ok(PortName::Null(index)),
                    "sim" => Ok(PortName::Sim(index)),
                    "qm" => Ok(PortName::Qm(index)),
                    "virtio" => Ok(PortName::VirtioModel(index)),
                    _ => Err(Error::BadPortName {
                        input: s.into(),
                        reason: format!(
                            "unknown port kind '{kind}' (known: {})",
                            kinds::prefixes().collect::<Vec<_>>().join(", ")
                        ),
                    }),
                };
            }
        }
        Ok(PortName::Pci(s.parse()?))
    }
}

impl fmt::Display for PortName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortName::Pci(a) => write!(f, "{a}"),
            PortName::Null(i) => write!(f, "null:{i}"),
            PortName::Sim(i) => write!(f, "sim:{i}"),
            PortName::Qm(i) => write!(f, "qm:{i}"),
            PortName::VirtioModel(i) => write!(f, "virtio:{i}"),
            PortName::AfPacket(spec) => write!(f, "afp:{spec}"),
        }
    }
}

/// How to open a port, whatever its kind.
#[derive(Clone, Debug, Default)]
pub struct PortConfig {
    /// Settings of null ports.
    pub null: NullConfig,
    /// Settings of 82576 (igb) ports.
    pub igb: IgbConfig,
    /// Settings of 82599 (ixgbe) ports, real or software.
    pub ixgbe: IxgbeConfig,
    /// Settings of the software 82599 behind `sim:N` ports.
    pub sim: SimConfig,
    /// Settings of `afp:` ports (the options in a port name override them).
    pub afpacket: AfPacketConfig,
    /// Settings of `qm:` ports.
    pub qm: QmConfig,
    /// Settings of virtio-net ports.
    pub virtio: VirtioConfig,
    /// How PCI ports are opened through VFIO: the DMA backend (automatic, or type1, iommufd,
    /// noiommu) and whether no-IOMMU mode is allowed.
    pub vfio: VfioOptions,
}

impl PortConfig {
    /// Gives every family's receive pool buffers of `room` bytes behind their headroom (the
    /// tool's `--buf-size`): a multiple of 128 (descriptor alignment), at least 64. Longer
    /// frames become chains where the family has them; a device that cannot use buffers of
    /// that size refuses when it opens, with the range it takes (the Intel chips receive 1 to
    /// 16 KB into one descriptor; virtio-net needs a whole frame and its header in one).
    pub fn set_buf_size(&mut self, room: usize) -> Result<()> {
        for pool in [
            &mut self.null.pool,
            &mut self.igb.pool,
            &mut self.ixgbe.pool,
            &mut self.afpacket.pool,
            &mut self.qm.pool,
            &mut self.virtio.pool,
        ] {
            let size = pool.headroom.saturating_add(room);
            if room < 64 || room % 128 != 0 || size > crate::platform::dma::MAX_BUF_SIZE {
                return Err(Error::InvalidConfig(format!(
                    "a buffer size of {room} bytes: give a multiple of 128 from 128 to {} (the room behind the {}-byte headroom)",
                    crate::platform::dma::MAX_BUF_SIZE - pool.headroom,
                    pool.headroom
                )));
            }
            pool.buf_size = size;
        }
        Ok(())
    }
}

/// A port of any kind.
pub enum AnyPort {
    /// A null port.
    Null(NullPort),
    /// An Intel 82576 driven through VFIO (boxed: the port is large and rarely touched).
    Igb(Box<IgbPort<PciBus>>),
    /// An Intel 82599 driven through VFIO (boxed: the port is large and rarely touched).
    Ixgbe(Box<IxgbePort<PciBus>>),
    /// The ixgbe driver on a software 82599 (`sim:N`).
    IxgbeSim(Box<IxgbePort<SimPort>>),
    /// A Linux interface through packet sockets (`afp:IFNAME`).
    AfPacket(AfPacketPort),
    /// The qm driver on the software queue manager (`qm:N`; boxed: the port is large).
    Qm(Box<QmPort<QmDevice>>),
    /// A virtio-net device driven through VFIO.
    Virtio(Box<VirtioPort<MmioRegion>>),
    /// The virtio driver on the software virtio-net device (`virtio:N`).
    VirtioModel(Box<VirtioPort<VirtioModel>>),
}

/// Opens a port by name.
pub fn open(name: &str, config: &PortConfig) -> Result<AnyPort> {
    match name.parse::<PortName>()? {
        PortName::Null(i) => Ok(AnyPort::Null(NullPort::new(i, config.null.clone())?)),
        PortName::Sim(i) => Ok(AnyPort::IxgbeSim(Box::new(IxgbePort::open(
            SimPort::open_named(i, &config.sim)?,
            config.ixgbe.clone(),
        )?))),
        PortName::VirtioModel(i) => Ok(AnyPort::VirtioModel(Box::new(VirtioPort::open_model(
            &VirtioModel::open_named(i),
            &format!("virtio:{i}"),
            config.virtio,
        )?))),
        PortName::Qm(i) => Ok(AnyPort::Qm(Box::new(QmPort::open(
            QmDevice::open_named(i)?,
            config.qm.clone(),
        )?))),
        PortName::Pci(addr) => open_pci(addr, config),
        PortName::AfPacket(spec) => {
            let (ifname, c) = afpacket::parse_name(&spec, &config.afpacket)?;
            Ok(AnyPort::AfPacket(AfPacketPort::open(&ifname, c)?))
        }
    }
}

/// Opens a PCI port through VFIO and picks the driver by PCI id.
fn open_pci(addr: PciAddress, config: &PortConfig) -> Result<AnyPort> {
    let dev = VfioDevice::open_with(addr, &config.vfio)?;
    let (vendor, device) = dev.vendor_device()?;
    match ids::lookup(vendor, device) {
        Some((Family::Ixgbe, _)) => Ok(AnyPort::Ixgbe(Box::new(IxgbePort::open(
            PciBus::from_device(dev)?,
            config.ixgbe.clone(),
        )?))),
        Some((Family::Igb, _)) => Ok(AnyPort::Igb(Box::new(IgbPort::open(
            PciBus::from_device(dev)?,
            config.igb.clone(),
        )?))),
        Some((Family::Virtio, _)) => Ok(AnyPort::Virtio(Box::new(VirtioPort::open_pci(
            dev,
            config.virtio,
        )?))),
        None => Err(Error::UnsupportedDevice {
            addr: addr.to_string(),
            vendor,
            device,
            supported: ids::supported_list(),
        }),
    }
}

/// A receive queue of any kind of port.
// Queues are not boxed: the burst path would pay a pointer chase per call, and a few hundred
// bytes per queue in a `Vec` cost nothing.
#[allow(clippy::large_enum_variant)]
pub enum AnyRx {
    /// Of a null port.
    Null(NullRx),
    /// Of an 82576 port.
    Igb(IgbRx<PciBus>),
    /// Of an 82599 port.
    Ixgbe(IxgbeRx<PciBus>),
    /// Of a software 82599 port.
    IxgbeSim(IxgbeRx<SimPort>),
    /// Of an af_packet port.
    AfPacket(AfpRx),
    /// Of a qm port.
    Qm(QmRx<QmDevice>),
    /// Of a virtio-net port.
    Virtio(VirtioRx<MmioRegion>),
    /// A receive queue of a software virtio-net port.
    VirtioModel(VirtioRx<VirtioModel>),
}

/// A transmit queue of any kind of port.
#[allow(clippy::large_enum_variant)]
pub enum AnyTx {
    /// Of a null port.
    Null(NullTx),
    /// Of an 82576 port.
    Igb(IgbTx<PciBus>),
    /// Of an 82599 port.
    Ixgbe(IxgbeTx<PciBus>),
    /// Of a software 82599 port.
    IxgbeSim(IxgbeTx<SimPort>),
    /// Of an af_packet port.
    AfPacket(AfpTx),
    /// Of a qm port.
    Qm(QmTx<QmDevice>),
    /// Of a virtio-net port.
    Virtio(VirtioTx<MmioRegion>),
    /// A transmit queue of a software virtio-net port.
    VirtioModel(VirtioTx<VirtioModel>),
}

impl Port for AnyPort {
    type Rx = AnyRx;
    type Tx = AnyTx;

    fn info(&self) -> PortInfo {
        match self {
            AnyPort::Null(p) => p.info(),
            AnyPort::Igb(p) => p.info(),
            AnyPort::Ixgbe(p) => p.info(),
            AnyPort::IxgbeSim(p) => p.info(),
            AnyPort::AfPacket(p) => p.info(),
            AnyPort::Qm(p) => p.info(),
            AnyPort::Virtio(p) => p.info(),
            AnyPort::VirtioModel(p) => p.info(),
        }
    }

    fn link(&self) -> Result<LinkStatus> {
        match self {
            AnyPort::Null(p) => p.link(),
            AnyPort::Igb(p) => p.link(),
            AnyPort::Ixgbe(p) => p.link(),
            AnyPort::IxgbeSim(p) => p.link(),
            AnyPort::AfPacket(p) => p.link(),
            AnyPort::Qm(p) => p.link(),
            AnyPort::Virtio(p) => p.link(),
            AnyPort::VirtioModel(p) => p.link(),
        }
    }

    fn stats(&mut self) -> Result<PortStats> {
        match self {
            AnyPort::Null(p) => p.stats(),
            AnyPort::Igb(p) => p.stats(),
            AnyPort::Ixgbe(p) => p.stats(),
            AnyPort::IxgbeSim(p) => p.stats(),
            AnyPort::AfPacket(p) => p.stats(),
            AnyPort::Qm(p) => p.stats(),
            AnyPort::Virtio(p) => p.stats(),
            AnyPort::VirtioModel(p) => p.stats(),
        }
    }

    fn take_queues(&mut self) -> Result<QueueSet<AnyRx, AnyTx>> {
        match self {
            AnyPort::Null(p) => {
                let (rx, tx) = p.take_queues()?;
                Ok((
                    rx.into_iter().map(AnyRx::Null).collect(),
                    tx.into_iter().map(AnyTx::Null).collect(),
                ))
            }
            AnyPort::Igb(p) => {
                let (rx, tx) = p.take_queues()?;
                Ok((
                    rx.into_iter().map(AnyRx::Igb).collect(),
                    tx.into_iter().map(AnyTx::Igb).collect(),
                ))
            }
            AnyPort::Ixgbe(p) => {
                let (rx, tx) = p.take_queues()?;
                Ok((
                    rx.into_iter().map(AnyRx::Ixgbe).collect(),
                    tx.into_iter().map(AnyTx::Ixgbe).collect(),
                ))
            }
            AnyPort::IxgbeSim(p) => {
                let (rx, tx) = p.take_queues()?;
                Ok((
                    rx.into_iter().map(AnyRx::IxgbeSim).collect(),
                    tx.into_iter().map(AnyTx::IxgbeSim).collect(),
                ))
            }
            AnyPort::AfPacket(p) => {
                let (rx, tx) = p.take_queues()?;
                Ok((
                    rx.into_iter().map(AnyRx::AfPacket).collect(),
                    tx.into_iter().map(AnyTx::AfPacket).collect(),
                ))
            }
            AnyPort::Qm(p) => {
                let (rx, tx) = p.take_queues()?;
                Ok((
                    rx.into_iter().map(AnyRx::Qm).collect(),
                    tx.into_iter().map(AnyTx::Qm).collect(),
                ))
            }
            AnyPort::Virtio(p) => {
                let (rx, tx) = p.take_queues()?;
                Ok((
                    rx.into_iter().map(AnyRx::Virtio).collect(),
                    tx.into_iter().map(AnyTx::Virtio).collect(),
                ))
            }
            AnyPort::VirtioModel(p) => {
                let (rx, tx) = p.take_queues()?;
                Ok((
                    rx.into_iter().map(AnyRx::VirtioModel).collect(),
                    tx.into_iter().map(AnyTx::VirtioModel).collect(),
                ))
            }
        }
    }

    fn health(&self) -> Option<Arc<Health>> {
        match self {
            AnyPort::Igb(p) => p.health(),
            AnyPort::Ixgbe(p) => p.health(),
            AnyPort::IxgbeSim(p) => p.health(),
            // The other drivers do not watch their devices.
            _ => None,
        }
    }
}

impl RxQueue for AnyRx {
    #[inline]
    fn rx_burst(&mut self, batch: &mut Vec<Packet>, max: usize) -> Result<usize, QueueError> {
        match self {
            AnyRx::Null(q) => q.rx_burst(batch, max),
            AnyRx::Igb(q) => q.rx_burst(batch, max),
            AnyRx::Ixgbe(q) => q.rx_burst(batch, max),
            AnyRx::IxgbeSim(q) => q.rx_burst(batch, max),
            AnyRx::AfPacket(q) => q.rx_burst(batch, max),
            AnyRx::Qm(q) => q.rx_burst(batch, max),
            AnyRx::Virtio(q) => q.rx_burst(batch, max),
            AnyRx::VirtioModel(q) => q.rx_burst(batch, max),
        }
    }
    fn stats(&self) -> QueueStats {
        match self {
            AnyRx::Null(q) => q.stats(),
            AnyRx::Igb(q) => q.stats(),
            AnyRx::Ixgbe(q) => q.stats(),
            AnyRx::IxgbeSim(q) => q.stats(),
            AnyRx::AfPacket(q) => q.stats(),
            AnyRx::Qm(q) => q.stats(),
            AnyRx::Virtio(q) => q.stats(),
            AnyRx::VirtioModel(q) => q.stats(),
        }
    }
    fn pool(&self) -> &Pool {
        match self {
            AnyRx::Null(q) => q.pool(),
            AnyRx::Igb(q) => q.pool(),
            AnyRx::Ixgbe(q) => q.pool(),
            AnyRx::IxgbeSim(q) => q.pool(),
            AnyRx::AfPacket(q) => q.pool(),
            AnyRx::Qm(q) => q.pool(),
            AnyRx::Virtio(q) => q.pool(),
            AnyRx::VirtioModel(q) => q.pool(),
        }
    }
    fn interrupt(&self) -> Option<&Interrupt> {
        match self {
            AnyRx::Igb(q) => q.interrupt(),
            AnyRx::Ixgbe(q) => q.interrupt(),
            AnyRx::IxgbeSim(q) => q.interrupt(),
            AnyRx::Virtio(q) => q.interrupt(),
            AnyRx::VirtioModel(q) => q.interrupt(),
            // The Intel and virtio drivers have an interrupt mode; the rest are polled.
            _ => None,
        }
    }
    fn arm_interrupt(&mut self) -> Result<bool> {
        match self {
            AnyRx::Igb(q) => q.arm_interrupt(),
            AnyRx::Ixgbe(q) => q.arm_interrupt(),
            AnyRx::IxgbeSim(q) => q.arm_interrupt(),
            AnyRx::Virtio(q) => q.arm_interrupt(),
            AnyRx::VirtioModel(q) => q.arm_interrupt(),
            _ => Err(Error::NotSupported {
                device: self.kind().into(),
                what: "interrupt mode".into(),
                why: kinds::no_interrupt_mode(),
            }),
        }
    }
    fn disarm_interrupt(&mut self) {
        match self {
            AnyRx::Igb(q) => q.disarm_interrupt(),
            AnyRx::Ixgbe(q) => q.disarm_interrupt(),
            AnyRx::IxgbeSim(q) => q.disarm_interrupt(),
            AnyRx::Virtio(q) => q.disarm_interrupt(),
            AnyRx::VirtioModel(q) => q.disarm_interrupt(),
            _ => {}
        }
    }
}

/// Why a virtio-net queue cannot have its interrupt raised by hand (the self-test's check).
pub const NO_MANUAL_INTERRUPT: &str =
    "virtio-net has no register that raises a queue's interrupt by hand (the Intel chips' EICS); a frame wakes it: see the on-device test interrupt_wakes_a_sleeping_queue";

impl AnyRx {
    /// Sets the queue's interrupt cause by hand (EICS on the Intel chips): armed, the queue's
    /// vector fires as if a frame had arrived. The self-test's interrupt check.
    pub fn trigger_interrupt(&self) -> Result<()> {
        match self {
            AnyRx::Igb(q) => q.trigger_interrupt(),
            AnyRx::Ixgbe(q) => q.trigger_interrupt(),
            AnyRx::IxgbeSim(q) => q.trigger_interrupt(),
            AnyRx::Virtio(_) | AnyRx::VirtioModel(_) => Err(Error::NotSupported {
                device: self.kind().into(),
                what: "raising an interrupt by hand".into(),
                why: NO_MANUAL_INTERRUPT.into(),
            }),
            _ => Err(Error::NotSupported {
                device: self.kind().into(),
                what: "interrupt mode".into(),
                why: kinds::no_interrupt_mode(),
            }),
        }
    }

    /// The kind of port the queue belongs to, for messages.
    fn kind(&self) -> &'static str {
        match self {
            AnyRx::Null(_) => "a null port",
            AnyRx::Igb(_) => "an 82576 port",
            AnyRx::Ixgbe(_) => "an 82599 port",
            AnyRx::IxgbeSim(_) => "a software 82599 port",
            AnyRx::AfPacket(_) => "an af_packet port",
            AnyRx::Qm(_) => "a qm port",
            AnyRx::Virtio(_) | AnyRx::VirtioModel(_) => "a virtio-net port",
        }
    }
}

/// Why a queue of this kind cannot be restarted by itself.
const NO_RESTART: &str = "only the Intel drivers restart one queue on its own ring; stop the traffic and reopen the port instead";

impl AnyRx {
    /// Stops the queue and starts it again on the same ring (the Intel drivers:
    /// [`IntelRx::restart`](crate::devices::intel::rxq::IntelRx::restart)); frames finished
    /// but not received yet are dropped and counted. Others refuse, saying why.
    pub fn restart(&mut self) -> Result<()> {
        match self {
            AnyRx::Igb(q) => q.restart(),
            AnyRx::Ixgbe(q) => q.restart(),
            AnyRx::IxgbeSim(q) => q.restart(),
            _ => Err(Error::NotSupported {
                device: self.kind().into(),
                what: "restarting a receive queue".into(),
                why: NO_RESTART.into(),
            }),
        }
    }
}

impl AnyTx {
    /// Stops the queue and starts it again on the same ring (the Intel drivers:
    /// [`IntelTx::restart`](crate::devices::intel::IntelTx::restart)); packets queued but not
    /// sent are dropped and counted. Others refuse, saying why.
    pub fn restart(&mut self) -> Result<()> {
        match self {
            AnyTx::Igb(q) => q.restart(),
            AnyTx::Ixgbe(q) => q.restart(),
            AnyTx::IxgbeSim(q) => q.restart(),
            _ => Err(Error::NotSupported {
                device: "this transmit queue".into(),
                what: "restarting a transmit queue".into(),
                why: NO_RESTART.into(),
            }),
        }
    }
}

impl TxQueue for AnyTx {
    #[inline]
    fn tx_burst(&mut self, batch: &mut Vec<Packet>) -> Result<usize, QueueError> {
        match self {
            AnyTx::Null(q) => q.tx_burst(batch),
            AnyTx::Igb(q) => q.tx_burst(batch),
            AnyTx::Ixgbe(q) => q.tx_burst(batch),
            AnyTx::IxgbeSim(q) => q.tx_burst(batch),
            AnyTx::AfPacket(q) => q.tx_burst(batch),
            AnyTx::Qm(q) => q.tx_burst(batch),
            AnyTx::Virtio(q) => q.tx_burst(batch),
            AnyTx::VirtioModel(q) => q.tx_burst(batch),
        }
    }
    fn stats(&self) -> QueueStats {
        match self {
            AnyTx::Null(q) => q.stats(),
            AnyTx::Igb(q) => q.stats(),
            AnyTx::Ixgbe(q) => q.stats(),
            AnyTx::IxgbeSim(q) => q.stats(),
            AnyTx::AfPacket(q) => q.stats(),
            AnyTx::Qm(q) => q.stats(),
            AnyTx::Virtio(q) => q.stats(),
            AnyTx::VirtioModel(q) => q.stats(),
        }
    }
}

impl SwVlanTx for AnyTx {
    #[inline]
    fn tx_burst_sw_vlan(
        &mut self,
        batch: &mut Vec<Packet>,
        tpid: Tpid,
        counts: &mut SwVlanCounts,
    ) -> Result<usize, QueueError> {
        match self {
            AnyTx::Null(q) => q.tx_burst_sw_vlan(batch, tpid, counts),
            AnyTx::Igb(q) => q.tx_burst_sw_vlan(batch, tpid, counts),
            AnyTx::Ixgbe(q) => q.tx_burst_sw_vlan(batch, tpid, counts),
            AnyTx::IxgbeSim(q) => q.tx_burst_sw_vlan(batch, tpid, counts),
            AnyTx::AfPacket(q) => q.tx_burst_sw_vlan(batch, tpid, counts),
            AnyTx::Qm(q) => q.tx_burst_sw_vlan(batch, tpid, counts),
            AnyTx::Virtio(q) => q.tx_burst_sw_vlan(batch, tpid, counts),
            AnyTx::VirtioModel(q) => q.tx_burst_sw_vlan(batch, tpid, counts),
        }
    }
}

impl AnyPort {
    /// The VLAN hardware of the driver behind the port.
    fn vlan_hw(&mut self) -> &mut dyn VlanHardware {
        match self {
            AnyPort::Null(p) => p,
            AnyPort::Igb(p) => &mut **p,
            AnyPort::Ixgbe(p) => &mut **p,
            AnyPort::IxgbeSim(p) => &mut **p,
            AnyPort::AfPacket(p) => p,
            AnyPort::Qm(p) => &mut **p,
            AnyPort::Virtio(p) => &mut **p,
            AnyPort::VirtioModel(p) => &mut **p,
        }
    }
}

/// Whichever driver is behind the port, so tools that open ports by name get the same control.
impl VlanHardware for AnyPort {
    fn vlan_caps(&self) -> VlanCaps {
        match self {
            AnyPort::Null(p) => p.vlan_caps(),
            AnyPort::Igb(p) => p.vlan_caps(),
            AnyPort::Ixgbe(p) => p.vlan_caps(),
            AnyPort::IxgbeSim(p) => p.vlan_caps(),
            AnyPort::AfPacket(p) => p.vlan_caps(),
            AnyPort::Qm(p) => p.vlan_caps(),
            AnyPort::Virtio(p) => p.vlan_caps(),
            AnyPort::VirtioModel(p) => p.vlan_caps(),
        }
    }
    fn set_rx_strip(&mut self, queue: u16, on: bool) -> Result<()> {
        self.vlan_hw().set_rx_strip(queue, on)
    }
    fn set_vlan_filter(&mut self, on: bool) -> Result<()> {
        self.vlan_hw().set_vlan_filter(on)
    }
    fn add_vlan(&mut self, vid: Vid) -> Result<()> {
        self.vlan_hw().add_vlan(vid)
    }
    fn remove_vlan(&mut self, vid: Vid) -> Result<()> {
        self.vlan_hw().remove_vlan(vid)
    }
    fn set_tpid(&mut self, tpid: Tpid) -> Result<()> {
        self.vlan_hw().set_tpid(tpid)
    }
    fn set_extended_vlan(&mut self, on: bool, outer_tpid: Tpid) -> Result<()> {
        self.vlan_hw().set_extended_vlan(on, outer_tpid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse() {
        assert_eq!("null:3".parse::<PortName>().unwrap(), PortName::Null(3));
        assert_eq!("null:3".parse::<PortName>().unwrap().to_string(), "null:3");
        assert_eq!("sim:5".parse::<PortName>().unwrap(), PortName::Sim(5));
        assert_eq!("sim:5".parse::<PortName>().unwrap().to_string(), "sim:5");
        let a = "afp:veth0,queues=2".parse::<PortName>().unwrap();
        assert_eq!(a, PortName::AfPacket("veth0,queues=2".into()));
        assert_eq!(a.to_string(), "afp:veth0,queues=2");
        assert!("afp:".parse::<PortName>().is_err());
        assert!("afp:x,color=red".parse::<PortName>().is_err());
        let p: PortName = "01:00.0".parse().unwrap();
        assert_eq!(p.to_string(), "0000:01:00.0");
        for bad in ["null:x", "foo:1", "01:00", "0000:01:00.8", ""] {
            let e = bad.parse::<PortName>().unwrap_err().to_string();
            assert!(
                e.contains("not a port name") || e.contains(bad),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn pci_ports_go_through_vfio() {
        // No such device on a build machine (or not bound to vfio-pci): the error names the
        // address and says what to do, it does not claim there is no driver.
        let e = open("0000:7f:1f.7", &PortConfig::default())
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("0000:7f:1f.7"), "{e}");
        assert!(!e.contains("no hardware driver"), "{e}");
    }

    /// Two wired ports of a pair: four frames sent out of `a` arrive at `b`.
    fn crosses_the_wire(mut a: AnyPort, mut b: AnyPort) {
        assert!(a.link().unwrap().up);
        let (_rxa, mut txa) = a.take_queues().unwrap();
        let (mut rxb, _txb) = b.take_queues().unwrap();
        let mut batch = Vec::new();
        assert_eq!(rxb[0].pool().alloc_bulk_len(4, 60, &mut batch), 4);
        assert_eq!(txa[0].tx_burst(&mut batch).unwrap(), 4);
        assert_eq!(rxb[0].rx_burst(&mut batch, 32).unwrap(), 4);
    }

    #[test]
    fn sim_ports_open_by_name_and_are_wired() {
        let cfg = PortConfig {
            ixgbe: IxgbeConfig {
                rx_ring: 64,
                tx_ring: 64,
                pool: crate::platform::dma::PoolConfig {
                    buffers: 256,
                    ..Default::default()
                },
                ..IxgbeConfig::default()
            },
            ..PortConfig::default()
        };
        let a = open("sim:40", &cfg).unwrap();
        let b = open("sim:41", &cfg).unwrap();
        assert_eq!(a.info().driver, "ixgbe");
        crosses_the_wire(a, b);
    }

    #[test]
    fn qm_ports_open_by_name_and_are_wired() {
        let cfg = PortConfig {
            qm: QmConfig {
                pool: crate::platform::dma::PoolConfig {
                    buffers: 256,
                    ..Default::default()
                },
                hw_buffers: 64,
                ..QmConfig::default()
            },
            ..PortConfig::default()
        };
        assert_eq!("qm:7".parse::<PortName>().unwrap().to_string(), "qm:7");
        let a = open("qm:40", &cfg).unwrap();
        let b = open("qm:41", &cfg).unwrap();
        assert_eq!(a.info().driver, "qm");
        crosses_the_wire(a, b);
        let e = open("qm:64", &cfg).err().unwrap().to_string();
        assert!(e.contains("qm port 64"), "{e}");
    }

    #[test]
    fn virtio_model_ports_open_by_name_and_are_wired() {
        let cfg = PortConfig {
            virtio: VirtioConfig {
                rx_ring: 16,
                tx_ring: 16,
                pool: crate::platform::dma::PoolConfig {
                    buffers: 64,
                    ..Default::default()
                },
                ..VirtioConfig::default()
            },
            ..PortConfig::default()
        };
        assert_eq!(
            "virtio:3".parse::<PortName>().unwrap().to_string(),
            "virtio:3"
        );
        let a = open("virtio:40", &cfg).unwrap();
        let b = open("virtio:41", &cfg).unwrap();
        assert_eq!(a.info().driver, "virtio");
        crosses_the_wire(a, b);
    }

    #[test]
    fn null_ports_open_by_name() {
        let mut p = open("null:1", &PortConfig::default()).unwrap();
        assert_eq!(p.info().driver, "null");
        let (mut rx, mut tx) = p.take_queues().unwrap();
        let mut b = Vec::new();
        assert_eq!(rx[0].rx_burst(&mut b, 4).unwrap(), 4);
        assert_eq!(tx[0].tx_burst(&mut b).unwrap(), 4);
    }
}
