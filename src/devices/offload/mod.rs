//! Transmit offloads, device-independent: what an application asks for with a packet's
//! [`TxOffload`] request (IPv4 header checksum, TCP/UDP checksum, TCP segmentation;
//! [`Packet::set_tx_offload`]), checked once
//! ([`Request::of`]), and the software that does the same work for a device that cannot
//! ([`soft`]), byte for byte what the Intel chips put on the wire.
//!
//! Why it lives here: every driver needs the same answer to "is this request well formed" and
//! the same fallback, and an application must never branch on the device (DPDK makes it check
//! `tx_offload_capa` and call its GSO library itself). A driver with hardware offloads (the
//! Intel rings, `devices::intel::offload`) prepares the frame as its chip wants and writes a
//! context descriptor; every other driver calls [`soft::resolve`] at the top of its transmit
//! burst, which replaces each request by its result: checksums written in place, a TSO frame
//! replaced by its segments. Frames whose request cannot be honoured are dropped and counted
//! (never sent malformed), with the reason logged once per queue.
//!
//! The rules the Intel datasheets set, which the software follows (82599 datasheet 7.2.4.7,
//! 82576 datasheet 7.2.4; Linux `ixgbe_tso`, `igb_tso`):
//! - a TSO frame is one header (`l2_len + l3_len + l4_len` bytes, all in the first segment) and
//!   a payload, cut into `tso_mss`-byte pieces; each segment gets the header with its own IPv4
//!   total length (or IPv6 payload length), IPv4 identification + 1 per segment, IPv4 header
//!   checksum, TCP sequence number, TCP checksum, and FIN and PSH only on the last segment (the
//!   default DTXTCPFLGL/DTXTCPFLGH masks clear them elsewhere);
//! - a UDP checksum that sums to 0 is sent as 0xffff (RFC 768);
//! - the checksum fields the application leaves in the frame do not matter.

pub mod soft;

use crate::platform::dma::Packet;
pub use crate::platform::dma::TxOffload;

/// Why a transmit offload request cannot be honoured. The frame is dropped and counted, never
/// sent malformed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OffloadError {
    /// TSO with an MSS of 0.
    #[error("TSO asked with an MSS of 0; set tso_mss to the TCP payload bytes per segment")]
    MssZero,
    /// The headers do not fit in the first segment (where every device and the software look
    /// for them).
    #[error("the {header}-byte header (l2_len + l3_len + l4_len) is longer than the frame's first segment ({first} bytes); put the headers in the first buffer")]
    HeaderBeyondFirstSegment {
        /// l2_len + l3_len (+ l4_len for TSO and the L4 checksum's field).
        header: usize,
        /// Bytes in the first segment.
        first: usize,
    },
    /// The lengths in the metadata do not describe an IP header.
    #[error("l2_len {l2} / l3_len {l3} / l4_len {l4} do not describe the frame: l2_len is 14 to 127, l3_len 20 (IPv4) or 40 (IPv6) to 511, l4_len 20 to 60 for TCP (its data offset) and 8 for UDP")]
    BadLengths {
        /// `l2_len`.
        l2: u8,
        /// `l3_len`.
        l3: u16,
        /// `l4_len`.
        l4: u8,
    },
    /// The IPv4 header checksum was asked of a frame whose L3 header is not IPv4.
    #[error("IP_CSUM asked of a frame that is not IPv4 at l2_len (version {version})")]
    NotIpv4 {
        /// The version nibble found at `l2_len`.
        version: u8,
    },
    /// The L3 header is neither IPv4 nor IPv6.
    #[error("an L4 offload asked of a frame that is not IP at l2_len (version {version})")]
    NotIp {
        /// The version nibble found at `l2_len`.
        version: u8,
    },
    /// The L4 protocol in the IP header is not the one asked for.
    #[error("{asked} checksum asked of a frame whose IP protocol is {found}")]
    WrongProtocol {
        /// "TCP" or "UDP".
        asked: &'static str,
        /// The protocol number in the IP header.
        found: u8,
    },
    /// TCP and UDP checksums asked together.
    #[error("TCP_CSUM and UDP_CSUM asked together; a frame has one L4 header")]
    BothL4,
    /// TSO asked of a UDP request.
    #[error("TSO segments TCP only; clear UDP_CSUM")]
    TsoNotTcp,
    /// A TSO payload longer than the devices take (the 82599's PAYLEN: 18 bits), or a frame
    /// without TSO longer than the largest frame.
    #[error("a {len}-byte frame is longer than the {max} bytes this offload takes")]
    TooLong {
        /// The frame's length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// No buffer for a segment (software TSO): the pool is exhausted.
    #[error(
        "no free buffer in the frame's pool for a TSO segment; free packets or enlarge the pool"
    )]
    NoBuffer,
}

/// The longest TSO payload the Intel chips take (PAYLEN is 18 bits), and so ours.
pub const MAX_TSO_PAYLOAD: usize = (1 << 18) - 1;

/// The L4 protocol of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L4 {
    /// TCP (protocol 6), checksum field at offset 16.
    Tcp,
    /// UDP (protocol 17), checksum field at offset 6.
    Udp,
}

impl L4 {
    /// The IP protocol number.
    pub fn protocol(self) -> u8 {
        match self {
            L4::Tcp => 6,
            L4::Udp => 17,
        }
    }

    /// Where the checksum field is in the L4 header.
    pub fn csum_offset(self) -> usize {
        match self {
            L4::Tcp => 16,
            L4::Udp => 6,
        }
    }
}

