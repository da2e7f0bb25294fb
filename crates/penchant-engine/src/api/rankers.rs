//! Learned rankers: the ranker job's steps and the stored rankers ([`crate::recommend::ranker`]
//! holds the job, its settings and status).

use crate::events::EventType;
use crate::jobs::{JobState, Progress, Run};
use crate::recommend::QueueDefinition;
use crate::recommend::impressions;
use crate::recommend::queues::Ranker;
use crate::recommend::ranker::{
    HOLDOUT, MODEL, Phase, Rank, RankerConfig, RankerStatus, Read, StoredRanker, USERS_AT_ONCE,
};
use crate::recommend::snapshot::Snapshot;
use crate::{Engine, EngineError, Result, internal, keys};
use bytes::Bytes;
use futures::StreamExt;
use penchant_learn::learned::{self, Examples, History, Shown};
use penchant_model::tables::RANKERS_MODEL_FAMILY as FAMILY;
use penchant_model::tables::RANKERS_TABLE;
use penchant_store::{Mutation, Timestamp};
use penchant_vectors::als::AlsConfig;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

impl Engine {
    /// Start learning an index's ranker (then writing its learned queues) in the background;
    /// refused while a ranker job of the app runs.
    pub async fn start_ranker(&self, app: &str, config: RankerConfig) -> Result<RankerStatus> {
        config.check()?;
        let status = RankerStatus {
            state: JobState::Running,
            config,
            phase: Phase::Learn,
            trees: 0,
            users: 0,
            expected_users: None,
            queues: Vec::new(),
            version: None,
            started_at: self.now_ms(),
            finished_at: None,
            error: None,
            progress: Progress::default(),
        };
        self.recommend
            .rankers
            .submit(&Arc::new(Rank(self.clone())), app, status)
            .await
    }

    /// The app's latest ranker job, as last saved.
    pub async fn ranker_status(&self, app: &str) -> Result<Option<RankerStatus>> {
        self.recommend.rankers.status(app).await
    }

    /// Resume every running ranker job whose lease no node holds. Returns how many.
    pub(crate) async fn take_over_rankers(&self) -> Result<usize> {
        self.recommend
            .rankers
            .take_over(&Arc::new(Rank(self.clone())))
            .await
    }

    /// An index's newest ranker (`None`: never learned).
    pub async fn ranker(&self, app: &str, index: &str) -> Result<Option<StoredRanker>> {
        crate::catalog::check_index_name(index)?;
        let row = self
            .store
            .read_row(RANKERS_TABLE, keys::ranker(app, index), None)
            .await?;
        row.as_ref()
            .and_then(|r| r.latest(FAMILY, MODEL))
            .map(|cell| {
                serde_json::from_slice(&cell.value).map_err(|e| internal("corrupt ranker", e))
            })
            .transpose()
    }

    /// Whether a learned queue is the ranker job's to write: its index has a model.
    pub(crate) async fn ranked_by_job(&self, app: &str, def: &QueueDefinition) -> Result<bool> {
        if def.ranker != Ranker::Learned {
            return Ok(false);
        }
        let row = self
            .store
            .read_row(RANKERS_TABLE, keys::ranker(app, &def.index_name), None)
            .await?;
        Ok(row.is_some_and(|r| r.latest(FAMILY, MODEL).is_some()))
    }

