//! Filters built from [`BloomFilter`]s for Penchant's two uses.
//!
//! * [`PartitionedFilter`] (pixiv's design): one large set split into many small filters of a
//!   fixed size, the partition chosen by the key's hash, so a lookup needs one small partition —
//!   one store cell, one cache entry — never the whole set.
//! * [`RotatingFilter`] (Coffee Meets Bagel's "already seen"): a per-user filter that, once it
//!   holds its design capacity, starts a fresh generation and keeps the previous one, instead of
//!   letting its false-positive rate climb.

use std::collections::BTreeMap;

use crate::{BLOCK_BYTES, BloomError, BloomFilter, expected_fp_rate, key_hash};

/// The partition of a hash among `partitions`. It uses the low 32 bits of the hash, which the
/// block choice inside a filter (the high bits) does not, so partitions stay evenly loaded.
pub fn partition_of(hash: u64, partitions: usize) -> usize {
    (((hash & 0xffff_ffff) * partitions as u64) >> 32) as usize
}

/// A set split into partitions of equal size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionedFilter {
    partitions: Vec<BloomFilter>,
}

/// How many keys a filter of `bytes` holds at `fp_rate`, and its best probes.
pub fn keys_per_partition(bytes: u64, fp_rate: f64) -> Result<(u64, u32), BloomError> {
    if !(fp_rate > 0.0 && fp_rate < 1.0) {
        return Err(BloomError::FpRateOutOfRange(fp_rate));
    }
    let blocks = (bytes / BLOCK_BYTES as u64).max(1);
    let fits = |n: u64| {
        (1..=crate::MAX_PROBES)
            .map(|k| (k, expected_fp_rate(n, blocks, k)))
            .filter(|(_, fp)| *fp <= fp_rate)
            .min_by(|a, b| a.1.total_cmp(&b.1))
    };
    // Binary search for the largest key count the size supports.
    let (mut lo, mut hi) = (0u64, blocks * 512);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if fits(mid).is_some() {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    match fits(lo.max(1)) {
        Some((k, _)) if lo > 0 => Ok((lo, k)),
        _ => Err(BloomError::FpRateOutOfRange(fp_rate)),
    }
}

impl PartitionedFilter {
    /// Enough partitions of `partition_bytes` each to hold `capacity` keys at `fp_rate`.
    pub fn new(capacity: u64, fp_rate: f64, partition_bytes: u64) -> Result<Self, BloomError> {
        if capacity == 0 {
            return Err(BloomError::ZeroCapacity(capacity));
        }
        let (per_partition, probes) = keys_per_partition(partition_bytes, fp_rate)?;
        let count = capacity.div_ceil(per_partition);
        let blocks = (partition_bytes / BLOCK_BYTES as u64).max(1);
        let partitions = (0..count)
            .map(|_| BloomFilter::with_shape(blocks, probes))
            .collect::<Result<_, _>>()?;
        Ok(Self { partitions })
    }

    /// Reassemble a filter from its partitions (as read back from storage), which must all have
    /// the same shape.
    pub fn from_partitions(partitions: Vec<BloomFilter>) -> Result<Self, BloomError> {
        let first = partitions.first().ok_or(BloomError::BlocksOutOfRange(0))?;
        if let Some(other) = partitions
            .iter()
            .find(|p| p.blocks() != first.blocks() || p.probes() != first.probes())
        {
            return Err(BloomError::ShapeMismatch(
                first.blocks(),
                first.probes(),
                other.blocks(),
                other.probes(),
            ));
        }
        Ok(Self { partitions })
    }

    /// The partitions, in order.
    pub fn partitions(&self) -> &[BloomFilter] {
        &self.partitions
    }

    /// The partition a key belongs to.
    pub fn partition_of_key(&self, key: &[u8]) -> usize {
        partition_of(key_hash(key), self.partitions.len())
    }

    /// Add a key; returns the partition it changed, if any.
    pub fn insert(&mut self, key: &[u8]) -> Option<usize> {
        let hash = key_hash(key);
        let p = partition_of(hash, self.partitions.len());
        self.partitions[p].insert_hash(hash).then_some(p)
    }

    /// Whether the key may be in the set.
    pub fn contains(&self, key: &[u8]) -> bool {
        let hash = key_hash(key);
        self.partitions[partition_of(hash, self.partitions.len())].contains_hash(hash)
    }

    /// Group key hashes by partition: partition → indices into `hashes`. A bulk lookup reads
    /// each partition it needs once.
    pub fn group_by_partition(hashes: &[u64], partitions: usize) -> BTreeMap<usize, Vec<usize>> {
        let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (i, h) in hashes.iter().enumerate() {
            groups
                .entry(partition_of(*h, partitions))
                .or_default()
                .push(i);
        }
        groups
    }

    /// Look up many keys; the answers are in the keys' order.
    pub fn contains_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Vec<bool> {
        let hashes: Vec<u64> = keys.iter().map(|k| key_hash(k.as_ref())).collect();
        let mut answers = vec![false; keys.len()];
        let mut found = Vec::new();
        for (p, idx) in Self::group_by_partition(&hashes, self.partitions.len()) {
            let group: Vec<u64> = idx.iter().map(|i| hashes[*i]).collect();
            self.partitions[p].contains_many_hashes(&group, &mut found);
            for (i, hit) in idx.into_iter().zip(&found) {
                answers[i] = *hit;
            }
        }
        answers
    }

    /// The estimated false-positive rate: the mean of the partitions' (a lookup lands in one
    /// partition, each equally likely).
    pub fn estimated_fp_rate(&self) -> f64 {
        let sum: f64 = self
            .partitions
            .iter()
            .map(BloomFilter::estimated_fp_rate)
            .sum();
        sum / self.partitions.len() as f64
    }

    /// The estimated number of keys.
    pub fn estimated_count(&self) -> f64 {
        self.partitions
            .iter()
            .map(BloomFilter::estimated_count)
            .sum()
    }

    /// The fraction of bits set.
    pub fn fill_ratio(&self) -> f64 {
        let sum: f64 = self.partitions.iter().map(BloomFilter::fill_ratio).sum();
        sum / self.partitions.len() as f64
    }
}

/// A filter with a design capacity that rotates instead of overfilling: the current generation
/// takes inserts; when it holds `capacity` keys it becomes the previous generation (replacing
/// the older one) and a fresh one starts. A key is reported while it is in either generation, so
/// the last `capacity` to `2 × capacity` keys are always remembered, at most twice the
/// single-generation false-positive rate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RotatingFilter {
    current: BloomFilter,
    previous: Option<BloomFilter>,
    /// Keys the current generation took (inserts that changed it).
    current_keys: u64,
    capacity: u64,
}

