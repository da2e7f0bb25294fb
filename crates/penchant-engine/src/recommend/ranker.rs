//! The ranker job: learns an index's ranker from the app's history ([`super::learned`]), stores
//! the model, then writes every user's queues that name it (`"ranker": "learned"`).
//!
//! Table `rankers`, family `m`, row `app 0 · index`: cell `m:model` holds the model and what its
//! training saw ([`StoredRanker`], JSON), stamped with its version (µs); the two newest are kept,
//! the previous one for a look back.
//!
//! The job, one node at a time per app like the others ([`crate::jobs`]):
//!
//! 1. **learn**: the index's events in the retention window, weighed as the space's last ALS
//!    training weighed them (else as a training would: the strategy's event scores), each
//!    user's latest 20% held out as what came next ([`learned::learn`]) — or, once the index
//!    has logged impressions with outcomes ([`LearnedConfig::examples`]), those impressions,
//!    their items labelled by the clicks and conversions sent with their queryIDs
//!    ([`learned::learn_from_impressions`]); the model is stored.
//! 2. **queues**: every user's candidates as the sources stand after the last event, in the
//!    model's order ([`learned::rank_all`], the same features the training computed: no skew
//!    between training and serving), written to each learned queue of the index, minus what
//!    the user has seen and what the catalog lacks, as a rebuild does.
//!
//! A node that dies leaves the job running; the node that takes it over starts the phase it
//! was in again (the queues phase with the model it stored). Queues of a learned ranker are
//! written by this job only, once the index has a model: the build job and the stale-queue
//! refresh leave them alone, and a rebuild by hand is refused.

use penchant_rank::Model;
use penchant_vectors::als::AlsConfig;
use penchant_vectors::eval::Holdout;
use serde::{Deserialize, Serialize};

use crate::jobs::{Job, JobState, Progress, Run};
use crate::{Engine, EngineError, Result};
use penchant_learn::learned::{Learned, LearnedConfig, Shown};
pub use penchant_model::tables::{RANKERS, RANKERS_TABLE};

pub(crate) const MODEL: &[u8] = b"model";
/// Each user's latest events held out as what came next, at each of the job's cuts.
pub(crate) const HOLDOUT: Holdout = Holdout::Fraction(0.2);
/// Users whose queues are written at once.
pub(crate) const USERS_AT_ONCE: usize = 16;

/// What a ranker job is asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RankerConfig {
    /// The index whose events train the ranker and whose learned queues it writes.
    pub index_name: String,
    /// The space whose last training's event weights and ALS settings it uses (the defaults
    /// when it was never trained).
    #[serde(default = "als")]
    pub space: String,
    /// How the ranker is learned.
    #[serde(default)]
    pub ranker: LearnedConfig,
}

pub(crate) fn als() -> String {
    "als".into()
}

impl RankerConfig {
    /// The defaults for an index.
    pub fn for_index(index: &str) -> Self {
        Self {
            index_name: index.to_owned(),
            space: als(),
            ranker: LearnedConfig::default(),
        }
    }

    pub fn check(&self) -> Result<()> {
        crate::catalog::check_index_name(&self.index_name)?;
        crate::vectors::check_space_name(&self.space)?;
        self.ranker.check().map_err(EngineError::Invalid)
    }
}

/// A stored ranker: the model and what its training saw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredRanker {
    /// Its version: when it was stored (µs), the stamp of its cell.
    pub version: i64,
    /// Unix ms.
    pub trained_at: i64,
    pub config: RankerConfig,
    /// What each row of features holds, in order ([`penchant_learn::offline::FEATURES`]).
    pub features: Vec<String>,
    /// Users and items its history had, and the events read.
    pub users: usize,
    pub items: usize,
    pub events: u64,
    pub learned: Learned,
    pub model: Model,
}

/// Where a ranker job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Phase {
    Learn,
    Queues,
    Done,
}

/// A ranker job's status, saved as it goes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RankerStatus {
    pub state: JobState,
    pub config: RankerConfig,
    pub phase: Phase,
    /// Trees grown so far (learning), then users whose queues are written.
    pub trees: usize,
    pub users: u64,
    /// Users with events (the queues phase's total), once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_users: Option<u64>,
    /// The learned queues written.
    pub queues: Vec<String>,
    /// The model stored by the learn phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<i64>,
    /// Unix ms.
    pub started_at: i64,
    pub finished_at: Option<i64>,
    pub error: Option<String>,
    #[serde(default)]
    pub progress: Progress,
}

impl RankerStatus {
    pub(crate) fn measure(&self) -> Progress {
        let phases = [Phase::Learn, Phase::Queues];
        match self.phase {
            Phase::Learn => {
                let mut p = Progress::of(&self.phase, &phases, self.trees as u64, "trees");
                p.total = Some(self.config.ranker.params.trees as u64);
                p
            }
            Phase::Queues | Phase::Done => {
                let mut p = Progress::of(&self.phase, &phases, self.users, "users");
                p.total = self.expected_users.map(|t| t.max(self.users));
                p
            }
        }
    }
}

crate::jobs::status!(
    RankerStatus,
    /// Trees grown (learning) or users done (queues).
    fn count(&mut self, done: u64) {
        match self.phase {
            Phase::Learn => self.trees = done as usize,
            Phase::Queues | Phase::Done => self.users = self.users.max(done),
        }
    }
);

/// The ranker job, run by the engine whose queues it writes.
#[derive(Debug)]
pub(crate) struct Rank(pub(crate) Engine);

impl Job for Rank {
    type Status = RankerStatus;
    const KEY: &'static str = "rank";
    const NAME: &'static str = "ranker training";

    async fn steps(&self, run: &Run<Self>) -> Result<JobState> {
        self.0.rank_steps(run).await
    }
}

/// An index's events as the ranker reads them, their items' facet values, and its logged
/// impressions with an outcome.
pub(crate) struct Read {
    pub(crate) data: crate::vectors::training::Data,
    /// How its events were weighed.
    pub(crate) weights: crate::vectors::training::Weights,
    pub(crate) als: AlsConfig,
    pub(crate) facets: Vec<Vec<u32>>,
    pub(crate) shown: Vec<Shown>,
}