/// A checked transmit offload request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// Bytes of the L2 header.
    pub l2: usize,
    /// Bytes of the L3 header.
    pub l3: usize,
    /// Bytes of the L4 header (TSO; for a checksum alone, 8 for UDP and the TCP data offset).
    pub l4: usize,
    /// The L3 header is IPv4 (else IPv6).
    pub ipv4: bool,
    /// Write the IPv4 header checksum.
    pub ip_csum: bool,
    /// Write this L4 checksum.
    pub l4_csum: Option<L4>,
    /// Segment with this MSS.
    pub tso: Option<u16>,
}

impl Request {
    /// The request `p` carries, checked against its frame: `Ok(None)` when it asks for no
    /// offload.
    pub fn of(p: &Packet) -> Result<Option<Request>, OffloadError> {
        let m = p.tx_offload();
        let f = m.flags;
        if f & TxOffload::ALL == 0 {
            return Ok(None);
        }
        let bad = OffloadError::BadLengths {
            l2: m.l2_len,
            l3: m.l3_len,
            l4: m.l4_len,
        };
        let tso = f & TxOffload::TSO != 0;
        let l4_csum = match (
            f & TxOffload::TCP_CSUM != 0 || tso,
            f & TxOffload::UDP_CSUM != 0,
        ) {
            (true, true) if tso => return Err(OffloadError::TsoNotTcp),
            (true, true) => return Err(OffloadError::BothL4),
            (true, false) => Some(L4::Tcp),
            (false, true) => Some(L4::Udp),
            (false, false) => None,
        };
        if tso && m.tso_mss == 0 {
            return Err(OffloadError::MssZero);
        }
        let (l2, l3) = (usize::from(m.l2_len), usize::from(m.l3_len));
        let head = p.data();
        // MACLEN is 7 bits and IPLEN 9 in the Intel context descriptor: the limits of every
        // device here.
        if !(14..=127).contains(&l2) || !(20..=511).contains(&l3) {
            return Err(bad);
        }
        if head.len() < l2 + l3 {
            return Err(OffloadError::HeaderBeyondFirstSegment {
                header: l2 + l3,
                first: head.len(),
            });
        }
        let version = head[l2] >> 4;
        let ipv4 = match version {
            4 => true,
            6 => false,
            _ if l4_csum.is_none() => return Err(OffloadError::NotIpv4 { version }),
            _ => return Err(OffloadError::NotIp { version }),
        };
        let ip_csum = ipv4 && (f & TxOffload::IP_CSUM != 0 || tso);
        if f & TxOffload::IP_CSUM != 0 && !ipv4 {
            return Err(OffloadError::NotIpv4 { version });
        }
        if (ipv4 && usize::from(head[l2] & 0xf) * 4 != l3) || (!ipv4 && l3 < 40) {
            return Err(bad);
        }
        let mut l4 = usize::from(m.l4_len);
        if let Some(proto) = l4_csum {
            // IPv6 with extension headers: the last next-header is not checked here.
            let found = if ipv4 {
                Some(head[l2 + 9])
            } else {
                (l3 == 40).then(|| head[l2 + 6])
            };
            if let Some(found) = found.filter(|&n| n != proto.protocol()) {
                let asked = if proto == L4::Tcp { "TCP" } else { "UDP" };
                return Err(OffloadError::WrongProtocol { asked, found });
            }
            let need = l2 + l3 + proto.csum_offset() + 2;
            if head.len() < need {
                return Err(OffloadError::HeaderBeyondFirstSegment {
                    header: need,
                    first: head.len(),
                });
            }
            if proto == L4::Udp {
                l4 = 8;
            } else {
                let offset = usize::from(head[l2 + l3 + 12] >> 4) * 4;
                if (tso && l4 != offset) || offset < 20 {
                    return Err(bad);
                }
                l4 = offset;
            }
        }
        let len = p.frame_len();
        if tso {
            if head.len() < l2 + l3 + l4 {
                return Err(OffloadError::HeaderBeyondFirstSegment {
                    header: l2 + l3 + l4,
                    first: head.len(),
                });
            }
            let payload = len - (l2 + l3 + l4);
            if payload > MAX_TSO_PAYLOAD {
                return Err(OffloadError::TooLong {
                    len,
                    max: MAX_TSO_PAYLOAD + l2 + l3 + l4,
                });
            }
        } else if len > usize::from(u16::MAX) {
            return Err(OffloadError::TooLong {
                len,
                max: usize::from(u16::MAX),
            });
        }
        Ok(Some(Request {
            l2,
            l3,
            l4,
            ipv4,
            ip_csum,
            l4_csum,
            tso: tso.then_some(m.tso_mss),
        }))
    }

    /// Bytes of the whole header (what every TSO segment repeats).
    pub fn header_len(&self) -> usize {
        self.l2 + self.l3 + self.l4
    }
}

/// What a transmit queue without offloads takes as it is; [`soft::resolve`] does the rest (every
/// checksum and TSO, and linearizing chains for a queue without gather). A device with
/// hardware offloads does not call it (the Intel rings prepare frames themselves).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TxCaps {
    /// Frames of several buffers (one descriptor or part per segment).
    pub chains: bool,
}

impl TxCaps {
    /// A device that takes chained frames but computes nothing (af_packet: its copy gathers the
    /// segments).
    pub const CHAINS: TxCaps = TxCaps { chains: true };
    /// A device that takes one buffer per frame and computes nothing.
    pub const NONE: TxCaps = TxCaps { chains: false };
}

#[cfg(test)]
pub(crate) mod tests;
