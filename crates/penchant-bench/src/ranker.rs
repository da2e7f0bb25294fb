//! Table (5) of `penchant-bench recommend`: the learned ranker trained from logged impressions,
//! on a synthetic shop whose hidden preferences are known.
//!
//! Users keep to a few planted topics ([`penchant_vectors::synthetic::planted`]); their history
//! is a week of events before the last day. In the last day every impression serves a user 10
//! items, half of the user's topics and half any, in random order; one user in six looks at
//! it and clicks the served item the user prefers — the hidden preference: the user's weight
//! on the item's topic plus 0.3 × the item's popularity (Zipf, 1 for the most popular), the
//! place it was served at playing no part — and one click in four becomes a purchase. An
//! order by the hidden preference has NDCG 1. The impressions are logged into the embedded store
//! ([`Engine::log_impressions`]) and the clicks sent with their queryIDs, then the ranker job
//! learns from them (every impression with an outcome, at most the training's row bound):
//! its time end to end — reading the events and the impressions back from the store, the
//! features as the history stood before each group of impressions, the boosting.
//!
//! Beside it, in the same run: the boosting alone on the same examples ([`learned::
//! impression_examples`], computed once from the generated data) by `penchant-rank` and by
//! LightGBM's `lambdarank` (one thread each, the same leaves, rate, minimum leaf rows, L2,
//! truncation, early stopping on validation NDCG@10), with each one's validation NDCG@10; and
//! the validation NDCG@10 of the order the served list had (random) and of the hand blend
//! (the `blend` feature), so the gain is the ranker's.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use penchant_engine::catalog::Write;
use penchant_engine::clock::Clock;
use penchant_engine::events::{Event, EventType, Target};
use penchant_engine::recommend::QueueDefinition;
use penchant_engine::recommend::impressions::Impression;
use penchant_engine::recommend::ranker::{RankerConfig, RankerStatus, StoredRanker};
use penchant_engine::{Engine, EngineConfig};
use penchant_learn::learned::{self, History, LearnedConfig, Shown};
use penchant_rank::Dataset;
use penchant_store::Store;
use penchant_store_rocksdb::{RocksOptions, RocksStore};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::json;

use crate::report::{Scale, spinner};
use crate::{Cell, Table, rate};

const APP: &str = "RANKED";
const INDEX: &str = "items";
const TOPICS: usize = 8;
const SERVED: usize = 10;
/// The learned queue's size (a shop's page or two of recommendations).
const QUEUE_SIZE: usize = 100;
const DAY_MS: i64 = 86_400_000;
/// LightGBM's `lambdarank` on the same examples (run by the bench's Python).
const LIGHTGBM: &str = include_str!("../python/lambdamart_lightgbm.py");

/// The shop's size at a scale (unless given): users, items, impressions.
pub(crate) fn shape(
    scale: Scale,
    (users, items, impressions): (Option<usize>, Option<usize>, Option<usize>),
) -> (usize, usize, usize) {
    let (default_users, default_items, shown) = scale.pick(
        (2_000, 1_000, 20_000),
        (20_000, 5_000, 200_000),
        (100_000, 10_000, 1_000_000),
    );
    (
        users.unwrap_or(default_users),
        items.unwrap_or(default_items),
        impressions.unwrap_or(shown),
    )
}

