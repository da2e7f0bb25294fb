//! A ranker learned from the shop's own history: LambdaMART ([`penchant_rank`]) over the
//! candidates every source proposes, each described by [`offline::FEATURES`].
//!
//! With no logged impressions (a new shop), the training examples come from the event history
//! itself, the way the time-ordered evaluation holds out the future: each user's latest events
//! ([`Holdout`]) are what they took next, the sources computed from the events before them
//! (ALS trained on those alone) are what was on offer at that moment, and the ranker learns
//! which of the candidates were taken. Users are split, seeded, into training and validation
//! queries (the validation NDCG stops the boosting); at most [`LearnedConfig::max_queries`]
//! users are used, so the cost stays bounded on a large shop.
//!
//! Once the shop logs impressions (the engine's `recommend::impressions`: tracked answers, and the clicks and
//! conversions sent back with their queryIDs), each served list with an outcome is an example
//! ([`learn_from_impressions`]): its items labelled by what became of them (a conversion 2, a
//! click 1, else 0), described as the history before it stood — the impressions are cut in
//! [`LearnedConfig::cuts`] groups by time, and each group's features come from the events
//! before its first impression.

use penchant_rank::{Dataset, Forest, Model, Params};
use penchant_vectors::als::{self, AlsConfig, Factors, Interactions};
use penchant_vectors::eval::{self, Holdout};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};

use crate::offline::{self, Offline};

/// The most of `maxQueries × perSource × cuts` a training may ask for.
pub const MAX_EXAMPLE_SLOTS: u128 = 5_000_000;

/// What a ranker learns from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Examples {
    /// Impressions when at least [`LearnedConfig::min_impressions`] had an outcome, else the
    /// history.
    #[default]
    Auto,
    /// What each user took next, among the candidates the earlier events gave.
    History,
    /// Logged impressions with a click or conversion.
    Impressions,
}

/// How a ranker is learned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct LearnedConfig {
    /// What it learns from.
    pub examples: Examples,
    /// Impressions with an outcome that `auto` needs to learn from them.
    pub min_impressions: usize,
    /// Candidates each source proposes per user.
    pub per_source: usize,
    /// The most users whose next events train the ranker.
    pub max_queries: usize,
    /// The share of them kept aside to stop the boosting.
    pub validation_share: f64,
    /// Seeds the draw of the users kept aside: another seed, another draw (of the same
    /// expected quality; on MovieLens the NDCG@10 spreads by ±0.6 points between draws).
    pub seed: u64,
    /// How many times the latest events are held out to make examples: once from the
    /// history, then from what that left, and so on.
    pub cuts: usize,
    /// Boost from the hand blend (feature 0, `blend`): scores start at its order, and the
    /// trees learn what to change in it (else they start from nothing).
    pub from_blend: bool,
    /// The boosting's parameters (those not given keep their defaults).
    pub params: Params,
}

impl Default for LearnedConfig {
    fn default() -> Self {
        Self {
            examples: Examples::Auto,
            min_impressions: 100,
            per_source: 100,
            max_queries: 5_000,
            validation_share: 0.2,
            seed: 7,
            cuts: 3,
            from_blend: true,
            params: Params::default(),
        }
    }
}

impl LearnedConfig {
    pub fn check(&self) -> Result<(), String> {
        let ok = (1..=offline::POOL).contains(&self.per_source)
            && (2..=1_000_000).contains(&self.max_queries)
            && self.validation_share > 0.0
            && self.validation_share < 1.0
            && (1..=5).contains(&self.cuts)
            && self.min_impressions >= 2;
        if !ok {
            return Err(format!(
                "perSource must be between 1 and {}, maxQueries between 2 and 1000000, \
                 validationShare between 0 and 1 (exclusive), cuts between 1 and 5, \
                 minImpressions at least 2",
                offline::POOL
            ));
        }
        // Each example holds a row of features per candidate (up to a few per source): the
        // product bounds the memory a training takes (~1 GB at the limit). An impression's
        // rows are its served items: those are bounded as they are read
        // ([`impression_examples`]).
        let slots = self.max_queries as u128 * self.per_source as u128 * self.cuts as u128;
        if slots > MAX_EXAMPLE_SLOTS && self.examples != Examples::Impressions {
            return Err(format!(
                "maxQueries × perSource × cuts must be at most {MAX_EXAMPLE_SLOTS} (the training \
                 examples are held in memory), not {slots}"
            ));
        }
        self.params.check()
    }
}

