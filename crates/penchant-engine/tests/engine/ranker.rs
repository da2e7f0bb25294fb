//! The learned ranker against the hand blends, offline on MovieLens 100k (`../shared/data`).

use std::path::PathBuf;

use penchant_engine::recommend::learned::{self, LearnedConfig};
use penchant_engine::recommend::offline::Offline;
use penchant_engine::recommend::queues::Source;
use penchant_vectors::als::{self, AlsConfig, Interactions};
use penchant_vectors::eval::{self, Holdout};

/// Events `(user row, item row, weight, time in ms)`.
type Events = Vec<(u32, u32, f32, i64)>;

fn movielens_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/ml-100k")
}

/// MovieLens 100k's genres, per item row, as numbers.
fn genres(items: usize) -> Vec<Vec<u32>> {
    let path = movielens_dir().join("ml-100k.item");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("MovieLens 100k is read from {}: {e}", path.display()));
    let mut names: Vec<String> = Vec::new();
    let mut out = vec![Vec::new(); items];
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split('\t').collect();
        let row = f[0].parse::<usize>().unwrap() - 1;
        for genre in f
            .get(3)
            .copied()
            .unwrap_or("")
            .split(' ')
            .filter(|g| !g.is_empty())
        {
            let id = names.iter().position(|n| n == genre).unwrap_or_else(|| {
                names.push(genre.to_owned());
                names.len() - 1
            });
            if row < items {
                out[row].push(id as u32);
            }
        }
    }
    out
}

/// MovieLens 100k's ratings as events of weight 1, in time order, with the users and items.
fn movielens() -> (Events, usize, usize) {
    let path = movielens_dir().join("ml-100k.inter");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("MovieLens 100k is read from {}: {e}", path.display()));
    let mut events: Events = text
        .lines()
        .skip(1)
        .map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            let at: f64 = f[3].parse().unwrap();
            (
                f[0].parse::<u32>().unwrap() - 1,
                f[1].parse::<u32>().unwrap() - 1,
                1.0,
                (at * 1000.0) as i64,
            )
        })
        .collect();
    events.sort_by_key(|e| e.3);
    let users = events.iter().map(|e| e.0).max().unwrap() as usize + 1;
    let items = events.iter().map(|e| e.1).max().unwrap() as usize + 1;
    (events, users, items)
}

/// NDCG@10 of the best hand blend and of the learned ranker on each user's latest 20%, with
/// the split, its sources and the ranker.
struct Compared {
    hand: eval::Metrics,
    learned: eval::Metrics,
    split: eval::Split,
    ranker: learned::Learned,
}

fn compare(
    events: &[(u32, u32, f32, i64)],
    users: usize,
    items: usize,
    facets: &[Vec<u32>],
) -> Compared {
    let holdout = Holdout::Fraction(0.2);
    let split = eval::time_holdout(events, users, holdout, 1);
    let train = Interactions::from_triples(users, items, split.train.iter().copied());
    let config = AlsConfig::default();
    let factors = als::train(&train, &config, |_| true).unwrap();
    let offline =
        Offline::new(&train, &factors, &split.train, &split.train_at).with_facets(facets.to_vec());
    let blend: Vec<Source> = serde_json::from_str(
        r#"[{"source":"als"},{"source":"similar-to-liked","last":5},{"source":"related","last":10}]"#,
    )
    .unwrap();
    let hand = eval::ranking_metrics(&split.test, 10, |u| offline.blend(&blend, u, 10));
    let train_events = split.train_events();
    let ranker = learned::learn(
        &train_events,
        users,
        items,
        holdout,
        &config,
        &LearnedConfig::default(),
        facets,
    )
    .expect("a ranker");
    let learned = eval::ranking_metrics(&split.test, 10, |u| ranker.recommend(&offline, u, 10));
    println!(
        "NDCG@10 hand blend {:.4}, learned {:.4} ({:+.1}%); {} trees, {} + {} queries, {:.1} s; \
         importance {:?}",
        hand.ndcg,
        learned.ndcg,
        (learned.ndcg / hand.ndcg - 1.0) * 100.0,
        ranker.trees,
        ranker.train_queries,
        ranker.validation_queries,
        ranker.train_seconds,
        ranker.importance
    );
    Compared {
        hand,
        learned,
        split,
        ranker,
    }
}

#[test]
fn the_learned_ranker_beats_the_best_hand_blend_on_movielens() {
    let (events, users, items) = movielens();
    let c = compare(&events, users, items, &genres(items));
    assert!(
        c.learned.ndcg > c.hand.ndcg,
        "{:?} vs {:?}",
        c.learned,
        c.hand
    );
    assert!(c.ranker.trees > 0);
}

#[test]
fn the_learned_ranker_comes_near_a_synthetic_shops_hidden_preferences() {
    let (users, items) = (3_000, 600);
    let (events, truth) = penchant_vectors::synthetic::planted(users, items, 8, 60_000, 11);
    let c = compare(&events, users, items, &[]);
    // The oracle ranks what a user had not had by the probability the generator gives it.
    let topic_mass = |t: u32| -> f32 {
        (0..items)
            .filter(|&i| truth.item_topic[i] == t)
            .map(|i| truth.popularity[i])
            .sum()
    };
    let masses: Vec<f32> = (0..8).map(topic_mass).collect();
    let all: f32 = truth.popularity.iter().sum();
    let train = Interactions::from_triples(users, items, c.split.train.iter().copied());
    let oracle = eval::ranking_metrics(&c.split.test, 10, |u| {
        let (seen, _) = train.user_items(u);
        let mut scored: Vec<(u32, f32)> = (0..items as u32)
            .filter(|i| seen.binary_search(i).is_err())
            .map(|i| {
                let topic = truth.item_topic[i as usize];
                let theta: f32 = truth.user_topics[u]
                    .iter()
                    .filter(|(t, _)| *t == topic)
                    .map(|(_, w)| w)
                    .sum();
                let pop = truth.popularity[i as usize];
                (
                    i,
                    0.9 * theta * pop / masses[topic as usize] + 0.1 * pop / all,
                )
            })
            .collect();
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        scored.into_iter().take(10).map(|(i, _)| i).collect()
    });
    println!(
        "synthetic: oracle {:.4}; learned reaches {:.0}% of it, the hand blend {:.0}%",
        oracle.ndcg,
        c.learned.ndcg / oracle.ndcg * 100.0,
        c.hand.ndcg / oracle.ndcg * 100.0
    );
    assert!(
        c.learned.ndcg > c.hand.ndcg,
        "{:?} vs {:?}",
        c.learned,
        c.hand
    );
    assert!(
        oracle.ndcg >= c.learned.ndcg * 0.95,
        "the oracle is the ceiling"
    );
}
