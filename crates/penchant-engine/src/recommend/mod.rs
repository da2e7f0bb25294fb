//! Recommendations: Algolia's Recommend API over precomputed per-user queues, item-to-item
//! lists, trending counters and vectors.
//!
//! | part | what | where |
//! |---|---|---|
//! | [`trending`] | conversions and clicks per item and day, decayed | counted on ingest |
//! | [`related`] | co-interaction lists (`bought-together`, `related-products`) | built by the build job |
//! | [`queues`] | ranked per-user queues (the seed's backlog), peeked or popped | built per user or by the build job |
//! | [`filters`] | Algolia's `filters` / `facetFilters` / `numericFilters` over records | applied to every model's hits |
//! | [`build`] | the job: lists first, then every user's queues, resumable | one node at a time |
//! | [`learned`], [`ranker`] | a ranker learned from the history (LambdaMART over every source's candidates), and the job that learns it and writes the queues that name it | one node at a time |
//! | [`impressions`] | what tracked answers served (`clickAnalytics`), the ranker's examples once clicks come back | logged per answer |
//!
//! A model ranks candidates with scores in 0–100; [`Engine::recommendations`] walks them best
//! first, keeps those whose record exists (a deleted item never comes back), passes the filters
//! and the threshold, and returns the records. A model with nothing to say falls back to
//! trending items under the same filters (the zero-day model), then to the request's
//! `fallbackParameters`; each answer says which model answered.

pub mod build;

pub use penchant_model::recommend::filters;
pub mod impressions;
pub mod personal;
pub mod queues;
pub mod ranker;
pub mod related;
pub mod serving;
pub mod snapshot;
pub mod trending;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use penchant_vectors::Metric;
use serde::Serialize;

pub use self::queues::{QueueDefinition, Ranker, Source};
use crate::cache::TtlCache;
use crate::catalog::Record;
use crate::{Result, internal};
pub use penchant_model::recommend::filters::Filter;
pub use penchant_model::recommend::request::{
    DEFAULT_QUEUE, MAX_RECOMMENDATIONS, MAX_REQUESTS, Model, Params, RecommendRequest,
    check_request_count, names_learned,
};

/// Items with scores, best first.
pub type Ranked = Vec<(String, f32)>;

/// A ranked list as a cell: per item, its objectID's length (u16 LE), the objectID and the
/// score (f32 LE).
pub fn encode_ranked(items: &[(String, f32)]) -> Bytes {
    let mut out = Vec::with_capacity(items.iter().map(|(id, _)| id.len() + 6).sum());
    for (id, score) in items {
        // Its length would not fit its 16-bit prefix (and the list would read as corrupt): no
        // objectID is that long (`catalog::MAX_OBJECT_ID_BYTES`), so none is left out but one
        // stored before IDs were checked.
        if id.len() > usize::from(u16::MAX) {
            continue;
        }
        out.extend_from_slice(&(id.len() as u16).to_le_bytes());
        out.extend_from_slice(id.as_bytes());
        out.extend_from_slice(&score.to_le_bytes());
    }
    Bytes::from(out)
}

/// A ranked list from its cell.
pub fn decode_ranked(mut bytes: &[u8]) -> Result<Ranked> {
    let corrupt = || internal("corrupt ranked list", "cut short");
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let len = u16::from_le_bytes(
            bytes
                .get(..2)
                .ok_or_else(corrupt)?
                .try_into()
                .unwrap_or_default(),
        );
        let rest = &bytes[2..];
        let id = rest.get(..len as usize).ok_or_else(corrupt)?;
        let score = rest
            .get(len as usize..len as usize + 4)
            .ok_or_else(corrupt)?;
        let id = std::str::from_utf8(id).map_err(|e| internal("corrupt ranked list", e))?;
        out.push((
            id.to_owned(),
            f32::from_le_bytes(score.try_into().unwrap_or_default()),
        ));
        bytes = &rest[len as usize + 4..];
    }
    Ok(out)
}

/// Candidates a request's learned ranker orders (at least; more when the request needs them).
pub(crate) const LEARNED_POOL: usize = 100;

/// Hidden items a request draws extra candidates for (their places in the model's answer).
pub(crate) const MAX_HIDDEN_SKIPPED: usize = 100;
/// Candidates a request looks at before giving up on filling its hits.
pub(crate) const MAX_WALK: usize = 3000;
/// Items a trending-facets request sums over.
pub(crate) const FACET_ITEMS: usize = 1000;
/// Neighbours a vector model asks a space for.
pub(crate) const VECTOR_K: usize = 200;
/// Items a fallback reads from the catalog when no model has any.
pub(crate) const FALLBACK_SCAN: usize = 1000;
/// The space ALS trains by default.
pub(crate) const ALS_SPACE: &str = "als";

