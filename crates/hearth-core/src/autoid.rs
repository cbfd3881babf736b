//! Auto ids: 20 characters from `[A-Za-z0-9]`, uniformly random, so new documents scatter
//! over the key space instead of piling onto one end of it (seed 001: no monotonic ids).

/// Length of an auto id.
pub const AUTO_ID_LEN: usize = 20;
const ALPHABET: &[u8; 62] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/// Builds an auto id from a source of random bytes (the caller supplies the randomness, so the
/// core stays free of I/O). Rejection sampling keeps every character uniform.
pub fn auto_id_from(mut random_byte: impl FnMut() -> u8) -> String {
    let mut id = String::with_capacity(AUTO_ID_LEN);
    while id.len() < AUTO_ID_LEN {
        let b = random_byte();
        // 248 = 62 * 4: bytes at or above it would bias the first characters.
        if b < 248 {
            id.push(ALPHABET[usize::from(b % 62)] as char);
        }
    }
    id
}