/// Table (5).
pub(crate) async fn impressions(
    scale: Scale,
    sizes: (Option<usize>, Option<usize>, Option<usize>),
    no_sync: bool,
    python: anyhow::Result<PathBuf>,
) -> anyhow::Result<Table> {
    let (users, items, count) = shape(scale, sizes);
    let dir = tempfile::tempdir()?;
    let options = RocksOptions {
        sync_writes: !no_sync,
        ..RocksOptions::default()
    };
    let store: Arc<dyn Store> = Arc::new(RocksStore::open(dir.path(), options)?);
    // Caches kept as `penchant serve` keeps them (the served ranker, the app's retention
    // window and seen settings are looked at again after their TTL; the default config caches
    // nothing, so every request would read them again).
    // The engine's clock is set by hand, from the day's start, and moved on only between the
    // phases: each run has the same features and learns the same model (its early stopping
    // would otherwise see where the windows' edges fell in that run).
    let day_start =
        penchant_store::validate::now_micros().div_euclid(DAY_MS * 1000) * DAY_MS * 1000;
    let clock = Clock::manual(day_start);
    let serving = EngineConfig::serving();
    // The longest of the caches' times to live (the request phase starts past it).
    let ttl = serving.strategy_cache_ttl.max(serving.tenancy.cache_ttl);
    let config = EngineConfig {
        tenancy: serving.tenancy,
        strategy_cache_ttl: serving.strategy_cache_ttl,
        bloom_cache_ttl: serving.bloom_cache_ttl,
        clock: clock.clone(),
        ..EngineConfig::default()
    };
    let engine = Engine::open(store, config).await?;
    engine.tenancy().create_app(Some(APP), "ranked").await?;
    let progress = spinner(format!(
        "recommend: a shop of {} users, {} items, then {} impressions",
        rate(users as f64),
        rate(items as f64),
        rate(count as f64)
    ));
    let (planted, truth) =
        penchant_vectors::synthetic::planted(users, items, TOPICS, users * 6, 45);
    let records: Vec<(String, Write)> = (0..items)
        .map(|i| {
            let record = json!({"objectID": format!("i{i}"), "topic": truth.item_topic[i]});
            let record = record.as_object().expect("an object").clone();
            (INDEX.to_owned(), Write::Put(record))
        })
        .collect();
    for chunk in records.chunks(1000) {
        engine.write_records(APP, chunk.to_vec()).await?;
    }
    // The history: a second apart, ending a day ago.
    let now = engine.now_ms();
    let last = planted.last().map_or(0, |e| e.3);
    let history_at = |at: i64| now - DAY_MS - (last - at) * 1000;
    let events: Vec<Event> = planted
        .iter()
        .map(|&(u, i, _, at)| event(EventType::Click, u, i, history_at(at), None))
        .collect();
    for chunk in events.chunks(1000) {
        engine.push_events(APP, chunk).await?;
    }

    // The impressions of the last day, and what the users did with them.
    let mut topic_items: Vec<Vec<u32>> = vec![Vec::new(); TOPICS];
    for (i, &t) in truth.item_topic.iter().enumerate() {
        topic_items[t as usize].push(i as u32);
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(45);
    let mut logged = Vec::with_capacity(count);
    let mut shown = Vec::new();
    let mut outcomes = Vec::new();
    for n in 0..count {
        let u = rng.random_range(0..users);
        let at = now - DAY_MS + (n as i64 * DAY_MS) / count as i64;
        let topics = &truth.user_topics[u];
        let mut served: Vec<u32> = Vec::with_capacity(SERVED);
        while served.len() < SERVED {
            let item = if served.len() < SERVED / 2 {
                let (t, _) = topics[rng.random_range(0..topics.len())];
                let members = &topic_items[t as usize];
                members[rng.random_range(0..members.len())]
            } else {
                rng.random_range(0..items as u32)
            };
            if !served.contains(&item) {
                served.push(item);
            }
        }
        served.shuffle(&mut rng);
        let query_id = format!("{n:032x}");
        // The hidden preference: the user's weight on the item's topic, and its popularity.
        let preference = |i: u32| {
            let topic = topics
                .iter()
                .find(|(t, _)| *t == truth.item_topic[i as usize])
                .map_or(0.0, |(_, w)| *w);
            topic + 0.3 * truth.popularity[i as usize]
        };
        let mut labels = vec![0.0f32; SERVED];
        if rng.random_bool(1.0 / 6.0) {
            let best = (0..SERVED)
                .max_by(|&a, &b| preference(served[a]).total_cmp(&preference(served[b])))
                .expect("served items");
            let buys = rng.random_bool(0.25);
            labels[best] = if buys { 2.0 } else { 1.0 };
            let item = served[best];
            let q = Some(query_id.clone());
            outcomes.push(event(
                EventType::Click,
                u as u32,
                item,
                at + 1000,
                q.clone(),
            ));
            if buys {
                outcomes.push(event(EventType::Conversion, u as u32, item, at + 2000, q));
            }
            shown.push(Shown {
                user: u as u32,
                at,
                items: served.clone(),
                labels,
            });
        }
        logged.push(Impression {
            index: INDEX.into(),
            query_id,
            user: format!("u{u}"),
            at,
            object_ids: served.iter().map(|i| format!("i{i}")).collect(),
        });
    }
    // The day over (its last clicks came up to two seconds after its last impression).
    clock.advance(Duration::from_secs(60));
    let started = Instant::now();
    for chunk in logged.chunks(10_000) {
        engine.log_impressions(APP, chunk).await?;
    }
    let log_seconds = started.elapsed().as_secs_f64();
    drop(logged);
    for chunk in outcomes.chunks(1000) {
        engine.push_events(APP, chunk).await?;
    }
    drop(progress);

    // The ranker job, from the impressions (no learned queue: its time is the learning's):
    // from the latest `maxQueries` (its default), then from every one with an outcome.
    let mut jobs = Vec::new();
    for max_queries in [LearnedConfig::default().max_queries, 1_000_000] {
        clock.advance(Duration::from_secs(60));
        let progress = spinner(format!(
            "recommend: the ranker job learning from {} impressions (maxQueries {})",
            rate(count as f64),
            rate(max_queries as f64)
        ));
        let ranker = LearnedConfig {
            examples: learned::Examples::Impressions,
            max_queries,
            ..LearnedConfig::default()
        };
        let config = serde_json::from_value(json!({"indexName": INDEX, "ranker": ranker}))?;
        let (seconds, _, stored) = ranker_job(&engine, APP, config).await?;
        drop(progress);
        jobs.push((max_queries, seconds, stored));
    }
    // Then with a learned queue: the job also writes every user's queue, ranked by the model.
    let queue: QueueDefinition = serde_json::from_value(json!({
        "indexName": INDEX, "ranker": "learned", "size": QUEUE_SIZE,
        "sources": [{"source": "als"}, {"source": "related"}],
    }))?;
    engine.define_queue(APP, "for-you-learned", &queue).await?;
    clock.advance(Duration::from_secs(60));
    let progress = spinner(format!(
        "recommend: the ranker job writing {} users' learned queues",
        rate(users as f64)
    ));
    let config = serde_json::from_value(json!({"indexName": INDEX}))?;
    let queues_job = ranker_job(&engine, APP, config).await?;
    drop(progress);
    // At request time: 1,000 candidates ordered for a user by the ranker the job stored (the
    // user's events read from the store, the vector folded in, the features, the model),
    // beside the model alone on the same rows.
    let progress = spinner("recommend: the learned ranker at request time".to_owned());
    clock.advance(ttl + Duration::from_secs(1));
    let mut request_times = Vec::new();
    for candidates in [1000, 100] {
        request_times.push(request_time(&engine, users, items.min(candidates)).await?);
    }
    drop(progress);
    let ranker = LearnedConfig {
        examples: learned::Examples::Impressions,
        max_queries: 1_000_000,
        ..LearnedConfig::default()
    };

    // The same examples, boosted alone by penchant-rank and by LightGBM.
    let progress = spinner("recommend: the same examples, boosted alone".to_owned());
    let history_events: Vec<(u32, u32, f32, i64)> = planted
        .iter()
        .map(|&(u, i, w, at)| (u, i, w, history_at(at)))
        .collect();
    let no_facets: Vec<Vec<u32>> = Vec::new();
    let history = History {
        events: &history_events,
        users,
        items,
        item_facets: &no_facets,
    };
    let als = penchant_vectors::als::AlsConfig::default();
    let (train, validation, _) =
        learned::impression_examples(&history, &shown, &als, &ranker, |_| true)
            .context("no examples")?;
    // The queues phase's ranking alone (no store): every user's candidates by the model the
    // queues job stored, on the history before the impressions.
    let started = Instant::now();
    let mut ranked_users = 0usize;
    let model = &queues_job.2;
    learned::rank_all(
        &history,
        &als,
        &model.model,
        model.learned.per_source,
        QUEUE_SIZE,
        || true,
        |_| {},
        |_, _| ranked_users += 1,
    )
    .context("ranking stopped")?;
    let ranking_seconds = started.elapsed().as_secs_f64();
    let params = penchant_rank::Params {
        base_feature: Some(0),
        threads: 1,
        ..ranker.params.clone()
    };
    let started = Instant::now();
    let model = penchant_rank::train(&train, Some(&validation), &params, |_| true)
        .map_err(anyhow::Error::msg)?;
    let ours_seconds = started.elapsed().as_secs_f64();
    let ndcg_at = ranker.params.ndcg_at;
    let ndcg = |scores: &[f64]| penchant_rank::lambda::mean_ndcg(&validation, scores, ndcg_at);
    let scores: Vec<f64> = (0..validation.rows())
        .map(|r| model.score(validation.row(r)))
        .collect();
    let ours_ndcg = ndcg(&scores);
    // The served order (first first), and the hand blend's.
    let served: Vec<f64> = (0..validation.queries())
        .flat_map(|q| validation.query(q).map(|r| -(r as f64)))
        .collect();
    let blend: Vec<f64> = (0..validation.rows())
        .map(|r| f64::from(validation.row(r)[0]))
        .collect();
    // The model alone scoring every validation row (the best of 5), beside LightGBM's predict
    // with as many of its trees.
    let rows: Vec<f32> = (0..validation.rows())
        .flat_map(|r| validation.row(r).iter().copied())
        .collect();
    let forest = model.forest();
    let scoring_seconds = (0..5)
        .map(|_| {
            let started = Instant::now();
            std::hint::black_box(forest.score_rows(&rows));
            started.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min);
    let lightgbm = python
        .and_then(|python| lightgbm(&python, &train, &validation, &ranker, model.trees.len()));
    drop(progress);

    // The items with events: the rows of the ranker's item factors (what its features search).
    let had: std::collections::HashSet<u32> = planted.iter().map(|e| e.1).collect();
    let mut table = Table::new(
        format!(
            "recommend: the learned ranker from {} logged impressions (synthetic shop: {} users \
             in {TOPICS} planted topics, {} items, {} of them in the {} history events)",
            rate(count as f64),
            rate(users as f64),
            rate(items as f64),
            rate(had.len() as f64),
            rate(planted.len() as f64)
        ),
        &[
            "work",
            "seconds",
            "trees",
            "validation NDCG@10",
            "reference",
            "ratio",
        ],
    );
    table.row(vec![
        format!(
            "log {} impressions ({} per write)",
            rate(count as f64),
            rate(10_000.0)
        )
        .into(),
        Cell::fixed(log_seconds, 1),
        "".into(),
        "".into(),
        format!(
            "{:.1} µs per impression",
            log_seconds * 1e6 / count.max(1) as f64
        )
        .into(),
        "".into(),
    ]);
    for (max_queries, seconds, stored) in &jobs {
        table.row(vec![
            format!(
                "the ranker job: read {} events and the impressions ({} with an outcome), \
                 learn from the latest {} (maxQueries {})",
                rate(stored.events as f64),
                rate(stored.learned.impressions as f64),
                rate((stored.learned.train_queries + stored.learned.validation_queries) as f64),
                rate(*max_queries as f64)
            )
            .into(),
            Cell::fixed(*seconds, 1),
            Cell::int(stored.learned.trees as f64),
            Cell::fixed(stored.learned.validation_ndcg, 4),
            "".into(),
            "".into(),
        ]);
    }
    let (seconds, status, stored) = &queues_job;
    let writing = seconds - stored.learned.train_seconds;
    table.row(vec![
        format!(
            "the ranker job with a learned queue (size {QUEUE_SIZE}): learn as in the first \
             row, then rank and write {} users' queues",
            rate(status.users as f64)
        )
        .into(),
        Cell::fixed(*seconds, 1),
        Cell::int(stored.learned.trees as f64),
        Cell::fixed(stored.learned.validation_ndcg, 4),
        format!(
            "{:.0} µs per user ranked and written (all but the learning: {writing:.1} s); \
             ranking alone {:.0} µs per user ({ranking_seconds:.1} s, ALS included)",
            writing * 1e6 / status.users.max(1) as f64,
            ranking_seconds * 1e6 / ranked_users.max(1) as f64
        )
        .into(),
        "".into(),
    ]);
    for RequestTime {
        requests,
        candidates,
        total,
        user_side,
        features,
        model: model_alone,
        trees,
    } in request_times
    {
        let us = |s: Spent| format!("{:.0} µs (CPU {:.0})", s.wall * 1e6, s.cpu * 1e6);
        table.row(vec![
            format!(
                "request time: {candidates} candidates ordered for a user by the stored \
                 ranker ({requests} requests in {ROUNDS} rounds, the median round's: the \
                 user's events read, the vector folded in, the features, the model)"
            )
            .into(),
            Cell::fixed(total.wall * requests as f64, 2),
            Cell::int(trees as f64),
            "".into(),
            format!(
                "{} a request; each part in a loop of its own in each round: the user read \
                 and folded in {}, the features {}, the model {}",
                us(total),
                us(user_side),
                us(features),
                us(model_alone)
            )
            .into(),
            // No ratio: the CPU clock reads to 10 ms ticks, so a part's CPU time a request
            // can read 0 and a ratio of it mean nothing.
            "".into(),
        ]);
    }
    let (reference, ratio) = match &lightgbm {
        Ok(l) => (
            format!(
                "LightGBM lambdarank: {:.1} s, {} trees, NDCG {:.4}",
                l.seconds, l.trees, l.ndcg
            ),
            Cell::times(l.seconds / ours_seconds.max(1e-9), 2),
        ),
        Err(e) => (format!("LightGBM skipped: {e:#}"), "".into()),
    };
    table.row(vec![
        format!(
            "boosting alone: {} + {} queries, {} + {} rows",
            rate(train.queries() as f64),
            rate(validation.queries() as f64),
            rate(train.rows() as f64),
            rate(validation.rows() as f64)
        )
        .into(),
        Cell::fixed(ours_seconds, 1),
        Cell::int(model.trees.len() as f64),
        Cell::fixed(ours_ndcg, 4),
        reference.into(),
        ratio,
    ]);
    let per_thousand = |seconds: f64| seconds * 1e9 / validation.rows().max(1) as f64;
    let (reference, ratio) = match &lightgbm {
        Ok(l) => (
            format!(
                "LightGBM predict, {} trees, one thread: {:.0} µs per 1,000 rows",
                l.predict_trees,
                per_thousand(l.predict_seconds)
            ),
            // Per tree, should LightGBM's model have fewer trees than ours.
            Cell::times(
                (l.predict_seconds / l.predict_trees.max(1) as f64)
                    / (scoring_seconds / model.trees.len().max(1) as f64),
                1,
            ),
        ),
        Err(_) => ("LightGBM skipped (above)".to_owned(), "".into()),
    };
    table.row(vec![
        format!(
            "the model alone: its {} validation rows scored (QuickScorer, blocks of 32 rows)",
            rate(validation.rows() as f64)
        )
        .into(),
        Cell::fixed(scoring_seconds, 3),
        Cell::int(model.trees.len() as f64),
        "".into(),
        format!(
            "{:.0} µs per 1,000 rows; {reference}",
            per_thousand(scoring_seconds)
        )
        .into(),
        ratio,
    ]);
    for (name, scores) in [
        ("the served order (random)", &served),
        ("the hand blend (feature blend)", &blend),
    ] {
        table.row(vec![
            name.into(),
            "".into(),
            "".into(),
            Cell::fixed(ndcg(scores), 4),
            "".into(),
            "".into(),
        ]);
    }
    table.note(format!(
        "one thread each for the boosting alone (LightGBM's OpenMP threads spin and lose much \
         on a shared 2-core machine; the job shares its boosting and features between {} \
         threads); ratio = LightGBM's seconds over penchant-rank's (the scoring's per tree). The jobs' learning took {} s (the rest of their time: reading the store); features are \
         computed as the history stood before each of {} groups of impressions",
        LearnedConfig::default().params.threads(),
        jobs.iter()
            .map(|(_, seconds, stored)| format!("{:.1} of {seconds:.1}", stored.learned.train_seconds))
            .collect::<Vec<_>>()
            .join(" and "),
        ranker.cuts
    ));
    Ok(table)
}

/// What ordering candidates at request time costs, per request: wall seconds and this
/// process's CPU seconds (every thread: the store's reads run on tokio's blocking pool).
struct RequestTime {
    requests: usize,
    candidates: usize,
    /// `Engine::learned_scores` end to end.
    total: Spent,
    /// Its parts, each timed in a loop of its own over the same users: the user's events read
    /// and stood (the vector folded in), the features, the model alone on the rows it scored.
    user_side: Spent,
    features: Spent,
    model: Spent,
    trees: usize,
}

/// Seconds per request: by the wall clock and by the process's CPU time.
#[derive(Clone, Copy, Default)]
struct Spent {
    wall: f64,
    cpu: f64,
}

impl Spent {
    /// The median of each clock apart (the upper one of an even count).
    fn median(all: impl Iterator<Item = Spent>) -> Spent {
        let (mut wall, mut cpu): (Vec<f64>, Vec<f64>) = all.map(|s| (s.wall, s.cpu)).unzip();
        let middle = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v.get(v.len() / 2).copied().unwrap_or(0.0)
        };
        Spent {
            wall: middle(&mut wall),
            cpu: middle(&mut cpu),
        }
    }

    fn minus(self, other: Spent) -> Spent {
        Spent {
            wall: (self.wall - other.wall).max(0.0),
            cpu: (self.cpu - other.cpu).max(0.0),
        }
    }
}

/// Run `f` once per request: what a request spent on average (the process's CPU time is
/// read to the clock tick, 10 ms: loops are a second or so long), and the answers.
async fn spent<T, F: std::future::Future<Output = anyhow::Result<T>>>(
    requests: usize,
    f: impl Fn(usize) -> F,
) -> anyhow::Result<(Spent, Vec<T>)> {
    let cpu = crate::cpu::process_cpu;
    let mut answers = Vec::with_capacity(requests);
    let (started, cpu_before) = (Instant::now(), cpu());
    for n in 0..requests {
        answers.push(f(n).await?);
    }
    let wall = started.elapsed().as_secs_f64();
    let cpu = cpu()
        .zip(cpu_before)
        .map_or(0.0, |(after, before)| (after - before).as_secs_f64());
    let spent = Spent {
        wall: wall / requests as f64,
        cpu: cpu / requests as f64,
    };
    Ok((spent, answers))
}

/// [`RequestTime`] over 1,000 requests spread over the users (after 50 that warm the node's
/// snapshot and caches), each with the catalog's first `candidates` items as candidates.
///
/// The requests are timed in [`ROUNDS`] rounds, each part in a loop of its own in every round
/// (the whole request, the user side, the features and model, the model alone), and each
/// part's figure is its median round: a busy neighbour for a moment slows one round of every
/// part rather than one part.
async fn request_time(
    engine: &Engine,
    users: usize,
    candidates: usize,
) -> anyhow::Result<RequestTime> {
    let candidates: Vec<String> = (0..candidates).map(|i| format!("i{i}")).collect();
    let ids: Vec<&str> = candidates.iter().map(String::as_str).collect();
    let (warm, requests) = (50, 1000);
    let per_round = requests / ROUNDS;
    let user = |n: usize| format!("u{}", (n * 7919) % users);
    let served = "no ranker serves the index";
    let scores = |n: usize| {
        let (user, ids) = (user(n), &ids);
        async move {
            let answer = engine.learned_scores(APP, INDEX, &user, ids).await?;
            answer.context(served)
        }
    };
    // The answers are let go as a server lets them go (kept, each request's rows would come
    // on fresh pages): a digest of each one's scores is kept to check the parts by.
    let digest = |scores: &[f64]| {
        scores
            .iter()
            .fold(0u64, |h, s| h.rotate_left(5) ^ s.to_bits())
    };
    let (_, warmed) = spent(warm, |n| scores(n + requests)).await?;
    let serving = warmed.into_iter().next().context(served)?.0;
    let version = serving.version;
    let forest = serving.model().forest();
    // Per round: the whole request, the user side, the features, the model.
    let mut rounds: Vec<[Spent; 4]> = Vec::with_capacity(ROUNDS);
    for round in 0..ROUNDS {
        let first = round * per_round;
        let (total, digests) = spent(per_round, |n| {
            let answer = scores(first + n);
            async move {
                let (by, scored) = answer.await?;
                anyhow::ensure!(by.version == version, "one model serves every request");
                Ok(digest(&scored.scores))
            }
        })
        .await?;
        let (user_side, standings) = spent(per_round, |n| {
            let user = user(first + n);
            async move {
                let answer = engine.learned_standing(APP, INDEX, &user).await?;
                Ok(answer.context(served)?.1)
            }
        })
        .await?;
        let (scoring, _) = spent(per_round, |n| {
            let scored = serving.score(&standings[n], &ids);
            let same = digest(&scored.scores) == digests[n];
            async move {
                anyhow::ensure!(same, "the same scores, read twice");
                Ok(())
            }
        })
        .await?;
        // The model alone on each request's rows (made beforehand, not timed), by the
        // thread's CPU clock: it runs on this thread only.
        let mut model = Spent::default();
        for (n, standing) in standings.iter().enumerate() {
            let rows = serving.score(standing, &ids).rows;
            let (started, cpu) = (Instant::now(), crate::cpu::thread_cpu());
            let scores = forest.score_rows(&rows);
            model.cpu += (crate::cpu::thread_cpu() - cpu).as_secs_f64() / per_round as f64;
            model.wall += started.elapsed().as_secs_f64() / per_round as f64;
            anyhow::ensure!(
                digest(&scores) == digests[n],
                "the model scores the rows as served"
            );
        }
        rounds.push([total, user_side, scoring.minus(model), model]);
    }
    let median = |part: usize| Spent::median(rounds.iter().map(|r| r[part]));
    Ok(RequestTime {
        requests: per_round * ROUNDS,
        candidates: ids.len(),
        total: median(0),
        user_side: median(1),
        features: median(2),
        model: median(3),
        trees: serving.model().trees.len(),
    })
}

/// The rounds [`request_time`] times its requests in.
const ROUNDS: usize = 5;

/// Run the ranker job of `app` to its end: its seconds, its last status and the ranker it
/// stored.
pub(crate) async fn ranker_job(
    engine: &Engine,
    app: &str,
    config: RankerConfig,
) -> anyhow::Result<(f64, RankerStatus, StoredRanker)> {
    let index = config.index_name.clone();
    let started = Instant::now();
    engine.start_ranker(app, config).await?;
    let status = loop {
        let status = engine.ranker_status(app).await?.context("no ranker job")?;
        if status.state != penchant_engine::jobs::JobState::Running {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let seconds = started.elapsed().as_secs_f64();
    anyhow::ensure!(
        status.error.is_none(),
        "the ranker job failed: {:?}",
        status.error
    );
    let stored = engine
        .ranker(app, &index)
        .await?
        .context("no stored ranker")?;
    Ok((seconds, status, stored))
}

fn event(kind: EventType, user: u32, item: u32, at: i64, query_id: Option<String>) -> Event {
    Event {
        event_type: kind,
        event_subtype: None,
        event_name: match kind {
            EventType::Conversion => "Purchased".into(),
            _ => "Clicked".into(),
        },
        index: INDEX.into(),
        user_token: format!("u{user}"),
        authenticated_user_token: None,
        timestamp: at,
        target: Target::ObjectIds(vec![format!("i{item}")]),
        query_id,
        positions: None,
        object_data: None,
        value: None,
        currency: None,
    }
}

/// What LightGBM's run printed.
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Reference {
    seconds: f64,
    trees: usize,
    ndcg: f64,
    /// Scoring every validation row once with its first `predict_trees` trees.
    predict_seconds: f64,
    predict_trees: usize,
}

/// Write a dataset as LightGBM's script reads it: rows (f32 LE), labels (f32 LE), query sizes
/// (u32 LE).
fn write_dataset(folder: &Path, name: &str, data: &Dataset) -> anyhow::Result<()> {
    let mut rows = Vec::with_capacity(data.rows() * data.features() * 4);
    for r in 0..data.rows() {
        rows.extend(data.row(r).iter().flat_map(|v| v.to_le_bytes()));
    }
    let labels: Vec<u8> = data.labels().iter().flat_map(|v| v.to_le_bytes()).collect();
    let groups: Vec<u8> = (0..data.queries())
        .flat_map(|q| (data.query(q).len() as u32).to_le_bytes())
        .collect();
    std::fs::write(folder.join(format!("{name}.rows")), rows)?;
    std::fs::write(folder.join(format!("{name}.labels")), labels)?;
    std::fs::write(folder.join(format!("{name}.groups")), groups)?;
    Ok(())
}

/// LightGBM's `lambdarank` on the same examples, timed inside Python.
fn lightgbm(
    python: &Path,
    train: &Dataset,
    validation: &Dataset,
    config: &LearnedConfig,
    score_trees: usize,
) -> anyhow::Result<Reference> {
    let folder = tempfile::tempdir()?;
    write_dataset(folder.path(), "train", train)?;
    write_dataset(folder.path(), "validation", validation)?;
    let script = folder.path().join("lambdamart_lightgbm.py");
    std::fs::write(&script, LIGHTGBM)?;
    let p = &config.params;
    let settings = json!({
        "features": train.features(), "trees": p.trees, "learningRate": p.learning_rate,
        "leaves": p.leaves, "minRowsInLeaf": p.min_rows_in_leaf, "l2": p.l2,
        "truncation": p.truncation, "ndcgAt": p.ndcg_at, "patience": p.patience,
        "initFromFeature": 0, "threads": 1, "scoreTrees": score_trees,
    });
    let out = Command::new(python)
        .arg(&script)
        .arg(folder.path())
        .arg(settings.to_string())
        .env("OMP_NUM_THREADS", "1")
        .output()
        .context("running LightGBM's Python")?;
    anyhow::ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .last()
            .unwrap_or("no output")
    );
    let last = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_owned();
    serde_json::from_str(&last).with_context(|| format!("LightGBM printed {last:?}"))
}
