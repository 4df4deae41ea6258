//! virtio-net over VFIO: the NIC of (almost) every virtual machine, driven from user space.
//!
//! A modern (virtio 1.x) PCI device, as QEMU's `virtio-net-pci` with `disable-legacy=on` and
//! `iommu_platform=on`: the capability walk ([`caps`]) finds its structures, the transport
//! ([`transport`]) reads and writes them at their natural widths, [`port`] brings the device
//! up (one receive/transmit queue pair and the control queue, split virtqueues: [`ring`]),
//! and [`queue`] is the burst path. Legacy (0.9) devices are refused with the reason.
//!
//! What the device lacks gets the crate's software path: there is no VLAN strip or insert
//! (hardware VLAN modes are refused; software and deferred work as everywhere) and no device
//! counters (the port's `stats` are the driver's). The queues are polled
//! (`VIRTQ_AVAIL_F_NO_INTERRUPT`), or in interrupt mode the receive queue has an MSI-X vector
//! and sleeps until the device returns a frame; there is no interrupt moderation (it would
//! need VIRTIO_F_EVENT_IDX) and no way to raise a queue's interrupt by hand. The VLAN filter is the device's table, written
//! through the control queue ([`ctrl`]); the spec makes it best-effort, so the VLAN layer
//! filters in software as well.
//!
//! The software device [`model`] (the modern PCI transport and the device side of split
//! virtqueues through a software IOMMU, working inline in the doorbell write) runs this driver
//! without a VM: `virtio:N` ports, the host tests, and `bench/instructions --device virtio`.
//!
//! Sources: OASIS virtio 1.2 cs01 (sections cited in each file); QEMU hw/virtio/virtio-pci.c
//! and hw/net/virtio-net.c for what the test bed's device does; DPDK drivers/net/virtio and
//! Linux drivers/net/virtio_net.c for what drivers do. Only QEMU's device has been driven.

pub mod caps;
pub mod ctrl;
pub mod model;
pub mod port;
pub mod queue;
pub mod ring;
mod shared;
pub mod transport;

#[cfg(test)]
mod tests;

use std::time::Duration;

pub use port::VirtioPort;
pub use queue::{VirtioRx, VirtioTx};

use crate::error::{Error, Result};
use crate::platform::dma::PoolConfig;

/// Feature bits (virtio 1.2, 5.1.3 and 6), and the negotiation.
pub mod feature {
    use crate::error::{Error, Result};

    /// VIRTIO_NET_F_MTU: the configuration reports a maximum MTU.
    pub const MTU: u64 = 1 << 3;
    /// VIRTIO_NET_F_MAC: the configuration holds the MAC address.
    pub const MAC: u64 = 1 << 5;
    /// VIRTIO_NET_F_MRG_RXBUF: frames may span receive buffers (not taken).
    pub const MRG_RXBUF: u64 = 1 << 15;
    /// VIRTIO_NET_F_STATUS: the configuration reports the link.
    pub const STATUS: u64 = 1 << 16;
    /// VIRTIO_NET_F_CTRL_VQ: a control queue.
    pub const CTRL_VQ: u64 = 1 << 17;
    /// VIRTIO_NET_F_CTRL_RX: receive mode (promiscuous, all-multicast) through it.
    pub const CTRL_RX: u64 = 1 << 18;
    /// VIRTIO_NET_F_CTRL_VLAN: a VLAN filter table through it.
    pub const CTRL_VLAN: u64 = 1 << 19;
    /// VIRTIO_NET_F_MQ: more than one queue pair (not taken: one pair).
    pub const MQ: u64 = 1 << 22;
    /// VIRTIO_F_VERSION_1: a virtio 1.x device.
    pub const VERSION_1: u64 = 1 << 32;
    /// VIRTIO_F_ACCESS_PLATFORM: the device's DMA goes through the platform's IOMMU.
    pub const ACCESS_PLATFORM: u64 = 1 << 33;
    /// VIRTIO_F_RING_PACKED: packed virtqueues (not taken: split).
    pub const RING_PACKED: u64 = 1 << 34;
    /// VIRTIO_F_ORDER_PLATFORM: the device is ordered as the platform's devices are (hardware,
    /// or reached as such), so the rings use the platform's DMA barriers instead of the SMP
    /// ones (virtio 1.2, 6.1: "A driver SHOULD accept VIRTIO_F_ORDER_PLATFORM if it is offered";
    /// Linux `__vring_new_virtqueue` then clears `weak_barriers`). Taken when offered.
    pub const ORDER_PLATFORM: u64 = 1 << 36;

    /// What the driver takes when offered.
    pub const WANTED: u64 =
        VERSION_1 | ACCESS_PLATFORM | ORDER_PLATFORM | MAC | STATUS | CTRL_VQ | CTRL_RX | CTRL_VLAN;

    const NAMES: [(u64, &str); 12] = [
        (MTU, "MTU"),
        (MAC, "MAC"),
        (MRG_RXBUF, "MRG_RXBUF"),
        (STATUS, "STATUS"),
        (CTRL_VQ, "CTRL_VQ"),
        (CTRL_RX, "CTRL_RX"),
        (CTRL_VLAN, "CTRL_VLAN"),
        (MQ, "MQ"),
        (VERSION_1, "VERSION_1"),
        (ACCESS_PLATFORM, "ACCESS_PLATFORM"),
        (RING_PACKED, "RING_PACKED"),
        (ORDER_PLATFORM, "ORDER_PLATFORM"),
    ];