/// A hit: a record (with its `_score`), or a facet value of `trending-facets`.
#[derive(Debug, Clone, PartialEq)]
pub enum RecommendHit {
    Item {
        record: Record,
        score: f64,
        /// How the profile re-ranked it, when the request personalized.
        personalization: Option<crate::rerank::Personalization>,
        /// How the learned ranker scored it, when the request named it.
        learned: Option<LearnedScore>,
    },
    Facet {
        name: String,
        value: String,
        score: f64,
    },
}

/// What a learned ranker made of a hit ([`serving`]).
#[derive(Debug, Clone, PartialEq)]
pub struct LearnedScore {
    /// The model's score (its order: higher first).
    pub score: f64,
    /// The hit's row of features, named as [`offline::FEATURES`].
    pub features: Vec<f32>,
    /// With `getRankingInfo`: the part of the score no feature moved, and each feature's
    /// part ([`penchant_rank::Model::contributions`]; `None` for a model stored before
    /// its splits kept their values).
    pub contributions: Option<(f64, Vec<f64>)>,
}

/// The answer to one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Recommendations {
    pub hits: Vec<RecommendHit>,
    /// The model that answered: the one asked, `trending-items` (the zero-day fallback) or
    /// `fallbackParameters`.
    pub answered_by: &'static str,
    /// What the model read: `queue`, `learned-queue` (a queue the learned ranker ordered),
    /// `vectors`, `similar-to-liked`, `co-interaction`, `co-interaction+vectors`, `trending`,
    /// `catalog`, or `none`.
    pub source: &'static str,
    /// When what answered was built (ms): the user's queue, the co-interaction lists' build,
    /// the space's training (the older of two for a blend); trending counts are live (now).
    /// `None` for the catalog, for uploaded vectors, and for no answer.
    pub built_at: Option<i64>,
    /// The version of the learned ranker that ordered the hits (source `learned-queue`).
    pub ranker_version: Option<i64>,
}

/// A model's candidates, best first (scores 0–100), what it read, and when that was built.
pub(crate) type Candidates = (Vec<(String, f64)>, &'static str, Option<i64>);

/// The older of two build times (a blend is as fresh as its stalest part).
pub(crate) fn older(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// What a queue rebuild wrote.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rebuilt {
    pub items: usize,
    /// Candidates left out as seen by the user.
    pub seen: usize,
    /// Candidates left out as missing from the catalog.
    pub missing: usize,
}

/// A request's constraints on candidates.
pub(crate) struct Select<'a> {
    pub(crate) index: &'a str,
    /// Whose seen items are left out.
    pub(crate) user: Option<&'a str>,
    pub(crate) filter: Option<&'a Filter>,
    pub(crate) exclude: &'a HashSet<String>,
    pub(crate) threshold: f64,
    pub(crate) max: usize,
}

/// The recommendation state of a node.
#[derive(Debug)]
pub struct Recommend {
    pub(crate) queues: queues::Queues,
    /// This node's trending counts, not yet flushed.
    pub(crate) trends: Arc<trending::Trends>,
    pub(crate) trending: TtlCache<(String, String), Arc<Ranked>>,
    /// Trending facet values, by (app, index, facet).
    pub(crate) facets: TtlCache<(String, String, String), Arc<Ranked>>,
    pub(crate) builds: crate::jobs::Runner<build::Build>,
    pub(crate) rankers: crate::jobs::Runner<ranker::Rank>,
    /// Queues (app, queue, user) being rebuilt in the background because they were stale.
    pub(crate) rebuilding: parking_lot::Mutex<HashSet<(String, String, String)>>,
    /// Learned rankers served, by (app, index): what was found, for the caches' time to live
    /// ([`serving`]), and the snapshots loaded (kept while their version is the newest).
    pub(crate) serving: TtlCache<(String, String), Option<Arc<serving::Serving>>>,
    pub(crate) loaded: parking_lot::Mutex<HashMap<(String, String), Arc<serving::Serving>>>,
}

