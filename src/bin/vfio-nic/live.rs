//! The live status line and the end-of-run summary shared by `fwd`, `gen`, `capture` and
//! `respond`.
//!
//! A command declares its channels (one per port and direction, e.g. "sim:0 tx"); whoever moves
//! packets publishes counters into them with relaxed atomics (a forwarding thread per queue, or
//! the command's own loop), and the command's main loop calls [`Live::tick`], which prints one
//! status line per `--stats-period` and says when `--duration` or Ctrl-C ends the run. Several
//! channels may share a name (one per queue); they are added up for display.
//!
//! A command also hands over its ports' [`Health`] ([`Live::watch_links`]): a port whose link
//! is down, or changed since the run started, gets its state and the time it was seen on every
//! status line, and the summary lists what happened to it (link changes, PCIe errors, removal).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use vfio_nic::health::{clock, Health};

use crate::common::RunOpts;

/// Counters of one channel.
#[derive(Debug, Default)]
pub struct Channel {
    pub packets: AtomicU64,
    pub bytes: AtomicU64,
    pub dropped: AtomicU64,
    pub errors: AtomicU64,
}

impl Channel {
    /// Adds packets and bytes.
    pub fn add(&self, packets: u64, bytes: u64) {
        self.packets.fetch_add(packets, Relaxed);
        self.bytes.fetch_add(bytes, Relaxed);
    }
    /// Replaces all four counters (for a single writer that keeps its own totals).
    pub fn store(&self, packets: u64, bytes: u64, dropped: u64, errors: u64) {
        self.packets.store(packets, Relaxed);
        self.bytes.store(bytes, Relaxed);
        self.dropped.store(dropped, Relaxed);
        self.errors.store(errors, Relaxed);
    }
}

/// Totals of one channel name.
#[derive(Clone, Debug, Default)]
pub struct Total {
    pub name: String,
    pub packets: u64,
    pub bytes: u64,
    pub dropped: u64,
    pub errors: u64,
}

/// The status machinery of one run.
pub struct Live {
    names: Vec<String>,
    channels: Arc<Vec<Channel>>,
    start: Instant,
    end: Option<Instant>,
    period: Option<Duration>,
    last: (Instant, Vec<u64>),
    json: bool,
    stop: Arc<AtomicBool>,
    /// Whether the channels count bytes (the forwarder does not).
    bytes: bool,
    /// Standard output failed (its reader went away): the loops stop, `finish` returns it.
    out_failed: Option<vfio_nic::Error>,
    /// The ports whose link and faults the lines and the summary report.
    links: Vec<(String, Arc<Health>)>,
}

impl Live {
    /// Starts the clock for channels named `names` (in display order; repeated names add up).
    pub fn new(names: Vec<String>, run: &RunOpts, json: bool, stop: Arc<AtomicBool>) -> Live {
        let start = Instant::now();
        let channels = Arc::new(names.iter().map(|_| Channel::default()).collect());
        let unique = unique(&names).len();
        Live {
            names,
            channels,
            start,
            end: run.duration.map(|d| start + Duration::from_secs_f64(d)),
            period: (run.stats_period > 0.0).then(|| Duration::from_secs_f64(run.stats_period)),
            last: (start, vec![0; unique]),
            json,
            stop,
            bytes: true,
            out_failed: None,
            links: Vec::new(),
        }
    }

    /// Reports these ports' link state (when down or changed) on the status lines and what
    /// happened to them in the summary; ports whose driver watches nothing are left out.
    pub fn watch_links(&mut self, ports: impl IntoIterator<Item = (String, Option<Arc<Health>>)>) {
        self.links
            .extend(ports.into_iter().filter_map(|(n, h)| Some((n, h?))));
    }

    /// The link part of a status line: each watched port whose link is down or has changed.
    fn link_parts(&self) -> Vec<String> {
        self.links
            .iter()
            .filter_map(|(name, h)| {
                let l = h.link();
                (h.is_removed() || !l.status.up || l.changes > 0).then(|| {
                    if h.is_removed() {
                        format!("{name} removed")
                    } else {
                        format!("{name} link {l}")
                    }
                })
            })
            .collect()
    }

    /// The channels count packets only: bytes are left out of the summary.
    pub fn without_bytes(mut self) -> Live {
        self.bytes = false;
        self
    }

    /// Channel `i` (in the order of the names given to [`Live::new`]).
    pub fn ch(&self, i: usize) -> &Channel {
        &self.channels[i]
    }

    /// All channels, to hand to other threads.
    pub fn channels(&self) -> Arc<Vec<Channel>> {
        self.channels.clone()
    }

    /// The stop flag (Ctrl-C), to hand to other threads.
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// Whether Ctrl-C was pressed or `--duration` has passed.
    pub fn done(&self) -> bool {
        self.stop.load(Relaxed)
            || self.end.is_some_and(|e| Instant::now() >= e)
            || self.out_failed.is_some()
    }

    /// Asks every loop to stop.
    pub fn request_stop(&self) {
        self.stop.store(true, Relaxed);
    }