    /// The names of the known bits of `f` (`VERSION_1|MAC|...`).
    pub fn names(f: u64) -> String {
        let v: Vec<&str> = NAMES
            .iter()
            .filter(|(b, _)| f & b != 0)
            .map(|(_, n)| *n)
            .collect();
        if v.is_empty() {
            "none".into()
        } else {
            v.join("|")
        }
    }

    /// The features to accept of those `offered`: VERSION_1 is required, and so is
    /// ACCESS_PLATFORM unless the device's DMA goes to physical addresses (`physical_dma`: VFIO's
    /// no-IOMMU mode, where a device without it, as a VM without an IOMMU offers, is what we
    /// want; offered, it is accepted there too); the control classes only come with the control
    /// queue.
    pub fn negotiate(offered: u64, device: &str, physical_dma: bool) -> Result<u64> {
        let refuse = |what: &str, why: &str| Error::NotSupported {
            device: device.into(),
            what: what.into(),
            why: why.into(),
        };
        if offered & VERSION_1 == 0 {
            return Err(refuse(
                "this virtio device",
                "it does not offer VIRTIO_F_VERSION_1: a legacy (virtio 0.9) device, which vfio-nic does not drive; give QEMU `disable-legacy=on` (or use a virtio 1.x device)",
            ));
        }
        if offered & ACCESS_PLATFORM == 0 && !physical_dma {
            return Err(refuse(
                "this virtio device",
                "it does not offer VIRTIO_F_ACCESS_PLATFORM, so its DMA would bypass the IOMMU and use guest-physical addresses, which a VFIO process behind an IOMMU does not have; give QEMU `iommu_platform=on` on the device (with an IOMMU such as intel-iommu), or on a machine without an IOMMU open it in VFIO's no-IOMMU mode (--vfio-backend noiommu --allow-noiommu)",
            ));
        }
        let mut f = offered & WANTED;
        if f & CTRL_VQ == 0 {
            f &= !(CTRL_RX | CTRL_VLAN);
        }
        Ok(f)
    }
}

/// How to open a virtio-net port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VirtioConfig {
    /// Receive queue descriptors (a power of two; the device's maximum if smaller).
    pub rx_ring: u16,
    /// Transmit queue descriptors (a power of two; two per frame in flight).
    pub tx_ring: u16,
    /// The receive pool.
    pub pool: PoolConfig,
    /// Receive every unicast frame (the Intel drivers' default too).
    pub promiscuous: bool,
    /// Longest wait for the device (reset, a control command).
    pub timeout: Duration,
    /// Interrupt mode: the receive queue gets MSI-X vector 0 and can sleep until frames come
    /// (`RxQueue::wait`). Polled otherwise.
    pub interrupts: bool,
    /// Use the device's VLAN table (negotiate VIRTIO_NET_F_CTRL_VLAN): for a port whose VLAN
    /// filter is to run in the device as well. Off by default: a device without the feature
    /// passes every VID (QEMU's `virtio_net_set_features` opens its table), while one with it
    /// drops the VIDs its table lacks, so a port that is not promiscuous and wants no filter
    /// would fill the table with 4,094 synchronous control commands at every open. The VLAN
    /// layer filters in software either way (the table is best-effort, virtio 1.2, 5.1.6.5.3).
    pub vlan_filter: bool,
}

impl Default for VirtioConfig {
    /// 256-descriptor queues (QEMU's default and maximum), the default pool, promiscuous, 2 s,
    /// polled, no device VLAN table.
    fn default() -> Self {
        VirtioConfig {
            rx_ring: 256,
            tx_ring: 256,
            pool: PoolConfig::default(),
            promiscuous: true,
            timeout: Duration::from_secs(2),
            interrupts: false,
            vlan_filter: false,
        }
    }
}

impl VirtioConfig {
    /// Checks the ring sizes.
    pub fn check(&self) -> Result<()> {
        ring::check_size(self.rx_ring, "rx_ring")?;
        ring::check_size(self.tx_ring, "tx_ring")?;
        // Each receive descriptor holds one pool buffer (no MRG_RXBUF).
        crate::devices::pool_rule::check_rx_pool(
            "virtio-net",
            "rx_ring",
            usize::from(self.rx_ring),
            self.pool.buffers,
        )?;
        if self.tx_ring < 2 {
            return Err(Error::InvalidConfig(
                "tx_ring: a virtio transmit queue needs at least 2 descriptors (two per frame)"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// Issue 38: a device without VIRTIO_F_ACCESS_PLATFORM (what a VM without an IOMMU offers) is
/// driven in no-IOMMU mode only.
#[cfg(test)]
mod access_platform_tests {
    use super::feature::{negotiate, ACCESS_PLATFORM, MAC, VERSION_1};

    #[test]
    fn access_platform_is_required_behind_an_iommu_only() {
        let bare = VERSION_1 | MAC;
        let e = negotiate(bare, "0000:01:00.0", false).unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains("iommu_platform=on") && m.contains("--allow-noiommu"),
            "{m}"
        );
        assert_eq!(negotiate(bare, "0000:01:00.0", true).unwrap(), bare);
        // Offered, it is accepted with physical addresses too (the platform's DMA is identity).
        let with = bare | ACCESS_PLATFORM;
        assert_eq!(negotiate(with, "0000:01:00.0", true).unwrap(), with);
        assert_eq!(negotiate(with, "0000:01:00.0", false).unwrap(), with);
    }
}
