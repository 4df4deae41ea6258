//! The device layer: one folder or file per device family, each owning all of its code (its
//! registers, init, link, counters and VLAN register work), on top of the device contract
//! ([`crate::device`]) and the VLAN layer's [`VlanHardware`](crate::vlan::VlanHardware) trait.
//!
//! - [`intel`]: what the 82576 and the 82599 share: descriptor rings, typed descriptor views,
//!   the generic port shell over a per-chip trait, queue control, counters, RSS, the VFTA shadow;
//! - [`igb`]: the Intel 82576; [`ixgbe`]: the Intel 82599;
//! - [`null`]: the null device (DPDK's `net_null`);
//! - [`sim`]: the software 82599, a register-level model the unchanged ixgbe driver runs on;
//! - [`virtio`]: virtio-net (virtio 1.x over PCI), the NIC of virtual machines;
//! - [`offload`]: transmit offload requests (checksums, TSO) checked once, and their software
//!   fallback for devices without them;
//! - [`ids`]: the PCI ids each driver takes; [`any`]: opening a port by name ([`AnyPort`]).

pub mod afpacket;
pub mod any;
pub mod ids;
pub mod igb;
pub mod intel;
pub mod ixgbe;
pub mod kinds;
// The rings in DMA memory under the loom model checker (`scripts/loom`; `--cfg loom` only).
#[cfg(all(test, loom))]
mod loom;
pub mod null;
pub mod offload;
pub mod pool_rule;
pub mod qm;
pub mod sim;
pub mod virtio;
pub mod worker;

pub use any::{open, AnyPort, AnyRx, AnyTx, PortConfig, PortName};
