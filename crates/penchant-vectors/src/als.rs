//! Implicit-feedback alternating least squares (Hu, Koren & Volinsky 2008), solved with a few
//! conjugate-gradient steps per row (Takács, Pilászy & Tikk 2011).
//!
//! Implicit feedback (views, plays, purchases) has no negatives: every unseen item counts as a
//! weak "no" with confidence 1, every seen item as a "yes" with confidence `1 + alpha × weight`.
//! For fixed item factors `Y`, user `u`'s best vector solves
//!
//! ```text
//! (YᵀY + Yᵀ(Cᵤ − I)Y + λI) xᵤ = Yᵀ Cᵤ p(u)
//! ```
//!
//! where only the user's own items make `Cᵤ − I` non-zero. Then the roles swap for items. The
//! exact solve forms a k×k matrix per user (`k²·nᵤ` work) and factors it (`k³`); instead, as in
//! the `implicit` library's CPU `least_squares_cg`, each row takes `cg_steps` conjugate-gradient
//! steps warm-started from its previous value, and the matrix is only ever applied to a vector:
//! `YᵀY·p + Σᵢ (cᵤᵢ − 1)(yᵢ·p) yᵢ + λp`, with `YᵀY` computed once per half-iteration. That is
//! `k² + 2k·nᵤ` per step, and three steps per row match the exact solve's accuracy in practice.
//!
//! Differences from `implicit`: confidence is `1 + alpha × weight` (the paper's), where
//! `implicit` ≥ 0.5 uses `alpha × weight`; and rows are split over threads in contiguous ranges
//! of equal work.
//!
//! A user who arrives after training is placed with [`fold_in`], one exact solve against the
//! trained item factors.

mod interactions;

use std::ops::Range;
use std::thread;

use faer::linalg::matmul::matmul;
use faer::linalg::solvers::Solve;
use faer::{Accum, Col, Mat, MatRef, Par, Side};
use pulp::{Simd, WithSimd};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use interactions::Csr;
pub use interactions::Interactions;

use crate::kernels;
use crate::matrix::Matrix;

/// How to train.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AlsConfig {
    /// The number of latent factors, `k` (1..=1024).
    pub factors: usize,
    /// `λ`, the L2 penalty on every factor (finite, >= 0).
    #[serde(serialize_with = "shortest")]
    pub regularization: f32,
    /// How much more a seen item counts than an unseen one per unit of weight (finite, >= 0):
    /// confidence is `1 + alpha × weight`.
    #[serde(serialize_with = "shortest")]
    pub alpha: f32,
    /// The number of full iterations (users, then items), 1..=1000.
    pub iterations: usize,
    /// Conjugate-gradient steps per row per iteration, 1..=50.
    pub cg_steps: usize,
    /// Seeds the initial factors.
    pub seed: u64,
    /// Worker threads; 0 means one per available core.
    pub threads: usize,
}

impl Default for AlsConfig {
    fn default() -> Self {
        Self {
            factors: 64,
            regularization: 0.01,
            alpha: 1.0,
            iterations: 15,
            cg_steps: 3,
            seed: 42,
            threads: 0,
        }
    }
}

/// An f32 as the f64 of its shortest decimal form, so that a config given as JSON (`0.01`) is
/// printed back as given, not as 0.009999999776482582.
fn shortest<S: serde::Serializer>(x: &f32, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(x.to_string().parse().unwrap_or(f64::from(*x)))
}

impl AlsConfig {
    /// Checks every field against its bounds; the error names the field and the bound.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=1024).contains(&self.factors) {
            return Err(format!(
                "factors must be between 1 and 1024, got {}",
                self.factors
            ));
        }
        if !(self.regularization.is_finite() && self.regularization >= 0.0) {
            return Err(format!(
                "regularization must be finite and >= 0, got {}",
                self.regularization
            ));
        }
        if !(self.alpha.is_finite() && self.alpha >= 0.0) {
            return Err(format!("alpha must be finite and >= 0, got {}", self.alpha));
        }
        if !(1..=1000).contains(&self.iterations) {
            return Err(format!(
                "iterations must be between 1 and 1000, got {}",
                self.iterations
            ));
        }
        if !(1..=50).contains(&self.cg_steps) {
            return Err(format!(
                "cgSteps must be between 1 and 50, got {}",
                self.cg_steps
            ));
        }
        Ok(())
    }

    /// The number of threads to use: `threads`, or the available cores when 0.
    fn thread_count(&self) -> usize {
        match self.threads {
            0 => thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        }
    }
}

