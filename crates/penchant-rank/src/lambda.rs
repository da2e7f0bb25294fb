//! NDCG and its lambda gradients.
//!
//! Gains are `2^label − 1`, the discount at 0-based place `p` is `1 / log₂(p + 2)`, and a
//! query's DCG is normalised by its ideal DCG at the cut-off (for the lambdas, at
//! [`Params::truncation`]). A query whose candidates all share one label has no gradient and
//! counts as NDCG 1 if its label is positive (any order is ideal), else it is left out.

use crate::Params;
use crate::data::Dataset;

fn gain(label: f32) -> f64 {
    f64::from(label).exp2() - 1.0
}

fn discount(place: usize) -> f64 {
    1.0 / ((place + 2) as f64).log2()
}

/// The ideal DCG of some labels at cut-off `k`.
fn ideal_dcg(labels: &mut [f32], k: usize) -> f64 {
    labels.sort_by(|a, b| b.total_cmp(a));
    labels
        .iter()
        .take(k)
        .enumerate()
        .map(|(p, &l)| gain(l) * discount(p))
        .sum()
}

/// Candidates' indices, best score first (ties: the later candidate last — input order).
fn order(scores: &[f64]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..scores.len()).collect();
    idx.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    idx
}

/// NDCG at `k` of candidates with these labels ranked by these scores; `None` when no order
/// could be better than another (no positive label).
pub fn ndcg(labels: &[f32], scores: &[f64], k: usize) -> Option<f64> {
    let ideal = ideal_dcg(&mut labels.to_vec(), k);
    if ideal <= 0.0 {
        return None;
    }
    let dcg: f64 = order(scores)
        .into_iter()
        .take(k)
        .enumerate()
        .map(|(p, i)| gain(labels[i]) * discount(p))
        .sum();
    Some(dcg / ideal)
}

/// The mean NDCG at `k` over the queries that have a positive label.
pub fn mean_ndcg(data: &Dataset, scores: &[f64], k: usize) -> f64 {
    let (mut sum, mut n) = (0.0, 0usize);
    for q in 0..data.queries() {
        let rows = data.query(q);
        if let Some(v) = ndcg(&data.labels()[rows.clone()], &scores[rows], k) {
            sum += v;
            n += 1;
        }
    }
    if n == 0 { 0.0 } else { sum / n as f64 }
}

/// Each row's gradient and hessian of the LambdaMART loss at the current scores (the
/// gradient's sign: negative pulls a row up).
pub(crate) fn gradients(
    data: &Dataset,
    scores: &[f64],
    params: &Params,
    gradients: &mut [f64],
    hessians: &mut [f64],
) {
    gradients.fill(0.0);
    hessians.fill(0.0);
    let sigma = params.sigma;
    for q in 0..data.queries() {
        let rows = data.query(q);
        let labels = &data.labels()[rows.clone()];
        if labels.iter().all(|&l| l == labels[0]) {
            continue;
        }
        let ideal = ideal_dcg(&mut labels.to_vec(), params.truncation);
        if ideal <= 0.0 {
            continue;
        }
        let s = &scores[rows.clone()];
        let (g, h) = (&mut gradients[rows.clone()], &mut hessians[rows]);
        let ranked = order(s);
        let top = params.truncation.min(ranked.len());
        for (pi, &i) in ranked.iter().enumerate().take(top) {
            for (pj, &j) in ranked.iter().enumerate().skip(pi + 1) {
                if labels[i] == labels[j] {
                    continue;
                }
                let (better, worse) = if labels[i] > labels[j] {
                    (i, j)
                } else {
                    (j, i)
                };
                let delta = (gain(labels[i]) - gain(labels[j])).abs()
                    * (discount(pi) - discount(pj)).abs()
                    / ideal;
                let rho = 1.0 / (1.0 + (sigma * (s[better] - s[worse])).exp());
                let lambda = sigma * rho * delta;
                let hessian = (sigma * sigma * rho * (1.0 - rho) * delta).max(1e-12);
                g[better] -= lambda;
                g[worse] += lambda;
                h[better] += hessian;
                h[worse] += hessian;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ndcg_of_known_orders() {
        // One relevant of three, ranked second: 1/log2(3).
        let v = ndcg(&[0.0, 1.0, 0.0], &[3.0, 2.0, 1.0], 10).unwrap();
        assert!((v - 1.0 / 3f64.log2()).abs() < 1e-12);
        assert_eq!(ndcg(&[0.0, 1.0], &[1.0, 2.0], 10), Some(1.0));
        assert_eq!(ndcg(&[0.0, 0.0], &[1.0, 2.0], 10), None);
        // Beyond the cut-off counts nothing.
        assert_eq!(ndcg(&[0.0, 1.0], &[2.0, 1.0], 1), Some(0.0));
    }

    #[test]
    fn lambdas_pull_the_relevant_up_and_balance() {
        let mut data = Dataset::new(1);
        data.push_query([(&[0.0f32][..], 0.0), (&[0.0][..], 0.0), (&[0.0][..], 1.0)]);
        let (mut g, mut h) = (vec![0.0; 3], vec![0.0; 3]);
        gradients(&data, &[2.0, 1.0, 0.0], &Params::default(), &mut g, &mut h);
        assert!(g[2] < 0.0 && g[0] > 0.0 && g[1] > 0.0, "{g:?}");
        assert!(g.iter().sum::<f64>().abs() < 1e-12);
        // The pair ordered worse at the top pulls harder.
        assert!(g[0] > g[1], "{g:?}");
        assert!(h.iter().all(|&x| x > 0.0));
    }
}
