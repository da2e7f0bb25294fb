//! Top-k search against a naive version: score every row in f64, sort, cut.

use penchant_vectors::{Aggregate, Matrix, Metric};
use proptest::prelude::*;

const METRICS: [Metric; 3] = [Metric::Cosine, Metric::Dot, Metric::Euclidean];

/// The reference score, in f64, from the definitions.
fn reference_score(metric: Metric, q: &[f32], r: &[f32]) -> f64 {
    let dot: f64 = q
        .iter()
        .zip(r)
        .map(|(a, b)| f64::from(*a) * f64::from(*b))
        .sum();
    let norm = |v: &[f32]| v.iter().map(|a| f64::from(*a).powi(2)).sum::<f64>().sqrt();
    match metric {
        Metric::Dot => dot,
        Metric::Cosine if norm(q) == 0.0 || norm(r) == 0.0 => 0.0,
        Metric::Cosine => dot / (norm(q) * norm(r)),
        Metric::Euclidean => -q
            .iter()
            .zip(r)
            .map(|(a, b)| (f64::from(*a) - f64::from(*b)).powi(2))
            .sum::<f64>()
            .sqrt(),
    }
}

/// Every candidate scored, best first, ties by lower row.
fn naive_top_k(scored: impl Iterator<Item = (usize, f64)>, k: usize) -> Vec<(usize, f64)> {
    // + 0.0 turns -0.0 into 0.0: they tie.
    let mut all: Vec<(usize, f64)> = scored.map(|(i, s)| (i, s + 0.0)).collect();
    all.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    all.truncate(k);
    all
}

/// How far f32 scores may stray from f64 ones, for values within ±5.
fn tolerance(metric: Metric, dim: usize) -> f64 {
    match metric {
        Metric::Cosine => 1e-5,
        _ => 1e-5 * 25.0 * dim as f64 + 1e-5,
    }
}

/// Checks `got` against the naive answer: same length, distinct rows, best first, and the row
/// at each rank scores (by the reference) what the naive answer's row at that rank scores —
/// so rows may only differ where scores tie within rounding.
fn check(
    got: &[(usize, f32)],
    want: &[(usize, f64)],
    reference: impl Fn(usize) -> f64,
    allowed: impl Fn(usize) -> bool,
    tol: f64,
) -> Result<(), TestCaseError> {
    prop_assert_eq!(got.len(), want.len());
    let mut seen = std::collections::HashSet::new();
    for (rank, (&(row, score), &(_, want_score))) in got.iter().zip(want).enumerate() {
        prop_assert!(seen.insert(row), "row {} returned twice", row);
        prop_assert!(allowed(row), "row {} should have been skipped", row);
        prop_assert!(
            (f64::from(score) - reference(row)).abs() <= tol,
            "row {} scored {} not {}",
            row,
            score,
            reference(row)
        );
        prop_assert!(
            (reference(row) - want_score).abs() <= 2.0 * tol,
            "rank {}: row {} scores {}, expected {}",
            rank,
            row,
            reference(row),
            want_score
        );
    }
    for pair in got.windows(2) {
        prop_assert!(pair[0].1 >= pair[1].1, "not best first: {:?}", got);
    }
    Ok(())
}

/// A matrix of 0..60 rows of dimension 1..20, some rows zero, and a query.
fn matrix_and_query() -> impl Strategy<Value = (Matrix, Vec<f32>)> {
    (1usize..20, 0usize..60).prop_flat_map(|(dim, rows)| {
        let row = prop_oneof![
            4 => prop::collection::vec(-5.0f32..5.0, dim),
            1 => Just(vec![0.0; dim]),
        ];
        (
            prop::collection::vec(row, rows),
            prop::collection::vec(-5.0f32..5.0, dim),
        )
            .prop_map(move |(rows, query)| (Matrix::from_rows(dim, rows.concat()), query))
    })
}

