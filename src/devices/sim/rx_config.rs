//! What the receive engine reads of the registers, read once and kept until one of them may
//! have changed.
//!
//! A frame's way through the receive path consults some thirty registers (VLAN, size, filter,
//! RSS and ring registers). Read for every frame they were a fifth of the model's work, and in
//! threaded mode some sit on lines the driver's core writes, so the device core kept fetching
//! them. The engine therefore takes a snapshot ([`RxConfig`](super::engine::RxConfig)) and
//! keeps a cursor on the ring it fills (`rx_ring.rs`) until a register other than RDT or TDT is
//! written (`SimRegs::config_epoch`, checked for every frame; the same write ends every cached
//! verdict, `rx.rs`), from one run of the engine to the next: every register it reads is written
//! through the register file's write path, which moves the epoch, and a reset moves it too. So a
//! register write still takes effect from the next frame on.
//!
//! Still read for every frame, because a driver relies on them taking effect at once: the
//! receive enables (bus master, RXCTRL.RXEN, link: the driver stops DMA with them before it
//! unmaps), the queue's RXDCTL.ENABLE (a disabled queue gets no frame; a queue set up again is
//! read afresh, since setting it up writes its registers), and the fault injections (except for the traffic
//! source's copies, which take the whole path while a fault is injected, `source.rs`). The
//! filter tables (VFTA, RAL/RAH, MTA, RETA) are read when a frame is judged: a frame whose exact
//! bytes were judged before, with no register but a tail written since, gets that verdict again.

use std::sync::atomic::Ordering::Acquire;

use super::engine::{RssKey, RxConfig};
use super::regs::SimRegs;
use crate::platform::regs::ixgbe as r;

impl SimRegs {
    /// Reads the receive configuration registers, and with RSS on the key into `key`.
    pub(super) fn rx_config(&self, key: &mut RssKey) -> RxConfig {
        let epoch = self.config_epoch.load(Acquire);
        let ext = r::ctrl_ext::EXTENDED_VLAN.is_set(self.get(r::CTRL_EXT));
        let hl = self.get(r::HLREG0);
        let mrqc = self.get(r::MRQC);
        let rss = (r::mrqc::MRQE.get(mrqc) == 1).then(|| {
            for (i, k) in key.0.chunks_exact_mut(4).enumerate() {
                k.copy_from_slice(&self.get(r::RSSRK.at(i as u32)).to_le_bytes());
            }
            mrqc
        });
        let vlnctrl = self.get(r::VLNCTRL);
        RxConfig {
            epoch,
            vet: r::vlnctrl::VET.get(vlnctrl) as u16,
            outer: ext.then(|| r::exvet::VET_EXT.get(self.get(r::EXVET)) as u16),
            max: if r::hlreg0::JUMBOEN.is_set(hl) {
                r::maxfrs::MFS.get(self.get(r::MAXFRS)) as usize
            } else {
                1518
            },
            vfe: r::vlnctrl::VFE.is_set(vlnctrl),
            keep_fcs: !r::hlreg0::RXCRCSTRP.is_set(hl),
            pcsd: r::rxcsum::PCSD.is_set(self.get(r::RXCSUM)),
            rss,
        }
    }
}
