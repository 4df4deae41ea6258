//! The 82599's VLAN controls (notes 4.2, 4.3; DPDK ixgbe_ethdev.c vlan_* functions).
//!
//! These are the hardware knobs; the device-independent VLAN modes (hardware, software,
//! deferred) are built on top of them elsewhere. What the 82599 offers:
//! - per-queue strip: RXDCTL(n).VME (VLNCTRL.VME is 82598-only); see `queue.rs` for how a
//!   running queue switches without mis-reporting a frame;
//! - filtering: VLNCTRL.VFE and the 4096-bit VFTA. The table survives a reset only in our
//!   software shadow, which is written back at every init (the hardware table is not cleared by
//!   reset, so it is cleared first);
//! - TPID: VLNCTRL.VET for receive and DMATXCTL.VT for insertion, always changed together;
//! - extended (double) VLAN: CTRL_EXT.EXTENDED_VLAN, DMATXCTL.GDV and the outer TPID in
//!   EXVET.VET_EXT.
//!
//! Policy (vlan-behaviour.md): VID 4095 is reserved and refused; VID 0 (priority tags) is
//! always in the table, so priority-tagged frames pass the filter, as Linux does.

use crate::bus::Bus;
use crate::error::{Error, Result};
use crate::mmio::Mmio;
use crate::regs::ixgbe::{self as r};

use super::IxgbePort;

/// Refuses VIDs the filter cannot hold: 4095 is reserved by 802.1Q, above is not a VID.
pub(crate) fn check_vid(vid: u16) -> Result<()> {
    if vid == 4095 {
        return Err(Error::ReservedVlanId {
            what: "in the VLAN filter",
        });
    }
    if vid > 4095 {
        return Err(Error::InvalidConfig(format!(
            "{vid} is not a VLAN id: VIDs are 12 bits; use 0..=4094"
        )));
    }
    Ok(())
}

/// The VLAN filter table as software keeps it, with the TPID and filter switch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VlanFilter {
    words: [u32; 128],
    /// Whether filtering is on (VLNCTRL.VFE).
    pub enabled: bool,
    /// The TPID (VLNCTRL.VET, DMATXCTL.VT).
    pub tpid: u16,
    /// Extended (double) VLAN, with the outer TPID.
    pub extended: Option<u16>,
}

impl VlanFilter {
    /// An empty table (but for VID 0), filtering off.
    pub fn new(tpid: u16) -> Self {
        let mut words = [0u32; 128];
        words[0] = 1;
        VlanFilter {
            words,
            enabled: false,
            tpid,
            extended: None,
        }
    }

    /// Whether `vid` passes the filter.
    pub fn contains(&self, vid: u16) -> bool {
        vid < 4096 && self.words[usize::from(vid >> 5)] & (1 << (vid & 31)) != 0
    }

    /// Adds `vid`; returns the VFTA index and new word.
    pub(crate) fn insert(&mut self, vid: u16) -> Result<(u32, u32)> {
        check_vid(vid)?;
        let i = usize::from(vid >> 5);
        self.words[i] |= 1 << (vid & 31);
        Ok((i as u32, self.words[i]))
    }

    /// Removes `vid` (VID 0 stays); returns the VFTA index and new word.
    pub(crate) fn remove(&mut self, vid: u16) -> Result<(u32, u32)> {
        check_vid(vid)?;
        let i = usize::from(vid >> 5);
        if vid != 0 {
            self.words[i] &= !(1 << (vid & 31));
        }
        Ok((i as u32, self.words[i]))
    }

    /// VIDs in the table, ascending.
    pub fn vids(&self) -> Vec<u16> {
        (0..4095).filter(|&v| self.contains(v)).collect()
    }

    /// Writes everything to the device after a reset (notes 1.4 step 10): clear the VFTA, write
    /// the shadow, then TPID, extended VLAN and filter enable.
    pub(crate) fn restore<M: Mmio + ?Sized>(&self, m: &M) {
        for i in 0..r::VFTA.count() {
            m.write(r::VFTA.at(i), 0);
        }
        for (i, &w) in self.words.iter().enumerate() {
            if w != 0 {
                m.write(r::VFTA.at(i as u32), w);
            }
        }
        write_tpid(m, self.tpid);
        write_extended(m, self.extended);
        write_filter(m, self.enabled);
    }
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

fn write_extended<M: Mmio + ?Sized>(m: &M, outer: Option<u16>) {
    let ext = r::ctrl_ext::EXTENDED_VLAN.bit();
    let gdv = r::dmatxctl::GDV.bit();
    match outer {
        Some(tpid) => {
            m.modify(
                r::EXVET,
                r::exvet::VET_EXT.mask(),
                r::exvet::VET_EXT.val(tpid.into()),
            );
            m.modify(r::DMATXCTL, 0, gdv);
            m.modify(r::CTRL_EXT, 0, ext);
        }
        None => {
            m.modify(r::CTRL_EXT, ext, 0);
            m.modify(r::DMATXCTL, gdv, 0);
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
        self.alive()
    }

    /// Extended (double, QinQ) VLAN: with it on, frames carry an outer tag with `outer_tpid`
    /// (EXVET.VET_EXT), and filtering and stripping act on the inner tag (CTRL_EXT b26,
    /// DMATXCTL.GDV). `outer_tpid` is ignored when turning it off.
    pub fn set_extended_vlan(&mut self, on: bool, outer_tpid: u16) -> Result<()> {
        self.vlan.extended = on.then_some(outer_tpid);
        write_extended(&*self.regs, self.vlan.extended);
        self.alive()
    }
}
