//! The virtio-net port: bring-up, the shared device state, [`Port`] and [`VlanHardware`].
//!
//! Bring-up (virtio 1.2, 3.1.1): reset; ACKNOWLEDGE; DRIVER; negotiate features (FAILED on a
//! device refused); FEATURES_OK,
//! read back (a device may refuse the set); queues (receive 0, transmit 1, control 2); DRIVER_OK;
//! then the receive mode and the VLAN table through the control queue. Everything the device
//! reports is checked: a queue of 0 descriptors or of a size that is not a power of two, a
//! refused FEATURES_OK and a legacy-only device are typed errors, before any buffer is posted.
//!
//! Teardown: the device is reset (status 0, read back) when the last handle of the shared
//! state goes (the port, or a queue that outlives it), and only then is any ring memory freed:
//! the control queue's, and what dropped queues left there. A reset stops all of the device's
//! DMA.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

use super::caps::Caps;
use super::ctrl::{self, Ctrl};
use super::queue::{VirtioRx, VirtioTx};
use super::shared::{Counters, Shared};
use super::transport::{check_queue_max, status, Transport, Window};
use super::{feature, VirtioConfig};
use crate::device::{LinkStatus, MacAddr, Port, PortInfo, PortStats, QueueSet};
use crate::error::{Error, Result};
use crate::platform::dma::{DmaMapper, Pool};
use crate::platform::irq::InterruptSet;
use crate::platform::mmio::{Mmio, MmioRegion};
use crate::platform::vfio::VfioDevice;
use crate::vlan::{Tpid, Vid, VlanCaps, VlanFilter, VlanHardware};

/// Queue numbers of a virtio-net device with one queue pair (virtio 1.2, 5.1.2).
const RX_QUEUE: u16 = 0;
const TX_QUEUE: u16 = 1;
const CTRL_QUEUE: u16 = 2;

/// A virtio-net port.
pub struct VirtioPort<M: Mmio + 'static> {
    info: PortInfo,
    features: u64,
    cfg: VirtioConfig,
    /// The queues until `take_queues`.
    queues: Option<(VirtioRx<M>, VirtioTx<M>)>,
    vids: VlanFilter,
    filter_on: bool,
    shared: Arc<Shared<M>>,
}

/// The transport of a virtio PCI device opened through VFIO: its capabilities walked and the
/// BARs they name mapped (each once).
pub fn pci_transport(
    dev: &VfioDevice,
    timeout: std::time::Duration,
) -> Result<Transport<MmioRegion>> {
    let name: Arc<str> = dev.addr().to_string().into();
    let mut space = vec![0u8; 256];
    dev.config_read(0, &mut space)?;
    let caps = Caps::parse(&space, &name)?;
    let mut bars: Vec<(u8, Arc<MmioRegion>)> = Vec::new();
    let mut window = |r: super::caps::Region, what: &str| -> Result<Window<MmioRegion>> {
        let bar = match bars.iter().find(|b| b.0 == r.bar) {
            Some(b) => b.1.clone(),
            None => {
                let m = Arc::new(dev.map_bar(u32::from(r.bar))?);
                bars.push((r.bar, m.clone()));
                m
            }
        };
        Window::new(bar, r.offset as usize, r.length as usize, what)
    };
    let common =
        window(caps.common, "common configuration")?.with_map(&crate::platform::regs::virtio::MAP);
    let notify = window(caps.notify, "notify")?;
    let device =
        caps.device
            .map(|r| {
                if r.length < 8 {
                    return Err(Error::DeviceState {
                        device: name.to_string(),
                        what: format!(
                        "its device configuration is {} bytes, shorter than the MAC and status (8)",
                        r.length
                    ),
                    });
                }
                Ok(window(r, "device configuration")?
                    .with_map(&crate::platform::regs::virtio_net::MAP))
            })
            .transpose()?;
    Ok(Transport::new(
        name,
        common,
        notify,
        caps.notify_off_multiplier,
        device,
        timeout,
    ))
}

