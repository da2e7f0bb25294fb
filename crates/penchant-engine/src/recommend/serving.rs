//! A learned ranker at request time: a Recommend answer or a re-ranking that names
//! `"ranker": "learned"` is put in the order the index's ranker gives its hits for the user.
//!
//! The features are the training's own ([`offline::rows_of`], one function for both): the item
//! side — ALS item factors, co-interaction and transition lists, popularity, first and last
//! days, facet values, trending — is a snapshot the ranker job stores beside the model it
//! learned, made from the same history the job ranks its queues from ([`Snapshot`]); the user
//! side is read per request from the user's events in the retention window, weighed as the
//! job weighed them: their items newest first, the day of the last one, their facet
//! affinities, and their ALS vector folded in under the snapshot's item factors
//! ([`als::fold_in`], the exact solve of ALS's user step — the impressions' later groups are
//! described the same way).
//!
//! What differs from the job's own queues: trending is the snapshot's last day's for every
//! user (the job reads it as of each user's last day), items the snapshot never saw (added
//! since) read as items without events, and events since the snapshot count on the user's
//! side only.
//!
//! Stored in table `rankers`, family `s`: the header (cell `s:head`, JSON: the model version,
//! the history's weights and ALS settings, how many chunks) in the index's ranker row, and the
//! body in rows `app 0 · index 0 · chunk` (cell `s:data`, ≤ [`CHUNK`] bytes each), every cell
//! stamped with the model version; the header is written last, so a reader finds a whole
//! snapshot or the one before.

use bytes::Bytes;
use foldhash::{HashMap, HashSet, HashSetExt};
use penchant_rank::{Forest, Model};
use penchant_vectors::als::{self, AlsConfig};
use serde::{Deserialize, Serialize};

use super::LearnedScore;
use super::snapshot::Snapshot;
use crate::keys;
use crate::vectors::training::Weights;
use penchant_learn::offline::{self, UserSide};

pub(crate) const HEAD: &[u8] = b"head";
pub(crate) const DATA: &[u8] = b"data";
/// The most bytes of one chunk's cell.
pub(crate) const CHUNK: usize = 4 << 20;

/// The snapshot's header.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Head {
    pub(crate) version: i64,
    pub(crate) chunks: u32,
    pub(crate) bytes: u64,
    pub(crate) weights: Weights,
    pub(crate) als: AlsConfig,
}

/// A ranker ready to serve: its snapshot, model and version.
#[derive(Debug)]
pub struct Serving {
    pub version: i64,
    pub per_source: usize,
    pub(crate) snapshot: Snapshot,
    pub(crate) rows: HashMap<String, u32>,
    pub(crate) gramian: Vec<f32>,
    pub(crate) model: Model,
    pub(crate) forest: Forest,
}

/// One user as a served ranker sees them.
#[derive(Debug, Clone, PartialEq)]
pub struct Standing {
    pub(crate) seen: Vec<u32>,
    pub(crate) recent: Vec<u32>,
    pub(crate) vector: Vec<f32>,
    pub(crate) today: i64,
    pub(crate) affinity: HashMap<u32, f32>,
}

impl Standing {
    pub(crate) fn side(&self) -> UserSide<'_> {
        UserSide {
            seen: &self.seen,
            recent: &self.recent,
            vector: &self.vector,
            today: self.today,
            affinity: Some(&self.affinity),
        }
    }
}

/// Candidates in a served ranker's order.
#[derive(Debug, Clone, PartialEq)]
pub struct Scored {
    /// Each candidate's score by the model, in the candidates' order.
    pub scores: Vec<f64>,
    /// Each candidate's row of [`offline::FEATURES`], one after another in the candidates'
    /// order.
    pub rows: Vec<f32>,
}

impl Scored {
    /// Candidate `k`'s row of [`offline::FEATURES`].
    pub fn features(&self, k: usize) -> &[f32] {
        let width = offline::FEATURES.len();
        &self.rows[k * width..(k + 1) * width]
    }

