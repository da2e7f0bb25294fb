//! Seeded synthetic interaction data with a known low-rank structure, for tests and benchmarks.
//!
//! Real datasets cannot be shipped with the code and are too small to load-test with; random
//! noise has nothing for a recommender to learn. This generator plants what real catalogues
//! have — a handful of tastes and a long tail of popularity — and returns the truth it planted,
//! so tests can check that training recovers it.
//!
//! The model is a topic mixture: each item belongs to one of `rank` topics; item popularity
//! follows Zipf's law (`1 / rankᵢ`, over a random order of items); each user likes one to three
//! topics with random weights. An interaction picks a user by activity (heavy-tailed: a few
//! users do much more than most), one of the user's topics, then an item of that topic by
//! popularity — or, one time in ten, any item by popularity (noise). The expected
//! user×item matrix `Σₜ θᵤₜ · popᵢ [topic(i) = t]` has rank `rank`, like the
//! `popularity^s × exp(β·dot)` latent-factor models, but each draw costs `O(log n)`
//! instead of a softmax over every item, so 5M interactions take seconds.

use rand::distr::Distribution;
use rand::distr::weighted::WeightedIndex;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

/// The share of interactions drawn from global popularity, ignoring the user's topics.
const NOISE: f64 = 0.1;

/// What [`planted`] planted.
#[derive(Debug, Clone, PartialEq)]
pub struct Truth {
    /// Per user row: the topics the user likes and their weights (summing to 1).
    pub user_topics: Vec<Vec<(u32, f32)>>,
    /// Per item row: its topic.
    pub item_topic: Vec<u32>,
    /// Per item row: its Zipf popularity weight (the most popular item has 1).
    pub popularity: Vec<f32>,
}

/// Generates `interactions` events `(user row, item row, weight 1, time)` over `users` users,
/// `items` items and `rank` topics, in time order (one second apart), seeded. The same pair may
/// occur more than once (repeat consumption).
///
/// # Panics
/// If `users`, `items` or `rank` is 0, or `rank > items`.
pub fn planted(
    users: usize,
    items: usize,
    rank: usize,
    interactions: usize,
    seed: u64,
) -> (Vec<(u32, u32, f32, i64)>, Truth) {
    assert!(
        users > 0 && items > 0 && rank > 0,
        "planted data needs users, items and topics"
    );
    assert!(
        rank <= items,
        "{rank} topics cannot each have one of {items} items"
    );
    let mut rng = StdRng::seed_from_u64(seed);

    let mut order: Vec<usize> = (0..items).collect();
    order.shuffle(&mut rng);
    let mut popularity = vec![0.0f32; items];
    for (place, &item) in order.iter().enumerate() {
        popularity[item] = 1.0 / (place + 1) as f32;
    }
    order.shuffle(&mut rng);
    let mut item_topic = vec![0u32; items];
    let mut topic_items: Vec<Vec<u32>> = vec![Vec::new(); rank];
    for (place, &item) in order.iter().enumerate() {
        item_topic[item] = (place % rank) as u32;
        topic_items[place % rank].push(item as u32);
    }
    let topic_pickers: Vec<WeightedIndex<f32>> = topic_items
        .iter()
        .map(|members| weighted(members.iter().map(|&i| popularity[i as usize])))
        .collect();
    let any_item = weighted(popularity.iter().copied());

    let user_topics: Vec<Vec<(u32, f32)>> = (0..users)
        .map(|_| {
            let count = rng.random_range(1..=3.min(rank));
            let mut topics: Vec<u32> = Vec::with_capacity(count);
            while topics.len() < count {
                let t = rng.random_range(0..rank as u32);
                if !topics.contains(&t) {
                    topics.push(t);
                }
            }
            let weights: Vec<f32> = topics
                .iter()
                .map(|_| rng.random_range(0.2f32..1.0))
                .collect();
            let sum: f32 = weights.iter().sum();
            topics
                .into_iter()
                .zip(weights)
                .map(|(t, w)| (t, w / sum))
                .collect()
        })
        .collect();
    // Pareto(1.5) activity, capped so one user cannot take most of a small dataset.
    let any_user = weighted((0..users).map(|_| {
        let u: f32 = rng.random_range(f32::EPSILON..1.0);
        u.powf(-1.0 / 1.5).min(1000.0)
    }));

    let start = 1_600_000_000i64;
    let events = (0..interactions)
        .map(|n| {
            let user = any_user.sample(&mut rng);
            let item = if rng.random_bool(NOISE) {
                any_item.sample(&mut rng)
            } else {
                let topic = pick_topic(&user_topics[user], rng.random());
                let members = &topic_items[topic as usize];
                members[topic_pickers[topic as usize].sample(&mut rng)] as usize
            };
            (user as u32, item as u32, 1.0, start + n as i64)
        })
        .collect();
    (
        events,
        Truth {
            user_topics,
            item_topic,
            popularity,
        },
    )
}

/// A sampler over positive weights.
fn weighted(weights: impl Iterator<Item = f32>) -> WeightedIndex<f32> {
    WeightedIndex::new(weights).expect("weights are positive and finite")
}

/// The topic whose cumulative weight first exceeds `draw` (in `[0, 1)`).
fn pick_topic(topics: &[(u32, f32)], draw: f32) -> u32 {
    let mut acc = 0.0;
    for &(t, w) in topics {
        acc += w;
        if draw < acc {
            return t;
        }
    }
    topics.last().expect("every user has a topic").0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_and_in_range() {
        let (events, truth) = planted(50, 40, 4, 2000, 1);
        assert_eq!(events.len(), 2000);
        assert!(
            events
                .iter()
                .all(|&(u, i, w, _)| u < 50 && i < 40 && w == 1.0)
        );
        assert!(
            events.windows(2).all(|e| e[0].3 < e[1].3),
            "events are in time order"
        );
        assert_eq!(truth.item_topic.len(), 40);
        assert_eq!(planted(50, 40, 4, 2000, 1).0, events);
        assert_ne!(planted(50, 40, 4, 2000, 2).0, events);
    }

    #[test]
    fn most_interactions_follow_the_users_topics() {
        let (events, truth) = planted(200, 100, 5, 20_000, 3);
        let on_topic = events
            .iter()
            .filter(|&&(u, i, ..)| {
                let topic = truth.item_topic[i as usize];
                truth.user_topics[u as usize]
                    .iter()
                    .any(|&(t, _)| t == topic)
            })
            .count();
        // 90% by design, plus noise that lands on a liked topic by chance.
        assert!(
            on_topic as f64 > 0.88 * events.len() as f64,
            "{on_topic} on topic"
        );
    }

    #[test]
    fn popularity_is_long_tailed() {
        let (events, truth) = planted(500, 1000, 10, 50_000, 4);
        let mut counts = vec![0usize; 1000];
        for &(_, i, ..) in &events {
            counts[i as usize] += 1;
        }
        let top = truth.popularity.iter().position(|&p| p == 1.0).unwrap();
        let median = {
            let mut sorted = counts.clone();
            sorted.sort_unstable();
            sorted[500]
        };
        assert!(
            counts[top] > 20 * median.max(1),
            "top {} vs median {median}",
            counts[top]
        );
    }
}