    /// Seconds since the start.
    pub fn elapsed(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// Totals per channel name, in display order.
    pub fn totals(&self) -> Vec<Total> {
        let mut out: Vec<Total> = unique(&self.names)
            .into_iter()
            .map(|n| Total {
                name: n.to_string(),
                ..Total::default()
            })
            .collect();
        for (name, c) in self.names.iter().zip(self.channels.iter()) {
            if let Some(t) = out.iter_mut().find(|t| &t.name == name) {
                t.packets += c.packets.load(Relaxed);
                t.bytes += c.bytes.load(Relaxed);
                t.dropped += c.dropped.load(Relaxed);
                t.errors += c.errors.load(Relaxed);
            }
        }
        out
    }

    /// Prints a status line if a period has passed (text mode only). When standard output
    /// fails, [`Live::done`] turns true and [`Live::finish`] returns the error.
    pub fn tick(&mut self) {
        let Some(period) = self.period else { return };
        let now = Instant::now();
        if self.json || now.duration_since(self.last.0) < period {
            return;
        }
        let dt = now.duration_since(self.last.0).as_secs_f64();
        let totals = self.totals();
        let mut parts: Vec<String> = totals
            .iter()
            .zip(&self.last.1)
            .map(|(t, &before)| {
                format!(
                    "{}: {} pkts {:.3} Mpps drop {} err {}",
                    t.name,
                    t.packets,
                    (t.packets - before) as f64 / dt / 1e6,
                    t.dropped,
                    t.errors
                )
            })
            .collect();
        parts.extend(self.link_parts());
        // Passed straight to the call: `format_args!` borrows its arguments' temporaries,
        // which Rust before 1.89 drops at the end of a `let` (E0716 on the MSRV, 1.85).
        if let Err(e) = crate::write_line(format_args!(
            "{:7.1} s  {}",
            now.duration_since(self.start).as_secs_f64(),
            parts.join("  |  ")
        )) {
            self.out_failed = Some(e);
        }
        self.last = (now, totals.iter().map(|t| t.packets).collect());
    }

    /// Prints the summary: one line per channel name and then `text` (text mode), or one JSON
    /// object with "seconds", "channels" and the fields of `extra` (JSON mode).
    pub fn finish(&mut self, extra: Map<String, Value>, text: &[String]) -> vfio_nic::Result<()> {
        if let Some(e) = self.out_failed.take() {
            return Err(e);
        }
        let secs = self.elapsed();
        let totals = self.totals();
        if self.json {
            let mut obj = Map::new();
            obj.insert("seconds".into(), json!(secs));
            obj.insert(
                "channels".into(),
                totals
                    .iter()
                    .map(|t| {
                        json!({
                            "name": t.name, "packets": t.packets,
                            "bytes": self.bytes.then_some(t.bytes),
                            "dropped": t.dropped, "errors": t.errors,
                            "mpps": t.packets as f64 / secs / 1e6,
                        })
                    })
                    .collect(),
            );
            if !self.links.is_empty() {
                obj.insert("links".into(), self.links_json());
            }
            obj.extend(extra);
            outln!("{}", Value::Object(obj));
            return Ok(());
        }
        for t in &totals {
            outln!(
                "{}: {} packets, {}{} dropped, {} errors ({:.3} Mpps over {secs:.3} s)",
                t.name,
                t.packets,
                if self.bytes {
                    format!("{} bytes, ", t.bytes)
                } else {
                    String::new()
                },
                t.dropped,
                t.errors,
                t.packets as f64 / secs / 1e6
            );
        }
        for (name, h) in &self.links {
            let events = h.events();
            if !events.is_empty() {
                let list: Vec<String> = events.iter().map(|e| e.to_string()).collect();
                outln!("{name}: {}", list.join("; "));
            }
        }
        for line in text {
            outln!("{line}");
        }
        Ok(())
    }

    /// The watched ports' link and events, as JSON.
    fn links_json(&self) -> Value {
        self.links
            .iter()
            .map(|(name, h)| {
                let l = h.link();
                json!({
                    "port": name,
                    "up": l.status.up,
                    "speed_mbps": l.status.speed_mbps,
                    "since": clock(l.since),
                    "changes": l.changes,
                    "removed": h.is_removed(),
                    "events": h.events().iter().map(|e| e.to_string()).collect::<Vec<_>>(),
                })
            })
            .collect()
    }
}

fn unique(names: &[String]) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for n in names {
        if !out.contains(&n.as_str()) {
            out.push(n);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use vfio_nic::device::LinkStatus;

    #[test]
    fn a_port_whose_link_changed_shows_on_the_status_line() {
        let run = RunOpts {
            duration: None,
            stats_period: 1.0,
        };
        let mut live = Live::new(vec!["p tx".into()], &run, false, Arc::default());
        let up = LinkStatus {
            up: true,
            speed_mbps: 1000,
            full_duplex: true,
        };
        let h = Arc::new(Health::new("p", up));
        live.watch_links([("p".into(), Some(h.clone())), ("q".into(), None)]);
        assert!(
            live.link_parts().is_empty(),
            "an untouched link is not shown"
        );
        h.observe_link(LinkStatus::default());
        let parts = live.link_parts();
        assert_eq!(parts.len(), 1);
        assert!(
            parts[0].starts_with("p link down since ")
                && parts[0].ends_with("(1 change(s) since open)"),
            "{parts:?}"
        );
        h.observe_link(up);
        assert!(live.link_parts()[0].starts_with("p link up, 1000 Mb/s, full duplex since "));
        h.mark_removed();
        assert_eq!(live.link_parts(), ["p removed"]);
        assert_eq!(live.links_json()[0]["changes"], 2);
    }
}