/// Trained factors: row `u` of `users` and row `i` of `items` score as `dot(xᵤ, yᵢ)`.
#[derive(Debug, Clone)]
pub struct Factors {
    /// One row per user of the training data.
    pub users: Matrix,
    /// One row per item of the training data.
    pub items: Matrix,
}

/// Trains factors for `data`.
///
/// Factors start uniform in `[0, 0.01)` (as in `implicit`), seeded by `config.seed`: the same
/// seed and thread count give the same result. Users or items without interactions get zero
/// vectors. `progress(i)` is called after iteration `i` (1-based); returning `false` stops
/// training (a cancelled job) and `train` returns `None`.
///
/// # Panics
/// If `config` is not valid (see [`AlsConfig::validate`]).
pub fn train(
    data: &Interactions,
    config: &AlsConfig,
    mut progress: impl FnMut(usize) -> bool,
) -> Option<Factors> {
    if let Err(message) = config.validate() {
        panic!("invalid ALS config: {message}");
    }
    let k = config.factors;
    let threads = config.thread_count();
    let mut rng = StdRng::seed_from_u64(config.seed);
    let mut users: Vec<f32> = (0..data.users() * k)
        .map(|_| rng.random::<f32>() * 0.01)
        .collect();
    let mut items: Vec<f32> = (0..data.items() * k)
        .map(|_| rng.random::<f32>() * 0.01)
        .collect();
    let solver = Solver {
        k,
        alpha: config.alpha,
        cg_steps: config.cg_steps,
    };
    for iteration in 1..=config.iterations {
        solver.half_step(
            data.by_user(),
            &mut users,
            &items,
            config.regularization,
            threads,
        );
        solver.half_step(
            data.by_item(),
            &mut items,
            &users,
            config.regularization,
            threads,
        );
        if !progress(iteration) {
            return None;
        }
    }
    Some(Factors {
        users: Matrix::from_rows(k, users),
        items: Matrix::from_rows(k, items),
    })
}

/// `YᵀY` for item factors `Y`: `k×k`, row-major. Callers of [`fold_in`] compute it once per
/// model. Runs on the calling thread.
pub fn gramian(items: &Matrix) -> Vec<f32> {
    gramian_rows(items.as_slice(), items.dim())
}

