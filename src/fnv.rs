//! 64-bit FNV-1a: a hash the same on every build and every server, cheap on short keys. Used
//! where a value must not change between processes (a cursor's fingerprint and marks), for
//! words (duplicate collapse) and for the fixed WordPiece vocabulary.

/// The hash of no bytes.
pub(crate) const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

const PRIME: u64 = 0x0000_0100_0000_01b3;

/// One byte into a hash.
pub(crate) fn step(h: u64, b: u8) -> u64 {
    (h ^ u64::from(b)).wrapping_mul(PRIME)
}

/// The hash of `bytes`.
pub(crate) fn hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(OFFSET, |h, &b| step(h, b))
}
