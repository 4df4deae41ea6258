//! The values of 802.1Q: VLAN IDs, tag control fields, tag protocol identifiers, and the modes.
//!
//! Why these types:
//! - A [`Tci`] is the raw 16-bit field as it travels: whatever a frame carried on receive is
//!   representable (VID 4095 included, because a peer may send it), and accessors split it into
//!   PCP, DEI and VID. Building one from parts goes through [`Vid`], which refuses VID 4095: that is
//!   where policy ("802.1Q reserves 4095, never configure or send it") is enforced, once, at
//!   configuration time, so that per-packet code only copies 16-bit words.
//! - A [`Tpid`] is an ethertype (at least 0x0600, otherwise it would read as a length field).
//! - The modes are plain enums with short names (`hw`, `sw`, `deferred`) for command lines.

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

/// The largest VID that may be configured or sent (4095 is reserved by IEEE 802.1Q).
pub const MAX_VID: u16 = 4094;

/// The VID that IEEE 802.1Q reserves: never a filter entry, never a transmit tag.
pub const RESERVED_VID: u16 = 4095;

/// A VLAN ID that may be configured or sent: 0 (priority tag only) to 4094.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Vid(u16);

impl Vid {
    /// VID 0: the frame carries a priority (PCP) but belongs to no VLAN.
    pub const PRIORITY: Vid = Vid(0);

    /// Validates a VLAN ID: 4095 is refused because 802.1Q reserves it, anything above because a
    /// VID has 12 bits.
    pub fn new(vid: u16) -> Result<Vid> {
        match vid {
            0..=MAX_VID => Ok(Vid(vid)),
            RESERVED_VID => Err(Error::ReservedVlanId {
                what: "as a filter entry or a transmit tag",
            }),
            _ => Err(Error::InvalidConfig(format!(
                "VLAN ID {vid} is out of range: a VID has 12 bits; use 1 to 4094 (0 for a priority tag only)"
            ))),
        }
    }

    /// The number.
    #[inline(always)]
    pub fn get(self) -> u16 {
        self.0
    }
}

impl fmt::Display for Vid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl FromStr for Vid {
    type Err = Error;
    fn from_str(s: &str) -> Result<Vid> {
        let v: u16 = s.trim().parse().map_err(|_| {
            Error::InvalidConfig(format!(
                "'{s}' is not a VLAN ID: write a number from 1 to 4094 (0 for a priority tag only)"
            ))
        })?;
        Vid::new(v)
    }
}

impl TryFrom<u16> for Vid {
    type Error = Error;
    fn try_from(v: u16) -> Result<Vid> {
        Vid::new(v)
    }
}

/// The tag control information: PCP (3 bits), DEI (1 bit), VID (12 bits), as on the wire.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Tci(u16);

impl Tci {
    /// A TCI from its parts. The VID is a validated [`Vid`]; a PCP above 7 is refused.
    pub fn new(vid: Vid, pcp: u8, dei: bool) -> Result<Tci> {
        if pcp > 7 {
            return Err(Error::InvalidConfig(format!(
                "VLAN priority (PCP) {pcp} is out of range: it has 3 bits, use 0 to 7"
            )));
        }
        Ok(Tci(((pcp as u16) << 13) | ((dei as u16) << 12) | vid.get()))
    }

    /// A TCI with only a VID (PCP 0, DEI 0).
    pub fn from_vid(vid: Vid) -> Tci {
        Tci(vid.get())
    }

    /// The raw 16-bit field, as received (any value, VID 4095 included).
    #[inline(always)]
    pub const fn from_raw(raw: u16) -> Tci {
        Tci(raw)
    }

    /// The raw 16-bit field.
    #[inline(always)]
    pub const fn raw(self) -> u16 {
        self.0
    }

    /// The VLAN ID (12 bits).
    #[inline(always)]
    pub const fn vid(self) -> u16 {
        self.0 & 0x0fff
    }

    /// The priority code point (3 bits).
    #[inline(always)]
    pub const fn pcp(self) -> u8 {
        (self.0 >> 13) as u8
    }

    /// The drop eligible indicator.
    #[inline(always)]
    pub const fn dei(self) -> bool {
        self.0 & 0x1000 != 0
    }

    /// Whether this is a priority tag only (VID 0).
    #[inline(always)]
    pub const fn is_priority_only(self) -> bool {
        self.vid() == 0
    }

    /// Whether the VID is the reserved 4095 (allowed on receive, never sent by this crate).
    #[inline(always)]
    pub const fn is_reserved(self) -> bool {
        self.vid() == RESERVED_VID
    }
}

impl fmt::Display for Tci {
    /// "vid 100 pcp 5 dei 0".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "vid {} pcp {} dei {}",
            self.vid(),
            self.pcp(),
            self.dei() as u8
        )
    }
}