    /// `items` (the candidates scored, in their order) best first by their scores, each with
    /// its [`LearnedScore`] (its features' contributions when `explain`). Stable: equal scores
    /// keep the items' order.
    pub(crate) fn in_order<T>(
        self,
        serving: &Serving,
        items: Vec<T>,
        explain: bool,
    ) -> Vec<(T, LearnedScore)> {
        let mut order: Vec<_> = items
            .into_iter()
            .zip(self.scores.iter().enumerate())
            .collect();
        order.sort_by(|a, b| b.1.1.total_cmp(a.1.1));
        order
            .into_iter()
            .map(|(item, (k, &score))| {
                let features = self.features(k).to_vec();
                let contributions = explain
                    .then(|| serving.model().contributions(&features))
                    .flatten();
                let learned = LearnedScore {
                    score,
                    features,
                    contributions,
                };
                (item, learned)
            })
            .collect()
    }
}

impl Serving {
    /// The ranker of `version` (its `model`, `per_source` candidates of each source) serving
    /// from `snapshot`; the graph of a large catalog's factors is built now (seconds at 10^5
    /// items, minutes at 10^6: run it off the async threads).
    pub(crate) fn new(snapshot: Snapshot, version: i64, per_source: usize, model: &Model) -> Self {
        snapshot.items.graph.of(&snapshot.items.vectors);
        let rows = snapshot
            .ids
            .iter()
            .enumerate()
            .map(|(n, id)| (id.clone(), n as u32))
            .collect();
        let gramian = als::gramian(&snapshot.items.vectors);
        Self {
            version,
            per_source,
            snapshot,
            rows,
            gramian,
            forest: model.forest(),
            model: model.clone(),
        }
    }

    pub fn model(&self) -> &Model {
        &self.model
    }

    pub(crate) fn weights(&self) -> &Weights {
        &self.snapshot.weights
    }

    /// An objectID's item row; an item the snapshot never saw gets the row past its items.
    pub(crate) fn row(&self, id: &str) -> u32 {
        self.rows
            .get(id)
            .copied()
            .unwrap_or(self.snapshot.ids.len() as u32)
    }

    /// A user from their events `(objectID, weight, time ms)` in time order (those of items the
    /// snapshot lacks are left out).
    pub fn standing<'e>(&self, events: impl IntoIterator<Item = (&'e str, f32, i64)>) -> Standing {
        let events: Vec<(u32, f32, i64)> = events
            .into_iter()
            .filter_map(|(id, w, at)| self.rows.get(id).map(|&i| (i, w, at)))
            .collect();
        let mut recent: Vec<u32> = Vec::new();
        let mut taken = HashSet::with_capacity(events.len());
        for &(i, ..) in events.iter().rev() {
            if taken.insert(i) {
                recent.push(i);
            }
        }
        let mut seen = recent.clone();
        seen.sort_unstable();
        let pairs: Vec<(u32, f32)> = events.iter().map(|&(i, w, _)| (i, w)).collect();
        let vector = als::fold_in(
            &self.snapshot.items.vectors,
            &self.gramian,
            &pairs,
            &self.snapshot.als,
        );
        let today = events
            .iter()
            .map(|e| e.2.div_euclid(crate::aggregates::DAY_MS))
            .max();
        Standing {
            seen,
            recent,
            vector,
            today: today.unwrap_or(self.snapshot.items.day),
            affinity: offline::affinity(&self.snapshot.items, pairs.into_iter()),
        }
    }

    /// `candidates` (objectIDs) scored for `user`.
    pub fn score(&self, user: &Standing, candidates: &[&str]) -> Scored {
        let items: Vec<u32> = candidates.iter().map(|id| self.row(id)).collect();
        let mut rows = Vec::new();
        offline::rows_of(
            &self.snapshot.items,
            &user.side(),
            self.per_source,
            Some(&items),
            &mut rows,
        );
        let scores = self.forest.score_rows(&rows);
        Scored { scores, rows }
    }
}

/// Row `n` of an index's snapshot body: `app 0 · index 0 · n`.
pub(crate) fn chunk_key(app: &str, index: &str, n: u32) -> Bytes {
    let mut key = keys::ranker(app, index).to_vec();
    key.push(0);
    key.extend_from_slice(&n.to_be_bytes());
    Bytes::from(key)
}

