//! What a virtio-net port and its queues share, dropped with the last of them: the transport,
//! the control queue, the counters the queues add to, and what dropped queues lent the device.
//! Its drop is the device's reset, so no DMA outlives the memory it could reach. Below both
//! `port.rs` and `queue.rs`, which each hold it.

use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

use super::ctrl::Ctrl;
use super::transport::Transport;
use crate::platform::irq::InterruptSet;
use crate::platform::mmio::Mmio;
use crate::platform::vfio::VfioDevice;

/// Counters the queues add to once per burst, for the port's `stats`.
#[derive(Debug, Default)]
pub struct Counters {
    pub(crate) rx_packets: AtomicU64,
    pub(crate) rx_bytes: AtomicU64,
    pub(crate) rx_dropped: AtomicU64,
    pub(crate) rx_no_buffer: AtomicU64,
    pub(crate) tx_packets: AtomicU64,
    pub(crate) tx_bytes: AtomicU64,
    pub(crate) tx_dropped: AtomicU64,
    pub(crate) tx_copied: AtomicU64,
}

/// What the port and its queues share: the transport, the control queue and the counters.
pub struct Shared<M: Mmio> {
    pub(crate) transport: Transport<M>,
    pub(crate) counters: Counters,
    pub(super) ctrl: Mutex<Option<Ctrl<M>>>,
    /// What dropped queues lent the device (rings, buffers), freed after the reset.
    pub(super) kept: Mutex<Vec<Box<dyn Send>>>,
    /// Interrupt mode's MSI-X routing (dropped after the reset: its teardown needs the
    /// device, declared below it).
    pub(super) irqs: Option<InterruptSet>,
    /// The VFIO device (bus mastering off after the reset); `None` in host tests.
    pub(super) pci: Option<VfioDevice>,
}

impl<M: Mmio> Shared<M> {
    /// Keeps what a dropped queue lent the device until the device is reset.
    pub(crate) fn keep_until_reset(&self, parts: Box<dyn Send>) {
        self.kept
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(parts);
    }
}

impl<M: Mmio> Drop for Shared<M> {
    /// Resets the device (no DMA after the reset reads back 0) and turns bus mastering off;
    /// the fields go after this: the control queue, what dropped queues left, the MSI-X
    /// routing, the VFIO device. Runs once, when the last of the port and its queues goes, on
    /// panic too.
    fn drop(&mut self) {
        tracing::debug!(port = %self.transport.name, "virtio: resetting the device");
        if let Err(e) = self.transport.reset() {
            tracing::error!(port = %self.transport.name, error = %e, "virtio: the device did not finish its reset; its memory is freed anyway");
        }
        if let Some(d) = &self.pci {
            if let Err(e) = d.disable_bus_master() {
                tracing::warn!(port = %self.transport.name, error = %e, "virtio: could not turn bus mastering off");
            }
        }
    }
}
