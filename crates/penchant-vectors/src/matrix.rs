//! A dense matrix of `f32` rows with exact top-k search.
//!
//! Item and user vectors are stored as one contiguous buffer, row after row, because a top-k
//! scan is a pass over every row: contiguous rows stream from memory at full bandwidth, where a
//! `Vec<Vec<f32>>` would chase a pointer per row. Each row's inverse norm is kept beside it, so
//! cosine scoring costs one dot product per row, like dot scoring.
//!
//! The search here is exact (a scan): up to about 100,000 rows of 100 floats a SIMD scan
//! answers in a few milliseconds and has no index to build, tune or keep in sync with the
//! factors. Beyond that, [`crate::hnsw`] finds candidates approximately, which this scores.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::fmt;

use pulp::{Simd, WithSimd};
use serde::{Deserialize, Serialize};

use crate::kernels;

/// How a query is compared with a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Metric {
    /// The cosine of the angle between the two; 0 when either is the zero vector.
    Cosine,
    /// The dot product (what ALS factors are trained for).
    Dot,
    /// The Euclidean distance, negated so that higher is better.
    Euclidean,
}

/// How the scores of a row against several queries become one score.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Aggregate {
    /// The mean of the scores: rows close to all queries win.
    #[default]
    Mean,
    /// The best of the scores: rows close to any one query win.
    Max,
}

/// `n` rows of `dim` `f32`s, contiguous, plus each row's inverse norm (0 for a zero row).
#[derive(Clone, Default, PartialEq)]
pub struct Matrix {
    dim: usize,
    data: Vec<f32>,
    pub(crate) inv_norms: Vec<f32>,
}

impl fmt::Debug for Matrix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The rows themselves would be megabytes of numbers.
        f.debug_struct("Matrix")
            .field("dim", &self.dim)
            .field("rows", &self.len())
            .finish_non_exhaustive()
    }
}

impl Matrix {
    /// An empty matrix of rows of `dim` values.
    pub fn new(dim: usize) -> Self {
        Self::with_capacity(dim, 0)
    }

    /// An empty matrix with room for `rows` rows.
    pub fn with_capacity(dim: usize, rows: usize) -> Self {
        Self {
            dim,
            data: Vec::with_capacity(dim * rows),
            inv_norms: Vec::with_capacity(rows),
        }
    }

    /// A matrix over `data`, rows one after the other.
    ///
    /// # Panics
    /// If `data.len()` is not a multiple of `dim`, or `dim` is 0 and `data` is not empty.
    pub fn from_rows(dim: usize, data: Vec<f32>) -> Self {
        let rows = if dim == 0 {
            assert!(
                data.is_empty(),
                "matrix of dimension 0 given {} values",
                data.len()
            );
            0
        } else {
            assert!(
                data.len().is_multiple_of(dim),
                "matrix data of {} values is not a whole number of rows of {dim}",
                data.len()
            );
            data.len() / dim
        };
        let inv_norms = (0..rows)
            .map(|i| inverse_norm(&data[i * dim..(i + 1) * dim]))
            .collect();
        Self {
            dim,
            data,
            inv_norms,
        }
    }

    /// Appends a row and returns its index.
    ///
    /// # Panics
    /// If `row.len() != self.dim()`.
    pub fn push(&mut self, row: &[f32]) -> usize {
        self.check_len(row);
        self.data.extend_from_slice(row);
        self.inv_norms.push(inverse_norm(row));
        self.inv_norms.len() - 1
    }

    /// Replaces row `i`.
    ///
    /// # Panics
    /// If `i` is out of range or `row.len() != self.dim()`.
    pub fn set(&mut self, i: usize, row: &[f32]) {
        self.check_len(row);
        self.data[i * self.dim..(i + 1) * self.dim].copy_from_slice(row);
        self.inv_norms[i] = inverse_norm(row);
    }

    /// The number of values in a row.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The number of rows.
    pub fn len(&self) -> usize {
        self.inv_norms.len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.inv_norms.is_empty()
    }

