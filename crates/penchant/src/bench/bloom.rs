//! `penchant bench bloom`: Penchant's blocked Bloom filter beside the `fastbloom` crate, same
//! bits per key, same keys, same run; and the seed's bulk check of a user's "seen" filter.
//!
//! Keys are hashed once up front and both filters are probed by hash, so the table compares
//! the filters themselves. The workloads take turns for three rounds; the best round counts.

use std::hint::black_box;
use std::time::Instant;

use penchant_bloom::{BloomFilter, key_hash};
use rand::{Rng, SeedableRng};

const ROUNDS: usize = 3;

#[derive(Debug, clap::Args)]
pub struct BloomBenchArgs {
    /// Bits per key for both filters (10 ≈ 1% false positives).
    #[arg(long, default_value_t = 10)]
    bits_per_key: u64,
    /// Lookups timed per measurement (capped by the key count for small filters ×10).
    #[arg(long, default_value_t = 4_000_000)]
    lookups: usize,
    /// Skip the 128 MB filter (it takes a few seconds and 2 GB of memory).
    #[arg(long)]
    small_only: bool,
}

/// Nanoseconds per lookup of one run, and its hit count.
fn ns_per_key(lookups: usize, run: impl FnOnce() -> usize) -> (f64, usize) {
    let start = Instant::now();
    let hits = black_box(run());
    (start.elapsed().as_nanos() as f64 / lookups as f64, hits)
}

pub fn run(args: BloomBenchArgs) -> anyhow::Result<()> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut sizes = vec![("16 KB", 16u64 << 10)];
    if !args.small_only {
        sizes.push(("128 MB", 128 << 20));
    }
    println!(
        "{:<8} {:<22} {:>12} {:>12} {:>8} {:>10} {:>10}",
        "filter", "lookup", "penchant ns", "fastbloom ns", "ratio", "penchant fp", "fastbloom fp"
    );
    for (name, bytes) in sizes {
        let bits = bytes * 8;
        let n = (bits / args.bits_per_key) as usize;
        let members: Vec<u64> = (0..n).map(|_| rng.random()).collect();
        let queries: Vec<u64> = (0..args.lookups).map(|_| rng.random()).collect();

        let mut ours = BloomFilter::with_bytes(bytes, n as u64)?;
        let mut theirs = fastbloom::BloomFilter::with_num_bits(bits as usize).expected_items(n);
        for h in &members {
            ours.insert_hash(*h);
            theirs.insert_hash(*h);
        }
        anyhow::ensure!(
            members.iter().all(|h| ours.contains_hash(*h)),
            "false negative"
        );

        // The workloads take turns, ROUNDS times; the best round of each counts.
        let (mut p_single, mut f_single, mut p_batch) =
            (f64::INFINITY, f64::INFINITY, f64::INFINITY);
        let (mut p_hits, mut f_hits) = (0, 0);
        let mut out = Vec::new();
        for _ in 0..ROUNDS {
            let (ns, hits) = ns_per_key(queries.len(), || {
                queries.iter().filter(|h| ours.contains_hash(**h)).count()
            });
            (p_single, p_hits) = (p_single.min(ns), hits);
            let (ns, hits) = ns_per_key(queries.len(), || {
                queries.iter().filter(|h| theirs.contains_hash(**h)).count()
            });
            (f_single, f_hits) = (f_single.min(ns), hits);
            let (ns, _) = ns_per_key(queries.len(), || {
                ours.contains_many_hashes(&queries, &mut out);
                out.iter().filter(|x| **x).count()
            });
            p_batch = p_batch.min(ns);
        }
        let fp = |hits: usize| hits as f64 / queries.len() as f64;
        let line = |lookup: &str, p: f64, f: f64| {
            println!(
                "{:<8} {:<22} {:>12.2} {:>12.2} {:>8.2} {:>10.4}% {:>10.4}%",
                name,
                lookup,
                p,
                f,
                p / f,
                100.0 * fp(p_hits),
                100.0 * fp(f_hits)
            );
        };
        line("single", p_single, f_single);
        line("batched (fastbloom: loop)", p_batch, f_single);
        println!(
            "{:<8} {:<22} penchant: {} probes, estimated fp {:.4}%; fastbloom: {} hashes",
            "",
            "",
            ours.probes(),
            100.0 * ours.estimated_fp_rate(),
            theirs.num_hashes()
        );
    }

    // The Coffee Meets Bagel case: one user's 2^17-bit seen filter, 50,000 candidates checked
    // in bulk (their Redis pipeline took about 170 ms), hashing included.
    let mut seen = BloomFilter::with_bytes((1 << 17) / 8, 10_000)?;
    for i in 0..10_000u32 {
        seen.insert(format!("item-{i}").as_bytes());
    }
    let candidates: Vec<Vec<u8>> = (0..50_000u32)
        .map(|i| format!("item-{}", i * 3).into_bytes())
        .collect();
    let mut best = f64::INFINITY;
    let mut unseen = 0;
    for _ in 0..ROUNDS {
        let start = Instant::now();
        let hashes: Vec<u64> = candidates.iter().map(|c| key_hash(c)).collect();
        let mut out = Vec::new();
        seen.contains_many_hashes(&hashes, &mut out);
        unseen = out.iter().filter(|x| !**x).count();
        best = best.min(start.elapsed().as_secs_f64() * 1e3);
    }
    println!(
        "\nseen filter 2^17 bits, 10,000 items: bulk check of 50,000 candidates in {best:.3} ms \
         ({unseen} unseen; the seed's Redis approach: about 170 ms)"
    );
    Ok(())
}
