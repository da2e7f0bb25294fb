//! The learned ranker against the hand blends, offline: on MovieLens 100k and on a synthetic
//! shop with planted preferences.
//!
//! MovieLens 100k cannot ship with the project. Its folder (`ml-100k.inter`, `ml-100k.item`) is
//! `$MOVIELENS_100K_DIR`, else `../shared/data/ml-100k` beside the clone. Without it the
//! MovieLens tests print that they were skipped and pass, unless `REQUIRE_TEST_DATA=1` (CI
//! sets it): then they fail.

use std::path::PathBuf;

use penchant_learn::learned::{self, LearnedConfig};
use penchant_learn::offline::Offline;
use penchant_model::recommend::queues::Source;
use penchant_vectors::als::{self, AlsConfig, Interactions};
use penchant_vectors::eval::{self, Holdout};

/// Events `(user row, item row, weight, time in ms)`.
type Events = Vec<(u32, u32, f32, i64)>;

/// MovieLens 100k's folder, or `None` (the test is skipped) when it is absent and not required.
fn movielens_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("MOVIELENS_100K_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("run by cargo"))
                .join("../../../shared/data/ml-100k")
        });
    if dir.join("ml-100k.inter").is_file() {
        return Some(dir);
    }
    let required = std::env::var("REQUIRE_TEST_DATA").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "MovieLens 100k is required (REQUIRE_TEST_DATA=1) and not at {}: set \
         MOVIELENS_100K_DIR to its folder",
        dir.display()
    );
    eprintln!(
        "skipped: MovieLens 100k is not at {} (set MOVIELENS_100K_DIR to its folder; \
         docs/TESTING.md)",
        dir.display()
    );
    None
}

/// MovieLens 100k's genres, per item row, as numbers.
fn genres(dir: &std::path::Path, items: usize) -> Vec<Vec<u32>> {
    let path = dir.join("ml-100k.item");
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
fn movielens(dir: &std::path::Path) -> (Events, usize, usize) {
    let path = dir.join("ml-100k.inter");
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
    config: &LearnedConfig,
) -> Compared {
    let holdout = Holdout::Fraction(0.2);
    let split = eval::time_holdout(events, users, holdout, 1);
    let train = Interactions::from_triples(users, items, split.train.iter().copied());
    let als_config = AlsConfig::default();
    let factors = als::train(&train, &als_config, |_| true).unwrap();
    let offline =
        Offline::new(&train, &factors, &split.train, &split.train_at).with_facets(facets.to_vec());
    let blend: Vec<Source> = serde_json::from_str(
        r#"[{"source":"als"},{"source":"similar-to-liked","last":5},{"source":"related","last":10}]"#,
    )
    .unwrap();
    let hand = eval::ranking_metrics(&split.test, 10, |u| offline.blend(&blend, u, 10));
    let train_events = split.train_events();
    let history = learned::History {
        events: &train_events,
        users,
        items,
        item_facets: facets,
    };
    let ranker =
        learned::learn(&history, holdout, &als_config, config, |_| true).expect("a ranker");
    let learned = {
        let recommend = ranker.recommender(&offline);
        eval::ranking_metrics(&split.test, 10, |u| recommend(u, 10))
    };
    println!(
        "NDCG@10 hand blend {:.5}, learned {:.5} ({:+.2}%); {} trees, {} + {} queries, {:.1} s; \
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
    let Some(dir) = movielens_dir() else { return };
    let (events, users, items) = movielens(&dir);
    let c = compare(
        &events,
        users,
        items,
        &genres(&dir, items),
        &LearnedConfig::default(),
    );
    // +10.93% at these settings and this draw of the validating users (deterministic); +9.72%
    // to +10.93% over eight draws (`movielens_development_and_test_splits`, seeds 1–8): a
    // margin below.
    assert!(
        c.learned.ndcg > 1.08 * c.hand.ndcg,
        "{:?} vs {:?}",
        c.learned,
        c.hand
    );
    assert!(c.ranker.trees > 0);
}

/// The same comparison on two development splits — each user's latest 20% of their first
/// 80%, and of their first 64%, each learned from what came before — beside the goal's test
/// split, each learned with eight draws of the validation users (`seed`): a setting of the
/// ranker or its features is chosen where it wins on the development splits (the mean over
/// splits and draws), and the test split only confirms it. One draw's figure moves by up to
/// ±1.5 points with the draw alone, more than most settings move it
/// (`cargo test --release -p penchant-learn --test ranker -- --ignored --nocapture movielens_development`).
#[test]
#[ignore = "a development tool: twenty-four learnings on MovieLens (~8 minutes)"]
fn movielens_development_and_test_splits() {
    const SEEDS: [u64; 8] = [7, 1, 2, 3, 4, 5, 6, 8];
    let Some(dir) = movielens_dir() else { return };
    let (events, users, items) = movielens(&dir);
    let facets = genres(&dir, items);
    let mut splits = vec![("test", events.clone())];
    let mut history = events;
    for name in ["development (first 80%)", "development (first 64%)"] {
        history = eval::time_holdout(&history, users, Holdout::Fraction(0.2), 1).train_events();
        splits.push((name, history.clone()));
    }
    let mut development = Vec::new();
    for (name, events) in &splits {
        let gains: Vec<(f64, usize)> = SEEDS
            .iter()
            .map(|&seed| {
                let config = LearnedConfig {
                    seed,
                    ..LearnedConfig::default()
                };
                let c = compare(events, users, items, &facets, &config);
                ((c.learned.ndcg / c.hand.ndcg - 1.0) * 100.0, c.ranker.trees)
            })
            .collect();
        let mean = gains.iter().map(|g| g.0).sum::<f64>() / gains.len() as f64;
        if name.starts_with("development") {
            development.push(mean);
        }
        let each: Vec<String> = SEEDS
            .iter()
            .zip(&gains)
            .map(|(seed, (gain, trees))| format!("seed {seed}: {gain:+.2}% ({trees} trees)"))
            .collect();
        println!(
            "{name}: mean {mean:+.2}% over the hand blend; {}",
            each.join(", ")
        );
    }
    println!(
        "development splits' mean: {:+.2}%",
        development.iter().sum::<f64>() / development.len() as f64
    );
}

#[test]
fn the_learned_ranker_comes_near_a_synthetic_shops_hidden_preferences() {
    let (users, items) = (3_000, 600);
    let (events, truth) = penchant_vectors::synthetic::planted(users, items, 8, 60_000, 11);
    let c = compare(&events, users, items, &[], &LearnedConfig::default());
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
