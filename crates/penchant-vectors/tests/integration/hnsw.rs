//! The HNSW graph against exact search: recall on clustered data for every metric, excluded
//! rows never returned, reproducible builds.

use penchant_vectors::{Hnsw, HnswConfig, Matrix, Metric};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// `n` rows of `dim` around 50 centres, with lengths from 0.5 to 2 (so Dot and Cosine
/// differ).
fn clustered(n: usize, dim: usize, seed: u64) -> Matrix {
    let mut rng = StdRng::seed_from_u64(seed);
    let centres: Vec<Vec<f32>> = (0..50)
        .map(|_| (0..dim).map(|_| rng.random_range(-1.0f32..1.0)).collect())
        .collect();
    let mut data = Vec::with_capacity(n * dim);
    for _ in 0..n {
        let centre = &centres[rng.random_range(0..centres.len())];
        let length = rng.random_range(0.5f32..2.0);
        data.extend(
            centre
                .iter()
                .map(|c| length * (c + rng.random_range(-0.4f32..0.4))),
        );
    }
    Matrix::from_rows(dim, data)
}

fn queries(matrix: &Matrix, n: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let row = matrix.row(rng.random_range(0..matrix.len()));
            row.iter()
                .map(|x| x + rng.random_range(-0.2f32..0.2))
                .collect()
        })
        .collect()
}

/// The share of the exact top-`k` found by the graph asked for `ef` candidates.
fn recall(matrix: &Matrix, graph: &Hnsw, metric: Metric, k: usize, ef: usize) -> f64 {
    let mut found = 0;
    let qs = queries(matrix, 50, 7);
    for q in &qs {
        let exact: Vec<usize> = matrix
            .top_k(metric, q, k, |_| false)
            .into_iter()
            .map(|(i, _)| i)
            .collect();
        let approximate: Vec<usize> = graph
            .search(matrix, q, ef, |_| false)
            .into_iter()
            .map(|(i, _)| i)
            .collect();
        found += exact.iter().filter(|i| approximate.contains(i)).count();
    }
    found as f64 / (qs.len() * k) as f64
}

#[test]
fn recall_against_exact_search_for_every_metric() {
    let matrix = clustered(4000, 24, 1);
    for metric in [Metric::Cosine, Metric::Dot, Metric::Euclidean] {
        let graph = Hnsw::build(&matrix, metric, HnswConfig::default());
        assert_eq!(graph.len(), 4000);
        assert_eq!(graph.metric(), metric);
        let r = recall(&matrix, &graph, metric, 10, 64);
        assert!(r >= 0.95, "{metric:?}: recall@10 {r}");
    }
}

#[test]
fn scores_are_the_metrics_and_come_best_first() {
    let matrix = clustered(1000, 16, 2);
    let q = queries(&matrix, 1, 3).remove(0);
    for metric in [Metric::Cosine, Metric::Dot] {
        let graph = Hnsw::build(&matrix, metric, HnswConfig::default());
        let found = graph.search(&matrix, &q, 20, |_| false);
        assert_eq!(found.len(), 20);
        for pair in found.windows(2) {
            assert!(pair[0].1 >= pair[1].1, "{metric:?}: {found:?}");
        }
        for &(row, score) in &found {
            let exact = matrix.score(metric, &q, row);
            assert!((score - exact).abs() <= 1e-4 * exact.abs().max(1.0));
        }
    }
}

#[test]
fn excluded_rows_never_come_back_and_the_rest_still_do() {
    let matrix = clustered(3000, 16, 4);
    let graph = Hnsw::build(&matrix, Metric::Cosine, HnswConfig::default());
    for q in queries(&matrix, 20, 5) {
        let best: Vec<usize> = matrix
            .top_k(Metric::Cosine, &q, 5, |_| false)
            .into_iter()
            .map(|(i, _)| i)
            .collect();
        let found = graph.search(&matrix, &q, 40, |r| best.contains(&r) || r % 2 == 0);
        assert!(!found.is_empty());
        assert!(
            found.iter().all(|(r, _)| !best.contains(r) && r % 2 == 1),
            "{found:?}"
        );
    }
}

#[test]
fn builds_are_reproducible_and_seeded() {
    let matrix = clustered(2000, 8, 6);
    let q = queries(&matrix, 1, 8).remove(0);
    let a = Hnsw::build(&matrix, Metric::Euclidean, HnswConfig::default());
    let b = Hnsw::build(&matrix, Metric::Euclidean, HnswConfig::default());
    assert_eq!(
        a.search(&matrix, &q, 10, |_| false),
        b.search(&matrix, &q, 10, |_| false)
    );
    assert!(a.bytes() >= 2000 * 33 * 4);
}

#[test]
#[should_panic(expected = "an HNSW graph of 100 rows searched over a matrix of 101")]
fn a_graph_only_searches_its_own_matrix() {
    let mut matrix = clustered(100, 4, 9);
    let graph = Hnsw::build(&matrix, Metric::Dot, HnswConfig::default());
    matrix.push(&[1.0, 2.0, 3.0, 4.0]);
    graph.search(&matrix, &[1.0, 0.0, 0.0, 0.0], 5, |_| false);
}
