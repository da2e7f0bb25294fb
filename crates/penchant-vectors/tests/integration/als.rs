//! ALS end to end: recovering planted structure, fold-in, cancellation, determinism, and a
//! comparison with the popularity baseline through the evaluation code.

use penchant_vectors::als::{AlsConfig, Factors, Interactions, fold_in, gramian, train};
use penchant_vectors::eval::{popularity, random_split, ranking_metrics, recommend, time_holdout};
use penchant_vectors::synthetic::planted;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

/// `clusters` groups of `users_per` users and `items_per` items; each user has `per_user`
/// distinct items of its own cluster, and half the users one item of another cluster (noise).
fn clustered(
    clusters: u32,
    users_per: u32,
    items_per: u32,
    per_user: usize,
    seed: u64,
) -> Interactions {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut triples = Vec::new();
    for c in 0..clusters {
        for n in 0..users_per {
            let u = c * users_per + n;
            let mut own: Vec<u32> = (c * items_per..(c + 1) * items_per).collect();
            own.shuffle(&mut rng);
            triples.extend(own[..per_user].iter().map(|&i| (u, i, 1.0)));
            if rng.random_bool(0.5) {
                let other = (c + rng.random_range(1..clusters)) % clusters;
                triples.push((u, other * items_per + rng.random_range(0..items_per), 1.0));
            }
        }
    }
    Interactions::from_triples(
        (clusters * users_per) as usize,
        (clusters * items_per) as usize,
        triples,
    )
}

#[test]
fn planted_clusters_are_recovered() {
    let (clusters, users_per, items_per) = (3, 40, 20);
    let data = clustered(clusters, users_per, items_per, 8, 11);
    // 16 factors for 60 items is enough capacity to fit each user's exact random items at a
    // small λ (then unseen items of the cluster score like any unseen item: about 7 of 10
    // recommendations land in the cluster); λ = 5 makes the model keep only the shared
    // structure, as on real data a larger λ does.
    let config = AlsConfig {
        factors: 16,
        iterations: 15,
        regularization: 5.0,
        threads: 2,
        ..AlsConfig::default()
    };
    let factors = train(&data, &config, |_| true).expect("not cancelled");
    let good_users = (0..data.users())
        .filter(|&u| {
            let cluster = u as u32 / users_per;
            let recs = recommend(&factors, &data, u, 10);
            assert_eq!(recs.len(), 10);
            recs.iter().filter(|&&i| i / items_per == cluster).count() >= 8
        })
        .count();
    assert!(
        good_users * 10 >= data.users() * 9,
        "only {good_users} of {} users recovered",
        data.users()
    );
}

/// Solves `A x = b` by Gaussian elimination with partial pivoting, in f64.
fn dense_solve(mut a: Vec<Vec<f64>>, mut b: Vec<f64>) -> Vec<f64> {
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

/// User `u`'s exact vector given the item factors, from the dense normal equations over every
/// item: `Σᵢ cᵢ yᵢyᵢᵀ + λI` and `Σᵢ cᵢ pᵢ yᵢ`.
fn exact_user(factors: &Factors, data: &Interactions, u: usize, config: &AlsConfig) -> Vec<f64> {
    let k = config.factors;
    let (seen, weights) = data.user_items(u);
    let mut a = vec![vec![0.0f64; k]; k];
    let mut b = vec![0.0f64; k];
    for i in 0..data.items() {
        let y = factors.items.row(i);
        let (c, p) = match seen.binary_search(&(i as u32)) {
            Ok(at) => (1.0 + f64::from(config.alpha * weights[at]), 1.0),
            Err(_) => (1.0, 0.0),
        };
        for r in 0..k {
            b[r] += c * p * f64::from(y[r]);
            for s in 0..k {
                a[r][s] += c * f64::from(y[r]) * f64::from(y[s]);
            }
        }
    }
    for (r, row) in a.iter_mut().enumerate() {
        row[r] += f64::from(config.regularization);
    }
    dense_solve(a, b)
}

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b))
}