    /// Row `i`.
    ///
    /// # Panics
    /// If `i` is out of range.
    pub fn row(&self, i: usize) -> &[f32] {
        assert!(i < self.len(), "row {i} of a matrix of {} rows", self.len());
        &self.data[i * self.dim..(i + 1) * self.dim]
    }

    /// All rows, one after the other.
    pub fn as_slice(&self) -> &[f32] {
        &self.data
    }

    /// The heap memory held, in bytes (capacity, not length), for memory budgets.
    pub fn bytes(&self) -> usize {
        (self.data.capacity() + self.inv_norms.capacity()) * size_of::<f32>()
    }

    /// The score of row `i` against `query`: higher is better.
    ///
    /// Cosine is `dot / (|q| |r|)` (0 if either is zero), Dot is the dot product, Euclidean is
    /// minus the distance.
    ///
    /// # Panics
    /// If `i` is out of range; in debug builds, if `query.len() != self.dim()`.
    pub fn score(&self, metric: Metric, query: &[f32], i: usize) -> f32 {
        Query::new(metric, query).score(self, i)
    }

    /// Every row's dot product with `query`, in row order: each bit for bit
    /// `kernels::dot(query, row)`, in one pass (one dispatch for all rows).
    pub fn dots(&self, query: &[f32]) -> Vec<f32> {
        self.dots_many(&[query]).swap_remove(0)
    }

    /// Each of `queries`' dot products with every row ([`Matrix::dots`] of each), in one pass
    /// over the rows: a matrix larger than the caches is read from memory once, not once a
    /// query.
    pub fn dots_many(&self, queries: &[&[f32]]) -> Vec<Vec<f32>> {
        kernels::dispatch(DotsMany {
            matrix: self,
            queries,
        })
    }

    /// `query`'s dot product with each of `rows`, in their order, each as [`kernels::dot`]
    /// gives it; a row past the matrix's end reads as a row of zeros.
    pub fn dots_of(&self, query: &[f32], rows: &[u32]) -> Vec<f32> {
        self.dots_many_of(&[query], rows).swap_remove(0)
    }

    /// Each of `queries`' [`Matrix::dots_of`] `rows`, in one pass over the rows.
    pub fn dots_many_of(&self, queries: &[&[f32]], rows: &[u32]) -> Vec<Vec<f32>> {
        kernels::dispatch(DotsOf {
            matrix: self,
            queries,
            rows,
        })
    }

    /// The `k` best rows for `query` as `(row, score)`, best first (ties: lower row first),
    /// skipping the rows where `skip(row)` is true and rows whose score is NaN.
    ///
    /// One pass over the rows with a bounded min-heap of the best `k` so far; `|query|` is
    /// computed once.
    pub fn top_k(
        &self,
        metric: Metric,
        query: &[f32],
        k: usize,
        skip: impl Fn(usize) -> bool,
    ) -> Vec<(usize, f32)> {
        let query = Query::new(metric, query);
        let rows = (0..self.len()).filter(|&i| !skip(i));
        kernels::dispatch(Scan {
            matrix: self,
            query: &query,
            rows,
            k,
        })
    }

    /// [`Matrix::top_k`] over the candidate `rows` only; a row listed twice is scored twice.
    ///
    /// # Panics
    /// If a row is out of range.
    pub fn top_k_among(
        &self,
        metric: Metric,
        query: &[f32],
        k: usize,
        rows: &[usize],
    ) -> Vec<(usize, f32)> {
        let query = Query::new(metric, query);
        kernels::dispatch(Scan {
            matrix: self,
            query: &query,
            rows: rows.iter().copied(),
            k,
        })
    }

