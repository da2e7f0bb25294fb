//! Linear item × item models, solved in closed form over a bounded set of `n` items (columns):
//! what having some items says of each other one.
//!
//! - [`ease`]: EASE (Steck, "Embarrassingly Shallow Autoencoders for Sparse Data", 2019): the
//!   weights `B` that best rebuild each user's items from their other items,
//!   `min ‖X − XB‖² + λ‖B‖²` with `diag(B) = 0`, whose solution is `B = I − P·diag(1/diag P)`,
//!   `P = (XᵀX + λI)⁻¹` — one Cholesky factorization and inverse of an `n × n` matrix.
//! - [`sequence`]: the same kind of regression from a user's last items (newest weighted most)
//!   to the items they took next, `W = (XᵀX + λI)⁻¹ XᵀY` over every place of every sequence
//!   (the linear sequence models of Steck's and others' follow-ups).
//!
//! Both cost `O(n³)` time and `n²` floats, whatever the users: the callers bound `n` (the most
//! popular items of a large catalog). Gramians and solves are in `f64`, the weights kept in
//! `f32`, row-major: `w[a·n + b]` is what item `a` says of item `b`.

use faer::linalg::solvers::{DenseSolveCore, Solve};
use faer::{Mat, Side};

/// Each of a user's items weighs `decay^k` in [`sequence`], `k` counting back from the newest.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SequenceConfig {
    /// The last items a place reads (its `x`).
    pub past: usize,
    /// The items after it that it predicts (its `y`, each weighing 1).
    pub next: usize,
    pub decay: f64,
    pub lambda: f64,
}

/// EASE's weights over `n` columns from each user's distinct columns (`< n`), `λ` the ridge.
pub fn ease(n: usize, users: &[Vec<u32>], lambda: f64) -> Vec<f32> {
    let mut gram = Mat::<f64>::zeros(n, n);
    for items in users {
        for &a in items {
            for &b in items {
                gram[(a as usize, b as usize)] += 1.0;
            }
        }
    }
    let Some(p) = regularized(gram, lambda).map(|llt| llt.inverse()) else {
        return vec![0.0; n * n];
    };
    let mut weights = vec![0.0f32; n * n];
    for a in 0..n {
        for b in 0..n {
            if a != b {
                weights[a * n + b] = (-p[(a, b)] / p[(b, b)]) as f32;
            }
        }
    }
    weights
}

/// The sequence model's weights over `n` columns from each user's columns in time order
/// (oldest first; repeats allowed): every place `t` of a sequence is an example whose `x` is
/// its last `past` columns up to `t` (`decay^k`, the newest `k = 0`) and whose `y` the next
/// `next` columns after it.
pub fn sequence(n: usize, sequences: &[Vec<u32>], config: &SequenceConfig) -> Vec<f32> {
    let mut gram = Mat::<f64>::zeros(n, n);
    let mut cross = Mat::<f64>::zeros(n, n);
    let weights: Vec<f64> = (0..config.past)
        .map(|k| config.decay.powi(k as i32))
        .collect();
    for items in sequences {
        for t in 0..items.len().saturating_sub(1) {
            let past = items[..=t].iter().rev().take(config.past).zip(&weights);
            let next = &items[t + 1..items.len().min(t + 1 + config.next)];
            for (&a, &wa) in past.clone() {
                for (&b, &wb) in past.clone() {
                    gram[(a as usize, b as usize)] += wa * wb;
                }
                for &b in next {
                    cross[(a as usize, b as usize)] += wa;
                }
            }
        }
    }
    let Some(llt) = regularized(gram, config.lambda) else {
        return vec![0.0; n * n];
    };
    llt.solve_in_place(cross.as_mut());
    let mut out = vec![0.0f32; n * n];
    for a in 0..n {
        for b in 0..n {
            out[a * n + b] = cross[(a, b)] as f32;
        }
    }
    out
}

