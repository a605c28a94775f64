//! A small, deterministic generator (SplitMix64) for generated tasks and seeded choices: the
//! same seed gives the same sequence on every machine, and the project needs no randomness
//! crate for it.

/// SplitMix64 (Steele, Lea and Flood): a 64-bit state advanced by a constant, then mixed.
#[derive(Debug, Clone)]
pub struct SplitMix(u64);

impl SplitMix {
    pub fn new(seed: u64) -> SplitMix {
        SplitMix(seed)
    }

    /// The generator for item `index` of a sequence seeded with `seed`: every item stands
    /// alone, so a generated file can be cut anywhere and each row is the same.
    pub fn for_item(seed: u64, index: u64) -> SplitMix {
        SplitMix(seed ^ index.wrapping_mul(0x9e37_79b9_7f4a_7c15))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number below `n` (which must not be 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sequence_is_splitmix64s() {
        // The first outputs of SplitMix64 seeded with 0 (from its reference implementation).
        let mut rng = SplitMix::new(0);
        assert_eq!(rng.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(rng.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        assert!((0..1000).all(|_| rng.below(7) < 7));
    }
}