    /// The `k` best rows for several queries at once (for example the last items a user liked),
    /// each row scored by the mean or the max of its scores against the queries; `skip` as in
    /// [`Matrix::top_k`] (callers skip the query items themselves). No queries, no results.
    ///
    /// The mean of dot products is the dot product with the mean query, and the mean of cosines
    /// is the cosine-style score against the mean of the normalized queries, so those two scan
    /// the rows once, whatever the number of queries; Euclidean and [`Aggregate::Max`] score
    /// each row against each query.
    pub fn top_k_multi(
        &self,
        metric: Metric,
        queries: &[&[f32]],
        aggregate: Aggregate,
        k: usize,
        skip: impl Fn(usize) -> bool,
    ) -> Vec<(usize, f32)> {
        if queries.is_empty() {
            return Vec::new();
        }
        if aggregate == Aggregate::Mean && metric != Metric::Euclidean {
            let mean = Self::mean_query(metric, queries);
            // A cosine query whose inverse norm is 1 scores dot(mean, r) / |r|.
            let query = Query {
                metric,
                vector: &mean,
                inv_norm: 1.0,
            };
            let rows = (0..self.len()).filter(|&i| !skip(i));
            return kernels::dispatch(Scan {
                matrix: self,
                query: &query,
                rows,
                k,
            });
        }
        let queries: Vec<Query<'_>> = queries.iter().map(|q| Query::new(metric, q)).collect();
        let mut best = TopK::new(k);
        for i in 0..self.len() {
            if skip(i) {
                continue;
            }
            let scores = queries.iter().map(|q| q.score(self, i));
            let score = match aggregate {
                Aggregate::Mean => scores.sum::<f32>() / queries.len() as f32,
                Aggregate::Max => scores.fold(f32::NEG_INFINITY, f32::max),
            };
            best.offer(i, score);
        }
        best.into_sorted()
    }

    /// The one query whose dot product with a row is the mean of the queries' scores against
    /// it: `Σⱼ q̂ⱼ / n` with `q̂ⱼ = qⱼ` for [`Metric::Dot`] and `qⱼ / |qⱼ|` for [`Metric::Cosine`]
    /// (0 for a zero query), so that the mean cosine is `dot(mean, r) / |r|`. (No such query
    /// exists for [`Metric::Euclidean`]; it is treated as Dot.) Empty for no queries.
    pub fn mean_query(metric: Metric, queries: &[&[f32]]) -> Vec<f32> {
        let Some(first) = queries.first() else {
            return Vec::new();
        };
        let scale = 1.0 / queries.len() as f32;
        let mut mean = vec![0.0f32; first.len()];
        for q in queries {
            let weight = match metric {
                Metric::Cosine => inverse_norm(q),
                _ => 1.0,
            };
            kernels::axpy(weight * scale, q, &mut mean);
        }
        mean
    }

    fn check_len(&self, row: &[f32]) {
        assert_eq!(
            row.len(),
            self.dim,
            "row of {} values in a matrix of dimension {}",
            row.len(),
            self.dim
        );
    }
}

/// `1 / |row|`, or 0 for a zero (or non-finite) row.
fn inverse_norm(row: &[f32]) -> f32 {
    let n = kernels::norm(row);
    if n > 0.0 && n.is_finite() {
        1.0 / n
    } else {
        0.0
    }
}

/// A query with what scoring needs computed once.
struct Query<'a> {
    metric: Metric,
    vector: &'a [f32],
    inv_norm: f32,
}

impl<'a> Query<'a> {
    fn new(metric: Metric, vector: &'a [f32]) -> Self {
        let inv_norm = if metric == Metric::Cosine {
            inverse_norm(vector)
        } else {
            0.0
        };
        Self {
            metric,
            vector,
            inv_norm,
        }
    }

    #[inline]
    fn score(&self, matrix: &Matrix, i: usize) -> f32 {
        let row = matrix.row(i);
        match self.metric {
            Metric::Dot => kernels::dot(self.vector, row),
            Metric::Cosine => kernels::dot(self.vector, row) * self.inv_norm * matrix.inv_norms[i],
            Metric::Euclidean => -kernels::squared_distance(self.vector, row).sqrt(),
        }
    }
}

