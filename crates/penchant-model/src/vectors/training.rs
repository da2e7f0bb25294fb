//! What an ALS training is asked for, and what a space keeps of the one that wrote it.

use std::collections::BTreeMap;

use penchant_vectors::als::AlsConfig;
use serde::{Deserialize, Serialize};

use crate::{EngineError, Result};

/// Event weights by event name, else by event type (`click`, `conversion`, `view`). Empty:
/// every event weighs 1.
pub type Weights = BTreeMap<String, f32>;

/// What a training job does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Train every vector from the events.
    #[default]
    Train,
    /// Keep the trained vectors and fold in every user and item of the window without one,
    /// with the space's last training's settings (the job's own are not used).
    FoldIn,
}

impl Mode {
    pub fn is_train(&self) -> bool {
        *self == Mode::Train
    }
}

/// What a training is asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", from = "Wire")]
pub struct TrainingConfig {
    /// The space written (created with dimension `factors` and the dot metric if missing).
    pub space: String,
    /// Train, or fold in what the last training did not see.
    #[serde(default, skip_serializing_if = "Mode::is_train")]
    pub mode: Mode,
    /// Count only events of this index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<String>,
    /// Event weights; the strategy's event scores when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<Weights>,
    #[serde(flatten)]
    pub als: AlsConfig,
}

impl Default for TrainingConfig {
    fn default() -> Self {
        Wire::default().into()
    }
}

/// The request's shape, every field named (`flatten` cannot deny unknown fields).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Wire {
    space: Option<String>,
    mode: Option<Mode>,
    index: Option<String>,
    weights: Option<Weights>,
    factors: Option<usize>,
    regularization: Option<f32>,
    alpha: Option<f32>,
    iterations: Option<usize>,
    cg_steps: Option<usize>,
    seed: Option<u64>,
    threads: Option<usize>,
}

impl From<Wire> for TrainingConfig {
    fn from(w: Wire) -> Self {
        let d = AlsConfig::default();
        TrainingConfig {
            space: w.space.unwrap_or_else(|| "als".to_owned()),
            mode: w.mode.unwrap_or_default(),
            index: w.index,
            weights: w.weights,
            als: AlsConfig {
                factors: w.factors.unwrap_or(d.factors),
                regularization: w.regularization.unwrap_or(d.regularization),
                alpha: w.alpha.unwrap_or(d.alpha),
                iterations: w.iterations.unwrap_or(d.iterations),
                cg_steps: w.cg_steps.unwrap_or(d.cg_steps),
                seed: w.seed.unwrap_or(d.seed),
                threads: w.threads.unwrap_or(d.threads),
            },
        }
    }
}

impl TrainingConfig {
    pub fn check(&self) -> Result<()> {
        super::check_space_name(&self.space)?;
        if let Some(index) = &self.index {
            crate::catalog::check_index_name(index)?;
        }
        self.als.validate().map_err(EngineError::Invalid)?;
        for (event, weight) in self.weights.iter().flatten() {
            if !(weight.is_finite() && *weight >= 0.0) {
                return Err(EngineError::Invalid(format!(
                    "the weight of '{event}' must be a finite number >= 0"
                )));
            }
        }
        Ok(())
    }
}

/// What a space keeps of the training that wrote it: what folding in a new user needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Trained {
    /// When it finished (ms).
    pub at: i64,
    /// The timestamp (µs) of every vector it wrote: what a rollback deletes.
    #[serde(default)]
    pub stamp: i64,
    /// The weights it used (resolved from the strategy if it had none of its own).
    pub weights: Weights,
    pub index: Option<String>,
    pub als: AlsConfig,
    pub users: usize,
    pub items: usize,
    pub interactions: usize,
}
