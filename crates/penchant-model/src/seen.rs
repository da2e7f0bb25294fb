//! Seen filters' settings as an app sets them (`PUT /1/seen/settings`), their checks, and what a
//! user's filter tells. The engine's `seen` keeps the filters.

use penchant_bloom::{RotatingFilter, keys_per_partition};
use serde::{Deserialize, Serialize};

use crate::EngineError;
use crate::Result;
use crate::days::DAY_MS;
use crate::events::EventType;
use crate::tables::MAX_HIDE_DAYS;

/// Most objectIDs in one call.
pub const MAX_IDS_PER_CALL: usize = 100_000;

/// An app's seen-filter settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SeenSettings {
    /// Bits per generation: a multiple of 512, from 512 to 2^30. New filters take a change;
    /// existing ones keep their size until deleted.
    #[serde(default = "default_bits")]
    pub filter_bits: u64,
    /// The false-positive rate a generation is allowed before it rotates, in (0, 1).
    #[serde(default = "default_error_rate")]
    pub error_rate: f64,
    /// Which events mark their objectIDs as seen: by default every type, so that what a user
    /// viewed, clicked or bought stays out of their recommendations (a shop selling
    /// consumables that should come back narrows it).
    #[serde(default = "default_event_types")]
    pub event_types: Vec<EventType>,
    /// Event names that say "not for me" (e.g. `Not Interested`): such an event is not stored
    /// as an interaction; it hides its objectIDs from the user's recommendations for
    /// `hideDays` days.
    #[serde(default)]
    pub negative_event_names: Vec<String>,
    /// How long a "not for me" hides an item, in days (1 to [`MAX_HIDE_DAYS`], default 30).
    #[serde(default = "default_hide_days")]
    pub hide_days: u32,
}

fn default_hide_days() -> u32 {
    30
}

fn default_bits() -> u64 {
    1 << 17
}

fn default_error_rate() -> f64 {
    0.01
}

fn default_event_types() -> Vec<EventType> {
    vec![EventType::Click, EventType::Conversion, EventType::View]
}

impl Default for SeenSettings {
    fn default() -> Self {
        Self {
            filter_bits: default_bits(),
            error_rate: default_error_rate(),
            event_types: default_event_types(),
            negative_event_names: Vec::new(),
            hide_days: default_hide_days(),
        }
    }
}

impl SeenSettings {
    /// Check the settings' limits, and that a key fits a generation.
    pub fn check(&self) -> Result<()> {
        let bad = |m: &str| Err(EngineError::Invalid(m.to_owned()));
        if self.filter_bits == 0
            || !self.filter_bits.is_multiple_of(512)
            || self.filter_bits > 1 << 30
        {
            return bad("filterBits must be a multiple of 512 between 512 and 1073741824");
        }
        if !(self.error_rate > 0.0 && self.error_rate < 1.0) {
            return bad("errorRate must be between 0 and 1 (exclusive)");
        }
        if !(1..=MAX_HIDE_DAYS).contains(&self.hide_days) {
            return bad("hideDays must be between 1 and 365");
        }
        if self.negative_event_names.len() > 100
            || self
                .negative_event_names
                .iter()
                .any(|n| n.is_empty() || n.len() > 64)
        {
            return bad("negativeEventNames: at most 100 names of 1 to 64 bytes");
        }
        self.capacity().map(|_| ())
    }

    /// Whether an event of this name says "not for me".
    pub fn is_negative(&self, event_name: &str) -> bool {
        self.negative_event_names.iter().any(|n| n == event_name)
    }

    /// Until when (ms) a "not for me" at `at` (ms) hides its items.
    pub fn hidden_until(&self, at: i64) -> i64 {
        at + i64::from(self.hide_days) * DAY_MS
    }

    /// Keys per generation.
    pub fn capacity(&self) -> Result<u64> {
        keys_per_partition(self.filter_bits / 8, self.error_rate)
            .map(|(keys, _)| keys)
            .map_err(|_| {
                EngineError::Invalid(
                    "filterBits is too small for errorRate: not one key fits".into(),
                )
            })
    }

    /// An empty filter of these settings.
    pub fn new_filter(&self) -> Result<RotatingFilter> {
        RotatingFilter::new(self.filter_bits / 8, self.capacity()?).map_err(invalid)
    }
}

/// What `GET /1/seen/users/{userToken}` tells.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SeenInfo {
    pub user_token: String,
    pub filter_bits: u64,
    pub probes: u32,
    /// Keys per generation before it rotates.
    pub capacity: u64,
    /// Keys in the current generation.
    pub keys: u64,
    /// Whether a previous generation is kept.
    pub rotated: bool,
    pub fill_ratio: f64,
    pub estimated_error_rate: f64,
}

fn invalid(e: impl std::fmt::Display) -> EngineError {
    EngineError::Invalid(e.to_string())
}