    pub(crate) async fn rank_steps(&self, run: &Run<Rank>) -> Result<JobState> {
        let app = run.app();
        let config = run.status().config;
        let (done, cancel) = (run.counter(), run.cancelled());
        let Read {
            data,
            als,
            facets,
            shown,
            weights,
        } = self.ranker_history(app, &config).await?;
        let (users, items, events) = (data.users.len(), data.items.len(), data.read);
        let data = Arc::new(data);
        let facets = Arc::new(facets);
        let stored = match run.status().version {
            // Taken over in the queues phase: the model it stored.
            Some(version) => match self.ranker(app, &config.index_name).await? {
                Some(stored) if stored.version == version => stored,
                _ => return Err(internal("ranker", "the stored model is gone")),
            },
            None => {
                let found = shown.len();
                let from_impressions = match config.ranker.examples {
                    Examples::Impressions => true,
                    Examples::History => false,
                    Examples::Auto => found >= config.ranker.min_impressions,
                };
                if from_impressions && found < 2 {
                    return Err(EngineError::Refused(format!(
                        "no logged impression of index '{}' to learn from: {found} had a click \
                         or conversion with its queryID (serve answers with clickAnalytics, \
                         send their events with the queryID), and learning needs 2",
                        config.index_name
                    )));
                }
                let (data2, facets2, als2) = (data.clone(), facets.clone(), als.clone());
                let learned_config = config.ranker.clone();
                let go_on = cancel.clone();
                let counter = done.clone();
                let learned = tokio::task::spawn_blocking(move || {
                    let history = History {
                        events: &data2.events,
                        users: data2.users.len(),
                        items: data2.items.len(),
                        item_facets: &facets2,
                    };
                    let progress = |trees: usize| {
                        counter.store(trees as u64, Ordering::Relaxed);
                        !go_on.load(Ordering::Relaxed)
                    };
                    if from_impressions {
                        learned::learn_from_impressions(
                            &history,
                            &shown,
                            &als2,
                            &learned_config,
                            progress,
                        )
                    } else {
                        learned::learn(&history, HOLDOUT, &als2, &learned_config, progress)
                    }
                })
                .await
                .map_err(|e| internal("ranker thread", e))?;
                if cancel.load(Ordering::Relaxed) {
                    return Ok(JobState::Running);
                }
                let Some(mut learned) = learned else {
                    return Err(EngineError::Refused(if from_impressions {
                        format!(
                            "too few impressions to learn a ranker from ({found} with an \
                             outcome): their users split into none to train on or none to \
                             validate with"
                        )
                    } else {
                        "no user's next events were among the candidates of their earlier \
                         ones: too few events to learn a ranker from"
                            .into()
                    }));
                };
                learned.impressions = found;
                let model = std::mem::take(&mut learned.model);
                let version = self.now_ms() * 1000;
                let stored = StoredRanker {
                    version,
                    trained_at: self.now_ms(),
                    config: config.clone(),
                    features: penchant_learn::offline::FEATURES
                        .map(str::to_owned)
                        .to_vec(),
                    users,
                    items,
                    events,
                    learned,
                    model,
                };
                let json = serde_json::to_vec(&stored).map_err(|e| internal("ranker", e))?;
                let cell = Mutation::SetCell {
                    family: FAMILY.into(),
                    qualifier: Bytes::from_static(MODEL),
                    timestamp: Timestamp::Micros(version),
                    value: json.into(),
                };
                self.store
                    .mutate_row(
                        RANKERS_TABLE,
                        keys::ranker(app, &config.index_name),
                        vec![cell],
                    )
                    .await?;
                tracing::info!(%app, index = %config.index_name, version,
                    trees = stored.learned.trees, "learned a ranker");
                // The counter counts users from here (zeroed first: a save in between must not
                // read trees as users).
                done.store(0, Ordering::Relaxed);
                run.update(|s| {
                    s.version = Some(version);
                    s.trees = stored.learned.trees;
                    s.phase = Phase::Queues;
                });
                run.save().await?;
                stored
            }
        };
        let state = self
            .write_learned_queues(run, &stored, (data, facets), als, weights)
            .await?;
        if state == JobState::Done {
            run.update(|s| s.phase = Phase::Done);
        }
        Ok(state)
    }

