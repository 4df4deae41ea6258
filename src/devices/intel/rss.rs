//! The contents of the RSS registers, the same on both chips: a 40-byte key in ten registers and
//! a 128-entry redirection table, one byte per entry, four entries per register.

use crate::platform::mmio::Mmio;
use crate::platform::regs::{Reg, RegArray};

/// The RSS key: the 16-bit pattern 0x6d5a repeated. With a key whose bytes repeat every 16
/// bits the Toeplitz hash is symmetric (Woo & Park, "Scalable TCP Session Monitoring with
/// Symmetric Receive-side Scaling"), so both directions of a flow land on the same queue, which
/// is what a forwarder wants. It is fixed so that a flow's queue is reproducible across runs.
pub(crate) const RSS_KEY: [u8; 40] = {
    let mut k = [0u8; 40];
    let mut i = 0;
    while i < 40 {
        k[i] = if i % 2 == 0 { 0x6d } else { 0x5a };
        i += 1;
    }
    k
};

/// The key as the ten RSSRK register values, register 0 first.
pub(crate) fn key_words() -> impl Iterator<Item = u32> {
    RSS_KEY
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
}

/// Redirection register `i` for round-robin over `queues` queues: entries 4i..4i+3, entry 4i in
/// the low byte.
pub(crate) fn reta_word(i: u32, queues: u16) -> u32 {
    (0..4).fold(0u32, |v, b| {
        v | ((i * 4 + b) % u32::from(queues)) << (8 * b)
    })
}

/// A chip's [`RssRegs`] from its register map: both chips name the registers and the MRQC hash
/// fields alike; `mrqe` is the MRQC.MRQE value that selects RSS without virtualisation.
macro_rules! rss_regs {
    ($r:ident, mrqe = $mrqe:expr) => {
        $crate::devices::intel::rss::RssRegs {
            key: $r::RSSRK,
            reta: $r::RETA,
            rxcsum: $r::RXCSUM,
            pcsd: $r::rxcsum::PCSD.bit(),
            mrqc: $r::MRQC,
            mrqc_rss: $r::mrqc::MRQE.val($mrqe)
                | $r::mrqc::RSS_FIELD_IPV4.bit()
                | $r::mrqc::RSS_FIELD_IPV4_TCP.bit()
                | $r::mrqc::RSS_FIELD_IPV4_UDP.bit()
                | $r::mrqc::RSS_FIELD_IPV6.bit()
                | $r::mrqc::RSS_FIELD_IPV6_TCP.bit()
                | $r::mrqc::RSS_FIELD_IPV6_UDP.bit(),
        }
    };
}
pub(crate) use rss_regs;

/// Where one chip keeps its RSS registers, and what turns RSS on there.
pub(crate) struct RssRegs {
    /// The ten key registers.
    pub key: RegArray,
    /// The 32 redirection registers.
    pub reta: RegArray,
    /// RXCSUM, and its PCSD bit (RSS hash in the descriptor instead of the checksum).
    pub rxcsum: Reg,
    pub pcsd: u32,
    /// MRQC, and the value that enables RSS over IPv4/IPv6 with TCP and UDP.
    pub mrqc: Reg,
    pub mrqc_rss: u32,
}

/// Programs RSS over `queues` queues: key, round-robin redirection table, the hash in the
/// descriptor, and MRQC last (so no frame is steered by a half-written table).
pub(crate) fn setup<M: Mmio + ?Sized>(m: &M, r: &RssRegs, queues: u16) {
    for (i, w) in key_words().enumerate() {
        m.write(r.key.at(i as u32), w);
    }
    for i in 0..r.reta.count() {
        m.write(r.reta.at(i), reta_word(i, queues));
    }
    m.modify(r.rxcsum, 0, r.pcsd);
    m.write(r.mrqc, r.mrqc_rss);
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_robin_table_and_key() {
        assert_eq!(super::reta_word(0, 4), 0x0302_0100);
        assert_eq!(super::reta_word(1, 3), 0x0100_0201);
        assert_eq!(super::key_words().next(), Some(0x5a6d_5a6d));
        assert_eq!(super::key_words().count(), 10);
    }
}
