//! The port's VLAN configuration, what the device can do, and the handle that changes both while
//! traffic flows.
//!
//! # One word per burst
//! Everything a burst needs (receive mode, transmit mode, TPIDs, extended mode, whether to filter
//! in software) is packed into one `AtomicU64`. A queue wrapper loads it once per burst with
//! `Acquire` and works from that snapshot: no per-packet atomics, no lock, and never a torn view
//! (a TPID from before a change with an extended flag from after it). The filter table is 128
//! `AtomicU32` read with one relaxed load per tagged frame, and only when filtering in software.
//!
//! # Why a mode switch under traffic is safe
//! The guarantee does not rest on timing. It rests on three per-packet facts:
//! 1. the driver sets [`Meta::VLAN_STRIPPED`](crate::platform::dma::Meta::VLAN_STRIPPED) exactly when the
//!    device removed the tag (it knows from the descriptor and its queue's strip bit);
//! 2. software strips a packet only when neither `VLAN_STRIPPED` nor `VLAN_HANDLED` is set, and
//!    sets one of them when it does (or finds nothing to strip);
//! 3. `VLAN_HANDLED` is set only by code that read the frame (or by a driver whose descriptor
//!    says "no tag"), never assumed from the mode.
//!
//! So a packet is stripped at most once (by the device, or by the first software path that sees
//! it unflagged) and never reported untagged while it holds a tag. A burst in Software mode that
//! meets packets the device stripped before a Hardware -> Software switch skips them; a packet the
//! device did not strip after a Software -> Hardware switch reaches the application unflagged,
//! and [`take_vlan`](super::PacketVlan::take_vlan) strips it. In Hardware mode the wrapper does
//! not even loop over the burst: it cannot know, without reading the frame, that an unstripped
//! packet is untagged (it may have been received just before the device's strip took effect),
//! so it leaves the packet unflagged rather than mark it wrongly. The cost is `take_vlan` reading
//! 2 bytes at offset 12 of untagged frames, on the header line the application is reading anyway.
//!
//! The control handle still orders the device writes so that the window of mixed handling is
//! short: entering Hardware mode turns the strip on in every queue first, then publishes the mode;
//! leaving it publishes the new mode first, then turns the strip off in *every* queue (the
//! FreeBSD bug in docs/vlan-rules.md was a per-queue strip bit left on).
//!
//! # Where the filter runs
//! In the device whenever the device can filter on the configured TPID and extended setting,
//! whatever the receive mode: a frame the device drops costs no PCIe transfer, no descriptor and
//! no buffer, and the filter's verdict does not depend on who strips the tag. Otherwise (the null
//! device; a device without a filter; extended mode or a TPID it cannot filter on) the receive
//! wrapper filters in the burst. Honest cost in Deferred mode: the software filter must read each
//! frame's tag to drop non-members, so the burst touches the first payload line of every packet,
//! which is the very cost Deferred mode exists to avoid; only a device filter keeps Deferred at
//! zero per-packet work in the burst. The frame is still left tagged; `take_vlan` strips it later.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use super::filter::{AtomicFilter, VlanFilter};
use super::frame::VlanRxCtx;
use super::hw::{VlanCaps, VlanHardware};
use super::tag::{RxMode, Tpid, TxMode, Vid};
use crate::error::{Error, Result};

/// A port's VLAN configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VlanConfig {
    /// Where receive tags are removed.
    pub rx_mode: RxMode,
    /// Where transmit tags are inserted.
    pub tx_mode: TxMode,
    /// The TPID of the tag that counts (default 0x8100).
    pub tpid: Tpid,
    /// Extended (QinQ) mode: frames carry an outer tag with `outer_tpid`, and the inner tag is
    /// the one reported, filtered and stripped.
    pub extended: bool,
    /// The outer TPID in extended mode (default 0x88a8).
    pub outer_tpid: Tpid,
    /// Drop tagged frames whose VID is not in `table` (untagged and VID 0 always pass).
    pub filter: bool,
    /// The filter table, kept (and written to the device) even while the filter is off.
    pub table: VlanFilter,
    /// Receive modes of single queues that differ from `rx_mode` (queue, mode), for devices
    /// that strip per queue or for software modes; see [`VlanControl::set_queue_rx_mode`].
    pub queue_rx_modes: Vec<(u16, RxMode)>,
}

