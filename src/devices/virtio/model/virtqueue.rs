//! The device's side of a split virtqueue (virtio 1.2, 2.7), through a software IOMMU.
//!
//! What QEMU's `virtqueue_pop` and `virtqueue_push` (hw/virtio/virtio.c) do, on the bus
//! addresses the driver wrote into the common configuration: the device reads the available
//! index with an acquire load, the ring slot and the descriptors after it, and returns a chain
//! by writing a used entry and then the used index with a release store. Every access goes
//! through [`SoftIommu`], so a driver that hands over a pointer, or frees a ring the device
//! still uses, faults instead of working by accident. A [`DmaFault`] is returned to the caller,
//! which stops the queue (the device needs a reset then, as virtio 1.2, 2.1.2 describes).
//!
//! The software IOMMU has 32- and 64-bit words only, so the 16-bit fields (available index,
//! ring entries) are read as the 32-bit word that holds them; the used ring's flags and index
//! are one 32-bit store (the flags 0: the device wants every doorbell; or
//! VIRTQ_USED_F_NO_NOTIFY for a device thread that polls, see [`DeviceQueue::no_notify`]).
//!
//! Shared by the software device ([`super::VirtioModel`]) and the host tests' fake.

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use crate::devices::virtio::ring::{DESC_F_NEXT, DESC_F_WRITE};
use crate::platform::dma::{DmaFault, DmaView, SoftIommu};

/// A descriptor as the device reads it: bus address, length, flags.
pub type Desc = (u64, u32, u16);

/// A queue as the device sees it after the driver set it up (the common configuration's
/// per-queue fields), and the device's own two indices.
#[derive(Clone, Copy, Debug, Default)]
pub struct DeviceQueue {
    /// The largest size the device offers (queue_size before the driver writes it).
    pub max: u16,
    /// The size the driver chose (0: not yet written).
    pub size: u16,
    /// Bus address of the descriptor table (queue_desc).
    pub desc: u64,
    /// Bus address of the available ring (queue_driver).
    pub avail: u64,
    /// Bus address of the used ring (queue_device).
    pub used: u64,
    /// queue_enable.
    pub enabled: bool,
    /// MSI-X vector (0xffff: none).
    pub vector: u16,
    /// The next available entry the device reads (Linux: `last_avail_idx` in QEMU).
    pub last_avail: u16,
    /// The device's used index (the next used entry it writes).
    pub used_idx: u16,
    /// The device polls the ring: its used ring's flags say VIRTQ_USED_F_NO_NOTIFY.
    pub no_notify: bool,
}

impl DeviceQueue {
    /// Whether the driver enabled the queue with a usable size.
    pub fn live(&self) -> bool {
        self.enabled && self.size != 0 && self.size.is_power_of_two()
    }

    /// Chains the driver made available that the device has not taken yet (0 when the
    /// available index cannot be read).
    pub fn available(&self, v: &DmaView<'_>) -> Result<u16, DmaFault> {
        let idx = (v.load_u32(self.avail, Acquire)? >> 16) as u16;
        Ok(idx.wrapping_sub(self.last_avail))
    }

    /// Takes the next available chain: its head descriptor, and its descriptors appended to
    /// `chain` (cleared first). `None` when the driver made nothing more available.
    ///
    /// A chain longer than the queue (a loop in the `next` fields) is refused as a fault at
    /// the descriptor table, as QEMU refuses it ("Looped descriptor").
    pub fn pop_into(
        &mut self,
        v: &DmaView<'_>,
        chain: &mut Vec<Desc>,
    ) -> Result<Option<u16>, DmaFault> {
        chain.clear();
        if self.available(v)? == 0 {
            return Ok(None);
        }
        let slot = self.avail + 4 + 2 * u64::from(self.last_avail & (self.size - 1));
        let w = v.load_u32(slot & !3, Relaxed)?;
        let head = (w >> (8 * (slot & 3))) as u16;
        self.last_avail = self.last_avail.wrapping_add(1);
        let mut id = head;
        loop {
            if id >= self.size || chain.len() >= usize::from(self.size) {
                return Err(DmaFault {
                    iova: self.desc + 16 * u64::from(id),
                    len: 16,
                    write: false,
                });
            }
            let at = self.desc + 16 * u64::from(id);
            let addr = v.load_u64(at, Relaxed)?;
            let len = v.load_u32(at + 8, Relaxed)?;
            let fl = v.load_u32(at + 12, Relaxed)?;
            chain.push((addr, len, fl as u16));
            if fl as u16 & DESC_F_NEXT == 0 {
                return Ok(Some(head));
            }
            id = (fl >> 16) as u16;
        }
    }

    /// [`pop_into`](Self::pop_into) with a chain of its own (the host tests' form).
    ///
    /// # Panics
    /// On a DMA fault (a test's device stops there).
    pub fn pop(&mut self, iommu: &SoftIommu) -> Option<(u16, Vec<Desc>)> {
        let mut chain = Vec::new();
        let head = self
            .pop_into(&iommu.view(), &mut chain)
            .expect("virtio device: DMA fault reading the available ring");
        head.map(|h| (h, chain))
    }

    /// Writes the used entry of chain `id` with `len` bytes written, not yet visible (see
    /// [`publish`](Self::publish)).
    pub fn push_into(&mut self, v: &DmaView<'_>, id: u32, len: u32) -> Result<(), DmaFault> {
        let at = self.used + 4 + 8 * u64::from(self.used_idx & (self.size - 1));
        v.store_u32(at, id, Relaxed)?;
        v.store_u32(at + 4, len, Relaxed)?;
        self.used_idx = self.used_idx.wrapping_add(1);
        Ok(())
    }

    /// Makes the used entries written visible: the used index (and the flags: 0, or
    /// VIRTQ_USED_F_NO_NOTIFY for a device that polls) with a release store, after the entries
    /// and the buffers they describe.
    pub fn publish(&self, v: &DmaView<'_>) -> Result<(), DmaFault> {
        let flags = u32::from(self.no_notify);
        v.store_u32(self.used, u32::from(self.used_idx) << 16 | flags, Release)
    }

    /// Returns chain `id` with `len` bytes written, and with `publish` makes it visible (the
    /// host tests' form).
    ///
    /// # Panics
    /// On a DMA fault.
    pub fn push(&mut self, iommu: &SoftIommu, id: u32, len: u32, publish: bool) {
        let v = iommu.view();
        self.push_into(&v, id, len)
            .expect("virtio device: DMA fault writing the used ring");
        if publish {
            self.publish(&v)
                .expect("virtio device: DMA fault writing the used index");
        }
    }
}

/// Whether descriptor flags say the device writes the buffer.
pub fn device_writes(flags: u16) -> bool {
    flags & DESC_F_WRITE != 0
}
