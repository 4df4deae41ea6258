//! Options shared by the traffic subcommands (VLAN modes, filter, run length) and their parsing.
//!
//! VLAN IDs are parsed here rather than by clap so that a bad one (4095, 4096) fails like every
//! other error of the tool: one line saying what is wrong and what to use instead.

use std::str::FromStr;
use std::time::Duration;

use vfio_nic::app::idle::{Idle, IdlePolicy};
use vfio_nic::device::{Port, PortStats, RxQueue};
use vfio_nic::devices::any::{AnyPort, PortConfig};
use vfio_nic::devices::intel::IrqConfig;
use vfio_nic::platform::vfio::{DmaBackend, VfioOptions};
use vfio_nic::vlan::{RxMode, Tci, TxMode, Vid, VlanConfig, VlanControl, VlanFilter};
use vfio_nic::{Error, Result};

/// `--interrupts`'s help.
fn interrupts_help() -> String {
    format!(
        "Sleep on the receive queues' interrupts after --idle-polls empty polls in a row, instead of polling for ever ({} ports; others refuse it)",
        vfio_nic::devices::kinds::names_with(|k| k.interrupts)
    )
}

/// Interrupt mode of the traffic commands: poll while frames come, sleep when idle.
#[derive(clap::Args, Debug, Clone)]
pub struct IrqOpts {
    // The help names the kinds with an interrupt mode from the table the drivers are checked
    // against (devices::kinds).
    #[arg(long, help = interrupts_help())]
    pub interrupts: bool,
    /// Empty polls in a row before sleeping (with --interrupts).
    #[arg(long, default_value_t = 256, value_name = "N")]
    pub idle_polls: u32,
    /// Least time between two interrupts of one queue, microseconds (EITR; with --interrupts).
    #[arg(long, default_value_t = 50, value_name = "US")]
    pub throttle_us: u16,
}

impl IrqOpts {
    /// Checks the numbers (the throttle is checked against the chip's EITR when the port
    /// opens).
    pub fn check(&self) -> Result<()> {
        if self.idle_polls == 0 {
            return Err(Error::InvalidConfig(
                "--idle-polls must be 1 or more (empty polls before sleeping)".into(),
            ));
        }
        Ok(())
    }

    /// Opens ports in interrupt mode when asked.
    pub fn apply(&self, c: &mut PortConfig) {
        if self.interrupts {
            let irq = Some(IrqConfig {
                throttle_us: self.throttle_us,
            });
            c.igb.interrupts = irq;
            c.ixgbe.interrupts = irq;
            // virtio-net has no interrupt moderation: --throttle-us does not apply to it.
            c.virtio.interrupts = true;
        }
    }

    /// The idle counter of a polling loop, when in interrupt mode. Sleeps last at most 100 ms,
    /// so that status lines and Ctrl-C are still seen.
    pub fn idle(&self) -> Option<Idle> {
        self.interrupts.then(|| {
            Idle::new(IdlePolicy {
                idle_polls: self.idle_polls,
                max_sleep: Duration::from_millis(100),
            })
        })
    }

    /// With --interrupts, every receive queue of `port` must have its interrupt (ports whose
    /// driver has no interrupt mode ignore the setting at open).
    pub fn require<R: RxQueue>(&self, port: &str, queues: &[R]) -> Result<()> {
        if self.interrupts && queues.iter().any(|q| q.interrupt().is_none()) {
            return Err(Error::NotSupported {
                device: port.to_string(),
                what: "--interrupts".into(),
                why: format!(
                    "{}; leave --interrupts out",
                    vfio_nic::devices::kinds::no_interrupt_mode()
                ),
            });
        }
        Ok(())
    }
}

/// What an idle loop did, in one line.
pub fn idle_line(s: &vfio_nic::app::idle::IdleStats) -> String {
    format!(
        "interrupt mode: slept {} times when idle, {} of them ended by a frame (the others by the 100 ms limit)",
        s.sleeps, s.wakeups
    )
}

/// How long a traffic command runs and how often it reports.
#[derive(clap::Args, Debug, Clone)]
pub struct RunOpts {
    /// Stop after this many seconds (default: until Ctrl-C, or until the work is done).
    #[arg(long, value_name = "S")]
    pub duration: Option<f64>,
    /// Seconds between live status lines (0: none; never with --json).
    #[arg(long, default_value_t = 1.0, value_name = "S")]
    pub stats_period: f64,
}

impl RunOpts {
    pub fn check(&self) -> Result<()> {
        if let Some(d) = self.duration {
            if !(d >= 0.0 && d.is_finite()) {
                return Err(Error::InvalidConfig(format!(
                    "--duration {d} must be a number of seconds, 0 or more"
                )));
            }
        }
        if !(self.stats_period >= 0.0 && self.stats_period.is_finite()) {
            return Err(Error::InvalidConfig(format!(
                "--stats-period {} must be a number of seconds, 0 or more",
                self.stats_period
            )));
        }
        Ok(())
    }
}

