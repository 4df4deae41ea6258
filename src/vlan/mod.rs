//! VLAN tagging as a switchable mode: the device-independent part.
//!
//! Where should a VLAN tag be removed: by the NIC, by the driver in its receive burst, or by the
//! application when it reads the header anyway? The measurements in `anchors.md` disagree by
//! machine (dpaa2 +18 % without the software strip, OpenBSD ix +20 % without the hardware one),
//! so this crate makes the placement a runtime switch and makes every placement give the same
//! answers (`vlan-behaviour.md`):
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
//!   resets.
//! - [`VlanControl`] + [`VlanHardware`]: configuration and mode switches while traffic flows,
//!   and the trait drivers implement; [`VlanRx`]/[`VlanTx`]: the queue wrappers.
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
mod hw;
pub mod packet;
pub mod queue;
pub mod tag;

pub use control::{VlanCaps, VlanConfig, VlanControl, VlanHardware};
pub use filter::VlanFilter;
pub use frame::{find_tag, tx_wire_frame, tx_wire_frame_into, Lookup, VlanRxCtx};
pub use packet::PacketVlan;
pub(crate) use queue::insert_all;
pub use queue::{VlanRx, VlanStats, VlanTx};
pub use tag::{ReservedVid, RxMode, Tci, Tpid, TxMode, Vid};

use crate::devices::null::NullPort;
use crate::error::{Error, Result};

fn no_vlan_hardware(port: &NullPort, what: &str) -> Error {
    Error::NotSupported {
        device: crate::device::Port::info(port).name,
        what: what.into(),
        why: "the null device has no VLAN hardware; use the sw (or deferred) VLAN modes".into(),
    }
}

/// The null device has no VLAN hardware: it reports no capabilities, so the control handle
/// never calls the other methods, which refuse.
impl VlanHardware for NullPort {
    fn vlan_caps(&self) -> VlanCaps {
        VlanCaps::none(crate::device::Port::info(self).name)
    }
    fn set_rx_strip(&mut self, _queue: u16, _on: bool) -> Result<()> {
        Err(no_vlan_hardware(self, "VLAN tag stripping"))
    }
    fn set_vlan_filter(&mut self, _on: bool) -> Result<()> {
        Err(no_vlan_hardware(self, "VLAN filtering"))
    }
    fn add_vlan(&mut self, _vid: Vid) -> Result<()> {
        Err(no_vlan_hardware(self, "a VLAN filter table"))
    }
    fn remove_vlan(&mut self, _vid: Vid) -> Result<()> {
        Err(no_vlan_hardware(self, "a VLAN filter table"))
    }
    fn set_tpid(&mut self, _tpid: Tpid) -> Result<()> {
        Err(no_vlan_hardware(self, "setting the VLAN TPID"))
    }
    fn set_extended_vlan(&mut self, _on: bool, _outer_tpid: Tpid) -> Result<()> {
        Err(no_vlan_hardware(self, "extended (QinQ) VLAN mode"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_and_wrappers_can_cross_threads() {
        fn control<T: Clone + Send + Sync + 'static>() {}
        fn queue<T: Send>() {}
        control::<VlanControl>();
        queue::<VlanRx<crate::devices::null::NullRx>>();
        queue::<VlanTx<crate::devices::null::NullTx>>();
        queue::<VlanRxCtx>();
    }

    #[test]
    fn the_null_device_reports_no_vlan_hardware() {
        let mut port = NullPort::new(3, crate::devices::null::NullConfig::default()).unwrap();
        assert_eq!(port.vlan_caps(), VlanCaps::none("null:3"));
        let e = port.set_rx_strip(0, true).unwrap_err().to_string();
        assert!(
            e.contains("null:3") && e.contains("no VLAN hardware"),
            "{e}"
        );
    }
}
