//! A/B tests as the domain has them: a test's definition and variants, its status over time, the
//! stable split of users between its variants, and the checks of what a variant applies. The
//! engine's `abtests` stores them, assigns users and tallies results.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::recommend::request::{Model, RecommendRequest, names_learned};
use crate::{EngineError, Result};

/// The longest test name.
pub const MAX_NAME_CHARS: usize = 256;

/// What a variant changes in the answers of its index: the parameters a re-ranking or
/// Recommend request could carry, applied over the request's own.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VariantParams {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enable_personalization: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub personalization_impact: Option<u32>,
    /// A named strategy (kept by name by the engine): profiles computed with its weights.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub personalization_strategy: Option<String>,
    /// Recommend: the model that answers instead of the one asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Recommend: the queue `recommended-for-you` reads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// Recommend: the vector space the vector models read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub space: Option<String>,
    /// Recommend and re-ranking: `learned` orders the hits by the index's learned ranker.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ranker: Option<String>,
}

/// One side of a test.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Variant {
    pub index: String,
    pub traffic_percentage: u32,
    #[serde(default)]
    pub description: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_search_parameters: Option<VariantParams>,
}

/// A test as asked for (`POST /2/abtests`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NewVariant {
    pub index: String,
    pub traffic_percentage: i64,
    #[serde(default)]
    pub description: Option<String>,
    /// Parsed apart, so that an unknown parameter is named with its variant.
    #[serde(default)]
    pub custom_search_parameters: Option<Value>,
}

/// A test as asked for, its end in ms.
#[derive(Debug, Clone, PartialEq)]
pub struct NewTest {
    pub name: String,
    pub variants: Vec<NewVariant>,
    pub end_at: i64,
}

/// A test.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AbTest {
    pub id: u32,
    pub name: String,
    pub variants: Vec<Variant>,
    pub created_at: i64,
    pub updated_at: i64,
    pub end_at: i64,
    pub stopped_at: Option<i64>,
}

/// Where a test stands (Algolia's values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Active,
    Stopped,
    Expired,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Active => "active",
            Status::Stopped => "stopped",
            Status::Expired => "expired",
        }
    }
}

impl AbTest {
    /// The index both variants are on.
    pub fn index(&self) -> &str {
        &self.variants[0].index
    }

    pub fn status(&self, now: i64) -> Status {
        match self.stopped_at {
            Some(_) => Status::Stopped,
            None if now >= self.end_at => Status::Expired,
            None => Status::Active,
        }
    }

    /// When it stopped counting: its stop, or its planned end.
    pub fn ended_at(&self) -> i64 {
        self.stopped_at.map_or(self.end_at, |s| s.min(self.end_at))
    }

    /// Whether an event at `at` (ms) counts: from the start to the end, both included.
    pub fn counts_at(&self, at: i64) -> bool {
        (self.created_at..=self.ended_at()).contains(&at)
    }

    /// The user's variant (0 for A, 1 for B): the same on every node, for the whole test.
    pub fn variant_of(&self, user: &str) -> usize {
        let bucket =
            xxhash_rust::xxh3::xxh3_64_with_seed(user.as_bytes(), u64::from(self.id)) % 100;
        usize::from(bucket >= u64::from(self.variants[0].traffic_percentage))
    }
}

/// A user's place in a running test: what an answer applies and reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    pub test: u32,
    /// 0 for A, 1 for B (`abTestVariantID` is one more).
    pub variant: usize,
    pub params: VariantParams,
}

impl VariantParams {
    /// A Recommend request with these parameters over its own; an impact above 0 or a strategy
    /// turns personalization on unless `enablePersonalization` says otherwise.
    pub fn over(&self, request: &RecommendRequest) -> RecommendRequest {
        let mut out = request.clone();
        let params = &mut out.query_parameters;
        // A variant that sets an impact or a strategy personalizes (the models other than
        // recommended-for-you do not by default), unless it says otherwise.
        let personalizes = self
            .personalization_impact
            .map(|i| i > 0)
            .or(self.personalization_strategy.as_ref().map(|_| true));
        if let Some(on) = self.enable_personalization.or(personalizes) {
            params.enable_personalization = Some(on);
        }
        if let Some(impact) = self.personalization_impact {
            params.personalization_impact = Some(i64::from(impact));
        }
        if let Some(name) = &self.personalization_strategy {
            params.personalization_strategy = Some(name.clone());
        }
        if let Some(model) = &self.model {
            out.model = model.clone();
        }
        if let Some(queue) = &self.queue {
            out.queue = Some(queue.clone());
        }
        if let Some(space) = &self.space {
            out.space = Some(space.clone());
        }
        if let Some(ranker) = &self.ranker {
            out.ranker = Some(ranker.clone());
        }
        out
    }
}

fn invalid<T>(message: impl Into<String>) -> Result<T> {
    Err(EngineError::Invalid(message.into()))
}

/// A variant's parameters, checked alone (the engine checks the names they give exist).
pub fn variant_params(i: usize, given: Option<Value>) -> Result<Option<VariantParams>> {
    let Some(given) = given else {
        return Ok(None);
    };
    let params: VariantParams = serde_json::from_value(given).map_err(|e| {
        EngineError::Invalid(format!(
            "variants[{i}].customSearchParameters: {e} (Penchant applies enablePersonalization, \
             personalizationImpact, personalizationStrategy, ranker, and for Recommend model, \
             queue, space)"
        ))
    })?;
    if params.personalization_impact.is_some_and(|p| p > 100) {
        return invalid(format!(
            "variants[{i}].customSearchParameters.personalizationImpact must be between 0 and 100"
        ));
    }
    if let Some(model) = &params.model {
        Model::parse(model).map_err(|e| {
            EngineError::Invalid(format!("variants[{i}].customSearchParameters.model: {e}"))
        })?;
    }
    names_learned(params.ranker.as_deref())
        .map_err(|e| EngineError::Invalid(format!("variants[{i}].customSearchParameters.{e}")))?;
    Ok(Some(params))
}
