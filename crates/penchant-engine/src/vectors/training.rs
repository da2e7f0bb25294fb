//! ALS training: user and item vectors learned from an app's events (Coffee Meets Bagel's
//! nightly "100 floats per user"), written to a space (`als` by default).
//!
//! Every event with objectIDs in the app's retention window counts for its (user, item) pairs
//! with a weight: the training's own `weights` (by event name, else by event type), else the
//! app strategy's event scores (by event name), else 1. Weights of a pair add up; ALS takes them
//! as confidences `1 + alpha × weight` ([`penchant_vectors::als`]).
//!
//! A training is a job like a profile recompute: one node at a time runs an app's training, the
//! holder of its lease; its status (`j:train` in table `jobs`, row `app 0`) is saved every half
//! second with its iteration. A node that stops or dies leaves the job `running`; the node that
//! takes it over (at start and then regularly, [`Trainings::take_over`]) starts it again from the
//! beginning — a training holds nothing worth checkpointing until its end. Vectors are written
//! at the end, all stamped with one time, so searches read either the previous training or this
//! one for each vector, and the previous stays stored for a rollback.
//!
//! A user who came after the training gets a vector when first needed by folding in: one exact
//! least-squares solve against the item vectors ([`Trainings::fold_in`]). Items have no such
//! moment (their events are stored under their users), so a job in [`Mode::FoldIn`] gives
//! every user and item of the window that has no vector one, in one pass over the events: new
//! items from the trained users who interacted with them, new users from the trained items —
//! without training again.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use futures::TryStreamExt;
use penchant_store::{ReadRows, RowFilter, RowSet, Store, TimeRange, Workload};
use penchant_vectors::als::{self, AlsConfig, Interactions};
pub use penchant_vectors::eval::Holdout;
use penchant_vectors::{Metric, eval};
use serde::{Deserialize, Serialize};

use super::{Kind, Space, SpaceConfig, Vectors};
use crate::clock::Clock;
use crate::events::{self, Event, EventType, Target};
use crate::jobs::{Job, JobState, Progress, Run, Runner, Runtime};
use crate::recommend::queues::Source;
use crate::strategy::Strategies;
use crate::tenancy::Tenancy;
use crate::{EngineError, Result, internal, keys};
use penchant_learn::learned::{self, LearnedConfig};
use penchant_learn::offline::Offline;

pub use penchant_model::vectors::training::{Mode, Trained, TrainingConfig, Weights};

/// A training's status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrainingStatus {
    pub state: JobState,
    pub config: TrainingConfig,
    /// Iterations done.
    pub iteration: usize,
    pub users: usize,
    pub items: usize,
    pub interactions: usize,
    /// Events read.
    pub events: u64,
    /// Unix ms.
    pub started_at: i64,
    pub finished_at: Option<i64>,
    pub error: Option<String>,
    /// How far it is (every kind's status has one, in the same shape).
    #[serde(default)]
    pub progress: Progress,
}

impl TrainingStatus {
    fn measure(&self) -> Progress {
        let done = self.iteration as u64;
        if self.config.mode.is_train() {
            let total = Some(self.config.als.iterations as u64);
            Progress::single("train", done, total, "iterations")
        } else {
            Progress::single("fold-in", done, None, "vectors")
        }
    }
}

/// What an evaluation scores: on each user's latest events (`holdout`), the best `k` of
/// popularity, each model a queue can blend, and each blend in `queues` (name, sources).
#[derive(Debug, Clone, PartialEq)]
pub struct EvaluationRequest {
    pub holdout: eval::Holdout,
    pub k: usize,
    pub queues: Vec<(String, Vec<Source>)>,
    /// How the learned ranker is learned from the training events ([`learned`]).
    pub learned: LearnedConfig,
}

/// How models and blends rank held-out interactions.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Evaluation {
    pub k: usize,
    pub holdout: eval::Holdout,
    pub users: usize,
    pub items: usize,
    pub train_interactions: usize,
    pub test_users: usize,
    pub train_seconds: f64,
    pub als: eval::Metrics,
    pub popularity: eval::Metrics,
    /// One row per baseline, model and blend, in the order asked: `popularity`, then each
    /// model alone (`trending`, `als`, `similar-to-liked`, `related`), then the blends.
    pub rows: Vec<EvaluatedRow>,
    /// The app's queues left out, and why (a source on another space than the trained one).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
    /// The ranker learned from the training events (its row is `learned`), if some user's
    /// next events were among their candidates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub learned: Option<learned::Learned>,
}

