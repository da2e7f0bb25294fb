//! `penchant bench topk`: exact top-k search latency, `penchant_vectors::Matrix::top_k`, beside
//! a naive scan in the same run; then approximate search (HNSW) beside `hnsw_rs`.
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
//!
//! Then approximate search: Penchant's HNSW graph ([`Hnsw`]) and the `hnsw_rs` crate, built
//! with the same `m` and `efConstruction`, over 100,000 clustered unit vectors (and 1,000,000
//! with `--scale large`; plus 100,000 structureless ones, the worst case): build time, memory,
//! p50/p99 at several `ef`, and recall@k against the exact scan of the same run.

use std::hint::black_box;
use std::time::Instant;

use hdrhistogram::Histogram;
use penchant_vectors::{Aggregate, Hnsw, HnswConfig, Matrix, Metric, kernels};
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
    approximate(&args, &mut rng)
}

/// Catalogue sizes of the approximate search.
fn approximate_sizes(scale: Scale) -> Vec<usize> {
    match scale {
        Scale::Small => vec![100_000],
        Scale::Large => vec![100_000, 1_000_000],
    }
}

/// Penchant's HNSW graph beside `hnsw_rs` and beside exact search, on clustered vectors (and on
/// structureless random ones, the worst case, at the smaller size).
fn approximate(args: &TopkBenchArgs, rng: &mut StdRng) -> anyhow::Result<()> {
    let config = HnswConfig::default();
    println!(
        "\napproximate top-{} by cosine: HNSW m={} efConstruction={} (both graphs), each answer's \
         ef candidates rescored exactly; recall@{}: share of the exact top-{} found",
        args.k, config.m, config.ef_construction, args.k, args.k
    );
    println!(
        "data: unit vectors around {CLUSTERS} random centres (an item = its centre + noise of the \
         same size, normalized); queries drawn the same way; 'random': no structure"
    );
    println!(
        "hnsw_rs {HNSW_RS_VERSION} runs with Penchant's SIMD dot product as its distance and \
         builds on {} threads (parallel_insert); Penchant's graph builds on one",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!(
        "\n{:<18} {:>6} {:>8} {:>8} {:>5} {:>8} {:>8} {:>9} {:>9} {:>8}",
        "index",
        "items",
        "build s",
        "MB",
        "ef",
        "p50 ms",
        "p99 ms",
        "recall",
        "exact p50",
        "speed-up"
    );
    for n in approximate_sizes(args.scale) {
        let mut datasets = vec![("", clustered(rng, n, args.dim))];
        if n <= 100_000 {
            datasets.push((" random", unit_vectors(rng, n, args.dim)));
        }
        for (label, data) in datasets {
            let matrix = Matrix::from_rows(args.dim, data);
            let queries_n = args.queries.min(if n >= 1_000_000 { 200 } else { 1000 });
            let queries: Vec<Vec<f32>> = if label.is_empty() {
                (0..queries_n)
                    .map(|_| clustered(rng, 1, args.dim))
                    .collect()
            } else {
                (0..queries_n)
                    .map(|_| unit_vectors(rng, 1, args.dim))
                    .collect()
            };
            let (exact, truth) = time(&queries, |q| {
                matrix
                    .top_k(Metric::Cosine, q, args.k, |_| false)
                    .into_iter()
                    .map(|(i, _)| i)
                    .collect()
            })?;

            let start = Instant::now();
            let graph = Hnsw::build(&matrix, Metric::Cosine, config);
            let built = start.elapsed().as_secs_f64();
            for ef in EFS {
                let (latency, found) = time(&queries, |q| {
                    let candidates: Vec<usize> = graph
                        .search(&matrix, q, ef.max(args.k), |_| false)
                        .into_iter()
                        .map(|(i, _)| i)
                        .collect();
                    matrix
                        .top_k_among(Metric::Cosine, q, args.k, &candidates)
                        .into_iter()
                        .map(|(i, _)| i)
                        .collect()
                })?;
                print_approximate(
                    &format!("penchant{label}"),
                    n,
                    built,
                    graph.bytes() + matrix.bytes(),
                    ef,
                    &latency,
                    recall(&truth, &found),
                    &exact,
                );
            }
            drop(graph);

            let start = Instant::now();
            let reference = reference_graph(&matrix, config);
            let built = start.elapsed().as_secs_f64();
            for ef in EFS {
                let (latency, found) = time(&queries, |q| {
                    let candidates: Vec<usize> = reference
                        .search(q, ef.max(args.k), ef.max(args.k))
                        .into_iter()
                        .map(|n| n.d_id)
                        .collect();
                    matrix
                        .top_k_among(Metric::Cosine, q, args.k, &candidates)
                        .into_iter()
                        .map(|(i, _)| i)
                        .collect()
                })?;
                print_approximate(
                    &format!("hnsw_rs{label}"),
                    n,
                    built,
                    0,
                    ef,
                    &latency,
                    recall(&truth, &found),
                    &exact,
                );
            }
        }
    }
    println!(
        "(MB: Penchant's graph plus the matrix it searches in place; hnsw_rs keeps its own copy \
         of every vector in its nodes, its memory is not reported by the crate: see the process's \
         peak RSS)"
    );
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn print_approximate(
    name: &str,
    n: usize,
    built: f64,
    bytes: usize,
    ef: usize,
    latency: &Latency,
    recall: f64,
    exact: &Latency,
) {
    let mb = if bytes == 0 {
        "-".to_owned()
    } else {
        format!("{:.0}", bytes as f64 / 1e6)
    };
    println!(
        "{:<18} {:>6} {:>8.1} {:>8} {:>5} {:>8.3} {:>8.3} {:>8.1}% {:>9.3} {:>7.1}x",
        name,
        rate(n as f64),
        built,
        mb,
        ef,
        latency.p50 * 1e3,
        latency.p99 * 1e3,
        100.0 * recall,
        exact.p50 * 1e3,
        exact.p50 / latency.p50,
    );
}

/// Candidates asked of each graph per query.
const EFS: [usize; 3] = [32, 64, 128];

/// Centres of the clustered vectors.
const CLUSTERS: usize = 1000;

const HNSW_RS_VERSION: &str = "0.3";

/// The share of the exact results found, over all queries.
fn recall(truth: &[Vec<usize>], found: &[Vec<usize>]) -> f64 {
    let mut hits = 0;
    let mut total = 0;
    for (t, f) in truth.iter().zip(found) {
        total += t.len();
        hits += f.iter().filter(|i| t.contains(i)).count();
    }
    hits as f64 / total.max(1) as f64
}

/// `n` unit vectors around [`CLUSTERS`] centres fixed by a seed: centre + noise of the same
/// length, normalized (so neighbours are mostly, not only, in the same cluster).
fn clustered(rng: &mut StdRng, n: usize, dim: usize) -> Vec<f32> {
    let centres = unit_vectors(&mut StdRng::seed_from_u64(99), CLUSTERS, dim);
    let mut out = unit_vectors(rng, n, dim);
    for row in out.chunks_exact_mut(dim) {
        let c = rng.random_range(0..CLUSTERS);
        let centre = &centres[c * dim..(c + 1) * dim];
        for (x, m) in row.iter_mut().zip(centre) {
            *x += m;
        }
        let norm = kernels::dot_naive(row, row).sqrt();
        row.iter_mut().for_each(|x| *x /= norm);
    }
    out
}

/// `1 − cosine` of unit vectors with Penchant's dot product; never negative (`hnsw_rs`
/// asserts so), so rounding above 1 is clamped.
struct UnitCosine;

impl hnsw_rs::prelude::Distance<f32> for UnitCosine {
    fn eval(&self, a: &[f32], b: &[f32]) -> f32 {
        (1.0 - kernels::dot(a, b)).max(0.0)
    }
}

fn reference_graph(
    matrix: &Matrix,
    config: HnswConfig,
) -> hnsw_rs::hnsw::Hnsw<'static, f32, UnitCosine> {
    let graph = hnsw_rs::hnsw::Hnsw::new(
        config.m,
        matrix.len(),
        16,
        config.ef_construction,
        UnitCosine,
    );
    let rows: Vec<(&[f32], usize)> = (0..matrix.len()).map(|i| (matrix.row(i), i)).collect();
    graph.parallel_insert_slice(&rows);
    graph
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