impl Default for VlanConfig {
    fn default() -> Self {
        VlanConfig {
            rx_mode: RxMode::Software,
            tx_mode: TxMode::Software,
            tpid: Tpid::C_TAG,
            extended: false,
            outer_tpid: Tpid::S_TAG,
            filter: false,
            table: VlanFilter::new(),
            queue_rx_modes: Vec::new(),
        }
    }
}

/// Queues that can have a receive mode of their own (a queue wrapper beyond it follows the port).
pub const MAX_QUEUE_MODES: u16 = 64;

impl VlanConfig {
    /// The receive mode of queue `q`: its own, or the port's.
    pub fn rx_mode_of(&self, q: u16) -> RxMode {
        self.queue_rx_modes
            .iter()
            .find(|(qq, _)| *qq == q)
            .map_or(self.rx_mode, |&(_, m)| m)
    }

    /// The receive context this configuration gives.
    pub fn rx_ctx(&self) -> VlanRxCtx {
        if self.extended {
            VlanRxCtx::extended(self.tpid, self.outer_tpid)
        } else {
            VlanRxCtx::new(self.tpid)
        }
    }
}

// Layout of the state word.
const TPID_SHIFT: u32 = 0;
const OUTER_SHIFT: u32 = 16;
const RX_MODE_SHIFT: u32 = 32;
const TX_HW: u64 = 1 << 34;
const EXTENDED: u64 = 1 << 35;
const SW_FILTER: u64 = 1 << 36;

/// See [`VlanControl::rx_key`]. The state word uses bits 36:0 only, so no key is all ones
/// ([`RxKey::NONE`], what a wrapper starts from).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RxKey(u64);

const _: () = assert!(SW_FILTER < 1 << 56);

impl RxKey {
    /// Matches no state.
    pub(crate) const NONE: RxKey = RxKey(u64::MAX);

    /// The port-wide state.
    pub(crate) fn snapshot(self) -> Snapshot {
        Snapshot(self.0 & ((1 << 56) - 1))
    }

    /// The receive mode in force for the queue: its own, else the port's.
    pub(crate) fn rx_mode(self) -> RxMode {
        match (self.0 >> 56) as u8 {
            0 => self.snapshot().rx_mode(),
            v => RxMode::from_bits(u64::from(v - 1)),
        }
    }
}

/// A decoded snapshot of the state word: what one burst works with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Snapshot(u64);

impl Snapshot {
    #[inline(always)]
    pub(crate) fn rx_mode(self) -> RxMode {
        RxMode::from_bits(self.0 >> RX_MODE_SHIFT)
    }
    #[inline(always)]
    pub(crate) fn tx_mode(self) -> TxMode {
        if self.0 & TX_HW != 0 {
            TxMode::Hardware
        } else {
            TxMode::Software
        }
    }
    #[inline(always)]
    pub(crate) fn sw_filter(self) -> bool {
        self.0 & SW_FILTER != 0
    }
    #[inline(always)]
    pub(crate) fn rx_ctx(self) -> VlanRxCtx {
        let tpid = Tpid::from_raw_unchecked((self.0 >> TPID_SHIFT) as u16);
        if self.0 & EXTENDED != 0 {
            VlanRxCtx::extended(
                tpid,
                Tpid::from_raw_unchecked((self.0 >> OUTER_SHIFT) as u16),
            )
        } else {
            VlanRxCtx::new(tpid)
        }
    }
}

pub(crate) struct Shared {
    pub(crate) state: AtomicU64,
    /// Per-queue receive modes: 0 follows the port, else `RxMode::to_bits() + 1`.
    pub(crate) queue_modes: Box<[AtomicU8]>,
    pub(crate) filter: AtomicFilter,
    caps: VlanCaps,
    /// The configuration as last applied; the lock serializes configuration changes only.
    config: Mutex<VlanConfig>,
}