/// A learned ranker and what its training saw (the model is not serialized with it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Learned {
    #[serde(skip)]
    pub model: Model,
    /// What it learned from: `history` or `impressions`.
    #[serde(default = "from_history")]
    pub examples: Examples,
    /// Logged impressions with an outcome (clicks or conversions with their queryID) that it
    /// found, whether or not it learned from them.
    #[serde(default)]
    pub impressions: usize,
    pub per_source: usize,
    /// Times the latest events were held out to make examples ([`LearnedConfig::cuts`]).
    pub cuts: usize,
    /// Examples (a user at a cut) that trained it, and those that validated it.
    pub train_queries: usize,
    pub validation_queries: usize,
    /// Validation NDCG at the parameters' cut-off, over the candidates.
    pub validation_ndcg: f64,
    pub trees: usize,
    pub train_seconds: f64,
    /// Each feature's share of the gain, largest first.
    pub importance: Vec<(String, f64)>,
}

fn from_history() -> Examples {
    Examples::History
}

impl Learned {
    /// What gives the best `k` candidates for user row `u` of a split's sources.
    pub fn recommender<'s>(
        &'s self,
        offline: &'s Offline<'_>,
    ) -> impl Fn(usize, usize) -> Vec<u32> + 's {
        let forest = self.model.forest();
        move |u, k| {
            let mut scored = ranked(&forest, offline, u, self.per_source, &mut Vec::new());
            scored.truncate(k);
            scored.into_iter().map(|(i, _)| i).collect()
        }
    }
}

/// User row `u`'s candidates ([`Offline::ranking_rows`], `per_source` of each source) with their
/// scores by `model`, best first (ties by item row). `rows` is scratch space.
fn ranked(
    model: &Forest,
    offline: &Offline<'_>,
    u: usize,
    per_source: usize,
    rows: &mut Vec<f32>,
) -> Vec<(u32, f64)> {
    rows.clear();
    let candidates = offline.ranking_rows(u, per_source, rows);
    let mut scored: Vec<(u32, f64)> = candidates.into_iter().zip(model.score_rows(rows)).collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    scored
}

/// An app's history as a ranker learns from it.
#[derive(Debug, Clone, Copy)]
pub struct History<'a> {
    /// `(user row, item row, weight, time ms)`, in time order.
    pub events: &'a [(u32, u32, f32, i64)],
    pub users: usize,
    pub items: usize,
    /// Per item row, its facet values as numbers (may be empty: no facet features).
    pub item_facets: &'a [Vec<u32>],
}

/// The sources as they stood after some of a history's events (time-ordered): ALS trained on
/// those alone.
struct Stood {
    triples: Vec<(u32, u32, f32)>,
    at: Vec<i64>,
    train: Interactions,
    factors: Factors,
    /// The graph of the item factors, if they are searched (shared with what moved on).
    graph: offline::Graph,
}

impl Stood {
    /// `None` when `go_on` (asked as ALS iterates) returned false.
    fn after(
        history: &History<'_>,
        events: &[(u32, u32, f32, i64)],
        als_config: &AlsConfig,
        mut go_on: impl FnMut() -> bool,
    ) -> Option<Self> {
        Self::with(history, events, |train| {
            als::train(train, als_config, |_| go_on())
        })
    }

    /// `events` as sources, with the factors `factors` gives for their interactions.
    fn with(
        history: &History<'_>,
        events: &[(u32, u32, f32, i64)],
        factors: impl FnOnce(&Interactions) -> Option<Factors>,
    ) -> Option<Self> {
        let triples: Vec<(u32, u32, f32)> = events.iter().map(|&(u, i, w, _)| (u, i, w)).collect();
        let at = events.iter().map(|e| e.3).collect();
        let train =
            Interactions::from_triples(history.users, history.items, triples.iter().copied());
        let factors = factors(&train)?;
        Some(Self {
            triples,
            at,
            train,
            factors,
            graph: offline::Graph::default(),
        })
    }

