//! The platform layer: what a driver stands on, independent of any device family.
//!
//! - [`vfio`]: owning a PCI device through VFIO (containers, groups, device fds, BAR mappings);
//! - [`pci`]: addresses, config space, sysfs facts (driver binding, IOMMU groups);
//! - [`bus`]: the [`Bus`](bus::Bus) trait a driver talks to (registers plus a DMA mapper), with
//!   [`PciBus`](bus::PciBus) for VFIO and the in-memory devices' own implementations;
//! - [`barrier`]: ordering against a device, Linux's `dma_wmb`/`dma_rmb`/`mb` by name, for
//!   x86-64 and arm64;
//! - [`mmio`]: register access as volatile words, and the doorbell with its `dma_wmb`;
//! - [`dma`]: device-visible memory, IOVAs, the software IOMMU and the packet buffer pool;
//! - [`packet`]: Linux packet sockets with TPACKET_V2 rings (the af_packet backend's kernel
//!   interface);
//! - [`regs`]: register maps generated from `regs/*.toml`;
//! - [`checksum`]: the Internet checksum, for device models and frame builders alike;
//! - [`memlock`]: the locked-memory limit VFIO's DMA mappings count against.
//!
//! `unsafe` is allowed in exactly five modules, here, and refused by the compiler everywhere
//! else in the crate (`#![deny(unsafe_code)]` at the crate root; `tests/unsafe_surface.rs`
//! checks the list). `barrier` is one of them only for its `asm!` (arm64's `dmb oshst` and
//! friends, which no Rust fence emits): a file of its own, so that the instructions every ring
//! depends on are read and reviewed in one place, apart from MMIO and DMA memory.

#[allow(unsafe_code)]
pub mod barrier;
pub mod bus;
pub mod checksum;
#[allow(unsafe_code)]
pub mod dma;
pub mod irq;
// The loom models' threads (the model-checking tests only: `--cfg loom`, `scripts/loom`).
#[cfg(all(test, loom))]
pub(crate) mod loom_threads;
pub mod memlock;
#[allow(unsafe_code)]
pub mod mmio;
#[allow(unsafe_code)]
pub mod packet;
pub mod pci;
pub mod regs;
#[allow(unsafe_code)]
pub mod vfio;
