//! The VLAN filter table: 4096 bits, one per VID, in the layout Intel NICs use (VFTA).
//!
//! Word `vid / 32`, bit `vid % 32`: the 128 words of [`VlanFilter::words`] are exactly what a
//! driver writes to the 82576's and 82599's VFTA registers after a reset, so the table kept here
//! is the configuration that survives resets. VID 0 (priority tags) is always a member, so the
//! hardware passes priority-tagged frames like the software filter does; VID 4095 is never one.
//!
//! [`VlanFilter`] is the plain value (configuration, snapshots for drivers); the control handle
//! keeps an `AtomicFilter` (128 `AtomicU32`) that the receive bursts read with one relaxed load
//! per tagged frame while another thread adds and removes VIDs.

use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

use super::tag::Vid;
use crate::error::Result;

/// Number of 32-bit words in the table.
pub const FILTER_WORDS: usize = 128;

/// A 4096-bit VLAN membership table.
#[derive(Clone, PartialEq, Eq)]
pub struct VlanFilter {
    words: [u32; FILTER_WORDS],
}

impl Default for VlanFilter {
    /// Only VID 0 (priority tags).
    fn default() -> Self {
        let mut words = [0; FILTER_WORDS];
        words[0] = 1;
        VlanFilter { words }
    }
}

impl fmt::Debug for VlanFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl VlanFilter {
    /// A table with only VID 0.
    pub fn new() -> VlanFilter {
        VlanFilter::default()
    }

    /// A table with VID 0 and `vids`.
    pub fn with(vids: impl IntoIterator<Item = u16>) -> Result<VlanFilter> {
        let mut f = VlanFilter::new();
        for v in vids {
            f.add(v)?;
        }
        Ok(f)
    }

    /// Adds a VID; returns whether it was new. 4095 and values above are refused.
    pub fn add(&mut self, vid: u16) -> Result<bool> {
        let v = Vid::new(vid)?.get() as usize;
        let (w, b) = (v / 32, 1u32 << (v % 32));
        let new = self.words[w] & b == 0;
        self.words[w] |= b;
        Ok(new)
    }

    /// Removes a VID; returns whether it was a member. VID 0 stays a member (priority tags are
    /// always received): removing it returns `Ok(false)`. 4095 and values above are refused.
    pub fn remove(&mut self, vid: u16) -> Result<bool> {
        let v = Vid::new(vid)?.get() as usize;
        if v == 0 {
            return Ok(false);
        }
        let (w, b) = (v / 32, 1u32 << (v % 32));
        let was = self.words[w] & b != 0;
        self.words[w] &= !b;
        Ok(was)
    }

    /// Whether frames with this VID pass (VID 0 always does; 4095 and above never).
    #[inline]
    pub fn contains(&self, vid: u16) -> bool {
        let v = vid as usize;
        v < 4095 && self.words[v / 32] & (1 << (v % 32)) != 0
    }

    /// The members, in increasing order (VID 0 first).
    pub fn iter(&self) -> impl Iterator<Item = u16> + '_ {
        (0..4095u16).filter(move |&v| self.contains(v))
    }

    /// Number of members (VID 0 included).
    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Never true: VID 0 is always a member. (For API completeness.)
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The 128 words as VFTA registers take them: word `vid / 32`, bit `vid % 32`.
    pub fn words(&self) -> &[u32; FILTER_WORDS] {
        &self.words
    }

    /// A table from VFTA words (a driver reading back the device). Bit 4095 is cleared and bit 0
    /// set, keeping the table's rules.
    pub fn from_words(mut words: [u32; FILTER_WORDS]) -> VlanFilter {
        words[0] |= 1;
        words[FILTER_WORDS - 1] &= !(1 << 31);
        VlanFilter { words }
    }
}

/// The table shared between the control handle (writer) and the receive bursts (readers).
pub(crate) struct AtomicFilter {
    words: [AtomicU32; FILTER_WORDS],
}

impl AtomicFilter {
    pub(crate) fn new(from: &VlanFilter) -> AtomicFilter {
        AtomicFilter {
            words: from.words.map(AtomicU32::new),
        }
    }

    /// One relaxed load. `vid` is 12 bits (from a TCI); 4095 is never a member.
    #[inline(always)]
    pub(crate) fn contains(&self, vid: u16) -> bool {
        let v = (vid & 0x0fff) as usize;
        v < 4095 && self.words[v / 32].load(Relaxed) & (1 << (v % 32)) != 0
    }

    pub(crate) fn store(&self, from: &VlanFilter) {
        for (a, &w) in self.words.iter().zip(from.words.iter()) {
            a.store(w, Relaxed);
        }
    }

    pub(crate) fn snapshot(&self) -> VlanFilter {
        VlanFilter {
            words: std::array::from_fn(|i| self.words[i].load(Relaxed)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn boundaries_of_the_table() {
        let mut f = VlanFilter::new();
        assert!(f.contains(0));
        assert_eq!(f.iter().collect::<Vec<_>>(), vec![0]);
        for v in [1u16, 31, 32, 4094, 1234] {
            assert!(!f.contains(v));
            assert!(f.add(v).unwrap());
            assert!(!f.add(v).unwrap());
            assert!(f.contains(v));
        }
        assert_eq!(f.words()[0], 0x8000_0003);
        assert_eq!(f.words()[1], 1);
        assert_eq!(f.words()[127], 1 << 30);
        assert_eq!(f.iter().collect::<Vec<_>>(), vec![0, 1, 31, 32, 1234, 4094]);
        assert!(f.remove(31).unwrap());
        assert!(!f.remove(31).unwrap());
        assert!(!f.contains(31) && f.contains(32));
        assert!(!f.remove(0).unwrap());
        assert!(f.contains(0));
        assert!(matches!(f.add(4095), Err(Error::ReservedVlanId { .. })));
        assert!(f.remove(4095).is_err());
        assert!(f.add(5000).is_err());
        assert!(!f.contains(4095) && !f.contains(u16::MAX));
        assert_eq!(f.len(), 5);
        let g = VlanFilter::from_words(*f.words());
        assert_eq!(g, f);
        let a = AtomicFilter::new(&f);
        assert!(a.contains(1234) && !a.contains(31) && a.contains(0) && !a.contains(4095));
        assert_eq!(a.snapshot(), f);
        assert!(VlanFilter::from_words([u32::MAX; 128])
            .iter()
            .all(|v| v < 4095));
    }
}
