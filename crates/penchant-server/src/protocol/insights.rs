//! Algolia's Insights protocol: `POST /1/events` bodies validated into the engine's
//! [`Event`]s, with Algolia's checks in Algolia's order and Algolia's messages
//! (`docs/research/insights-errors.md`). Every event must be valid or none is stored. And back:
//! [`to_insights`] shows a stored event as Insights sent it.

use std::time::Duration;

use penchant_engine::catalog::{
    MAX_ATTRIBUTE_PATH_BYTES, MAX_FACET_VALUE_BYTES, MAX_INDEX_NAME_BYTES, MAX_OBJECT_ID_BYTES,
    check_index_name, check_object_id,
};
use penchant_engine::events::{Event, EventType, Target};
use penchant_engine::keys::{USER_TOKEN_MESSAGE, user_token_ok};
use serde_json::{Map, Value};

use crate::error::{ApiError, ErrorKind};

/// The oldest event accepted.
pub const MAX_EVENT_AGE: Duration = Duration::from_secs(30 * 24 * 3600);
/// How far in the future an event may be (clock skew).
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(3600);
pub const MAX_EVENTS: usize = 1000;
pub const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;
const MAX_ITEMS: usize = 20;

/// Why a request of events is refused: Algolia's message (a 422).
type Rejection = ApiError;

fn reject(message: impl Into<String>) -> Rejection {
    ApiError::kind(ErrorKind::Unprocessable, message)
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Algolia's (Go) type error: the field reported is `events`, whatever the nested field.
fn type_error(expected: &str, got: &Value) -> Rejection {
    reject(format!(
        "Invalid type for field events: expected {expected}, got {}",
        json_type(got)
    ))
}

fn string_field(event: &Map<String, Value>, name: &str) -> Result<Option<String>, Rejection> {
    match event.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(type_error("string", other)),
    }
}

fn string_list(event: &Map<String, Value>, name: &str) -> Result<Option<Vec<String>>, Rejection> {
    match event.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.clone()),
                other => Err(type_error("string", other)),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(other) => Err(type_error("[]string", other)),
    }
}

/// Percent-decoding of one filter part (`discount%3A10%25` → `discount:10%`).
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// A filter string as (attribute, value). search-insights percent-encodes the whole string
/// (`brand%3AApple`), the REST API documents encoding each part (`discount:10%25`): both work.
fn parse_filter(raw: &str) -> Option<(String, String)> {
    let decoded_whole = if raw.contains(':') {
        None
    } else {
        percent_decode(raw)
    };
    let (attr, value) = match &decoded_whole {
        Some(d) => d.split_once(':')?,
        None => raw.split_once(':')?,
    };
    let (attr, value) = if decoded_whole.is_some() {
        (attr.to_owned(), value.to_owned())
    } else {
        (percent_decode(attr)?, percent_decode(value)?)
    };
    (!attr.is_empty()).then_some((attr, value))
}

