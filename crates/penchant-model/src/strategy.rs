//! The personalization strategy of an app: which events count and how much, which facets count
//! and how much, and how strongly results are re-ranked. Algolia's
//! `GET/POST /1/strategies/personalization` body, and its checks.

use serde::{Deserialize, Serialize};

use crate::events::EventType;
use crate::{EngineError, Result};

pub const MAX_EVENTS_SCORING: usize = 15;
pub const MAX_FACETS_SCORING: usize = 15;
/// The longest name of a named strategy, in bytes.
pub const MAX_NAME_BYTES: usize = 64;

/// How much one event counts.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EventScoring {
    pub event_name: String,
    pub event_type: EventType,
    /// 1 to 100; or -100 to -1 for an event that says "not for me": its facets' values lose
    /// weight (a value whose sum falls to 0 or below leaves the profile).
    pub score: i32,
}

/// How much one facet counts.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FacetScoring {
    pub facet_name: String,
    pub score: u32,
}

/// A personalization strategy.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Strategy {
    pub events_scoring: Vec<EventScoring>,
    pub facets_scoring: Vec<FacetScoring>,
    pub personalization_impact: u32,
}

impl Strategy {
    /// Check the limits (the JSON shape is checked when it is parsed).
    pub fn check(&self) -> Result<()> {
        let invalid = |m: String| Err(EngineError::Invalid(m));
        if self.events_scoring.len() > MAX_EVENTS_SCORING {
            return invalid(format!(
                "eventsScoring can contain at most {MAX_EVENTS_SCORING} events"
            ));
        }
        if self.facets_scoring.len() > MAX_FACETS_SCORING {
            return invalid(format!(
                "facetsScoring can contain at most {MAX_FACETS_SCORING} facets"
            ));
        }
        for e in &self.events_scoring {
            if e.event_name.is_empty() || e.event_name.len() > 64 {
                return invalid("eventsScoring.eventName must be 1 to 64 characters".into());
            }
            if !(1..=100).contains(&e.score.abs()) {
                return invalid(format!(
                    "eventsScoring.score of `{}` must be between 1 and 100 (or -100 and -1, \
                     for an event that lowers its facets' weight)",
                    e.event_name
                ));
            }
        }
        for f in &self.facets_scoring {
            if f.facet_name.is_empty() {
                return invalid("facetsScoring.facetName must not be empty".into());
            }
            if !(1..=100).contains(&f.score) {
                return invalid(format!(
                    "facetsScoring.score of `{}` must be between 1 and 100",
                    f.facet_name
                ));
            }
        }
        if self.personalization_impact > 100 {
            return invalid("personalizationImpact must be between 0 and 100".into());
        }
        let mut seen = std::collections::HashSet::new();
        for e in &self.events_scoring {
            if !seen.insert((e.event_type, e.event_name.as_str())) {
                return invalid(format!(
                    "eventsScoring lists the {} event `{}` twice",
                    e.event_type.as_str(),
                    e.event_name
                ));
            }
        }
        let mut seen = std::collections::HashSet::new();
        for f in &self.facets_scoring {
            if !seen.insert(f.facet_name.as_str()) {
                return invalid(format!("facetsScoring lists `{}` twice", f.facet_name));
            }
        }
        Ok(())
    }

    /// The weight of an event, if the strategy counts it.
    pub fn event_score(&self, event_type: EventType, event_name: &str) -> Option<i32> {
        self.events_scoring
            .iter()
            .find(|e| e.event_type == event_type && e.event_name == event_name)
            .map(|e| e.score)
    }
}

/// A strategy as stored, with its version (unique per save).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Versioned {
    pub strategy: Strategy,
    pub version: i64,
}
