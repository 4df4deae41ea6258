//! The 82599's VLAN controls (notes 4.2, 4.3; DPDK ixgbe_ethdev.c vlan_* functions).
//!
//! These are the hardware knobs; the device-independent VLAN modes (hardware, software,
//! deferred) are built on top of them elsewhere. What the 82599 offers:
//! - per-queue strip: RXDCTL(n).VME (VLNCTRL.VME is 82598-only); see `queue.rs` for how a
//!   running queue switches without mis-reporting a frame;
//! - filtering: VLNCTRL.VFE and the 4096-bit VFTA. The table survives a reset only in the
//!   software shadow shared with the igb driver ([`crate::devices::intel::VlanFilter`]), which is written
//!   back at every init (the hardware table is not cleared by reset, so it is cleared first);
//! - TPID: VLNCTRL.VET for receive and DMATXCTL.VT for insertion, always changed together;
//! - extended (double) VLAN: CTRL_EXT.EXTENDED_VLAN, DMATXCTL.GDV and the outer TPID in
//!   EXVET.VET_EXT.
//!
//! Policy (vlan-behaviour.md): VID 4095 is reserved and refused; VID 0 (priority tags) is
//! always in the table, so priority-tagged frames pass the filter, as Linux does.

use crate::devices::intel::VlanFilter;
use crate::error::{Error, Result};
use crate::platform::bus::Bus;
use crate::platform::mmio::Mmio;
use crate::platform::regs::ixgbe::{self as r};

use super::IxgbePort;

/// Writes everything to the device after a reset (notes 1.4 step 10): the table (cleared
/// first, see [`VlanFilter::write_table`]), then TPID, extended VLAN and filter enable.
pub(crate) fn restore<M: Mmio + ?Sized>(f: &VlanFilter, m: &M) {
    f.write_table(m, r::VFTA);
    write_tpid(m, f.tpid);
    write_extended(m, f.extended, f.tpid);
    write_filter(m, f.enabled);
}

fn write_tpid<M: Mmio + ?Sized>(m: &M, tpid: u16) {
    m.modify(
        r::VLNCTRL,
        r::vlnctrl::VET.mask(),
        r::vlnctrl::VET.val(tpid.into()),
    );
    m.modify(
        r::DMATXCTL,
        r::dmatxctl::VT.mask(),
        r::dmatxctl::VT.val(tpid.into()),
    );
}

/// Extended (double) VLAN on or off. In extended mode the tag the transmitter inserts is the
/// new outermost one, so DMATXCTL.VT carries the outer TPID; outside it, the (inner) TPID. This
/// keeps hardware insertion byte-identical to software insertion (vlan-behaviour.md: "inserting
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

fn write_filter<M: Mmio + ?Sized>(m: &M, on: bool) {
    // CFIEN is always cleared: the CFI/DEI bit must not decide whether a frame passes.
    let vfe = r::vlnctrl::VFE.bit();
    m.modify(
        r::VLNCTRL,
        vfe | r::vlnctrl::CFIEN.bit(),
        if on { vfe } else { 0 },
    );
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

    /// VLAN filtering on or off (VLNCTRL.VFE; CFIEN cleared).
    pub fn set_vlan_filter(&mut self, on: bool) -> Result<()> {
        self.vlan.enabled = on;
        write_filter(&*self.regs, on);
        self.alive()
    }

    /// Lets frames tagged `vid` through the filter. VID 4095 is refused; VID 0 is always in.
    pub fn add_vlan(&mut self, vid: u16) -> Result<()> {
        let (i, w) = self.vlan.insert(vid)?;
        self.regs.write(r::VFTA.at(i), w);
        self.alive()
    }

    /// Stops letting frames tagged `vid` through the filter (VID 0 stays: priority tags always
    /// pass). VID 4095 is refused.
    pub fn remove_vlan(&mut self, vid: u16) -> Result<()> {
        let (i, w) = self.vlan.remove(vid)?;
        self.regs.write(r::VFTA.at(i), w);
        self.alive()
    }

    /// The VLAN filter as software keeps it.
    pub fn vlan_filter(&self) -> &VlanFilter {
        &self.vlan
    }

    /// The TPID recognised on receive and used for insertion (VLNCTRL.VET and DMATXCTL.VT,
    /// written together as DPDK does).
    pub fn set_tpid(&mut self, tpid: u16) -> Result<()> {
        self.vlan.tpid = tpid;
        write_tpid(&*self.regs, tpid);
        // In extended mode the transmitter keeps inserting the outer TPID.
        write_extended(&*self.regs, self.vlan.extended, tpid);
        self.alive()
    }

    /// Extended (double, QinQ) VLAN: with it on, frames carry an outer tag with `outer_tpid`
    /// (EXVET.VET_EXT), and filtering and stripping act on the inner tag (CTRL_EXT b26,
    /// DMATXCTL.GDV). `outer_tpid` is ignored when turning it off.
    pub fn set_extended_vlan(&mut self, on: bool, outer_tpid: u16) -> Result<()> {
        self.vlan.extended = on.then_some(outer_tpid);
        write_extended(&*self.regs, self.vlan.extended, self.vlan.tpid);
        self.alive()
    }
}
