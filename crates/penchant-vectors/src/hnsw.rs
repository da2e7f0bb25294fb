//! Approximate nearest-neighbour search over a [`Matrix`]: a hierarchical navigable small-world
//! graph (HNSW; Malkov & Yashunin, 2018).
//!
//! An exact scan reads every row, so its cost grows with the catalogue: 2.5 ms at 100k rows of
//! 100 floats, 26 ms at a million (memory-bandwidth bound). The graph visits a few thousand rows
//! per query instead. Written here rather than taken from a crate because it is part of
//! Penchant's core and fits the matrix: it holds no copy of the vectors (it scores the matrix's
//! rows in place, with the same SIMD kernels), its links are flat `u32` arrays (132 bytes a row
//! at the default `m` of 16, against kilobytes a row for a graph of `Arc`ed nodes), and a
//! search skips rows the caller excludes while still walking through them. `penchant-bench
//! topk` measures it beside the `hnsw_rs` crate and exact search.
//!
//! Every metric is searched by "higher is closer". For [`Metric::Dot`], which is not a
//! distance (a row is not always its own best match), the graph is built over the rows
//! augmented with one more coordinate `√(M² − |x|²)` (`M` the largest norm), which puts every
//! row on a sphere where the dot product orders like a distance and a query's order is its dot
//! product order (Bachrach et al., 2014); the extra coordinate is kept beside the graph, not
//! copied into the rows.

use std::cell::RefCell;
use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use pulp::{Simd, WithSimd};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::kernels;
use crate::matrix::{Matrix, Metric};

/// Deepest layer a row may reach (a million rows at `m` = 16 use about five).
const MAX_LEVEL: usize = 15;

/// How a graph is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct HnswConfig {
    /// Links per row on the upper layers; twice as many on the bottom layer (2 to 128).
    pub m: usize,
    /// Candidates kept while linking a new row: more builds slower and finds better links.
    pub ef_construction: usize,
    /// Seed of the layer draws, so a build is reproducible.
    pub seed: u64,
}

impl Default for HnswConfig {
    fn default() -> Self {
        Self {
            m: 16,
            ef_construction: 100,
            seed: 42,
        }
    }
}

/// A graph over the rows of one [`Matrix`], searched by one [`Metric`].
#[derive(Debug, Clone)]
pub struct Hnsw {
    metric: Metric,
    m: usize,
    rows: usize,
    entry: u32,
    top: usize,
    /// Bottom-layer links: for each row, a count then `2m` slots.
    bottom: Vec<u32>,
    /// Upper-layer links of rows above the bottom layer: for each of its layers 1..=level, a
    /// count then `m` slots; empty for the other rows.
    upper: Vec<Box<[u32]>>,
    /// [`Metric::Dot`]: each row's extra coordinate; empty for the other metrics.
    extra: Vec<f32>,
}

impl Hnsw {
    /// Builds the graph of `matrix`'s rows for `metric`, one row after another (one thread).
    ///
    /// # Panics
    /// If `config.m` is not between 2 and 128.
    pub fn build(matrix: &Matrix, metric: Metric, config: HnswConfig) -> Self {
        Self::build_while(matrix, metric, config, |_| true)
            .expect("a build that is never stopped ends")
    }

    /// [`Hnsw::build`], asking `go_on(rows linked)` every 1,024 rows whether to continue:
    /// `None` if it said no (a server stops building the graph of a matrix it replaced).
    pub fn build_while(
        matrix: &Matrix,
        metric: Metric,
        config: HnswConfig,
        go_on: impl FnMut(usize) -> bool,
    ) -> Option<Self> {
        assert!(
            (2..=128).contains(&config.m),
            "HNSW m must be between 2 and 128, not {}",
            config.m
        );
        let extra = match metric {
            Metric::Dot => augmentation(matrix),
            _ => Vec::new(),
        };
        let graph = Self {
            metric,
            m: config.m,
            rows: 0,
            entry: 0,
            top: 0,
            bottom: vec![0; matrix.len() * (2 * config.m + 1)],
            upper: vec![Box::default(); matrix.len()],
            extra,
        };
        kernels::dispatch(Build {
            graph,
            matrix,
            config,
            go_on,
        })
    }

    /// The metric the graph orders rows by.
    pub fn metric(&self) -> Metric {
        self.metric
    }

    /// The number of rows linked (the matrix's rows when it was built).
    pub fn len(&self) -> usize {
        self.rows
    }

