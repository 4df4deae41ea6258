//! VLAN tagging as a switchable mode: the device-independent part.
//!
//! Where should a VLAN tag be removed: by the NIC, by the driver in its receive burst, or by the
//! application when it reads the header anyway? The measurements in `docs/vlan-placement.md` disagree by
//! machine (dpaa2 +18 % without the software strip, OpenBSD ix +20 % without the hardware one),
//! so this crate makes the placement a runtime switch and makes every placement give the same
//! answers (`docs/vlan-rules.md`):
//!
//! - [`RxMode::Hardware`]: the device strips; the driver marks the packet
//!   [`Meta::VLAN_STRIPPED`](crate::platform::dma::Meta::VLAN_STRIPPED) with the TCI.
//! - [`RxMode::Software`]: [`VlanRx`] strips inside the burst (moving only the 12 MAC bytes).
//! - [`RxMode::Deferred`]: nothing in the burst; [`PacketVlan::take_vlan`] strips when the
//!   application asks, on the header line it is reading anyway.
//! - [`TxMode::Hardware`] / [`TxMode::Software`]: the driver's descriptors insert the tag, or
//!   [`VlanTx`] pushes it into the headroom; both give [`tx_wire_frame`]'s bytes.
//!
//! Pieces:
//! - [`tag`]: [`Tci`], [`Vid`] (4095 refused: 802.1Q reserves it), [`Tpid`], the modes.
//! - [`frame`]: pure, total functions on byte slices (find, strip, insert, wire view).
//! - [`PacketVlan`]: the per-packet calls on [`Packet`](crate::platform::dma::Packet).
//! - [`VlanFilter`]: the 4096-bit table (VFTA layout) kept in software and written back after
//!   resets; the one VID check is [`Vid::new`].
//! - [`VlanHardware`] + [`VlanCaps`] ([`hw`]): the trait each driver implements in its own
//!   folder; this layer knows no driver.
//! - [`VlanControl`]: configuration and mode switches while traffic flows;
//!   [`VlanRx`]/[`VlanTx`]: the queue wrappers; [`SwVlanTx`] ([`insert`]): software tag
//!   insertion on transmit, the extension of the core transmit queue.
//!
//! ```
//! use vfio_nic::device::{Port, RxQueue};
//! use vfio_nic::devices::null::{NullConfig, NullPort};
//! use vfio_nic::vlan::{PacketVlan, RxMode, VlanConfig, VlanControl};
//!
//! let mut frame = vec![0u8; 64];
//! frame[12..18].copy_from_slice(&[0x81, 0x00, 0xa0, 0x64, 0x08, 0x00]); // vid 100 pcp 5
//! let mut port = NullPort::new(0, NullConfig { copy: true, template: Some(frame), ..Default::default() })?;
//! let ctl = VlanControl::new(&mut port, &VlanConfig { rx_mode: RxMode::Deferred, ..Default::default() })?;
//! let (rx, _tx) = port.take_queues()?;
//! let mut rx = ctl.wrap_rx(rx.into_iter().next().unwrap());
//! let mut batch = Vec::new();
//! rx.rx_burst(&mut batch, 4)?;
//! let ctx = rx.ctx();
//! for p in &mut batch {
//!     assert_eq!(p.take_vlan(ctx).unwrap().to_string(), "vid 100 pcp 5 dei 0");
//!     assert_eq!(p.len(), 60);
//! }
//! // Another thread may switch while traffic flows; the null device has no VLAN hardware:
//! assert!(ctl.set_rx_mode(&mut port, RxMode::Hardware).is_err());
//! ctl.set_rx_mode(&mut port, RxMode::Software)?;
//! # Ok::<(), vfio_nic::Error>(())
//! ```

pub mod control;
pub mod filter;
pub mod frame;
pub mod hw;
pub mod insert;
pub mod packet;
pub mod queue;
pub mod tag;

pub use control::{VlanConfig, VlanControl};
pub use filter::VlanFilter;
pub use frame::{find_tag, tx_wire_frame, tx_wire_frame_into, Lookup, VlanRxCtx};
pub use hw::{VlanCaps, VlanHardware};
pub use insert::{SwVlanCounts, SwVlanTx};
pub use packet::PacketVlan;
pub use queue::{VlanRx, VlanStats, VlanTx};
pub use tag::{ReservedVid, RxMode, Tci, Tpid, TxMode, Vid};
