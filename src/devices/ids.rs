//! The PCI ids this crate knows, and which driver family each belongs to.
//!
//! One table serves the drivers (which family to open), the command-line tool's `list` (which
//! NICs to show) and the on-device tests (which register map and self-test table apply).

/// Intel's PCI vendor id.
pub const INTEL: u16 = 0x8086;
/// Red Hat's (Qumranet's) PCI vendor id, which virtio devices carry.
pub const VIRTIO_VENDOR: u16 = 0x1af4;

/// A driver family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// Intel 82576 and relatives (Linux `igb`).
    Igb,
    /// Intel 82599 and relatives (Linux `ixgbe`).
    Ixgbe,
    /// virtio-net over PCI, virtio 1.x (Linux `virtio_net`, DPDK `net_virtio`).
    Virtio,
}

impl Family {
    /// The family's name, as used by `regs::family`.
    pub fn name(self) -> &'static str {
        match self {
            Family::Igb => "igb",
            Family::Ixgbe => "ixgbe",
            Family::Virtio => "virtio",
        }
    }
}

/// Known devices: (vendor, device, family, model).
pub const KNOWN: &[(u16, u16, Family, &str)] = &[
    (
        INTEL,
        0x10c9,
        Family::Igb,
        "82576 Gigabit Network Connection",
    ),
    (
        INTEL,
        0x10e6,
        Family::Igb,
        "82576 Gigabit Network Connection (fiber)",
    ),
    (
        INTEL,
        0x10e7,
        Family::Igb,
        "82576 Gigabit Network Connection (SerDes)",
    ),
    (
        INTEL,
        0x10e8,
        Family::Igb,
        "82576 Gigabit Network Connection (quad copper)",
    ),
    (
        INTEL,
        0x1526,
        Family::Igb,
        "82576 Gigabit Network Connection (quad copper ET2)",
    ),
    (
        INTEL,
        0x150a,
        Family::Igb,
        "82576NS Gigabit Network Connection",
    ),
    (
        INTEL,
        0x1518,
        Family::Igb,
        "82576NS SerDes Gigabit Network Connection",
    ),
    (
        INTEL,
        0x150d,
        Family::Igb,
        "82576 Gigabit Network Connection (SerDes quad)",
    ),
    (
        INTEL,
        0x10f7,
        Family::Ixgbe,
        "82599 10 Gigabit KX4 Network Connection",
    ),
    (
        INTEL,
        0x1514,
        Family::Ixgbe,
        "82599 10 Gigabit KX4 Network Connection (mezzanine)",
    ),
    (
        INTEL,
        0x1517,
        Family::Ixgbe,
        "82599 10 Gigabit KR Network Connection",
    ),
    (
        INTEL,
        0x10f8,
        Family::Ixgbe,
        "82599 10 Gigabit Dual Port Backplane Connection",
    ),
    (
        INTEL,
        0x10f9,
        Family::Ixgbe,
        "82599 10 Gigabit CX4 Network Connection",
    ),
    (
        INTEL,
        0x10fb,
        Family::Ixgbe,
        "82599ES 10-Gigabit SFI/SFP+ Network Connection",
    ),
    (
        INTEL,
        0x152a,
        Family::Ixgbe,
        "82599 10 Gigabit Backplane Connection with FCoE",
    ),
    (
        INTEL,
        0x1529,
        Family::Ixgbe,
        "82599 10 Gigabit SFP+ Network Connection with FCoE",
    ),
    (
        INTEL,
        0x1507,
        Family::Ixgbe,
        "82599 10 Gigabit SFP+ Network Connection (EM)",
    ),
    (
        INTEL,
        0x154d,
        Family::Ixgbe,
        "82599 10 Gigabit SFP+ Network Connection (SF2)",
    ),
    (
        INTEL,
        0x154a,
        Family::Ixgbe,
        "82599 10 Gigabit SFP+ Network Connection (SF QP)",
    ),
    (
        INTEL,
        0x1558,
        Family::Ixgbe,
        "82599 10 Gigabit QSFP+ Network Connection (SF QP)",
    ),
    (
        INTEL,
        0x1557,
        Family::Ixgbe,
        "82599EN 10-Gigabit SFI/SFP+ Network Connection",
    ),
    (
        INTEL,
        0x10fc,
        Family::Ixgbe,
        "82599 10 Gigabit XAUI Network Connection (LOM)",
    ),
    (
        INTEL,
        0x151c,
        Family::Ixgbe,
        "82599 10 Gigabit T3 Network Connection (LOM)",
    ),
    (
        INTEL,
        0x154f,
        Family::Ixgbe,
        "82599 10 Gigabit Network Connection (LS)",
    ),
    // virtio 1.2, 4.1.2.1: 0x1040 + device id 1 (network) for a modern-only device; 0x1000
    // for a transitional one, which the driver takes through its modern interface (a
    // legacy-only device has none, and is refused with the reason).
    (
        VIRTIO_VENDOR,
        0x1041,
        Family::Virtio,
        "virtio-net (virtio 1.x)",
    ),
    (
        VIRTIO_VENDOR,
        0x1000,
        Family::Virtio,
        "virtio-net (transitional)",
    ),
];

/// Looks a PCI id up.
pub fn lookup(vendor: u16, device: u16) -> Option<(Family, &'static str)> {
    KNOWN
        .iter()
        .find(|&&(v, d, _, _)| v == vendor && d == device)
        .map(|&(_, _, f, m)| (f, m))
}

/// "8086:10c9 (igb), ..." for error messages.
pub fn supported_list() -> String {
    let mut s: Vec<String> = KNOWN
        .iter()
        .map(|(v, d, f, _)| format!("{v:04x}:{d:04x} ({})", f.name()))
        .collect();
    s.dedup();
    s.join(", ")
}

/// The ids of one family, for the error of a driver given another family's device.
pub fn family_list(family: Family) -> String {
    KNOWN
        .iter()
        .filter(|k| k.2 == family)
        .map(|k| format!("{:04x}:{:04x}", k.0, k.1))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_known_and_unknown() {
        assert_eq!(lookup(0x8086, 0x10c9).unwrap().0, Family::Igb);
        assert_eq!(lookup(0x8086, 0x10fb).unwrap().0, Family::Ixgbe);
        assert!(lookup(0x8086, 0x1234).is_none());
        assert!(supported_list().contains("8086:10fb (ixgbe)"));
    }

    #[test]
    fn no_duplicate_ids() {
        for (i, a) in KNOWN.iter().enumerate() {
            for b in &KNOWN[i + 1..] {
                assert!((a.0, a.1) != (b.0, b.1), "{:04x}:{:04x} twice", a.0, a.1);
            }
        }
    }
}