    /// Whether the graph is empty.
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// The heap memory held, in bytes, for memory budgets.
    pub fn bytes(&self) -> usize {
        let upper: usize = self.upper.iter().map(|l| l.len() * 4 + 16).sum();
        self.bottom.len() * 4 + upper + self.extra.len() * 4
    }

    /// About the `ef` rows closest to `query` as `(row, score)`, best first, leaving out the
    /// rows where `skip(row)` is true (they are still walked through). Scores are by the
    /// graph's metric, as [`Matrix::score`] gives them, except for [`Metric::Euclidean`], which
    /// is minus the *squared* distance (same order). More `ef`, better recall, slower; callers
    /// wanting `k` rows ask for `ef >= k` and rescore the candidates exactly.
    ///
    /// # Panics
    /// If `matrix` is not the matrix the graph was built over (its length differs).
    pub fn search(
        &self,
        matrix: &Matrix,
        query: &[f32],
        ef: usize,
        skip: impl Fn(usize) -> bool,
    ) -> Vec<(usize, f32)> {
        assert_eq!(
            matrix.len(),
            self.rows,
            "an HNSW graph of {} rows searched over a matrix of {}",
            self.rows,
            matrix.len()
        );
        if self.rows == 0 || ef == 0 {
            return Vec::new();
        }
        kernels::dispatch(Search {
            graph: self,
            matrix,
            query,
            ef,
            skip,
        })
    }

    fn links(&self, row: u32, level: usize) -> &[u32] {
        let (slots, width) = self.slots(row, level);
        let count = slots[0] as usize;
        debug_assert!(count < width);
        &slots[1..=count]
    }

    fn slots(&self, row: u32, level: usize) -> (&[u32], usize) {
        if level == 0 {
            let width = 2 * self.m + 1;
            let at = row as usize * width;
            (&self.bottom[at..at + width], width)
        } else {
            let width = self.m + 1;
            let at = (level - 1) * width;
            (&self.upper[row as usize][at..at + width], width)
        }
    }

    fn set_links(&mut self, row: u32, level: usize, links: &[u32]) {
        let (width, slots) = if level == 0 {
            let width = 2 * self.m + 1;
            let at = row as usize * width;
            (width, &mut self.bottom[at..at + width])
        } else {
            let width = self.m + 1;
            let at = (level - 1) * width;
            (width, &mut self.upper[row as usize][at..at + width])
        };
        debug_assert!(links.len() < width);
        slots[0] = links.len() as u32;
        slots[1..=links.len()].copy_from_slice(links);
    }

    fn capacity(&self, level: usize) -> usize {
        if level == 0 { 2 * self.m } else { self.m }
    }

    /// The row a greedy walk from the entry point reaches on layer `down_to` (moving to the
    /// closest link while one is closer, layer by layer).
    #[inline(always)]
    fn descend<S: Simd>(&self, target: &impl Target<S>, simd: S, down_to: usize) -> Candidate {
        let mut best = Candidate {
            sim: target.sim(simd, self.entry),
            row: self.entry,
        };
        for level in (down_to + 1..=self.top).rev() {
            loop {
                let mut moved = false;
                for &n in self.links(best.row, level) {
                    let s = target.sim(simd, n);
                    if s > best.sim {
                        best = Candidate { sim: s, row: n };
                        moved = true;
                    }
                }
                if !moved {
                    break;
                }
            }
        }
        best
    }

    /// The best `ef` rows of one layer reachable from `entries`, best first; rows where
    /// `keep(row)` is false are walked through but not returned.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn search_layer<S: Simd>(
        &self,
        target: &impl Target<S>,
        simd: S,
        entries: &[Candidate],
        ef: usize,
        level: usize,
        visited: &mut Visited,
        keep: &impl Fn(u32) -> bool,
    ) -> Vec<Candidate> {
        let mut frontier: BinaryHeap<Candidate> = BinaryHeap::new();
        let mut found: BinaryHeap<Reverse<Candidate>> = BinaryHeap::with_capacity(ef + 1);
        for &c in entries {
            if visited.insert(c.row) {
                frontier.push(c);
                if keep(c.row) {
                    found.push(Reverse(c));
                }
            }
        }
        while found.len() > ef {
            found.pop();
        }
        while let Some(c) = frontier.pop() {
            if found.len() >= ef && found.peek().is_some_and(|w| c.sim < w.0.sim) {
                break;
            }
            for &n in self.links(c.row, level) {
                if !visited.insert(n) {
                    continue;
                }
                let s = target.sim(simd, n);
                let worst = found.peek().map_or(f32::NEG_INFINITY, |w| w.0.sim);
                if found.len() < ef || s > worst {
                    let candidate = Candidate { sim: s, row: n };
                    frontier.push(candidate);
                    if keep(n) {
                        found.push(Reverse(candidate));
                        if found.len() > ef {
                            found.pop();
                        }
                    }
                }
            }
        }
        let mut found: Vec<Candidate> = found.into_iter().map(|Reverse(c)| c).collect();
        found.sort_unstable_by(|a, b| b.cmp(a));
        found
    }
}