/// The register test of a virtio device (the self-test's, without a driver running): reset
/// reads back 0, the select registers keep what is written, VERSION_1 is offered, and the
/// receive and transmit queues exist with power-of-two sizes. Leaves the device reset.
pub fn register_test<M: Mmio>(t: &Transport<M>) -> std::result::Result<String, String> {
    use crate::platform::regs::virtio as c;
    t.reset().map_err(|e| e.to_string())?;
    let mut checks = 1;
    for v in [1u32, 0] {
        t.common.write(c::DEVICE_FEATURE_SELECT, v);
        let got = t.common.read(c::DEVICE_FEATURE_SELECT);
        if got != v {
            return Err(format!("device_feature_select: wrote {v}, read {got}"));
        }
        checks += 1;
    }
    let f = t.device_features();
    if f & feature::VERSION_1 == 0 {
        return Err(format!(
            "VERSION_1 not offered (features {})",
            feature::names(f)
        ));
    }
    checks += 1;
    let mut sizes = Vec::new();
    for q in [RX_QUEUE, TX_QUEUE] {
        let max = check_queue_max(t, q, "data").map_err(|e| e.to_string())?;
        let sel = t.common.read(c::QUEUE_SELECT);
        if sel != q {
            return Err(format!("queue_select: wrote {q}, read {sel}"));
        }
        sizes.push(max);
        checks += 2;
    }
    t.reset().map_err(|e| e.to_string())?;
    Ok(format!(
        "{checks} checks of the common configuration (features {}; queues of {} and {} descriptors; {} queues)",
        feature::names(f),
        sizes[0],
        sizes[1],
        t.num_queues()
    ))
}

impl VirtioPort<MmioRegion> {
    /// Opens a virtio-net PCI device through VFIO: walks its capabilities, maps the BARs they
    /// name and brings it up.
    pub fn open_pci(dev: VfioDevice, cfg: VirtioConfig) -> Result<Self> {
        let transport = pci_transport(&dev, cfg.timeout)?;
        let id = dev.vendor_device()?;
        dev.enable_bus_master()?;
        let mapper = dev.dma_mapper();
        // One MSI-X vector (0) for the receive queue; VFIO routes it to an eventfd.
        let irqs = if cfg.interrupts {
            Some(dev.enable_msix(1)?)
        } else {
            None
        };
        Self::bring_up(transport, Some(dev), irqs, mapper, Some(id), cfg)
    }
}