/// One query against `rows` of a matrix, the best `k` kept: the whole scan runs inside one
/// SIMD dispatch, with the kernels inlined into the loop.
struct Scan<'a, I> {
    matrix: &'a Matrix,
    query: &'a Query<'a>,
    rows: I,
    k: usize,
}

impl<I: Iterator<Item = usize>> WithSimd for Scan<'_, I> {
    type Output = Vec<(usize, f32)>;

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) -> Self::Output {
        let Self {
            matrix,
            query,
            rows,
            k,
        } = self;
        let q = query.vector;
        let mut best = TopK::new(k);
        // The metric is matched once, outside the loop.
        match query.metric {
            Metric::Dot => {
                for i in rows {
                    best.offer(i, kernels::dot_simd(simd, q, matrix.row(i)));
                }
            }
            Metric::Cosine => {
                let inv_q = query.inv_norm;
                for i in rows {
                    let dot = kernels::dot_simd(simd, q, matrix.row(i));
                    best.offer(i, dot * inv_q * matrix.inv_norms[i]);
                }
            }
            Metric::Euclidean => {
                for i in rows {
                    let d = kernels::squared_distance_simd(simd, q, matrix.row(i));
                    best.offer(i, -d.sqrt());
                }
            }
        }
        best.into_sorted()
    }
}

struct DotsMany<'a> {
    matrix: &'a Matrix,
    queries: &'a [&'a [f32]],
}

impl WithSimd for DotsMany<'_> {
    type Output = Vec<Vec<f32>>;

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) -> Self::Output {
        let rows = self.matrix.len();
        let mut dots = vec![vec![0.0f32; rows]; self.queries.len()];
        for i in 0..rows {
            let row = self.matrix.row(i);
            for (dots, query) in dots.iter_mut().zip(self.queries) {
                dots[i] = kernels::dot_simd(simd, query, row);
            }
        }
        dots
    }
}

struct DotsOf<'a> {
    matrix: &'a Matrix,
    queries: &'a [&'a [f32]],
    rows: &'a [u32],
}

impl WithSimd for DotsOf<'_> {
    type Output = Vec<Vec<f32>>;

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) -> Self::Output {
        let zero = vec![0.0f32; self.matrix.dim()];
        let mut dots = vec![Vec::with_capacity(self.rows.len()); self.queries.len()];
        for &i in self.rows {
            let row = match i as usize {
                i if i < self.matrix.len() => self.matrix.row(i),
                _ => &zero,
            };
            for (dots, query) in dots.iter_mut().zip(self.queries) {
                dots.push(kernels::dot_simd(simd, query, row));
            }
        }
        dots
    }
}

