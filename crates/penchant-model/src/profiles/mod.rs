//! A user's profile: scores per facet and value, computed from their counted events by a
//! strategy ([`scoring`]), and the state that lets a batch of events update it ([`state`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub mod scoring;
pub mod state;

/// Scores per facet and value, 1..20.
pub type Scores = BTreeMap<String, BTreeMap<String, u32>>;
/// A user's profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Profile {
    pub user_token: String,
    /// The user's latest counted event, in ms.
    pub last_event_at: Option<i64>,
    pub scores: Scores,
    /// How many of the user's events name items that have no catalog record yet: they count
    /// once the records are written (the engine's `events::waiting`). Set when a profile is read.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub waiting_events: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