    /// The sources after later `events` (a longer prefix of the same history), without
    /// training ALS again: the item factors stay these ones (trained on fewer, earlier events:
    /// nothing of what came after leaks in), and each of `users` who had an event since gets
    /// the least-squares vector of all its events under them ([`als::fold_in`], what ALS's
    /// last user step solves); the others keep theirs.
    fn moved_on(
        &self,
        history: &History<'_>,
        events: &[(u32, u32, f32, i64)],
        users: &[u32],
        als_config: &AlsConfig,
    ) -> Self {
        let mut moved = vec![false; history.users];
        for &(u, ..) in &events[self.triples.len()..] {
            moved[u as usize] = true;
        }
        let mut changed: Vec<u32> = users
            .iter()
            .copied()
            .filter(|&u| moved[u as usize])
            .collect();
        changed.sort_unstable();
        changed.dedup();
        let items = &self.factors.items;
        let gramian = als::gramian(items);
        let folded = Self::with(history, events, |train| {
            let vectors = on_cores(&changed, |part| {
                part.iter()
                    .map(|&u| {
                        let (rows, weights) = train.user_items(u as usize);
                        let pairs: Vec<(u32, f32)> =
                            rows.iter().copied().zip(weights.iter().copied()).collect();
                        als::fold_in(items, &gramian, &pairs, als_config)
                    })
                    .collect::<Vec<_>>()
            });
            let mut factors = self.factors.clone();
            for (&u, vector) in changed.iter().zip(vectors.iter().flatten()) {
                factors.users.set(u as usize, vector);
            }
            Some(factors)
        });
        let folded = folded.expect("folding in always gives factors");
        // The same item factors: the same graph.
        Self {
            graph: self.graph.clone(),
            ..folded
        }
    }

