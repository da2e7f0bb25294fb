//! `penchant bench topk`: exact top-k search latency, `penchant_vectors::Matrix::top_k`, beside
//! a naive scan in the same run; then approximate search (HNSW) beside `hnsw_rs`.
//!
//! The seed's case is "10k candidates × 100 floats": score every item vector against a query
//! and keep the best 30, within a request's budget (aim: under 0.5 ms at the median). The suite
//! fills a [`Matrix`] with random unit vectors of 100 dimensions (Gaussian components,
//! normalized) — 10,000 and 100,000 items at `--scale medium`, 10,000 at `small`, and also
//! 1,000,000 at `large` — and times
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
//! with the same `m` and `efConstruction`, over 100,000 clustered unit vectors (10,000 at
//! `--scale small`, and also 1,000,000 at `large`; plus as many structureless ones, the worst
//! case, up to 100,000): build time, memory, p50/p99 at several `ef`, and recall@k against the
//! exact scan of the same run.

use std::hint::black_box;
use std::time::Instant;

use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use penchant_vectors::{Aggregate, Hnsw, HnswConfig, Matrix, Metric, kernels};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::report::{bar, spinner};
use crate::{Bench, Cell, CommonArgs, Report, Table, rate};

/// Queries timed before any are recorded.
const WARM_UP: usize = 5;

/// Queries of the multi-query search.
const MULTI: usize = 5;

/// `penchant-bench topk`'s flags.
#[derive(Debug, clap::Args)]
pub struct TopkBenchArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Queries timed per size (at least 200; at most 200 at a million items) [default by
    /// scale: small 200, medium and large 1,000].
    #[arg(long)]
    queries: Option<usize>,
    /// Results per query.
    #[arg(long, default_value_t = 30)]
    k: usize,
    /// Dimensions of the vectors.
    #[arg(long, default_value_t = 100)]
    dim: usize,
}

impl Bench for TopkBenchArgs {
    const NAME: &'static str = "topk";

    fn common(&self) -> &CommonArgs {
        &self.common
    }

    fn run(self, report: &mut Report) -> anyhow::Result<()> {
        run(&self, report)
    }
}

/// The run's sizes, from the scale (and `--queries`).
struct Plan {
    /// Queries timed per size.
    queries: usize,
    k: usize,
    dim: usize,
    /// Catalogue sizes of the exact search.
    exact: &'static [usize],
    /// Catalogue sizes of the approximate search.
    approximate: &'static [usize],
}

