//! vfio-nic: user-space drivers for PCI network cards through VFIO.
#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub mod bus;
pub mod capture;
pub mod device;
pub mod dma;
pub mod error;
pub mod forward;
pub mod ids;
pub mod igb;
pub mod intel;
pub mod ixgbe;
pub mod mmio;
pub mod null;
pub mod pci;
pub mod port;
pub mod regs;
pub mod respond;
pub mod ring;
pub mod selftest;
pub mod sim;
pub mod vfio;
pub mod vlan;
pub mod wire;

pub use error::{Error, Result};
