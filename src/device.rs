//! What every port offers, whatever drives it.
//!
//! The burst API is deliberately small: a receive queue appends up to N packets to the caller's
//! batch; a transmit queue takes packets from the front of a batch and leaves what it could not
//! queue, so nothing is ever dropped silently. Queues are separate objects owned by one thread
//! each (`Send`, not `Sync`), so a forwarding thread per queue needs no locks.
//!
//! Nothing here assumes tail registers: an Intel ring writes RDT/TDT, a queue-manager device
//! (DPAA2-like) enqueues to a portal, the in-memory devices call functions. That is each queue
//! implementation's business.
//!
//! Nor does anything here know VLANs: tag handling is the VLAN layer's ([`crate::vlan`]), which
//! extends these traits (software insertion on transmit is
//! [`SwVlanTx`](crate::vlan::SwVlanTx)) and asks drivers for their VLAN hardware through
//! [`VlanHardware`](crate::vlan::VlanHardware).

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

// The burst errors live with the crate's other errors (which wrap them), below this module;
// they are part of the device contract, so they are named here too.
use crate::error::{Error, Result};
pub use crate::error::{QueueError, Violation};
use crate::health::Health;
use crate::platform::dma::{Packet, Pool};
use crate::platform::irq::Interrupt;

/// A 48-bit Ethernet address.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// ff:ff:ff:ff:ff:ff.
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);

    /// Whether the group bit is set (multicast or broadcast).
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 1 == 1
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

impl fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for MacAddr {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let bad = || {
            Error::InvalidConfig(format!(
                "'{s}' is not a MAC address (write it as 52:54:00:12:34:56)"
            ))
        };
        let mut out = [0u8; 6];
        let mut parts = s.split([':', '-']);
        for b in out.iter_mut() {
            let p = parts.next().ok_or_else(bad)?;
            if p.len() != 2 {
                return Err(bad());
            }
            *b = u8::from_str_radix(p, 16).map_err(|_| bad())?;
        }
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(MacAddr(out))
    }
}

/// Link state (defined beside the rest of what a driver sees of its device, in
/// [`crate::health`], which sits below this module).
pub use crate::health::LinkStatus;

/// Static facts about an open port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortInfo {
    /// The name the port was opened by ("0000:01:00.0", "null:0").
    pub name: String,
    /// Driver family ("igb", "ixgbe", "null", "sim").
    pub driver: &'static str,
    /// Human-readable model.
    pub model: String,
    /// PCI vendor and device id, for PCI ports.
    pub pci_id: Option<(u16, u16)>,
    /// The port's MAC address.
    pub mac: MacAddr,
    /// Receive queues configured.
    pub rx_queues: u16,
    /// Transmit queues configured.
    pub tx_queues: u16,
    /// Receive ring size (descriptors; 0 for devices without rings).
    pub rx_ring: u16,
    /// Transmit ring size.
    pub tx_ring: u16,
    /// The most payload bytes behind the Ethernet header, when the device reports it (an
    /// af_packet port: its interface's MTU).
    pub mtu: Option<u32>,
}

/// Software counters of one queue, kept by the queue itself (no device access needed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Packets received or transmitted.
    pub packets: u64,
    /// Bytes received or transmitted (frame bytes as handed over, no CRC).
    pub bytes: u64,
    /// Receive: bursts cut short because the pool had no buffer.
    /// Transmit: packets left in the batch because the ring was full.
    pub no_room: u64,
    /// Frames the queue dropped (device error bits, frames spanning descriptors, ...).
    pub dropped: u64,
    /// Transmit: packets copied into a buffer the device can reach before they were queued,
    /// because their pool is mapped in another DMA domain (a null port's pool sent through a
    /// VFIO or sim port, say). Packets of pools the device sees go without a copy.
    pub copied: u64,
}

/// Counters of a whole port: the device's own (accumulated to 64 bits) and the queues'.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Device counters by datasheet name (e.g. "GPRC"), accumulated since the port was opened.
    pub hw: Vec<(&'static str, u64)>,
}

impl PortStats {
    /// A device counter by name.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.hw.iter().find(|(n, _)| *n == name).map(|&(_, v)| v)
    }
}

/// The queues of a port: receive queues, then transmit queues.
pub type QueueSet<R, T> = (Vec<R>, Vec<T>);