/// The extra coordinate of each row that puts all rows on one sphere (see the module docs).
fn augmentation(matrix: &Matrix) -> Vec<f32> {
    let squares: Vec<f32> = (0..matrix.len())
        .map(|i| {
            let n = kernels::norm(matrix.row(i));
            if n.is_finite() { n * n } else { 0.0 }
        })
        .collect();
    let max = squares.iter().copied().fold(0.0f32, f32::max);
    squares.iter().map(|s| (max - s).max(0.0).sqrt()).collect()
}

/// A row and its similarity to the current target, ordered by similarity then lower row.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Candidate {
    sim: f32,
    row: u32,
}

impl Eq for Candidate {}

impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> Ordering {
        self.sim
            .total_cmp(&other.sim)
            .then_with(|| other.row.cmp(&self.row))
    }
}

impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

// The functions generic over `S: Simd` are `#[inline(always)]`: they run inside one dispatch
// (`Build`, `Search`), and only code inlined there is compiled with the detected instruction
// set — a separate function would call each SIMD intrinsic out of line (a profile of the build
// showed a third of its time in calls to `_mm256_fmadd_ps`).

/// Rows seen by one search: a mark per row, the current epoch meaning "seen", so clearing is
/// one increment rather than a pass over every row.
#[derive(Default)]
struct Visited {
    marks: Vec<u32>,
    epoch: u32,
}

impl Visited {
    fn clear(&mut self, rows: usize) {
        if self.marks.len() < rows {
            self.marks.resize(rows, 0);
        }
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.marks.fill(0);
            self.epoch = 1;
        }
    }

    #[inline]
    fn insert(&mut self, row: u32) -> bool {
        let mark = &mut self.marks[row as usize];
        let new = *mark != self.epoch;
        *mark = self.epoch;
        new
    }
}

thread_local! {
    /// Each search thread reuses one visited set.
    static VISITED: RefCell<Visited> = RefCell::default();
}

/// What a walk through the graph gets closer to: a row being linked, or a query.
///
/// A trait with `#[inline(always)]` methods rather than a closure, which would be compiled out
/// of line, without the dispatch's instruction set.
trait Target<S: Simd> {
    fn sim(&self, simd: S, row: u32) -> f32;
}

struct RowTarget<'a> {
    graph: &'a Hnsw,
    matrix: &'a Matrix,
    row: u32,
}

impl<S: Simd> Target<S> for RowTarget<'_> {
    #[inline(always)]
    fn sim(&self, simd: S, row: u32) -> f32 {
        row_sim(simd, self.graph, self.matrix, self.row, row)
    }
}

struct QueryTarget<'a> {
    metric: Metric,
    matrix: &'a Matrix,
    query: &'a [f32],
}

impl<S: Simd> Target<S> for QueryTarget<'_> {
    #[inline(always)]
    fn sim(&self, simd: S, row: u32) -> f32 {
        query_sim(simd, self.metric, self.matrix, self.query, row)
    }
}

/// Similarity of two rows under the graph's metric (the augmented dot product for Dot).
#[inline(always)]
fn row_sim<S: Simd>(simd: S, graph: &Hnsw, matrix: &Matrix, a: u32, b: u32) -> f32 {
    let (x, y) = (matrix.row(a as usize), matrix.row(b as usize));
    match graph.metric {
        Metric::Dot => {
            kernels::dot_simd(simd, x, y) + graph.extra[a as usize] * graph.extra[b as usize]
        }
        Metric::Cosine => {
            kernels::dot_simd(simd, x, y)
                * matrix.inv_norms[a as usize]
                * matrix.inv_norms[b as usize]
        }
        Metric::Euclidean => -kernels::squared_distance_simd(simd, x, y),
    }
}

/// Similarity of a query to a row: the query's own norm is left out (it orders nothing).
#[inline(always)]
fn query_sim<S: Simd>(simd: S, metric: Metric, matrix: &Matrix, query: &[f32], row: u32) -> f32 {
    let r = matrix.row(row as usize);
    match metric {
        Metric::Dot => kernels::dot_simd(simd, query, r),
        Metric::Cosine => kernels::dot_simd(simd, query, r) * matrix.inv_norms[row as usize],
        Metric::Euclidean => -kernels::squared_distance_simd(simd, query, r),
    }
}

