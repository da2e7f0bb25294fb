//! Catalog: the records of an app's indexes, and the facet values their attributes give.
//!
//! A record is a JSON object with an `objectID`, stored whole in one cell of table `catalog`
//! under `app | index 0x00 | objectID`. Writes are applied when the request returns (Algolia's
//! tasks are therefore always `published`). Facet values come from every attribute: strings,
//! numbers and booleans, arrays of them, and nested objects by dotted path (`categories.lvl0`).

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use penchant_store::{GcRule, Mutation, RowMutation, RowSet, Store};
use rand::Rng;
use serde_json::{Map, Value};

use crate::layout::app_prefix;
use crate::{EngineError, Result};

pub const CATALOG_TABLE: &str = "catalog";
const FAMILY: &str = "r";
const COLUMN: &[u8] = b"o";
/// The largest record, serialized.
pub const MAX_RECORD_BYTES: usize = 100 * 1024;
/// The longest objectID and index name, in bytes.
pub const MAX_OBJECT_ID_BYTES: usize = 512;
pub const MAX_INDEX_NAME_BYTES: usize = 256;

pub type Record = Map<String, Value>;

/// The tables this module needs.
pub fn tables() -> Vec<(&'static str, BTreeMap<String, GcRule>)> {
    vec![(
        CATALOG_TABLE,
        BTreeMap::from([(FAMILY.to_owned(), GcRule::MaxVersions(1))]),
    )]
}

fn invalid(msg: impl Into<String>) -> EngineError {
    EngineError::Invalid(msg.into())
}

/// Index names: 1 to 256 bytes, no control characters.
pub fn check_index_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_INDEX_NAME_BYTES || name.chars().any(char::is_control) {
        return Err(invalid(format!(
            "index name must be 1 to {MAX_INDEX_NAME_BYTES} bytes without control characters"
        )));
    }
    Ok(())
}

fn check_object_id(id: &str) -> Result<()> {
    if id.is_empty() || id.len() > MAX_OBJECT_ID_BYTES || id.contains('\0') {
        return Err(invalid(format!(
            "objectID must be 1 to {MAX_OBJECT_ID_BYTES} bytes"
        )));
    }
    Ok(())
}

fn index_prefix(app: &str, index: &str) -> Vec<u8> {
    let mut key = app_prefix(app);
    key.extend_from_slice(index.as_bytes());
    key.push(0);
    key
}

fn row_key(app: &str, index: &str, object_id: &str) -> Bytes {
    let mut key = index_prefix(app, index);
    key.extend_from_slice(object_id.as_bytes());
    Bytes::from(key)
}

/// One write to an index.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// Add or replace a record (an objectID is generated when the record has none).
    Put(Record),
    /// Change some attributes of a record (with Algolia's `_operation`s); `create` makes it if
    /// it does not exist.
    Partial { record: Record, create: bool },
    /// Delete a record.
    Delete(String),
    /// Delete every record of the index.
    Clear,
}

/// The catalog of every app.
#[derive(Debug, Clone)]
pub struct Catalog {
    store: Arc<dyn Store>,
}

fn object_id_of(record: &Record) -> Result<Option<String>> {
    match record.get("objectID") {
        None => Ok(None),
        Some(Value::String(s)) => {
            check_object_id(s)?;
            Ok(Some(s.clone()))
        }
        Some(Value::Number(n)) => Ok(Some(n.to_string())),
        Some(_) => Err(invalid("objectID must be a string")),
    }
}

fn generated_id() -> String {
    let mut rng = rand::rng();
    (0..16)
        .map(|_| char::from(b"0123456789abcdef"[rng.random_range(0..16)]))
        .collect()
}

fn encode(record: &Record) -> Result<Bytes> {
    let bytes = serde_json::to_vec(record).map_err(|e| invalid(e.to_string()))?;
    if bytes.len() > MAX_RECORD_BYTES {
        return Err(invalid(format!(
            "Record is too big: {} bytes, the limit is {MAX_RECORD_BYTES}",
            bytes.len()
        )));
    }
    Ok(Bytes::from(bytes))
}

/// Apply a partial update to a record, with Algolia's built-in operations.
pub fn apply_partial(record: &mut Record, changes: &Record) -> Result<()> {
    for (attr, change) in changes {
        if attr == "objectID" {
            continue;
        }
        let op = change
            .as_object()
            .and_then(|o| Some((o.get("_operation")?.as_str()?, o.get("value")?)));
        let Some((op, value)) = op else {
            record.insert(attr.clone(), change.clone());
            continue;
        };
        let current = record.get(attr).cloned();
        let number = |v: Option<&Value>| v.and_then(Value::as_f64).unwrap_or(0.0);
        let as_number = |x: f64| {
            if x.fract() == 0.0 && x.abs() < 9e15 {
                Value::from(x as i64)
            } else {
                Value::from(x)
            }
        };
        let list = || match &current {
            Some(Value::Array(a)) => a.clone(),
            Some(v) => vec![v.clone()],
            None => Vec::new(),
        };
        let new = match op {
            "Increment" => as_number(number(current.as_ref()) + number(Some(value))),
            "Decrement" => as_number(number(current.as_ref()) - number(Some(value))),
            "Add" => {
                let mut a = list();
                a.push(value.clone());
                Value::Array(a)
            }
            "AddUnique" => {
                let mut a = list();
                if !a.contains(value) {
                    a.push(value.clone());
                }
                Value::Array(a)
            }
            "Remove" => Value::Array(list().into_iter().filter(|v| v != value).collect()),
            other => return Err(invalid(format!("Unsupported _operation `{other}`"))),
        };
        record.insert(attr.clone(), new);
    }
    Ok(())
}