/// The vector of a user who was not in the training, from the trained item factors, their
/// Gramian `YᵀY` (see [`gramian`]) and the user's `(item row, weight)` interactions.
///
/// One exact least-squares solve of `(YᵀY + Yᵀ(Cᵤ − I)Y + λI) x = Yᵀ Cᵤ p(u)` by Cholesky, in
/// `f64`. Repeated items are summed and pairs with a summed weight `<= 0` dropped, as in
/// [`Interactions::from_triples`]; no interactions give the zero vector. If the system is not
/// positive definite (only possible with `regularization` 0), a tiny ridge is added.
///
/// # Panics
/// If `gramian` is not `k×k` for the items' `k`, or an item row is out of range.
pub fn fold_in(
    items: &Matrix,
    gramian: &[f32],
    interactions: &[(u32, f32)],
    config: &AlsConfig,
) -> Vec<f32> {
    let k = items.dim();
    assert_eq!(
        gramian.len(),
        k * k,
        "gramian of {} values for {k} factors",
        gramian.len()
    );
    let mut pairs = interactions.to_vec();
    pairs.sort_by_key(|&(i, _)| i);
    pairs.dedup_by(|later, kept| {
        let same = later.0 == kept.0;
        if same {
            kept.1 += later.1;
        }
        same
    });
    pairs.retain(|&(_, w)| w > 0.0 && w.is_finite());
    if pairs.is_empty() {
        return vec![0.0; k];
    }

    // A = YᵀY + λI + Σ αwᵢ yᵢyᵢᵀ (lower half, row-major) and b = Σ (1 + αwᵢ) yᵢ.
    let mut a: Vec<f64> = gramian.iter().map(|&g| f64::from(g)).collect();
    for d in 0..k {
        a[d * k + d] += f64::from(config.regularization);
    }
    let mut b = Col::<f64>::zeros(k);
    let mut y = vec![0.0f64; k];
    for &(i, w) in &pairs {
        for (y, &v) in y.iter_mut().zip(items.row(i as usize)) {
            *y = f64::from(v);
        }
        let extra = f64::from(config.alpha) * f64::from(w);
        for r in 0..k {
            b[r] += (1.0 + extra) * y[r];
            let scale = extra * y[r];
            for (a, &yc) in a[r * k..=r * k + r].iter_mut().zip(&y) {
                *a += scale * yc;
            }
        }
    }

    let llt = match MatRef::from_row_major_slice(&a, k, k).llt(Side::Lower) {
        Ok(llt) => llt,
        Err(_) => {
            let trace: f64 = (0..k).map(|d| a[d * k + d]).sum();
            let ridge = 1e-6 * (trace / k as f64).max(1.0);
            for d in 0..k {
                a[d * k + d] += ridge;
            }
            match MatRef::from_row_major_slice(&a, k, k).llt(Side::Lower) {
                Ok(llt) => llt,
                Err(_) => return vec![0.0; k],
            }
        }
    };
    llt.solve_in_place(b.as_mut());
    (0..k).map(|r| b[r] as f32).collect()
}

/// `Σ rowᵢᵀ rowᵢ` over row-major `data` of `k` columns, by faer's matrix product.
fn gramian_rows(data: &[f32], k: usize) -> Vec<f32> {
    let rows = data.len().checked_div(k).unwrap_or(0);
    let mut out = vec![0.0f32; k * k];
    if rows == 0 {
        return out;
    }
    let y = MatRef::from_row_major_slice(data, rows, k);
    let mut g = Mat::<f32>::zeros(k, k);
    matmul(
        g.as_mut(),
        Accum::Replace,
        y.transpose(),
        y,
        1.0f32,
        Par::Seq,
    );
    for r in 0..k {
        for c in 0..k {
            out[r * k + c] = g[(r, c)];
        }
    }
    out
}

