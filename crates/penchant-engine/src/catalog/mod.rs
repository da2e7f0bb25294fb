//! Catalog: the records of an app's indexes, and the facet values their attributes give.
//!
//! A record is a JSON object with an `objectID`, stored whole in one cell of table `catalog`
//! under `app | index 0x00 | objectID`. Writes are applied when the request returns (Algolia's
//! tasks are therefore always `published`). Facet values come from every attribute: strings,
//! numbers and booleans, arrays of them, and nested objects by dotted path (`categories.lvl0`).
//! Attribute names are at most [`MAX_ATTRIBUTE_PATH_BYTES`] by dotted path (each is part of a
//! store qualifier); strings longer than [`MAX_FACET_VALUE_BYTES`] are not facet values.
//!
//! A request's writes are all or nothing: they are checked, and played on the records they
//! read, before the first is written.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use penchant_store::{Mutation, RowMutation, RowSet, Store};
use rand::Rng;
use serde_json::{Map, Value};

use crate::keys;
use crate::{EngineError, Result};

mod indexes;

pub use self::indexes::{
    INDEXES, INDEXES_TABLE, IndexInfo, MAX_BROWSE_HITS, Page, Scope, Settings, check_settings,
    facet_attribute,
};
use penchant_model::tables::CATALOG_FAMILY as FAMILY;
pub use penchant_model::tables::{CATALOG, CATALOG_TABLE};

const COLUMN: &[u8] = b"o";
pub use penchant_model::catalog::{
    MAX_INDEX_NAME_BYTES, MAX_OBJECT_ID_BYTES, MAX_RECORD_BYTES, check_index_name, check_object_id,
};

pub type Record = Map<String, Value>;

fn invalid(msg: impl Into<String>) -> EngineError {
    EngineError::Invalid(msg.into())
}

fn index_prefix(app: &str, index: &str) -> Bytes {
    keys::index(app, index)
}

