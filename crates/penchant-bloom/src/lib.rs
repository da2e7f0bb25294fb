//! Penchant's Bloom filters.
//!
//! A [`BloomFilter`] is *blocked*: every key lives in one 512-bit block (one 64-byte cache line),
//! chosen by its hash, so an insert or a lookup touches one cache line. Inside the block, probe
//! `i` sets one bit of 64-bit word `i mod 8`, picked by a multiply-shift of the key's hash with a
//! per-probe salt (the split-block scheme of Parquet and Impala, generalised to 1..=16 probes).
//!
//! Filters are sized from a capacity and a target false-positive rate ([`BloomFilter::new`]):
//! the size and number of probes are chosen with the exact false-positive model of a blocked
//! filter ([`expected_fp_rate`]), which needs a little more space than the classic formula. A
//! filter reports its fill, its estimated false-positive rate (the mean over blocks of each
//! block's fill to the power of the probes, which is what a blocked filter really delivers) and
//! an estimate of how many keys it holds. [`BloomFilter::to_bytes`] writes a stable, versioned
//! format with a checksum; [`BloomFilter::from_bytes`] rejects anything else with an error.
//!
//! On top of it, [`PartitionedFilter`] splits a large set into fixed-size partitions chosen by
//! hash (one store cell each), and [`RotatingFilter`] keeps a per-user "seen" filter within its
//! design capacity by rotating generations.
//!
//! The crate does no I/O and depends on nothing else in Penchant.

mod format;
mod sets;

pub use format::{DecodeError, FORMAT_VERSION, HEADER_LEN};
pub use sets::{PartitionedFilter, RotatingFilter, keys_per_partition, partition_of};

/// Bits in a block: one cache line.
pub const BLOCK_BITS: usize = 512;
/// Bytes in a block.
pub const BLOCK_BYTES: usize = BLOCK_BITS / 8;
const WORDS: usize = 8;
/// Most probes per key.
pub const MAX_PROBES: u32 = 16;
/// Most blocks in one filter (256 GiB).
pub const MAX_BLOCKS: u64 = 1 << 32;

/// Odd multipliers, one per probe (the first eight are Parquet's split-block salts, widened).
const SALTS: [u64; MAX_PROBES as usize] = [
    0x47b6_137b_4497_4d91,
    0x8824_ad5b_a2b7_289d,
    0x7054_95c7_2df1_424b,
    0x9efc_4947_5c6b_fb31,
    0x2f8f_6b5b_1a3d_9e27,
    0x5c6b_fb31_7054_95c7,
    0xa2b7_289d_47b6_137b,
    0x1a3d_9e27_8824_ad5b,
    0xd6e8_feb8_6659_fd93,
    0x9e37_79b9_7f4a_7c15,
    0xbf58_476d_1ce4_e5b9,
    0x94d0_49bb_1331_11eb,
    0xff51_afd7_ed55_8ccd,
    0xc4ce_b9fe_1a85_ec53,
    0x2545_f491_4f6c_dd1d,
    0x6a09_e667_f3bc_c909,
];

/// What can be wrong with a filter's parameters.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BloomError {
    #[error("capacity must be at least 1 key, got {0}")]
    ZeroCapacity(u64),
    #[error("false-positive rate must be strictly between 0 and 1, got {0}")]
    FpRateOutOfRange(f64),
    #[error("probes must be between 1 and {MAX_PROBES}, got {0}")]
    ProbesOutOfRange(u32),
    #[error("a filter needs between 1 and {MAX_BLOCKS} blocks, got {0}")]
    BlocksOutOfRange(u64),
    #[error("filters of different shapes cannot be combined: {0} blocks × {1} probes vs {2} × {3}")]
    ShapeMismatch(usize, u32, usize, u32),
}

/// The hash of a key, as every filter of this crate uses it (XXH3, 64 bits: stable across
/// processes, machines and versions, which the binary format relies on).
pub fn key_hash(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
#[repr(C, align(64))]
struct Block([u64; WORDS]);

/// A blocked Bloom filter.
#[derive(Clone, PartialEq, Eq)]
pub struct BloomFilter {
    blocks: Vec<Block>,
    probes: u32,
}

impl std::fmt::Debug for BloomFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BloomFilter")
            .field("blocks", &self.blocks.len())
            .field("probes", &self.probes)
            .finish()
    }
}

