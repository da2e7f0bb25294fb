//! Background jobs: the full recompute of an app's profiles after a strategy change.
//!
//! A job runs on the node that accepted the change, as a batch workload; its progress is kept in
//! memory on that node (`GET /1/strategies/personalization/job`). A newer strategy supersedes a
//! running job: the old one stops at its next user.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use serde::Serialize;

use crate::profiles::{Profiles, RecomputeStats, Source};
use crate::strategy::Versioned;

/// Where a job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum JobState {
    Running,
    Done,
    Superseded,
    Failed,
}

/// A recompute job's status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JobStatus {
    pub strategy_version: i64,
    pub state: JobState,
    #[serde(flatten)]
    pub stats: RecomputeStats,
    /// Unix ms.
    pub started_at: i64,
    pub finished_at: Option<i64>,
    pub error: Option<String>,
}

/// The jobs of this node, by app.
#[derive(Debug, Default)]
pub struct Jobs {
    status: Mutex<HashMap<String, JobStatus>>,
}

fn now_ms() -> i64 {
    penchant_store::validate::now_micros() / 1000
}

impl Jobs {
    /// The latest job of an app on this node.
    pub fn status(&self, app: &str) -> Option<JobStatus> {
        self.status.lock().get(app).cloned()
    }

    /// Recompute every profile of `app` under `strategy`, in the background.
    pub fn start_recompute(
        self: &Arc<Self>,
        profiles: Profiles,
        app: String,
        strategy: Arc<Versioned>,
    ) -> tokio::task::JoinHandle<()> {
        self.status.lock().insert(
            app.clone(),
            JobStatus {
                strategy_version: strategy.version,
                state: JobState::Running,
                stats: RecomputeStats::default(),
                started_at: now_ms(),
                finished_at: None,
                error: None,
            },
        );
        let jobs = Arc::clone(self);
        tokio::spawn(async move {
            let version = strategy.version;
            let update = |stats: &RecomputeStats| {
                if let Some(s) = jobs.status.lock().get_mut(&app)
                    && s.strategy_version == version
                {
                    s.stats = stats.clone();
                }
            };
            let result = profiles
                .recompute_all(&app, &strategy, Source::Aggregates, update)
                .await;
            let mut all = jobs.status.lock();
            let Some(s) = all.get_mut(&app) else { return };
            if s.strategy_version != version {
                return; // A newer job owns the slot.
            }
            s.finished_at = Some(now_ms());
            match result {
                Ok(stats) => {
                    s.stats = stats;
                    s.state = JobState::Done;
                }
                Err(e) => {
                    tracing::error!(%app, error = %e, "profile recompute failed");
                    s.state = JobState::Failed;
                    s.error = Some(e.to_string());
                }
            }
        })
    }
}