    /// Phase queues: the snapshot the ranker serves from ([`super::serving`]), then every
    /// user's candidates in the model's order, written to each learned queue of the index.
    pub(crate) async fn write_learned_queues(
        &self,
        run: &Run<Rank>,
        stored: &StoredRanker,
        (data, facets): (Arc<crate::vectors::training::Data>, Arc<Vec<Vec<u32>>>),
        als: AlsConfig,
        weights: crate::vectors::training::Weights,
    ) -> Result<JobState> {
        let app = run.app();
        let index = &stored.config.index_name;
        let queues: Vec<(String, QueueDefinition)> = self
            .recommend
            .queues
            .definitions(app)
            .await?
            .into_iter()
            .filter(|(_, def)| def.ranker == Ranker::Learned && &def.index_name == index)
            .collect();
        let expected = if queues.is_empty() {
            0
        } else {
            data.users.len() as u64
        };
        run.update(|s| {
            s.queues = queues.iter().map(|(name, _)| name.clone()).collect();
            s.expected_users = Some(expected);
        });
        // What the catalog has of the history's items, asked once for the phase rather than
        // for each user's queue.
        let mut present = HashSet::new();
        if !queues.is_empty() {
            for chunk in data.items.chunks(1000) {
                present.extend(self.catalog.present(app, index, chunk).await?);
            }
        }
        let in_catalog: Vec<bool> = data.items.iter().map(|i| present.contains(i)).collect();
        let k = queues.iter().map(|(_, def)| def.size).max().unwrap_or(0);
        let (tx, mut rx) = tokio::sync::mpsc::channel::<(usize, Vec<(u32, f32)>)>(256);
        let (items_tx, items_rx) = tokio::sync::oneshot::channel();
        let cancel = run.cancelled();
        let (model, per_source) = (stored.model.clone(), stored.learned.per_source);
        let ranking_data = data.clone();
        let ranking = tokio::task::spawn_blocking(move || {
            // Set when the writes stopped (an error): nothing is left to rank for.
            let unheard = AtomicBool::new(false);
            let history = History {
                events: &ranking_data.events,
                users: ranking_data.users.len(),
                items: ranking_data.items.len(),
                item_facets: &facets,
            };
            learned::rank_all(
                &history,
                &als.clone(),
                &model,
                per_source,
                k,
                || !cancel.load(Ordering::Relaxed) && !unheard.load(Ordering::Relaxed),
                |items| {
                    let _ = items_tx.send(Snapshot {
                        ids: ranking_data.items.clone(),
                        items,
                        weights,
                        als,
                    });
                },
                |u, ranked| {
                    if tx.blocking_send((u, ranked)).is_err() {
                        unheard.store(true, Ordering::Relaxed);
                    }
                },
            )
        });
        // Written before the queues: the ranker serves requests from here on.
        if let Ok(snapshot) = items_rx.await {
            self.write_snapshot(app, index, stored.version, &snapshot)
                .await?;
        }
        let done = run.counter();
        let version = stored.version;
        let mut writes = futures::stream::poll_fn(|cx| rx.poll_recv(cx))
            .map(|(u, ranked)| {
                let user = data.users[u].as_str();
                let ranked: Vec<(String, f32)> = ranked
                    .into_iter()
                    .filter(|&(i, _)| in_catalog[i as usize])
                    .map(|(i, s)| (data.items[i as usize].clone(), s))
                    .collect();
                let (queues, present) = (&queues, &present);
                async move {
                    for (name, def) in queues {
                        let mut mine = ranked.clone();
                        mine.truncate(def.size);
                        self.write_queue(app, user, (name, def), mine, present, Some(version))
                            .await?;
                    }
                    Ok::<_, EngineError>(())
                }
            })
            .buffer_unordered(USERS_AT_ONCE);
        let mut written = 0u64;
        while let Some(write) = writes.next().await {
            write?;
            written += 1;
            done.store(written, Ordering::Relaxed);
        }
        // The counter is copied at each save; the last count is the status's own.
        run.update(|s| s.users = written);
        let finished = ranking.await.map_err(|e| internal("ranker thread", e))?;
        Ok(match finished {
            Some(()) => JobState::Done,
            None => JobState::Running, // cancelled: this node left the job
        })
    }

