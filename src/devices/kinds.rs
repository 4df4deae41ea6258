//! The kinds of port, in one table: how each kind's ports are named and what each has.
//!
//! The port-name parser ([`super::any::PortName`]) takes its prefixes from here, the tool's
//! help texts are made from it (the port lists, which kinds have an interrupt mode, which
//! have registers to dump), and the tests check the table against what the drivers do (a kind
//! that says it has interrupts opens with them; one that says it has none refuses). A kind
//! added later is added here, or its ports cannot be named, and then every help text names it.

/// One kind of port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kind {
    /// What it is, as the help texts name it ("82576", "the software 82599").
    pub name: &'static str,
    /// The prefix of its port names (`sim` for `sim:N`); `None` for PCI devices, which are
    /// named by their address.
    pub prefix: Option<&'static str>,
    /// How a port of this kind is named ("sim:N", "a PCI address").
    pub syntax: &'static str,
    /// One line on what it is, for the help texts.
    pub about: &'static str,
    /// Receive queues can sleep on an interrupt (`--interrupts`, `RxQueue::wait`).
    pub interrupts: bool,
    /// `vfio-nic regs`/`reg` read its registers (a register map of ours describes them).
    pub registers: bool,
}

/// Every kind of port this crate opens.
pub const KINDS: &[Kind] = &[
    Kind {
        name: "82576",
        prefix: None,
        syntax: "a PCI address",
        about: "Intel 82576 (igb) bound to vfio-pci",
        interrupts: true,
        registers: true,
    },
    Kind {
        name: "82599",
        prefix: None,
        syntax: "a PCI address",
        about: "Intel 82599 (ixgbe) bound to vfio-pci",
        interrupts: true,
        registers: true,
    },
    Kind {
        name: "virtio-net",
        prefix: None,
        syntax: "a PCI address",
        about: "a virtio 1.x virtio-net device bound to vfio-pci",
        interrupts: true,
        registers: true,
    },
    Kind {
        name: "the software 82599",
        prefix: Some("sim"),
        syntax: "sim:N",
        about: "the ixgbe driver on the software 82599 (sim:2k and sim:2k+1 are wired to each other inside one process)",
        interrupts: true,
        registers: true,
    },
    Kind {
        name: "the software queue manager",
        prefix: Some("qm"),
        syntax: "qm:N",
        about: "the qm driver on the software DPAA2-like queue manager (N < 64; qm:2k and qm:2k+1 are wired inside one process)",
        interrupts: false,
        registers: true,
    },
    Kind {
        name: "the software virtio-net device",
        prefix: Some("virtio"),
        syntax: "virtio:N",
        about: "the virtio driver on the software virtio-net device (virtio:2k and virtio:2k+1 are wired inside one process)",
        interrupts: false,
        registers: false,
    },
    Kind {
        name: "null",
        prefix: Some("null"),
        syntax: "null:N",
        about: "the null device (DPDK net_null semantics)",
        interrupts: false,
        registers: false,
    },
    Kind {
        name: "af_packet",
        prefix: Some("afp"),
        syntax: "afp:IFNAME[,queues=N][,frames=N]",
        about: "a Linux interface through packet sockets (queues: sockets in one fanout group, default 1; frames: per receive and transmit ring, default 512; needs CAP_NET_RAW)",
        interrupts: false,
        registers: false,
    },
];

/// The kinds whose ports are named by a prefix (`null`, `sim`, ...), in table order.
pub fn prefixes() -> impl Iterator<Item = &'static str> {
    KINDS.iter().filter_map(|k| k.prefix)
}

/// "a, b, c and d" (or "a, b, c or d" with `last_word` "or").
fn list(items: &[&str], last_word: &str) -> String {
    match items {
        [] => String::new(),
        [one] => (*one).to_string(),
        [rest @ .., last] => format!("{} {last_word} {last}", rest.join(", ")),
    }
}

fn and_list(items: &[&str]) -> String {
    list(items, "and")
}

fn or_list(items: &[&str]) -> String {
    list(items, "or")
}

/// The syntax of every kind named by a prefix and passing `has`: "sim:N", "qm:N", ...
fn named_syntaxes(has: impl Fn(&Kind) -> bool) -> Vec<&'static str> {
    KINDS
        .iter()
        .filter(|k| has(k))
        .filter_map(|k| k.prefix.map(|_| k.syntax))
        .collect()
}

/// The kinds with `has`, by name: "82576, 82599, virtio-net and the software 82599".
pub fn names_with(has: impl Fn(&Kind) -> bool) -> String {
    let names: Vec<&str> = KINDS.iter().filter(|k| has(k)).map(|k| k.name).collect();
    and_list(&names)
}

/// How ports are named, one clause per kind: the tool's top-level help.
pub fn ports_help() -> String {
    let pci: Vec<&str> = KINDS
        .iter()
        .filter(|k| k.prefix.is_none())
        .map(|k| k.name)
        .collect();
    let mut parts = vec![format!(
        "a PCI address (0000:01:00.0, or 01:00.0 for domain 0) bound to vfio-pci ({})",
        and_list(&pci)
    )];
    parts.extend(
        KINDS
            .iter()
            .filter(|k| k.prefix.is_some())
            .map(|k| format!("{}: {}", k.syntax, k.about)),
    );
    format!("Ports: {}.", parts.join("; "))
}

/// The port argument's help: every way of naming a port, in short.
pub fn port_arg_help() -> String {
    format!(
        "The port: a PCI address, or {}",
        or_list(&named_syntaxes(|_| true))
    )
}

/// The port argument's help of `regs` and `reg`: the kinds with registers of ours.
pub fn register_port_help() -> String {
    format!(
        "The port: a PCI address, or {}",
        or_list(&named_syntaxes(|k| k.registers))
    )
}

/// Why a port of a kind without interrupts refuses them.
pub fn no_interrupt_mode() -> String {
    format!(
        "only {} ports have an interrupt mode; poll this port",
        names_with(|k| k.interrupts)
    )
}

/// Which ports have no registers of ours to read.
pub fn no_registers() -> String {
    let without: Vec<&str> = KINDS
        .iter()
        .filter(|k| !k.registers)
        .filter_map(|k| k.prefix.map(|_| k.name))
        .collect();
    format!(
        "{} ports have no registers of ours; give a PCI address, {}",
        and_list(&without),
        or_list(&named_syntaxes(|k| k.registers))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sentences_name_every_kind_they_should() {
        let help = ports_help();
        for k in KINDS {
            assert!(
                help.contains(k.name) || help.contains(k.syntax),
                "{help} lacks {}",
                k.name
            );
        }
        assert_eq!(
            names_with(|k| k.interrupts),
            "82576, 82599, virtio-net and the software 82599"
        );
        assert!(
            no_registers().starts_with("the software virtio-net device, null and af_packet ports"),
            "{}",
            no_registers()
        );
        let prefixes: Vec<&str> = prefixes().collect();
        let mut unique = prefixes.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), prefixes.len(), "each prefix once");
    }
}
