//! The seam between the VLAN layer and the drivers: what a device's VLAN hardware can do
//! ([`VlanCaps`]) and the calls that drive it ([`VlanHardware`]).
//!
//! The layer defines the trait and knows no driver; each driver implements it in its own folder
//! (the Intel port shell in `devices/intel/port.rs` with each chip's register writes in
//! `devices/igb/vlan.rs` and `devices/ixgbe/vlan.rs`; the null device, which has none, in
//! `devices/null.rs`; [`AnyPort`](crate::devices::AnyPort) forwards to whichever is behind it).

use super::tag::{Tpid, Vid};
use crate::error::Result;

/// What a device's VLAN hardware can do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VlanCaps {
    /// The device's name, for error messages ("0000:01:00.0", "null:0").
    pub device: String,
    /// Strips receive tags and reports the TCI per packet.
    pub rx_strip: bool,
    /// Inserts transmit tags.
    pub tx_insert: bool,
    /// Has a VID filter table.
    pub filter: bool,
    /// The filter table is best-effort: the device may still deliver frames of VIDs not in it
    /// (virtio-net: "the VLAN filtering is also best-effort", virtio 1.2, 5.1.6.5.3). The
    /// table is written to the device, which saves it work where it honours it, and the
    /// filter also runs in software, so the answer is the same on every device.
    pub filter_best_effort: bool,
    /// Supports extended (double, QinQ) VLAN mode with a separate outer TPID (receive side:
    /// strip and filter act on the inner tag).
    pub extended: bool,
    /// Inserts transmit tags correctly in extended mode too (the new outermost tag with the
    /// outer TPID). False where the device inserts with another TPID, or where that is not
    /// confirmed on a card: software insertion serves extended mode then.
    pub tx_insert_extended: bool,
    /// Accepts a TPID other than 0x8100.
    pub any_tpid: bool,
    /// Receive queues whose strip bit `set_rx_strip` controls (0..rx_queues).
    pub rx_queues: u16,
    /// Each receive queue has its own strip bit (82599 RXDCTL.VME), so queues can be in
    /// different receive modes; without it (82576 CTRL.VME) stripping is port-wide.
    pub per_queue_strip: bool,
    /// Tags are out of every frame before the driver sees them (af_packet: the kernel takes
    /// the outer tag into metadata), and the strip bit says whether the driver delivers the
    /// tag as metadata (on) or puts it back into the frame (off). Stripping costs nothing
    /// then, so the control turns the bit on in Software mode too (outside extended mode,
    /// where software strips the inner tag): the burst finds every tag already stripped.
    pub rx_pre_stripped: bool,
}

impl VlanCaps {
    /// No VLAN hardware at all.
    pub fn none(device: impl Into<String>) -> VlanCaps {
        VlanCaps {
            device: device.into(),
            ..VlanCaps::default()
        }
    }
}

/// The VLAN hardware of a device, implemented by drivers. The control handle calls these only
/// for what [`vlan_caps`](VlanHardware::vlan_caps) reports, and only on the configuration path.
///
/// Contract for receive: with the strip bit on, every packet whose tag the device removed must
/// carry [`Meta::VLAN_STRIPPED`](crate::platform::dma::Meta::VLAN_STRIPPED) and the TCI; no packet that
/// still holds its tag may carry it. A driver may also set
/// [`Meta::VLAN_HANDLED`](crate::platform::dma::Meta::VLAN_HANDLED) when its descriptor proves the frame
/// had no tag (82599: VP clear, non-extended mode), which spares `take_vlan` a frame read.
/// Contract for transmit: a packet with [`Meta::TX_VLAN`](crate::platform::dma::Meta::TX_VLAN) goes out
/// byte-identical to [`tx_wire_frame`](super::tx_wire_frame) with the TPID
/// [`VlanRxCtx::push_tpid`](super::VlanRxCtx::push_tpid) of the current setting.
pub trait VlanHardware {
    /// What the device can do.
    fn vlan_caps(&self) -> VlanCaps;
    /// Turns tag stripping on or off for one receive queue.
    fn set_rx_strip(&mut self, queue: u16, on: bool) -> Result<()>;
    /// Turns the VID filter on or off (the table is kept with `add_vlan`/`remove_vlan`).
    fn set_vlan_filter(&mut self, on: bool) -> Result<()>;
    /// Adds a VID to the device's filter table.
    fn add_vlan(&mut self, vid: Vid) -> Result<()>;
    /// Removes a VID from the device's filter table.
    fn remove_vlan(&mut self, vid: Vid) -> Result<()>;
    /// Sets the TPID that marks the tag that counts (and, outside extended mode, the inserted one).
    fn set_tpid(&mut self, tpid: Tpid) -> Result<()>;
    /// Turns extended (QinQ) mode on or off; `outer_tpid` marks the outer tag (and is the TPID of
    /// inserted tags in extended mode).
    fn set_extended_vlan(&mut self, on: bool, outer_tpid: Tpid) -> Result<()>;
}