proptest! {
    #[test]
    fn top_k_matches_a_full_sort(
        (matrix, query) in matrix_and_query(),
        k in 0usize..80,
        skip_mask in any::<u64>(),
    ) {
        let skip = |i: usize| skip_mask >> (i % 64) & 1 == 1 && i.is_multiple_of(3);
        for metric in METRICS {
            let reference = |i: usize| reference_score(metric, &query, matrix.row(i));
            let want = naive_top_k((0..matrix.len()).filter(|&i| !skip(i)).map(|i| (i, reference(i))), k);
            let got = matrix.top_k(metric, &query, k, skip);
            check(&got, &want, reference, |i| !skip(i), tolerance(metric, matrix.dim()))?;
        }
    }

    #[test]
    fn top_k_is_exact_on_integer_data_including_ties(
        rows in prop::collection::vec(prop::collection::vec(-2i8..=2, 4), 0..50),
        query in prop::collection::vec(-2i8..=2, 4),
        k in 0usize..60,
    ) {
        // Small integers make every dot product exact, so the order, ties broken by lower
        // row, must match exactly.
        let data: Vec<f32> = rows.concat().into_iter().map(f32::from).collect();
        let matrix = Matrix::from_rows(4, data);
        let query: Vec<f32> = query.into_iter().map(f32::from).collect();
        let want = naive_top_k((0..matrix.len()).map(|i| (i, reference_score(Metric::Dot, &query, matrix.row(i)))), k);
        let got = matrix.top_k(Metric::Dot, &query, k, |_| false);
        let got: Vec<(usize, f64)> = got.into_iter().map(|(i, s)| (i, f64::from(s))).collect();
        prop_assert_eq!(got, want);
    }

    #[test]
    fn top_k_among_matches_a_sort_of_the_candidates(
        (matrix, query) in matrix_and_query(),
        k in 0usize..80,
        pick in any::<u64>(),
    ) {
        let rows: Vec<usize> = (0..matrix.len()).filter(|i| pick >> (i % 64) & 1 == 1).collect();
        for metric in METRICS {
            let reference = |i: usize| reference_score(metric, &query, matrix.row(i));
            let want = naive_top_k(rows.iter().map(|&i| (i, reference(i))), k);
            let got = matrix.top_k_among(metric, &query, k, &rows);
            check(&got, &want, reference, |i| rows.contains(&i), tolerance(metric, matrix.dim()))?;
        }
    }

    #[test]
    fn top_k_multi_matches_a_sort_of_aggregated_scores(
        (matrix, query) in matrix_and_query(),
        extra in prop::collection::vec(-5.0f32..5.0, 0..60),
        k in 0usize..80,
        max in any::<bool>(),
        skip_mask in any::<u64>(),
    ) {
        // Up to 3 more queries cut from `extra`, at the matrix's dimension.
        let dim = matrix.dim();
        let mut queries: Vec<&[f32]> = vec![&query];
        queries.extend(extra.chunks_exact(dim).take(3));
        let aggregate = if max { Aggregate::Max } else { Aggregate::Mean };
        let skip = |i: usize| skip_mask >> (i % 64) & 1 == 1;
        for metric in METRICS {
            let reference = |i: usize| {
                let scores = queries.iter().map(|q| reference_score(metric, q, matrix.row(i)));
                match aggregate {
                    Aggregate::Mean => scores.sum::<f64>() / queries.len() as f64,
                    Aggregate::Max => scores.fold(f64::NEG_INFINITY, f64::max),
                }
            };
            let want = naive_top_k((0..matrix.len()).filter(|&i| !skip(i)).map(|i| (i, reference(i))), k);
            let got = matrix.top_k_multi(metric, &queries, aggregate, k, skip);
            check(&got, &want, reference, |i| !skip(i), tolerance(metric, matrix.dim()))?;
        }
    }

    #[test]
    fn top_k_multi_mean_by_dot_and_cosine_matches_the_mean_of_the_scores(
        (matrix, query) in matrix_and_query(),
        extra in prop::collection::vec(
            prop_oneof![4 => -5.0f32..5.0, 1 => Just(0.0f32)],
            0..200,
        ),
        zero_query in any::<bool>(),
        k in 0usize..80,
        skip_mask in any::<u64>(),
    ) {
        // These two score against one averaged query; the reference is still the mean of the
        // per-query scores. Up to 10 queries, sometimes one of them zero (cosine 0 for it).
        let dim = matrix.dim();
        let zero = vec![0.0f32; dim];
        let mut queries: Vec<&[f32]> = vec![&query];
        if zero_query {
            queries.push(&zero);
        }
        queries.extend(extra.chunks_exact(dim).take(9));
        let skip = |i: usize| skip_mask >> (i % 64) & 1 == 1 && i.is_multiple_of(2);
        for metric in [Metric::Cosine, Metric::Dot] {
            let reference = |i: usize| {
                queries.iter().map(|q| reference_score(metric, q, matrix.row(i))).sum::<f64>()
                    / queries.len() as f64
            };
            let want = naive_top_k((0..matrix.len()).filter(|&i| !skip(i)).map(|i| (i, reference(i))), k);
            let got = matrix.top_k_multi(metric, &queries, Aggregate::Mean, k, skip);
            check(&got, &want, reference, |i| !skip(i), tolerance(metric, dim))?;
        }
    }
}

#[test]
fn top_k_multi_mean_of_one_query_is_top_k() {
    let matrix = Matrix::from_rows(2, vec![1.0, 0.0, 0.0, 2.0, 3.0, 3.0, 0.0, 0.0, -1.0, 1.0]);
    for metric in [Metric::Cosine, Metric::Dot] {
        let q: &[f32] = &[0.5, 2.0];
        let single = matrix.top_k(metric, q, 5, |_| false);
        let multi = matrix.top_k_multi(metric, &[q], Aggregate::Mean, 5, |_| false);
        assert_eq!(
            single.iter().map(|&(i, _)| i).collect::<Vec<_>>(),
            multi.iter().map(|&(i, _)| i).collect::<Vec<_>>()
        );
        for ((_, a), (_, b)) in single.iter().zip(&multi) {
            assert!((a - b).abs() <= 1e-6 * a.abs().max(1.0), "{a} vs {b}");
        }
    }
}

#[test]
fn k_larger_than_the_matrix_returns_every_row() {
    let matrix = Matrix::from_rows(2, vec![1.0, 0.0, 0.0, 1.0, 1.0, 1.0]);
    let got = matrix.top_k(Metric::Cosine, &[1.0, 0.0], 10, |_| false);
    assert_eq!(
        got.iter().map(|&(i, _)| i).collect::<Vec<_>>(),
        vec![0, 2, 1]
    );
}