/// Validate one event (Algolia's checks, in Algolia's order), `now` in ms.
pub fn validate_event(raw: &Value, now: i64) -> Result<Event, Rejection> {
    let Value::Object(e) = raw else {
        return Err(type_error("insights.PublicEvent", raw));
    };
    let event_name = match string_field(e, "eventName")? {
        None => return Err(reject("EventName is required")),
        Some(n) => n,
    };
    if event_name.is_empty()
        || event_name.len() > 64
        || !event_name.bytes().all(|b| (0x20..=0x7e).contains(&b))
    {
        return Err(reject(
            "EventName must contain only visible ASCII characters, and be between 1 and 64 \
             characters long",
        ));
    }
    let event_type = match string_field(e, "eventType")?.as_deref() {
        None => return Err(reject("EventType is required")),
        Some("click") => EventType::Click,
        Some("conversion") => EventType::Conversion,
        Some("view") => EventType::View,
        Some(_) => {
            return Err(reject(
                r#"EventType must be one of "click", "conversion" or "view""#,
            ));
        }
    };
    let event_subtype = string_field(e, "eventSubtype")?;
    if let Some(sub) = &event_subtype {
        if event_type != EventType::Conversion {
            return Err(reject(
                "Only event of type conversion should specify the eventSubtype attribute",
            ));
        }
        if sub != "addToCart" && sub != "purchase" {
            return Err(reject(
                r#"EventSubtype must be one of "addToCart" or "purchase""#,
            ));
        }
    }
    let index = string_field(e, "index")?.unwrap_or_default();
    if index.is_empty() {
        return Err(reject("The index field is required"));
    }
    // Penchant: the index name and each objectID are parts of row keys (a record's, a
    // co-interaction list's, a vector's), bounded as a record's are.
    if check_index_name(&index).is_err() {
        return Err(reject(format!(
            "The index name must be 1 to {MAX_INDEX_NAME_BYTES} bytes without control characters"
        )));
    }
    let user_token = string_field(e, "userToken")?.unwrap_or_default();
    if user_token.is_empty() {
        return Err(reject("The userToken field is required"));
    }
    if !user_token_ok(&user_token) {
        return Err(reject(USER_TOKEN_MESSAGE));
    }
    let authenticated_user_token = string_field(e, "authenticatedUserToken")?;
    if authenticated_user_token
        .as_deref()
        .is_some_and(|t| !user_token_ok(t))
    {
        return Err(reject(
            "AuthenticatedUserToken must contain only alphanumeric, equal, plus, slash, hyphen, \
             or underscore characters, and be between 1 and 128 characters long",
        ));
    }
    let object_ids = string_list(e, "objectIDs")?.filter(|l| !l.is_empty());
    let filters = string_list(e, "filters")?.filter(|l| !l.is_empty());
    let target = match (object_ids, filters) {
        (None, None) => {
            return Err(reject(
                "Event should specify either some ObjectIDs or some Filters",
            ));
        }
        (Some(_), Some(_)) => {
            return Err(reject(
                "Event should specify ObjectIDs or Filters, but not both",
            ));
        }
        (Some(ids), None) => {
            if ids.len() > MAX_ITEMS {
                return Err(reject("Cannot process more that 20 objects in an event"));
            }
            if let Some((i, id)) = ids
                .iter()
                .enumerate()
                .find(|(_, id)| check_object_id(id).is_err())
            {
                return Err(reject(format!(
                    "ObjectID must be 1 to {MAX_OBJECT_ID_BYTES} bytes without a 0 byte: \
                     objectIDs[{i}] is {} bytes",
                    id.len()
                )));
            }
            Target::ObjectIds(ids)
        }
        (None, Some(fs)) => {
            if fs.len() > MAX_ITEMS {
                return Err(reject("Cannot process more that 20 filters in an event"));
            }
            let parsed = fs
                .iter()
                .map(|f| {
                    parse_filter(f).ok_or_else(|| {
                        reject(format!(
                            "Filter `{f}` must be of the form attribute:value (URL-encoded)"
                        ))
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            // The attribute becomes a facet, part of a store qualifier, as a record's does.
            if let Some((attribute, _)) = parsed
                .iter()
                .find(|(a, _)| a.len() > MAX_ATTRIBUTE_PATH_BYTES)
            {
                let start: String = attribute.chars().take(64).collect();
                return Err(reject(format!(
                    "Filter attribute `{start}…` is longer than {MAX_ATTRIBUTE_PATH_BYTES} bytes"
                )));
            }
            // The value is counted as a facet value: longer ones are not facet values.
            if let Some((attribute, value)) =
                parsed.iter().find(|(_, v)| v.len() > MAX_FACET_VALUE_BYTES)
            {
                return Err(reject(format!(
                    "Filter value of `{attribute}` is {} bytes, longer than \
                     {MAX_FACET_VALUE_BYTES} bytes",
                    value.len()
                )));
            }
            Target::Filters(parsed)
        }
    };
    let query_id = string_field(e, "queryID")?;
    if let Some(q) = &query_id
        && (q.len() != 32 || !q.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
    {
        return Err(reject(
            "Query ID must be a search query ID (32 characters hexadecimal string)",
        ));
    }
    let positions = match e.get("positions") {
        None | Some(Value::Null) => None,
        Some(Value::Array(items)) => Some(
            items
                .iter()
                .map(|v| v.as_i64().ok_or_else(|| type_error("int", v)))
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Some(other) => return Err(type_error("[]int", other)),
    };
    if let Some(ps) = &positions {
        if event_type != EventType::Click {
            return Err(reject(
                "Only event of type click should specify the positions attribute",
            ));
        }
        if query_id.is_none() {
            return Err(reject(
                "Event of type click with positions should specify a queryID",
            ));
        }
        if ps.iter().any(|p| *p <= 0) {
            return Err(reject(
                "Event of type click may only have strictly positive positions",
            ));
        }
    }
    if event_type == EventType::Click
        && query_id.is_some()
        && let Target::ObjectIds(ids) = &target
        && positions.as_ref().is_none_or(|p| p.len() != ids.len())
    {
        return Err(reject(
            "Event of type click should have the same number of ObjectIDs and Positions",
        ));
    }
    let timestamp = match e.get("timestamp") {
        None | Some(Value::Null) => now,
        Some(v) => v.as_i64().ok_or_else(|| type_error("int64", v))?,
    };
    if timestamp < now - MAX_EVENT_AGE.as_millis() as i64 {
        return Err(reject("The timestamp must be at most 30 days in the past"));
    }
    if timestamp > now + MAX_CLOCK_SKEW.as_millis() as i64 {
        return Err(reject("The timestamp must not be in the future"));
    }
    let object_data = match e.get("objectData") {
        None | Some(Value::Null) => None,
        Some(Value::Array(items)) => Some(items.clone()),
        Some(other) => return Err(type_error("[]insights.ObjectData", other)),
    };
    if let Some(data) = &object_data {
        let n = match &target {
            Target::ObjectIds(ids) => ids.len(),
            Target::Filters(_) => 0,
        };
        if data.len() != n {
            return Err(reject(
                "Event should have the same number of ObjectIDs and ObjectData",
            ));
        }
        for d in data {
            if let Some(q) = d.get("queryID").and_then(Value::as_str)
                && (q.len() != 32 || !q.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
            {
                return Err(reject(
                    "Query ID must be a search query ID (32 characters hexadecimal string)",
                ));
            }
        }
    }
    let value = e.get("value").filter(|v| !v.is_null()).cloned();
    if let Some(v) = &value
        && !v.is_number()
        && v.as_str().is_none_or(|s| s.parse::<f64>().is_err())
    {
        return Err(type_error("number", v));
    }
    let currency = string_field(e, "currency")?;
    let priced = value.is_some()
        || object_data
            .iter()
            .flatten()
            .any(|d| d.get("price").is_some_and(|p| !p.is_null()));
    if priced && currency.is_none() {
        return Err(reject(
            "Currency is required when value or price is specified",
        ));
    }
    if let Some(c) = &currency
        && (c.len() != 3 || !c.bytes().all(|b| b.is_ascii_uppercase()))
    {
        return Err(reject(
            "Currency must be a three-letter ISO-4217 currency code",
        ));
    }
    Ok(Event {
        event_type,
        event_subtype,
        event_name,
        index,
        user_token,
        authenticated_user_token,
        timestamp,
        target,
        query_id,
        positions,
        object_data,
        value,
        currency,
    })
}

/// A stored event in Insights' shape: `objectIDs` or `filters` (`"attribute:value"`), and the
/// optional fields it was sent with.
pub fn to_insights(event: &Event) -> Value {
    let mut out = serde_json::Map::new();
    out.insert("eventType".into(), event.event_type.as_str().into());
    if let Some(subtype) = &event.event_subtype {
        out.insert("eventSubtype".into(), subtype.clone().into());
    }
    out.insert("eventName".into(), event.event_name.clone().into());
    out.insert("index".into(), event.index.clone().into());
    out.insert("userToken".into(), event.user_token.clone().into());
    if let Some(token) = &event.authenticated_user_token {
        out.insert("authenticatedUserToken".into(), token.clone().into());
    }
    out.insert("timestamp".into(), event.timestamp.into());
    match &event.target {
        Target::ObjectIds(ids) => out.insert("objectIDs".into(), ids.clone().into()),
        Target::Filters(filters) => out.insert(
            "filters".into(),
            filters
                .iter()
                .map(|(attribute, value)| format!("{attribute}:{value}"))
                .collect::<Vec<_>>()
                .into(),
        ),
    };
    let optional = [
        ("queryID", event.query_id.clone().map(Value::from)),
        ("positions", event.positions.clone().map(Value::from)),
        ("objectData", event.object_data.clone().map(Value::from)),
        ("value", event.value.clone()),
        ("currency", event.currency.clone().map(Value::from)),
    ];
    for (name, value) in optional {
        if let Some(value) = value {
            out.insert(name.into(), value);
        }
    }
    Value::Object(out)
}

/// A request's valid events.
#[derive(Debug)]
pub struct Request {
    pub events: Vec<Event>,
    /// The positions of the events that came without a timestamp, stamped with `now`.
    pub stamped: Vec<usize>,
}

/// Validate a whole request body (its size is checked once, by the route's body limit): every
/// event valid, or the first problem.
pub fn validate_request(body: &[u8], now: i64) -> Result<Request, Rejection> {
    let value: Value = serde_json::from_slice(body).map_err(|_| reject("Invalid payload"))?;
    let events = match &value {
        Value::Array(_) => {
            return Err(reject(
                "Invalid type for field : expected insights.PublicEventsBatch, got array",
            ));
        }
        Value::Object(map) => match map.get("events") {
            None | Some(Value::Null) => return Err(reject("No events to process")),
            Some(Value::Array(events)) => events,
            Some(other) => return Err(type_error("[]insights.PublicEvent", other)),
        },
        other => return Err(type_error("insights.PublicEventsBatch", other)),
    };
    if events.is_empty() {
        return Err(reject("No events to process"));
    }
    if events.len() > MAX_EVENTS {
        return Err(reject("Cannot process more than 1000 events in a batch"));
    }
    let stamped = events
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e.get("timestamp"), None | Some(Value::Null)))
        .map(|(i, _)| i)
        .collect();
    Ok(Request {
        events: events
            .iter()
            .map(|e| validate_event(e, now))
            .collect::<Result<_, _>>()?,
        stamped,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: i64 = 1_800_000_000_000;

    fn valid() -> Value {
        json!({"eventType": "click", "eventName": "Product Clicked", "index": "products",
               "userToken": "user-1", "objectIDs": ["a", "b"]})
    }

    /// What `to_insights` shows is what was sent, and validates into the same event.
    #[test]
    fn stored_events_show_as_sent() {
        let sent = [
            json!({"eventType": "click", "eventName": "Clicked", "index": "products",
                   "userToken": "u1", "timestamp": NOW - 5, "objectIDs": ["a", "b"],
                   "queryID": "a".repeat(32), "positions": [1, 2]}),
            json!({"eventType": "view", "eventName": "Viewed", "index": "products",
                   "userToken": "u1", "authenticatedUserToken": "account-1",
                   "timestamp": NOW - 5, "filters": ["brand:Apple", "color:red"]}),
            json!({"eventType": "conversion", "eventSubtype": "purchase", "eventName": "Bought",
                   "index": "products", "userToken": "u1", "timestamp": NOW - 5,
                   "objectIDs": ["a"], "objectData": [{"price": 10, "quantity": 1}],
                   "value": 10, "currency": "EUR"}),
        ];
        for raw in sent {
            let event = validate_event(&raw, NOW).unwrap();
            let shown = to_insights(&event);
            assert_eq!(shown, raw);
            assert_eq!(validate_event(&shown, NOW).unwrap(), event);
        }
    }

    fn check(mut edit: impl FnMut(&mut Map<String, Value>), message: &str) {
        let mut e = valid();
        edit(e.as_object_mut().unwrap());
        let got = validate_event(&e, NOW).map(|_| ()).unwrap_err();
        assert_eq!(got.message, message, "{e}");
        assert_eq!(got.kind, ErrorKind::Unprocessable);
    }

    #[test]
    fn every_rule_has_its_message() {
        validate_event(&valid(), NOW).unwrap();
        check(
            |e| {
                e.remove("eventName");
            },
            "EventName is required",
        );
        let name = "EventName must contain only visible ASCII characters, and be between 1 and 64 characters long";
        check(
            |e| {
                e.insert("eventName".into(), json!(""));
            },
            name,
        );
        check(
            |e| {
                e.insert("eventName".into(), json!("x".repeat(65)));
            },
            name,
        );
        check(
            |e| {
                e.insert("eventName".into(), json!("caf\u{e9}"));
            },
            name,
        );
        check(
            |e| {
                e.insert("eventName".into(), json!("tab\there"));
            },
            name,
        );
        check(
            |e| {
                e.remove("eventType");
            },
            "EventType is required",
        );
        check(
            |e| {
                e.insert("eventType".into(), json!("purchase"));
            },
            r#"EventType must be one of "click", "conversion" or "view""#,
        );
        check(
            |e| {
                e.insert("eventSubtype".into(), json!("purchase"));
            },
            "Only event of type conversion should specify the eventSubtype attribute",
        );
        check(
            |e| {
                e.insert("eventType".into(), json!("conversion"));
                e.insert("eventSubtype".into(), json!("buy"));
            },
            r#"EventSubtype must be one of "addToCart" or "purchase""#,
        );
        check(
            |e| {
                e.remove("index");
            },
            "The index field is required",
        );
        check(
            |e| {
                e.remove("userToken");
            },
            "The userToken field is required",
        );
        let token = "UserToken must contain only alphanumeric, equal, plus, slash, hyphen, or underscore characters, and be between 1 and 128 characters long";
        check(
            |e| {
                e.insert("userToken".into(), json!("has space"));
            },
            token,
        );
        check(
            |e| {
                e.insert("userToken".into(), json!("x".repeat(130)));
            },
            token,
        );
        check(
            |e| {
                e.insert("authenticatedUserToken".into(), json!("bad!"));
            },
            "AuthenticatedUserToken must contain only alphanumeric, equal, plus, slash, hyphen, or underscore characters, and be between 1 and 128 characters long",
        );
        check(
            |e| {
                e.remove("objectIDs");
            },
            "Event should specify either some ObjectIDs or some Filters",
        );
        check(
            |e| {
                e.insert("filters".into(), json!(["brand:Apple"]));
            },
            "Event should specify ObjectIDs or Filters, but not both",
        );
        check(
            |e| {
                e.insert("objectIDs".into(), json!(vec!["x"; 21]));
            },
            "Cannot process more that 20 objects in an event",
        );
        check(
            |e| {
                e.remove("objectIDs");
                e.insert("filters".into(), json!(vec!["a:b"; 21]));
            },
            "Cannot process more that 20 filters in an event",
        );
        check(
            |e| {
                e.remove("objectIDs");
                e.insert("filters".into(), json!(["novalue"]));
            },
            "Filter `novalue` must be of the form attribute:value (URL-encoded)",
        );
        check(
            |e| {
                e.remove("objectIDs");
                e.insert("filters".into(), json!([format!("{}:v", "a".repeat(1001))]));
            },
            &format!(
                "Filter attribute `{}…` is longer than 1000 bytes",
                "a".repeat(64)
            ),
        );
        check(
            |e| {
                e.remove("objectIDs");
                e.insert(
                    "filters".into(),
                    json!([format!("brand:{}", "v".repeat(1001))]),
                );
            },
            "Filter value of `brand` is 1001 bytes, longer than 1000 bytes",
        );
        // Row key parts: an objectID and an index name are bounded as a record's are.
        check(
            |e| {
                e.insert("objectIDs".into(), json!(["a", "x".repeat(5000)]));
            },
            "ObjectID must be 1 to 512 bytes without a 0 byte: objectIDs[1] is 5000 bytes",
        );
        check(
            |e| {
                e.insert("objectIDs".into(), json!([""]));
            },
            "ObjectID must be 1 to 512 bytes without a 0 byte: objectIDs[0] is 0 bytes",
        );
        check(
            |e| {
                e.insert("index".into(), json!("i".repeat(257)));
            },
            "The index name must be 1 to 256 bytes without control characters",
        );
        check(
            |e| {
                e.insert("index".into(), json!("tab\there"));
            },
            "The index name must be 1 to 256 bytes without control characters",
        );
        check(
            |e| {
                e.insert("queryID".into(), json!("XYZ"));
            },
            "Query ID must be a search query ID (32 characters hexadecimal string)",
        );
        let qid = json!("0123456789abcdef0123456789abcdef");
        check(
            |e| {
                e.insert("eventType".into(), json!("view"));
                e.insert("positions".into(), json!([1, 2]));
            },
            "Only event of type click should specify the positions attribute",
        );
        check(
            |e| {
                e.insert("positions".into(), json!([1, 2]));
            },
            "Event of type click with positions should specify a queryID",
        );
        check(
            |e| {
                e.insert("queryID".into(), qid.clone());
                e.insert("positions".into(), json!([0, 2]));
            },
            "Event of type click may only have strictly positive positions",
        );
        check(
            |e| {
                e.insert("queryID".into(), qid.clone());
                e.insert("positions".into(), json!([1]));
            },
            "Event of type click should have the same number of ObjectIDs and Positions",
        );
        check(
            |e| {
                e.insert("queryID".into(), qid.clone());
            },
            "Event of type click should have the same number of ObjectIDs and Positions",
        );
        check(
            |e| {
                e.insert("timestamp".into(), json!(NOW - 31 * 86_400_000));
            },
            "The timestamp must be at most 30 days in the past",
        );
        check(
            |e| {
                e.insert("timestamp".into(), json!(NOW / 1000));
            },
            "The timestamp must be at most 30 days in the past",
        );
        check(
            |e| {
                e.insert("timestamp".into(), json!(NOW + 2 * 3_600_000));
            },
            "The timestamp must not be in the future",
        );
        check(
            |e| {
                e.insert("objectData".into(), json!([{"price": 1}]));
            },
            "Event should have the same number of ObjectIDs and ObjectData",
        );
        check(
            |e| {
                e.insert("eventType".into(), json!("conversion"));
                e.insert("value".into(), json!(10));
            },
            "Currency is required when value or price is specified",
        );
        check(
            |e| {
                e.insert("eventType".into(), json!("conversion"));
                e.insert("value".into(), json!(10));
                e.insert("currency".into(), json!("usd"));
            },
            "Currency must be a three-letter ISO-4217 currency code",
        );
        check(
            |e| {
                e.insert("userToken".into(), json!(2));
            },
            "Invalid type for field events: expected string, got number",
        );
        // Valid edge cases.
        let mut ok = valid();
        ok["queryID"] = qid;
        ok["positions"] = json!([1, 7]);
        ok["timestamp"] = json!(NOW - 29 * 86_400_000);
        ok["userToken"] = json!("x".repeat(129));
        ok["index"] = json!("i".repeat(256));
        ok["objectIDs"] = json!(["x".repeat(512), "y"]);
        validate_event(&ok, NOW).unwrap();
    }

    #[test]
    fn request_level_rules() {
        let msg = |body: &str| validate_request(body.as_bytes(), NOW).unwrap_err();
        assert_eq!(msg("{not json").message, "Invalid payload");
        assert_eq!(
            msg("[]").message,
            "Invalid type for field : expected insights.PublicEventsBatch, got array"
        );
        assert_eq!(msg(r#"{"events": []}"#).message, "No events to process");
        assert_eq!(msg(r#"{"eventName": "x"}"#).message, "No events to process");
        let many = json!({"events": vec![valid(); 1001]}).to_string();
        assert_eq!(
            msg(&many).message,
            "Cannot process more than 1000 events in a batch"
        );
        // One bad event rejects the request.
        let mut bad = valid();
        bad["eventType"] = json!("nope");
        let mixed = json!({"events": [valid(), bad]}).to_string();
        assert_eq!(msg(&mixed).kind, ErrorKind::Unprocessable);
        let fine = json!({"events": vec![valid(); 1000]}).to_string();
        let fine = validate_request(fine.as_bytes(), NOW).unwrap();
        assert_eq!(fine.events.len(), 1000);
        assert_eq!(fine.stamped.len(), 1000, "none has a timestamp");
        // Those without a timestamp are stamped with the arrival, and said to be.
        let mut dated = valid();
        dated["timestamp"] = json!(NOW - 5);
        // (Not named `null`: in `json!` that word is JSON's null, not the variable.)
        let mut nulled = valid();
        nulled["timestamp"] = Value::Null;
        let body = json!({"events": [dated, valid(), nulled]}).to_string();
        let request = validate_request(body.as_bytes(), NOW).unwrap();
        assert_eq!(request.stamped, [1, 2]);
        let stamps: Vec<i64> = request.events.iter().map(|e| e.timestamp).collect();
        assert_eq!(stamps, [NOW - 5, NOW, NOW]);
    }

    #[test]
    fn filters_decode_either_way() {
        assert_eq!(
            parse_filter("discount:10%25"),
            Some(("discount".into(), "10%".into()))
        );
        assert_eq!(
            parse_filter("discount%3A10%25"),
            Some(("discount".into(), "10%".into()))
        );
        assert_eq!(
            parse_filter("brand:Apple"),
            Some(("brand".into(), "Apple".into()))
        );
        assert_eq!(parse_filter(":x"), None);
        assert_eq!(parse_filter("bad%zz"), None);
    }
}