/// Where a hash lands: its block, and the bit mask of each word of that block.
#[inline]
fn locate(hash: u64, blocks: usize, probes: u32) -> (usize, [u64; WORDS]) {
    // Fast range reduction of the hash onto the blocks (no modulo).
    let block = ((u128::from(hash) * blocks as u128) >> 64) as usize;
    // Remix for the bits inside the block, so they do not follow the block choice.
    let mut x = hash ^ (hash >> 31);
    x = x.wrapping_mul(0x7fb5_d329_728e_a185);
    x ^= x >> 27;
    // Probe `p` sets a bit of word `p mod 8`: one round of eight, a second beyond eight probes.
    // Fixed-length loops without branches, so that the compiler can do a round in vector
    // registers (eight 64-bit multiplies and shifts: one AVX-512 instruction each).
    let mut masks = [0u64; WORDS];
    let round = |masks: &mut [u64; WORDS], first: usize| {
        for (i, mask) in masks.iter_mut().enumerate() {
            let p = first + i;
            let bit = 1u64 << (x.wrapping_mul(SALTS[p]) >> 58);
            *mask |= if p < probes as usize { bit } else { 0 };
        }
    };
    round(&mut masks, 0);
    if probes as usize > WORDS {
        round(&mut masks, WORDS);
    }
    (block, masks)
}

/// Whether every bit of `masks` is set in `block`. Branch-free over the words: a lookup of an
/// absent key fails on a random word, which a short-circuiting loop would mispredict.
#[inline]
fn covers(block: &[u64; WORDS], masks: &[u64; WORDS]) -> bool {
    block
        .iter()
        .zip(masks)
        .fold(0u64, |missing, (word, mask)| missing | (mask & !word))
        == 0
}

impl BloomFilter {
    /// A filter for `capacity` keys at a false-positive rate of at most `fp_rate` once full,
    /// with the number of blocks and probes that achieve it in the least space.
    pub fn new(capacity: u64, fp_rate: f64) -> Result<Self, BloomError> {
        let (blocks, probes) = optimal_shape(capacity, fp_rate)?;
        Self::with_shape(blocks, probes)
    }

    /// A filter of exactly `blocks` blocks (512 bits each) and `probes` probes per key.
    pub fn with_shape(blocks: u64, probes: u32) -> Result<Self, BloomError> {
        if !(1..=MAX_PROBES).contains(&probes) {
            return Err(BloomError::ProbesOutOfRange(probes));
        }
        if !(1..=MAX_BLOCKS).contains(&blocks) {
            return Err(BloomError::BlocksOutOfRange(blocks));
        }
        Ok(Self {
            blocks: vec![Block::default(); blocks as usize],
            probes,
        })
    }

    /// A filter of at most `bytes` bytes (rounded down to whole blocks, at least one) with the
    /// probes that suit `capacity` keys in it.
    pub fn with_bytes(bytes: u64, capacity: u64) -> Result<Self, BloomError> {
        if capacity == 0 {
            return Err(BloomError::ZeroCapacity(capacity));
        }
        let blocks = (bytes / BLOCK_BYTES as u64).max(1);
        let probes = best_probes(capacity, blocks).0;
        Self::with_shape(blocks, probes)
    }

    /// Number of blocks.
    pub fn blocks(&self) -> usize {
        self.blocks.len()
    }

    /// Probes per key.
    pub fn probes(&self) -> u32 {
        self.probes
    }

    /// Size of the bit array in bits.
    pub fn bits(&self) -> u64 {
        self.blocks.len() as u64 * BLOCK_BITS as u64
    }

    /// Size of the bit array in bytes.
    pub fn size_bytes(&self) -> usize {
        self.blocks.len() * BLOCK_BYTES
    }

    /// Add a key. Returns true if it was not (as far as the filter can tell) there before.
    pub fn insert(&mut self, key: &[u8]) -> bool {
        self.insert_hash(key_hash(key))
    }

