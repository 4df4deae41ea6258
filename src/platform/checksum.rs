//! The Internet checksum (RFC 1071), for the headers that checksum offload verifies: the
//! software 82599 checks and fills them as the device would, and the application helpers
//! ([`crate::app::wire`], which re-exports these) build and verify frames with them.

/// Adds `data` to a running ones'-complement sum (RFC 1071); odd lengths are padded with a zero.
pub fn checksum_add(mut sum: u32, data: &[u8]) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    sum
}

/// Folds a running sum into the 16-bit Internet checksum (complemented).
pub fn checksum_finish(mut sum: u32) -> u16 {
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The Internet checksum of `data`. A buffer that contains its own correct checksum sums to 0.
pub fn checksum(data: &[u8]) -> u16 {
    checksum_finish(checksum_add(0, data))
}
