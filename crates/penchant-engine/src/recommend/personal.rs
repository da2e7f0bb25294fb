//! Personalized Recommend answers: a model's hits re-ranked by the user's profile with the
//! formula that re-ranks search results ([`crate::rerank`]), and `optionalFilters` boosts.
//!
//! A request that personalizes (`enablePersonalization` with a `userToken`, or
//! `recommended-for-you` unless `enablePersonalization` is `false`) or boosts
//! (`optionalFilters`) draws a pool of [`POOL_FACTOR`] times the hits it wants (at least
//! [`MIN_POOL`]) from the model, in the model's order; the pool is re-ranked with the profile
//! at `personalizationImpact` (the strategy's by default), then ordered by boost — the sum of
//! the scores of the optional filters a record matches, as Algolia's filters criterion comes
//! first — with ties kept in personalized order; the best `hitsPerPage` are returned.

use serde_json::Value;

use super::{Params, RecommendHit};
use crate::catalog::{Record, facet_values};
use crate::profiles::Scores;
use crate::rerank::{self, Personalization};
use crate::{EngineError, Result};

/// How many times the hits wanted a personalized request draws from its model.
pub const POOL_FACTOR: usize = 3;
/// The smallest pool.
pub const MIN_POOL: usize = 30;

/// How a request's hits are re-ordered.
#[derive(Debug, Clone, Default)]
pub struct Personal {
    /// The user's profile (empty: none, or personalization off).
    pub scores: Scores,
    pub impact: u32,
    /// `(facet, value, score)` of each optional filter.
    pub boosts: Vec<(String, String, u32)>,
}

impl Personal {
    /// Whether it changes anything.
    pub fn active(&self) -> bool {
        (self.impact > 0 && !self.scores.is_empty()) || !self.boosts.is_empty()
    }

    /// The pool to draw for `wanted` hits.
    pub fn pool(&self, wanted: usize) -> usize {
        if self.active() {
            (wanted * POOL_FACTOR).max(MIN_POOL)
        } else {
            wanted
        }
    }

    /// `hits` (the model's, best first) re-ordered, the best `wanted` of them, each item with
    /// its personalization scores.
    pub fn apply(&self, hits: Vec<RecommendHit>, wanted: usize) -> Vec<RecommendHit> {
        if !self.active() {
            let mut hits = hits;
            hits.truncate(wanted);
            return hits;
        }
        let records: Vec<Record> = hits
            .iter()
            .map(|h| match h {
                RecommendHit::Item { record, .. } => record.clone(),
                RecommendHit::Facet { .. } => Record::new(),
            })
            .collect();
        let order = rerank::rerank(&records, &self.scores, self.impact);
        let boosts: Vec<u32> = records.iter().map(|r| self.boost(r)).collect();
        let mut order: Vec<(usize, Personalization)> = order;
        // Stable: equal boosts keep their personalized order.
        order.sort_by_key(|(i, _)| std::cmp::Reverse(boosts[*i]));
        let mut slots: Vec<Option<RecommendHit>> = hits.into_iter().map(Some).collect();
        order
            .into_iter()
            .take(wanted)
            .filter_map(|(i, p)| {
                let mut hit = slots[i].take()?;
                if let RecommendHit::Item {
                    personalization, ..
                } = &mut hit
                {
                    *personalization = Some(p);
                }
                Some(hit)
            })
            .collect()
    }

    /// The sum of the scores of the optional filters `record` matches.
    fn boost(&self, record: &Record) -> u32 {
        if self.boosts.is_empty() {
            return 0;
        }
        let values = facet_values(record);
        self.boosts
            .iter()
            .filter(|(f, v, _)| values.iter().any(|(rf, rv)| rf == f && rv == v))
            .map(|(_, _, s)| *s)
            .sum()
    }
}

/// `personalizationImpact`, checked.
pub fn impact(params: &Params) -> Result<Option<u32>> {
    match params.personalization_impact {
        None => Ok(None),
        Some(n) if (0..=100).contains(&n) => Ok(Some(n as u32)),
        Some(_) => Err(EngineError::Invalid(
            "queryParameters.personalizationImpact must be between 0 and 100".into(),
        )),
    }
}

