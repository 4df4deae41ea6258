//! vfio-nic: user-space drivers for PCI network cards through VFIO.
#![doc = include_str!("../README.md")]
#![warn(missing_docs)]
// `unsafe` is refused everywhere but in the three modules that must have it (allowed one by one
// below, so this list is the whole of the crate's unsafe surface): VFIO ioctls and BAR mappings,
// DMA memory and the pool's raw buffer accesses, and MMIO register access.
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

pub mod bus;
pub mod capture;
pub mod device;
#[allow(unsafe_code)]
pub mod dma;
pub mod error;
pub mod forward;
pub mod ids;
pub mod igb;
pub mod intel;
pub mod ixgbe;
#[allow(unsafe_code)]
pub mod mmio;
pub mod null;
pub mod pci;
pub mod port;
pub mod regs;
pub mod respond;
pub mod ring;
pub mod selftest;
pub mod sim;
#[allow(unsafe_code)]
pub mod vfio;
pub mod vlan;
pub mod wire;

pub use error::{Error, Result};
