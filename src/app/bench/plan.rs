//! What a run compares: the devices, traffic and work it can be asked for, the placements
//! (receive and transmit VLAN modes) and each device's plan of comparisons, and how many
//! repetitions that makes (for the progress the caller shows).

use serde::Serialize;

use crate::vlan::{RxMode, TxMode};

use super::BenchConfig;

/// An in-memory device (or af_packet port) the bench runs on; see the [module](super) doc.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    /// The null device (copy mode).
    Null,
    /// The ixgbe driver on the software 82599, threaded (a device thread on the other core).
    Sim,
    /// The software 82599 in inline mode (its writes on the forwarding core).
    SimInline,
    /// An af_packet port on the veth pair [`BenchConfig::afp_pair`].
    Afp,
    /// The qm driver on the threaded queue-manager model (DPAA2-like).
    Qm,
    /// The queue-manager model in inline mode.
    QmInline,
    /// The virtio driver on the software virtio-net device, threaded (a device thread on the
    /// other core polls its rings).
    Virtio,
    /// The software virtio-net device in inline mode (its work inside the doorbell writes).
    VirtioInline,
}

impl Device {
    /// The device's name in the results (`null`, `sim`, `sim-inline`, `afp`, `qm`, `qm-inline`,
    /// `virtio`, `virtio-inline`).
    pub fn name(self) -> &'static str {
        match self {
            Device::Null => "null",
            Device::Sim => "sim",
            Device::SimInline => "sim-inline",
            Device::Afp => "afp",
            Device::Qm => "qm",
            Device::QmInline => "qm-inline",
            Device::Virtio => "virtio",
            Device::VirtioInline => "virtio-inline",
        }
    }

    /// Whether a device thread of a model serves the ports (threaded software 82599,
    /// queue-manager model or virtio-net device): each comparison then also measures the
    /// forwarder's busy time.
    pub(super) fn threaded_model(self) -> bool {
        matches!(self, Device::Sim | Device::Qm | Device::Virtio)
    }
}

/// The traffic the ports receive: 64-byte UDP frames, untagged or tagged (VID 100, PCP 5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Traffic {
    /// No VLAN tag.
    Untagged,
    /// One 802.1Q tag.
    Tagged,
}

impl Traffic {
    /// `untagged` or `tagged`.
    pub fn name(self) -> &'static str {
        match self {
            Traffic::Untagged => "untagged",
            Traffic::Tagged => "tagged",
        }
    }
}

/// What the forwarder does with each packet: `fwd` forwards without reading the frame, `l2`
/// reads the destination MAC and the tag and sends with the same tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Work {
    /// Forward without reading the frame.
    Fwd,
    /// Read the destination MAC and the tag, send with the same tag.
    L2,
}

impl Work {
    /// `fwd` or `l2`.
    pub fn name(self) -> &'static str {
        match self {
            Work::Fwd => "fwd",
            Work::L2 => "l2",
        }
    }
}

fn rx_name(m: RxMode) -> &'static str {
    match m {
        RxMode::Hardware => "hw",
        RxMode::Software => "sw",
        RxMode::Deferred => "deferred",
    }
}

fn tx_name(m: TxMode) -> &'static str {
    match m {
        TxMode::Hardware => "hw",
        TxMode::Software => "sw",
    }
}

/// A placement: the receive and transmit modes.
pub type Placement = (RxMode, TxMode);

/// `rx sw tx hw`: a placement as the results name it.
pub(super) fn placement_name(p: Placement) -> String {
    format!("rx {} tx {}", rx_name(p.0), tx_name(p.1))
}

/// One planned comparison: its kind ("A/A", "receive", ...), placement A and placement B.
pub(super) type Cell = (&'static str, Placement, Placement);

/// Whether a comparison's kind is one of the null device's two-thread ones (`fwd` only).
pub(super) fn is_piped(kind: &str) -> bool {
    kind == "pipeline" || kind == "return"
}

/// The comparisons run on one device: the A/A first (its floor judges the others).
///
/// On both software 82599 modes, Software vs Deferred receive with the tag left to the NIC on
/// transmit is the cold-line pair: the model does the same in both placements (it strips
/// nothing), so B - A is what reading the frame's first line in the burst costs, with the line
/// written on the other core (threaded) or on the forwarding core just before (inline).
pub(super) fn plan(device: Device) -> Vec<Cell> {
    use RxMode::*;
    use TxMode::{Hardware as TxHw, Software as TxSw};
    match device {
        Device::Null => vec![
            ("A/A", (Deferred, TxSw), (Deferred, TxSw)),
            ("receive", (Deferred, TxSw), (Software, TxSw)),
            // fwd only: A on one core, B as a two-core pipeline (see `Rig::rep_pipeline`).
            ("pipeline", (Deferred, TxSw), (Deferred, TxSw)),
            // fwd only: the pool's fast vs slow path alone (see `Rig::rep_return`).
            ("return", (Deferred, TxSw), (Deferred, TxSw)),
        ],
        // The last row is the seed's question (Software vs Deferred receive) asked directly.
        Device::Afp => vec![
            ("A/A", (Hardware, TxSw), (Hardware, TxSw)),
            ("receive", (Hardware, TxSw), (Deferred, TxSw)),
            ("receive", (Hardware, TxSw), (Software, TxSw)),
            ("receive", (Deferred, TxSw), (Software, TxSw)),
        ],
        // The seed's argument (DPDK commit 87dd2307c0): the strip in the burst (Software)
        // against none (Deferred: the application strips, or never needs to). A DPNI has no
        // strip and no insertion, and virtio-net (VIRTIO_NET_F_CTRL_VLAN filters, nothing
        // more) neither, so both transmit in software.
        Device::Qm | Device::QmInline | Device::Virtio | Device::VirtioInline => vec![
            ("A/A", (Deferred, TxSw), (Deferred, TxSw)),
            ("receive", (Deferred, TxSw), (Software, TxSw)),
        ],
        Device::Sim => vec![
            ("A/A", (Hardware, TxHw), (Hardware, TxHw)),
            ("receive", (Hardware, TxHw), (Software, TxHw)),
            ("receive", (Hardware, TxHw), (Deferred, TxHw)),
            ("cold", (Deferred, TxHw), (Software, TxHw)),
            ("transmit", (Hardware, TxHw), (Hardware, TxSw)),
        ],
        Device::SimInline => vec![
            ("A/A", (Deferred, TxHw), (Deferred, TxHw)),
            ("cold", (Deferred, TxHw), (Software, TxHw)),
        ],
    }
}

/// The repetitions a run of `config` plans: every comparison's pairs, and on a threaded model
/// one more repetition of A and of B each (the forwarder's busy time). An A/A run anew adds
/// its own as it comes.
pub(super) fn total_reps(config: &BenchConfig) -> usize {
    let has_fwd = config.works.contains(&Work::Fwd);
    let per_device = |d: Device| {
        let cells = plan(d);
        let comparisons: usize = cells
            .iter()
            .map(|c| {
                if is_piped(c.0) {
                    usize::from(has_fwd)
                } else {
                    config.works.len()
                }
            })
            .sum();
        let busy = if d.threaded_model() {
            let plain = cells.iter().filter(|c| !is_piped(c.0)).count();
            plain * config.works.len() * 2
        } else {
            0
        };
        (comparisons * config.pairs * 2 + busy) * config.traffic.len()
    };
    config.devices.iter().map(|&d| per_device(d)).sum()
}
