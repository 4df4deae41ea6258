//! What a driver has seen happen to its device: link changes (each with the time it was seen),
//! a removal (hot unplug), PCIe errors and the recoveries from them.
//!
//! A lab bench never pulls a cable, removes a card under traffic or signals a PCIe error; an
//! appliance meets all three. A port whose driver watches its device hands out one [`Health`]
//! ([`Port::health`](crate::device::Port::health)), shared by the port, its queues and the
//! thread that waits on the device's VFIO notifications:
//!
//! - [`Health::link`] is the link as last seen, since when, and how often it changed;
//! - [`Health::is_removed`] turns true when the kernel asks for the device back (VFIO's device
//!   request): the driver has stopped the device's DMA, bursts fail with
//!   [`QueueError::DeviceRemoved`](crate::device::QueueError::DeviceRemoved), and the
//!   application drops the port and its queues so that the removal completes;
//! - [`Health::events`] is the log of what happened (the last [`EVENTS_KEPT`]), and
//!   [`Health::counts`] its totals;
//! - a reset epoch tells the queues, in their cold paths only, that the device was reset and
//!   restored under them (a PCIe error recovery), so that each puts its ring back.
//!
//! Everything here is cheap to read from any thread; nothing here touches a device.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Link state, as [`Port::link`](crate::device::Port::link) reports it and [`Health::link`]
/// keeps it (also `vfio_nic::device::LinkStatus`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStatus {
    /// Whether the link is up.
    pub up: bool,
    /// Speed in Mb/s (0 when down or unknown).
    pub speed_mbps: u32,
    /// Full duplex.
    pub full_duplex: bool,
}

/// How many events a [`Health`] keeps (the oldest go first).
pub const EVENTS_KEPT: usize = 64;

/// The link as last seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkRecord {
    /// The state.
    pub status: LinkStatus,
    /// When the driver first saw this state (when the port opened, for the first one).
    pub since: SystemTime,
    /// How many times the state changed since the port opened.
    pub changes: u64,
}

impl fmt::Display for LinkRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.status;
        if s.up {
            write!(
                f,
                "up, {} Mb/s, {} duplex",
                s.speed_mbps,
                if s.full_duplex { "full" } else { "half" }
            )?;
        } else {
            write!(f, "down")?;
        }
        write!(f, " since {}", clock(self.since))?;
        if self.changes > 0 {
            write!(f, " ({} change(s) since open)", self.changes)?;
        }
        Ok(())
    }
}

/// How bad a PCIe error is (PCIe base specification 6.2.2: correctable errors are fixed by the
/// link itself; uncorrectable non-fatal ones lose a transaction but leave the link working;
/// fatal ones make the link unreliable).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// Corrected by the hardware; reported, nothing to do.
    Correctable,
    /// A transaction was lost; the driver resets the function and restores the port.
    NonFatal,
    /// The link is unreliable; the kernel resets the link, the driver restores the port.
    Fatal,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Correctable => "correctable",
            Severity::NonFatal => "uncorrectable (non-fatal)",
            Severity::Fatal => "uncorrectable (fatal)",
        })
    }
}

/// What happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// The link changed to this state.
    Link(LinkStatus),
    /// The kernel asked for the device back (hot unplug); its DMA was stopped.
    Removed,
    /// The device reported a PCIe error; `what` names it (the AER status bits or the kernel's
    /// counters), as far as the driver could tell.
    PcieError {
        /// How bad.
        severity: Severity,
        /// Which error.
        what: String,
    },
    /// The function was reset and the port restored (MAC, VLAN filter and modes, queues).
    Recovered {
        /// How long the port was down, in milliseconds.
        took_ms: u64,
    },
    /// The port could not be restored after an error; it stays down: reopen it.
    RecoveryFailed {
        /// Why.
        why: String,
    },
}

/// One thing that happened to a port, and when the driver saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// When.
    pub at: SystemTime,
    /// What.
    pub kind: EventKind,
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ", clock(self.at))?;
        match &self.kind {
            EventKind::Link(s) if s.up => write!(f, "link up, {} Mb/s", s.speed_mbps),
            EventKind::Link(_) => write!(f, "link down"),
            EventKind::Removed => write!(f, "removal requested (hot unplug): DMA stopped"),
            EventKind::PcieError { severity, what } => write!(f, "PCIe error, {severity}: {what}"),
            EventKind::Recovered { took_ms } => {
                write!(f, "recovered: function reset, port restored ({took_ms} ms)")
            }
            EventKind::RecoveryFailed { why } => write!(f, "recovery failed: {why}"),
        }
    }
}