/// The handle through which a port's VLAN modes and settings change while traffic flows.
/// `Clone + Send + Sync`: give a clone to every thread that may reconfigure. Methods that touch
/// the device take it as `&mut dyn VlanHardware` (the port, kept by the controlling thread after
/// its queues went to the workers).
#[derive(Clone)]
pub struct VlanControl {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for VlanControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VlanControl")
            .field("caps", &self.shared.caps)
            .field("config", &self.config())
            .finish()
    }
}

fn hw_can_parse(caps: &VlanCaps, c: &VlanConfig) -> bool {
    (!c.extended || caps.extended) && (caps.any_tpid || (c.tpid == Tpid::C_TAG && !c.extended))
}

fn hw_filter(caps: &VlanCaps, c: &VlanConfig) -> bool {
    c.filter && caps.filter && hw_can_parse(caps, c)
}

fn word(caps: &VlanCaps, c: &VlanConfig) -> u64 {
    let mut w = (c.tpid.get() as u64) << TPID_SHIFT
        | (c.outer_tpid.get() as u64) << OUTER_SHIFT
        | c.rx_mode.to_bits() << RX_MODE_SHIFT;
    if c.tx_mode == TxMode::Hardware {
        w |= TX_HW;
    }
    if c.extended {
        w |= EXTENDED;
    }
    if c.filter && (!hw_filter(caps, c) || caps.filter_best_effort) {
        w |= SW_FILTER;
    }
    w
}

/// Refuses what the device cannot do, naming the device and the mode.
fn check(caps: &VlanCaps, c: &VlanConfig) -> Result<()> {
    let dev = || caps.device.clone();
    for &(q, m) in &c.queue_rx_modes {
        if q >= MAX_QUEUE_MODES {
            return Err(Error::InvalidConfig(format!(
                "{}: queue {q}: a receive mode of its own is possible for queues below {MAX_QUEUE_MODES}",
                caps.device
            )));
        }
        let hw = |m: RxMode| m == RxMode::Hardware;
        if hw(m) != hw(c.rx_mode) && !caps.per_queue_strip {
            return Err(Error::NotSupported {
                device: dev(),
                what: format!("VLAN receive mode {m} on queue {q} alone (port mode {})", c.rx_mode),
                why: "the device strips tags port-wide, so only the port's mode can differ between hw and sw/deferred; per-queue choices between sw and deferred are fine".into(),
            });
        }
        if hw(m) && (!caps.rx_strip || q >= caps.rx_queues) {
            return Err(Error::NotSupported {
                device: dev(),
                what: format!("VLAN receive mode hw on queue {q}"),
                why: format!(
                    "the device strips on {} receive queue(s){}",
                    caps.rx_queues,
                    if caps.rx_strip {
                        ""
                    } else {
                        " (it cannot strip at all)"
                    }
                ),
            });
        }
    }
    if c.rx_mode == RxMode::Hardware && !caps.rx_strip {
        return Err(Error::NotSupported {
            device: dev(),
            what: "VLAN receive mode hw (tag stripping by the device)".into(),
            why: "the device cannot strip VLAN tags; use receive mode sw or deferred".into(),
        });
    }
    if c.tx_mode == TxMode::Hardware && !caps.tx_insert {
        return Err(Error::NotSupported {
            device: dev(),
            what: "VLAN transmit mode hw (tag insertion by the device)".into(),
            why: "the device cannot insert VLAN tags; use transmit mode sw".into(),
        });
    }
    if c.tx_mode == TxMode::Hardware && c.extended && caps.extended && !caps.tx_insert_extended {
        return Err(Error::NotSupported {
            device: dev(),
            what: "VLAN transmit mode hw in extended (QinQ) mode".into(),
            why:
                "which TPID the device puts on a tag it inserts in extended mode is not confirmed \
                  (see the driver's VlanCaps); use transmit mode sw, which pushes the outer tag \
                  with the outer TPID"
                    .into(),
        });
    }
    let hw_tagging = c.rx_mode == RxMode::Hardware
        || c.tx_mode == TxMode::Hardware
        || c.queue_rx_modes.iter().any(|&(_, m)| m == RxMode::Hardware);
    if hw_tagging && !hw_can_parse(caps, c) {
        let what = if c.extended && !caps.extended {
            "extended (QinQ) VLAN mode".to_string()
        } else {
            format!("VLAN TPID {} (outer {})", c.tpid, c.outer_tpid)
        };
        return Err(Error::NotSupported {
            device: dev(),
            what: format!(
                "{what} with hardware tagging (receive mode {}, transmit mode {})",
                c.rx_mode, c.tx_mode
            ),
            why: "the device's VLAN offloads cannot be set up for it; use sw (or deferred) modes"
                .into(),
        });
    }
    Ok(())
}