/// Receive-side VLAN options.
#[derive(clap::Args, Debug, Clone)]
pub struct VlanRxOpts {
    /// Where received VLAN tags are removed: hw (by the NIC), sw (in the receive burst) or
    /// deferred (when the application reads the packet). Results are identical in every mode.
    #[arg(long, default_value = "sw", value_name = "hw|sw|deferred")]
    pub vlan_rx: String,
    /// Turn the VLAN filter on with these VIDs (comma-separated): tagged frames of other VLANs
    /// are dropped (by the NIC when it can filter, else in software). Untagged frames pass.
    #[arg(long, value_name = "VID,...")]
    pub vlan_filter: Option<String>,
}

/// Transmit-side VLAN option.
#[derive(clap::Args, Debug, Clone)]
pub struct VlanTxOpts {
    /// Where transmit VLAN tags are inserted: hw (by the NIC) or sw (written into the frame).
    /// The frames on the wire are identical.
    #[arg(long, default_value = "sw", value_name = "hw|sw")]
    pub vlan_tx: String,
}

/// A VLAN ID from option `opt`: 0..=4094, with a one-line refusal of 4095 and of anything
/// that is not a 12-bit number.
pub fn parse_vid(s: &str, opt: &str) -> Result<Vid> {
    let n: u32 = s.trim().parse().map_err(|_| {
        Error::InvalidConfig(format!(
            "{opt}: '{s}' is not a VLAN ID; use a number from 1 to 4094 (0 for a priority tag only)"
        ))
    })?;
    match n {
        4095 => Err(Error::InvalidConfig(format!(
            "{opt}: VLAN ID 4095 is reserved by IEEE 802.1Q; use a VID from 1 to 4094 (0 for a priority tag only)"
        ))),
        4096.. => Err(Error::InvalidConfig(format!(
            "{opt}: VLAN ID {n} is out of range (a VID has 12 bits); use a VID from 1 to 4094 (0 for a priority tag only)"
        ))),
        _ => Vid::new(n as u16),
    }
}

/// `VID[:PCP]` from option `opt`.
pub fn parse_tag(s: &str, opt: &str) -> Result<Tci> {
    let (vid, pcp) = match s.split_once(':') {
        Some((v, p)) => (v, Some(p)),
        None => (s, None),
    };
    let vid = parse_vid(vid, opt)?;
    let pcp = match pcp {
        None => 0,
        Some(p) => match p.trim().parse::<u8>() {
            Ok(p) if p <= 7 => p,
            _ => {
                return Err(Error::InvalidConfig(format!(
                "{opt}: '{p}' is not a priority; write VID[:PCP] with PCP from 0 to 7 (e.g. 100:5)"
            )))
            }
        },
    };
    Tci::new(vid, pcp, false)
}

/// A comma-separated VID list from option `opt`.
pub fn parse_vid_list(s: &str, opt: &str) -> Result<Vec<Vid>> {
    let vids: Vec<Vid> = s
        .split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| parse_vid(p, opt))
        .collect::<Result<_>>()?;
    if vids.is_empty() {
        return Err(Error::InvalidConfig(format!(
            "{opt}: no VLAN ID given; write a comma-separated list such as 100,200"
        )));
    }
    Ok(vids)
}

fn parse_mode<T: FromStr<Err = Error>>(s: &str, opt: &str) -> Result<T> {
    s.parse().map_err(|e: Error| match e {
        Error::InvalidConfig(m) => Error::InvalidConfig(format!("{opt}: {m}")),
        other => other,
    })
}

/// The VLAN configuration the options ask for.
pub fn vlan_config(rx: Option<&VlanRxOpts>, tx: Option<&VlanTxOpts>) -> Result<VlanConfig> {
    let mut c = VlanConfig::default();
    if let Some(rx) = rx {
        c.rx_mode = parse_mode::<RxMode>(&rx.vlan_rx, "--vlan-rx")?;
        if let Some(list) = &rx.vlan_filter {
            let vids = parse_vid_list(list, "--vlan-filter")?;
            c.filter = true;
            c.table = VlanFilter::with(vids.iter().map(|v| v.get()))?;
        }
    }
    if let Some(tx) = tx {
        c.tx_mode = parse_mode::<TxMode>(&tx.vlan_tx, "--vlan-tx")?;
    }
    Ok(c)
}

/// Port settings for the traffic commands: `queues` queue pairs on every kind of port.
/// `--buf-size`, for every port this process opens (checked once, in `set_buf_size`).
static BUF_SIZE: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();

/// Takes `--buf-size` (checked here, so that a bad one fails before any port opens).
pub fn set_buf_size(room: Option<usize>) -> Result<()> {
    if let Some(r) = room {
        PortConfig::default().set_buf_size(r)?;
    }
    BUF_SIZE
        .set(room)
        .map_err(|_| Error::InvalidConfig("--buf-size given twice".into()))
}

/// `--vfio-backend` and `--allow-noiommu`, for every PCI port this process opens.
static VFIO: std::sync::OnceLock<VfioOptions> = std::sync::OnceLock::new();