#[test]
fn fold_in_equals_the_exact_solve_and_the_trained_vector() {
    let data = clustered(3, 30, 20, 6, 5);
    let config = AlsConfig {
        factors: 8,
        iterations: 40,
        cg_steps: 8,
        alpha: 4.0,
        regularization: 0.1,
        threads: 1,
        ..AlsConfig::default()
    };
    let factors = train(&data, &config, |_| true).unwrap();
    let g = gramian(&factors.items);
    for u in [0, 17, 45, 89] {
        let (items, weights) = data.user_items(u);
        let pairs: Vec<(u32, f32)> = items.iter().copied().zip(weights.iter().copied()).collect();
        let folded: Vec<f64> = fold_in(&factors.items, &g, &pairs, &config)
            .into_iter()
            .map(f64::from)
            .collect();
        let exact = exact_user(&factors, &data, u, &config);
        let error = folded
            .iter()
            .zip(&exact)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        let scale = exact.iter().map(|x| x.abs()).fold(0.0, f64::max);
        assert!(
            error <= 1e-3 * scale,
            "user {u}: fold-in {folded:?} vs exact {exact:?}"
        );
        // The trained vector was solved against the previous iteration's items; after
        // convergence that is nearly the same system.
        let trained: Vec<f64> = factors
            .users
            .row(u)
            .iter()
            .copied()
            .map(f64::from)
            .collect();
        let similarity = cosine(&folded, &trained);
        assert!(
            similarity > 0.99,
            "user {u}: cosine {similarity} between fold-in and trained"
        );
    }
}

/// The objective ALS minimises, over every (user, item) pair:
/// `Σ cᵤᵢ (pᵤᵢ − xᵤ·yᵢ)² + λ (Σ|xᵤ|² + Σ|yᵢ|²)`.
fn loss(factors: &Factors, data: &Interactions, config: &AlsConfig) -> f64 {
    let mut total = 0.0;
    for u in 0..data.users() {
        let (seen, weights) = data.user_items(u);
        let x = factors.users.row(u);
        for i in 0..data.items() {
            let y = factors.items.row(i);
            let (c, p) = match seen.binary_search(&(i as u32)) {
                Ok(at) => (1.0 + f64::from(config.alpha * weights[at]), 1.0),
                Err(_) => (1.0, 0.0),
            };
            let predicted: f64 = x
                .iter()
                .zip(y)
                .map(|(a, b)| f64::from(*a) * f64::from(*b))
                .sum();
            total += c * (p - predicted).powi(2);
        }
    }
    let squares = |m: &penchant_vectors::Matrix| {
        m.as_slice()
            .iter()
            .map(|v| f64::from(*v).powi(2))
            .sum::<f64>()
    };
    total + f64::from(config.regularization) * (squares(&factors.users) + squares(&factors.items))
}

#[test]
fn every_iteration_lowers_the_loss() {
    // Each CG step from the current vector lowers that row's convex quadratic, so the whole
    // objective can only go down, iteration after iteration.
    let data = clustered(3, 20, 15, 6, 4);
    let config = AlsConfig {
        factors: 6,
        alpha: 3.0,
        regularization: 0.1,
        threads: 2,
        ..AlsConfig::default()
    };
    let mut previous = f64::INFINITY;
    for iterations in 1..=8 {
        let factors = train(
            &data,
            &AlsConfig {
                iterations,
                ..config.clone()
            },
            |_| true,
        )
        .unwrap();
        let current = loss(&factors, &data, &config);
        assert!(
            current <= previous * (1.0 + 1e-6),
            "iteration {iterations}: loss {current} after {previous}"
        );
        previous = current;
    }
    let start = {
        let one = train(
            &data,
            &AlsConfig {
                iterations: 1,
                ..config.clone()
            },
            |_| true,
        )
        .unwrap();
        loss(&one, &data, &config)
    };
    assert!(
        previous < 0.9 * start,
        "loss barely moved: {start} -> {previous}"
    );
}