/// Totals of a port's events.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HealthCounts {
    /// Link changes.
    pub link_changes: u64,
    /// Correctable PCIe errors reported.
    pub correctable: u64,
    /// Uncorrectable PCIe errors (non-fatal and fatal).
    pub uncorrectable: u64,
    /// Recoveries that brought the port back.
    pub recoveries: u64,
    /// Recoveries that failed.
    pub failed_recoveries: u64,
}

struct State {
    link: LinkRecord,
    events: VecDeque<Event>,
    counts: HealthCounts,
}

/// What the queues read on every burst, alone in its cache line: the watch thread's lock and
/// link record next to it would otherwise make each burst miss the cache after every poll.
#[repr(align(64))]
struct Gate {
    /// Even while the device runs; odd while it is being reset and restored. Queues compare it
    /// with the epoch their ring was programmed in; a removal or a failed recovery moves it
    /// too (by two), so that one compare per burst sees every change.
    epoch: AtomicU32,
    removed: AtomicBool,
    failed: AtomicBool,
}

/// The health of one port: shared by the port, its queues and the thread that watches the
/// device (module doc).
pub struct Health {
    gate: Gate,
    name: String,
    state: Mutex<State>,
}

impl fmt::Debug for Health {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Health")
            .field("port", &self.name)
            .field("removed", &self.is_removed())
            .field("epoch", &self.epoch())
            .finish()
    }
}

