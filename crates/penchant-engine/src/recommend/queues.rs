//! Ranked per-user queues (Coffee Meets Bagel's precomputed backlog): for each user and queue
//! name, up to [`QueueDefinition::size`] items with their scores, best first, read at request
//! time in one row read.
//!
//! Table `queues`, family `q`:
//!
//! | row | cells |
//! |---|---|
//! | [`keys::queue`] `app 0 · user 0 · name` | `q:items` the ranked items ([`super::encode_ranked`]); `q:cursor` how many were popped (i64 BE) |
//! | [`keys::queue_definition`] `app 0 · 0xFF · name` | `q:def` the definition (JSON) |
//!
//! A rebuild writes the items and a zero cursor in one row write. A pop moves the cursor with
//! one atomic increment and takes the entries it moved over, so two pops never return the same
//! entry. The row is under the user's prefix: deleting a user token deletes its queues with the
//! rest. Items deleted from the catalog leave every queue at once because reads return only
//! items whose record exists (their records are read anyway, to be returned); the next rebuild
//! drops them for good, and an item added again before it is served again.

use std::sync::Arc;

use bytes::Bytes;
use penchant_store::{
    Consistency, Mutation, ReadModifyWriteRule, ReadRows, RowFilter, RowMutation, RowSet, Store,
};

pub use penchant_model::recommend::queues::{
    DEFAULT_SIZE, MAX_NAME_BYTES, MAX_QUEUES, MAX_SIZE, QueueDefinition, Ranker, Source, check_name,
};

use super::{Ranked, decode_ranked, encode_ranked};
use crate::{EngineError, Result, internal, keys};
use penchant_model::tables::QUEUES_FAMILY as FAMILY;
pub use penchant_model::tables::{QUEUES, QUEUES_TABLE};

const ITEMS: &[u8] = b"items";
const CURSOR: &[u8] = b"cursor";
const DEFINITION: &[u8] = b"def";
/// The version of the learned model that ordered the queue (absent for a blend).
const RANKED_BY: &[u8] = b"ranker";

/// A user's queue as stored: its entries and how many were popped.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stored {
    pub items: Ranked,
    pub cursor: usize,
    /// When it was built (ms), if it was.
    pub built_at: Option<i64>,
    /// The version of the learned model that ordered it; `None` for a blend.
    pub ranked_by: Option<i64>,
}

impl Stored {
    /// The entries not popped yet.
    pub fn pending(&self) -> &[(String, f32)] {
        &self.items[self.cursor.min(self.items.len())..]
    }
}

/// Queue storage of every app.
#[derive(Debug, Clone)]
pub struct Queues {
    store: Arc<dyn Store>,
}