    /// Add a key by its [`key_hash`].
    #[inline]
    pub fn insert_hash(&mut self, hash: u64) -> bool {
        let (b, masks) = locate(hash, self.blocks.len(), self.probes);
        let block = &mut self.blocks[b].0;
        let mut new = false;
        for (word, mask) in block.iter_mut().zip(masks) {
            new |= *word & mask != mask;
            *word |= mask;
        }
        new
    }

    /// Whether the key may be in the set (false: it certainly is not).
    pub fn contains(&self, key: &[u8]) -> bool {
        self.contains_hash(key_hash(key))
    }

    /// [`BloomFilter::contains`] by the key's [`key_hash`].
    #[inline]
    pub fn contains_hash(&self, hash: u64) -> bool {
        let (b, masks) = locate(hash, self.blocks.len(), self.probes);
        covers(&self.blocks[b].0, &masks)
    }

    /// Look up many hashes at once; `out[i]` answers `hashes[i]`.
    ///
    /// Work goes in batches: all blocks of a batch are located and prefetched first, then
    /// probed, so the memory loads of a batch overlap instead of waiting on each other. On a CPU
    /// with AVX-512 (checked at run time) the same code runs compiled for it; elsewhere, for the
    /// baseline CPU.
    pub fn contains_many_hashes(&self, hashes: &[u64], out: &mut Vec<bool>) {
        out.clear();
        out.reserve(hashes.len());
        simd::contains_batch(&self.blocks, self.probes, hashes, out);
    }

    /// Look up many keys at once; the answers are in the keys' order.
    pub fn contains_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Vec<bool> {
        let hashes: Vec<u64> = keys.iter().map(|k| key_hash(k.as_ref())).collect();
        let mut out = Vec::new();
        self.contains_many_hashes(&hashes, &mut out);
        out
    }

    /// Add every key of `other` (a filter of the same shape).
    pub fn union(&mut self, other: &BloomFilter) -> Result<(), BloomError> {
        if self.blocks.len() != other.blocks.len() || self.probes != other.probes {
            return Err(BloomError::ShapeMismatch(
                self.blocks.len(),
                self.probes,
                other.blocks.len(),
                other.probes,
            ));
        }
        for (a, b) in self.blocks.iter_mut().zip(&other.blocks) {
            for (x, y) in a.0.iter_mut().zip(b.0) {
                *x |= y;
            }
        }
        Ok(())
    }

    /// Forget every key.
    pub fn clear(&mut self) {
        self.blocks.fill(Block::default());
    }

    /// Fraction of bits set.
    pub fn fill_ratio(&self) -> f64 {
        let ones: u64 = self.words().map(|w| u64::from(w.count_ones())).sum();
        ones as f64 / self.bits() as f64
    }

    /// The false-positive rate the filter delivers now, from its fill: the mean over blocks of
    /// the chance that every probe of a lookup lands on a set bit of that block — the block's
    /// fill to the power of the probes, taken word by word since probe `i` reads word `i mod 8`.
    /// (The overall fill to the power of the probes would underestimate it: a lookup lands in
    /// one block, and the fuller blocks weigh more.)
    pub fn estimated_fp_rate(&self) -> f64 {
        let k = self.probes as usize;
        let total: f64 = self
            .blocks
            .iter()
            .map(|b| {
                (0..k)
                    .map(|i| f64::from(b.0[i % WORDS].count_ones()) / 64.0)
                    .product::<f64>()
            })
            .sum();
        total / self.blocks.len() as f64
    }

    /// An estimate of how many distinct keys were inserted, from each word's fill: a word that
    /// `c` probes of each key write is `1 - (63/64)^(c·j)` full after `j` keys.
    pub fn estimated_count(&self) -> f64 {
        let per_word = probes_per_word(self.probes);
        let used = per_word.iter().filter(|c| **c > 0).count() as f64;
        let miss = (1.0 - 1.0 / 64.0f64).ln();
        self.blocks
            .iter()
            .map(|b| {
                let keys: f64 =
                    b.0.iter()
                        .zip(per_word)
                        .filter(|(_, c)| *c > 0)
                        .map(|(w, c)| {
                            // A full word only says "many": count it as if one bit were clear.
                            let fill = (f64::from(w.count_ones()) / 64.0).min(63.0 / 64.0);
                            (1.0 - fill).ln() / (f64::from(c) * miss)
                        })
                        .sum();
                keys / used
            })
            .sum()
    }