impl Health {
    /// A port named `name` whose link is `link` now.
    pub fn new(name: &str, link: LinkStatus) -> Health {
        Health {
            gate: Gate {
                epoch: AtomicU32::new(0),
                removed: AtomicBool::new(false),
                failed: AtomicBool::new(false),
            },
            name: name.to_string(),
            state: Mutex::new(State {
                link: LinkRecord {
                    status: link,
                    since: SystemTime::now(),
                    changes: 0,
                },
                events: VecDeque::new(),
                counts: HealthCounts::default(),
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // The state is plain data, consistent after every statement: a panic elsewhere while
        // it was held leaves nothing half done.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The port's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The link as last seen.
    pub fn link(&self) -> LinkRecord {
        self.state().link
    }

    /// Records the link state just read; a change is logged (`tracing`), kept as an event and
    /// counted. Returns the record.
    pub fn observe_link(&self, status: LinkStatus) -> LinkRecord {
        let mut s = self.state();
        if s.link.status != status {
            let now = SystemTime::now();
            s.link = LinkRecord {
                status,
                since: now,
                changes: s.link.changes + 1,
            };
            s.counts.link_changes += 1;
            if status.up {
                tracing::info!(port = %self.name, speed_mbps = status.speed_mbps, full_duplex = status.full_duplex, "link up");
            } else {
                tracing::warn!(port = %self.name, "link down; check the cable and the link partner");
            }
            push(&mut s.events, now, EventKind::Link(status));
        }
        s.link
    }

    /// Whether the kernel asked for the device back (hot unplug).
    pub fn is_removed(&self) -> bool {
        self.gate.removed.load(Ordering::Acquire)
    }

    /// Marks the device as being removed (its DMA stopped) and records it.
    pub fn mark_removed(&self) {
        if !self.gate.removed.swap(true, Ordering::AcqRel) {
            self.gate.epoch.fetch_add(2, Ordering::AcqRel);
            tracing::warn!(port = %self.name, "the kernel asks for the device back (hot unplug): DMA stopped; bursts now fail with DeviceRemoved: drop the port and its queues");
            self.record(EventKind::Removed);
        }
    }

    /// Whether a recovery failed: the port stays down until it is reopened.
    pub fn is_failed(&self) -> bool {
        self.gate.failed.load(Ordering::Acquire)
    }

    /// Records a failed recovery: the port stays down (bursts fail with `DeviceGone`).
    pub fn mark_failed(&self, why: &str) {
        if !self.gate.failed.swap(true, Ordering::AcqRel) {
            self.gate.epoch.fetch_add(2, Ordering::AcqRel);
        }
        tracing::error!(port = %self.name, "the port could not be restored after a PCIe error ({why}); it stays down: reopen it");
        self.record(EventKind::RecoveryFailed {
            why: why.to_string(),
        });
    }

    /// The reset epoch: even while the device runs, odd while it is being reset and restored.
    pub fn epoch(&self) -> u32 {
        self.gate.epoch.load(Ordering::Acquire)
    }

    /// Whether the device is being reset and restored now.
    pub fn recovering(&self) -> bool {
        self.epoch() & 1 == 1
    }

    /// The device is about to be reset: queues stop touching their rings until [`Health::end_reset`].
    pub fn begin_reset(&self) {
        let _ = self
            .gate
            .epoch
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |e| {
                (e & 1 == 0).then_some(e + 1)
            });
    }

    /// The port was restored: each queue puts its ring back at its next idle burst.
    pub fn end_reset(&self) {
        let _ = self
            .gate
            .epoch
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |e| {
                (e & 1 == 1).then_some(e + 1)
            });
    }

    /// Records an event (and counts it).
    pub fn record(&self, kind: EventKind) {
        let mut s = self.state();
        match &kind {
            EventKind::Link(_) => s.counts.link_changes += 1,
            EventKind::PcieError {
                severity: Severity::Correctable,
                ..
            } => s.counts.correctable += 1,
            EventKind::PcieError { .. } => s.counts.uncorrectable += 1,
            EventKind::Recovered { .. } => s.counts.recoveries += 1,
            EventKind::RecoveryFailed { .. } => s.counts.failed_recoveries += 1,
            EventKind::Removed => {}
        }
        push(&mut s.events, SystemTime::now(), kind);
    }

    /// The events kept (the last [`EVENTS_KEPT`]), oldest first.
    pub fn events(&self) -> Vec<Event> {
        self.state().events.iter().cloned().collect()
    }

    /// The totals since the port opened.
    pub fn counts(&self) -> HealthCounts {
        self.state().counts
    }
}

fn push(events: &mut VecDeque<Event>, at: SystemTime, kind: EventKind) {
    if events.len() == EVENTS_KEPT {
        events.pop_front();
    }
    events.push_back(Event { at, kind });
}

/// A wall-clock time as `HH:MM:SS.mmm` UTC (the time of day is what a person compares with
/// their own log; the date is rarely in doubt during a run).
pub fn clock(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    let s = d.as_secs() % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{:03} UTC",
        s / 3600,
        s / 60 % 60,
        s % 60,
        d.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up() -> LinkStatus {
        LinkStatus {
            up: true,
            speed_mbps: 1000,
            full_duplex: true,
        }
    }

    #[test]
    fn a_link_change_is_timed_counted_and_logged_once() {
        let h = Health::new("t", up());
        let first = h.link();
        assert_eq!(first.changes, 0);
        assert_eq!(h.observe_link(up()), first, "no change, no new record");
        let down = h.observe_link(LinkStatus::default());
        assert_eq!((down.status.up, down.changes), (false, 1));
        assert!(down.since >= first.since);
        let again = h.observe_link(up());
        assert_eq!((again.status.up, again.changes), (true, 2));
        assert_eq!(h.counts().link_changes, 2);
        let ev: Vec<String> = h.events().iter().map(|e| e.to_string()).collect();
        assert_eq!(ev.len(), 2);
        assert!(
            ev[0].ends_with("link down") && ev[1].ends_with("link up, 1000 Mb/s"),
            "{ev:?}"
        );
        assert!(again
            .to_string()
            .starts_with("up, 1000 Mb/s, full duplex since "));
    }

    #[test]
    fn the_reset_epoch_is_odd_only_between_begin_and_end() {
        let h = Health::new("t", up());
        assert!(!h.recovering());
        h.begin_reset();
        h.begin_reset();
        assert_eq!(h.epoch(), 1);
        assert!(h.recovering());
        h.end_reset();
        h.end_reset();
        assert_eq!(h.epoch(), 2);
        assert!(!h.recovering());
    }

    #[test]
    fn removal_is_recorded_once_moves_the_epoch_and_the_log_is_bounded() {
        let h = Health::new("t", up());
        h.mark_removed();
        h.mark_removed();
        assert!(h.is_removed());
        assert_eq!(h.epoch(), 2, "one compare per burst sees it; still even");
        assert_eq!(h.events().len(), 1);
        for _ in 0..2 * EVENTS_KEPT {
            h.record(EventKind::PcieError {
                severity: Severity::Correctable,
                what: "RxErr".into(),
            });
        }
        assert_eq!(h.events().len(), EVENTS_KEPT);
        assert_eq!(h.counts().correctable, 2 * EVENTS_KEPT as u64);
    }

    #[test]
    fn clock_is_the_utc_time_of_day() {
        let t = UNIX_EPOCH + Duration::from_millis(86_400_000 * 3 + 3_723_045);
        assert_eq!(clock(t), "01:02:03.045 UTC");
    }
}
