//! The 82599's VLAN controls (notes 4.2, 4.3; DPDK ixgbe_ethdev.c vlan_* functions).
//!
//! These are the hardware knobs; the device-independent VLAN modes (hardware, software,
//! deferred) are built on top of them elsewhere. What the 82599 offers:
//! - per-queue strip: RXDCTL(n).VME (VLNCTRL.VME is 82598-only); see `queue.rs` for how a
//!   running queue switches without mis-reporting a frame;
//! - filtering: VLNCTRL.VFE and the 4096-bit VFTA. The table survives a reset only in the
//!   software shadow shared with the igb driver ([`VlanShadow`]), which is written
//!   back at every init (the hardware table is not cleared by reset, so it is cleared first);
//! - TPID: VLNCTRL.VET for receive and DMATXCTL.VT for insertion, always changed together;
//! - extended (double) VLAN: CTRL_EXT.EXTENDED_VLAN, DMATXCTL.GDV and the outer TPID in
//!   EXVET.VET_EXT.
//!
//! Policy (docs/vlan-rules.md): VID 4095 is reserved and refused; VID 0 (priority tags) is
//! always in the table, so priority-tagged frames pass the filter, as Linux does.

use crate::devices::intel::vlan::VlanShadow;
use crate::error::{Error, Result};
use crate::platform::bus::Bus;
use crate::platform::mmio::Mmio;
use crate::platform::regs::ixgbe::{self as r};
use crate::vlan::VlanCaps;

use super::IxgbePort;

/// The TPID: VLNCTRL.VET for receive, then DMATXCTL.VT for insertion, which the extended
/// setting decides (in extended mode the transmitter inserts the outer TPID), so both are
/// written by `write_extended` in the order the old separate setters used: CTRL_EXT first, then
/// GDV and VT in one write.
pub(super) fn write_tpid<M: Mmio + ?Sized>(m: &M, v: &VlanShadow) {
    m.modify(
        r::VLNCTRL,
        r::vlnctrl::VET.mask(),
        r::vlnctrl::VET.val(v.tpid.into()),
    );
    write_extended(m, v.extended, v.tpid);
}

/// Extended (double) VLAN on or off. In extended mode the tag the transmitter inserts is the
/// new outermost one, so DMATXCTL.VT carries the outer TPID; outside it, the (inner) TPID. This
/// keeps hardware insertion byte-identical to software insertion (docs/vlan-rules.md: "inserting
/// pushes a new outermost tag"). DPDK leaves VT at the inner TPID in QinQ mode; which TPID the
/// 82599 puts on a tag inserted with GDV set is to be confirmed on a real card.
fn write_extended<M: Mmio + ?Sized>(m: &M, outer: Option<u16>, tpid: u16) {
    let ext = r::ctrl_ext::EXTENDED_VLAN.bit();
    let gdv = r::dmatxctl::GDV.bit();
    match outer {
        Some(outer) => {
            m.modify(
                r::EXVET,
                r::exvet::VET_EXT.mask(),
                r::exvet::VET_EXT.val(outer.into()),
            );
            m.modify(
                r::DMATXCTL,
                r::dmatxctl::VT.mask(),
                gdv | r::dmatxctl::VT.val(outer.into()),
            );
            m.modify(r::CTRL_EXT, 0, ext);
        }
        None => {
            m.modify(r::CTRL_EXT, ext, 0);
            m.modify(
                r::DMATXCTL,
                gdv | r::dmatxctl::VT.mask(),
                r::dmatxctl::VT.val(tpid.into()),
            );
        }
    }
}

impl<B: Bus> IxgbePort<B> {
    /// Asks receive queue `queue` to strip VLAN tags (RXDCTL.VME) or not.
    ///
    /// A queue still held by the port switches now. A queue handed out by `take_queues`
    /// switches during its next bursts, on its own thread, without mis-reporting a frame (see
    /// `queue.rs`); [`IxgbePort::rx_strip`] tells when it is done.
    pub fn set_rx_strip(&mut self, queue: u16, on: bool) -> Result<()> {
        let ctl = self.strip.get(usize::from(queue)).ok_or_else(|| {
            Error::InvalidConfig(format!(
                "{}: no receive queue {queue} (the port has {})",
                self.name, self.cfg.rx_queues
            ))
        })?;
        ctl.request(on);
        if let Some(q) = self.rx.get_mut(usize::from(queue)) {
            let mut held = Vec::new();
            let r = q.switch_now(&mut held);
            q.hold(held);
            r?;
        }
        Ok(())
    }

    /// Whether receive queue `queue` strips tags now (the setting applied, not the one asked
    /// for, while a switch is under way).
    pub fn rx_strip(&self, queue: u16) -> Option<bool> {
        self.strip.get(usize::from(queue)).map(|c| c.applied())
    }

    /// Whether a strip switch asked for on `queue` has not been carried out yet.
    pub fn rx_strip_pending(&self, queue: u16) -> bool {
        self.strip
            .get(usize::from(queue))
            .is_some_and(|c| c.applied() != c.wanted())
    }
}

/// The 82599 behind the device-independent VLAN layer: it has everything, a per-queue strip
/// bit, a 4096-entry filter, any TPID, extended (double) VLAN and insertion through context
/// descriptors.
///
/// `tx_insert_extended: false`: in extended mode the driver sets DMATXCTL.VT to the outer TPID,
/// so that an inserted tag is the new outermost one, as software insertion does (and as the
/// software 82599 models it); DPDK's ixgbe keeps VT at the inner TPID in QinQ mode, and the
/// datasheet's double-VLAN text (82599 datasheet section 7.4.5) can be read either way. Until a
/// card shows which TPID the 82599 puts on a tag it inserts with GDV set, hardware insertion in
/// extended mode is refused and software insertion (byte-exact by construction) serves it.
pub(super) fn caps<B: Bus>(port: &IxgbePort<B>) -> VlanCaps {
    VlanCaps {
        device: port.name.to_string(),
        rx_strip: true,
        tx_insert: true,
        filter: true,
        filter_best_effort: false,
        extended: true,
        tx_insert_extended: false,
        any_tpid: true,
        rx_queues: port.cfg.rx_queues,
        per_queue_strip: true,
        rx_pre_stripped: false,
    }
}