/// Sets the strip bit of every queue `which` selects to `on`; every one of them, even after a
/// failure (a strip bit left on is the FreeBSD bug).
fn strip_where(
    hw: &mut dyn VlanHardware,
    caps: &VlanCaps,
    on: bool,
    which: impl Fn(u16) -> bool,
) -> Result<()> {
    let mut first_err = None;
    for q in (0..caps.rx_queues).filter(|&q| which(q)) {
        if let Err(e) = hw.set_rx_strip(q, on) {
            tracing::warn!(device = %caps.device, queue = q, on, error = %e, "setting VLAN strip failed");
            first_err.get_or_insert(e);
        }
    }
    first_err.map_or(Ok(()), Err)
}

/// Brings the device from `old` (`None`: unknown, e.g. after a reset) to `new`, publishing the
/// software state at the safe point.
#[allow(clippy::too_many_arguments)]
fn apply(
    hw: &mut dyn VlanHardware,
    shared_state: &AtomicU64,
    queue_modes: &[AtomicU8],
    filter: &AtomicFilter,
    caps: &VlanCaps,
    old: Option<&VlanConfig>,
    new: &VlanConfig,
    published: &mut bool,
) -> Result<()> {
    check(caps, new)?;
    // 1. What the device needs to recognise tags.
    if caps.any_tpid && old.is_none_or(|o| o.tpid != new.tpid) {
        hw.set_tpid(new.tpid)?;
    }
    if caps.extended
        && old.is_none_or(|o| (o.extended, o.outer_tpid) != (new.extended, new.outer_tpid))
    {
        hw.set_extended_vlan(new.extended, new.outer_tpid)?;
    }
    // 2. The device's table mirrors the shadow (additions now, removals after publishing).
    if caps.filter {
        for v in new.table.iter() {
            if old.is_none_or(|o| !o.table.contains(v)) {
                hw.add_vlan(Vid::new(v)?)?;
            }
        }
    }
    let hw_f_new = hw_filter(caps, new);
    let hw_f_old = old.is_none_or(|o| hw_filter(caps, o));
    if caps.filter && hw_f_new && (old.is_none() || !hw_f_old) {
        hw.set_vlan_filter(true)?;
    }
    // 3. Strip on, queue by queue, before publishing Hardware mode for it.
    // Where the device strips: Hardware mode, and Software mode on a device whose frames
    // arrive stripped anyway (VlanCaps::rx_pre_stripped), outside extended mode.
    let hw_rx = |c: &VlanConfig, q: u16| match c.rx_mode_of(q) {
        RxMode::Hardware => true,
        RxMode::Software => caps.rx_pre_stripped && !c.extended,
        RxMode::Deferred => false,
    };
    let turns = |q: u16, on: bool| hw_rx(new, q) == on && old.is_none_or(|o| hw_rx(o, q) != on);
    if caps.rx_strip {
        if let Err(e) = strip_where(hw, caps, true, |q| turns(q, true)) {
            let _ = strip_where(hw, caps, false, |q| {
                turns(q, true) && !old.is_some_and(|o| hw_rx(o, q))
            });
            return Err(e);
        }
    }
    // 4. Publish: the next burst of every queue uses the new settings.
    filter.store(&new.table);
    for (q, slot) in queue_modes.iter().enumerate() {
        let own = new
            .queue_rx_modes
            .iter()
            .find(|(qq, _)| usize::from(*qq) == q)
            .map_or(0, |&(_, m)| m.to_bits() as u8 + 1);
        slot.store(own, Ordering::Relaxed);
    }
    shared_state.store(word(caps, new), Ordering::Release);
    *published = true;
    tracing::debug!(device = %caps.device, rx = %new.rx_mode, tx = %new.tx_mode, tpid = %new.tpid,
        extended = new.extended, filter = new.filter, hw_filter = hw_f_new, "VLAN settings applied");
    // 5. Undo what the device no longer needs to do, in every place it does it.
    let mut result = Ok(());
    if caps.rx_strip {
        result = result.and(strip_where(hw, caps, false, |q| turns(q, false)));
    }
    if caps.filter && !hw_f_new && (old.is_none() || hw_f_old) {
        result = result.and(hw.set_vlan_filter(false));
    }
    if caps.filter {
        if let Some(o) = old {
            for v in o.table.iter().filter(|&v| !new.table.contains(v)) {
                result = result.and(hw.remove_vlan(Vid::new(v)?));
            }
        }
    }
    result
}