/// The Cholesky factorization of `gram + λI` (`None` if it is not positive definite: `λ ≤ 0`
/// on a singular gramian).
fn regularized(mut gram: Mat<f64>, lambda: f64) -> Option<faer::linalg::solvers::Llt<f64>> {
    for i in 0..gram.nrows() {
        gram[(i, i)] += lambda;
    }
    gram.llt(Side::Lower).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(XᵀX + λI)⁻¹` by Gauss-Jordan elimination, the plain way.
    fn inverse(mut a: Vec<Vec<f64>>) -> Vec<Vec<f64>> {
        let n = a.len();
        let mut inv: Vec<Vec<f64>> = (0..n)
            .map(|i| (0..n).map(|j| f64::from(u8::from(i == j))).collect())
            .collect();
        for c in 0..n {
            let pivot = a[c][c];
            for j in 0..n {
                a[c][j] /= pivot;
                inv[c][j] /= pivot;
            }
            for r in 0..n {
                if r != c {
                    let f = a[r][c];
                    for j in 0..n {
                        a[r][j] -= f * a[c][j];
                        inv[r][j] -= f * inv[c][j];
                    }
                }
            }
        }
        inv
    }

    fn gram_plus(x: &[Vec<f64>], n: usize, lambda: f64) -> Vec<Vec<f64>> {
        (0..n)
            .map(|a| {
                (0..n)
                    .map(|b| {
                        x.iter().map(|row| row[a] * row[b]).sum::<f64>()
                            + if a == b { lambda } else { 0.0 }
                    })
                    .collect()
            })
            .collect()
    }

    fn users() -> Vec<Vec<u32>> {
        vec![
            vec![0, 1, 2],
            vec![1, 2],
            vec![2, 3],
            vec![0, 3, 4],
            vec![1, 4],
            vec![0, 1],
        ]
    }

    #[test]
    fn ease_matches_its_closed_form_computed_the_plain_way() {
        let (n, lambda) = (5, 0.7);
        let x: Vec<Vec<f64>> = users()
            .iter()
            .map(|items| {
                (0..n as u32)
                    .map(|i| f64::from(u8::from(items.contains(&i))))
                    .collect()
            })
            .collect();
        let p = inverse(gram_plus(&x, n, lambda));
        let weights = ease(n, &users(), lambda);
        for a in 0..n {
            for b in 0..n {
                let expected = if a == b { 0.0 } else { -p[a][b] / p[b][b] };
                assert!(
                    (f64::from(weights[a * n + b]) - expected).abs() < 1e-5,
                    "{a} {b}"
                );
            }
        }
        // The zero diagonal is what it is fitted under: B minimizes the loss among those.
        assert!((0..n).all(|i| weights[i * n + i] == 0.0));
        // Items had together say more of each other than items never had together.
        assert!(weights[n + 2] > weights[2 * n + 4]);
    }

    #[test]
    fn the_sequence_model_regresses_the_next_items_on_the_last_ones() {
        let n = 5;
        let config = SequenceConfig {
            past: 2,
            next: 2,
            decay: 0.5,
            lambda: 0.3,
        };
        let sequences = vec![vec![0, 1, 2, 3], vec![1, 2, 4], vec![3, 0, 1]];
        // Every place's x and y, the plain way.
        let (mut xs, mut ys) = (Vec::new(), Vec::new());
        for s in &sequences {
            for t in 0..s.len() - 1 {
                let mut x = vec![0.0; n];
                for (k, &a) in s[..=t].iter().rev().take(2).enumerate() {
                    x[a as usize] += 0.5f64.powi(k as i32);
                }
                let mut y = vec![0.0; n];
                for &b in &s[t + 1..s.len().min(t + 3)] {
                    y[b as usize] += 1.0;
                }
                xs.push(x);
                ys.push(y);
            }
        }
        let inv = inverse(gram_plus(&xs, n, config.lambda));
        let weights = sequence(n, &sequences, &config);
        for a in 0..n {
            for b in 0..n {
                let xty = |c: usize| xs.iter().zip(&ys).map(|(x, y)| x[c] * y[b]).sum::<f64>();
                let expected: f64 = (0..n).map(|c| inv[a][c] * xty(c)).sum();
                assert!(
                    (f64::from(weights[a * n + b]) - expected).abs() < 1e-5,
                    "{a} {b}"
                );
            }
        }
        // 1 is followed by 2 twice: more than by 0, which never follows it.
        assert!(weights[n + 2] > weights[n]);
    }
}
