//! `penchant bench topk`: exact top-k search latency, `penchant_vectors::Matrix::top_k`, beside
//! a naive scan in the same run.
//!
//! The seed's case is "10k candidates × 100 floats": score every item vector against a query
//! and keep the best 30, within a request's budget (aim: under 0.5 ms at the median). The suite
//! fills a [`Matrix`] with random unit vectors of 100 dimensions (Gaussian components,
//! normalized) — 10,000 and 100,000 items, and 1,000,000 with `--scale large` — and times
//! `top_k` by cosine for `--queries` random unit queries (at most 200 at a million items),
//! after a few untimed warm-up queries. The reference is the plain way: a loop scoring each row
//! with `kernels::dot_naive` (a left-to-right scalar sum) times the precomputed inverse norms,
//! then a full sort of all the scores. Both must return the same 30 items; the table says how
//! many queries agree exactly (near-ties can swap places between the two sums).
//!
//! Then `top_k_multi` with 5 queries averaged ("similar to the last 5 items the user liked") at
//! 10,000 items, beside the same naive scan scoring every row 5 times.
//!
//! The scan is bound by memory bandwidth once the rows leave the caches, so each row also says
//! how fast the rows were read: items × dimensions × 4 bytes / p50. 10,000 rows (4 MB) fit in
//! a server's L3 cache; 100,000 (40 MB) and 1,000,000 (400 MB) stream from memory.

use std::hint::black_box;
use std::time::Instant;

use hdrhistogram::Histogram;
use penchant_vectors::{Aggregate, Matrix, Metric, kernels};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::rate;

/// Queries timed before any are recorded.
const WARM_UP: usize = 5;

/// Queries of the multi-query search.
const MULTI: usize = 5;

/// Catalogue sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scale {
    /// 10,000 and 100,000 items.
    Small,
    /// 10,000, 100,000 and 1,000,000 items.
    Large,
}

#[derive(Debug, clap::Args)]
pub struct TopkBenchArgs {
    /// Catalogue sizes: small 10k and 100k items, large also 1M.
    #[arg(long, value_enum, default_value_t = Scale::Small)]
    scale: Scale,
    /// Queries timed per size (at least 200; at most 200 at a million items).
    #[arg(long, default_value_t = 1000)]
    queries: usize,
    /// Results per query.
    #[arg(long, default_value_t = 30)]
    k: usize,
    /// Dimensions of the vectors.
    #[arg(long, default_value_t = 100)]
    dim: usize,
}

/// Latency percentiles of one workload, in seconds.
struct Latency {
    p50: f64,
    p99: f64,
}

impl Latency {
    fn of(hist: &Histogram<u64>) -> Self {
        Self {
            p50: hist.value_at_quantile(0.5) as f64 * 1e-9,
            p99: hist.value_at_quantile(0.99) as f64 * 1e-9,
        }
    }
}

pub fn run(args: TopkBenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.queries >= 200, "--queries must be at least 200");
    anyhow::ensure!(
        args.k > 0 && args.dim > 0,
        "--k and --dim must be at least 1"
    );
    let (cpu, cores) = crate::ingest::cpu();
    println!(
        "penchant bench topk: {cpu}, {cores} cores, one thread, SIMD {}",
        crate::als::simd()
    );
    println!(
        "exact top-{} by cosine over random unit vectors of {} dimensions; reference: \
         kernels::dot_naive per row + full sort",
        args.k, args.dim
    );
    let mut sizes = vec![10_000, 100_000];
    if args.scale == Scale::Large {
        sizes.push(1_000_000);
    }
    let mut rng = StdRng::seed_from_u64(7);
    println!(
        "\n{:<30} {:>9} {:>9} {:>8}  {:>9} {:>9} {:>8}  {:>8}  {:>7}",
        "search", "p50 ms", "p99 ms", "GB/s", "naive p50", "naive p99", "GB/s", "speed-up", "agree"
    );
    for &n in &sizes {
        let matrix = Matrix::from_rows(args.dim, unit_vectors(&mut rng, n, args.dim));
        let queries_n = if n >= 1_000_000 { 200 } else { args.queries };
        let queries: Vec<Vec<f32>> = (0..queries_n)
            .map(|_| unit_vectors(&mut rng, 1, args.dim))
            .collect();
        let naive = Naive::new(&matrix);

        let (ours, ours_results) = time(&queries, |q| {
            matrix
                .top_k(Metric::Cosine, q, args.k, |_| false)
                .into_iter()
                .map(|(i, _)| i)
                .collect()
        })?;
        let (theirs, theirs_results) = time(&queries, |q| naive.top_k(&[q.as_slice()], args.k))?;
        print_row(
            &format!("top_k, {} items", rate(n as f64)),
            n * args.dim * 4,
            &ours,
            &theirs,
            agreement(&ours_results, &theirs_results),
        );
        if n == 10_000 {
            let groups: Vec<Vec<f32>> = (0..queries_n)
                .map(|_| unit_vectors(&mut rng, MULTI, args.dim))
                .collect();
            let (ours, ours_results) = time(&groups, |g| {
                let queries: Vec<&[f32]> = g.chunks_exact(args.dim).collect();
                matrix
                    .top_k_multi(Metric::Cosine, &queries, Aggregate::Mean, args.k, |_| false)
                    .into_iter()
                    .map(|(i, _)| i)
                    .collect()
            })?;
            let (theirs, theirs_results) = time(&groups, |g| {
                let queries: Vec<&[f32]> = g.chunks_exact(args.dim).collect();
                naive.top_k(&queries, args.k)
            })?;
            print_row(
                &format!("top_k_multi x{MULTI} (mean), {}", rate(n as f64)),
                n * args.dim * 4,
                &ours,
                &theirs,
                agreement(&ours_results, &theirs_results),
            );
        }
    }
    println!(
        "(GB/s: the matrix's bytes over the p50; a query of the multi search reads it once; \
         agree: queries whose {} results are identical, in order)",
        args.k
    );
    Ok(())
}