impl Catalog {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store }
    }

    /// One record.
    pub async fn get(&self, app: &str, index: &str, object_id: &str) -> Result<Option<Record>> {
        check_index_name(index)?;
        if check_object_id(object_id).is_err() {
            return Ok(None);
        }
        let row = self
            .store
            .read_row(CATALOG_TABLE, row_key(app, index, object_id), None)
            .await?;
        row.and_then(|r| r.latest(FAMILY, COLUMN).map(|c| c.value.clone()))
            .map(|v| serde_json::from_slice(&v).map_err(|e| invalid(e.to_string())))
            .transpose()
    }

    /// Several records of one index at once (missing ones are left out).
    pub async fn get_many(
        &self,
        app: &str,
        index: &str,
        object_ids: &[String],
    ) -> Result<BTreeMap<String, Record>> {
        check_index_name(index)?;
        let keys: Vec<Bytes> = object_ids
            .iter()
            .filter(|id| check_object_id(id).is_ok())
            .map(|id| row_key(app, index, id))
            .collect();
        if keys.is_empty() {
            return Ok(BTreeMap::new());
        }
        let rows = self
            .store
            .read_all(
                CATALOG_TABLE,
                penchant_store::ReadRows::new(RowSet::keys(keys)),
            )
            .await?;
        let mut out = BTreeMap::new();
        for row in rows {
            if let Some(c) = row.latest(FAMILY, COLUMN) {
                let record: Record =
                    serde_json::from_slice(&c.value).map_err(|e| invalid(e.to_string()))?;
                if let Some(id) = object_id_of(&record)? {
                    out.insert(id, record);
                }
            }
        }
        Ok(out)
    }

    /// Apply writes to an app's indexes, in order; returns the objectID of each write (empty
    /// for `Clear`). Every write is checked before anything is applied.
    pub async fn apply(&self, app: &str, writes: Vec<(String, Write)>) -> Result<Vec<String>> {
        // Check and resolve everything first.
        let mut planned: Vec<(String, Write, String)> = Vec::with_capacity(writes.len());
        for (index, write) in writes {
            check_index_name(&index)?;
            let id = match &write {
                Write::Put(record) => object_id_of(record)?.unwrap_or_else(generated_id),
                Write::Partial { record, .. } => object_id_of(record)?
                    .ok_or_else(|| invalid("Missing objectID in a partial update"))?,
                Write::Delete(id) => {
                    check_object_id(id)?;
                    id.clone()
                }
                Write::Clear => String::new(),
            };
            if let Write::Put(record) = &write {
                let mut record = record.clone();
                record.insert("objectID".into(), Value::String(id.clone()));
                encode(&record)?;
            }
            planned.push((index, write, id));
        }
        let mut ids = Vec::with_capacity(planned.len());
        let mut batch: Vec<RowMutation> = Vec::new();
        for (index, write, id) in planned {
            match write {
                Write::Put(mut record) => {
                    record.insert("objectID".into(), Value::String(id.clone()));
                    batch.push(RowMutation::new(
                        row_key(app, &index, &id),
                        vec![Mutation::set_now(FAMILY, COLUMN, encode(&record)?)],
                    ));
                }
                Write::Partial { record, create } => {
                    // Earlier writes of this request first: the partial update sees them.
                    self.flush(&mut batch).await?;
                    let current = self.get(app, &index, &id).await?;
                    let mut base = match (current, create) {
                        (Some(r), _) => r,
                        (None, true) => Record::new(),
                        (None, false) => {
                            ids.push(id);
                            continue;
                        }
                    };
                    apply_partial(&mut base, &record)?;
                    base.insert("objectID".into(), Value::String(id.clone()));
                    batch.push(RowMutation::new(
                        row_key(app, &index, &id),
                        vec![Mutation::set_now(FAMILY, COLUMN, encode(&base)?)],
                    ));
                }
                Write::Delete(id) => batch.push(RowMutation::new(
                    row_key(app, &index, &id),
                    vec![Mutation::DeleteFromRow],
                )),
                Write::Clear => {
                    self.flush(&mut batch).await?;
                    self.store
                        .drop_row_range(CATALOG_TABLE, &index_prefix(app, &index))
                        .await?;
                }
            }
            ids.push(id);
        }
        self.flush(&mut batch).await?;
        Ok(ids)
    }

    async fn flush(&self, batch: &mut Vec<RowMutation>) -> Result<()> {
        for chunk in std::mem::take(batch).chunks(1000) {
            for status in self
                .store
                .mutate_rows(CATALOG_TABLE, chunk.to_vec())
                .await?
            {
                status?;
            }
        }
        Ok(())
    }
}