impl FromStr for Tci {
    type Err = Error;
    /// "VID" or "VID:PCP" (DEI 0), e.g. "100" or "100:5".
    fn from_str(s: &str) -> Result<Tci> {
        let (vid, pcp) = match s.split_once(':') {
            Some((v, p)) => {
                let pcp: u8 = p.trim().parse().map_err(|_| {
                    Error::InvalidConfig(format!(
                        "'{s}' is not a VLAN tag: the priority after ':' must be a number from 0 to 7 (write VID[:PCP], e.g. 100:5)"
                    ))
                })?;
                (v, pcp)
            }
            None => (s, 0),
        };
        let vid: Vid = vid.parse().map_err(|e| match e {
            Error::InvalidConfig(m) => {
                Error::InvalidConfig(format!("'{s}' is not a VLAN tag (write VID[:PCP]): {m}"))
            }
            other => other,
        })?;
        Tci::new(vid, pcp, false)
    }
}

/// A tag protocol identifier: the ethertype that marks a VLAN tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tpid(u16);

impl Tpid {
    /// 0x8100, the customer tag (C-tag) of 802.1Q.
    pub const C_TAG: Tpid = Tpid(0x8100);
    /// 0x88a8, the service tag (S-tag) of 802.1ad.
    pub const S_TAG: Tpid = Tpid(0x88a8);

    /// Validates a TPID: it must be an ethertype (0x0600 or above), not a length.
    pub fn new(tpid: u16) -> Result<Tpid> {
        if tpid < 0x0600 {
            return Err(Error::InvalidConfig(format!(
                "TPID {tpid:#06x} is not an ethertype (values below 0x0600 are frame lengths); use 0x8100 (C-tag) or 0x88a8 (S-tag)"
            )));
        }
        Ok(Tpid(tpid))
    }

    /// The ethertype.
    #[inline(always)]
    pub const fn get(self) -> u16 {
        self.0
    }

    /// For values that were validated when stored.
    #[inline(always)]
    pub(crate) const fn from_raw_unchecked(tpid: u16) -> Tpid {
        Tpid(tpid)
    }
}

impl Default for Tpid {
    /// 0x8100.
    fn default() -> Self {
        Tpid::C_TAG
    }
}

impl fmt::Display for Tpid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#06x}", self.0)
    }
}

impl FromStr for Tpid {
    type Err = Error;
    /// "0x8100", "8100", "c-tag" or "s-tag".
    fn from_str(s: &str) -> Result<Tpid> {
        let t = s.trim();
        match t.to_ascii_lowercase().as_str() {
            "c-tag" | "ctag" => return Ok(Tpid::C_TAG),
            "s-tag" | "stag" => return Ok(Tpid::S_TAG),
            _ => {}
        }
        let hex = t
            .strip_prefix("0x")
            .or_else(|| t.strip_prefix("0X"))
            .unwrap_or(t);
        let v = u16::from_str_radix(hex, 16).map_err(|_| {
            Error::InvalidConfig(format!(
                "'{s}' is not a TPID: write a hexadecimal ethertype such as 0x8100 or 0x88a8"
            ))
        })?;
        Tpid::new(v)
    }
}

/// Where received tags are removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RxMode {
    /// The device strips and reports the TCI in the descriptor.
    Hardware,
    /// The VLAN layer strips inside the receive burst.
    #[default]
    Software,
    /// Nothing in the burst: the application's [`take_vlan`](crate::vlan::PacketVlan::take_vlan)
    /// strips when it asks.
    Deferred,
}

impl RxMode {
    /// Every mode, in a fixed order (for tests and benchmarks).
    pub const ALL: [RxMode; 3] = [RxMode::Hardware, RxMode::Software, RxMode::Deferred];

    pub(crate) const fn to_bits(self) -> u64 {
        match self {
            RxMode::Hardware => 0,
            RxMode::Software => 1,
            RxMode::Deferred => 2,
        }
    }

    pub(crate) const fn from_bits(b: u64) -> RxMode {
        match b & 3 {
            0 => RxMode::Hardware,
            1 => RxMode::Software,
            _ => RxMode::Deferred,
        }
    }
}

impl fmt::Display for RxMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RxMode::Hardware => "hw",
            RxMode::Software => "sw",
            RxMode::Deferred => "deferred",
        })
    }
}

impl FromStr for RxMode {
    type Err = Error;
    /// "hw", "sw" or "deferred" (also "hardware", "software").
    fn from_str(s: &str) -> Result<RxMode> {
        match s.trim().to_ascii_lowercase().as_str() {
            "hw" | "hardware" => Ok(RxMode::Hardware),
            "sw" | "software" => Ok(RxMode::Software),
            "deferred" | "defer" => Ok(RxMode::Deferred),
            _ => Err(Error::InvalidConfig(format!(
                "'{s}' is not a VLAN receive mode: use hw, sw or deferred"
            ))),
        }
    }
}