impl RotatingFilter {
    /// A rotating filter whose generations are `bytes` each, for `capacity` keys per generation.
    pub fn new(bytes: u64, capacity: u64) -> Result<Self, BloomError> {
        Ok(Self {
            current: BloomFilter::with_bytes(bytes, capacity)?,
            previous: None,
            current_keys: 0,
            capacity,
        })
    }

    /// Reassemble from stored parts.
    pub fn from_parts(
        current: BloomFilter,
        previous: Option<BloomFilter>,
        current_keys: u64,
        capacity: u64,
    ) -> Result<Self, BloomError> {
        if capacity == 0 {
            return Err(BloomError::ZeroCapacity(capacity));
        }
        Ok(Self {
            current,
            previous,
            current_keys,
            capacity,
        })
    }

    /// Add a key. Returns true when this insert rotated the generations.
    pub fn insert(&mut self, key: &[u8]) -> bool {
        self.insert_hash(key_hash(key))
    }

    /// [`RotatingFilter::insert`] by the key's [`key_hash`].
    pub fn insert_hash(&mut self, hash: u64) -> bool {
        if !self.current.insert_hash(hash) {
            return false;
        }
        self.current_keys += 1;
        if self.current_keys < self.capacity {
            return false;
        }
        let mut fresh = self.current.clone();
        fresh.clear();
        self.previous = Some(std::mem::replace(&mut self.current, fresh));
        self.current_keys = 0;
        true
    }

    /// Whether the key may have been inserted (in either generation).
    pub fn contains(&self, key: &[u8]) -> bool {
        self.contains_hash(key_hash(key))
    }

    /// [`RotatingFilter::contains`] by the key's [`key_hash`].
    pub fn contains_hash(&self, hash: u64) -> bool {
        self.current.contains_hash(hash)
            || self
                .previous
                .as_ref()
                .is_some_and(|p| p.contains_hash(hash))
    }

