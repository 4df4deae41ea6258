//! The Internet checksum (RFC 1071), for the headers that checksum offload verifies: the
//! software 82599 checks and fills them as the device would, and the application helpers
//! ([`crate::app::wire`], which re-exports these) build and verify frames with them.

/// Adds `data` to a running ones'-complement sum (RFC 1071); odd lengths are padded with a zero.
///
/// Eight bytes at a time: the ones'-complement sum does not depend on byte order (RFC 1071
/// section 2(B)), so native-order 64-bit words are summed with end-around carry, folded to 16
/// bits, and swapped back into the big-endian sum the header fields use. The result is the same
/// as summing big-endian 16-bit words one by one (the reference in the tests), in about a
/// quarter of the instructions; the software 82599 verifies two checksums per received frame.
pub fn checksum_add(sum: u32, data: &[u8]) -> u32 {
    let mut acc: u64 = 0;
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        let (s, carry) = acc.overflowing_add(u64::from_ne_bytes(w.try_into().unwrap()));
        acc = s + u64::from(carry);
    }
    // Fold the 64-bit native-order sum to 16 bits, then into big-endian order.
    let mut folded = (acc & 0xffff_ffff) + (acc >> 32);
    while folded >> 16 != 0 {
        folded = (folded & 0xffff) + (folded >> 16);
    }
    let mut sum = sum + u32::from((folded as u16).to_be());
    let mut rest = words.remainder().chunks_exact(2);
    for c in &mut rest {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = rest.remainder() {
        sum += u32::from(*last) << 8;
    }
    sum
}

/// Folds a running sum to 16 bits with end-around carry, not complemented: a partial sum to
/// carry on with (the pseudo-header sum a checksum offload starts from, say).
pub fn checksum_fold(mut sum: u32) -> u16 {
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// Folds a running sum into the 16-bit Internet checksum (complemented).
pub fn checksum_finish(sum: u32) -> u16 {
    !checksum_fold(sum)
}

/// The Internet checksum of `data`. A buffer that contains its own correct checksum sums to 0.
pub fn checksum(data: &[u8]) -> u16 {
    checksum_finish(checksum_add(0, data))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition: big-endian 16-bit words summed one by one.
    fn reference(sum: u32, data: &[u8]) -> u32 {
        let mut sum = u64::from(sum);
        for c in data.chunks(2) {
            sum += u64::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
        }
        while sum >> 16 != 0 {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        sum as u32
    }

    proptest::proptest! {
        #[test]
        fn the_fast_sum_equals_the_definition(
            data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
            start in 0u32..0x2_0000,
        ) {
            let fold = |s: u32| checksum_finish(s);
            proptest::prop_assert_eq!(fold(checksum_add(start, &data)), fold(reference(start, &data)));
        }
    }

    #[test]
    fn all_ones_words_and_a_known_header() {
        // Carries out of every word: 0xffff words sum to 0xffff (negative zero).
        assert_eq!(checksum_finish(checksum_add(0, &[0xff; 64])), 0);
        // RFC 1071's example bytes 00 01 f2 03 f4 f5 f6 f7: sum 0xddf2.
        let s = checksum_add(0, &[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]);
        assert_eq!(!checksum_finish(s), 0xddf2);
    }
}