/// One row of an evaluation's table.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EvaluatedRow {
    pub name: String,
    /// What it blends (empty for popularity).
    pub sources: Vec<Source>,
    #[serde(flatten)]
    pub metrics: eval::Metrics,
}

/// Why a blend cannot be evaluated offline (a source on another space than the trained one).
pub(crate) fn unevaluable(name: &str, sources: &[Source], trained: &str) -> Option<String> {
    sources.iter().find_map(|source| match source {
        Source::Als { space, .. } | Source::SimilarToLiked { space, .. } if space != trained => {
            Some(format!(
                "queue '{name}': space '{space}' cannot be evaluated offline, only the trained \
                 space '{trained}'"
            ))
        }
        _ => None,
    })
}

/// The models a queue can blend, each alone (with their defaults).
fn single_models(space: &str) -> Vec<(String, Vec<Source>)> {
    let space = space.to_owned();
    vec![
        ("trending".into(), vec![Source::Trending { weight: 1.0 }]),
        (
            "als".into(),
            vec![Source::Als {
                space: space.clone(),
                weight: 1.0,
            }],
        ),
        (
            "similar-to-liked".into(),
            vec![Source::SimilarToLiked {
                space,
                last: 10,
                weight: 1.0,
            }],
        ),
        (
            "related".into(),
            vec![Source::Related {
                last: 10,
                weight: 1.0,
            }],
        ),
    ]
}

impl Job for Trainings {
    type Status = TrainingStatus;
    const KEY: &'static str = "train";
    const NAME: &'static str = "training";

    async fn steps(&self, run: &Run<Self>) -> Result<JobState> {
        let (app, config) = (run.app(), run.status().config);
        let (done, cancel) = (run.counter(), run.cancelled());
        let outcome = match config.mode {
            Mode::Train => self.train(app, &config, done, cancel).await?,
            Mode::FoldIn => self.fold_in_all(app, &config, done, cancel).await?,
        };
        // `None`: cancelled, this node left the job.
        let Some(outcome) = outcome else {
            return Ok(JobState::Running);
        };
        let mut status = run.lock();
        status.iteration = outcome.iterations;
        status.users = outcome.users;
        status.items = outcome.items;
        status.interactions = outcome.interactions;
        status.events = outcome.events;
        Ok(JobState::Done)
    }

    /// A training starts again from its beginning.
    async fn resume(&self, _app: &str, status: TrainingStatus) -> Result<Option<TrainingStatus>> {
        Ok(Some(self.begin(status.config)))
    }
}

/// What a job did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Outcome {
    iterations: usize,
    users: usize,
    items: usize,
    interactions: usize,
    /// Events read (in the retention window).
    events: u64,
}

/// An app's events as training data: users and items numbered in order of appearance.
#[derive(Debug, Default)]
pub(crate) struct Data {
    pub users: Vec<String>,
    pub items: Vec<String>,
    /// (user, item, weight, time ms).
    pub events: Vec<(u32, u32, f32, i64)>,
    pub read: u64,
    /// (user, item) pairs left out: a user token or objectID too long to name a vector's row.
    pub skipped: u64,
    /// Clicks and conversions that carry a queryID (any weight): `(queryID, objectID, type)`,
    /// what a served answer's items became ([`crate::recommend::impressions`]).
    pub outcomes: Vec<(String, String, EventType)>,
}

/// Rows of a trained matrix with the names they stand for.
fn named<'a>(
    names: &'a [String],
    m: &'a penchant_vectors::Matrix,
) -> impl Iterator<Item = (&'a str, &'a [f32])> {
    names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), m.row(i)))
}

/// Vectors solved by a fold-in job: (user or item number in the [`Data`], vector).
#[derive(Debug, Default)]
struct Folded {
    users: Vec<(u32, Vec<f32>)>,
    items: Vec<(u32, Vec<f32>)>,
    interactions: usize,
}

