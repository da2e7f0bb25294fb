//! Query-time personalization: re-ranking hits with a user's profile, and the profile as
//! Algolia `optionalFilters` for other search engines.
//!
//! For hits in their original order (position `i` of `n`), each hit gets
//! - `rankingScore = round(100 × (n − i) / n)`: the original relevance, 100 for the first hit;
//! - `filtersScore`: the sum of the user's scores (1..20) of every facet value the record has;
//! - `score = ((100 − impact) × rankingScore + impact × filtersNorm) / 100`, where `filtersNorm`
//!   scales `filtersScore` to 0..100 against the best hit and `impact` is the strategy's
//!   `personalizationImpact`.
//!
//! Hits are sorted by `score`, then by original position: an impact of 0 keeps the original
//! order, 100 orders by the profile alone (ties keep their original order).

use serde::Serialize;

use crate::catalog::{Record, facet_values};
use crate::profiles::Scores;

/// What re-ranking says about one hit (Algolia's `_rankingInfo.personalization`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Personalization {
    pub filters_score: u32,
    pub ranking_score: u32,
    pub score: u32,
}

/// The order of `records` (given in their original order) once personalized, with each one's
/// scores: `(original position, scores)`, best first.
pub fn rerank(records: &[Record], scores: &Scores, impact: u32) -> Vec<(usize, Personalization)> {
    let n = records.len().max(1) as u64;
    let impact = u64::from(impact.min(100));
    let filters: Vec<u32> = records
        .iter()
        .map(|r| {
            facet_values(r)
                .iter()
                .filter_map(|(facet, value)| scores.get(facet)?.get(value))
                .sum()
        })
        .collect();
    let best = u64::from(filters.iter().copied().max().unwrap_or(0));
    let mut ranked: Vec<(usize, Personalization)> = filters
        .iter()
        .enumerate()
        .map(|(i, &f)| {
            let ranking = (100 * (n - i as u64) + n / 2) / n;
            let norm = (100 * u64::from(f)).checked_div(best).unwrap_or(0);
            let score = ((100 - impact) * ranking + impact * norm) / 100;
            (
                i,
                Personalization {
                    filters_score: f,
                    ranking_score: ranking as u32,
                    score: score as u32,
                },
            )
        })
        .collect();
    ranked.sort_by(|a, b| b.1.score.cmp(&a.1.score).then(a.0.cmp(&b.0)));
    ranked
}

/// A facet value as Algolia filter syntax: quoted when it is not a plain word.
fn filter_value(value: &str) -> String {
    let plain = !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if plain {
        value.to_owned()
    } else {
        format!("\"{}\"", value.replace('\\', "\\\\").replace('"', "\\\""))
    }
}

/// The profile as Algolia `optionalFilters`, best scores first:
/// `["brand:Apple<score=20>", "category:\"Home & Garden\"<score=5>"]`.
pub fn optional_filters(scores: &Scores) -> Vec<String> {
    let mut all: Vec<(u32, &str, &str)> = scores
        .iter()
        .flat_map(|(facet, values)| {
            values
                .iter()
                .map(move |(v, s)| (*s, facet.as_str(), v.as_str()))
        })
        .collect();
    all.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)).then(a.2.cmp(b.2)));
    all.into_iter()
        .map(|(score, facet, value)| format!("{facet}:{}<score={score}>", filter_value(value)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn records() -> Vec<Record> {
        [
            json!({"objectID": "1", "brand": "Samsung"}),
            json!({"objectID": "2", "brand": "Apple", "color": "red"}),
            json!({"objectID": "3", "brand": "Nokia"}),
            json!({"objectID": "4", "brand": "Apple"}),
        ]
        .into_iter()
        .map(|v| v.as_object().unwrap().clone())
        .collect()
    }

    fn scores() -> Scores {
        serde_json::from_value(json!({"brand": {"Apple": 20, "Nokia": 5}, "color": {"red": 4}}))
            .unwrap()
    }

    fn order(impact: u32) -> Vec<usize> {
        rerank(&records(), &scores(), impact)
            .into_iter()
            .map(|(i, _)| i)
            .collect()
    }

    #[test]
    fn impact_moves_from_original_order_to_profile_order() {
        assert_eq!(order(0), [0, 1, 2, 3], "impact 0 keeps the original order");
        assert_eq!(order(100), [1, 3, 2, 0], "impact 100: 24, 20, 5, 0");
        assert_eq!(order(50), [1, 3, 0, 2]);
        let ranked = rerank(&records(), &scores(), 100);
        assert_eq!(
            ranked[0].1,
            Personalization {
                filters_score: 24,
                ranking_score: 75,
                score: 100
            }
        );
        assert!(
            rerank(&records(), &Scores::new(), 100)
                .iter()
                .map(|(i, _)| *i)
                .eq(0..4)
        );
    }

    #[test]
    fn optional_filters_syntax() {
        let mut s = scores();
        s.entry("category".into())
            .or_default()
            .insert("Home & Garden".into(), 5);
        assert_eq!(
            optional_filters(&s),
            [
                "brand:Apple<score=20>",
                "brand:Nokia<score=5>",
                "category:\"Home & Garden\"<score=5>",
                "color:red<score=4>"
            ]
        );
    }
}