    /// Of `keys`, the ones not (as far as the filter can tell) inserted, in order.
    pub fn unseen<'k, K: AsRef<[u8]>>(&self, keys: &'k [K]) -> Vec<&'k K> {
        let hashes: Vec<u64> = keys.iter().map(|k| key_hash(k.as_ref())).collect();
        let mut in_current = Vec::new();
        self.current.contains_many_hashes(&hashes, &mut in_current);
        let mut in_previous = vec![false; keys.len()];
        if let Some(p) = &self.previous {
            p.contains_many_hashes(&hashes, &mut in_previous);
        }
        keys.iter()
            .zip(in_current.iter().zip(&in_previous))
            .filter(|(_, (c, p))| !**c && !**p)
            .map(|(k, _)| k)
            .collect()
    }

    /// The generation taking inserts.
    pub fn current(&self) -> &BloomFilter {
        &self.current
    }

    /// The previous generation, if the filter has rotated.
    pub fn previous(&self) -> Option<&BloomFilter> {
        self.previous.as_ref()
    }

    /// Keys in the current generation.
    pub fn current_keys(&self) -> u64 {
        self.current_keys
    }

    /// Keys per generation.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The estimated false-positive rate of a lookup (either generation may answer).
    pub fn estimated_fp_rate(&self) -> f64 {
        let c = self.current.estimated_fp_rate();
        let p = self
            .previous
            .as_ref()
            .map_or(0.0, BloomFilter::estimated_fp_rate);
        1.0 - (1.0 - c) * (1.0 - p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(prefix: &str, n: usize) -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| format!("{prefix}-{i}").into_bytes())
            .collect()
    }

    #[test]
    fn partitions_follow_pixiv_sizing_and_stay_balanced() {
        // 8 KB partitions at 1%: pixiv's numbers are about 6,500 keys each.
        let (per, probes) = keys_per_partition(8 << 10, 0.01).unwrap();
        assert!((5_500..7_000).contains(&per), "{per} keys per 8 KB");
        assert!((5..=9).contains(&probes));
        let mut f = PartitionedFilter::new(100_000, 0.01, 8 << 10).unwrap();
        assert_eq!(f.partitions().len() as u64, 100_000u64.div_ceil(per));
        let members = keys("m", 100_000);
        for k in &members {
            f.insert(k);
        }
        assert!(f.contains_many(&members).into_iter().all(|x| x));
        let fp = f
            .contains_many(&keys("absent", 200_000))
            .into_iter()
            .filter(|x| *x)
            .count() as f64
            / 200_000.0;
        assert!(fp < 0.0125, "measured {fp}");
        assert!(
            (f.estimated_fp_rate() - fp).abs() < 0.003,
            "{} vs {fp}",
            f.estimated_fp_rate()
        );
        // No partition is much fuller than the mean: the partition choice does not follow the
        // block choice.
        let fills: Vec<f64> = f.partitions().iter().map(BloomFilter::fill_ratio).collect();
        let mean = fills.iter().sum::<f64>() / fills.len() as f64;
        assert!(
            fills.iter().all(|x| (x - mean).abs() < 0.1 * mean),
            "{fills:?}"
        );
        let count = f.estimated_count();
        assert!((count - 100_000.0).abs() < 5_000.0, "{count}");
    }

    #[test]
    fn partitions_roundtrip_and_must_match() {
        let f = PartitionedFilter::new(20_000, 0.01, 8 << 10).unwrap();
        let again = PartitionedFilter::from_partitions(f.partitions().to_vec()).unwrap();
        assert_eq!(again, f);
        let mut mixed = f.partitions().to_vec();
        mixed.push(BloomFilter::with_shape(3, 2).unwrap());
        assert!(PartitionedFilter::from_partitions(mixed).is_err());
        assert!(PartitionedFilter::from_partitions(vec![]).is_err());
        assert!(PartitionedFilter::new(0, 0.01, 8 << 10).is_err());
        assert!(PartitionedFilter::new(10, 1.5, 8 << 10).is_err());
    }

    #[test]
    fn rotation_keeps_recent_keys_and_bounds_the_fp_rate() {
        // Coffee Meets Bagel: 2^17 bits per user.
        let capacity = 10_000;
        let mut f = RotatingFilter::new((1 << 17) / 8, capacity).unwrap();
        let all = keys("item", 25_000);
        let mut rotations = 0;
        for k in &all {
            rotations += usize::from(f.insert(k));
        }
        assert_eq!(rotations, 2);
        assert!(f.previous().is_some());
        // The last capacity keys are always there.
        assert!(
            all[25_000 - capacity as usize..]
                .iter()
                .all(|k| f.contains(k))
        );
        // The FP rate stays near that of two generations at capacity, not an overfilled filter.
        let fp = keys("other", 100_000)
            .iter()
            .filter(|k| f.contains(k))
            .count() as f64
            / 1e5;
        let one = expected_fp_rate(capacity, f.current().blocks() as u64, f.current().probes());
        assert!(fp <= 2.2 * one + 0.002, "fp {fp}, one generation {one}");
        let candidates = keys("item", 30_000);
        let unseen = f.unseen(&candidates);
        assert!(unseen.len() >= 5_000, "the never-inserted items are unseen");
        let recent: std::collections::HashSet<&Vec<u8>> = all[15_000..].iter().collect();
        assert!(unseen.iter().all(|k| !recent.contains(k)));
    }
}
