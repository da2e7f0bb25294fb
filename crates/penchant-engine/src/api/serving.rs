//! A learned ranker at request time: scores and standings, the snapshot written and read
//! ([`crate::recommend::serving`] holds the served ranker).

use crate::recommend::ranker::{MODEL, StoredRanker};
use crate::recommend::serving::{CHUNK, DATA, HEAD, Head, Scored, Serving, Standing, chunk_key};
use crate::recommend::snapshot::Snapshot;
use crate::{Engine, Result, internal, keys};
use bytes::Bytes;
use penchant_learn::offline::{self};
use penchant_model::tables::RANKERS_SNAPSHOT_FAMILY as FAMILY;
use penchant_model::tables::{RANKERS_MODEL_FAMILY as MODEL_FAMILY, RANKERS_TABLE};
use penchant_store::{Mutation, ReadRows, RowFilter, RowSet, TimeRange, Timestamp};
use std::sync::Arc;

impl Engine {
    /// `candidates` (objectIDs of `index`) scored for `user` by the index's learned ranker, and
    /// the ranker (`None`: no ranker job has stored one to serve yet).
    pub async fn learned_scores(
        &self,
        app: &str,
        index: &str,
        user: &str,
        candidates: &[&str],
    ) -> Result<Option<(Arc<Serving>, Scored)>> {
        let Some((serving, standing)) = self.learned_standing(app, index, user).await? else {
            return Ok(None);
        };
        let scored = serving.score(&standing, candidates);
        Ok(Some((serving, scored)))
    }

    /// The index's learned ranker and `user` as it sees them: the user's events read
    /// ([`Engine::learned_scores`]'s first part).
    pub async fn learned_standing(
        &self,
        app: &str,
        index: &str,
        user: &str,
    ) -> Result<Option<(Arc<Serving>, Standing)>> {
        keys::check_user_token(user)?;
        let Some(serving) = self.served_ranker(app, index).await? else {
            return Ok(None);
        };
        let events = self
            .trainings
            .user_events(app, index, user, serving.weights())
            .await?;
        let standing = serving.standing(events.iter().map(|(id, w, at)| (id.as_str(), *w, *at)));
        Ok(Some((serving, standing)))
    }
}

impl Engine {
    /// Store the snapshot the ranker of `version` serves from (its body, then its header).
    pub(crate) async fn write_snapshot(
        &self,
        app: &str,
        index: &str,
        version: i64,
        snapshot: &Snapshot,
    ) -> Result<()> {
        let body = snapshot.encode();
        let cell = |qualifier: &'static [u8], value: Bytes| Mutation::SetCell {
            family: FAMILY.into(),
            qualifier: Bytes::from_static(qualifier),
            timestamp: Timestamp::Micros(version),
            value,
        };
        let body = Bytes::from(body);
        let chunks = body.len().div_ceil(CHUNK).max(1);
        for n in 0..chunks {
            let part = body.slice(n * CHUNK..body.len().min((n + 1) * CHUNK));
            self.store
                .mutate_row(
                    RANKERS_TABLE,
                    chunk_key(app, index, n as u32),
                    vec![cell(DATA, part)],
                )
                .await?;
        }
        let head = Head {
            version,
            chunks: chunks as u32,
            bytes: body.len() as u64,
            weights: snapshot.weights.clone(),
            als: snapshot.als.clone(),
        };
        let head = serde_json::to_vec(&head).map_err(|e| internal("ranker snapshot", e))?;
        self.store
            .mutate_row(
                RANKERS_TABLE,
                keys::ranker(app, index),
                vec![cell(HEAD, head.into())],
            )
            .await?;
        self.recommend
            .serving
            .remove(&(app.to_owned(), index.to_owned()));
        Ok(())
    }

    /// The ranker an index serves from: its newest snapshot, with the model of its version
    /// (`None`: no ranker job has stored one yet, or the stored one describes candidates with
    /// other features than [`offline::FEATURES`]). Kept by the node for the recommend
    /// caches' time to live, then read again if a newer version was stored.
    pub async fn served_ranker(&self, app: &str, index: &str) -> Result<Option<Arc<Serving>>> {
        crate::catalog::check_index_name(index)?;
        let key = (app.to_owned(), index.to_owned());
        if let Some(serving) = self.recommend.serving.get(&key) {
            return Ok(serving);
        }
        // The header alone (the models' cells are read once its version is new here).
        let row = self
            .store
            .read_row(
                RANKERS_TABLE,
                keys::ranker(app, index),
                Some(RowFilter::column(FAMILY, HEAD).and(RowFilter::CellsPerColumnLimit(1))),
            )
            .await?;
        let head: Option<Head> = row
            .as_ref()
            .and_then(|r| r.latest(FAMILY, HEAD))
            .map(|c| serde_json::from_slice(&c.value).map_err(|e| internal("corrupt ranker", e)))
            .transpose()?;
        let Some(head) = head else {
            self.recommend.serving.insert(key, None);
            return Ok(None);
        };
        // Loaded already by this node: the same version is kept.
        if let Some(loaded) = self.recommend.loaded.lock().get(&key)
            && loaded.version == head.version
        {
            let loaded = Some(loaded.clone());
            self.recommend.serving.insert(key, loaded.clone());
            return Ok(loaded);
        }
        let model_cell = RowFilter::column(MODEL_FAMILY, MODEL).and(RowFilter::TimestampRange(
            TimeRange::new(head.version, head.version + 1),
        ));
        let row = self
            .store
            .read_row(RANKERS_TABLE, keys::ranker(app, index), Some(model_cell))
            .await?;
        let model = row
            .as_ref()
            .and_then(|r| r.latest(MODEL_FAMILY, MODEL))
            .map(|c| {
                serde_json::from_slice::<StoredRanker>(&c.value)
                    .map_err(|e| internal("corrupt ranker", e))
            })
            .transpose()?
            .ok_or_else(|| internal("ranker", "the model of the stored snapshot is gone"))?;
        // A model of other features (an earlier release's) is not served: the next ranker job
        // learns one anew.
        if model.features != offline::FEATURES {
            self.recommend.serving.insert(key, None);
            return Ok(None);
        }
        let at = RowFilter::column(FAMILY, DATA).and(RowFilter::TimestampRange(TimeRange::new(
            head.version,
            head.version + 1,
        )));
        let request = ReadRows::new(RowSet::keys(
            (0..head.chunks).map(|n| chunk_key(app, index, n)),
        ))
        .filter(at);
        let mut body = Vec::with_capacity(head.bytes as usize);
        let rows = self.store.read_all(RANKERS_TABLE, request).await?;
        for n in 0..head.chunks {
            let cell = rows
                .iter()
                .find(|r| r.key == chunk_key(app, index, n))
                .and_then(|r| r.latest(FAMILY, DATA))
                .ok_or_else(|| internal("ranker snapshot", "a chunk is missing"))?;
            body.extend_from_slice(&cell.value);
        }
        let snapshot = Snapshot::decode(&body, head.weights, head.als)
            .ok_or_else(|| internal("ranker snapshot", "corrupt body"))?;
        let serving = tokio::task::spawn_blocking(move || {
            Serving::new(
                snapshot,
                model.version,
                model.learned.per_source,
                &model.model,
            )
        })
        .await
        .map_err(|e| internal("ranker snapshot", e))?;
        let serving = Arc::new(serving);
        self.recommend
            .loaded
            .lock()
            .insert(key.clone(), serving.clone());
        self.recommend.serving.insert(key, Some(serving.clone()));
        Ok(Some(serving))
    }
}
