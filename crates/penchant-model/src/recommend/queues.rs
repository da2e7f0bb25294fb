//! A queue's definition: where its candidates come from ([`Source`]), how many it keeps, what
//! orders them.

use serde::{Deserialize, Serialize};

use crate::{EngineError, Result, keys};

/// A queue's default length (the seed's backlog).
pub const DEFAULT_SIZE: usize = 1000;
/// The longest queue.
pub const MAX_SIZE: usize = 10_000;
/// The longest queue name, in bytes.
pub const MAX_NAME_BYTES: usize = 64;
/// Queues an app may define.
pub const MAX_QUEUES: usize = 32;

/// Where a queue's candidates come from. Each source's scores are divided by its best one, and
/// an item's score is the weighted sum over the sources that propose it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "source", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Source {
    /// The items closest to the user's vector in a space (ALS's by default; folded in for a
    /// user the training did not see).
    Als {
        #[serde(default = "als")]
        space: String,
        #[serde(default = "one")]
        weight: f32,
    },
    /// The items closest to the last `last` items the user clicked or converted on.
    SimilarToLiked {
        #[serde(default = "als")]
        space: String,
        #[serde(default = "ten")]
        last: usize,
        #[serde(default = "one")]
        weight: f32,
    },
    /// The co-interaction lists (`related-products`) of the last `last` items the user clicked
    /// or converted on.
    Related {
        #[serde(default = "ten")]
        last: usize,
        #[serde(default = "one")]
        weight: f32,
    },
    /// The index's trending items.
    Trending {
        #[serde(default = "one")]
        weight: f32,
    },
}

fn als() -> String {
    "als".into()
}
fn one() -> f32 {
    1.0
}
fn ten() -> usize {
    10
}
fn default_size() -> usize {
    DEFAULT_SIZE
}

impl Source {
    pub fn weight(&self) -> f32 {
        match self {
            Source::Als { weight, .. }
            | Source::SimilarToLiked { weight, .. }
            | Source::Related { weight, .. }
            | Source::Trending { weight } => *weight,
        }
    }
}

/// What a queue holds and how it is built.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QueueDefinition {
    /// The catalog index its items are records of.
    pub index_name: String,
    /// Items kept per user (1 to [`MAX_SIZE`], default [`DEFAULT_SIZE`]).
    #[serde(default = "default_size")]
    pub size: usize,
    /// Where candidates come from; none: only the lists callers give when they rebuild.
    #[serde(default)]
    pub sources: Vec<Source>,
    /// What orders them: the blend of the sources' weights, or the app's learned ranker.
    #[serde(default, skip_serializing_if = "Ranker::is_blend")]
    pub ranker: Ranker,
}

/// What orders a queue's candidates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Ranker {
    /// The weighted sum of the sources' scores, each over its best.
    #[default]
    Blend,
    /// The ranker the ranker job learned for the queue's index (the engine's ranker job): it writes
    /// every user's queue, the candidates of its own sources (`penchant_learn::offline::candidate_sources`)
    /// ordered by the model. Until the index has a model, the queue is built as a blend of its
    /// sources.
    Learned,
}

impl Ranker {
    pub fn is_blend(&self) -> bool {
        *self == Ranker::Blend
    }
}

impl QueueDefinition {
    pub fn check(&self) -> Result<()> {
        crate::catalog::check_index_name(&self.index_name)?;
        if !(1..=MAX_SIZE).contains(&self.size) {
            return Err(EngineError::Invalid(format!(
                "size must be between 1 and {MAX_SIZE}"
            )));
        }
        for source in &self.sources {
            let weight = source.weight();
            if !(weight.is_finite() && weight > 0.0) {
                return Err(EngineError::Invalid(
                    "a source's weight must be a positive number".into(),
                ));
            }
            match source {
                Source::Als { space, .. } | Source::SimilarToLiked { space, .. } => {
                    crate::vectors::check_space_name(space)?;
                }
                Source::Related { .. } | Source::Trending { .. } => {}
            }
            if let Source::SimilarToLiked { last, .. } | Source::Related { last, .. } = source
                && !(1..=crate::vectors::MAX_LIKED).contains(last)
            {
                return Err(EngineError::Invalid(format!(
                    "last must be between 1 and {}",
                    crate::vectors::MAX_LIKED
                )));
            }
        }
        Ok(())
    }
}

/// Queue names: 1 to 64 bytes of letters, digits, `-`, `_` and `.`.
pub fn check_name(name: &str) -> Result<()> {
    keys::check_name("queue", name, MAX_NAME_BYTES)
}