impl VlanControl {
    /// Applies `config` to the device (every queue's strip bit, filter, table, TPIDs) and
    /// returns the handle. Refuses, naming the device and the mode, what the device cannot do.
    pub fn new(hw: &mut dyn VlanHardware, config: &VlanConfig) -> Result<VlanControl> {
        let caps = hw.vlan_caps();
        let shared = Shared {
            state: AtomicU64::new(word(&caps, &VlanConfig::default())),
            queue_modes: (0..MAX_QUEUE_MODES).map(|_| AtomicU8::new(0)).collect(),
            filter: AtomicFilter::new(&VlanFilter::new()),
            caps,
            config: Mutex::new(config.clone()),
        };
        apply(
            hw,
            &shared.state,
            &shared.queue_modes,
            &shared.filter,
            &shared.caps,
            None,
            config,
            &mut false,
        )?;
        Ok(VlanControl {
            shared: Arc::new(shared),
        })
    }

    /// What the device can do.
    pub fn caps(&self) -> &VlanCaps {
        &self.shared.caps
    }

    /// The configuration in force.
    pub fn config(&self) -> VlanConfig {
        self.lock().clone()
    }

    /// The receive mode in force.
    pub fn rx_mode(&self) -> RxMode {
        self.snapshot().rx_mode()
    }

    /// The transmit mode in force.
    pub fn tx_mode(&self) -> TxMode {
        self.snapshot().tx_mode()
    }

    /// The receive context in force (for packets received from now on).
    pub fn rx_ctx(&self) -> VlanRxCtx {
        self.snapshot().rx_ctx()
    }

    /// Whether the filter runs in software (the device cannot do it for this configuration).
    pub fn filter_in_software(&self) -> bool {
        self.snapshot().sw_filter()
    }

    /// A copy of the filter table: what a driver writes to its VFTA after a reset.
    pub fn filter_table(&self) -> VlanFilter {
        self.shared.filter.snapshot()
    }

    #[inline(always)]
    pub(crate) fn snapshot(&self) -> Snapshot {
        Snapshot(self.shared.state.load(Ordering::Acquire))
    }

    /// Everything a receive burst of queue `q` (`None`: the port's mode) depends on, as one
    /// word: the state word, and the queue's own mode byte in bits 63:56. A queue wrapper
    /// compares it with the last one it saw and decodes it ([`RxKey`]) only when it changed.
    #[inline(always)]
    pub(crate) fn rx_key(&self, q: Option<u16>) -> RxKey {
        let word = self.shared.state.load(Ordering::Acquire);
        let own = q.and_then(|q| self.shared.queue_modes.get(usize::from(q)));
        RxKey(word | own.map_or(0, |m| u64::from(m.load(Ordering::Acquire)) << 56))
    }