impl Plan {
    fn of(args: &TopkBenchArgs) -> Self {
        let scale = args.common.scale;
        Self {
            queries: args.queries.unwrap_or(scale.pick(200, 1000, 1000)),
            k: args.k,
            dim: args.dim,
            exact: scale.pick(&[10_000], &[10_000, 100_000], &[10_000, 100_000, 1_000_000]),
            approximate: scale.pick(&[10_000], &[100_000], &[100_000, 1_000_000]),
        }
    }
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

fn run(args: &TopkBenchArgs, report: &mut Report) -> anyhow::Result<()> {
    let plan = Plan::of(args);
    anyhow::ensure!(plan.queries >= 200, "--queries must be at least 200");
    anyhow::ensure!(
        plan.k > 0 && plan.dim > 0,
        "--k and --dim must be at least 1"
    );
    let (k, dim) = (plan.k, plan.dim);
    let mut table = Table::new(
        format!(
            "topk: exact top-{k} by cosine over random unit vectors of {dim} dimensions, one \
             thread; reference: kernels::dot_naive per row + full sort"
        ),
        &[
            "search",
            "p50 ms",
            "p99 ms",
            "GB/s",
            "naive p50 ms",
            "naive p99 ms",
            "naive GB/s",
            "speed-up",
            "agree",
        ],
    );
    let mut rng = StdRng::seed_from_u64(7);
    for &n in plan.exact {
        let matrix = Matrix::from_rows(dim, unit_vectors(&mut rng, n, dim));
        let queries_n = if n >= 1_000_000 { 200 } else { plan.queries };
        let queries: Vec<Vec<f32>> = (0..queries_n)
            .map(|_| unit_vectors(&mut rng, 1, dim))
            .collect();
        let naive = Naive::new(&matrix);

        let progress = bar(
            format!("topk: top_k, {} items, then the naive scan", rate(n as f64)),
            2 * (WARM_UP + queries_n) as u64,
        );
        let (ours, ours_results) = time(&queries, &progress, |q| {
            matrix
                .top_k(Metric::Cosine, q, k, |_| false)
                .into_iter()
                .map(|(i, _)| i)
                .collect()
        })?;
        let (theirs, theirs_results) =
            time(&queries, &progress, |q| naive.top_k(&[q.as_slice()], k))?;
        drop(progress);
        exact_row(
            &mut table,
            &format!("top_k, {} items", rate(n as f64)),
            n * dim * 4,
            &ours,
            &theirs,
            agreement(&ours_results, &theirs_results),
        );
        if n == 10_000 {
            let groups: Vec<Vec<f32>> = (0..queries_n)
                .map(|_| unit_vectors(&mut rng, MULTI, dim))
                .collect();
            let progress = bar(
                format!("topk: top_k_multi x{MULTI}, {} items", rate(n as f64)),
                2 * (WARM_UP + queries_n) as u64,
            );
            let (ours, ours_results) = time(&groups, &progress, |g| {
                let queries: Vec<&[f32]> = g.chunks_exact(dim).collect();
                matrix
                    .top_k_multi(Metric::Cosine, &queries, Aggregate::Mean, k, |_| false)
                    .into_iter()
                    .map(|(i, _)| i)
                    .collect()
            })?;
            let (theirs, theirs_results) = time(&groups, &progress, |g| {
                let queries: Vec<&[f32]> = g.chunks_exact(dim).collect();
                naive.top_k(&queries, k)
            })?;
            drop(progress);
            exact_row(
                &mut table,
                &format!("top_k_multi x{MULTI} (mean), {}", rate(n as f64)),
                n * dim * 4,
                &ours,
                &theirs,
                agreement(&ours_results, &theirs_results),
            );
        }
    }
    table.note(format!(
        "GB/s: the matrix's bytes over the p50; a query of the multi search reads it once; \
         agree: queries whose {k} results are identical, in order"
    ));
    table.note(format!("SIMD: {}", crate::report::simd()));
    report.table(table);
    report.table(approximate(&plan, &mut rng)?);
    Ok(())
}

/// Penchant's HNSW graph beside `hnsw_rs` and beside exact search, on clustered vectors (and on
/// structureless random ones, the worst case, at 100,000 items or fewer).
fn approximate(plan: &Plan, rng: &mut StdRng) -> anyhow::Result<Table> {
    let config = HnswConfig::default();
    let (k, dim) = (plan.k, plan.dim);
    let mut table = Table::new(
        format!(
            "topk: approximate top-{k} by cosine, HNSW m={} efConstruction={} (both graphs), each \
             answer's ef candidates rescored exactly; recall@{k}: share of the exact top-{k} found",
            config.m, config.ef_construction
        ),
        &[
            "index",
            "items",
            "build s",
            "MB",
            "ef",
            "p50 ms",
            "p99 ms",
            "recall",
            "exact p50 ms",
            "speed-up",
        ],
    );
    table.note(format!(
        "data: unit vectors around {CLUSTERS} random centres (an item = its centre + noise of the \
         same size, normalized); queries drawn the same way; 'random': no structure"
    ));
    table.note(format!(
        "hnsw_rs {HNSW_RS_VERSION} runs with Penchant's SIMD dot product as its distance and \
         builds on {} threads (parallel_insert); Penchant's graph builds on one",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    ));
    for &n in plan.approximate {
        let mut datasets = vec![("", clustered(rng, n, dim))];
        if n <= 100_000 {
            datasets.push((" random", unit_vectors(rng, n, dim)));
        }
        for (label, data) in datasets {
            let matrix = Matrix::from_rows(dim, data);
            let queries_n = plan.queries.min(if n >= 1_000_000 { 200 } else { 1000 });
            let queries: Vec<Vec<f32>> = if label.is_empty() {
                (0..queries_n).map(|_| clustered(rng, 1, dim)).collect()
            } else {
                (0..queries_n).map(|_| unit_vectors(rng, 1, dim)).collect()
            };
            let progress = bar(
                format!("topk: exact answers, {}{label} items", rate(n as f64)),
                (WARM_UP + queries_n) as u64,
            );
            let (exact, truth) = time(&queries, &progress, |q| {
                matrix
                    .top_k(Metric::Cosine, q, k, |_| false)
                    .into_iter()
                    .map(|(i, _)| i)
                    .collect()
            })?;
            drop(progress);

            let progress = spinner(format!(
                "topk: building Penchant's HNSW over {}{label} items",
                rate(n as f64)
            ));
            let start = Instant::now();
            let graph = Hnsw::build(&matrix, Metric::Cosine, config);
            let built = start.elapsed().as_secs_f64();
            drop(progress);
            let progress = bar(
                format!(
                    "topk: Penchant's HNSW queries, {}{label} items",
                    rate(n as f64)
                ),
                (EFS.len() * (WARM_UP + queries_n)) as u64,
            );
            for ef in EFS {
                let (latency, found) = time(&queries, &progress, |q| {
                    let candidates: Vec<usize> = graph
                        .search(&matrix, q, ef.max(k), |_| false)
                        .into_iter()
                        .map(|(i, _)| i)
                        .collect();
                    matrix
                        .top_k_among(Metric::Cosine, q, k, &candidates)
                        .into_iter()
                        .map(|(i, _)| i)
                        .collect()
                })?;
                approximate_row(
                    &mut table,
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
            drop(progress);
            drop(graph);

            let progress = spinner(format!(
                "topk: building hnsw_rs over {}{label} items",
                rate(n as f64)
            ));
            let start = Instant::now();
            let reference = reference_graph(&matrix, config);
            let built = start.elapsed().as_secs_f64();
            drop(progress);
            let progress = bar(
                format!("topk: hnsw_rs queries, {}{label} items", rate(n as f64)),
                (EFS.len() * (WARM_UP + queries_n)) as u64,
            );
            for ef in EFS {
                let (latency, found) = time(&queries, &progress, |q| {
                    let candidates: Vec<usize> = reference
                        .search(q, ef.max(k), ef.max(k))
                        .into_iter()
                        .map(|n| n.d_id)
                        .collect();
                    matrix
                        .top_k_among(Metric::Cosine, q, k, &candidates)
                        .into_iter()
                        .map(|(i, _)| i)
                        .collect()
                })?;
                approximate_row(
                    &mut table,
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
    table.note(
        "MB: Penchant's graph plus the matrix it searches in place; hnsw_rs keeps its own copy \
         of every vector in its nodes, its memory is not reported by the crate: see the process's \
         peak RSS",
    );
    Ok(table)
}

/// One row of the approximate table (`bytes` 0: not known).
#[allow(clippy::too_many_arguments)]
fn approximate_row(
    table: &mut Table,
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
        Cell::Empty
    } else {
        Cell::fixed(bytes as f64 / 1e6, 0)
    };
    table.row(vec![
        name.into(),
        Cell::int(n as f64),
        Cell::fixed(built, 1),
        mb,
        Cell::int(ef as f64),
        Cell::fixed(latency.p50 * 1e3, 3),
        Cell::fixed(latency.p99 * 1e3, 3),
        Cell::percent(100.0 * recall, 1),
        Cell::fixed(exact.p50 * 1e3, 3),
        Cell::times(exact.p50 / latency.p50, 1),
    ]);
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

/// One row of the exact table: ours beside the naive scan, over a matrix of `bytes`.
fn exact_row(
    table: &mut Table,
    name: &str,
    bytes: usize,
    ours: &Latency,
    theirs: &Latency,
    agree: f64,
) {
    let gbs = |l: &Latency| Cell::fixed(bytes as f64 / l.p50 / 1e9, 1);
    table.row(vec![
        name.into(),
        Cell::fixed(ours.p50 * 1e3, 3),
        Cell::fixed(ours.p99 * 1e3, 3),
        gbs(ours),
        Cell::fixed(theirs.p50 * 1e3, 3),
        Cell::fixed(theirs.p99 * 1e3, 3),
        gbs(theirs),
        Cell::times(theirs.p50 / ours.p50, 1),
        Cell::percent(100.0 * agree, 1),
    ]);
}

/// Times `search` on every query (after [`WARM_UP`] untimed ones), advancing `progress` by
/// each: the latencies and the results.
fn time<Q>(
    queries: &[Q],
    progress: &ProgressBar,
    mut search: impl FnMut(&Q) -> Vec<usize>,
) -> anyhow::Result<(Latency, Vec<Vec<usize>>)> {
    for q in queries.iter().take(WARM_UP) {
        black_box(search(q));
    }
    progress.inc(WARM_UP as u64);
    let mut hist = Histogram::<u64>::new(3)?;
    let mut results = Vec::with_capacity(queries.len());
    for q in queries {
        let start = Instant::now();
        let result = black_box(search(q));
        hist.record(start.elapsed().as_nanos() as u64)?;
        results.push(result);
        progress.inc(1);
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
