//! Property tests of the filter: no false negatives, the measured false-positive rate matches
//! the model, estimates hold, bulk lookups agree with single ones, decoding never panics.

use penchant_bloom::{BloomFilter, expected_fp_rate, key_hash};
use proptest::prelude::*;

/// Distinct keys `prefix-0`, `prefix-1`, ...
fn keys(prefix: &str, n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| format!("{prefix}-{i}").into_bytes())
        .collect()
}

fn measured_fp(filter: &BloomFilter, probes: usize) -> f64 {
    let hits = keys("absent", probes)
        .iter()
        .filter(|k| filter.contains(k))
        .count();
    hits as f64 / probes as f64
}

#[test]
fn measured_fp_rate_matches_the_model() {
    // (capacity, target rate, keys actually inserted)
    for (capacity, rate, inserted) in [
        (20_000u64, 0.01, 20_000usize),
        (20_000, 0.05, 20_000),
        (5_000, 0.001, 5_000),
        // An overfilled filter: the model must still describe it.
        (10_000, 0.01, 20_000),
        // pixiv's small partitions: 8 KB at 1%.
        (6_500, 0.01, 6_500),
    ] {
        let mut f = BloomFilter::new(capacity, rate).unwrap();
        for k in keys("member", inserted) {
            f.insert(&k);
        }
        let model = expected_fp_rate(inserted as u64, f.blocks() as u64, f.probes());
        let measured = measured_fp(&f, 400_000);
        let estimated = f.estimated_fp_rate();
        let close = |x: f64| (x - model).abs() <= 0.15 * model + 0.0005;
        assert!(
            close(measured),
            "{capacity}/{rate}/{inserted}: measured {measured:.5}, model {model:.5}"
        );
        assert!(
            close(estimated),
            "{capacity}/{rate}/{inserted}: estimated {estimated:.5}, model {model:.5}"
        );
        if inserted as u64 <= capacity {
            assert!(model <= rate, "sized for {rate}, model says {model}");
        }
        let count = f.estimated_count();
        assert!(
            (count - inserted as f64).abs() <= 0.05 * inserted as f64,
            "estimated count {count:.0} for {inserted}"
        );
    }
}

#[test]
fn the_blocked_estimate_beats_the_naive_one_on_uneven_filters() {
    // Fill a few blocks only: the overall fill to the k is far below the real rate.
    let mut f = BloomFilter::with_shape(64, 6).unwrap();
    let mut inserted = 0;
    for k in keys("skewed", 200_000) {
        let h = key_hash(&k);
        // Keys of the first quarter of the hash space land in the first quarter of the blocks.
        if h < u64::MAX / 4 {
            f.insert_hash(h);
            inserted += 1;
            if inserted == 2_000 {
                break;
            }
        }
    }
    let naive = f.fill_ratio().powi(6);
    let measured = measured_fp(&f, 200_000);
    let estimated = f.estimated_fp_rate();
    assert!(
        (estimated - measured).abs() <= 0.1 * measured + 0.002,
        "{estimated} vs {measured}"
    );
    assert!(
        naive < measured / 10.0,
        "naive {naive} vs measured {measured}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn never_a_false_negative(
        members in prop::collection::hash_set(prop::collection::vec(any::<u8>(), 0..24), 1..1500),
        rate in 0.0005f64..0.3,
        slack in 1u64..4,
    ) {
        let mut f = BloomFilter::new(members.len() as u64 * slack, rate).unwrap();
        for k in &members {
            f.insert(k);
        }
        let members: Vec<&Vec<u8>> = members.iter().collect();
        for k in &members {
            prop_assert!(f.contains(k));
        }
        prop_assert!(f.contains_many(&members).into_iter().all(|x| x));
    }

    #[test]
    fn bulk_lookups_agree_with_single_ones(
        members in prop::collection::vec(any::<u64>(), 0..500),
        queries in prop::collection::vec(any::<u64>(), 0..700),
        blocks in 1u64..40,
        probes in 1u32..=16,
    ) {
        let mut f = BloomFilter::with_shape(blocks, probes).unwrap();
        for h in &members {
            f.insert_hash(*h);
        }
        let mut all: Vec<u64> = members.clone();
        all.extend(&queries);
        let mut out = Vec::new();
        f.contains_many_hashes(&all, &mut out);
        let single: Vec<bool> = all.iter().map(|h| f.contains_hash(*h)).collect();
        prop_assert_eq!(out, single);
    }

    #[test]
    fn union_is_the_filter_of_both_sets(
        a in prop::collection::vec(any::<u64>(), 0..300),
        b in prop::collection::vec(any::<u64>(), 0..300),
        probes in 1u32..=16,
    ) {
        let mut fa = BloomFilter::with_shape(8, probes).unwrap();
        let mut fb = fa.clone();
        let mut both = fa.clone();
        a.iter().for_each(|h| { fa.insert_hash(*h); both.insert_hash(*h); });
        b.iter().for_each(|h| { fb.insert_hash(*h); both.insert_hash(*h); });
        fa.union(&fb).unwrap();
        prop_assert_eq!(fa, both);
    }

    #[test]
    fn decoding_arbitrary_bytes_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = BloomFilter::from_bytes(&bytes);
        // A valid header in front of garbage too.
        let mut framed = b"PBLM\x01\x00\x04\x00\x01\x00\x00\x00\x00\x00\x00\x00".to_vec();
        framed.extend_from_slice(&bytes);
        let _ = BloomFilter::from_bytes(&framed);
    }

    #[test]
    fn encoding_roundtrips(members in prop::collection::vec(any::<u64>(), 0..300), blocks in 1u64..20, probes in 1u32..=16) {
        let mut f = BloomFilter::with_shape(blocks, probes).unwrap();
        members.iter().for_each(|h| { f.insert_hash(*h); });
        prop_assert_eq!(BloomFilter::from_bytes(&f.to_bytes()).unwrap(), f);
    }
}

/// The bits a key sets are part of the stored format: filters written by earlier versions must
/// read the same. Fingerprints of filters built with 1, 8, 9 and 16 probes, pinned.
#[test]
fn bit_positions_are_stable() {
    let fingerprints: Vec<u64> = [1u32, 8, 9, 16]
        .iter()
        .map(|&probes| {
            let mut f = BloomFilter::with_shape(64, probes).unwrap();
            for k in keys("stable", 500) {
                f.insert(&k);
            }
            key_hash(&f.to_bytes())
        })
        .collect();
    assert_eq!(
        fingerprints,
        [
            10781507432342414855,
            9437134794398612772,
            6264834787105361315,
            14229077938835375597
        ]
    );
}