impl<M: Mmio + 'static> VirtioPort<M> {
    /// Brings a device up over `transport` (reset, features, queues, DRIVER_OK, receive mode);
    /// in interrupt mode (`cfg.interrupts`) the receive queue takes vector 0 of `irqs`.
    pub fn bring_up(
        mut transport: Transport<M>,
        pci: Option<VfioDevice>,
        irqs: Option<InterruptSet>,
        mapper: Arc<dyn DmaMapper>,
        pci_id: Option<(u16, u16)>,
        cfg: VirtioConfig,
    ) -> Result<Self> {
        cfg.check()?;
        let rx_irq = match (&irqs, cfg.interrupts) {
            (_, false) => None,
            (Some(set), true) => Some(set.vectors().first().cloned().ok_or_else(|| {
                Error::InvalidConfig("interrupt mode with an empty set of vectors".into())
            })?),
            (None, true) => {
                return Err(Error::NotSupported {
                    device: transport.name.to_string(),
                    what: "interrupt mode".into(),
                    why: "this transport delivers no interrupts; poll instead".into(),
                })
            }
        };
        transport.reset()?;
        let name = transport.name.clone();
        // Two steps, as the spec lists them (virtio 1.2, 3.1.1 steps 2 and 3) and Linux's
        // `virtio_dev_probe` writes them: the device may look at each.
        transport.add_status(status::ACKNOWLEDGE);
        transport.add_status(status::DRIVER);
        let offered = transport.device_features();
        let mut features =
            match feature::negotiate(offered, &name, mapper.needs_physical_contiguity()) {
                Ok(f) => f,
                Err(e) => {
                    // The driver gives up on this device (3.1.1: "the driver SHOULD set the FAILED
                    // status bit"; Linux `virtio_dev_probe` does on a failed probe).
                    transport.add_status(status::FAILED);
                    return Err(e);
                }
            };
        if !cfg.vlan_filter {
            // No device VLAN table unless a filter is asked for (`VirtioConfig::vlan_filter`).
            features &= !feature::CTRL_VLAN;
        }
        transport.set_driver_features(features);
        transport.add_status(status::FEATURES_OK);
        if transport.status() & status::FEATURES_OK == 0 {
            transport.add_status(status::FAILED);
            return Err(Error::DeviceState {
                device: name.to_string(),
                what: format!(
                    "the device refused the features {} (FEATURES_OK did not stay set); it cannot work without them",
                    feature::names(features)
                ),
            });
        }
        let shared = Arc::new(Shared {
            transport,
            counters: Counters::default(),
            ctrl: Mutex::new(None),
            kept: Mutex::new(Vec::new()),
            irqs,
            pci,
        });
        let t = &shared.transport;
        let rx_size = check_queue_max(t, RX_QUEUE, "receive")?.min(cfg.rx_ring);
        let tx_size = check_queue_max(t, TX_QUEUE, "transmit")?.min(cfg.tx_ring);
        let pool = Pool::new(cfg.pool, mapper.clone())?;
        let mut rx = VirtioRx::new(shared.clone(), RX_QUEUE, rx_size, pool, rx_irq)?;
        let tx = VirtioTx::new(shared.clone(), TX_QUEUE, tx_size, mapper.clone())?;
        if features & feature::CTRL_VQ != 0 {
            let c = Ctrl::new(t, CTRL_QUEUE, mapper, cfg.timeout)?;
            *shared.ctrl.lock().unwrap_or_else(|e| e.into_inner()) = Some(c);
        }
        t.add_status(status::DRIVER_OK);
        if t.status() & status::DEVICE_NEEDS_RESET != 0 {
            return Err(Error::DeviceState {
                device: name.to_string(),
                what: "the device set DEVICE_NEEDS_RESET during bring-up; reopen the port".into(),
            });
        }
        rx.start();
        let mac = if features & feature::MAC != 0 {
            t.mac()?.unwrap_or_default()
        } else {
            MacAddr::default()
        };
        let info = PortInfo {
            name: name.to_string(),
            driver: "virtio",
            model: "virtio-net (virtio 1.x, split virtqueues)".into(),
            pci_id,
            mac,
            rx_queues: 1,
            tx_queues: 1,
            rx_ring: rx_size,
            tx_ring: tx_size,
            mtu: None,
        };
        let mut port = VirtioPort {
            info,
            features,
            cfg,
            queues: Some((rx, tx)),
            vids: VlanFilter::new(),
            // A port that asked for the device's table starts with its filter on, so that the
            // table is not opened (4,094 commands) only to be closed by the VLAN layer.
            filter_on: cfg.vlan_filter,
            shared,
        };
        port.apply_rx_mode()?;
        tracing::info!(port = %name, features = %feature::names(features), %mac, "virtio-net port up");
        Ok(port)
    }

    /// Interrupt mode's vectors (empty when polled): the receive queue's is the first.
    pub fn interrupts(&self) -> &[crate::platform::irq::Interrupt] {
        self.shared.irqs.as_ref().map_or(&[], InterruptSet::vectors)
    }

    /// The negotiated features.
    pub fn features(&self) -> u64 {
        self.features
    }

    /// The shared state (transport, counters).
    pub fn shared(&self) -> &Arc<Shared<M>> {
        &self.shared
    }

    fn command(&self, class: u8, cmd: u8, data: &[u8], what: &'static str) -> Result<()> {
        let mut c = self.shared.ctrl.lock().unwrap_or_else(|e| e.into_inner());
        match c.as_mut() {
            Some(c) => c.command(class, cmd, data, what),
            None => Err(self.refuse(
                what,
                "the device has no control queue (VIRTIO_NET_F_CTRL_VQ)",
            )),
        }
    }

    fn refuse(&self, what: &str, why: &str) -> Error {
        Error::NotSupported {
            device: self.info.name.clone(),
            what: what.into(),
            why: why.into(),
        }
    }

    fn has(&self, f: u64) -> bool {
        self.features & f == f
    }

    /// Writes the whole receive configuration from the driver's shadow: promiscuous mode, and
    /// the VLAN table (VID 0 always, so that priority-tagged frames pass). Run at bring-up,
    /// after the reset that every open starts with (a reset forgets it all: QEMU's
    /// `virtio_net_reset`); the VLAN layer gives a reopened port its table again.
    ///
    /// The VLAN table is best-effort by the spec (virtio 1.2, 5.1.6.5.3), and QEMU passes
    /// every frame while promiscuous (`receive_filter` in hw/net/virtio-net.c); QEMU 10.0.2
    /// was also seen here to deliver a VID missing from its table with promiscuous off. So the
    /// VLAN layer filters in software as well ([`VlanCaps::filter_best_effort`]), and the
    /// filter never changes the port's unicast behaviour.
    fn apply_rx_mode(&mut self) -> Result<()> {
        if !self.has(feature::CTRL_RX) {
            return Ok(());
        }
        let promisc = self.cfg.promiscuous;
        self.command(
            ctrl::CLASS_RX,
            ctrl::RX_PROMISC,
            &[promisc.into()],
            "RX_PROMISC",
        )?;
        self.command(ctrl::CLASS_RX, ctrl::RX_ALLMULTI, &[1], "RX_ALLMULTI")?;
        if self.has(feature::CTRL_VLAN) {
            let vids: Vec<u16> = std::iter::once(0)
                .chain(self.vids.iter().filter(|&v| v != 0))
                .collect();
            for v in vids {
                self.vlan_command(true, v)?;
            }
            if !promisc && !self.filter_on {
                self.open_vlan_table(true)?;
            }
        }
        Ok(())
    }

    /// Adds (`open`) or removes every VID outside the shadow table: a port that is not
    /// promiscuous passes every VID with the filter off only if the device's table holds all
    /// of them (4094 commands, on the configuration path only).
    fn open_vlan_table(&mut self, open: bool) -> Result<()> {
        for v in (1..4095u16).filter(|&v| !self.vids.contains(v)) {
            self.vlan_command(open, v)?;
        }
        Ok(())
    }

    /// VIRTIO_NET_CTRL_VLAN_ADD (`add`) or _DEL of `vid` in the device's table.
    fn vlan_command(&self, add: bool, vid: u16) -> Result<()> {
        let (cmd, what) = if add {
            (ctrl::VLAN_ADD, "VLAN_ADD")
        } else {
            (ctrl::VLAN_DEL, "VLAN_DEL")
        };
        self.command(ctrl::CLASS_VLAN, cmd, &vid.to_le_bytes(), what)
    }
}