/// Takes `--vfio-backend` (`auto` or absent: automatic) and `--allow-noiommu`.
pub fn set_vfio(backend: Option<&str>, allow_noiommu: bool) -> Result<()> {
    let backend = match backend {
        None | Some("auto") | Some("") => None,
        Some(b) => Some(b.parse::<DmaBackend>()?),
    };
    VFIO.set(VfioOptions {
        backend,
        allow_noiommu,
    })
    .map_err(|_| Error::InvalidConfig("--vfio-backend given twice".into()))
}

/// How PCI ports are opened (`--vfio-backend`, `--allow-noiommu`).
pub fn vfio_options() -> VfioOptions {
    VFIO.get().copied().unwrap_or_default()
}

/// How every command opens its ports: `queues` queue pairs, and `--buf-size` when given.
pub fn port_config(queues: u16) -> PortConfig {
    let mut c = PortConfig {
        vfio: vfio_options(),
        ..PortConfig::default()
    };
    if let Some(room) = BUF_SIZE.get().copied().flatten() {
        c.set_buf_size(room)
            .expect("--buf-size was checked when it was taken");
    }
    c.null.queues = queues;
    c.ixgbe.rx_queues = queues;
    c.ixgbe.tx_queues = queues;
    c.igb.rx_queues = queues;
    c.igb.tx_queues = queues;
    c
}

/// Asks for the devices' VLAN tables when `vlan` turns the filter on (`--vlan-filter`): a
/// virtio-net port negotiates VIRTIO_NET_F_CTRL_VLAN only then (its table costs 4,094
/// control commands per open otherwise).
pub fn want_vlan_filter(c: &mut PortConfig, vlan: &VlanConfig) {
    c.virtio.vlan_filter = vlan.filter;
}

/// [`port_config`] with the Intel ports' MTU set when one is given (`--mtu`).
pub fn port_config_mtu(queues: u16, mtu: Option<u16>) -> PortConfig {
    let mut c = port_config(queues);
    if let Some(m) = mtu {
        c.igb.mtu = m;
        c.ixgbe.mtu = m;
    }
    c
}

/// Applies `cfg` to the port (refusing, in one line, what the device cannot do).
pub fn vlan_control(port: &mut AnyPort, cfg: &VlanConfig) -> Result<VlanControl> {
    VlanControl::new(port, cfg)
}

/// The VLAN configuration in force, as JSON.
pub fn vlan_json(ctl: &VlanControl) -> serde_json::Value {
    let c = ctl.config();
    serde_json::json!({
        "rx_mode": c.rx_mode.to_string(),
        "tx_mode": c.tx_mode.to_string(),
        "tpid": format!("{:#06x}", c.tpid.get()),
        "extended": c.extended,
        "outer_tpid": format!("{:#06x}", c.outer_tpid.get()),
        "filter": c.filter,
        "filter_in_software": ctl.filter_in_software(),
        "table": c.table.iter().collect::<Vec<u16>>(),
    })
}

/// One line describing the VLAN configuration in force.
pub fn vlan_line(ctl: &VlanControl) -> String {
    let c = ctl.config();
    let table: Vec<String> = c.table.iter().map(|v| v.to_string()).collect();
    format!(
        "rx {}, tx {}, tpid {:#06x}, extended {}, filter {}",
        c.rx_mode,
        c.tx_mode,
        c.tpid.get(),
        if c.extended { "on" } else { "off" },
        if c.filter {
            format!(
                "on ({}) VIDs {}",
                if ctl.filter_in_software() {
                    "in software"
                } else {
                    "in the device"
                },
                if table.is_empty() {
                    "-".to_string()
                } else {
                    table.join(",")
                }
            )
        } else {
            "off".to_string()
        }
    )
}

/// Device counters as a JSON object (name -> value), for summaries.
pub fn hw_json(stats: &PortStats) -> serde_json::Value {
    serde_json::Value::Object(
        stats
            .hw
            .iter()
            .map(|(n, v)| (n.to_string(), serde_json::json!(v)))
            .collect(),
    )
}

/// Reads the device counters, logging (not failing) when the device cannot say.
pub fn read_hw(port: &mut AnyPort) -> PortStats {
    port.stats().unwrap_or_else(|e| {
        tracing::warn!(port = %port.info().name, error = %e, "cannot read device counters");
        PortStats::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vids_are_checked_in_one_line() {
        assert_eq!(parse_vid("100", "--vlan").unwrap().get(), 100);
        for (s, needle) in [
            ("4095", "reserved"),
            ("4096", "out of range"),
            ("x", "not a VLAN ID"),
        ] {
            let e = parse_vid(s, "--vlan").unwrap_err().to_string();
            assert!(
                e.contains(needle) && e.contains("--vlan") && !e.contains('\n'),
                "{e}"
            );
        }
        assert_eq!(parse_tag("100:5", "--vlan").unwrap().raw(), 0xa064);
        assert!(parse_tag("100:8", "--vlan").is_err());
        assert_eq!(
            parse_vid_list("1, 2,4094", "--vlan-filter").unwrap().len(),
            3
        );
        assert!(parse_vid_list(",", "--vlan-filter").is_err());
    }
}