/// The `k` best rows of `scores` (row `i` scored `scores[i]`) as [`Matrix::top_k`] keeps them:
/// best first, ties lower row first, rows where `skip(row)` is true and NaN left out (for
/// scores computed once and ranked several ways).
///
/// No heap: the rows that may enter are put aside, and each time `2k` are, the best `k` of them
/// are selected (linear time) and the worst of those becomes the floor later rows must reach.
/// Most rows of a long list fall below it soon, and are tested against it a chunk at a time (a
/// few vector compares); only a chunk with a score that may enter is looked at row by row.
pub fn top_k_of(scores: &[f32], k: usize, skip: impl Fn(usize) -> bool) -> Vec<(usize, f32)> {
    const CHUNK: usize = 16;
    if k == 0 {
        return Vec::new();
    }
    // Better first: higher score, then lower row.
    let order = |a: &(usize, f32), b: &(usize, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    let cut = |kept: &mut Vec<(usize, f32)>| {
        if kept.len() > k {
            kept.select_nth_unstable_by(k - 1, order);
            kept.truncate(k);
        }
    };
    let mut kept: Vec<(usize, f32)> = Vec::with_capacity(k.min(scores.len()).saturating_mul(2));
    // No score below this can enter (NaN fails every test against it, and never enters).
    let mut floor = f32::NEG_INFINITY;
    let offer = |kept: &mut Vec<(usize, f32)>, floor: &mut f32, from: usize, chunk: &[f32]| {
        for (j, &score) in chunk.iter().enumerate() {
            if score >= *floor && !skip(from + j) {
                // -0.0 and +0.0 tie: total_cmp would rank them.
                kept.push((from + j, score + 0.0));
                if kept.len() == k.saturating_mul(2) {
                    cut(kept);
                    *floor = kept.iter().map(|s| s.1).fold(f32::INFINITY, f32::min);
                }
            }
        }
    };
    let chunks = scores.chunks_exact(CHUNK);
    let rest = chunks.remainder();
    for (c, chunk) in chunks.enumerate() {
        let chunk: &[f32; CHUNK] = chunk.try_into().expect("chunks_exact");
        // Not short-circuited, so that it is a few vector compares.
        let may_enter = chunk
            .iter()
            .fold(false, |any, &score| any | (score >= floor));
        if may_enter {
            offer(&mut kept, &mut floor, c * CHUNK, chunk);
        }
    }
    offer(&mut kept, &mut floor, scores.len() - rest.len(), rest);
    cut(&mut kept);
    kept.sort_unstable_by(order);
    kept
}

/// A scored row, ordered so that greater is better: higher score, then lower row.
#[derive(Clone, Copy, PartialEq)]
struct Scored {
    row: usize,
    score: f32,
}

impl Eq for Scored {}

impl Ord for Scored {
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.row.cmp(&self.row))
    }
}

impl PartialOrd for Scored {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The `k` best rows seen so far: a min-heap whose top is the worst kept row, so each offer
/// costs one comparison unless it displaces that row. That row's score is also cached in
/// `floor`, so that most offers (scores below it) are turned away by one float comparison,
/// without touching the heap.
struct TopK {
    k: usize,
    heap: BinaryHeap<Reverse<Scored>>,
    /// No score below this can enter: the worst kept score once `k` are kept, −∞ before, +∞
    /// when `k` is 0.
    floor: f32,
}

impl TopK {
    fn new(k: usize) -> Self {
        // Capacity is bounded by k, but k may be "everything" (usize::MAX).
        Self {
            k,
            heap: BinaryHeap::with_capacity(k.min(1024) + 1),
            floor: if k == 0 {
                f32::INFINITY
            } else {
                f32::NEG_INFINITY
            },
        }
    }

    #[inline(always)]
    fn offer(&mut self, row: usize, score: f32) {
        // Strictly below the worst kept score: it cannot enter, whatever its row. (NaN fails
        // this test and is turned away below.)
        if score < self.floor {
            return;
        }
        self.offer_slow(row, score);
    }

    #[inline(never)]
    fn offer_slow(&mut self, row: usize, score: f32) {
        if score.is_nan() || self.k == 0 {
            return;
        }
        // -0.0 and +0.0 tie: total_cmp would rank them.
        let score = score + 0.0;
        let candidate = Scored { row, score };
        if self.heap.len() < self.k {
            self.heap.push(Reverse(candidate));
        } else if let Some(mut worst) = self.heap.peek_mut()
            && candidate > worst.0
        {
            *worst = Reverse(candidate);
        } else {
            return;
        }
        if self.heap.len() == self.k
            && let Some(worst) = self.heap.peek()
        {
            self.floor = worst.0.score;
        }
    }