fn row_key(app: &str, index: &str, object_id: &str) -> Bytes {
    keys::record(app, index, object_id)
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

/// Indexes' settings by (app, index), `None` for an index that does not exist.
type SettingsCache = crate::cache::TtlCache<(String, String), Option<Arc<Settings>>>;

/// The catalog of every app.
#[derive(Debug, Clone)]
pub struct Catalog {
    store: Arc<dyn Store>,
    /// Indexes' settings as this node last read them (for serving records).
    settings: Arc<SettingsCache>,
    /// Items' facet values as this node last read them, for counting events; `None` unless
    /// every catalog write goes through this node ([`Catalog::cache_facets`]).
    facets: Option<Arc<FacetsCache>>,
}

/// The facet values of one item.
pub type ItemFacets = Arc<[(String, String)]>;

/// Items' facet values (`None`: no such record), each stamped with its app's catalog
/// generation when it was read: a catalog write bumps the generation (after writing), so an
/// entry read before it is never used after it.
#[derive(Debug)]
struct FacetsCache {
    items: quick_cache::sync::Cache<(String, String, String), (u64, Option<ItemFacets>)>,
    generations: parking_lot::RwLock<std::collections::HashMap<String, u64>>,
}

impl FacetsCache {
    fn generation(&self, app: &str) -> u64 {
        self.generations.read().get(app).copied().unwrap_or(0)
    }

    fn bump(&self, app: &str) {
        *self.generations.write().entry(app.to_owned()).or_default() += 1;
    }
}

/// Items whose facet values a node keeps ([`Catalog::cache_facets`]).
const FACETS_CACHED: usize = 200_000;

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

/// The longest attribute name, by dotted path (`categories.lvl0`), in bytes. Each path is a
/// facet, and part of a store qualifier `CSV(event type, event name, facet)`: at most
/// `conversion` (10) + 1 + a quoted 64-byte event name (130) + 1 + the path quoted with every
/// quote doubled (2 × 1,000 + 2) = 2,144 bytes, well under the store's 16 KiB.
pub const MAX_ATTRIBUTE_PATH_BYTES: usize = 1000;
/// The longest string facet value, in bytes: a longer string (a description, say) is kept in
/// the record but is not a facet value. Event cells hold a facet's values, a user's per-day
/// aggregates the day's values and a profile 100 values per facet: bounded this way, they stay
/// far from the store's 100 MiB cell limit.
pub const MAX_FACET_VALUE_BYTES: usize = 1000;

const _: () = assert!(
    10 + 1 + (2 * 64 + 2) + 1 + (2 * MAX_ATTRIBUTE_PATH_BYTES + 2)
        <= penchant_store::validate::MAX_QUALIFIER_BYTES
);

/// Every attribute name of a record by dotted path (as facets are named, nested objects in
/// arrays included) is at most [`MAX_ATTRIBUTE_PATH_BYTES`].
fn check_attribute_paths(record: &Record) -> Result<()> {
    fn check(path: &str) -> Result<()> {
        if path.len() > MAX_ATTRIBUTE_PATH_BYTES {
            return Err(invalid(format!(
                "attribute {} is {} bytes long (by dotted path), the limit is \
                 {MAX_ATTRIBUTE_PATH_BYTES}",
                shown(path),
                path.len()
            )));
        }
        Ok(())
    }
    fn walk(path: &mut String, value: &Value) -> Result<()> {
        match value {
            Value::Array(items) => items.iter().try_for_each(|v| walk(path, v)),
            Value::Object(map) => {
                for (k, v) in map {
                    let len = path.len();
                    path.push('.');
                    path.push_str(k);
                    check(path)?;
                    walk(path, v)?;
                    path.truncate(len);
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
    let mut path = String::new();
    for (attr, value) in record {
        check(attr)?;
        path.clear();
        path.push_str(attr);
        walk(&mut path, value)?;
    }
    Ok(())
}

/// A record as stored, once checked: attribute names, then size.
fn check_record(record: &Record) -> Result<Bytes> {
    check_attribute_paths(record)?;
    encode(record)
}

/// Algolia's built-in partial-update operations, by `_operation` name.
pub const OPERATIONS: [&str; 7] = [
    "Increment",
    "Decrement",
    "Add",
    "Remove",
    "AddUnique",
    "IncrementFrom",
    "IncrementSet",
];

/// One attribute's change in a partial update.
#[derive(Debug, Clone, PartialEq)]
enum Change {
    /// Replace the attribute (a value that is not an `_operation` object).
    Set(Value),
    /// Add to (or, negated, subtract from) a number; a missing or non-numeric attribute counts
    /// as 0.
    Increment {
        by: serde_json::Number,
        negate: bool,
    },
    /// Append a number or string to an array (a scalar attribute becomes its first element).
    Add(Value),
    /// The same, unless the array already holds it.
    AddUnique(Value),
    /// Remove every element equal to a number or string.
    Remove(Value),
    /// Set the integer attribute to `from + 1` if it is `from` (a missing attribute, or a
    /// missing record, is 0); otherwise the whole update of the record is ignored.
    IncrementFrom(i64),
    /// Set the integer attribute to the value if the value is greater than it (a missing
    /// attribute, or a missing record, is 0); otherwise the whole update of the record is
    /// ignored.
    IncrementSet(i64),
}

/// A partial update: each attribute's change, checked when it is parsed (before anything is
/// written), so that applying it fails only on what depends on the record (an overflow).
#[derive(Debug, Clone, PartialEq)]
pub struct PartialUpdate {
    changes: Vec<(String, Change)>,
}

/// An attribute name in a message: at most 64 characters of it.
fn shown(name: &str) -> String {
    match name.char_indices().nth(64) {
        Some((end, _)) => format!("\"{}…\"", &name[..end]),
        None => format!("\"{name}\""),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn partial_error(attr: &str, what: impl std::fmt::Display) -> EngineError {
    invalid(format!(
        "partial update of attribute {}: {what}",
        shown(attr)
    ))
}

/// A number as JSON: an integer when it is one (and exact in an `f64`).
fn json_number(x: f64) -> Value {
    if x.fract() == 0.0 && x.abs() < 9e15 {
        Value::from(x as i64)
    } else {
        Value::from(x)
    }
}

/// `current + by` (`current − by` negated) as JSON: exact for integers, in floating point
/// past them; an overflow to infinity is refused (JSON has no infinity: it was stored `null`).
/// A missing or non-numeric attribute counts as 0.
fn increment(
    attr: &str,
    current: Option<&Value>,
    by: &serde_json::Number,
    negate: bool,
) -> Result<Value> {
    let zero = serde_json::Number::from(0);
    let base = match current {
        Some(Value::Number(n)) => n,
        _ => &zero,
    };
    let exact = base.as_i64().zip(by.as_i64()).and_then(|(a, b)| {
        if negate {
            a.checked_sub(b)
        } else {
            a.checked_add(b)
        }
    });
    if let Some(n) = exact {
        return Ok(Value::from(n));
    }
    let (a, b) = (base.as_f64().unwrap_or(0.0), by.as_f64().unwrap_or(0.0));
    let x = if negate { a - b } else { a + b };
    if !x.is_finite() {
        let (op, sign) = if negate {
            ("Decrement", '-')
        } else {
            ("Increment", '+')
        };
        return Err(partial_error(
            attr,
            format!(
                "operation {op} overflows: {base} {sign} {by} is beyond the largest number (about 1.8e308)"
            ),
        ));
    }
    Ok(json_number(x))
}

impl PartialUpdate {
    /// Parse a partial update's body (its `objectID` aside). An attribute whose value is an
    /// object with an `_operation` is an operation, which must be one of [`OPERATIONS`] with a
    /// `value` of the type it needs; any other value replaces the attribute.
    pub fn parse(changes: &Record) -> Result<Self> {
        let mut parsed = Vec::with_capacity(changes.len());
        for (attr, change) in changes {
            if attr == "objectID" {
                continue;
            }
            let op = match change {
                Value::Object(o) if o.contains_key("_operation") => o,
                _ => {
                    parsed.push((attr.clone(), Change::Set(change.clone())));
                    continue;
                }
            };
            let supported = OPERATIONS.join(", ");
            let name = match &op["_operation"] {
                Value::String(name) if OPERATIONS.contains(&name.as_str()) => name.as_str(),
                Value::String(name) => {
                    return Err(partial_error(
                        attr,
                        format!("unsupported _operation \"{name}\"; supported: {supported}"),
                    ));
                }
                other => {
                    return Err(partial_error(
                        attr,
                        format!(
                            "_operation must be a string, not {}; supported: {supported}",
                            kind(other)
                        ),
                    ));
                }
            };
            let Some(value) = op.get("value") else {
                return Err(partial_error(
                    attr,
                    format!("operation {name} needs a value"),
                ));
            };
            let needs = |what: &str| {
                partial_error(
                    attr,
                    format!("operation {name} needs {what}, not {}", kind(value)),
                )
            };
            let element = || match value {
                Value::String(_) | Value::Number(_) => Ok(value.clone()),
                _ => Err(needs("a number or a string")),
            };
            let integer = || value.as_i64().ok_or_else(|| needs("an integer"));
            let change = match name {
                "Increment" | "Decrement" => match value {
                    Value::Number(by) => Change::Increment {
                        by: by.clone(),
                        negate: name == "Decrement",
                    },
                    _ => return Err(needs("a number")),
                },
                "Add" => Change::Add(element()?),
                "AddUnique" => Change::AddUnique(element()?),
                "Remove" => Change::Remove(element()?),
                "IncrementFrom" => Change::IncrementFrom(integer()?),
                _ => Change::IncrementSet(integer()?),
            };
            parsed.push((attr.clone(), change));
        }
        Ok(Self { changes: parsed })
    }

    /// Apply the update to a record; `None` when an `IncrementFrom` or `IncrementSet` condition
    /// fails, which ignores the whole update (Algolia's rule).
    pub fn apply(&self, mut record: Record) -> Result<Option<Record>> {
        for (attr, change) in &self.changes {
            let current = record.get(attr);
            let list = || match current {
                Some(Value::Array(a)) => a.clone(),
                Some(v) => vec![v.clone()],
                None => Vec::new(),
            };
            // The attribute of a conditional operation: an integer, 0 when missing, `None` for
            // anything else (the condition fails).
            let counter = || match current {
                None => Some(0),
                Some(v) => v.as_i64(),
            };
            let new = match change {
                Change::Set(v) => v.clone(),
                Change::Increment { by, negate } => increment(attr, current, by, *negate)?,
                Change::Add(v) => {
                    let mut a = list();
                    a.push(v.clone());
                    Value::Array(a)
                }
                Change::AddUnique(v) => {
                    let mut a = list();
                    if !a.contains(v) {
                        a.push(v.clone());
                    }
                    Value::Array(a)
                }
                Change::Remove(v) => Value::Array(list().into_iter().filter(|e| e != v).collect()),
                Change::IncrementFrom(from) => {
                    if counter() != Some(*from) {
                        return Ok(None);
                    }
                    let next = from
                        .checked_add(1)
                        .ok_or_else(|| partial_error(attr, "operation IncrementFrom overflows"))?;
                    Value::from(next)
                }
                Change::IncrementSet(to) => {
                    let greater = match current {
                        None => *to > 0,
                        Some(Value::Number(n)) => match n.as_i64() {
                            Some(n) => *to > n,
                            None => n.as_f64().is_some_and(|n| (*to as f64) > n),
                        },
                        Some(_) => false,
                    };
                    if !greater {
                        return Ok(None);
                    }
                    Value::from(*to)
                }
            };
            record.insert(attr.clone(), new);
        }
        Ok(Some(record))
    }
}

/// Apply a partial update to a record, with Algolia's built-in operations; `false` when an
/// `IncrementFrom` or `IncrementSet` condition fails (the record is left as it was).
pub fn apply_partial(record: &mut Record, changes: &Record) -> Result<bool> {
    match PartialUpdate::parse(changes)?.apply(record.clone())? {
        Some(updated) => {
            *record = updated;
            Ok(true)
        }
        None => Ok(false),
    }
}

impl Catalog {
    /// The catalog over `store`; settings read to serve records are trusted for `settings_ttl`
    /// (a change through another node shows within it).
    pub fn new(
        store: Arc<dyn Store>,
        settings_ttl: std::time::Duration,
        clock: crate::clock::Clock,
    ) -> Self {
        Self {
            store,
            settings: Arc::new(SettingsCache::new(10_000, settings_ttl, clock)),
            facets: None,
        }
    }

    /// Keep items' facet values in memory for counting events: only where every write to the
    /// catalog goes through this node (the embedded store, which one process holds), since a
    /// write elsewhere would not reach the cache.
    pub fn cache_facets(mut self) -> Self {
        self.facets = Some(Arc::new(FacetsCache {
            items: quick_cache::sync::Cache::new(FACETS_CACHED),
            generations: Default::default(),
        }));
        self
    }

    /// A write to an app's catalog: once it is done (or failed, maybe half-done), the facets
    /// cached before it are not used again.
    pub(crate) async fn changing<T, E: Into<crate::EngineError>>(
        &self,
        app: &str,
        write: impl std::future::Future<Output = std::result::Result<T, E>>,
    ) -> Result<T> {
        let written = write.await;
        if let Some(cache) = &self.facets {
            cache.bump(app);
        }
        written.map_err(Into::into)
    }

    /// The facet values ([`facet_values`]) of some items of one index, as their records are
    /// now; items without a record are left out.
    pub async fn facets_many(
        &self,
        app: &str,
        index: &str,
        object_ids: &[String],
    ) -> Result<BTreeMap<String, ItemFacets>> {
        let Some(cache) = &self.facets else {
            let records = self.get_many(app, index, object_ids).await?;
            return Ok(records
                .into_iter()
                .map(|(id, record)| (id, facet_values(&record).into()))
                .collect());
        };
        let generation = cache.generation(app);
        let mut out = BTreeMap::new();
        let mut missing = Vec::new();
        for id in object_ids {
            let key = (app.to_owned(), index.to_owned(), id.clone());
            match cache.items.get(&key) {
                Some((g, facets)) if g == generation => {
                    if let Some(facets) = facets {
                        out.insert(id.clone(), facets);
                    }
                }
                _ => missing.push(id.clone()),
            }
        }
        if missing.is_empty() {
            return Ok(out);
        }
        let mut records = self.get_many(app, index, &missing).await?;
        for id in missing {
            let facets: Option<ItemFacets> = records.remove(&id).map(|r| facet_values(&r).into());
            if let Some(facets) = &facets {
                out.insert(id.clone(), facets.clone());
            }
            if check_object_id(&id).is_ok() {
                let key = (app.to_owned(), index.to_owned(), id);
                cache.items.insert(key, (generation, facets));
            }
        }
        Ok(out)
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

    /// The objectIDs of every record of an index (keys only).
    pub async fn object_ids(&self, app: &str, index: &str) -> Result<Vec<String>> {
        check_index_name(index)?;
        let prefix = index_prefix(app, index);
        self.ids(app, index, RowSet::prefix(prefix), None).await
    }

    /// Which of these objectIDs have a record in the index (keys only, one read).
    pub async fn present(
        &self,
        app: &str,
        index: &str,
        object_ids: &[String],
    ) -> Result<std::collections::HashSet<String>> {
        check_index_name(index)?;
        let keys: Vec<Bytes> = object_ids
            .iter()
            .filter(|id| check_object_id(id).is_ok())
            .map(|id| row_key(app, index, id))
            .collect();
        if keys.is_empty() {
            return Ok(Default::default());
        }
        let ids = self.ids(app, index, RowSet::keys(keys), None).await?;
        Ok(ids.into_iter().collect())
    }

    /// The objectIDs of an index's first `n` records, in key order (keys only).
    pub async fn first_ids(&self, app: &str, index: &str, n: usize) -> Result<Vec<String>> {
        check_index_name(index)?;
        let prefix = index_prefix(app, index);
        self.ids(app, index, RowSet::prefix(prefix), Some(n as u64))
            .await
    }

    /// The objectIDs of the records of `index` among `rows`, reading keys only.
    async fn ids(
        &self,
        app: &str,
        index: &str,
        rows: RowSet,
        limit: Option<u64>,
    ) -> Result<Vec<String>> {
        let keys_only = penchant_store::RowFilter::StripValue
            .and(penchant_store::RowFilter::CellsPerRowLimit(1));
        let mut request = penchant_store::ReadRows::new(rows).filter(keys_only);
        if let Some(limit) = limit {
            request = request.limit(limit);
        }
        let prefix = index_prefix(app, index);
        let rows = self.store.read_all(CATALOG_TABLE, request).await?;
        Ok(rows
            .iter()
            .filter_map(|r| std::str::from_utf8(r.key.strip_prefix(&prefix[..])?).ok())
            .map(str::to_owned)
            .collect())
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
    /// for `Clear`). All or nothing: every write is checked (partial updates' operations
    /// included) and the whole request played on the records it reads before anything is
    /// written, so a bad write anywhere, or a partial update that fails on its record (an
    /// overflow), writes nothing.
    pub async fn apply(&self, app: &str, writes: Vec<(String, Write)>) -> Result<Vec<String>> {
        enum Planned {
            Put(Record, Bytes),
            Partial(PartialUpdate, bool),
            Delete,
            Clear,
        }
        // Check and parse every write, reading nothing.
        let mut planned: Vec<(String, String, Planned)> = Vec::with_capacity(writes.len());
        for (index, write) in writes {
            check_index_name(&index)?;
            let (id, plan) = match write {
                Write::Put(mut record) => {
                    let id = object_id_of(&record)?.unwrap_or_else(generated_id);
                    record.insert("objectID".into(), Value::String(id.clone()));
                    let bytes = check_record(&record)?;
                    (id, Planned::Put(record, bytes))
                }
                Write::Partial { record, create } => {
                    let id = object_id_of(&record)?
                        .ok_or_else(|| invalid("Missing objectID in a partial update"))?;
                    (id, Planned::Partial(PartialUpdate::parse(&record)?, create))
                }
                Write::Delete(id) => {
                    check_object_id(&id)?;
                    (id, Planned::Delete)
                }
                Write::Clear => (String::new(), Planned::Clear),
            };
            planned.push((index, id, plan));
        }
        // The records partial updates start from, as stored.
        let mut targets: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for (index, id, plan) in &planned {
            if let Planned::Partial(..) = plan {
                targets.entry(index).or_default().push(id.clone());
            }
        }
        let mut stored: BTreeMap<(String, String), Record> = BTreeMap::new();
        for (index, ids) in targets {
            for (id, record) in self.get_many(app, index, &ids).await? {
                stored.insert((index.to_owned(), id), record);
            }
        }
        // Play the request: the final state of each record it touches (`None`: deleted), and
        // the indexes it clears.
        let mut state: BTreeMap<(String, String), Option<(Record, Bytes)>> = BTreeMap::new();
        let mut cleared: Vec<String> = Vec::new();
        let mut ids = Vec::with_capacity(planned.len());
        let written: std::collections::BTreeSet<String> =
            planned.iter().map(|(index, _, _)| index.clone()).collect();
        for (index, id, plan) in planned {
            let key = (index, id);
            match plan {
                Planned::Put(record, bytes) => {
                    state.insert(key.clone(), Some((record, bytes)));
                }
                Planned::Partial(update, create) => {
                    let current = match state.get(&key) {
                        Some(s) => s.as_ref().map(|(r, _)| r.clone()),
                        None if cleared.contains(&key.0) => None,
                        None => stored.get(&key).cloned(),
                    };
                    let base = match (current, create) {
                        (Some(r), _) => Some(r),
                        (None, true) => Some(Record::new()),
                        (None, false) => None,
                    };
                    if let Some(mut updated) = base.map(|b| update.apply(b)).transpose()?.flatten()
                    {
                        updated.insert("objectID".into(), Value::String(key.1.clone()));
                        let bytes = check_record(&updated)?;
                        state.insert(key.clone(), Some((updated, bytes)));
                    }
                }
                Planned::Delete => {
                    state.insert(key.clone(), None);
                }
                Planned::Clear => {
                    state.retain(|(index, _), _| *index != key.0);
                    if !cleared.contains(&key.0) {
                        cleared.push(key.0.clone());
                    }
                }
            }
            ids.push(key.1);
        }
        // Write it: the indexes' rows (they exist from now on), the cleared indexes, then each
        // record's final state.
        let touched: std::collections::BTreeSet<&str> =
            written.iter().map(String::as_str).collect();
        self.touch(app, &touched).await?;
        for index in &cleared {
            let prefix = index_prefix(app, index);
            self.changing(app, self.store.delete_prefix(CATALOG_TABLE, prefix))
                .await?;
        }
        let batch: Vec<RowMutation> = state
            .into_iter()
            .map(|((index, id), record)| {
                let mutation = match record {
                    Some((_, bytes)) => Mutation::set_now(FAMILY, COLUMN, bytes),
                    None => Mutation::DeleteFromRow,
                };
                RowMutation::new(row_key(app, &index, &id), vec![mutation])
            })
            .collect();
        self.flush(app, batch).await?;
        Ok(ids)
    }

    async fn flush(&self, app: &str, batch: Vec<RowMutation>) -> Result<()> {
        let written = async {
            for chunk in batch.chunks(1000) {
                for status in self
                    .store
                    .mutate_rows(CATALOG_TABLE, chunk.to_vec())
                    .await?
                {
                    status?;
                }
            }
            Ok::<_, penchant_store::StoreError>(())
        };
        self.changing(app, written).await
    }
}

/// The facet values of a record: `(facet, value)` for every scalar attribute, every element of
/// an array, and nested objects by dotted path. `objectID` and attributes starting with `_` are
/// not facets, nor strings longer than [`MAX_FACET_VALUE_BYTES`], nor paths longer than
/// [`MAX_ATTRIBUTE_PATH_BYTES`] (records are refused with one, but some may have been stored
/// before the limit).
pub fn facet_values(record: &Record) -> Vec<(String, String)> {
    fn walk(path: &str, value: &Value, out: &mut Vec<(String, String)>) {
        if path.len() > MAX_ATTRIBUTE_PATH_BYTES {
            return;
        }
        match value {
            Value::String(s) if s.len() > MAX_FACET_VALUE_BYTES => {}
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

    fn partial_error(r: &mut Record, changes: Value) -> String {
        match apply_partial(r, &record(changes)) {
            Err(EngineError::Invalid(m)) => m,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn malformed_partial_operations_are_refused() {
        let mut r = record(json!({"n": 1}));
        let cases = [
            (
                json!({"tags": {"_operation": "Add"}}),
                "partial update of attribute \"tags\": operation Add needs a value",
            ),
            (
                json!({"n": {"_operation": "Increment", "value": "x"}}),
                "partial update of attribute \"n\": operation Increment needs a number, not a string",
            ),
            (
                json!({"n": {"_operation": "Decrement", "value": null}}),
                "partial update of attribute \"n\": operation Decrement needs a number, not null",
            ),
            (
                json!({"t": {"_operation": "AddUnique", "value": {"a": 1}}}),
                "partial update of attribute \"t\": operation AddUnique needs a number or a string, not an object",
            ),
            (
                json!({"v": {"_operation": "IncrementSet", "value": 1.5}}),
                "partial update of attribute \"v\": operation IncrementSet needs an integer, not a number",
            ),
            (
                json!({"n": {"_operation": 3, "value": 1}}),
                "partial update of attribute \"n\": _operation must be a string, not a number; supported: Increment, Decrement, Add, Remove, AddUnique, IncrementFrom, IncrementSet",
            ),
            (
                json!({"n": {"_operation": "Nope", "value": 1}}),
                "partial update of attribute \"n\": unsupported _operation \"Nope\"; supported: Increment, Decrement, Add, Remove, AddUnique, IncrementFrom, IncrementSet",
            ),
        ];
        for (changes, message) in cases {
            assert_eq!(partial_error(&mut r, changes), message);
        }
        assert_eq!(Value::Object(r.clone()), json!({"n": 1}), "nothing applied");
        let big = json!({"n": {"_operation": "Increment", "value": 1.79e308}});
        apply_partial(&mut r, &record(big.clone())).unwrap();
        assert_eq!(
            partial_error(&mut r, big),
            "partial update of attribute \"n\": operation Increment overflows: 1.79e+308 + 1.79e+308 \
             is beyond the largest number (about 1.8e308)"
        );
        // Integers stay exact, and an integer overflow goes on in floating point.
        let mut r = record(json!({"n": 9_007_199_254_740_993_i64, "m": i64::MAX}));
        let changes = record(json!({
            "n": {"_operation": "Increment", "value": 1},
            "m": {"_operation": "Increment", "value": 1},
        }));
        apply_partial(&mut r, &changes).unwrap();
        assert_eq!(r["n"], json!(9_007_199_254_740_994_i64));
        assert_eq!(r["m"], json!(9.223372036854776e18));
    }

    #[test]
    fn remove_and_conditional_increments() {
        let mut r = record(json!({"tags": ["a", "b", "a"], "v": 2}));
        let changes = record(json!({"tags": {"_operation": "Remove", "value": "a"}}));
        assert!(apply_partial(&mut r, &changes).unwrap());
        assert_eq!(r["tags"], json!(["b"]));
        // IncrementFrom: only from the current value, else the whole update is ignored.
        let from =
            |v: i64| record(json!({"v": {"_operation": "IncrementFrom", "value": v}, "x": 1}));
        assert!(!apply_partial(&mut r, &from(1)).unwrap());
        assert_eq!(Value::Object(r.clone()), json!({"tags": ["b"], "v": 2}));
        assert!(apply_partial(&mut r, &from(2)).unwrap());
        assert_eq!(r["v"], 3);
        assert_eq!(r["x"], 1);
        // IncrementSet: only upwards.
        let set = |v: i64| record(json!({"v": {"_operation": "IncrementSet", "value": v}}));
        assert!(!apply_partial(&mut r, &set(3)).unwrap());
        assert!(apply_partial(&mut r, &set(10)).unwrap());
        assert_eq!(r["v"], 10);
        // A missing attribute (or record) counts as 0.
        let mut empty = Record::new();
        assert!(!apply_partial(&mut empty, &from(1)).unwrap());
        assert!(!apply_partial(&mut empty, &set(0)).unwrap());
        assert!(apply_partial(&mut empty, &from(0)).unwrap());
        assert_eq!(empty["v"], 1);
    }

    #[test]
    fn attribute_paths_and_facet_values_are_bounded() {
        let long = "a".repeat(MAX_ATTRIBUTE_PATH_BYTES + 1);
        let ok = "a".repeat(MAX_ATTRIBUTE_PATH_BYTES);
        assert!(check_record(&record(json!({ &ok: 1 }))).is_ok());
        for r in [
            json!({ &long: 1 }),
            json!({ "x": { &ok: 1 } }),
            json!({ "x": [{ "y": { &long: true } }] }),
            json!({ "_private": { &long: 1 } }),
        ] {
            let Err(EngineError::Invalid(m)) = check_record(&record(r.clone())) else {
                panic!("{r}")
            };
            assert!(
                m.contains("bytes long (by dotted path), the limit is 1000"),
                "{m}"
            );
            assert!(
                m.contains(&format!("{}…", &ok[..50])) && m.len() < 200,
                "{m}"
            );
        }
        let f = facet_values(&record(json!({
            "brand": "x".repeat(MAX_FACET_VALUE_BYTES),
            "description": "x".repeat(MAX_FACET_VALUE_BYTES + 1),
            &long: "y",
        })));
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].0, "brand");
    }

    #[tokio::test]
    async fn a_request_is_all_or_nothing() {
        let store: Arc<dyn Store> = Arc::new(penchant_store::MemStore::new());
        crate::tables::create(&*store, &[CATALOG, INDEXES])
            .await
            .unwrap();
        let c = Catalog::new(
            store,
            std::time::Duration::ZERO,
            crate::clock::Clock::default(),
        );
        let put = |v: Value| Write::Put(record(v));
        let partial = |v: Value| Write::Partial {
            record: record(v),
            create: true,
        };
        let items = |w: Write| ("items".to_owned(), w);
        c.apply(
            "APP",
            vec![
                items(put(json!({"objectID": "x", "n": 1.0e308}))),
                items(put(json!({"objectID": "d"}))),
                ("other".into(), put(json!({"objectID": "o"}))),
            ],
        )
        .await
        .unwrap();
        let big = json!({"objectID": "x", "n": {"_operation": "Increment", "value": 1.0e308}});
        // A bad operation, or an overflow that only the stored record shows, after writes and
        // a clear of another index: nothing is written.
        for last in [
            partial(json!({"objectID": "y", "n": {"_operation": "Nope"}})),
            partial(big.clone()),
        ] {
            let r = c
                .apply(
                    "APP",
                    vec![
                        items(put(json!({"objectID": "new"}))),
                        ("other".into(), Write::Clear),
                        items(Write::Delete("d".into())),
                        items(partial(
                            json!({"objectID": "x", "n": {"_operation": "Increment", "value": 1}}),
                        )),
                        items(last),
                    ],
                )
                .await;
            assert!(matches!(r, Err(EngineError::Invalid(_))), "{r:?}");
            assert!(c.get("APP", "items", "new").await.unwrap().is_none());
            assert!(c.get("APP", "items", "d").await.unwrap().is_some());
            assert_eq!(
                c.get("APP", "items", "x").await.unwrap().unwrap()["n"],
                1.0e308
            );
            assert!(c.get("APP", "other", "o").await.unwrap().is_some());
        }
        // Partial updates see the request's earlier writes, and a clear.
        let ids = c
            .apply(
                "APP",
                vec![
                    items(put(json!({"objectID": "new", "n": 1}))),
                    items(partial(
                        json!({"objectID": "new", "n": {"_operation": "Increment", "value": 2}}),
                    )),
                    ("other".into(), Write::Clear),
                    ("other".into(), partial(json!({"objectID": "o", "k": 1}))),
                    items(Write::Delete("x".into())),
                    items(partial(
                        json!({"objectID": "x", "n": {"_operation": "IncrementSet", "value": 0}}),
                    )),
                ],
            )
            .await
            .unwrap();
        assert_eq!(ids, ["new", "new", "", "o", "x", "x"]);
        assert_eq!(c.get("APP", "items", "new").await.unwrap().unwrap()["n"], 3);
        assert_eq!(
            Value::Object(c.get("APP", "other", "o").await.unwrap().unwrap()),
            json!({"objectID": "o", "k": 1})
        );
        assert!(
            c.get("APP", "items", "x").await.unwrap().is_none(),
            "not created"
        );
    }

    #[tokio::test]
    async fn writes_and_reads() {
        let store: Arc<dyn Store> = Arc::new(penchant_store::MemStore::new());
        crate::tables::create(&*store, &[CATALOG, INDEXES])
            .await
            .unwrap();
        let c = Catalog::new(
            store,
            std::time::Duration::ZERO,
            crate::clock::Clock::default(),
        );
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
