//! The seal on public traits that only this crate implements.
//!
//! [`Chip`](crate::devices::intel::config::Chip) and
//! [`IntelChip`](crate::devices::intel::port::IntelChip) (a chip's limits and its hooks into the
//! Intel port shell), [`Polled`](crate::devices::worker::Polled) (a model a device thread
//! serves) and [`PacketVlan`](crate::vlan::PacketVlan) (VLAN calls on a `Packet`) are public so
//! that their methods can be read and called, but they describe this crate's own types. Each
//! has [`Sealed`] as a supertrait, which nothing outside the crate can name, so nothing outside
//! can implement them, and a method added to them later breaks no one. The traits meant for
//! implementing outside (`Port`, `RxQueue`, `TxQueue`, `Bus`, `Mmio`, `DmaMapper`, `QmBus`,
//! `VlanHardware`, `SwVlanTx`) are not sealed.
//!
//! Outside the crate, a complete implementation is refused for want of `Sealed` alone (E0277:
//! the supertrait bound is not satisfied):
//!
//! ```compile_fail,E0277
//! struct MyModel;
//! impl vfio_nic::devices::worker::Polled for MyModel {
//!     fn poll(&self) -> bool { false }
//!     fn name(&self) -> &str { "mine" }
//!     fn busy(&self, _ns: u64) {}
//! }
//! ```

/// The supertrait of the sealed traits; each of the crate's types implements it beside its
/// implementation of the sealed trait.
pub trait Sealed {}