/// `optionalFilters` as Algolia takes them — a string, or an array of strings and arrays of
/// strings (OR groups) — each `facet:value` with an optional `<score=N>` (1 by default).
pub fn optional_filters(value: Option<&Value>) -> Result<Vec<(String, String, u32)>> {
    let mut out = Vec::new();
    let Some(value) = value else {
        return Ok(out);
    };
    let mut add = |v: &Value| -> Result<()> {
        match v {
            Value::String(s) => {
                out.push(optional_filter(s)?);
                Ok(())
            }
            _ => Err(invalid("each optional filter must be a string")),
        }
    };
    match value {
        Value::String(s) => {
            for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                add(&Value::String(part.to_owned()))?;
            }
        }
        Value::Array(items) => {
            for item in items {
                match item {
                    Value::Array(group) => group.iter().try_for_each(&mut add)?,
                    other => add(other)?,
                }
            }
        }
        _ => return Err(invalid("must be a string or an array")),
    }
    Ok(out)
}

fn invalid(what: &str) -> EngineError {
    EngineError::Invalid(format!("queryParameters.optionalFilters: {what}"))
}

/// One `facet:value<score=N>`.
fn optional_filter(s: &str) -> Result<(String, String, u32)> {
    let (filter, score) = match s.trim().strip_suffix('>') {
        Some(rest) => {
            let (filter, score) = rest
                .rsplit_once("<score=")
                .ok_or_else(|| invalid(&format!("`{s}`: a score is written <score=N>")))?;
            let score: u32 = score
                .parse()
                .map_err(|_| invalid(&format!("`{s}`: the score must be a whole number")))?;
            (filter, score)
        }
        None => (s.trim(), 1),
    };
    let (facet, value) = filter
        .split_once(':')
        .ok_or_else(|| invalid(&format!("`{s}` is not facet:value")))?;
    let unquote = |v: &str| {
        let v = v.trim();
        v.strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .map(|v| v.replace("\\\"", "\"").replace("\\\\", "\\"))
            .unwrap_or_else(|| v.to_owned())
    };
    let value = unquote(value);
    if value.starts_with('-') {
        return Err(invalid(&format!(
            "`{s}`: negative optional filters are not supported"
        )));
    }
    Ok((unquote(facet), value, score))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hit(id: &str, brand: &str) -> RecommendHit {
        let record = json!({"objectID": id, "brand": brand});
        RecommendHit::Item {
            record: record.as_object().unwrap().clone(),
            score: 50.0,
            personalization: None,
            learned: None,
        }
    }

    fn ids(hits: &[RecommendHit]) -> Vec<&str> {
        hits.iter()
            .map(|h| match h {
                RecommendHit::Item { record, .. } => record["objectID"].as_str().unwrap(),
                RecommendHit::Facet { .. } => "",
            })
            .collect()
    }

    #[test]
    fn optional_filters_parse_as_algolia_writes_them() {
        let got = optional_filters(Some(&json!([
            "brand:Apple<score=3>",
            ["color:red", "color:\"dark blue\""],
        ])))
        .unwrap();
        assert_eq!(
            got,
            vec![
                ("brand".into(), "Apple".into(), 3),
                ("color".into(), "red".into(), 1),
                ("color".into(), "dark blue".into(), 1),
            ]
        );
        assert_eq!(
            optional_filters(Some(&json!("brand:Sony"))).unwrap(),
            vec![("brand".into(), "Sony".into(), 1)]
        );
        for bad in [
            json!(3),
            json!(["brand"]),
            json!(["brand:-Apple"]),
            json!(["a:b<score=x>"]),
        ] {
            let e = optional_filters(Some(&bad)).unwrap_err().to_string();
            assert!(e.contains("optionalFilters"), "{e}");
        }
    }

    #[test]
    fn the_profile_reorders_the_pool_and_boosts_come_first() {
        let hits = vec![hit("g", "Google"), hit("s", "Samsung"), hit("a", "Apple")];
        let mut scores = Scores::new();
        scores.insert("brand".into(), [("Apple".to_owned(), 20)].into());
        let personal = Personal {
            scores,
            impact: 100,
            boosts: Vec::new(),
        };
        assert_eq!(ids(&personal.apply(hits.clone(), 2)), ["a", "g"]);
        // Impact 0: the model's order.
        let off = Personal {
            impact: 0,
            ..personal.clone()
        };
        assert_eq!(ids(&off.apply(hits.clone(), 3)), ["g", "s", "a"]);
        let boosted = Personal {
            boosts: vec![("brand".into(), "Samsung".into(), 1)],
            ..personal
        };
        assert_eq!(ids(&boosted.apply(hits, 3)), ["s", "a", "g"]);
    }
}