struct Build<'a, P> {
    graph: Hnsw,
    matrix: &'a Matrix,
    config: HnswConfig,
    go_on: P,
}

impl<P: FnMut(usize) -> bool> WithSimd for Build<'_, P> {
    type Output = Option<Hnsw>;

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) -> Option<Hnsw> {
        let Self {
            mut graph,
            matrix,
            config,
            mut go_on,
        } = self;
        let mut rng = StdRng::seed_from_u64(config.seed);
        let scale = 1.0 / (config.m as f64).ln();
        let mut visited = Visited::default();
        for row in 0..matrix.len() as u32 {
            let draw: f64 = rng.random::<f64>();
            let level = ((-(1.0 - draw).ln() * scale) as usize).min(MAX_LEVEL);
            if level > 0 {
                graph.upper[row as usize] = vec![0; level * (config.m + 1)].into_boxed_slice();
            }
            insert(simd, &mut graph, matrix, row, level, config, &mut visited);
            graph.rows += 1;
            if graph.rows.is_multiple_of(1024) && !go_on(graph.rows) {
                return None;
            }
        }
        Some(graph)
    }
}

/// Links `row` (drawn to `level`) into the graph of the rows before it.
#[inline(always)]
fn insert<S: Simd>(
    simd: S,
    graph: &mut Hnsw,
    matrix: &Matrix,
    row: u32,
    level: usize,
    config: HnswConfig,
    visited: &mut Visited,
) {
    if graph.rows == 0 {
        graph.entry = row;
        graph.top = level;
        return;
    }
    let target = RowTarget { graph, matrix, row };
    let top = graph.top;
    let start = graph.descend(&target, simd, level);
    let mut entries = vec![start];
    let mut chosen: Vec<(usize, Vec<u32>)> = Vec::with_capacity(level.min(top) + 1);
    for layer in (0..=level.min(top)).rev() {
        visited.clear(graph.rows);
        let found = graph.search_layer(
            &target,
            simd,
            &entries,
            config.ef_construction,
            layer,
            visited,
            &|_| true,
        );
        let links = select(simd, graph, matrix, &found, config.m);
        chosen.push((layer, links));
        entries = found;
    }
    for (layer, links) in chosen {
        graph.set_links(row, layer, &links);
        for &n in &links {
            link_back(simd, graph, matrix, n, row, layer);
        }
    }
    if level > top {
        graph.entry = row;
        graph.top = level;
    }
}

/// Adds `row` to `n`'s links on `layer`; a full list is pruned again by the heuristic.
#[inline(always)]
fn link_back<S: Simd>(simd: S, graph: &mut Hnsw, matrix: &Matrix, n: u32, row: u32, layer: usize) {
    let capacity = graph.capacity(layer);
    let current = graph.links(n, layer);
    if current.len() < capacity {
        let mut links = current.to_vec();
        links.push(row);
        graph.set_links(n, layer, &links);
        return;
    }
    let mut candidates = Vec::with_capacity(capacity + 1);
    for &c in current.iter().chain([&row]) {
        candidates.push(Candidate {
            sim: row_sim(simd, graph, matrix, n, c),
            row: c,
        });
    }
    candidates.sort_unstable_by(|a, b| b.cmp(a));
    let links = select(simd, graph, matrix, &candidates, capacity);
    graph.set_links(n, layer, &links);
}

/// The paper's neighbour heuristic: from candidates sorted best first, keep one only if it is
/// closer to the target than to every one kept before it, so links spread out in different
/// directions rather than all into the nearest cluster; at most `max`.
#[inline(always)]
fn select<S: Simd>(
    simd: S,
    graph: &Hnsw,
    matrix: &Matrix,
    sorted: &[Candidate],
    max: usize,
) -> Vec<u32> {
    let mut kept: Vec<u32> = Vec::with_capacity(max);
    for c in sorted {
        if kept.len() == max {
            break;
        }
        // A loop, not `Iterator::all`: a closure would be compiled out of line, without SIMD.
        let mut diverse = true;
        for &k in &kept {
            if row_sim(simd, graph, matrix, c.row, k) >= c.sim {
                diverse = false;
                break;
            }
        }
        if diverse {
            kept.push(c.row);
        }
    }
    kept
}