    /// An index's events as a ranker learns from them, weighed as the space's last training
    /// weighed them, in time order, with their items' facet values.
    pub(crate) async fn ranker_history(&self, app: &str, config: &RankerConfig) -> Result<Read> {
        let trained = match self.vectors.fresh(app, &config.space).await {
            Ok(space) => space.training.clone(),
            Err(EngineError::NotFound(_)) => None,
            Err(e) => return Err(e),
        };
        let (weights, als) = match trained {
            Some(t) => (t.weights, t.als),
            None => {
                let defaults = crate::vectors::training::TrainingConfig::default();
                let weights = self.trainings.weights(app, &defaults).await?;
                (weights, defaults.als)
            }
        };
        let mut data = self
            .trainings
            .read(app, Some(&config.index_name), &weights)
            .await?;
        data.events.sort_by_key(|e| e.3);
        let facets = self
            .item_facets(app, &config.index_name, &data.items)
            .await?;
        let shown = self.shown(app, &config.index_name, &data).await?;
        Ok(Read {
            data,
            weights,
            als,
            facets,
            shown,
        })
    }

    /// An index's logged impressions that a click or conversion followed (with its queryID),
    /// their users and items numbered as in `data` (items it lacks are left out, and
    /// impressions of users it lacks).
    pub(crate) async fn shown(
        &self,
        app: &str,
        index: &str,
        data: &crate::vectors::training::Data,
    ) -> Result<Vec<Shown>> {
        // Per queryID, per objectID: the best outcome (a conversion 2, a click 1).
        let mut outcomes: HashMap<&str, HashMap<&str, f32>> = HashMap::new();
        for (query_id, id, kind) in &data.outcomes {
            let label = if *kind == EventType::Conversion {
                2.0
            } else {
                1.0
            };
            let best = outcomes
                .entry(query_id.as_str())
                .or_default()
                .entry(id.as_str())
                .or_default();
            *best = best.max(label);
        }
        if outcomes.is_empty() {
            return Ok(Vec::new());
        }
        let since = self.now_ms() - self.tenancy.retention(app).await?.as_millis() as i64;
        let logged = impressions::read(&self.store, app, index, since).await?;
        let number = |names: &[String]| -> HashMap<String, u32> {
            names
                .iter()
                .enumerate()
                .map(|(n, name)| (name.clone(), n as u32))
                .collect()
        };
        let (users, items) = (number(&data.users), number(&data.items));
        let mut shown = Vec::new();
        for impression in logged {
            let (Some(outcome), Some(&user)) = (
                outcomes.get(impression.query_id.as_str()),
                users.get(&impression.user),
            ) else {
                continue;
            };
            let (items, labels): (Vec<u32>, Vec<f32>) = impression
                .object_ids
                .iter()
                .filter_map(|id| {
                    let label = outcome.get(id.as_str()).copied().unwrap_or(0.0);
                    items.get(id).map(|&i| (i, label))
                })
                .unzip();
            if labels.iter().any(|&l| l > 0.0) {
                shown.push(Shown {
                    user,
                    at: impression.at,
                    items,
                    labels,
                });
            }
        }
        Ok(shown)
    }

    /// Per item, its values of the facets the app's strategy scores (as numbers, the same
    /// number for the same facet and value): what a profile's affinities are counted over.
    /// Empty when the app has no strategy with facets.
    pub(crate) async fn item_facets(
        &self,
        app: &str,
        index: &str,
        items: &[String],
    ) -> Result<Vec<Vec<u32>>> {
        let Some(strategy) = self.strategies.fresh(app).await? else {
            return Ok(Vec::new());
        };
        let scored: HashSet<&str> = strategy
            .strategy
            .facets_scoring
            .iter()
            .map(|f| f.facet_name.as_str())
            .collect();
        if scored.is_empty() {
            return Ok(Vec::new());
        }
        let mut numbers: HashMap<(String, String), u32> = HashMap::new();
        let mut out = Vec::with_capacity(items.len());
        for chunk in items.chunks(1000) {
            let facets = self.catalog.facets_many(app, index, chunk).await?;
            for id in chunk {
                let values = facets.get(id).map_or(&[][..], |f| &f[..]);
                let mut numbered: Vec<u32> = values
                    .iter()
                    .filter(|(name, _)| scored.contains(name.as_str()))
                    .map(|pair| {
                        let next = numbers.len() as u32;
                        *numbers.entry(pair.clone()).or_insert(next)
                    })
                    .collect();
                numbered.sort_unstable();
                numbered.dedup();
                out.push(numbered);
            }
        }
        Ok(out)
    }
}