/// Solve a vector for each user of `data` without one from its interactions with items that
/// have one, and for each item without one from its trained users; `None` if cancelled.
fn fold_in_missing(
    data: &Data,
    items: &super::Loaded,
    users: &super::Loaded,
    als: &AlsConfig,
    done: &AtomicU64,
    cancel: &AtomicBool,
) -> Option<Folded> {
    let mut new_users: BTreeMap<u32, BTreeMap<u32, f32>> = BTreeMap::new();
    let mut new_items: BTreeMap<u32, BTreeMap<u32, f32>> = BTreeMap::new();
    let mut folded = Folded::default();
    for &(u, i, weight, _) in &data.events {
        let user_row = users.row_of(&data.users[u as usize]);
        let item_row = items.row_of(&data.items[i as usize]);
        match (user_row, item_row) {
            (None, Some(row)) => {
                *new_users
                    .entry(u)
                    .or_default()
                    .entry(row as u32)
                    .or_default() += weight;
            }
            (Some(row), None) => {
                *new_items
                    .entry(i)
                    .or_default()
                    .entry(row as u32)
                    .or_default() += weight;
            }
            _ => continue,
        }
        folded.interactions += 1;
    }
    for (side, matrix, out) in [
        (new_users, items, &mut folded.users),
        (new_items, users, &mut folded.items),
    ] {
        if side.is_empty() {
            continue;
        }
        let gramian = matrix.gramian();
        for (number, weights) in side {
            if cancel.load(Ordering::Relaxed) {
                return None;
            }
            let interactions: Vec<(u32, f32)> = weights.into_iter().collect();
            out.push((
                number,
                als::fold_in(&matrix.matrix, gramian, &interactions, als),
            ));
            done.fetch_add(1, Ordering::Relaxed);
        }
    }
    Some(folded)
}

/// The weight of an event.
/// The weight a training gives an event (of `index`, when given), if it counts: above 0, not
/// a "not for me" event.
fn counted(
    weights: &Weights,
    seen: &crate::seen::SeenSettings,
    index: Option<&str>,
    event: &Event,
) -> Option<f32> {
    let weight = weight_of(weights, event);
    let counts = weight > 0.0
        && index.is_none_or(|i| i == event.index)
        && !seen.is_negative(&event.event_name);
    counts.then_some(weight)
}

fn weight_of(weights: &Weights, event: &Event) -> f32 {
    if weights.is_empty() {
        return 1.0;
    }
    weights
        .get(&event.event_name)
        .or_else(|| weights.get(event.event_type.as_str()))
        .copied()
        .unwrap_or(0.0)
}

crate::jobs::status!(
    TrainingStatus,
    /// Iterations done (vectors solved, folding in) so far.
    fn count(&mut self, done: u64) {
        self.iteration = done as usize;
    }
);

/// The refusal of a training whose `factors` differ from its space's dimension.
fn dimension_mismatch(config: &TrainingConfig, dimension: usize) -> EngineError {
    EngineError::Refused(format!(
        "space '{}' has dimension {dimension}, the training {} factors: train with factors \
         {dimension} or delete the space",
        config.space, config.als.factors
    ))
}

/// ALS trainings of every app.
#[derive(Debug)]
pub struct Trainings {
    store: Arc<dyn Store>,
    vectors: Arc<Vectors>,
    strategies: Arc<Strategies>,
    tenancy: Arc<Tenancy>,
    /// Whose settings name the "not for me" events, which train nothing.
    seen: Arc<crate::seen::Seen>,
    runner: Runner<Self>,
    clock: Clock,
}

impl Trainings {
    pub fn new(
        runtime: &Runtime,
        store: Arc<dyn Store>,
        vectors: Arc<Vectors>,
        strategies: Arc<Strategies>,
        tenancy: Arc<Tenancy>,
        seen: Arc<crate::seen::Seen>,
        clock: Clock,
    ) -> Self {
        Self {
            store,
            vectors,
            strategies,
            tenancy,
            seen,
            runner: runtime.runner(),
            clock,
        }
    }

    /// The app's latest training, as last saved.
    pub async fn status(&self, app: &str) -> Result<Option<TrainingStatus>> {
        self.runner.status(app).await
    }