/// [`gramian_rows`] over `threads` slices of the rows, summed.
fn gramian_parallel(data: &[f32], k: usize, threads: usize) -> Vec<f32> {
    let rows = data.len().checked_div(k).unwrap_or(0);
    // Below this, spawning costs more than it saves.
    const MIN_ROWS_PER_THREAD: usize = 4096;
    let threads = threads.min(rows / MIN_ROWS_PER_THREAD).max(1);
    if threads == 1 {
        return gramian_rows(data, k);
    }
    let chunk = rows.div_ceil(threads) * k;
    let partials: Vec<Vec<f32>> = thread::scope(|s| {
        let handles: Vec<_> = data
            .chunks(chunk)
            .map(|part| s.spawn(move || gramian_rows(part, k)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("gramian thread panicked"))
            .collect()
    });
    let mut sum = vec![0.0f32; k * k];
    for part in partials {
        for (s, p) in sum.iter_mut().zip(part) {
            *s += p;
        }
    }
    sum
}

/// Splits rows `0..n` into at most `parts` contiguous ranges of about equal work, a row with
/// `m` entries costing `k + 2m` (its share of one CG step: the Gramian product plus two passes
/// over its neighbours).
fn balanced_ranges(csr: &Csr, k: usize, parts: usize) -> Vec<Range<usize>> {
    let n = csr.rows();
    let cost = |r: usize| k + 2 * csr.row_len(r);
    let total: usize = (0..n).map(cost).sum();
    let parts = parts.clamp(1, n.max(1));
    let mut ranges = Vec::with_capacity(parts);
    let (mut start, mut acc) = (0, 0);
    for r in 0..n {
        acc += cost(r);
        // Close range number `ranges.len()` once the running cost passes its share.
        if ranges.len() + 1 < parts && acc * parts >= total * (ranges.len() + 1) {
            ranges.push(start..r + 1);
            start = r + 1;
        }
    }
    ranges.push(start..n);
    ranges
}

/// The fixed parts of a half-iteration.
#[derive(Debug, Clone, Copy)]
struct Solver {
    k: usize,
    alpha: f32,
    cg_steps: usize,
}

impl Solver {
    /// Updates every row of `target` (rows of `csr`) against the fixed `other` factors.
    fn half_step(&self, csr: &Csr, target: &mut [f32], other: &[f32], lambda: f32, threads: usize) {
        let k = self.k;
        let mut gram = gramian_parallel(other, k, threads);
        for d in 0..k {
            gram[d * k + d] += lambda;
        }
        let gram = gram.as_slice();
        let ranges = balanced_ranges(csr, k, threads);
        thread::scope(|s| {
            let mut rest = target;
            for range in ranges {
                let (chunk, tail) = rest.split_at_mut(range.len() * k);
                rest = tail;
                s.spawn(move || {
                    kernels::dispatch(SolveRange {
                        solver: *self,
                        csr,
                        rows: range,
                        chunk,
                        other,
                        gram,
                    });
                });
            }
        });
    }

    /// Improves one row `x` by `cg_steps` conjugate-gradient steps on its normal equations, as
    /// `implicit`'s `_least_squares_cg` does; `gram` is `YᵀY + λI`.
    ///
    /// Runs inside the SIMD dispatch of its thread's [`SolveRange`], so the kernels inline.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn solve_row<S: Simd>(
        &self,
        simd: S,
        x: &mut [f32],
        indices: &[u32],
        weights: &[f32],
        other: &[f32],
        gram: &[f32],
        scratch: &mut Scratch,
    ) {
        let k = self.k;
        if indices.is_empty() {
            x.fill(0.0);
            return;
        }
        let neighbour = |i: u32| &other[i as usize * k..(i as usize + 1) * k];
        let Scratch { r, p, ap } = scratch;

        // r = b − A x, with b = Σ cᵢ yᵢ and A x = (YᵀY + λI) x + Σ (cᵢ − 1)(yᵢ·x) yᵢ.
        symv(simd, gram, x, r, -1.0);
        for (&i, &w) in indices.iter().zip(weights) {
            let y = neighbour(i);
            let extra = self.alpha * w;
            kernels::axpy_simd(
                simd,
                (1.0 + extra) - extra * kernels::dot_simd(simd, y, x),
                y,
                r,
            );
        }
        p.copy_from_slice(r);
        let mut rs_old = kernels::dot_simd(simd, r, r);
        if rs_old < 1e-20 {
            return;
        }

        for _ in 0..self.cg_steps {
            symv(simd, gram, p, ap, 1.0);
            for (&i, &w) in indices.iter().zip(weights) {
                let y = neighbour(i);
                kernels::axpy_simd(simd, self.alpha * w * kernels::dot_simd(simd, y, p), y, ap);
            }
            let curvature = kernels::dot_simd(simd, p, ap);
            if curvature <= 0.0 || curvature.is_nan() {
                // Only reachable without regularization, on a direction the data says
                // nothing about.
                break;
            }
            let step = rs_old / curvature;
            kernels::axpy_simd(simd, step, p, x);
            kernels::axpy_simd(simd, -step, ap, r);
            let rs_new = kernels::dot_simd(simd, r, r);
            if rs_new < 1e-20 {
                break;
            }
            let beta = rs_new / rs_old;
            for (p, r) in p.iter_mut().zip(r.iter()) {
                *p = r + beta * *p;
            }
            rs_old = rs_new;
        }
    }
}

