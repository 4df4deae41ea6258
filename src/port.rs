//! Port names, and opening a port by name.
//!
//! Every tool and example takes ports the same way: a PCI address for a real NIC
//! (`0000:01:00.0`, or `01:00.0` for domain 0) or an in-memory device (`null:0`, `null:1`, ...).
//! [`AnyPort`] lets a program that chooses its ports at run time use one code path for all of
//! them; a program that knows its driver can use the concrete port type and avoid the `match`.

use std::fmt;
use std::str::FromStr;

use crate::device::{
    LinkStatus, Port, PortInfo, PortStats, QueueError, QueueSet, QueueStats, RxQueue, TxQueue,
};
use crate::dma::{Packet, Pool};
use crate::error::{Error, Result};
use crate::null::{NullConfig, NullPort, NullRx, NullTx};
use crate::pci::PciAddress;

/// A parsed port name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortName {
    /// A PCI device driven through VFIO.
    Pci(PciAddress),
    /// `null:N`, the null device.
    Null(u32),
}

impl FromStr for PortName {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        if let Some((kind, index)) = s.split_once(':') {
            if kind.chars().all(|c| c.is_ascii_alphabetic()) && !kind.is_empty() {
                let index: u32 = index.parse().map_err(|_| Error::BadPortName {
                    input: s.into(),
                    reason: format!("'{index}' is not a port number"),
                })?;
                return match kind {
                    "null" => Ok(PortName::Null(index)),
                    _ => Err(Error::BadPortName {
                        input: s.into(),
                        reason: format!("unknown in-memory device '{kind}' (known: null)"),
                    }),
                };
            }
        }
        Ok(PortName::Pci(s.parse()?))
    }
}

impl fmt::Display for PortName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortName::Pci(a) => write!(f, "{a}"),
            PortName::Null(i) => write!(f, "null:{i}"),
        }
    }
}

/// How to open a port, whatever its kind.
#[derive(Clone, Debug, Default)]
pub struct PortConfig {
    /// Settings of null ports.
    pub null: NullConfig,
}

/// A port of any kind.
pub enum AnyPort {
    /// A null port.
    Null(NullPort),
}

/// Opens a port by name.
pub fn open(name: &str, config: &PortConfig) -> Result<AnyPort> {
    match name.parse::<PortName>()? {
        PortName::Null(i) => Ok(AnyPort::Null(NullPort::new(i, config.null.clone())?)),
        PortName::Pci(addr) => Err(Error::NotSupported {
            device: addr.to_string(),
            what: "opening a PCI NIC".into(),
            why: "this build has no hardware driver yet (the igb and ixgbe drivers are not in it); use null:N".into(),
        }),
    }
}

/// A receive queue of any kind of port.
pub enum AnyRx {
    /// Of a null port.
    Null(NullRx),
}

/// A transmit queue of any kind of port.
pub enum AnyTx {
    /// Of a null port.
    Null(NullTx),
}

impl Port for AnyPort {
    type Rx = AnyRx;
    type Tx = AnyTx;

    fn info(&self) -> PortInfo {
        match self {
            AnyPort::Null(p) => p.info(),
        }
    }

    fn link(&self) -> Result<LinkStatus> {
        match self {
            AnyPort::Null(p) => p.link(),
        }
    }

    fn stats(&mut self) -> Result<PortStats> {
        match self {
            AnyPort::Null(p) => p.stats(),
        }
    }

    fn take_queues(&mut self) -> Result<QueueSet<AnyRx, AnyTx>> {
        match self {
            AnyPort::Null(p) => {
                let (rx, tx) = p.take_queues()?;
                Ok((
                    rx.into_iter().map(AnyRx::Null).collect(),
                    tx.into_iter().map(AnyTx::Null).collect(),
                ))
            }
        }
    }
}

impl RxQueue for AnyRx {
    #[inline]
    fn rx_burst(&mut self, batch: &mut Vec<Packet>, max: usize) -> Result<usize, QueueError> {
        match self {
            AnyRx::Null(q) => q.rx_burst(batch, max),
        }
    }
    fn stats(&self) -> QueueStats {
        match self {
            AnyRx::Null(q) => q.stats(),
        }
    }
    fn pool(&self) -> &Pool {
        match self {
            AnyRx::Null(q) => q.pool(),
        }
    }
}

impl TxQueue for AnyTx {
    #[inline]
    fn tx_burst(&mut self, batch: &mut Vec<Packet>) -> Result<usize, QueueError> {
        match self {
            AnyTx::Null(q) => q.tx_burst(batch),
        }
    }
    fn stats(&self) -> QueueStats {
        match self {
            AnyTx::Null(q) => q.stats(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse() {
        assert_eq!("null:3".parse::<PortName>().unwrap(), PortName::Null(3));
        assert_eq!("null:3".parse::<PortName>().unwrap().to_string(), "null:3");
        let p: PortName = "01:00.0".parse().unwrap();
        assert_eq!(p.to_string(), "0000:01:00.0");
        for bad in ["null:x", "foo:1", "01:00", "0000:01:00.8", ""] {
            let e = bad.parse::<PortName>().unwrap_err().to_string();
            assert!(
                e.contains("not a port name") || e.contains(bad),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn pci_ports_say_what_is_missing() {
        let e = open("0000:01:00.0", &PortConfig::default())
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("no hardware driver"), "{e}");
    }

    #[test]
    fn null_ports_open_by_name() {
        let mut p = open("null:1", &PortConfig::default()).unwrap();
        assert_eq!(p.info().driver, "null");
        let (mut rx, mut tx) = p.take_queues().unwrap();
        let mut b = Vec::new();
        assert_eq!(rx[0].rx_burst(&mut b, 4).unwrap(), 4);
        assert_eq!(tx[0].tx_burst(&mut b).unwrap(), 4);
    }
}
