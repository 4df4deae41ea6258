//! Which PCI addresses this process has open.
//!
//! VFIO itself would let a process open the same device twice (two fds, two independent drivers
//! programming one chip), which ends in corrupted rings rather than an error. A process-global set
//! of open addresses turns that into [`Error::AlreadyOpen`]; a [`Claim`] removes its address
//! when dropped, i.e. when the device is closed.

use std::collections::BTreeSet;
use std::sync::Mutex;

use super::group::lock;
use crate::error::{Error, Result};
use crate::platform::pci::PciAddress;

/// A set of open addresses.
pub(super) struct OpenSet(Mutex<BTreeSet<PciAddress>>);

/// The addresses open in this process.
pub(super) static OPEN_DEVICES: OpenSet = OpenSet::new();

impl OpenSet {
    pub(super) const fn new() -> Self {
        OpenSet(Mutex::new(BTreeSet::new()))
    }

    /// Marks `addr` open, or fails with [`Error::AlreadyOpen`] if it already is.
    pub(super) fn claim(&'static self, addr: PciAddress) -> Result<Claim> {
        if !lock(&self.0).insert(addr) {
            return Err(Error::AlreadyOpen {
                addr: addr.to_string(),
            });
        }
        Ok(Claim { set: self, addr })
    }

    /// Whether `addr` is open.
    #[cfg(test)]
    pub(super) fn contains(&self, addr: PciAddress) -> bool {
        lock(&self.0).contains(&addr)
    }
}

/// Proof that an address is open; releases it on drop.
pub(super) struct Claim {
    set: &'static OpenSet,
    addr: PciAddress,
}

impl Drop for Claim {
    fn drop(&mut self) {
        lock(&self.set.0).remove(&self.addr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static SET: OpenSet = OpenSet::new();

    #[test]
    fn second_claim_fails_until_the_first_is_dropped() {
        let a: PciAddress = "0000:01:00.0".parse().unwrap();
        let b: PciAddress = "0000:01:00.1".parse().unwrap();
        let first = SET.claim(a).unwrap();
        let _other = SET.claim(b).unwrap();
        let err = SET.claim(a).err().expect("second open must fail");
        assert!(matches!(&err, Error::AlreadyOpen { addr } if addr == "0000:01:00.0"));
        assert!(err.to_string().contains("drop the first handle"));
        assert!(SET.contains(a));
        drop(first);
        assert!(!SET.contains(a));
        let _again = SET.claim(a).unwrap();
        assert!(SET.contains(b));
    }
}
