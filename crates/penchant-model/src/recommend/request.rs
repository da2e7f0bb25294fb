//! A Recommend call: its models, its requests and their parameters, and their limits.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::filters::Filter;
use crate::{EngineError, Result};

/// Algolia's Recommend models, and Penchant's `recommended-for-you`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Model {
    TrendingItems,
    TrendingFacets,
    BoughtTogether,
    RelatedProducts,
    LookingSimilar,
    RecommendedForYou,
}

impl Model {
    pub const ALL: [Model; 6] = [
        Model::TrendingItems,
        Model::TrendingFacets,
        Model::BoughtTogether,
        Model::RelatedProducts,
        Model::LookingSimilar,
        Model::RecommendedForYou,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Model::TrendingItems => "trending-items",
            Model::TrendingFacets => "trending-facets",
            Model::BoughtTogether => "bought-together",
            Model::RelatedProducts => "related-products",
            Model::LookingSimilar => "looking-similar",
            Model::RecommendedForYou => "recommended-for-you",
        }
    }

    pub fn parse(name: &str) -> Result<Self> {
        Model::ALL
            .into_iter()
            .find(|m| m.name() == name)
            .ok_or_else(|| {
                let names: Vec<&str> = Model::ALL.iter().map(|m| m.name()).collect();
                EngineError::Invalid(format!(
                    "model '{name}' is not one of: {}",
                    names.join(", ")
                ))
            })
    }
}

/// The query parameters Recommend takes; any other is refused (400, naming it), never
/// ignored.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Params {
    pub filters: Option<String>,
    pub facet_filters: Option<Value>,
    pub numeric_filters: Option<Value>,
    /// Records matching these come first (the engine's `recommend::personal`).
    pub optional_filters: Option<Value>,
    pub user_token: Option<String>,
    /// Re-rank the model's hits by the user's profile (the engine's `recommend::personal`;
    /// `recommended-for-you` does unless this is `false`).
    pub enable_personalization: Option<bool>,
    /// 0 to 100 (the strategy's by default).
    pub personalization_impact: Option<i64>,
    /// Hits returned, 1 to [`MAX_RECOMMENDATIONS`], at most `maxRecommendations`.
    pub hits_per_page: Option<i64>,
    /// Add each personalized hit's `_rankingInfo.personalization`.
    pub get_ranking_info: Option<bool>,
    /// Attributes of each hit's record to return (all by default; `objectID` always).
    pub attributes_to_retrieve: Option<Vec<String>>,
    /// Accepted, and changes nothing: Penchant keeps no search analytics.
    pub analytics: Option<bool>,
    /// Accepted, and changes nothing (as `analytics`).
    pub analytics_tags: Option<Vec<String>>,
    /// Return a `queryID` for the events that follow (it names the user's A/B test variant).
    pub click_analytics: Option<bool>,
    /// `false`: answer as if no A/B test ran on the index (default `true`).
    #[serde(rename = "enableABTest")]
    pub enable_ab_test: Option<bool>,
    /// Penchant: personalize with this named strategy's weights ([`crate::strategy`], kept by
    /// name by the engine).
    pub personalization_strategy: Option<String>,
}

impl Params {
    /// The request's filter, from `filters`, `facetFilters` and `numericFilters`; its errors
    /// named after `what` (the parameters' place in the request).
    pub fn filter(&self, what: &str) -> Result<Option<Filter>> {
        Filter::parse(
            self.filters.as_deref(),
            self.facet_filters.as_ref(),
            self.numeric_filters.as_ref(),
        )
        .map_err(|e| EngineError::Invalid(format!("{what}: {e}")))
    }
}

/// One request of a Recommend call.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecommendRequest {
    pub index_name: String,
    pub model: String,
    /// The lowest `_score` returned, 0 to 100 (required).
    pub threshold: Option<f64>,
    /// Hits wanted, 1 to [`MAX_RECOMMENDATIONS`] (default: that many).
    pub max_recommendations: Option<i64>,
    #[serde(rename = "objectID")]
    pub object_id: Option<String>,
    pub facet_name: Option<String>,
    pub facet_value: Option<String>,
    #[serde(default)]
    pub query_parameters: Params,
    pub fallback_parameters: Option<Params>,
    /// Penchant: the vector space `looking-similar`, `related-products` and
    /// `recommended-for-you` read (default: `als`, or for `looking-similar` the space of the
    /// index's uploaded vectors).
    pub space: Option<String>,
    /// Penchant: the queue `recommended-for-you` reads first (default `for-you`).
    pub queue: Option<String>,
    /// Penchant: `learned` puts the model's hits in the order of the index's learned ranker
    /// for the user (the engine's `recommend::serving`); `blend` (the default) keeps the
    /// model's own.
    pub ranker: Option<String>,
}

/// Whether a request names the learned ranker (`blend`, the default, or `learned`).
pub fn names_learned(ranker: Option<&str>) -> Result<bool> {
    match ranker {
        None | Some("blend") => Ok(false),
        Some("learned") => Ok(true),
        Some(other) => Err(EngineError::Invalid(format!(
            "ranker: `{other}` is not a ranker (blend or learned)"
        ))),
    }
}

/// Most hits a request returns.
pub const MAX_RECOMMENDATIONS: usize = 30;
/// Most requests in one Recommend call (Algolia documents none): each is answered in turn, so
/// 10,000 took seconds and megabytes; a page of recommendation carousels needs a handful.
pub const MAX_REQUESTS: usize = 100;
/// Whether a Recommend call may hold `n` requests (checked before they are parsed, too).
pub fn check_request_count(n: usize) -> Result<()> {
    if n > MAX_REQUESTS {
        return Err(EngineError::Invalid(format!(
            "requests: {n} requests in one call, the limit is {MAX_REQUESTS}"
        )));
    }
    Ok(())
}

/// The queue `recommended-for-you` reads unless a request names one.
pub const DEFAULT_QUEUE: &str = "for-you";