    fn words(&self) -> impl Iterator<Item = u64> + '_ {
        self.blocks.iter().flat_map(|b| b.0)
    }
}

/// The expected false-positive rate of a filter of `blocks` blocks and `probes` probes holding
/// `keys` keys, under the blocked model: keys per block follow a Poisson law, and within a block
/// probe `i` sets one of the 64 bits of word `i mod 8`.
pub fn expected_fp_rate(keys: u64, blocks: u64, probes: u32) -> f64 {
    let lambda = keys as f64 / blocks as f64;
    let per_word: Vec<u32> = probes_per_word(probes)
        .into_iter()
        .filter(|c| *c > 0)
        .collect();
    let miss_bit: f64 = 1.0 - 1.0 / 64.0;
    let fp_given = |j: f64| -> f64 {
        per_word
            .iter()
            .map(|&c| {
                // Each of the c probes of a query hits a bit that one of j * c writes set.
                let set = 1.0 - miss_bit.powf(j * f64::from(c));
                set.powi(c as i32)
            })
            .product()
    };
    // Sum over the Poisson law of keys per block, far enough into the tail.
    let hi = (lambda + 12.0 * lambda.sqrt() + 30.0).ceil() as u64;
    let mut p = (-lambda).exp();
    let mut total = 0.0;
    for j in 0..=hi {
        if j > 0 {
            p *= lambda / j as f64;
        }
        total += p * fp_given(j as f64);
    }
    total
}

/// How many of a key's probes fall in each word of its block.
fn probes_per_word(probes: u32) -> [u32; WORDS] {
    let mut per_word = [0u32; WORDS];
    for i in 0..probes as usize {
        per_word[i % WORDS] += 1;
    }
    per_word
}

/// The probes that minimise the false-positive rate for `keys` keys in `blocks` blocks.
fn best_probes(keys: u64, blocks: u64) -> (u32, f64) {
    (1..=MAX_PROBES)
        .map(|k| (k, expected_fp_rate(keys, blocks, k)))
        .fold(
            (1, f64::INFINITY),
            |best, cur| if cur.1 < best.1 { cur } else { best },
        )
}