    /// Start training in the background; refused while one of the app's trainings runs.
    pub async fn start(
        self: &Arc<Self>,
        app: &str,
        config: TrainingConfig,
    ) -> Result<TrainingStatus> {
        config.check()?;
        // A training into a space of another dimension would fail once running: refused now.
        if config.mode.is_train() {
            match self.vectors.fresh(app, &config.space).await {
                Ok(space) if space.dimension != config.als.factors => {
                    return Err(dimension_mismatch(&config, space.dimension));
                }
                Ok(_) | Err(EngineError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        let status = self.begin(config);
        self.runner.submit(self, app, status).await
    }

    fn begin(&self, config: TrainingConfig) -> TrainingStatus {
        TrainingStatus {
            state: JobState::Running,
            config,
            iteration: 0,
            users: 0,
            items: 0,
            interactions: 0,
            events: 0,
            started_at: self.clock.now_ms(),
            finished_at: None,
            error: None,
            progress: Progress::default(),
        }
    }

    /// Start again every running training whose lease no node holds. Returns how many.
    pub async fn take_over(self: &Arc<Self>) -> Result<usize> {
        self.runner.take_over(self).await
    }

    /// The weights a training uses: its own, else the strategy's event scores, else none.
    pub(crate) async fn weights(&self, app: &str, config: &TrainingConfig) -> Result<Weights> {
        if let Some(weights) = &config.weights {
            return Ok(weights.clone());
        }
        let strategy = self.strategies.fresh(app).await?;
        Ok(strategy
            .map(|s| {
                s.strategy
                    .events_scoring
                    .iter()
                    .map(|e| (e.event_name.clone(), e.score as f32))
                    .collect()
            })
            .unwrap_or_default())
    }

    /// One user's events of `index` in the retention window as a training weighing them by
    /// `weights` counts them ([`Trainings::read`]): `(objectID, weight, time ms)`, in time
    /// order.
    pub(crate) async fn user_events(
        &self,
        app: &str,
        index: &str,
        user: &str,
        weights: &Weights,
    ) -> Result<Vec<(String, f32, i64)>> {
        let since = self.since(app).await?;
        let seen = self.seen.settings(app).await?;
        let request = ReadRows::new(keys::events_between(app, user, since, i64::MAX))
            .filter(RowFilter::column(events::FAMILY, events::EVENT_COLUMN));
        let mut out = Vec::new();
        for row in self.store.read_all(events::EVENTS_TABLE, request).await? {
            let Some(cell) = row.latest(events::FAMILY, events::EVENT_COLUMN) else {
                continue;
            };
            let event: Event =
                serde_json::from_slice(&cell.value).map_err(|e| internal("corrupt event", e))?;
            let (Some(weight), Target::ObjectIds(ids)) =
                (counted(weights, &seen, Some(index), &event), &event.target)
            else {
                continue;
            };
            out.extend(
                ids.iter()
                    .filter(|id| crate::catalog::check_object_id(id).is_ok())
                    .map(|id| (id.clone(), weight, event.timestamp)),
            );
        }
        out.sort_by_key(|e| e.2);
        Ok(out)
    }

    /// The start of the app's retention window (ms).
    async fn since(&self, app: &str) -> Result<i64> {
        let window = self.tenancy.retention(app).await?;
        Ok(self.clock.now_ms() - window.as_millis() as i64)
    }

    /// Read the app's events in its retention window as weighted (user, item) interactions;
    /// refused when none counts.
    pub(crate) async fn read(
        &self,
        app: &str,
        index: Option<&str>,
        weights: &Weights,
    ) -> Result<Data> {
        let since = self.since(app).await?;
        let seen = self.seen.settings(app).await?;
        let store = penchant_store::for_workload(&self.store, Workload::Batch);
        let filter = RowFilter::column(events::FAMILY, events::EVENT_COLUMN).and(
            RowFilter::TimestampRange(TimeRange::new(since.saturating_mul(1000), i64::MAX)),
        );
        let request = ReadRows::new(RowSet::prefix(keys::app(app))).filter(filter);
        let mut rows = store.read_rows(events::EVENTS_TABLE, request).await?;
        let mut data = Data::default();
        let (mut users, mut items) = (HashMap::new(), HashMap::new());
        let number = |map: &mut HashMap<String, u32>, names: &mut Vec<String>, name: &str| {
            *map.entry(name.to_owned()).or_insert_with(|| {
                names.push(name.to_owned());
                (names.len() - 1) as u32
            })
        };
        while let Some(row) = rows.try_next().await? {
            let Some(cell) = row.latest(events::FAMILY, events::EVENT_COLUMN) else {
                continue;
            };
            let event: Event =
                serde_json::from_slice(&cell.value).map_err(|e| internal("corrupt event", e))?;
            data.read += 1;
            let Target::ObjectIds(ids) = &event.target else {
                continue;
            };
            if let Some(query_id) = &event.query_id
                && event.event_type != EventType::View
                && index.is_none_or(|i| i == event.index)
                && !seen.is_negative(&event.event_name)
            {
                data.outcomes.extend(
                    ids.iter()
                        .map(|id| (query_id.clone(), id.clone(), event.event_type)),
                );
            }
            let Some(weight) = counted(weights, &seen, index, &event) else {
                continue;
            };
            // A user or an item that cannot name a vector's row (stored before events were
            // checked so) is left out, not the training failed.
            if !keys::user_token_ok(event.user()) {
                data.skipped += ids.len() as u64;
                continue;
            }
            let user = number(&mut users, &mut data.users, event.user());
            for id in ids {
                if crate::catalog::check_object_id(id).is_err() {
                    data.skipped += 1;
                    continue;
                }
                let item = number(&mut items, &mut data.items, id);
                data.events.push((user, item, weight, event.timestamp));
            }
        }
        if data.skipped > 0 {
            tracing::warn!(%app, pairs = data.skipped,
                "interactions left out of the training: user token or objectID too long");
        }
        if data.events.is_empty() {
            return Err(EngineError::Refused(
                "no event in the retention window counts for the training (weights above 0, \
                 with objectIDs)"
                    .into(),
            ));
        }
        Ok(data)
    }

    /// Train and write the space; `None` if cancelled.
    async fn train(
        &self,
        app: &str,
        config: &TrainingConfig,
        done: Arc<AtomicU64>,
        cancel: Arc<AtomicBool>,
    ) -> Result<Option<Outcome>> {
        let weights = self.weights(app, config).await?;
        let data = self.read(app, config.index.as_deref(), &weights).await?;
        let space = self.target_space(app, config).await?;
        let als = config.als.clone();
        let (users, items, events) = (data.users.len(), data.items.len(), data.read);
        let started = Instant::now();
        let factors = tokio::task::spawn_blocking(move || {
            let triples = data.events.iter().map(|(u, i, w, _)| (*u, *i, *w));
            let interactions = Interactions::from_triples(users, items, triples);
            let nnz = interactions.nnz();
            let factors = als::train(&interactions, &als, |i| {
                done.store(i as u64, Ordering::Relaxed);
                !cancel.load(Ordering::Relaxed)
            });
            (factors, nnz, data)
        })
        .await
        .map_err(|e| internal("training thread", e))?;
        let (Some(factors), interactions, data) = factors else {
            return Ok(None);
        };
        tracing::info!(%app, users, items, interactions, seconds = started.elapsed().as_secs_f64(),
            "trained ALS");
        let stamp = self.clock.now_ms() * 1000;
        let named_items = named(&data.items, &factors.items);
        self.vectors
            .write(app, &space, Kind::Item, named_items, stamp)
            .await?;
        let named_users = named(&data.users, &factors.users);
        self.vectors
            .write(app, &space, Kind::User, named_users, stamp)
            .await?;
        let trained = Trained {
            at: self.clock.now_ms(),
            stamp,
            weights,
            index: config.index.clone(),
            als: config.als.clone(),
            users,
            items,
            interactions,
        };
        let mut space = (*self.vectors.fresh(app, &space.name).await?).clone();
        space.previous_training = space.training.take();
        space.training = Some(trained);
        self.vectors.describe(app, &space).await?;
        Ok(Some(Outcome {
            iterations: config.als.iterations,
            users,
            items,
            interactions,
            events,
        }))
    }

    /// Fold in every user and item of the window without a vector in the trained space, and
    /// write them with one timestamp; `None` if cancelled. `done` counts the vectors solved.
    async fn fold_in_all(
        &self,
        app: &str,
        config: &TrainingConfig,
        done: Arc<AtomicU64>,
        cancel: Arc<AtomicBool>,
    ) -> Result<Option<Outcome>> {
        let space = self.vectors.fresh(app, &config.space).await?;
        let Some(trained) = space.training.clone() else {
            return Err(EngineError::Refused(format!(
                "space '{}' was never trained: train it before folding in",
                space.name
            )));
        };
        let data = self
            .read(app, trained.index.as_deref(), &trained.weights)
            .await?;
        let items = self.vectors.load(app, &space).await?;
        let users = self.vectors.load_users(app, &space).await?;
        let solved = tokio::task::spawn_blocking(move || {
            fold_in_missing(&data, &items, &users, &trained.als, &done, &cancel)
                .map(|folded| (folded, data))
        })
        .await
        .map_err(|e| internal("fold-in thread", e))?;
        let Some((folded, data)) = solved else {
            return Ok(None);
        };
        let stamp = self.clock.now_ms() * 1000;
        let named_items = folded
            .items
            .iter()
            .map(|(i, v)| (data.items[*i as usize].as_str(), v.as_slice()));
        self.vectors
            .write(app, &space, Kind::Item, named_items, stamp)
            .await?;
        let named_users = folded
            .users
            .iter()
            .map(|(u, v)| (data.users[*u as usize].as_str(), v.as_slice()));
        self.vectors
            .write(app, &space, Kind::User, named_users, stamp)
            .await?;
        tracing::info!(%app, users = folded.users.len(), items = folded.items.len(), "folded in");
        Ok(Some(Outcome {
            iterations: 0,
            users: folded.users.len(),
            items: folded.items.len(),
            interactions: folded.interactions,
            events: data.read,
        }))
    }

    /// The space a training writes: created if missing; it must have `factors` dimensions.
    async fn target_space(&self, app: &str, config: &TrainingConfig) -> Result<Arc<Space>> {
        let name = &config.space;
        match self.vectors.fresh(app, name).await {
            Ok(space) if space.dimension == config.als.factors => Ok(space),
            Ok(space) => Err(dimension_mismatch(config, space.dimension)),
            Err(EngineError::NotFound(_)) => {
                let space_config = SpaceConfig {
                    dimension: config.als.factors,
                    metric: Metric::Dot,
                    index: config.index.clone(),
                };
                match self.vectors.create(app, name, space_config).await {
                    Ok(_) | Err(EngineError::Exists(_)) => self.vectors.fresh(app, name).await,
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// A user's vector in a trained space, folded in from the user's events (and stored) when
    /// the training did not see the user. `None` when the space was never trained or no event
    /// of the user counts.
    pub async fn fold_in(&self, app: &str, space: &Space, user: &str) -> Result<Option<Vec<f32>>> {
        let Some(trained) = &space.training else {
            return Ok(None);
        };
        let loaded = self.vectors.load(app, space).await?;
        let since = self.since(app).await?;
        let seen = self.seen.settings(app).await?;
        let request = ReadRows::new(keys::events_between(app, user, since, i64::MAX))
            .filter(RowFilter::column(events::FAMILY, events::EVENT_COLUMN));
        let mut weights: BTreeMap<u32, f32> = BTreeMap::new();
        for row in self.store.read_all(events::EVENTS_TABLE, request).await? {
            let Some(cell) = row.latest(events::FAMILY, events::EVENT_COLUMN) else {
                continue;
            };
            let event: Event =
                serde_json::from_slice(&cell.value).map_err(|e| internal("corrupt event", e))?;
            let Some(weight) = counted(&trained.weights, &seen, trained.index.as_deref(), &event)
            else {
                continue;
            };
            if let Target::ObjectIds(ids) = &event.target {
                for row in ids.iter().filter_map(|id| loaded.row_of(id)) {
                    *weights.entry(row as u32).or_default() += weight;
                }
            }
        }
        if weights.is_empty() {
            return Ok(None);
        }
        let interactions: Vec<(u32, f32)> = weights.into_iter().collect();
        let vector = als::fold_in(
            &loaded.matrix,
            loaded.gramian(),
            &interactions,
            &trained.als,
        );
        let stamp = self.clock.now_ms() * 1000;
        self.vectors
            .write(
                app,
                space,
                Kind::User,
                std::iter::once((user, vector.as_slice())),
                stamp,
            )
            .await?;
        Ok(Some(vector))
    }

    /// Refuse an evaluation asked with bad settings, before anything is read.
    pub fn check_evaluation(config: &TrainingConfig, request: &EvaluationRequest) -> Result<()> {
        config.check()?;
        request.learned.check().map_err(EngineError::Invalid)?;
        if request.learned.examples == learned::Examples::Impressions {
            return Err(EngineError::Invalid(
                "an evaluation's ranker learns from the held-out history: examples \
                 'impressions' is for the ranker job (POST /1/ranker/train)"
                    .into(),
            ));
        }
        let EvaluationRequest { holdout, k, .. } = *request;
        let holdout_ok = match holdout {
            eval::Holdout::Count(n) => (1..=100).contains(&n),
            eval::Holdout::Fraction(f) => f > 0.0 && f < 1.0,
        };
        if !holdout_ok || !(1..=1000).contains(&k) {
            return Err(EngineError::Invalid(
                "holdout must be a count between 1 and 100 or a fraction between 0 and 1 \
                 (exclusive), and k between 1 and 1000"
                    .into(),
            ));
        }
        for (name, sources) in &request.queues {
            if let Some(why) = unevaluable(name, sources, &config.space) {
                return Err(EngineError::Invalid(why));
            }
        }
        Ok(())
    }

    /// The events an evaluation reads: as a training of `config` reads them.
    pub(crate) async fn evaluation_data(&self, app: &str, config: &TrainingConfig) -> Result<Data> {
        let weights = self.weights(app, config).await?;
        self.read(app, config.index.as_deref(), &weights).await
    }

    /// Train on all but each user's latest interactions of `data` and rank the held-out ones
    /// with popularity, each model a queue blends, each blend asked
    /// ([`penchant_learn::offline`]) and the learned ranker (with the items' facet values,
    /// where given).
    pub(crate) async fn evaluate(
        config: &TrainingConfig,
        request: &EvaluationRequest,
        data: Data,
        item_facets: Vec<Vec<u32>>,
    ) -> Result<Evaluation> {
        Self::check_evaluation(config, request)?;
        let EvaluationRequest { holdout, k, .. } = *request;
        let learned_config = request.learned.clone();
        let mut rows = single_models(&config.space);
        rows.extend(request.queues.iter().cloned());
        let als = config.als.clone();
        tokio::task::spawn_blocking(move || {
            let (users, items) = (data.users.len(), data.items.len());
            let mut events = data.events;
            events.sort_by_key(|e| e.3);
            let split = eval::time_holdout(&events, users, holdout, 1);
            let train = Interactions::from_triples(users, items, split.train.iter().copied());
            let started = Instant::now();
            let factors = als::train(&train, &als, |_| true)
                .ok_or_else(|| internal("training", "stopped"))?;
            let train_seconds = started.elapsed().as_secs_f64();
            let offline = Offline::new(&train, &factors, &split.train, &split.train_at)
                .with_facets(item_facets.clone());
            let popular = offline.popular();
            let popularity = eval::ranking_metrics(&split.test, k, |u| {
                let (seen, _) = train.user_items(u);
                popular
                    .iter()
                    .copied()
                    .filter(|i| seen.binary_search(i).is_err())
                    .take(k)
                    .collect()
            });
            let als_metrics =
                eval::ranking_metrics(&split.test, k, |u| eval::recommend(&factors, &train, u, k));
            let mut table = vec![EvaluatedRow {
                name: "popularity".into(),
                sources: Vec::new(),
                metrics: popularity,
            }];
            for (name, sources) in rows {
                let metrics =
                    eval::ranking_metrics(&split.test, k, |u| offline.blend(&sources, u, k));
                table.push(EvaluatedRow {
                    name,
                    sources,
                    metrics,
                });
            }
            // The learned ranker: learned on the training events alone (their own latest
            // events held out), scored on the same test as every row above.
            let train_events = split.train_events();
            let history = learned::History {
                events: &train_events,
                users,
                items,
                item_facets: &item_facets,
            };
            let learned = learned::learn(&history, holdout, &als, &learned_config, |_| true);
            if let Some(ranker) = &learned {
                let recommend = ranker.recommender(&offline);
                let metrics = eval::ranking_metrics(&split.test, k, |u| recommend(u, k));
                table.push(EvaluatedRow {
                    name: "learned".into(),
                    sources: penchant_learn::offline::candidate_sources().to_vec(),
                    metrics,
                });
            }
            Ok(Evaluation {
                k,
                holdout,
                users,
                items,
                train_interactions: train.nnz(),
                test_users: split.test.iter().filter(|t| !t.is_empty()).count(),
                train_seconds,
                als: als_metrics,
                popularity,
                rows: table,
                skipped: Vec::new(),
                learned,
            })
        })
        .await
        .map_err(|e| internal("evaluation thread", e))?
    }
}
