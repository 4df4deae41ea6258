//! The VLAN state both Intel drivers keep in software and write back after every reset.
//!
//! Why a shadow: the 82576 clears its VFTA on reset while the 82599 keeps whatever was there, so
//! neither table can be trusted after a reset. The driver keeps the table (the VLAN layer's one
//! [`VlanFilter`] type, in the VFTA layout), the TPID, the extended-VLAN setting and the filter
//! switch here, clears the device's table at every init and writes the shadow back, so a reset
//! never changes what the port accepts. The chip-specific register writes are each chip's own
//! (`igb/vlan.rs`, `ixgbe/vlan.rs`).
//!
//! Policy (docs/vlan-rules.md): VID 4095 is reserved and refused ([`Vid::new`](crate::vlan::Vid::new),
//! the one VID check, which [`VlanFilter`] applies); VID 0 (priority tags) is always in the table, so priority-tagged frames pass the
//! filter, as Linux does.

use crate::error::Result;
use crate::platform::mmio::Mmio;
use crate::platform::regs::RegArray;
use crate::vlan::VlanFilter;

/// The VLAN configuration of an Intel port as software keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VlanShadow {
    /// The 4096-bit table (VID 0 always in, 4095 never).
    pub table: VlanFilter,
    /// Whether filtering is on (82576 RCTL.VFE, 82599 VLNCTRL.VFE).
    pub enabled: bool,
    /// The TPID (82576 VET bits 15:0; 82599 VLNCTRL.VET and DMATXCTL.VT).
    pub tpid: u16,
    /// Extended (double) VLAN, with the outer TPID.
    pub extended: Option<u16>,
    /// The chip's VFTA register array (the same offsets on both chips, from each chip's map).
    pub(crate) vfta: RegArray,
}

impl VlanShadow {
    /// A shadow holding VID 0 and `vids`, filtering `enabled` (a driver's configuration).
    pub(crate) fn from_config(
        vfta: RegArray,
        tpid: u16,
        vids: &[u16],
        enabled: bool,
    ) -> Result<Self> {
        Ok(VlanShadow {
            table: VlanFilter::with(vids.iter().copied())?,
            enabled,
            tpid,
            extended: None,
            vfta,
        })
    }

    /// The VFTA index holding `vid` and that word's value now.
    pub(crate) fn word_of(&self, vid: u16) -> (u32, u32) {
        let i = usize::from(vid / 32);
        (i as u32, self.table.words()[i])
    }

    /// Writes the table to VFTA after a reset: clear every word (the device's table is not
    /// trusted), then write the shadow's non-zero words. The caller writes the chip-specific
    /// TPID, extended and filter-enable settings afterwards.
    pub(crate) fn write_table<M: Mmio + ?Sized>(&self, m: &M) {
        for i in 0..self.vfta.count() {
            m.write(self.vfta.at(i), 0);
        }
        for (i, &w) in self.table.words().iter().enumerate() {
            if w != 0 {
                m.write(self.vfta.at(i as u32), w);
            }
        }
    }
}