#[cfg(test)]
mod tests {
    use penchant_vectors::als::Interactions;

    use super::*;
    use penchant_learn::offline::Offline;

    /// `(user row, item row, weight, time ms)`.
    type Event = (u32, u32, f32, i64);

    /// A shop's history on one day: users, items, events (time-ordered).
    fn history() -> (usize, usize, Vec<Event>) {
        let (users, items) = (40, 60);
        let (planted, _) = penchant_vectors::synthetic::planted(users, items, 3, 1_500, 9);
        let day = 20_000 * crate::aggregates::DAY_MS;
        let events = planted
            .iter()
            .enumerate()
            .map(|(n, &(u, i, _, _))| (u, i, 1.0 + (n % 3) as f32, day + n as i64 * 1000))
            .collect();
        (users, items, events)
    }

    /// Serving describes a candidate with the same features the job's own ranking gives (the
    /// user's ALS vector folded in under the same item factors), bit for bit: the snapshot's
    /// item side and a user read from their own events equal the training's whole history.
    #[test]
    fn a_served_user_has_the_features_the_job_computes() {
        let (users, items, events) = history();
        let triples: Vec<(u32, u32, f32)> = events.iter().map(|&(u, i, w, _)| (u, i, w)).collect();
        let at: Vec<i64> = events.iter().map(|e| e.3).collect();
        let train = Interactions::from_triples(users, items, triples.iter().copied());
        let config = AlsConfig {
            factors: 8,
            iterations: 3,
            ..AlsConfig::default()
        };
        let mut factors = als::train(&train, &config, |_| true).unwrap();
        let gramian = als::gramian(&factors.items);
        for u in 0..users {
            let (rows, weights) = train.user_items(u);
            let pairs: Vec<(u32, f32)> =
                rows.iter().copied().zip(weights.iter().copied()).collect();
            let folded = als::fold_in(&factors.items, &gramian, &pairs, &config);
            factors.users.set(u, &folded);
        }
        // Two facet values per item, numbered.
        let facets: Vec<Vec<u32>> = (0..items as u32).map(|i| vec![i % 4, 4 + i % 3]).collect();
        let offline = Offline::new(&train, &factors, &triples, &at).with_facets(facets);
        let ids: Vec<String> = (0..items).map(|i| format!("i{i}")).collect();
        let snapshot = Snapshot {
            ids: ids.clone(),
            items: offline.items(),
            weights: Weights::new(),
            als: config.clone(),
        };
        // Stored and read back whole.
        let decoded = Snapshot::decode(&snapshot.encode(), Weights::new(), config).unwrap();
        assert_eq!(decoded, snapshot);
        let model = penchant_rank::Model::default();
        let serving = Serving::new(decoded, 1, 20, &model);
        let every: Vec<u32> = (0..items as u32).collect();
        let names: Vec<&str> = ids.iter().map(String::as_str).collect();
        for u in [0usize, 7, 23] {
            let mine = events
                .iter()
                .filter(|e| e.0 == u as u32)
                .map(|&(_, i, w, at)| (names[i as usize], w, at));
            let standing = serving.standing(mine);
            let served = serving.score(&standing, &names);
            let mut rows = Vec::new();
            offline.rows_for(u, 20, &every, &mut rows);
            let bits = |rows: &[f32]| rows.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&served.rows), bits(&rows), "user {u}");
        }
        // An item the snapshot never saw reads as one without events; a corrupt body is
        // refused.
        let standing = serving.standing(std::iter::empty());
        let fresh = serving.score(&standing, &["new-item"]);
        let age = offline::FEATURES.iter().position(|f| *f == "item-age-days");
        assert_eq!(fresh.features(0)[age.unwrap()], -1.0);
        let body = snapshot.encode();
        assert!(
            Snapshot::decode(
                &body[..body.len() - 1],
                Weights::new(),
                AlsConfig::default()
            )
            .is_none()
        );
    }
}
