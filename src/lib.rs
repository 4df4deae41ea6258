//! vfio-nic: user-space drivers for PCI network cards through VFIO.
//!
//! The crate is four layers, each a folder that imports only from those listed before it:
//!
//! | layer | where | what |
//! |---|---|---|
//! | platform | [`platform`] | VFIO, PCI config space, the [`Bus`](platform::bus::Bus) a driver talks to, MMIO, DMA memory and the packet pool, register maps |
//! | device contract | [`device`], [`error`], [`health`] | what every port offers whatever drives it ([`Port`](device::Port), [`RxQueue`](device::RxQueue), [`TxQueue`](device::TxQueue)), and what it saw happen to its device (link changes, removal, PCIe errors) |
//! | VLAN | [`vlan`] | tag values, frame functions, the modes and their switches, the [`VlanHardware`](vlan::VlanHardware) trait drivers implement; it knows no driver |
//! | devices | [`devices`] | the drivers (Intel rings and port shell, 82576, 82599, null, the software 82599) and opening a port by name |
//! | applications | [`app`] | wire views, responder, capture, forwarding loop, self-test |
//!
//! The `vfio-nic` tool (`src/bin/vfio-nic/`) sits on top. `docs/architecture.md` says why the
//! layers are cut where they are.
#![doc = include_str!("../README.md")]
#![warn(missing_docs)]
// `unsafe` is refused everywhere but in the three platform modules that must have it (allowed one
// by one in `platform/mod.rs`, so that list is the whole of the crate's unsafe surface): VFIO
// ioctls and BAR mappings, DMA memory and the pool's raw buffer accesses, and MMIO register
// access.
#![deny(unsafe_code)]

// Where this crate can run. Two things tie it to x86-64 today, and an arm64 port must change
// both: (1) the doorbell barrier: the rings put a release fence before every tail write, which
// on x86-64 (TSO, and uncached MMIO stores that are not reordered before earlier stores) also
// orders the descriptor stores for the device; on arm64 a release fence orders memory for other
// CPUs only, and a device write needs `dmb oshst` (Linux's `dma_wmb()`/`wmb()`) before the
// MMIO store; (2) byte order: descriptors and registers are read and written as native
// little-endian words, which arm64 Linux also is, but a big-endian target would need explicit
// `to_le`/`from_le` on every descriptor word. No other target's standard library can be
// installed on the machines that test this crate, so it refuses to build elsewhere rather than
// build untested.
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
compile_error!(
    "vfio-nic supports x86-64 Linux only for now: an arm64 port must change the doorbell barrier \
     (a release fence does not order descriptor stores for the device there) and check descriptor \
     byte order; see the comment at the top of src/lib.rs"
);

pub mod app;
pub mod device;
pub mod devices;
pub mod error;
pub mod health;
pub mod platform;
pub(crate) mod sealed;
pub mod vlan;

pub use error::{Error, Result};