/// Where transmit tags are inserted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TxMode {
    /// The device inserts (on Intel parts: a context descriptor with the TCI, VLE in the data
    /// descriptor).
    Hardware,
    /// The VLAN layer writes the tag into the headroom before the driver sees the packet.
    #[default]
    Software,
}

impl TxMode {
    /// Every mode.
    pub const ALL: [TxMode; 2] = [TxMode::Hardware, TxMode::Software];
}

impl fmt::Display for TxMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TxMode::Hardware => "hw",
            TxMode::Software => "sw",
        })
    }
}

impl FromStr for TxMode {
    type Err = Error;
    /// "hw" or "sw" (also "hardware", "software").
    fn from_str(s: &str) -> Result<TxMode> {
        match s.trim().to_ascii_lowercase().as_str() {
            "hw" | "hardware" => Ok(TxMode::Hardware),
            "sw" | "software" => Ok(TxMode::Software),
            _ => Err(Error::InvalidConfig(format!(
                "'{s}' is not a VLAN transmit mode: use hw or sw"
            ))),
        }
    }
}

/// The per-packet refusal of [`set_tx_vlan`](crate::vlan::PacketVlan::set_tx_vlan): the TCI
/// carries VID 4095. Zero-sized, so the per-packet call returns it in a flag register; it
/// converts into [`Error::ReservedVlanId`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReservedVid;

impl fmt::Display for ReservedVid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(
            &Error::ReservedVlanId {
                what: "as a transmit tag",
            },
            f,
        )
    }
}

impl std::error::Error for ReservedVid {}

impl From<ReservedVid> for Error {
    fn from(_: ReservedVid) -> Error {
        Error::ReservedVlanId {
            what: "as a transmit tag",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tci_parts_and_display() {
        let t = Tci::new(Vid::new(100).unwrap(), 5, false).unwrap();
        assert_eq!((t.vid(), t.pcp(), t.dei()), (100, 5, false));
        assert_eq!(t.to_string(), "vid 100 pcp 5 dei 0");
        assert_eq!(t.raw(), 0xa064);
        let t = Tci::from_raw(0xffff);
        assert_eq!((t.vid(), t.pcp(), t.dei()), (4095, 7, true));
        assert!(t.is_reserved());
        assert_eq!(t.to_string(), "vid 4095 pcp 7 dei 1");
        assert!(Tci::new(Vid::PRIORITY, 8, false).is_err());
    }

    #[test]
    fn tci_parses() {
        assert_eq!("100".parse::<Tci>().unwrap().raw(), 100);
        assert_eq!(
            "100:5".parse::<Tci>().unwrap().to_string(),
            "vid 100 pcp 5 dei 0"
        );
        assert_eq!("0:7".parse::<Tci>().unwrap().vid(), 0);
        let e = "4095".parse::<Tci>().unwrap_err().to_string();
        assert!(e.contains("reserves") && e.contains("802.1Q"), "{e}");
        for bad in ["", "x", "4096", "100:8", "100:", "-1", "1:2:3"] {
            assert!(bad.parse::<Tci>().is_err(), "{bad}");
        }
    }

    #[test]
    fn vid_policy() {
        assert!(Vid::new(0).is_ok());
        assert!(Vid::new(4094).is_ok());
        let e = Vid::new(4095).unwrap_err();
        assert!(matches!(e, Error::ReservedVlanId { .. }));
        assert!(e.to_string().contains("reserves"), "{e}");
        assert!(Vid::new(4096).unwrap_err().to_string().contains("12 bits"));
    }

    #[test]
    fn tpid_and_modes_parse() {
        assert_eq!("0x88a8".parse::<Tpid>().unwrap(), Tpid::S_TAG);
        assert_eq!("8100".parse::<Tpid>().unwrap(), Tpid::C_TAG);
        assert_eq!("s-tag".parse::<Tpid>().unwrap(), Tpid::S_TAG);
        assert_eq!(Tpid::S_TAG.to_string(), "0x88a8");
        assert!("0x0100".parse::<Tpid>().is_err());
        assert!("zz".parse::<Tpid>().is_err());
        for m in RxMode::ALL {
            assert_eq!(m.to_string().parse::<RxMode>().unwrap(), m);
            assert_eq!(RxMode::from_bits(m.to_bits()), m);
        }
        for m in TxMode::ALL {
            assert_eq!(m.to_string().parse::<TxMode>().unwrap(), m);
        }
        assert!("deferred".parse::<TxMode>().is_err());
        assert!("fast"
            .parse::<RxMode>()
            .unwrap_err()
            .to_string()
            .contains("hw, sw or deferred"));
        let e: Error = ReservedVid.into();
        assert!(e.to_string().contains("transmit tag"));
    }
}