/// The fewest blocks, and the best probes for them, that hold `capacity` keys at `fp_rate`.
pub fn optimal_shape(capacity: u64, fp_rate: f64) -> Result<(u64, u32), BloomError> {
    if capacity == 0 {
        return Err(BloomError::ZeroCapacity(capacity));
    }
    if !(fp_rate > 0.0 && fp_rate < 1.0) {
        return Err(BloomError::FpRateOutOfRange(fp_rate));
    }
    // Start from the classic optimum, m = -n ln p / ln² 2, then grow by 2% steps until the
    // blocked model meets the target.
    let classic_bits = -(capacity as f64) * fp_rate.ln() / std::f64::consts::LN_2.powi(2);
    let mut blocks = ((classic_bits / BLOCK_BITS as f64).ceil() as u64).max(1);
    loop {
        if blocks > MAX_BLOCKS {
            return Err(BloomError::BlocksOutOfRange(blocks));
        }
        let (probes, fp) = best_probes(capacity, blocks);
        if fp <= fp_rate {
            return Ok((blocks, probes));
        }
        blocks = (blocks + blocks / 50).max(blocks + 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizing_rejects_bad_parameters() {
        assert_eq!(BloomFilter::new(0, 0.01), Err(BloomError::ZeroCapacity(0)));
        for p in [0.0, 1.0, -0.5, 2.0, f64::NAN] {
            assert!(matches!(
                BloomFilter::new(10, p),
                Err(BloomError::FpRateOutOfRange(_))
            ));
        }
        assert_eq!(
            BloomFilter::with_shape(1, 0),
            Err(BloomError::ProbesOutOfRange(0))
        );
        assert_eq!(
            BloomFilter::with_shape(0, 3),
            Err(BloomError::BlocksOutOfRange(0))
        );
    }

    #[test]
    fn sizing_is_close_to_the_classic_optimum() {
        // pixiv's seed: about 6,500 keys per 8 KB at 1% with k ≈ 6 (classic formula).
        let (blocks, probes) = optimal_shape(6_500, 0.01).unwrap();
        let bytes = blocks * BLOCK_BYTES as u64;
        assert!((8_000..10_500).contains(&bytes), "{bytes} bytes");
        assert!((5..=9).contains(&probes), "{probes} probes");
        assert!(expected_fp_rate(6_500, blocks, probes) <= 0.01);
    }

    #[test]
    fn empty_and_union() {
        let mut a = BloomFilter::new(100, 0.01).unwrap();
        assert!(!a.contains(b"x"));
        assert_eq!(a.fill_ratio(), 0.0);
        assert_eq!(a.estimated_fp_rate(), 0.0);
        assert!(a.insert(b"x"));
        assert!(!a.insert(b"x"));
        let mut b = BloomFilter::new(100, 0.01).unwrap();
        b.insert(b"y");
        a.union(&b).unwrap();
        assert!(a.contains(b"x") && a.contains(b"y"));
        let c = BloomFilter::new(10_000, 0.01).unwrap();
        assert!(matches!(a.union(&c), Err(BloomError::ShapeMismatch(..))));
        a.clear();
        assert!(!a.contains(b"x"));
    }
}

/// The batched lookup, and its run-time choice of instruction set.
mod simd {
    use super::{Block, WORDS, covers, locate};

    /// Blocks located per batch before any is probed.
    const BATCH: usize = 16;

    #[inline(always)]
    fn batch(blocks: &[Block], probes: u32, hashes: &[u64], out: &mut Vec<bool>) {
        let n = blocks.len();
        for chunk in hashes.chunks(BATCH) {
            let mut located = [(0usize, [0u64; WORDS]); BATCH];
            for (slot, h) in located.iter_mut().zip(chunk) {
                *slot = locate(*h, n, probes);
                prefetch(&blocks[slot.0]);
            }
            for (b, masks) in &located[..chunk.len()] {
                out.push(covers(&blocks[*b].0, masks));
            }
        }
    }

    #[inline(always)]
    fn prefetch(block: &Block) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            // SAFETY: SSE is part of every x86_64 CPU, and a prefetch is a hint that never
            // faults (here it names a live block anyway).
            #[allow(unsafe_code)]
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(std::ptr::from_ref(block).cast::<i8>());
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = block;
    }

    fn baseline(blocks: &[Block], probes: u32, hashes: &[u64], out: &mut Vec<bool>) {
        batch(blocks, probes, hashes, out);
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512dq,avx512vl,avx2")]
    fn avx512(blocks: &[Block], probes: u32, hashes: &[u64], out: &mut Vec<bool>) {
        batch(blocks, probes, hashes, out);
    }

    pub(super) fn contains_batch(
        blocks: &[Block],
        probes: u32,
        hashes: &[u64],
        out: &mut Vec<bool>,
    ) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512dq")
            && std::arch::is_x86_feature_detected!("avx512vl")
        {
            // SAFETY: the CPU has every feature `avx512` is compiled for (checked just above).
            #[allow(unsafe_code)]
            unsafe {
                return avx512(blocks, probes, hashes, out);
            }
        }
        baseline(blocks, probes, hashes, out);
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use crate::{BloomFilter, key_hash};

        /// Both builds give the single lookups' answers, whichever this CPU runs.
        #[test]
        fn every_build_agrees_with_single_lookups() {
            for probes in [1, 7, 8, 9, 16] {
                let mut f = BloomFilter::with_shape(16, probes).unwrap();
                for i in 0..400 {
                    f.insert(format!("in-{i}").as_bytes());
                }
                let hashes: Vec<u64> = (0..400)
                    .map(|i| format!("in-{i}"))
                    .chain((0..1600).map(|i| format!("out-{i}")))
                    .map(|k| key_hash(k.as_bytes()))
                    .collect();
                let single: Vec<bool> = hashes.iter().map(|h| f.contains_hash(*h)).collect();
                let mut out = Vec::new();
                baseline(&f.blocks, probes, &hashes, &mut out);
                assert_eq!(out, single, "baseline, {probes} probes");
                out.clear();
                contains_batch(&f.blocks, probes, &hashes, &mut out);
                assert_eq!(out, single, "dispatched, {probes} probes");
                assert!(single[..400].iter().all(|b| *b), "a false negative");
                assert!(single[400..].contains(&false));
            }
        }
    }
}
