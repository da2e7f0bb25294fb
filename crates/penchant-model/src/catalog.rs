//! Catalog records: their limits and checks (index names, objectIDs, a record's size, its
//! attribute paths), Algolia's partial-update operations, and a record's facet values. The
//! engine's `catalog` stores them.

use bytes::Bytes;
use serde_json::{Map, Value};

use crate::{EngineError, Result};

/// A catalog record: a JSON object.
pub type Record = Map<String, Value>;

/// The largest record, serialized.
pub const MAX_RECORD_BYTES: usize = 100 * 1024;
/// The longest objectID and index name, in bytes.
pub const MAX_OBJECT_ID_BYTES: usize = 512;
pub const MAX_INDEX_NAME_BYTES: usize = 256;

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

/// objectIDs: 1 to 512 bytes, no 0 byte.
pub fn check_object_id(id: &str) -> Result<()> {
    if id.is_empty() || id.len() > MAX_OBJECT_ID_BYTES || id.contains('\0') {
        return Err(invalid(format!(
            "objectID must be 1 to {MAX_OBJECT_ID_BYTES} bytes"
        )));
    }
    Ok(())
}

/// A record's objectID, if it has one (a number counts, as its digits).
pub fn object_id_of(record: &Record) -> Result<Option<String>> {
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

/// A record's stored form, refused past [`MAX_RECORD_BYTES`].
pub fn encode(record: &Record) -> Result<Bytes> {
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
pub fn check_record(record: &Record) -> Result<Bytes> {
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
}
