//! The queue-manager family ("qm"): a DPAA2-like device (NXP's QBMan and WRIOP) and its
//! driver. No descriptor ring, no tail register: frames are handed over as 32-byte frame
//! descriptors through software portals, receive buffers are owned by a hardware buffer pool,
//! and the device is configured through the management complex's command interface. The
//! driver offers the same [`Port`](crate::device::Port) / [`RxQueue`](crate::device::RxQueue)
//! / [`TxQueue`](crate::device::TxQueue) API as every other device.
//!
//! - [`layout`]: frame descriptors, dequeue results, the portal's memory and its commands;
//! - [`mc`]: management commands (status codes, the command portal client);
//! - [`portal`]: the driver's side of a software portal;
//! - [`QmPort`] (`port.rs`): bring-up through MC commands, the pool, link, counters, VLAN
//!   filter; `shared.rs`: what the port and its queues share, and the stop that takes every
//!   buffer back; [`QmRx`] (`rx.rs`): pull dequeue with one pull in flight; [`QmTx`]
//!   (`tx.rs`): batched enqueue; [`QmConfig`] (`config.rs`);
//! - [`model`]: the software device behind `qm:N`.
//!
//! # How the driver works (DPDK's dpaa2 PMD, reimplemented)
//! - Receive (`dpaa2_dev_prefetch_rx`'s pattern): a pull command asks the queue manager for up
//!   to 32 frames into a storage array in DMA memory; the burst reads the results the device
//!   wrote (each result's token says it is there), turns each frame descriptor into a
//!   [`Packet`](crate::platform::dma::Packet) without a copy, and issues the next pull before
//!   it returns, so one pull is always in flight. A rotating token (1..255) tells a result of
//!   this pull from one left over by an earlier one.
//! - Buffers: the receive queue's [`Pool`](crate::platform::dma::Pool) seeds the hardware pool
//!   and keeps it topped up: when fewer than the target minus 7 of its buffers are with the
//!   device, it releases more in commands of 7 (Linux's `DPAA2_ETH_REFILL_THRESH`). Which
//!   buffers the device holds is tracked by a
//!   [`LentBuffers`](crate::platform::dma::LentBuffers) table, so a frame descriptor naming a
//!   buffer the device was never given is refused, never turned into a second owner.
//! - Transmit: a burst writes an enqueue entry per packet and rings the EQCR_PI doorbell once.
//!   A packet's buffer goes with its frame descriptor to the pool it came from (its BPID), so
//!   nothing waits for a transmit completion: the device releases the buffer itself. A packet
//!   from a pool no qm port of this queue manager lends is copied into a buffer of the port's
//!   pool first (counted in `copied`).
//! - VLAN: a DPNI filters VIDs in hardware and neither strips nor inserts, so receive Hardware
//!   mode and transmit Hardware mode are refused by the VLAN layer (the capabilities say so),
//!   Software mode strips in the burst (what dpaa2 did before DPDK commit 87dd2307c0) and
//!   Deferred leaves the tag for the application. The filter table's shadow is written back
//!   after a reset.

mod config;
pub mod layout;
pub mod mc;
pub mod model;
mod port;
pub mod portal;
mod rx;
mod shared;
#[cfg(test)]
mod tests;
mod tx;

use std::sync::Arc;

pub use config::{QmConfig, QmStats};
pub use port::QmPort;
pub use rx::QmRx;
pub use tx::QmTx;

use crate::platform::bus::Bus;

/// A software portal's two regions: its cache-enabled memory and its cache-inhibited
/// registers.
pub type PortalRegions<M> = (Arc<M>, Arc<M>);

/// What the qm driver needs from its bus beyond [`Bus`]: the objects of its port and its
/// software portals. The model implements it ([`model::QmDevice`]); an fsl-mc bus adapter
/// would implement it from the DPRC's objects and regions.
pub trait QmBus: Bus + Clone {
    /// The DPNI (network interface) object id.
    fn dpni_id(&self) -> u32;
    /// The DPBP (buffer pool) object id the port receives into.
    fn dpbp_id(&self) -> u32;
    /// Software portal `p`: its cache-enabled memory and its cache-inhibited registers.
    fn portal(&self, p: usize) -> Option<PortalRegions<Self::Mmio>>;
}

impl QmBus for model::QmDevice {
    fn dpni_id(&self) -> u32 {
        self.object_id()
    }
    fn dpbp_id(&self) -> u32 {
        self.object_id()
    }
    fn portal(&self, p: usize) -> Option<PortalRegions<model::QmRegion>> {
        model::QmDevice::portal(self, p)
    }
}