impl Recommend {
    pub fn new(
        store: Arc<dyn penchant_store::Store>,
        ttl: Duration,
        clock: crate::clock::Clock,
        runtime: &crate::jobs::Runtime,
    ) -> Self {
        Self {
            trends: Arc::new(trending::Trends::new(store.clone())),
            queues: queues::Queues::new(store),
            trending: TtlCache::new(1024, ttl, clock.clone()),
            facets: TtlCache::new(1024, ttl, clock.clone()),
            builds: runtime.runner(),
            rankers: runtime.runner(),
            rebuilding: Default::default(),
            serving: TtlCache::new(256, ttl, clock),
            loaded: Default::default(),
        }
    }

    pub fn cache_stats(&self) -> crate::cache::CacheStats {
        self.trending.stats()
    }
}

/// The first [`MAX_WALK`] of a ranked list, scores as percents of the best one, borrowed.
pub(crate) fn percents(items: &Ranked) -> Vec<(&str, f64)> {
    let best = items
        .first()
        .map_or(1.0, |(_, s)| f64::from(*s))
        .max(f64::MIN_POSITIVE);
    items
        .iter()
        .take(MAX_WALK)
        .map(|(id, s)| {
            (
                id.as_str(),
                (f64::from(*s) / best * 100.0).clamp(0.0, 100.0),
            )
        })
        .collect()
}

/// Scores as percents of the best one.
pub(crate) fn percent_of_best(items: Ranked) -> Vec<(String, f64)> {
    let best = items
        .first()
        .map_or(1.0, |(_, s)| f64::from(*s))
        .max(f64::MIN_POSITIVE);
    items
        .into_iter()
        .map(|(id, s)| (id, (f64::from(s) / best * 100.0).clamp(0.0, 100.0)))
        .collect()
}

/// A vector hit's score as a percent: cosine similarity ×100; other metrics relative to the
/// best hit.
pub(crate) fn vector_percents(
    metric: Metric,
    hits: Vec<crate::vectors::Hit>,
) -> Vec<(String, f64)> {
    match metric {
        Metric::Cosine => hits
            .into_iter()
            .map(|h| (h.object_id, (f64::from(h.score) * 100.0).clamp(0.0, 100.0)))
            .collect(),
        Metric::Euclidean => hits
            .into_iter()
            .map(|h| {
                (
                    h.object_id,
                    100.0 / (1.0 + f64::from(-h.score).max(0.0).sqrt()),
                )
            })
            .collect(),
        _ => percent_of_best(hits.into_iter().map(|h| (h.object_id, h.score)).collect()),
    }
}

/// Round a score to two decimals, as Algolia prints them.
pub(crate) fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// When a space's vectors were trained (ms); `None` for uploaded vectors.
pub(crate) fn trained_at(space: &crate::vectors::Space) -> Option<i64> {
    space.training.as_ref().map(|t| t.at)
}

pub(crate) fn hits_ranked(hits: Vec<crate::vectors::Hit>) -> Ranked {
    hits.into_iter().map(|h| (h.object_id, h.score)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranked_lists_round_trip_and_cut_ones_fail() {
        let items: Ranked = vec![
            ("a".into(), 1.5),
            ("bé".into(), -0.25),
            (String::new(), 0.0),
        ];
        let bytes = encode_ranked(&items);
        assert_eq!(decode_ranked(&bytes).unwrap(), items);
        assert!(decode_ranked(&bytes[..bytes.len() - 1]).is_err());
        assert!(decode_ranked(&[]).unwrap().is_empty());
        // Issue 29: an objectID longer than its 16-bit length prefix was written with a cut
        // length, and the whole list read as corrupt (a 500) until a rebuild. It is left out.
        let long: Ranked = vec![
            ("a".into(), 1.0),
            ("x".repeat(70_000), 0.5),
            ("b".into(), 0.25),
        ];
        let bytes = encode_ranked(&long);
        assert_eq!(
            decode_ranked(&bytes).unwrap(),
            vec![("a".to_owned(), 1.0), ("b".to_owned(), 0.25)]
        );
    }

    #[test]
    fn models_parse_by_their_algolia_names() {
        for model in Model::ALL {
            assert_eq!(Model::parse(model.name()).unwrap(), model);
        }
        let err = Model::parse("nope").unwrap_err().to_string();
        assert!(
            err.contains("trending-items") && err.contains("recommended-for-you"),
            "{err}"
        );
    }

    #[test]
    fn percents_are_of_the_best() {
        let p = percent_of_best(vec![("a".into(), 4.0), ("b".into(), 1.0)]);
        assert_eq!(p, vec![("a".into(), 100.0), ("b".into(), 25.0)]);
        assert!(percent_of_best(Vec::new()).is_empty());
    }
}