    /// Queue `q`'s own receive mode, if it has one.
    #[inline(always)]
    pub(crate) fn queue_mode(&self, q: u16) -> Option<RxMode> {
        let v = self
            .shared
            .queue_modes
            .get(usize::from(q))?
            .load(Ordering::Acquire);
        (v != 0).then(|| RxMode::from_bits(u64::from(v - 1)))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VlanConfig> {
        self.shared.config.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn change(&self, hw: &mut dyn VlanHardware, f: impl FnOnce(&mut VlanConfig)) -> Result<()> {
        let mut cur = self.lock();
        let mut new = cur.clone();
        f(&mut new);
        if new == *cur {
            return Ok(());
        }
        let mut published = false;
        let r = apply(
            hw,
            &self.shared.state,
            &self.shared.queue_modes,
            &self.shared.filter,
            &self.shared.caps,
            Some(&cur),
            &new,
            &mut published,
        );
        // Once published, the new configuration is in force even if an undo step failed; before
        // that, nothing changed in software.
        if published {
            *cur = new;
        }
        r
    }

    /// Switches the receive mode while traffic flows (see the module docs for why no frame is
    /// stripped twice or loses its tag). Hardware on a device that cannot strip is an error.
    pub fn set_rx_mode(&self, hw: &mut dyn VlanHardware, mode: RxMode) -> Result<()> {
        self.change(hw, |c| c.rx_mode = mode)
    }

    /// Gives receive queue `q` a mode of its own (`None`: follow the port's again), switchable
    /// while traffic flows with the same guarantees as [`set_rx_mode`](Self::set_rx_mode). It
    /// applies to the queue wrapped with [`wrap_rx_queue`](Self::wrap_rx_queue). A device that
    /// strips port-wide (the 82576) refuses a queue mode that differs from the port's in
    /// hardware-ness, naming the device; sw and deferred can always be mixed.
    pub fn set_queue_rx_mode(
        &self,
        hw: &mut dyn VlanHardware,
        q: u16,
        mode: Option<RxMode>,
    ) -> Result<()> {
        self.change(hw, |c| {
            c.queue_rx_modes.retain(|&(qq, _)| qq != q);
            if let Some(m) = mode {
                c.queue_rx_modes.push((q, m));
                c.queue_rx_modes.sort_unstable_by_key(|&(qq, _)| qq);
            }
        })
    }

    /// The receive mode queue `q` works in now.
    pub fn queue_rx_mode(&self, q: u16) -> RxMode {
        self.queue_mode(q).unwrap_or_else(|| self.rx_mode())
    }

    /// Switches the transmit mode. A packet's tag is inserted exactly once: software insertion
    /// clears [`Meta::TX_VLAN`](crate::platform::dma::Meta::TX_VLAN), so a packet left in a batch and
    /// retried after a switch is not tagged again.
    pub fn set_tx_mode(&self, hw: &mut dyn VlanHardware, mode: TxMode) -> Result<()> {
        self.change(hw, |c| c.tx_mode = mode)
    }

    /// Changes the TPID of the tag that counts (not hitless: frames in flight may be judged by
    /// either TPID).
    pub fn set_tpid(&self, hw: &mut dyn VlanHardware, tpid: Tpid) -> Result<()> {
        self.change(hw, |c| c.tpid = tpid)
    }

    /// Turns extended (QinQ) mode on with `outer_tpid`, or off.
    pub fn set_extended(
        &self,
        hw: &mut dyn VlanHardware,
        on: bool,
        outer_tpid: Tpid,
    ) -> Result<()> {
        self.change(hw, |c| {
            c.extended = on;
            c.outer_tpid = outer_tpid;
        })
    }

    /// Turns the VID filter on or off.
    pub fn set_filter(&self, hw: &mut dyn VlanHardware, on: bool) -> Result<()> {
        self.change(hw, |c| c.filter = on)
    }

    /// Adds a VID to the filter table (refuses 4095, saying why). Its frames arrive from the next
    /// burst on.
    pub fn add_vlan(&self, hw: &mut dyn VlanHardware, vid: u16) -> Result<()> {
        let vid = Vid::new(vid)?.get();
        self.change(hw, |c| {
            let _ = c.table.add(vid);
        })
    }

    /// Removes a VID from the filter table (VID 0 stays: priority tags always pass).
    pub fn remove_vlan(&self, hw: &mut dyn VlanHardware, vid: u16) -> Result<()> {
        let vid = Vid::new(vid)?.get();
        self.change(hw, |c| {
            let _ = c.table.remove(vid);
        })
    }

    /// Writes the whole configuration to the device again: what a driver's reset or restart
    /// path calls, so that strip bits, TPIDs and the filter table survive.
    pub fn reapply(&self, hw: &mut dyn VlanHardware) -> Result<()> {
        let cur = self.lock();
        apply(
            hw,
            &self.shared.state,
            &self.shared.queue_modes,
            &self.shared.filter,
            &self.shared.caps,
            None,
            &cur,
            &mut false,
        )
    }
}