impl<M: Mmio + 'static> Port for VirtioPort<M> {
    type Rx = VirtioRx<M>;
    type Tx = VirtioTx<M>;

    fn info(&self) -> PortInfo {
        self.info.clone()
    }

    /// The link as the device configuration reports it; an error when the device has set
    /// DEVICE_NEEDS_RESET (it stopped after an error of its own, virtio 1.2, 2.1.2): the port
    /// must be reopened (the open resets it).
    fn link(&self) -> Result<LinkStatus> {
        if self.shared.transport.status() & status::DEVICE_NEEDS_RESET != 0 {
            return Err(Error::DeviceState {
                device: self.info.name.clone(),
                what: "the device set DEVICE_NEEDS_RESET (it stopped after an error of its own); \
                       reopen the port, which resets it"
                    .into(),
            });
        }
        let up = if self.has(feature::STATUS) {
            self.shared.transport.net_status().unwrap_or(0) & 1 == 1
        } else {
            // Without VIRTIO_NET_F_STATUS the link is assumed up (virtio 1.2, 5.1.4.2).
            true
        };
        Ok(LinkStatus {
            up,
            speed_mbps: 0,
            full_duplex: up,
        })
    }

    fn stats(&mut self) -> Result<PortStats> {
        let c = &self.shared.counters;
        let v = |a: &std::sync::atomic::AtomicU64| a.load(Relaxed);
        Ok(PortStats {
            hw: vec![
                ("rx_packets", v(&c.rx_packets)),
                ("rx_bytes", v(&c.rx_bytes)),
                ("rx_dropped", v(&c.rx_dropped)),
                ("rx_no_buffer", v(&c.rx_no_buffer)),
                ("tx_packets", v(&c.tx_packets)),
                ("tx_bytes", v(&c.tx_bytes)),
                ("tx_dropped", v(&c.tx_dropped)),
                ("tx_copied", v(&c.tx_copied)),
            ],
        })
    }

    fn take_queues(&mut self) -> Result<QueueSet<VirtioRx<M>, VirtioTx<M>>> {
        let (rx, tx) = self.queues.take().ok_or_else(|| {
            Error::InvalidConfig(format!("{}: queues were already taken", self.info.name))
        })?;
        Ok((vec![rx], vec![tx]))
    }
}

