//! Offline evaluation: hold out some interactions, recommend, count how many come back.
//!
//! The metrics follow the definitions of the `implicit` library's `ranking_metrics_at_k`, so a
//! number printed here can be set beside one printed by `implicit` on the same split:
//!
//! - **precision@K** = `Σᵤ hitsᵤ / Σᵤ min(K, |testᵤ|)` — pooled over users, and normalised by
//!   what is attainable, so a user with 2 test items and 2 hits in a top-10 counts as perfect.
//! - **recall@K** = `meanᵤ hitsᵤ / |testᵤ|` (not in `implicit`; the usual per-user definition).
//! - **NDCG@K** = `meanᵤ DCGᵤ / IDCGᵤ`, binary relevance: `DCG = Σ_{hits at rank r} 1/log₂(r+2)`
//!   (rank 0-based), `IDCG = Σ_{r < min(K, |testᵤ|)} 1/log₂(r+2)`.
//!
//! All are over the users with at least one test item. Recommendations are expected to exclude
//! the user's training items (as `implicit` does by default), so test sets exclude them too.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::als::{Factors, Interactions};
use crate::matrix::Metric;

/// Interactions split into a training set and, per user, the items held out for testing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Split {
    /// `(user row, item row, weight)` triples to train on.
    pub train: Vec<(u32, u32, f32)>,
    /// When each training triple happened ([`time_holdout`]: in the order given, which is
    /// time order when the events were sorted; empty for [`random_split`]).
    pub train_at: Vec<i64>,
    /// Per user row: the held-out item rows, sorted, distinct, none of them in the user's
    /// training triples; empty for users not tested.
    pub test: Vec<Vec<u32>>,
}

impl Split {
    /// The training triples with their times, `(user row, item row, weight, time)`, in the
    /// order given ([`time_holdout`]: time order) — what another holdout can split again.
    pub fn train_events(&self) -> Vec<(u32, u32, f32, i64)> {
        self.train
            .iter()
            .zip(&self.train_at)
            .map(|(&(u, i, w), &at)| (u, i, w, at))
            .collect()
    }
}

/// How much of each user's history a time-ordered split holds out (in JSON, a count is an
/// integer and a share a number with a fraction).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Holdout {
    /// The last `n` events.
    Count(usize),
    /// The latest share of the events (in `(0, 1)`), rounded up: a user with 7 events and a
    /// share of 0.2 has 2 held out.
    Fraction(f64),
}

impl Holdout {
    /// Events held out of a history of `n`.
    pub fn of(self, n: usize) -> usize {
        match self {
            Holdout::Count(c) => c,
            Holdout::Fraction(f) => (f * n as f64).ceil() as usize,
        }
    }
}

impl From<usize> for Holdout {
    fn from(n: usize) -> Self {
        Holdout::Count(n)
    }
}

/// A time-ordered holdout: for each user, the latest events ([`Holdout`]: a count or a share
/// of the user's events; by time, ties keeping the order given) go to test, the rest to train,
/// when at least `min_train` events stay in training.
///
/// Held-out events with weight `<= 0` and items the user also has in training are not test
/// items (they cannot be hit).
///
/// # Panics
/// If an event's user row is `>= users`.
pub fn time_holdout(
    events: &[(u32, u32, f32, i64)],
    users: usize,
    holdout: impl Into<Holdout>,
    min_train: usize,
) -> Split {
    let holdout = holdout.into();
    let mut by_user: Vec<Vec<usize>> = vec![Vec::new(); users];
    for (e, &(u, ..)) in events.iter().enumerate() {
        assert!(
            (u as usize) < users,
            "user row {u} out of range for {users} users"
        );
        by_user[u as usize].push(e);
    }
    let mut held_out = vec![false; events.len()];
    for list in &mut by_user {
        let n = holdout.of(list.len());
        if n == 0 || list.len() < min_train + n {
            continue;
        }
        // Stable: ties stay in the order given.
        list.sort_by_key(|&e| events[e].3);
        for &e in &list[list.len() - n..] {
            held_out[e] = true;
        }
    }
    let mut train = Vec::with_capacity(events.len());
    let mut train_at = Vec::with_capacity(events.len());
    let mut test_events = Vec::new();
    for (e, &(u, i, w, at)) in events.iter().enumerate() {
        if held_out[e] {
            test_events.push((u, i, w));
        } else {
            train.push((u, i, w));
            train_at.push(at);
        }
    }
    let test = test_sets(users, &train, &test_events);
    Split {
        train,
        train_at,
        test,
    }
}

