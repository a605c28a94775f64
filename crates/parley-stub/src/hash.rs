//! The stub's hashing: FNV-1a for stable ids and keys, plus a finalizer for fault draws.
//!
//! The stub promises byte-identical answers across runs, machines and Rust releases, so it
//! cannot use `std`'s `DefaultHasher`, whose algorithm is explicitly unspecified. FNV-1a is a
//! few lines, fixed forever, and fast on the short inputs hashed per request.

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// An incremental FNV-1a 64-bit hasher.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fnv(u64);

impl Fnv {
    pub(crate) fn new() -> Self {
        Self(FNV_OFFSET)
    }

    pub(crate) fn bytes(mut self, bytes: &[u8]) -> Self {
        for &byte in bytes {
            self.0 ^= u64::from(byte);
            self.0 = self.0.wrapping_mul(FNV_PRIME);
        }
        self
    }

    pub(crate) fn u64(self, value: u64) -> Self {
        self.bytes(&value.to_le_bytes())
    }

    pub(crate) fn finish(self) -> u64 {
        self.0
    }
}

/// FNV-1a of one byte string.
pub(crate) fn fnv(bytes: &[u8]) -> u64 {
    Fnv::new().bytes(bytes).finish()
}

/// The splitmix64 finalizer: FNV's high bits are poorly mixed for short inputs, and fault
/// draws read the high bits, so they go through this first.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Maps a hash to a fraction in `[0, 1)` using its top 53 bits, all an `f64` can hold.
pub(crate) fn unit(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// The 16-digit lowercase hex form every id and key uses.
pub(crate) fn hex(h: u64) -> String {
    format!("{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_matches_reference_vectors() {
        // Published FNV-1a 64 test vectors: the empty string and "a".
        assert_eq!(fnv(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn unit_stays_below_one() {
        assert_eq!(unit(0), 0.0);
        assert!(unit(u64::MAX) < 1.0);
    }
}
