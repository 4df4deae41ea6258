//! The virtio rig: the virtio driver on two software virtio-net devices
//! (`devices::virtio::model`).
//!
//! Port A's device has a traffic source (it fills every receive buffer the driver posts), port
//! B's transmits into the void; both are in one DMA domain (one software IOMMU), so B sends A's
//! buffers without a copy. Threaded (`virtio`): ONE device thread on the other core serves both
//! devices (it polls their rings; the used rings say VIRTQ_USED_F_NO_NOTIFY, so the driver
//! rings no doorbell), and received frames arrive in cache lines another core wrote, as DMA
//! writes do. Inline (`virtio-inline`): the device works inside the driver's doorbell writes, on
//! the forwarding core. virtio-net has no VLAN offload: both placements compared are the
//! driver's, Software vs Deferred receive with software insertion (the seed's question).

use std::sync::Arc;

use crate::devices::sim::DeviceThread;
use crate::devices::virtio::model::{ModelConfig, VirtioModel};
use crate::devices::virtio::{VirtioConfig, VirtioPort};
use crate::devices::AnyPort;
use crate::platform::dma::{PoolConfig, SoftIommu};
use crate::{Error, Result};

use super::plan::{Device, Traffic};
use super::rig::Rig;
use super::work::source;
use super::BenchConfig;

/// Descriptors per virtqueue: QEMU's default and maximum, and the model's.
const QUEUE: u16 = 256;

impl Rig {
    /// The virtio driver on two software devices, threaded (one device thread, on the second
    /// [`BenchConfig::pin`] CPU if given) or inline.
    pub(super) fn virtio(args: &BenchConfig, traffic: Traffic, threaded: bool) -> Result<Rig> {
        let thread = threaded.then(|| {
            args.pin
                .get(1)
                .map_or_else(DeviceThread::new, |&c| DeviceThread::pinned(c))
        });
        let iommu = Arc::new(SoftIommu::new("bench virtio"));
        let da = VirtioModel::new(
            ModelConfig {
                source: Some(source(traffic)),
                thread: thread.clone(),
                ..ModelConfig::default()
            },
            iommu.clone(),
        );
        // B has no source: it only transmits, into the void.
        let db = VirtioModel::new(
            ModelConfig {
                thread,
                ..ModelConfig::default()
            },
            iommu,
        );
        if threaded && !(da.threaded() && db.threaded()) {
            return Err(Error::InvalidConfig(
                "virtio: the system refused the models' device thread (see the log)".into(),
            ));
        }
        let vcfg = VirtioConfig {
            rx_ring: QUEUE,
            tx_ring: QUEUE,
            pool: PoolConfig {
                buffers: 4 * usize::from(QUEUE),
                ..PoolConfig::default()
            },
            ..VirtioConfig::default()
        };
        let a = AnyPort::VirtioModel(Box::new(VirtioPort::open_model(&da, "virtio:a", vcfg)?));
        let b = AnyPort::VirtioModel(Box::new(VirtioPort::open_model(&db, "virtio:b", vcfg)?));
        let device = if threaded {
            Device::Virtio
        } else {
            Device::VirtioInline
        };
        let mut rig = Rig::new(device, a, b, None)?;
        rig.virtio = Some((da, db));
        Ok(rig)
    }
}