/// A random split like `implicit`'s `train_test_split`: each triple goes to test with
/// probability `test_share`, seeded. Test sets are cleaned as in [`time_holdout`].
///
/// # Panics
/// If a user row is `>= users`.
pub fn random_split(
    triples: &[(u32, u32, f32)],
    users: usize,
    test_share: f64,
    seed: u64,
) -> Split {
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut train, mut test_triples) = (Vec::new(), Vec::new());
    for &triple in triples {
        assert!(
            (triple.0 as usize) < users,
            "user row {} out of range for {users} users",
            triple.0
        );
        if rng.random::<f64>() < test_share {
            test_triples.push(triple);
        } else {
            train.push(triple);
        }
    }
    let test = test_sets(users, &train, &test_triples);
    Split {
        train,
        train_at: Vec::new(),
        test,
    }
}

/// Per-user test items: positive, distinct, sorted, not among the user's training items.
fn test_sets(
    users: usize,
    train: &[(u32, u32, f32)],
    held_out: &[(u32, u32, f32)],
) -> Vec<Vec<u32>> {
    let mut test: Vec<Vec<u32>> = vec![Vec::new(); users];
    for &(u, i, w) in held_out {
        if w > 0.0 {
            test[u as usize].push(i);
        }
    }
    let mut trained: Vec<Vec<u32>> = vec![Vec::new(); users];
    for &(u, i, _) in train {
        if !test[u as usize].is_empty() {
            trained[u as usize].push(i);
        }
    }
    for (items, seen) in test.iter_mut().zip(&mut trained) {
        items.sort_unstable();
        items.dedup();
        seen.sort_unstable();
        items.retain(|i| seen.binary_search(i).is_err());
    }
    test
}

/// Ranking quality at K, averaged as described in the [module docs](self).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Metrics {
    /// Hits over attainable hits, pooled over users.
    pub precision: f64,
    /// Mean share of each user's test items recommended.
    pub recall: f64,
    /// Mean normalised discounted cumulative gain, binary relevance.
    pub ndcg: f64,
    /// The number of users evaluated (those with test items).
    pub users: usize,
}

/// Scores the lists `recommend(u)` returns (item rows, best first, already excluding the
/// user's training items; only the first `k` count) against the test sets.
pub fn ranking_metrics(
    test: &[Vec<u32>],
    k: usize,
    recommend: impl Fn(usize) -> Vec<u32>,
) -> Metrics {
    let gain = |rank: usize| 1.0 / ((rank + 2) as f64).log2();
    let (mut hits, mut attainable, mut recall, mut ndcg, mut users) = (0usize, 0usize, 0.0, 0.0, 0);
    for (u, relevant) in test.iter().enumerate() {
        if relevant.is_empty() {
            continue;
        }
        let mut relevant = relevant.clone();
        relevant.sort_unstable();
        let ideal = k.min(relevant.len());
        let (mut user_hits, mut dcg) = (0usize, 0.0);
        for (rank, item) in recommend(u).iter().take(k).enumerate() {
            if relevant.binary_search(item).is_ok() {
                user_hits += 1;
                dcg += gain(rank);
            }
        }
        let idcg: f64 = (0..ideal).map(gain).sum();
        hits += user_hits;
        attainable += ideal;
        recall += user_hits as f64 / relevant.len() as f64;
        ndcg += if idcg > 0.0 { dcg / idcg } else { 0.0 };
        users += 1;
    }
    if users == 0 {
        return Metrics::default();
    }
    Metrics {
        precision: if attainable > 0 {
            hits as f64 / attainable as f64
        } else {
            0.0
        },
        recall: recall / users as f64,
        ndcg: ndcg / users as f64,
        users,
    }
}

/// The popularity baseline: every item row ordered by its number of training users, most first
/// (ties: lower row first). Filter out a user's training items and take `k` to recommend.
pub fn popularity(train: &Interactions) -> Vec<u32> {
    let mut items: Vec<u32> = (0..train.items() as u32).collect();
    items.sort_by_key(|&i| std::cmp::Reverse(train.item_users(i as usize).0.len()));
    items
}

