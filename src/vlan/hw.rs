//! The drivers' VLAN hardware behind [`VlanHardware`], so one [`VlanControl`](super::VlanControl)
//! drives any port.
//!
//! The 82599 has everything: a per-queue strip bit, a 4096-entry filter, any TPID, extended
//! (double) VLAN and insertion through context descriptors. [`AnyPort`] forwards to whichever
//! driver is behind it, so tools that open ports by name get the same control.

use super::control::{VlanCaps, VlanHardware};
use super::tag::{Tpid, Vid};
use crate::device::Port;
use crate::devices::any::AnyPort;
use crate::devices::ixgbe::IxgbePort;
use crate::error::Result;
use crate::platform::bus::Bus;

/// `tx_insert_extended: false`: in extended mode the driver sets DMATXCTL.VT to the outer TPID,
/// so that an inserted tag is the new outermost one, as software insertion does (and as the
/// software 82599 models it); DPDK's ixgbe keeps VT at the inner TPID in QinQ mode, and the
/// datasheet's double-VLAN text (82599 datasheet section 7.4.5) can be read either way. Until a
/// card shows which TPID the 82599 puts on a tag it inserts with GDV set, hardware insertion in
/// extended mode is refused and software insertion (byte-exact by construction) serves it.
impl<B: Bus> VlanHardware for IxgbePort<B> {
    fn vlan_caps(&self) -> VlanCaps {
        VlanCaps {
            device: self.info().name,
            rx_strip: true,
            tx_insert: true,
            filter: true,
            extended: true,
            tx_insert_extended: false,
            any_tpid: true,
            rx_queues: self.config().rx_queues,
            per_queue_strip: true,
        }
    }

    fn set_rx_strip(&mut self, queue: u16, on: bool) -> Result<()> {
        IxgbePort::set_rx_strip(self, queue, on)
    }

    fn set_vlan_filter(&mut self, on: bool) -> Result<()> {
        IxgbePort::set_vlan_filter(self, on)
    }

    fn add_vlan(&mut self, vid: Vid) -> Result<()> {
        IxgbePort::add_vlan(self, vid.get())
    }

    fn remove_vlan(&mut self, vid: Vid) -> Result<()> {
        IxgbePort::remove_vlan(self, vid.get())
    }

    fn set_tpid(&mut self, tpid: Tpid) -> Result<()> {
        IxgbePort::set_tpid(self, tpid.get())
    }

    fn set_extended_vlan(&mut self, on: bool, outer_tpid: Tpid) -> Result<()> {
        IxgbePort::set_extended_vlan(self, on, outer_tpid.get())
    }
}

impl AnyPort {
    /// The VLAN hardware of the driver behind the port.
    fn vlan_hw(&mut self) -> &mut dyn VlanHardware {
        match self {
            AnyPort::Null(p) => p,
            AnyPort::Igb(p) => &mut **p,
            AnyPort::Ixgbe(p) => &mut **p,
            AnyPort::IxgbeSim(p) => &mut **p,
        }
    }
}

impl VlanHardware for AnyPort {
    fn vlan_caps(&self) -> VlanCaps {
        match self {
            AnyPort::Null(p) => p.vlan_caps(),
            AnyPort::Igb(p) => p.vlan_caps(),
            AnyPort::Ixgbe(p) => p.vlan_caps(),
            AnyPort::IxgbeSim(p) => p.vlan_caps(),
        }
    }
    fn set_rx_strip(&mut self, queue: u16, on: bool) -> Result<()> {
        self.vlan_hw().set_rx_strip(queue, on)
    }
    fn set_vlan_filter(&mut self, on: bool) -> Result<()> {
        self.vlan_hw().set_vlan_filter(on)
    }
    fn add_vlan(&mut self, vid: Vid) -> Result<()> {
        self.vlan_hw().add_vlan(vid)
    }
    fn remove_vlan(&mut self, vid: Vid) -> Result<()> {
        self.vlan_hw().remove_vlan(vid)
    }
    fn set_tpid(&mut self, tpid: Tpid) -> Result<()> {
        self.vlan_hw().set_tpid(tpid)
    }
    fn set_extended_vlan(&mut self, on: bool, outer_tpid: Tpid) -> Result<()> {
        self.vlan_hw().set_extended_vlan(on, outer_tpid)
    }
}