/// virtio-net has a VID filter (VIRTIO_NET_F_CTRL_VLAN) and neither strips nor inserts tags:
/// the hardware receive and transmit modes are refused, software and deferred run unchanged.
impl<M: Mmio + 'static> VlanHardware for VirtioPort<M> {
    fn vlan_caps(&self) -> VlanCaps {
        VlanCaps {
            filter: self.has(feature::CTRL_VLAN),
            filter_best_effort: true,
            rx_queues: 1,
            ..VlanCaps::none(self.info.name.clone())
        }
    }
    fn set_rx_strip(&mut self, _queue: u16, on: bool) -> Result<()> {
        if !on {
            return Ok(());
        }
        Err(self.refuse(
            "VLAN tag stripping",
            "virtio-net has no VLAN strip (Linux's and DPDK's virtio drivers strip in software); use rx mode sw or deferred",
        ))
    }
    /// A promiscuous port passes every VID in QEMU whatever its table holds; one that is not
    /// passes with the filter off only the VIDs in its table, so turning the filter off opens
    /// the table (and on closes it again).
    fn set_vlan_filter(&mut self, on: bool) -> Result<()> {
        if !self.vlan_caps().filter {
            return Err(self.refuse(
                "the VLAN filter",
                "the device offers no VLAN table (VIRTIO_NET_F_CTRL_VLAN)",
            ));
        }
        if on == self.filter_on {
            return Ok(());
        }
        if !self.cfg.promiscuous {
            self.open_vlan_table(!on)?;
        }
        self.filter_on = on;
        Ok(())
    }
    fn add_vlan(&mut self, vid: Vid) -> Result<()> {
        let v = vid.get();
        self.vlan_command(true, v)?;
        self.vids.add(v)?;
        Ok(())
    }
    fn remove_vlan(&mut self, vid: Vid) -> Result<()> {
        let v = vid.get();
        if v == 0 {
            // VID 0 stays in the table: priority-tagged frames always pass.
            return Ok(());
        }
        // With the filter off on a port that is not promiscuous the device's table is open
        // (every VID): the VID stays there until the filter goes on.
        if self.filter_on || self.cfg.promiscuous {
            self.vlan_command(false, v)?;
        }
        self.vids.remove(v)?;
        Ok(())
    }
    fn set_tpid(&mut self, tpid: Tpid) -> Result<()> {
        if tpid == Tpid::C_TAG {
            return Ok(());
        }
        Err(self.refuse(
            "a TPID other than 0x8100",
            "virtio-net's VLAN table knows 0x8100 tags only (QEMU's receive_filter)",
        ))
    }
    fn set_extended_vlan(&mut self, on: bool, _outer_tpid: Tpid) -> Result<()> {
        if !on {
            return Ok(());
        }
        Err(self.refuse(
            "extended (QinQ) VLAN mode",
            "virtio-net has no extended VLAN mode",
        ))
    }
}

impl<M: Mmio + 'static> std::fmt::Debug for VirtioPort<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VirtioPort")
            .field("name", &self.info.name)
            .field("features", &format_args!("{:#x}", self.features))
            .finish()
    }
}
