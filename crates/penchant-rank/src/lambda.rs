//! NDCG and its lambda gradients.
//!
//! Gains are `2^label − 1`, the discount at 0-based place `p` is `1 / log₂(p + 2)`, and a
//! query's DCG is normalised by its ideal DCG at the cut-off (for the lambdas, at
//! [`Params::truncation`]). A query whose candidates all share one label has no gradient and
//! counts as NDCG 1 if its label is positive (any order is ideal), else it is left out.

use crate::Params;
use crate::data::Dataset;

fn gain(label: f32) -> f64 {
    // Labels are small whole numbers, as a rule: no exp2 for them.
    match label {
        0.0 => 0.0,
        1.0 => 1.0,
        2.0 => 3.0,
        _ => f64::from(label).exp2() - 1.0,
    }
}

/// `1 / log₂(p + 2)` for the first places (computed once).
static DISCOUNTS: std::sync::LazyLock<Vec<f64>> =
    std::sync::LazyLock::new(|| (0..4096).map(|p| 1.0 / ((p + 2) as f64).log2()).collect());

fn discount(place: usize) -> f64 {
    DISCOUNTS
        .get(place)
        .copied()
        .unwrap_or_else(|| 1.0 / ((place + 2) as f64).log2())
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

/// Each query's ideal DCG at cut-off `k` (they do not change as the scores do).
pub(crate) fn ideals(data: &Dataset, k: usize) -> Vec<f64> {
    (0..data.queries())
        .map(|q| ideal_dcg(&mut data.labels()[data.query(q)].to_vec(), k))
        .collect()
}

/// Candidates' indices into `idx`, best score first (ties: the later candidate last — input
/// order); `keyed` is scratch space.
fn order(scores: &[f64], keyed: &mut Vec<(f64, usize)>, idx: &mut Vec<usize>) {
    // Sorted with their scores at hand (no look-up per comparison); the order is total, so
    // an unstable sort gives the stable one's.
    keyed.clear();
    keyed.extend(scores.iter().copied().zip(0..));
    keyed.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    idx.clear();
    idx.extend(keyed.iter().map(|&(_, i)| i));
}

/// NDCG at `k` of candidates with these labels ranked by these scores; `None` when no order
/// could be better than another (no positive label).
pub fn ndcg(labels: &[f32], scores: &[f64], k: usize) -> Option<f64> {
    let ideal = ideal_dcg(&mut labels.to_vec(), k);
    ndcg_of(labels, scores, k, ideal, &mut Default::default())
}

/// [`ndcg`] with the labels' ideal DCG given, and scratch space for the order.
fn ndcg_of(
    labels: &[f32],
    scores: &[f64],
    k: usize,
    ideal: f64,
    (keyed, idx): &mut (Vec<(f64, usize)>, Vec<usize>),
) -> Option<f64> {
    if ideal <= 0.0 {
        return None;
    }
    order(scores, keyed, idx);
    let dcg: f64 = idx
        .iter()
        .take(k)
        .enumerate()
        .map(|(p, &i)| gain(labels[i]) * discount(p))
        .sum();
    Some(dcg / ideal)
}

/// The mean NDCG at `k` over the queries that have a positive label.
pub fn mean_ndcg(data: &Dataset, scores: &[f64], k: usize) -> f64 {
    mean_ndcg_of(data, scores, k, &ideals(data, k))
}

/// [`mean_ndcg`] with each query's ideal DCG at `k` given ([`ideals`]).
pub(crate) fn mean_ndcg_of(data: &Dataset, scores: &[f64], k: usize, ideals: &[f64]) -> f64 {
    let (mut sum, mut n) = (0.0, 0usize);
    let mut idx = Default::default();
    for (q, &ideal) in ideals.iter().enumerate() {
        let rows = data.query(q);
        if let Some(v) = ndcg_of(
            &data.labels()[rows.clone()],
            &scores[rows],
            k,
            ideal,
            &mut idx,
        ) {
            sum += v;
            n += 1;
        }
    }
    if n == 0 { 0.0 } else { sum / n as f64 }
}

/// Each row's gradient and hessian of the LambdaMART loss at the current scores (the
/// gradient's sign: negative pulls a row up).
/// `ideals`: each query's ideal DCG at [`Params::truncation`] ([`ideals`]). Queries are
/// shared between up to [`Params::threads`] threads (each writes its queries' rows).
pub(crate) fn gradients(
    data: &Dataset,
    scores: &[f64],
    params: &Params,
    ideals: &[f64],
    gradients: &mut [f64],
    hessians: &mut [f64],
) {
    let threads = params.threads().min(data.rows() / ROWS_PER_THREAD).max(1);
    // Runs of whole queries of about equal rows.
    let share = data.rows().div_ceil(threads).max(1);
    let mut runs = Vec::new();
    let mut first = 0usize;
    for q in 1..=data.queries() {
        if q == data.queries() || data.query(q).start - data.query(first).start >= share {
            runs.push(first..q);
            first = q;
        }
    }
    if runs.len() <= 1 {
        let all = 0..data.queries();
        return gradients_of(data, all, scores, params, ideals, gradients, hessians);
    }
    std::thread::scope(|scope| {
        let (mut g, mut h) = (gradients, hessians);
        let mut offset = 0;
        for run in runs {
            let end = data.query(run.end - 1).end;
            let (mine_g, rest_g) = std::mem::take(&mut g).split_at_mut(end - offset);
            let (mine_h, rest_h) = std::mem::take(&mut h).split_at_mut(end - offset);
            scope.spawn(move || gradients_of(data, run, scores, params, ideals, mine_g, mine_h));
            (g, h, offset) = (rest_g, rest_h, end);
        }
    });
}

/// Rows a gradient thread takes at least.
const ROWS_PER_THREAD: usize = 65_536;

/// The gradients of a run of whole queries: `gradients` and `hessians` hold the run's rows
/// only (from its first query's first row); `scores` all rows.
fn gradients_of(
    data: &Dataset,
    queries: std::ops::Range<usize>,
    scores: &[f64],
    params: &Params,
    ideals: &[f64],
    gradients: &mut [f64],
    hessians: &mut [f64],
) {
    gradients.fill(0.0);
    hessians.fill(0.0);
    let Some(base) = (queries.start < data.queries()).then(|| data.query(queries.start).start)
    else {
        return;
    };
    let sigma = params.sigma;
    let (mut keyed, mut ranked) = (Vec::new(), Vec::new());
    for q in queries {
        let ideal = ideals[q];
        let rows = data.query(q);
        let labels = &data.labels()[rows.clone()];
        if ideal <= 0.0 || labels.iter().all(|&l| l == labels[0]) {
            continue;
        }
        let s = &scores[rows.clone()];
        let local = rows.start - base..rows.end - base;
        let (g, h) = (&mut gradients[local.clone()], &mut hessians[local]);
        order(s, &mut keyed, &mut ranked);
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
        let params = Params::default();
        let ideals = ideals(&data, params.truncation);
        gradients(&data, &[2.0, 1.0, 0.0], &params, &ideals, &mut g, &mut h);
        assert!(g[2] < 0.0 && g[0] > 0.0 && g[1] > 0.0, "{g:?}");
        assert!(g.iter().sum::<f64>().abs() < 1e-12);
        // The pair ordered worse at the top pulls harder.
        assert!(g[0] > g[1], "{g:?}");
        assert!(h.iter().all(|&x| x > 0.0));
    }
}
