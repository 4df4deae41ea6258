//! The 82576's VLAN controls (notes 4.1, 4.3, 5.5; DPDK igb_ethdev.c, Linux igb_vlan_mode).
//!
//! These are the hardware knobs; the device-independent modes (hardware, software, deferred)
//! are built on them by [`crate::vlan`], through the Intel port shell's `VlanHardware` implementation, which asks [`Chip82576`](super::Chip82576) for what
//! differs (the functions below).
//! What the 82576 offers without virtualisation:
//! - strip: CTRL.VME, **port-wide** (the per-pool VMOLR.STRVLAN needs VMDq; DVMOLR is an i350
//!   register that QEMU does not model). A request for one queue of a multi-queue port is
//!   refused rather than silently applied to all. Because VP is set only on frames the device
//!   stripped, switching needs no queue stop: every descriptor reports its own frame truthfully
//!   (see `queue.rs`), which is why this is simpler than the 82599's per-queue switch;
//! - filtering: RCTL.VFE (CFIEN cleared) and the 4096-bit VFTA, restored from the shared shadow
//!   ([`VlanShadow`]) at every init because the reset clears the table;
//! - TPID: VET bits 15:0, used both to recognise tags and for inserted ones;
//! - extended (double) VLAN: CTRL_EXT.EXT_VLAN (b26) with the outer TPID in VET bits 31:16; the
//!   device then strips and filters the inner tag.
//!
//! Insertion is per packet (context descriptor + VLE, in [`crate::devices::intel::tx`]) and needs no switch.
//!
//! Policy (docs/vlan-rules.md): VID 4095 is reserved and refused; VID 0 is always in the table.

use crate::devices::intel::vlan::VlanShadow;
use crate::error::{Error, Result};
use crate::platform::bus::Bus;
use crate::platform::mmio::Mmio;
use crate::platform::regs::igb::{self as r};
use crate::vlan::VlanCaps;

use super::IgbPort;

/// The TPID (VET bits 15:0) and the extended setting: CTRL_EXT.EXT_VLAN with the outer TPID in
/// VET bits 31:16.
pub(super) fn write_tpid<M: Mmio + ?Sized>(m: &M, v: &VlanShadow) {
    m.modify(r::VET, r::vet::VET.mask(), r::vet::VET.val(v.tpid.into()));
    let ext = r::ctrl_ext::EXT_VLAN.bit();
    match v.extended {
        Some(outer) => {
            m.modify(
                r::VET,
                r::vet::VET_EXT.mask(),
                r::vet::VET_EXT.val(outer.into()),
            );
            m.modify(r::CTRL_EXT, 0, ext);
        }
        None => m.modify(r::CTRL_EXT, ext, 0),
    }
}

/// CTRL.VME: receive stripping for the whole port.
pub(super) fn write_strip<M: Mmio + ?Sized>(m: &M, on: bool) {
    let vme = r::ctrl::VME.bit();
    m.modify(r::CTRL, vme, if on { vme } else { 0 });
}

/// The 82576 behind the device-independent VLAN layer.
///
/// - One strip switch for the port, so `rx_queues` is 1: the layer's "every queue" loop
///   calls `set_rx_strip(0, _)` once, which switches the port (all queues).
/// - `extended: false`: in extended mode the 82576 (and QEMU's model of it) still inserts tags
///   with the inner TPID (VET bits 15:0), not the outer one the layer's contract asks for, so
///   QinQ runs in the software modes (the layer filters in software then) rather than wrongly.
pub(super) fn caps<B: Bus>(port: &IgbPort<B>) -> VlanCaps {
    VlanCaps {
        device: port.name.to_string(),
        rx_strip: true,
        tx_insert: true,
        filter: true,
        filter_best_effort: false,
        extended: false,
        tx_insert_extended: false,
        any_tpid: true,
        rx_queues: 1,
        per_queue_strip: false,
        rx_pre_stripped: false,
    }
}

impl<B: Bus> IgbPort<B> {
    /// VLAN tag stripping for the whole port (CTRL.VME). Takes effect for the next frame the
    /// device writes back; frames already received keep reporting how they were received.
    pub fn set_rx_strip_all(&mut self, on: bool) -> Result<()> {
        // Published for a restore after a PCIe error (`devices/intel/recovery.rs`).
        self.published(|p| {
            p.strip = on;
            write_strip(&*p.regs, on);
            p.alive()
        })
    }

    /// Stripping for receive queue `queue`, for callers written against the 82599's per-queue
    /// switch. The 82576 strips port-wide: on a one-queue port queue 0 is the port and this
    /// works; on a multi-queue port it is refused with [`Error::NotSupported`] (use
    /// [`IgbPort::set_rx_strip_all`]).
    pub fn set_rx_strip(&mut self, queue: u16, on: bool) -> Result<()> {
        if queue >= self.cfg.rx_queues {
            return Err(Error::InvalidConfig(format!(
                "{}: no receive queue {queue} (the port has {})",
                self.name, self.cfg.rx_queues
            )));
        }
        if self.cfg.rx_queues > 1 {
            return Err(Error::NotSupported {
                device: format!("{} ({})", self.name, self.model),
                what: "per-queue VLAN stripping".into(),
                why: "the 82576 strips VLAN tags for the whole port (CTRL.VME); use set_rx_strip_all, or the VLAN layer's hardware receive mode".into(),
            });
        }
        self.set_rx_strip_all(on)
    }

    /// Whether the port strips VLAN tags (CTRL.VME as last written).
    pub fn rx_strip(&self) -> bool {
        self.strip
    }
}
