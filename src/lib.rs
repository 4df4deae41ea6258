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
// `unsafe` is refused everywhere but in the five platform modules that must have it (allowed one
// by one in `platform/mod.rs`, so that list is the whole of the crate's unsafe surface): VFIO
// ioctls and BAR mappings, DMA memory and the pool's raw buffer accesses, MMIO register access,
// packet sockets' mapped rings, and the device barriers' `asm!`.
#![deny(unsafe_code)]

// Where this crate runs: Linux (VFIO is Linux's), on x86-64 and arm64 (the architectures whose
// device barriers `platform::barrier` knows, and which refuses the others), little-endian.
// Descriptors, virtqueues and registers are little-endian by the datasheets and the virtio
// spec, and the rings read and write them as native words (one load or store per word, no
// swap: what Linux's `le32_to_cpu` is on a little-endian CPU); arm64 Linux as distributions ship
// it is little-endian. A big-endian target (aarch64_be) would need a conversion on every
// descriptor and register word, tested nowhere, so it is refused rather than built.
#[cfg(not(target_os = "linux"))]
compile_error!("vfio-nic drives devices through Linux's VFIO: it builds for Linux targets only");
#[cfg(not(target_endian = "little"))]
compile_error!(
    "vfio-nic reads descriptors and registers as native little-endian words: a big-endian \
     target would need explicit byte swaps on every one; see the comment in src/lib.rs"
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