impl Queues {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store }
    }

    /// Save a queue's definition; refused past [`MAX_QUEUES`] queues.
    pub async fn define(&self, app: &str, name: &str, definition: &QueueDefinition) -> Result<()> {
        check_name(name)?;
        definition.check()?;
        let defined = self.definitions(app).await?;
        if defined.len() >= MAX_QUEUES && !defined.iter().any(|(n, _)| n == name) {
            return Err(EngineError::Refused(format!(
                "an app may define {MAX_QUEUES} queues: delete one first"
            )));
        }
        let json = serde_json::to_vec(definition).map_err(|e| internal("serialization", e))?;
        self.store
            .mutate_row(
                QUEUES_TABLE,
                keys::queue_definition(app, name),
                vec![Mutation::set_now(FAMILY, DEFINITION, json)],
            )
            .await?;
        Ok(())
    }

    /// A queue's definition; `NotFound` names it.
    pub async fn definition(&self, app: &str, name: &str) -> Result<QueueDefinition> {
        check_name(name)?;
        let row = self
            .store
            .read_row(QUEUES_TABLE, keys::queue_definition(app, name), None)
            .await?;
        match row.as_ref().and_then(|r| r.latest(FAMILY, DEFINITION)) {
            Some(cell) => {
                serde_json::from_slice(&cell.value).map_err(|e| internal("corrupt queue", e))
            }
            None => Err(EngineError::NotFound(format!(
                "queue '{name}' does not exist"
            ))),
        }
    }

    /// Every queue of the app, by name.
    pub async fn definitions(&self, app: &str) -> Result<Vec<(String, QueueDefinition)>> {
        let prefix = keys::queue_definitions(app);
        let request = ReadRows::new(RowSet::prefix(prefix.clone()));
        let mut out = Vec::new();
        for row in self.store.read_all(QUEUES_TABLE, request).await? {
            let (Some(name), Some(cell)) = (
                row.key
                    .strip_prefix(&prefix[..])
                    .and_then(|n| std::str::from_utf8(n).ok()),
                row.latest(FAMILY, DEFINITION),
            ) else {
                continue;
            };
            let definition =
                serde_json::from_slice(&cell.value).map_err(|e| internal("corrupt queue", e))?;
            out.push((name.to_owned(), definition));
        }
        Ok(out)
    }

    /// Delete a queue's definition and every user's copy of it.
    pub async fn undefine(&self, app: &str, name: &str) -> Result<()> {
        self.definition(app, name).await?;
        self.store
            .mutate_row(
                QUEUES_TABLE,
                keys::queue_definition(app, name),
                vec![Mutation::DeleteFromRow],
            )
            .await?;
        let store = penchant_store::for_workload(&self.store, penchant_store::Workload::Batch);
        let keys_only = RowFilter::StripValue.and(RowFilter::CellsPerRowLimit(1));
        let request = ReadRows::new(RowSet::prefix(keys::app(app))).filter(keys_only);
        let deletes: Vec<RowMutation> = store
            .read_all(QUEUES_TABLE, request)
            .await?
            .into_iter()
            .filter(|row| {
                keys::user_of(app, &row.key)
                    .is_some_and(|user| row.key == keys::queue(app, user, name))
            })
            .map(|row| RowMutation::new(row.key, vec![Mutation::DeleteFromRow]))
            .collect();
        store.mutate_all(QUEUES_TABLE, deletes).await?;
        Ok(())
    }

    /// Replace a user's queue (cursor back to 0), ordered by a learned model's version
    /// `ranked_by` or by a blend.
    pub async fn write(
        &self,
        app: &str,
        user: &str,
        name: &str,
        items: &Ranked,
        ranked_by: Option<i64>,
    ) -> Result<()> {
        let ranker = match ranked_by {
            Some(version) => Mutation::set_now(FAMILY, RANKED_BY, version.to_be_bytes().to_vec()),
            None => Mutation::delete_column(FAMILY, RANKED_BY),
        };
        self.store
            .mutate_row(
                QUEUES_TABLE,
                keys::queue(app, user, name),
                vec![
                    Mutation::set_now(FAMILY, ITEMS, encode_ranked(items)),
                    Mutation::set_now(FAMILY, CURSOR, Bytes::from(0i64.to_be_bytes().to_vec())),
                    ranker,
                ],
            )
            .await?;
        Ok(())
    }

    /// A user's queue as stored (empty if never built), read as consistent as asked.
    pub async fn read(
        &self,
        app: &str,
        user: &str,
        name: &str,
        consistency: Consistency,
    ) -> Result<Stored> {
        let row = penchant_store::with_consistency(&self.store, consistency)
            .read_row(QUEUES_TABLE, keys::queue(app, user, name), None)
            .await?;
        let Some(row) = row else {
            return Ok(Stored::default());
        };
        let items = match row.latest(FAMILY, ITEMS) {
            Some(cell) => decode_ranked(&cell.value)?,
            None => Vec::new(),
        };
        Ok(Stored {
            items,
            cursor: row.latest(FAMILY, CURSOR).map_or(0, |c| counter(&c.value)),
            built_at: row.latest(FAMILY, ITEMS).map(|c| c.timestamp / 1000),
            ranked_by: row
                .latest(FAMILY, RANKED_BY)
                .and_then(|c| <[u8; 8]>::try_from(&c.value[..]).ok())
                .map(i64::from_be_bytes),
        })
    }

    /// Move a user's cursor `n` entries on, atomically; returns the entries moved over (fewer
    /// at the queue's end).
    pub async fn advance(&self, app: &str, user: &str, name: &str, n: usize) -> Result<Ranked> {
        let key = keys::queue(app, user, name);
        let stored = self.read(app, user, name, Consistency::Eventual).await?;
        if stored.built_at.is_none() || stored.pending().is_empty() {
            return Ok(Vec::new());
        }
        let rule = ReadModifyWriteRule::increment(FAMILY, CURSOR, n as i64);
        let row = self
            .store
            .read_modify_write_row(QUEUES_TABLE, key, vec![rule])
            .await?;
        let end = row.latest(FAMILY, CURSOR).map_or(0, |c| counter(&c.value));
        let start = end.saturating_sub(n).min(stored.items.len());
        Ok(stored.items[start..end.min(stored.items.len())].to_vec())
    }
}

fn counter(value: &[u8]) -> usize {
    <[u8; 8]>::try_from(value).map_or(0, |b| i64::from_be_bytes(b).max(0) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definitions_parse_with_defaults_and_reject_unknown_fields() {
        let def: QueueDefinition = serde_json::from_str(
            r#"{"indexName": "products", "sources": [{"source": "als"},
                {"source": "similar-to-liked", "last": 5, "weight": 0.5},
                {"source": "related"}, {"source": "trending", "weight": 0.1}]}"#,
        )
        .unwrap();
        assert_eq!(def.size, DEFAULT_SIZE);
        assert_eq!(
            def.sources[0],
            Source::Als {
                space: "als".into(),
                weight: 1.0
            }
        );
        assert!(def.check().is_ok());
        let typo = r#"{"indexName": "p", "sources": [{"source": "als", "wieght": 2}]}"#;
        assert!(serde_json::from_str::<QueueDefinition>(typo).is_err());
        let unknown = r#"{"indexName": "p", "sources": [{"source": "magic"}]}"#;
        assert!(serde_json::from_str::<QueueDefinition>(unknown).is_err());
        let mut bad = def.clone();
        bad.size = 0;
        assert!(bad.check().is_err());
        bad.size = 10;
        bad.sources = vec![Source::Trending { weight: -1.0 }];
        assert!(bad.check().is_err());
        assert!(check_name("for-you").is_ok());
        assert!(check_name("for you").is_err());
    }
}