/// The top `k` item rows for user row `u` by `dot(xᵤ, yᵢ)`, skipping the user's training items.
pub fn recommend(factors: &Factors, train: &Interactions, u: usize, k: usize) -> Vec<u32> {
    let (seen, _) = train.user_items(u);
    factors
        .items
        .top_k(Metric::Dot, factors.users.row(u), k, |i| {
            seen.binary_search(&(i as u32)).is_ok()
        })
        .into_iter()
        .map(|(i, _)| i as u32)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_on_a_hand_computed_example() {
        // User 0: test {1, 2}, recommended [1, 5, 2] at K=3: hits at ranks 0 and 2.
        // User 1: test {7}, recommended [3, 4, 5]: no hit. User 2: no test items, skipped.
        let test = vec![vec![2, 1], vec![7], vec![]];
        let lists = [vec![1, 5, 2], vec![3, 4, 5], vec![9, 9, 9]];
        let m = ranking_metrics(&test, 3, |u| lists[u].clone());
        assert_eq!(m.users, 2);
        // precision: 2 hits / (min(3,2) + min(3,1)) = 2/3.
        assert!((m.precision - 2.0 / 3.0).abs() < 1e-12);
        // recall: (2/2 + 0/1) / 2.
        assert!((m.recall - 0.5).abs() < 1e-12);
        // ndcg user 0: (1 + 1/log2(4)) / (1 + 1/log2(3)); user 1: 0.
        let user0 = (1.0 + 0.5) / (1.0 + 1.0 / 3f64.log2());
        assert!((m.ndcg - user0 / 2.0).abs() < 1e-12);
    }

    #[test]
    fn only_the_first_k_recommendations_count() {
        let m = ranking_metrics(&[vec![4]], 2, |_| vec![1, 2, 4]);
        assert_eq!((m.precision, m.recall, m.ndcg), (0.0, 0.0, 0.0));
        let m = ranking_metrics(&[vec![4]], 3, |_| vec![1, 2, 4]);
        assert_eq!(m.precision, 1.0);
        assert_eq!(m.recall, 1.0);
        assert!((m.ndcg - 0.5).abs() < 1e-12);
    }

    #[test]
    fn no_test_users_give_zero_metrics() {
        assert_eq!(
            ranking_metrics(&[vec![], vec![]], 10, |_| vec![1]),
            Metrics::default()
        );
    }

    #[test]
    fn time_holdout_takes_the_latest_events() {
        let events = [
            (0, 10, 1.0, 300),
            (0, 11, 1.0, 100),
            (0, 12, 1.0, 200),
            (0, 13, 1.0, 300), // ties with item 10: given later, so it is later.
            (1, 20, 1.0, 5),   // user 1 has too few events to be tested.
            (1, 21, 1.0, 6),
        ];
        let split = time_holdout(&events, 2, 2, 2);
        assert_eq!(split.test, vec![vec![10, 13], vec![]]);
        assert_eq!(
            split.train,
            vec![(0, 11, 1.0), (0, 12, 1.0), (1, 20, 1.0), (1, 21, 1.0)]
        );

        let split = time_holdout(&events, 2, 1, 1);
        assert_eq!(split.test, vec![vec![13], vec![21]]);
        assert_eq!(split.train_at, vec![300, 100, 200, 5], "in the order given");

        // A share, rounded up: half of user 0's four events, half of user 1's two.
        let split = time_holdout(&events, 2, Holdout::Fraction(0.5), 1);
        assert_eq!(split.test, vec![vec![10, 13], vec![21]]);
        let split = time_holdout(&events, 2, Holdout::Fraction(0.25), 1);
        assert_eq!(
            split.test,
            vec![vec![13], vec![21]],
            "0.25 of 4 and of 2 round up to 1"
        );
    }

    #[test]
    fn test_sets_drop_items_seen_in_training_and_non_positive_ones() {
        let events = [
            (0, 1, 1.0, 1),
            (0, 2, 1.0, 2),
            (0, 1, 1.0, 3),
            (0, 3, -1.0, 4),
        ];
        let split = time_holdout(&events, 1, 2, 1);
        assert!(split.test[0].is_empty(), "{:?}", split.test);
    }

    #[test]
    fn random_split_shares_and_seeding() {
        let triples: Vec<(u32, u32, f32)> = (0..10_000).map(|n| (n % 10, n / 10, 1.0)).collect();
        let split = random_split(&triples, 10, 0.2, 7);
        let tested: usize = split.test.iter().map(Vec::len).sum();
        assert_eq!(tested + split.train.len(), triples.len());
        assert!((1800..2200).contains(&tested), "{tested} of 10000 held out");
        assert_eq!(split, random_split(&triples, 10, 0.2, 7));
        assert_ne!(split, random_split(&triples, 10, 0.2, 8));
    }

    #[test]
    fn popularity_orders_by_user_count() {
        let train = Interactions::from_triples(
            3,
            4,
            [
                (0, 2, 1.0),
                (1, 2, 1.0),
                (2, 0, 1.0),
                (1, 3, 1.0),
                (2, 3, 1.0),
            ],
        );
        assert_eq!(popularity(&train), vec![2, 3, 0, 1]);
    }
}