#[test]
fn returning_false_from_progress_cancels_training() {
    let data = clustered(2, 10, 10, 4, 1);
    let config = AlsConfig {
        factors: 4,
        iterations: 10,
        ..AlsConfig::default()
    };
    let mut calls = Vec::new();
    let result = train(&data, &config, |i| {
        calls.push(i);
        i < 3
    });
    assert!(result.is_none());
    assert_eq!(calls, vec![1, 2, 3]);

    let mut calls = Vec::new();
    assert!(
        train(&data, &config, |i| {
            calls.push(i);
            true
        })
        .is_some()
    );
    assert_eq!(calls, (1..=10).collect::<Vec<_>>());
}

#[test]
fn same_seed_and_threads_give_the_same_factors() {
    let data = clustered(3, 20, 10, 5, 2);
    let config = AlsConfig {
        factors: 8,
        iterations: 3,
        threads: 2,
        ..AlsConfig::default()
    };
    let a = train(&data, &config, |_| true).unwrap();
    let b = train(&data, &config, |_| true).unwrap();
    assert_eq!(a.users, b.users);
    assert_eq!(a.items, b.items);
    let c = train(&data, &AlsConfig { seed: 7, ..config }, |_| true).unwrap();
    assert_ne!(a.users, c.users);
}

#[test]
#[should_panic(expected = "invalid ALS config: factors must be between 1 and 1024")]
fn training_with_an_invalid_config_panics() {
    let data = clustered(2, 5, 5, 2, 1);
    let _ = train(
        &data,
        &AlsConfig {
            factors: 0,
            ..AlsConfig::default()
        },
        |_| true,
    );
}

#[test]
fn als_beats_popularity_on_planted_data_with_a_time_holdout() {
    let (users, items) = (1500, 400);
    let (events, _) = planted(users, items, 8, 40_000, 9);
    let split = time_holdout(&events, users, 2, 5);
    let train_data = Interactions::from_triples(users, items, split.train.iter().copied());
    let config = AlsConfig {
        factors: 16,
        iterations: 10,
        alpha: 5.0,
        ..AlsConfig::default()
    };
    let factors = train(&train_data, &config, |_| true).unwrap();
    let als = ranking_metrics(&split.test, 10, |u| recommend(&factors, &train_data, u, 10));

    let ranked = popularity(&train_data);
    let baseline = ranking_metrics(&split.test, 10, |u| {
        let (seen, _) = train_data.user_items(u);
        ranked
            .iter()
            .copied()
            .filter(|i| seen.binary_search(i).is_err())
            .take(10)
            .collect()
    });
    assert!(als.users > 500, "{als:?}");
    assert_eq!(als.users, baseline.users);
    assert!(
        als.ndcg > 1.3 * baseline.ndcg,
        "ALS {als:?} vs popularity {baseline:?}"
    );
    assert!(
        als.precision > 1.3 * baseline.precision,
        "ALS {als:?} vs popularity {baseline:?}"
    );
}

#[test]
fn random_split_feeds_training() {
    let triples: Vec<(u32, u32, f32)> = planted(300, 100, 4, 6000, 3)
        .0
        .into_iter()
        .map(|(u, i, w, _)| (u, i, w))
        .collect();
    let split = random_split(&triples, 300, 0.2, 1);
    let train_data = Interactions::from_triples(300, 100, split.train.iter().copied());
    let config = AlsConfig {
        factors: 8,
        iterations: 5,
        ..AlsConfig::default()
    };
    let factors = train(&train_data, &config, |_| true).unwrap();
    let metrics = ranking_metrics(&split.test, 10, |u| recommend(&factors, &train_data, u, 10));
    assert!(
        metrics.users > 100 && metrics.precision > 0.0,
        "{metrics:?}"
    );
}