/// One thread's share of a half-step: rows `rows` of `csr`, whose factors are `chunk`, solved
/// inside one SIMD dispatch.
struct SolveRange<'a> {
    solver: Solver,
    csr: &'a Csr,
    rows: Range<usize>,
    chunk: &'a mut [f32],
    other: &'a [f32],
    gram: &'a [f32],
}

impl WithSimd for SolveRange<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        let k = self.solver.k;
        let mut scratch = Scratch::new(k);
        for (row, x) in self.rows.zip(self.chunk.chunks_exact_mut(k)) {
            let (indices, weights) = self.csr.row(row);
            self.solver.solve_row(
                simd,
                x,
                indices,
                weights,
                self.other,
                self.gram,
                &mut scratch,
            );
        }
    }
}

/// One thread's CG vectors, allocated once per half-iteration.
struct Scratch {
    r: Vec<f32>,
    p: Vec<f32>,
    ap: Vec<f32>,
}

impl Scratch {
    fn new(k: usize) -> Self {
        Self {
            r: vec![0.0; k],
            p: vec![0.0; k],
            ap: vec![0.0; k],
        }
    }
}

/// `out = sign · G v` for a symmetric `k×k` row-major `G`, as `Σⱼ (sign vⱼ) Gⱼ` over the rows
/// `Gⱼ` (equal to the columns, by symmetry): vertical multiply-adds only, where a dot product
/// per row would end each of the `k` rows in a horizontal sum.
#[inline(always)]
fn symv<S: Simd>(simd: S, gram: &[f32], v: &[f32], out: &mut [f32], sign: f32) {
    let k = v.len();
    out.fill(0.0);
    for (&vj, row) in v.iter().zip(gram.chunks_exact(k)) {
        kernels::axpy_simd(simd, sign * vj, row, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Solves `A x = b` by Gaussian elimination with partial pivoting, in f64: an independent
    /// reference for the CG and Cholesky solves.
    pub(crate) fn dense_solve(mut a: Vec<Vec<f64>>, mut b: Vec<f64>) -> Vec<f64> {
        let n = b.len();
        for col in 0..n {
            let pivot = (col..n)
                .max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))
                .unwrap();
            a.swap(col, pivot);
            b.swap(col, pivot);
            for row in col + 1..n {
                let (above, below) = a.split_at_mut(row);
                let (pivot_row, target) = (&above[col], &mut below[0]);
                let f = target[col] / pivot_row[col];
                for (t, p) in target[col..].iter_mut().zip(&pivot_row[col..]) {
                    *t -= f * p;
                }
                b[row] -= f * b[col];
            }
        }
        let mut x = vec![0.0; n];
        for row in (0..n).rev() {
            let s: f64 = (row + 1..n).map(|c| a[row][c] * x[c]).sum();
            x[row] = (b[row] - s) / a[row][row];
        }
        x
    }

    /// The normal equations of one row, formed densely from the formulas.
    pub(crate) fn normal_equations(
        other: &Matrix,
        items: &[(u32, f32)],
        alpha: f32,
        lambda: f32,
    ) -> (Vec<Vec<f64>>, Vec<f64>) {
        let k = other.dim();
        let mut a = vec![vec![0.0f64; k]; k];
        let mut b = vec![0.0f64; k];
        for j in 0..other.len() {
            let y = other.row(j);
            let c = items
                .iter()
                .find(|&&(i, _)| i as usize == j)
                .map_or(1.0, |&(_, w)| 1.0 + f64::from(alpha * w));
            let p = if c > 1.0 { 1.0 } else { 0.0 };
            for r in 0..k {
                b[r] += c * p * f64::from(y[r]);
                for s in 0..k {
                    a[r][s] += c * f64::from(y[r]) * f64::from(y[s]);
                }
            }
        }
        for (r, row) in a.iter_mut().enumerate() {
            row[r] += f64::from(lambda);
        }
        (a, b)
    }

    fn tiny() -> (Interactions, Matrix) {
        let triples = [
            (0, 0, 1.0),
            (0, 3, 2.0),
            (1, 1, 1.0),
            (1, 2, 1.0),
            (1, 4, 3.0),
            (2, 0, 1.0),
            (3, 2, 0.5),
            (3, 3, 1.0),
            (4, 4, 1.0),
            (5, 0, 1.0),
            (5, 1, 1.0),
        ];
        let data = Interactions::from_triples(6, 5, triples);
        let items = Matrix::from_rows(
            3,
            vec![
                0.3, -0.1, 0.5, 0.2, 0.4, -0.3, -0.5, 0.1, 0.2, 0.1, 0.1, 0.1, 0.6, -0.2, 0.3,
            ],
        );
        (data, items)
    }

    #[test]
    fn cg_half_step_converges_to_the_dense_solution() {
        let (data, items) = tiny();
        let (alpha, lambda) = (2.0, 0.1);
        let solver = Solver {
            k: 3,
            alpha,
            cg_steps: 50,
        };
        let mut users = vec![0.01f32; 6 * 3];
        solver.half_step(data.by_user(), &mut users, items.as_slice(), lambda, 2);
        for u in 0..6 {
            let (indices, weights) = data.user_items(u);
            let pairs: Vec<(u32, f32)> = indices
                .iter()
                .copied()
                .zip(weights.iter().copied())
                .collect();
            let (a, b) = normal_equations(&items, &pairs, alpha, lambda);
            let exact = dense_solve(a, b);
            for (got, want) in users[u * 3..u * 3 + 3].iter().zip(&exact) {
                assert!(
                    (f64::from(*got) - want).abs() < 1e-4 * want.abs().max(1.0),
                    "user {u}: {got} vs {want}"
                );
            }
        }
    }

    #[test]
    fn one_cg_step_is_not_yet_exact() {
        // k = 3, so in exact arithmetic three steps solve the system; check one step does not.
        let (data, items) = tiny();
        let solver = Solver {
            k: 3,
            alpha: 2.0,
            cg_steps: 1,
        };
        let mut users = vec![0.0f32; 6 * 3];
        solver.half_step(data.by_user(), &mut users, items.as_slice(), 0.1, 1);
        let (indices, weights) = data.user_items(1);
        let pairs: Vec<(u32, f32)> = indices
            .iter()
            .copied()
            .zip(weights.iter().copied())
            .collect();
        let (a, b) = normal_equations(&items, &pairs, 2.0, 0.1);
        let exact = dense_solve(a, b);
        let error: f64 = users[3..6]
            .iter()
            .zip(&exact)
            .map(|(g, w)| (f64::from(*g) - w).abs())
            .sum();
        assert!(
            error > 1e-3,
            "one CG step should not already be exact, error {error}"
        );
    }

    #[test]
    fn rows_without_interactions_become_zero() {
        let data = Interactions::from_triples(2, 2, [(0, 0, 1.0)]);
        let items = Matrix::from_rows(2, vec![1.0, 0.0, 0.0, 1.0]);
        let solver = Solver {
            k: 2,
            alpha: 1.0,
            cg_steps: 3,
        };
        let mut users = vec![0.5f32; 4];
        solver.half_step(data.by_user(), &mut users, items.as_slice(), 0.1, 1);
        assert_eq!(&users[2..], &[0.0, 0.0]);
        assert!(users[0] > 0.5);
    }

    #[test]
    fn fold_in_matches_the_dense_solution() {
        let (_, items) = tiny();
        let config = AlsConfig {
            alpha: 3.0,
            regularization: 0.05,
            ..AlsConfig::default()
        };
        let interactions = [(4, 1.0), (0, 0.5), (4, 1.0), (2, -1.0)];
        let x = fold_in(&items, &gramian(&items), &interactions, &config);
        let (a, b) = normal_equations(&items, &[(0, 0.5), (4, 2.0)], 3.0, 0.05);
        let exact = dense_solve(a, b);
        for (got, want) in x.iter().zip(&exact) {
            assert!((f64::from(*got) - want).abs() < 1e-4, "{got} vs {want}");
        }
        assert_eq!(
            fold_in(&items, &gramian(&items), &[(1, -1.0)], &config),
            vec![0.0; 3]
        );
    }

    #[test]
    fn gramian_matches_the_definition_in_parallel_too() {
        let k = 5;
        let rows = 3 * 4096 + 17;
        let data: Vec<f32> = (0..rows * k)
            .map(|i| ((i * 7919) % 101) as f32 / 101.0 - 0.5)
            .collect();
        let parallel = gramian_parallel(&data, k, 3);
        let single = gramian_rows(&data, k);
        for r in 0..k {
            for c in 0..k {
                let want: f64 = (0..rows)
                    .map(|i| f64::from(data[i * k + r]) * f64::from(data[i * k + c]))
                    .sum();
                for got in [parallel[r * k + c], single[r * k + c]] {
                    assert!(
                        (f64::from(got) - want).abs() < 1e-3 * want.abs().max(1.0),
                        "({r},{c}): {got} vs {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn balanced_ranges_cover_every_row_once() {
        let triples = (0..50u32).flat_map(|u| (0..(u % 7)).map(move |i| (u, i, 1.0)));
        let data = Interactions::from_triples(50, 7, triples);
        for parts in [1, 2, 3, 8, 100] {
            let ranges = balanced_ranges(data.by_user(), 4, parts);
            assert!(ranges.len() <= parts);
            assert_eq!(ranges.first().unwrap().start, 0);
            assert_eq!(ranges.last().unwrap().end, 50);
            for pair in ranges.windows(2) {
                assert_eq!(pair[0].end, pair[1].start);
            }
        }
        assert_eq!(
            balanced_ranges(Interactions::default().by_user(), 4, 3),
            vec![0..0]
        );
    }

    #[test]
    fn config_validation_names_the_field_and_bound() {
        assert_eq!(AlsConfig::default().validate(), Ok(()));
        let cases = [
            (
                AlsConfig {
                    factors: 0,
                    ..AlsConfig::default()
                },
                "factors must be between 1 and 1024",
            ),
            (
                AlsConfig {
                    factors: 1025,
                    ..AlsConfig::default()
                },
                "factors must be between 1 and 1024",
            ),
            (
                AlsConfig {
                    regularization: -0.1,
                    ..AlsConfig::default()
                },
                "regularization must be finite and >= 0",
            ),
            (
                AlsConfig {
                    regularization: f32::NAN,
                    ..AlsConfig::default()
                },
                "regularization must be finite and >= 0",
            ),
            (
                AlsConfig {
                    alpha: -1.0,
                    ..AlsConfig::default()
                },
                "alpha must be finite and >= 0",
            ),
            (
                AlsConfig {
                    alpha: f32::INFINITY,
                    ..AlsConfig::default()
                },
                "alpha must be finite and >= 0",
            ),
            (
                AlsConfig {
                    iterations: 0,
                    ..AlsConfig::default()
                },
                "iterations must be between 1 and 1000",
            ),
            (
                AlsConfig {
                    iterations: 1001,
                    ..AlsConfig::default()
                },
                "iterations must be between 1 and 1000",
            ),
            (
                AlsConfig {
                    cg_steps: 0,
                    ..AlsConfig::default()
                },
                "cgSteps must be between 1 and 50",
            ),
            (
                AlsConfig {
                    cg_steps: 51,
                    ..AlsConfig::default()
                },
                "cgSteps must be between 1 and 50",
            ),
        ];
        for (config, prefix) in cases {
            let message = config.validate().unwrap_err();
            assert!(
                message.starts_with(prefix),
                "{message:?} should start with {prefix:?}"
            );
        }
    }

    #[test]
    fn config_reads_camel_case_with_defaults() {
        let config: AlsConfig = serde_json::from_str(r#"{"factors": 8, "cgSteps": 5}"#).unwrap();
        assert_eq!(
            config,
            AlsConfig {
                factors: 8,
                cg_steps: 5,
                ..AlsConfig::default()
            }
        );
        // Through a JSON value (f64 numbers), floats print as they were given.
        let value = serde_json::to_value(&config).unwrap();
        assert_eq!(value["regularization"].to_string(), "0.01");
    }
}
