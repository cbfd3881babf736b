//! Varints: the one implementation of the variable-length integers that the document
//! encoding (on disk) and the wire protocol both write.
//!
//! ```text
//! varint = unsigned LEB128: 7 bits a byte, low group first, the high bit set on every byte
//!          but the last; at most 10 bytes (the tenth holds bit 63 only); no overlong forms
//!          (a multi-byte varint never ends in 0x00)
//! zigzag = varint of (n << 1) ^ (n >> 63), so that small negative numbers stay short
//! ```
//!
//! Both formats are stored and sent, so these bytes never change. [`read`] accepts exactly
//! what [`put`] writes: each value has one encoding, which keeps both formats canonical.

/// Why bytes are not a varint. The callers turn this into their own error with an offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum VarintError {
    /// The input ends before the varint's last byte.
    Truncated,
    /// An overlong form, or more than 64 bits.
    Malformed,
}

/// Appends the varint of `v`.
pub(crate) fn put(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The number of bytes [`put`] writes for `v`.
pub(crate) fn len(v: u64) -> usize {
    let bits = 64 - (v | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// The zigzag form of `i`: 0, -1, 1, -2, ... become 0, 1, 2, 3, ...
pub(crate) fn zigzag(i: i64) -> u64 {
    ((i << 1) ^ (i >> 63)) as u64
}

/// The inverse of [`zigzag`]; total, so any decoded varint is some `i64`.
pub(crate) fn unzigzag(u: u64) -> i64 {
    ((u >> 1) as i64) ^ -((u & 1) as i64)
}

/// Reads the varint at the start of `bytes`: its value and the number of bytes it used.
pub(crate) fn read(bytes: &[u8]) -> Result<(u64, usize), VarintError> {
    let mut v = 0u64;
    let mut shift = 0u32;
    for (i, &b) in bytes.iter().enumerate() {
        // The tenth byte holds bit 63 only; anything more overflows 64 bits.
        if shift == 63 && b > 1 {
            return Err(VarintError::Malformed);
        }
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            // A final zero group after the first byte adds nothing: an overlong form.
            if b == 0 && shift > 0 {
                return Err(VarintError::Malformed);
            }
            return Ok((v, i + 1));
        }
        shift += 7;
    }
    Err(VarintError::Truncated)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_canonical_form_is_read() {
        assert_eq!(read(&[]), Err(VarintError::Truncated));
        assert_eq!(read(&[0x80]), Err(VarintError::Truncated));
        assert_eq!(read(&[0x80, 0x00]), Err(VarintError::Malformed));
        let mut eleven = vec![0xff; 9];
        eleven.extend([0x81, 0x00]);
        assert_eq!(read(&eleven), Err(VarintError::Malformed));
        let mut over = vec![0xff; 9];
        over.push(0x02);
        assert_eq!(read(&over), Err(VarintError::Malformed));
        assert_eq!(read(&[0x7f, 0xff]), Ok((0x7f, 1)));
        assert_eq!(
            [0, -1, 1, i64::MIN].map(zigzag),
            [0, 1, 2, u64::MAX],
            "zigzag interleaves signs"
        );
    }
}