fn print_row(name: &str, bytes: usize, ours: &Latency, theirs: &Latency, agree: f64) {
    let gbs = |l: &Latency| bytes as f64 / l.p50 / 1e9;
    println!(
        "{:<30} {:>9.3} {:>9.3} {:>8.1}  {:>9.3} {:>9.3} {:>8.1}  {:>7.1}x  {:>6.1}%",
        name,
        ours.p50 * 1e3,
        ours.p99 * 1e3,
        gbs(ours),
        theirs.p50 * 1e3,
        theirs.p99 * 1e3,
        gbs(theirs),
        theirs.p50 / ours.p50,
        100.0 * agree,
    );
}

/// Times `search` on every query (after [`WARM_UP`] untimed ones): the latencies and the
/// results.
fn time<Q>(
    queries: &[Q],
    mut search: impl FnMut(&Q) -> Vec<usize>,
) -> anyhow::Result<(Latency, Vec<Vec<usize>>)> {
    for q in queries.iter().take(WARM_UP) {
        black_box(search(q));
    }
    let mut hist = Histogram::<u64>::new(3)?;
    let mut results = Vec::with_capacity(queries.len());
    for q in queries {
        let start = Instant::now();
        let result = black_box(search(q));
        hist.record(start.elapsed().as_nanos() as u64)?;
        results.push(result);
    }
    Ok((Latency::of(&hist), results))
}

/// The share of queries whose result lists are identical.
fn agreement(a: &[Vec<usize>], b: &[Vec<usize>]) -> f64 {
    let same = a.iter().zip(b).filter(|(x, y)| x == y).count();
    same as f64 / a.len().max(1) as f64
}

/// `n` random unit vectors of `dim` values (Gaussian components by Box-Muller, normalized),
/// one after the other.
fn unit_vectors(rng: &mut StdRng, n: usize, dim: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(n * dim);
    for _ in 0..n {
        let start = out.len();
        while out.len() < start + dim {
            let (u, v): (f64, f64) = (rng.random_range(f64::EPSILON..1.0), rng.random());
            let r = (-2.0 * u.ln()).sqrt();
            let angle = std::f64::consts::TAU * v;
            out.push((r * angle.cos()) as f32);
            if out.len() < start + dim {
                out.push((r * angle.sin()) as f32);
            }
        }
        let row = &mut out[start..];
        let norm = kernels::dot_naive(row, row).sqrt();
        row.iter_mut().for_each(|x| *x /= norm);
    }
    out
}

/// The reference: every row scored by a plain loop, then all scores sorted.
struct Naive<'a> {
    matrix: &'a Matrix,
    inv_norms: Vec<f32>,
}

impl<'a> Naive<'a> {
    fn new(matrix: &'a Matrix) -> Self {
        let inv_norms = (0..matrix.len())
            .map(|i| {
                let row = matrix.row(i);
                let norm = kernels::dot_naive(row, row).sqrt();
                if norm > 0.0 { 1.0 / norm } else { 0.0 }
            })
            .collect();
        Self { matrix, inv_norms }
    }

    /// The `k` best rows by the mean cosine against `queries`, best first, ties by lower row.
    fn top_k(&self, queries: &[&[f32]], k: usize) -> Vec<usize> {
        let dim = self.matrix.dim();
        let query_norms: Vec<f32> = queries
            .iter()
            .map(|q| {
                let norm = kernels::dot_naive(q, q).sqrt();
                if norm > 0.0 { 1.0 / norm } else { 0.0 }
            })
            .collect();
        let mut scored: Vec<(f32, usize)> = self
            .matrix
            .as_slice()
            .chunks_exact(dim)
            .zip(&self.inv_norms)
            .enumerate()
            .map(|(i, (row, inv))| {
                let sum: f32 = queries
                    .iter()
                    .zip(&query_norms)
                    .map(|(q, q_inv)| kernels::dot_naive(q, row) * q_inv * inv)
                    .sum();
                (sum / queries.len() as f32, i)
            })
            .collect();
        scored.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        scored.truncate(k);
        scored.into_iter().map(|(_, i)| i).collect()
    }
}
