//! The VLAN filter table shadow both Intel drivers keep, with the TPID and filter switch.
//!
//! Why a shadow: the 82576 clears its VFTA on reset while the 82599 keeps whatever was there, so
//! neither table can be trusted after a reset. The driver keeps the table (and the TPID, the
//! extended-VLAN setting and the filter switch) here, clears the device's table at every init and
//! writes the shadow back, so a reset never changes what the port accepts.
//!
//! Policy (vlan-behaviour.md): VID 4095 is reserved and refused; VID 0 (priority tags) is
//! always in the table, so priority-tagged frames pass the filter, as Linux does.

use crate::error::{Error, Result};
use crate::platform::mmio::Mmio;
use crate::platform::regs::RegArray;

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
    /// Whether filtering is on (82576 RCTL.VFE, 82599 VLNCTRL.VFE).
    pub enabled: bool,
    /// The TPID (82576 VET bits 15:0; 82599 VLNCTRL.VET and DMATXCTL.VT).
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

    /// A table holding VID 0 and `vids`, filtering `enabled` (a driver's configuration).
    pub(crate) fn from_config(tpid: u16, vids: &[u16], enabled: bool) -> Result<Self> {
        let mut f = VlanFilter::new(tpid);
        for &vid in vids {
            f.insert(vid)?;
        }
        f.enabled = enabled;
        Ok(f)
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

    /// Writes the table to the chip's `vfta` array after a reset: clear every word (the device's
    /// table is not trusted), then write the shadow's non-zero words. The caller writes the
    /// chip-specific TPID, extended and filter-enable settings afterwards.
    pub(crate) fn write_table<M: Mmio + ?Sized>(&self, m: &M, vfta: RegArray) {
        for i in 0..vfta.count() {
            m.write(vfta.at(i), 0);
        }
        for (i, &w) in self.words.iter().enumerate() {
            if w != 0 {
                m.write(vfta.at(i as u32), w);
            }
        }
    }
}