/// A receive queue.
///
/// Interrupt mode: a queue of a port opened with interrupts can sleep until frames arrive
/// ([`RxQueue::wait`]), or hand its eventfd to an application's own poll loop
/// ([`RxQueue::interrupt`], then [`RxQueue::arm_interrupt`] before sleeping on it and
/// [`RxQueue::disarm_interrupt`] after). Other queues refuse with [`Error::NotSupported`].
pub trait RxQueue: Send {
    /// Receives up to `max` packets, appending them to `batch`; returns how many.
    fn rx_burst(&mut self, batch: &mut Vec<Packet>, max: usize) -> Result<usize, QueueError>;
    /// The queue's software counters.
    fn stats(&self) -> QueueStats;
    /// The pool the queue receives into.
    fn pool(&self) -> &Pool;

    /// The queue's interrupt eventfd (interrupt mode), for an application's own epoll, mio or
    /// tokio loop; `None` for a polled queue.
    fn interrupt(&self) -> Option<&Interrupt> {
        None
    }

    /// Lets the device signal the queue's interrupt on the next frame, and returns whether
    /// frames are already waiting (then do not sleep: receive them). Call it after a poll found
    /// nothing and before sleeping on [`RxQueue::interrupt`]; a frame that lands in between is
    /// either seen here or signalled, never lost.
    fn arm_interrupt(&mut self) -> Result<bool> {
        Err(Error::NotSupported {
            device: "this queue".into(),
            what: "interrupt mode".into(),
            why: "its device has no interrupts (or its driver no interrupt mode); poll it".into(),
        })
    }

    /// Stops the queue's interrupt again (back to polling). Harmless on a polled queue.
    fn disarm_interrupt(&mut self) {}

    /// Sleeps until frames arrive or `timeout` passes (interrupt mode); returns whether the
    /// queue was signalled or frames were already waiting. The queue is polled again after it
    /// (its interrupt disarmed), so a busy queue costs no interrupts.
    fn wait(&mut self, timeout: Duration) -> Result<bool> {
        if self.arm_interrupt()? {
            self.disarm_interrupt();
            return Ok(true);
        }
        let irq = self.interrupt().cloned();
        let woke = match irq {
            Some(irq) => irq.wait(timeout),
            None => Ok(false),
        };
        self.disarm_interrupt();
        woke
    }
}

/// A transmit queue.
pub trait TxQueue: Send {
    /// Queues packets from the front of `batch` and removes them from it; the rest stay in the
    /// batch for the caller to retry or drop. Returns how many were queued.
    ///
    /// Short frames: a frame shorter than 60 bytes leaves the port padded to 60 with zeros (the
    /// minimum Ethernet frame without FCS). The Intel MACs pad such frames themselves; a frame
    /// shorter than 17 bytes (a fresh `Pool::alloc()` has length 0) is padded by the driver
    /// before it gets a descriptor, because a zero-length descriptor hangs the 82599's transmit
    /// DMA and Linux never gives the chips less than 17 bytes. Nothing is refused for being
    /// short.
    fn tx_burst(&mut self, batch: &mut Vec<Packet>) -> Result<usize, QueueError>;

    /// The queue's software counters.
    fn stats(&self) -> QueueStats;
}

/// An open port.
pub trait Port: Send {
    /// Its receive queue type.
    type Rx: RxQueue;
    /// Its transmit queue type.
    type Tx: TxQueue;
    /// Static facts.
    fn info(&self) -> PortInfo;
    /// Current link state.
    fn link(&self) -> Result<LinkStatus>;
    /// Device counters, accumulated.
    fn stats(&mut self) -> Result<PortStats>;
    /// Hands out the queues; the second call returns an error. The queues may outlive the
    /// port handle; each stops its own DMA when dropped.
    fn take_queues(&mut self) -> Result<QueueSet<Self::Rx, Self::Tx>>;

    /// What the driver has seen happen to the device: link changes with the time each was
    /// seen, a removal (hot unplug), PCIe errors and recoveries ([`Health`]). `None` for a
    /// port whose driver does not watch its device.
    fn health(&self) -> Option<Arc<Health>> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_round_trip_and_errors() {
        let m: MacAddr = "52:54:00:12:34:5A".parse().unwrap();
        assert_eq!(m.to_string(), "52:54:00:12:34:5a");
        assert!(!m.is_multicast());
        assert!(MacAddr::BROADCAST.is_multicast());
        for bad in [
            "52:54:00:12:34",
            "52:54:00:12:34:56:78",
            "zz:54:00:12:34:56",
            "5:54:00:12:34:56",
        ] {
            assert!(bad.parse::<MacAddr>().is_err(), "{bad}");
        }
    }
}