struct Search<'a, F> {
    graph: &'a Hnsw,
    matrix: &'a Matrix,
    query: &'a [f32],
    ef: usize,
    skip: F,
}

impl<F: Fn(usize) -> bool> WithSimd for Search<'_, F> {
    type Output = Vec<(usize, f32)>;

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) -> Self::Output {
        let Self {
            graph,
            matrix,
            query,
            ef,
            skip,
        } = self;
        let metric = graph.metric;
        let target = QueryTarget {
            metric,
            matrix,
            query,
        };
        let start = graph.descend(&target, simd, 0);
        // Taken out and put back rather than borrowed in a closure (see `Target`).
        let mut visited = VISITED.take();
        visited.clear(graph.rows);
        let keep = |r: u32| !skip(r as usize);
        let found = graph.search_layer(&target, simd, &[start], ef, 0, &mut visited, &keep);
        VISITED.set(visited);
        let inv_q = match metric {
            Metric::Cosine => {
                let n = kernels::norm(query);
                if n > 0.0 && n.is_finite() {
                    1.0 / n
                } else {
                    0.0
                }
            }
            _ => 1.0,
        };
        found
            .into_iter()
            .map(|c| (c.row as usize, c.sim * inv_q))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid(n: usize) -> Matrix {
        // Points on a line: row i is (i, 1), so the nearest rows are the neighbours by index.
        let data = (0..n).flat_map(|i| [i as f32, 1.0]).collect();
        Matrix::from_rows(2, data)
    }

    #[test]
    fn small_graphs_find_the_exact_neighbours() {
        let m = grid(500);
        let graph = Hnsw::build(&m, Metric::Euclidean, HnswConfig::default());
        assert_eq!(graph.len(), 500);
        let found = graph.search(&m, &[250.2, 1.0], 3, |_| false);
        let rows: Vec<usize> = found.iter().map(|(r, _)| *r).collect();
        assert_eq!(rows, vec![250, 251, 249]);
        assert!((found[0].1 + 0.04).abs() < 1e-4, "{found:?}");
    }

    #[test]
    fn skipped_rows_are_walked_through_not_returned() {
        let m = grid(500);
        let graph = Hnsw::build(&m, Metric::Euclidean, HnswConfig::default());
        let found = graph.search(&m, &[100.0, 1.0], 2, |r| (95..=105).contains(&r));
        let rows: Vec<usize> = found.iter().map(|(r, _)| *r).collect();
        assert_eq!(rows, vec![94, 106]);
    }

    #[test]
    fn empty_and_tiny_matrices() {
        let empty = Matrix::new(3);
        let graph = Hnsw::build(&empty, Metric::Cosine, HnswConfig::default());
        assert!(graph.is_empty());
        assert!(
            graph
                .search(&empty, &[1.0, 0.0, 0.0], 5, |_| false)
                .is_empty()
        );
        let one = Matrix::from_rows(2, vec![3.0, 4.0]);
        let graph = Hnsw::build(&one, Metric::Cosine, HnswConfig::default());
        let found = graph.search(&one, &[6.0, 8.0], 5, |_| false);
        assert_eq!(found.len(), 1);
        assert!((found[0].1 - 1.0).abs() < 1e-6);
        assert!(graph.bytes() > 0);
    }

    #[test]
    fn dot_scores_are_dot_products_and_the_largest_wins() {
        // Under the dot product the longest row aligned with the query wins, even over a row
        // pointing exactly the query's way.
        let m = Matrix::from_rows(2, vec![1.0, 0.0, 5.0, 1.0, 0.0, 1.0, -2.0, 0.0]);
        let graph = Hnsw::build(&m, Metric::Dot, HnswConfig::default());
        let found = graph.search(&m, &[1.0, 0.0], 4, |_| false);
        assert_eq!(found[0], (1, 5.0));
        assert_eq!(found.len(), 4);
        assert_eq!(found[3], (3, -2.0));
    }

    #[test]
    fn a_build_stops_when_asked() {
        let m = grid(3000);
        let mut asked = Vec::new();
        let stopped = Hnsw::build_while(&m, Metric::Euclidean, HnswConfig::default(), |rows| {
            asked.push(rows);
            rows < 2048
        });
        assert!(stopped.is_none());
        assert_eq!(asked, [1024, 2048]);
    }

    #[test]
    #[should_panic(expected = "HNSW m must be between 2 and 128")]
    fn m_is_bounded() {
        let config = HnswConfig {
            m: 1,
            ..HnswConfig::default()
        };
        Hnsw::build(&grid(3), Metric::Dot, config);
    }
}