    fn into_sorted(self) -> Vec<(usize, f32)> {
        // Ascending order of Reverse is best first.
        self.heap
            .into_sorted_vec()
            .into_iter()
            .map(|Reverse(s)| (s.row, s.score))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matrix() -> Matrix {
        Matrix::from_rows(2, vec![1.0, 0.0, 0.0, 2.0, 3.0, 3.0, 0.0, 0.0])
    }

    #[test]
    fn rows_and_inverse_norms() {
        let mut m = matrix();
        assert_eq!(m.len(), 4);
        assert_eq!(m.row(1), &[0.0, 2.0]);
        assert_eq!(m.inv_norms[1], 0.5);
        assert_eq!(m.inv_norms[3], 0.0);
        assert_eq!(m.push(&[0.0, 4.0]), 4);
        m.set(0, &[0.0, 1.0]);
        assert_eq!(m.row(0), &[0.0, 1.0]);
        assert_eq!(m.inv_norms[0], 1.0);
        assert!(m.bytes() >= 10 * 4);
    }

    #[test]
    fn scores_per_metric() {
        let m = matrix();
        let q = [1.0, 1.0];
        assert_eq!(m.score(Metric::Dot, &q, 2), 6.0);
        assert!((m.score(Metric::Cosine, &q, 2) - 1.0).abs() < 1e-6);
        assert_eq!(m.score(Metric::Cosine, &q, 3), 0.0);
        assert_eq!(m.score(Metric::Cosine, &[0.0, 0.0], 2), 0.0);
        assert_eq!(m.score(Metric::Euclidean, &q, 3), -(2.0f32.sqrt()));
    }

    #[test]
    fn top_k_orders_best_first_and_breaks_ties_by_row() {
        let m = Matrix::from_rows(1, vec![1.0, 3.0, 2.0, 3.0, 0.0]);
        let top = m.top_k(Metric::Dot, &[1.0], 3, |_| false);
        assert_eq!(top, vec![(1, 3.0), (3, 3.0), (2, 2.0)]);
        let skipped = m.top_k(Metric::Dot, &[1.0], 2, |i| i == 1);
        assert_eq!(skipped, vec![(3, 3.0), (2, 2.0)]);
        assert!(m.top_k(Metric::Dot, &[1.0], 0, |_| false).is_empty());
        assert_eq!(m.top_k(Metric::Dot, &[1.0], usize::MAX, |_| false).len(), 5);
    }

    #[test]
    fn dots_ranked_once_give_the_scans_answer() {
        // 37 rows of 19 (not a multiple of any SIMD width), with ties and a NaN row.
        let mut values: Vec<f32> = (0..37 * 19)
            .map(|n| ((n * 7919) % 23) as f32 - 11.0)
            .collect();
        values.copy_within(2 * 19..3 * 19, 5 * 19);
        values[9 * 19] = f32::NAN;
        let m = Matrix::from_rows(19, values);
        let q: Vec<f32> = (0..19).map(|n| (n as f32 - 9.0) / 4.0).collect();
        let dots = m.dots(&q);
        assert_eq!(dots.len(), 37);
        for (i, d) in dots.iter().enumerate() {
            assert_eq!(d.to_bits(), kernels::dot(&q, m.row(i)).to_bits(), "row {i}");
        }
        // Two queries in one pass: each as alone.
        let q2: Vec<f32> = q.iter().map(|v| v * -0.7 + 0.1).collect();
        let both = m.dots_many(&[&q, &q2]);
        assert_eq!(both.len(), 2);
        for (query, got) in [&q, &q2].into_iter().zip(&both) {
            let want: Vec<u32> = m.dots(query).iter().map(|d| d.to_bits()).collect();
            let got: Vec<u32> = got.iter().map(|d| d.to_bits()).collect();
            assert_eq!(got, want);
        }
        assert!(m.dots_many(&[]).is_empty());
        // Some rows, in any order, listed twice or past the end (a row of zeros).
        let rows = [36, 0, 9, 5, 5, 37, 1_000];
        let some: Vec<u32> = m.dots_of(&q, &rows).iter().map(|d| d.to_bits()).collect();
        let zero = vec![0.0f32; 19];
        let want: Vec<u32> = rows
            .iter()
            .map(|&i| match i as usize {
                i if i < m.len() => kernels::dot(&q, m.row(i)),
                _ => kernels::dot(&q, &zero),
            })
            .map(f32::to_bits)
            .collect();
        assert_eq!(some, want);
        let both = m.dots_many_of(&[&q, &zero], &rows);
        let both: Vec<Vec<u32>> = both
            .iter()
            .map(|d| d.iter().map(|x| x.to_bits()).collect())
            .collect();
        assert_eq!(both[0], want);
        assert_eq!(
            both[1],
            m.dots_of(&zero, &rows)
                .iter()
                .map(|d| d.to_bits())
                .collect::<Vec<_>>()
        );
        for k in [0, 1, 5, 37, 100] {
            let skip = |i: usize| i % 4 == 1;
            let scanned = m.top_k(Metric::Dot, &q, k, skip);
            let ranked = top_k_of(&dots, k, skip);
            assert_eq!(ranked, scanned, "k {k}");
        }
        // Longer lists, rising (every chunk may enter), falling (few do) and mixed, with
        // ties, NaN and skipped rows: the best by a plain sort.
        let mixed = |n: usize| ((n * 7919) % 101) as f32;
        let lists: [Vec<f32>; 3] = [
            (0..1_003).map(|n| n as f32).collect(),
            (0..1_003).map(|n| -(n as f32)).collect(),
            (0..1_003)
                .map(|n| if n % 97 == 3 { f32::NAN } else { mixed(n) })
                .collect(),
        ];
        for scores in &lists {
            for k in [0, 1, 16, 17, 250, 2_000] {
                let skip = |i: usize| i % 5 == 2;
                let mut want: Vec<(usize, f32)> = scores
                    .iter()
                    .copied()
                    .enumerate()
                    .filter(|&(i, s)| !skip(i) && !s.is_nan())
                    .collect();
                want.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
                want.truncate(k);
                assert_eq!(top_k_of(scores, k, skip), want, "k {k}");
            }
        }
    }

    #[test]
    fn top_k_among_scores_only_the_candidates() {
        let m = Matrix::from_rows(1, vec![1.0, 3.0, 2.0, 3.0, 0.0]);
        assert_eq!(
            m.top_k_among(Metric::Dot, &[1.0], 2, &[0, 4, 2]),
            vec![(2, 2.0), (0, 1.0)]
        );
    }

    #[test]
    fn top_k_multi_mean_and_max() {
        let m = Matrix::from_rows(2, vec![1.0, 0.0, 0.0, 1.0, 0.6, 0.6]);
        let queries: [&[f32]; 2] = [&[1.0, 0.0], &[0.0, 1.0]];
        let mean = m.top_k_multi(Metric::Dot, &queries, Aggregate::Mean, 1, |_| false);
        assert_eq!(mean, vec![(2, 0.6)]);
        let max = m.top_k_multi(Metric::Dot, &queries, Aggregate::Max, 2, |_| false);
        assert_eq!(max, vec![(0, 1.0), (1, 1.0)]);
        assert!(
            m.top_k_multi(Metric::Dot, &[], Aggregate::Max, 2, |_| false)
                .is_empty()
        );
    }

    #[test]
    fn negative_zero_ties_with_zero() {
        // dot([-1], [0]) is -0.0, which total_cmp would rank below row 1's +0.0.
        let m = Matrix::from_rows(1, vec![-1.0, 0.0]);
        assert_eq!(m.top_k(Metric::Dot, &[0.0], 1, |_| false), vec![(0, 0.0)]);
    }

    #[test]
    fn nan_scores_are_skipped() {
        let m = Matrix::from_rows(1, vec![1.0, f32::NAN, 2.0]);
        assert_eq!(
            m.top_k(Metric::Dot, &[1.0], 3, |_| false),
            vec![(2, 2.0), (0, 1.0)]
        );
    }

    #[test]
    fn names_in_serde_are_lowercase() {
        // The HTTP API and config files spell them this way.
        assert_eq!(
            serde_json::to_string(&Metric::Euclidean).unwrap(),
            "\"euclidean\""
        );
        assert_eq!(
            serde_json::from_str::<Aggregate>("\"max\"").unwrap(),
            Aggregate::Max
        );
        assert_eq!(Aggregate::default(), Aggregate::Mean);
    }
}