/// The facet values of a record: `(facet, value)` for every scalar attribute, every element of
/// an array, and nested objects by dotted path. `objectID` and attributes starting with `_` are
/// not facets.
pub fn facet_values(record: &Record) -> Vec<(String, String)> {
    fn walk(path: &str, value: &Value, out: &mut Vec<(String, String)>) {
        match value {
            Value::String(s) => out.push((path.to_owned(), s.clone())),
            Value::Number(n) => out.push((path.to_owned(), n.to_string())),
            Value::Bool(b) => out.push((path.to_owned(), b.to_string())),
            Value::Array(items) => items.iter().for_each(|v| walk(path, v, out)),
            Value::Object(map) => {
                for (k, v) in map {
                    walk(&format!("{path}.{k}"), v, out);
                }
            }
            Value::Null => {}
        }
    }
    let mut out = Vec::new();
    for (attr, value) in record {
        if attr != "objectID" && !attr.starts_with('_') {
            walk(attr, value, &mut out);
        }
    }
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(v: Value) -> Record {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn facets_from_scalars_arrays_and_nested_objects() {
        let r = record(json!({
            "objectID": "1", "brand": "Apple", "price": 999.5, "inStock": true,
            "tags": ["phone", "5g"], "categories": {"lvl0": "Phones", "lvl1": ["Phones > Smart"]},
            "_private": "x", "nothing": null
        }));
        let f = facet_values(&r);
        let has = |k: &str, v: &str| f.contains(&(k.to_owned(), v.to_owned()));
        assert!(has("brand", "Apple") && has("price", "999.5") && has("inStock", "true"));
        assert!(has("tags", "phone") && has("tags", "5g"));
        assert!(has("categories.lvl0", "Phones") && has("categories.lvl1", "Phones > Smart"));
        assert_eq!(f.len(), 7, "{f:?}");
    }

    #[test]
    fn partial_operations() {
        let mut r = record(json!({"n": 1, "tags": ["a"]}));
        let changes = record(json!({
            "n": {"_operation": "Increment", "value": 2},
            "tags": {"_operation": "AddUnique", "value": "a"},
            "more": {"_operation": "Add", "value": "x"},
            "plain": {"value": 1}
        }));
        apply_partial(&mut r, &changes).unwrap();
        assert_eq!(
            Value::Object(r.clone()),
            json!({"n": 3, "tags": ["a"], "more": ["x"], "plain": {"value": 1}})
        );
        let bad = record(json!({"n": {"_operation": "Explode", "value": 1}}));
        assert!(apply_partial(&mut r, &bad).is_err());
    }

    #[tokio::test]
    async fn writes_and_reads() {
        let store: Arc<dyn Store> = Arc::new(penchant_store::MemStore::new());
        for (t, f) in tables() {
            store.create_table(t, f).await.unwrap();
        }
        let c = Catalog::new(store);
        let ids = c
            .apply(
                "APP",
                vec![
                    (
                        "items".into(),
                        Write::Put(record(json!({"objectID": "a", "brand": "X"}))),
                    ),
                    ("items".into(), Write::Put(record(json!({"brand": "Y"})))),
                    (
                        "items".into(),
                        Write::Partial {
                            record: record(json!({"objectID": "a", "size": 2})),
                            create: false,
                        },
                    ),
                    (
                        "items".into(),
                        Write::Partial {
                            record: record(json!({"objectID": "zz", "size": 2})),
                            create: false,
                        },
                    ),
                ],
            )
            .await
            .unwrap();
        assert_eq!(ids[0], "a");
        assert_eq!(ids[1].len(), 16, "generated objectID");
        let a = c.get("APP", "items", "a").await.unwrap().unwrap();
        assert_eq!(
            Value::Object(a),
            json!({"objectID": "a", "brand": "X", "size": 2})
        );
        assert!(
            c.get("APP", "items", "zz").await.unwrap().is_none(),
            "no create"
        );
        assert!(
            c.get("OTHER", "items", "a").await.unwrap().is_none(),
            "per app"
        );
        // A bad write anywhere in the list applies nothing.
        let r = c
            .apply(
                "APP",
                vec![
                    ("items".into(), Write::Delete("a".into())),
                    (
                        "items".into(),
                        Write::Put(record(json!({"objectID": ["bad"]}))),
                    ),
                ],
            )
            .await;
        assert!(matches!(r, Err(EngineError::Invalid(_))));
        assert!(c.get("APP", "items", "a").await.unwrap().is_some());
        let many = c
            .get_many("APP", "items", &["a".into(), ids[1].clone(), "nope".into()])
            .await
            .unwrap();
        assert_eq!(many.len(), 2);
        c.apply("APP", vec![("items".into(), Write::Clear)])
            .await
            .unwrap();
        assert!(c.get("APP", "items", "a").await.unwrap().is_none());
    }
}