    /// Every source and feature of these events, with the history's facet values.
    fn offline(&self, history: &History<'_>) -> Offline<'_> {
        Offline::new(&self.train, &self.factors, &self.triples, &self.at)
            .with_facets(history.item_facets.to_vec())
            .with_graph(self.graph.clone())
    }
}

/// Every user's best `k` candidates by a learned ranker, from all of `events` (time-ordered
/// `(user row, item row, weight, time)`): the sources as they stand after the last event (ALS
/// trained on all of them), the same features as the training's ([`Offline::ranking_rows`]),
/// none of the user's items. `items` gets the sources' item side first (what the ranker serves
/// from, the engine's `recommend::serving`); then `each` gets a user row and its items with their scores, best
/// first — `e^(s − s_best)`, so the best is 1 and every score is positive (no user when `k` is
/// 0). Users without events are skipped. `None` when `go_on` (asked as it goes) returned false.
#[allow(clippy::too_many_arguments)]
pub fn rank_all(
    history: &History<'_>,
    als_config: &AlsConfig,
    ranker: &Model,
    per_source: usize,
    k: usize,
    go_on: impl Fn() -> bool,
    items: impl FnOnce(offline::Items),
    mut each: impl FnMut(usize, Vec<(u32, f32)>),
) -> Option<()> {
    let stood = Stood::after(history, history.events, als_config, &go_on)?;
    let offline = stood.offline(history);
    items(offline.items());
    if k == 0 {
        return Some(());
    }
    let forest = ranker.forest();
    let users: Vec<usize> = (0..history.users)
        .filter(|&u| !stood.train.user_items(u).0.is_empty())
        .collect();
    // A few hundred users a core at a time, handed to `each` in order.
    for batch in users.chunks(256 * cores()) {
        if !go_on() {
            return None;
        }
        let ranked = on_cores(batch, |part| {
            let mut rows = Vec::new();
            part.iter()
                .map(|&u| {
                    let mut scored = ranked(&forest, &offline, u, per_source, &mut rows);
                    scored.truncate(k);
                    let best = scored.first().map_or(0.0, |s| s.1);
                    scored
                        .into_iter()
                        .map(|(i, s)| (i, ((s - best).exp() as f32).max(f32::MIN_POSITIVE)))
                        .collect::<Vec<_>>()
                })
                .collect::<Vec<_>>()
        });
        for (&u, ranked) in batch.iter().zip(ranked.into_iter().flatten()) {
            each(u, ranked);
        }
    }
    Some(())
}

/// The cores a job's feature work is shared between.
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// `work` on about equal shares of `items`, one per core (scoped threads), its results in the
/// shares' order.
fn on_cores<T: Sync, R: Send>(items: &[T], work: impl Fn(&[T]) -> R + Sync) -> Vec<R> {
    let share = items.len().div_ceil(cores()).max(1);
    std::thread::scope(|scope| {
        let work = &work;
        let handles: Vec<_> = items
            .chunks(share)
            .map(|part| scope.spawn(move || work(part)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a features thread"))
            .collect()
    })
}

/// Learn a ranker from time-ordered events `(user row, item row, weight, time)`: the latest
/// events of each user (`holdout`) are what the ranker learns to put first among the
/// candidates the earlier events give. `None` when no user has a next event among their
/// candidates, or when `progress` (called as it goes with the trees so far) returned false.
pub fn learn(
    history: &History<'_>,
    holdout: Holdout,
    als_config: &AlsConfig,
    config: &LearnedConfig,
    mut progress: impl FnMut(usize) -> bool,
) -> Option<Learned> {
    let History {
        events,
        users,
        items,
        item_facets,
    } = *history;
    let started = std::time::Instant::now();
    // Users are drawn once, seeded: a validation user validates at every cut.
    let mut drawn: Vec<usize> = (0..users).collect();
    drawn.shuffle(&mut rand::rngs::StdRng::seed_from_u64(config.seed));
    drawn.truncate(config.max_queries);
    let validation_users = ((drawn.len() as f64 * config.validation_share).round() as usize)
        .clamp(1, drawn.len().saturating_sub(1).max(1));
    let width = offline::FEATURES.len();
    let (mut train_set, mut validation) = (Dataset::new(width), Dataset::new(width));
    // Each cut holds out the latest events of what the previous cut trained on: more
    // examples of "what came next", each with the sources as they stood then.
    let mut history = events.to_vec();
    for _ in 0..config.cuts {
        let split = eval::time_holdout(&history, users, holdout, 1);
        let train = Interactions::from_triples(users, items, split.train.iter().copied());
        let factors = als::train(&train, als_config, |_| progress(0))?;
        let offline = Offline::new(&train, &factors, &split.train, &split.train_at)
            .with_facets(item_facets.to_vec());
        for (n, &u) in drawn.iter().enumerate() {
            if n % 256 == 0 && !progress(0) {
                return None;
            }
            if split.test[u].is_empty() {
                continue;
            }
            let mut rows = Vec::new();
            let candidates = offline.ranking_rows(u, config.per_source, &mut rows);
            let labels: Vec<f32> = candidates
                .iter()
                .map(|i| f32::from(u8::from(split.test[u].binary_search(i).is_ok())))
                .collect();
            if !labels.iter().any(|&l| l > 0.0) {
                continue;
            }
            let query = rows.chunks_exact(width).zip(labels.iter().copied());
            if n < validation_users {
                validation.push_query(query);
            } else {
                train_set.push_query(query);
            }
        }
        history = split.train_events();
    }
    let examples = Examples::History;
    fit(
        &train_set,
        &validation,
        config,
        examples,
        started,
        &mut progress,
    )
}

/// A served list with its outcomes: the user row, when it was served (ms), the item rows
/// served and each one's label (a conversion 2, a click 1, else 0).
#[derive(Debug, Clone, PartialEq)]
pub struct Shown {
    pub user: u32,
    pub at: i64,
    pub items: Vec<u32>,
    pub labels: Vec<f32>,
}

/// Learn a ranker from logged impressions (those with a positive label): each is a query of
/// its served items, described by [`Offline::rows_for`] as the history stood before it — the
/// impressions are cut in [`LearnedConfig::cuts`] groups by time (the latest
/// [`LearnedConfig::max_queries`] at most), and each group's sources are computed from the
/// events before its first impression. Users are split, seeded, into training and validation.
/// `None` when fewer than two impressions have an outcome, or when `progress` returned false.
pub fn learn_from_impressions(
    history: &History<'_>,
    shown: &[Shown],
    als_config: &AlsConfig,
    config: &LearnedConfig,
    mut progress: impl FnMut(usize) -> bool,
) -> Option<Learned> {
    let started = std::time::Instant::now();
    let (train_set, validation, used) =
        impression_examples(history, shown, als_config, config, &mut progress)?;
    let mut learned = fit(
        &train_set,
        &validation,
        config,
        Examples::Impressions,
        started,
        &mut progress,
    )?;
    learned.impressions = used;
    Some(learned)
}

/// [`learn_from_impressions`]'s examples: the training and validation queries, and how many
/// impressions they hold.
pub fn impression_examples(
    history: &History<'_>,
    shown: &[Shown],
    als_config: &AlsConfig,
    config: &LearnedConfig,
    mut progress: impl FnMut(usize) -> bool,
) -> Option<(Dataset, Dataset, usize)> {
    let mut shown: Vec<&Shown> = shown
        .iter()
        .filter(|s| s.labels.iter().any(|&l| l > 0.0))
        .collect();
    shown.sort_by_key(|s| s.at);
    // The latest `maxQueries`, and no more rows than a training's bound.
    let mut latest = shown.len().saturating_sub(config.max_queries);
    let mut rows_kept = 0u128;
    for (n, s) in shown.iter().enumerate().skip(latest).rev() {
        rows_kept += s.items.len() as u128;
        if rows_kept > MAX_EXAMPLE_SLOTS {
            latest = n + 1;
            break;
        }
    }
    let shown = &shown[latest..];
    // Validation users, drawn seeded among those shown.
    let mut users: Vec<u32> = shown.iter().map(|s| s.user).collect();
    users.sort_unstable();
    users.dedup();
    users.shuffle(&mut rand::rngs::StdRng::seed_from_u64(config.seed));
    let validation_users = ((users.len() as f64 * config.validation_share).round() as usize)
        .clamp(1, users.len().saturating_sub(1).max(1));
    let validating: std::collections::HashSet<u32> = users[..validation_users.min(users.len())]
        .iter()
        .copied()
        .collect();
    let width = offline::FEATURES.len();
    let (mut train_set, mut validation) = (Dataset::new(width), Dataset::new(width));
    let group = shown.len().div_ceil(config.cuts).max(1);
    let mut rows = Vec::new();
    // ALS is trained once, on the events before the first group; later groups fold their
    // users' newer events in ([`Stood::moved_on`]).
    let mut first: Option<Stood> = None;
    for chunk in shown.chunks(group) {
        let cut = chunk[0].at;
        let before = history.events.partition_point(|e| e.3 < cut);
        let events = &history.events[..before];
        let stood = match &first {
            None => Stood::after(history, events, als_config, || progress(0))?,
            Some(first) => {
                let users: Vec<u32> = chunk.iter().map(|s| s.user).collect();
                first.moved_on(history, events, &users, als_config)
            }
        };
        let offline = stood.offline(history);
        // The rows of 256 impressions at a time, shared between the cores.
        for batch in chunk.chunks(256) {
            if !progress(0) {
                return None;
            }
            let parts = on_cores(batch, |part| {
                let mut rows = Vec::new();
                for s in part {
                    offline.rows_for(s.user as usize, config.per_source, &s.items, &mut rows);
                }
                rows
            });
            rows.clear();
            parts.iter().for_each(|part| rows.extend_from_slice(part));
            let mut at = 0;
            for s in batch {
                let end = at + s.items.len() * width;
                let query = rows[at..end]
                    .chunks_exact(width)
                    .zip(s.labels.iter().copied());
                if validating.contains(&s.user) {
                    validation.push_query(query);
                } else {
                    train_set.push_query(query);
                }
                at = end;
            }
        }
        drop(offline);
        first.get_or_insert(stood);
    }
    Some((train_set, validation, shown.len()))
}

/// Boost a model on examples, validated by others; `None` when either has no query, or when
/// `progress` returned false.
fn fit(
    train_set: &Dataset,
    validation: &Dataset,
    config: &LearnedConfig,
    examples: Examples,
    started: std::time::Instant,
    progress: &mut impl FnMut(usize) -> bool,
) -> Option<Learned> {
    if train_set.queries() == 0 || validation.queries() == 0 {
        return None;
    }
    let params = Params {
        base_feature: config
            .from_blend
            .then_some(0)
            .or(config.params.base_feature),
        ..config.params.clone()
    };
    let model = penchant_rank::train(train_set, Some(validation), &params, &mut *progress).ok()?;
    // Stopped from outside (a stop is asked for once and stays asked): no model.
    if !progress(model.trees.len()) {
        return None;
    }
    let scores: Vec<f64> = (0..validation.rows())
        .map(|r| model.score(validation.row(r)))
        .collect();
    let validation_ndcg =
        penchant_rank::lambda::mean_ndcg(validation, &scores, config.params.ndcg_at);
    let mut importance: Vec<(String, f64)> = offline::FEATURES
        .iter()
        .map(|f| (*f).to_owned())
        .zip(model.importance())
        .collect();
    importance.sort_by(|a, b| b.1.total_cmp(&a.1));
    Some(Learned {
        examples,
        impressions: 0,
        per_source: config.per_source,
        cuts: config.cuts,
        train_queries: train_set.queries(),
        validation_queries: validation.queries(),
        validation_ndcg,
        trees: model.trees.len(),
        train_seconds: started.elapsed().as_secs_f64(),
        importance,
        model,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `seed` (API `ranker.seed`) draws the validating users: the same seed learns the same
    /// model, another one validates on other users.
    #[test]
    fn the_seed_draws_the_users_who_validate() {
        let (users, items) = (200, 60);
        let (events, _) = penchant_vectors::synthetic::planted(users, items, 4, 4_000, 3);
        let history = History {
            events: &events,
            users,
            items,
            item_facets: &[],
        };
        let als_config = AlsConfig {
            factors: 8,
            iterations: 5,
            ..AlsConfig::default()
        };
        let with_seed = |seed: u64| {
            let config: LearnedConfig = serde_json::from_value(serde_json::json!({
                "seed": seed, "cuts": 2, "params": {"trees": 20}
            }))
            .unwrap();
            assert_eq!(config.seed, seed);
            learn(
                &history,
                Holdout::Fraction(0.2),
                &als_config,
                &config,
                |_| true,
            )
            .unwrap()
        };
        let (a, again, other) = (with_seed(7), with_seed(7), with_seed(1));
        assert_eq!(a.model, again.model);
        assert_eq!(a.validation_ndcg, again.validation_ndcg);
        assert_ne!(a.validation_ndcg, other.validation_ndcg);
        assert_eq!(LearnedConfig::default().seed, 7);
    }

    #[test]
    fn later_groups_fold_their_users_in_under_the_first_groups_item_factors() {
        // Six users, eight items; users 0 and 1 have more events after the first cut.
        let mut events: Vec<(u32, u32, f32, i64)> = (0..60)
            .map(|n| ((n % 6) as u32, ((n * 7 + n / 6) % 8) as u32, 1.0, n as i64))
            .collect();
        let cut = events.len();
        events.extend([(0, 5, 1.0, 100), (1, 2, 2.0, 101), (0, 6, 1.0, 102)]);
        let history = History {
            events: &events,
            users: 6,
            items: 8,
            item_facets: &[],
        };
        let als_config = AlsConfig {
            factors: 4,
            iterations: 5,
            ..AlsConfig::default()
        };
        let first = Stood::after(&history, &events[..cut], &als_config, || true).unwrap();
        // Users 0, 2 and 5 are asked for; 2 and 5 had nothing new, 1 is not asked for.
        let moved = first.moved_on(&history, &events, &[5, 0, 2], &als_config);
        assert_eq!(moved.triples.len(), events.len());
        assert_eq!(moved.factors.items, first.factors.items);
        for u in [1, 2, 3, 4, 5] {
            assert_eq!(
                moved.factors.users.row(u),
                first.factors.users.row(u),
                "user {u}"
            );
        }
        let gramian = als::gramian(&first.factors.items);
        let (rows, weights) = moved.train.user_items(0);
        let pairs: Vec<(u32, f32)> = rows.iter().copied().zip(weights.iter().copied()).collect();
        assert!(rows.contains(&5) && rows.contains(&6));
        let expected = als::fold_in(&first.factors.items, &gramian, &pairs, &als_config);
        assert_eq!(moved.factors.users.row(0), &expected[..]);
        assert_ne!(moved.factors.users.row(0), first.factors.users.row(0));
    }
}
