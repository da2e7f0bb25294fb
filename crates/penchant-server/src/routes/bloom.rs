//! Bloom filters over HTTP, in the spirit of RedisBloom's commands (Penchant's own routes).
//!
//! Named key sets (pixiv's partitioned filters):
//! - `POST /1/sets` (`editSettings`) `{name, capacity, errorRate, partitionBytes?, maxErrorRate?}`:
//!   reserve (`BF.RESERVE`); `GET /1/sets` (`search`): list;
//! - `GET /1/sets/{name}` (`search`): info (`BF.INFO`); `DELETE /1/sets/{name}` (`editSettings`);
//! - `POST /1/sets/{name}/add` `{key}` → `{added}` and `/madd` `{keys}` → `{added: [..]}`
//!   (`addObject`);
//! - `POST /1/sets/{name}/exists` `{key}` → `{exists}` and `/mexists` `{keys}` → `{exists: [..]}`
//!   (`search`);
//! - `POST /1/sets/{name}/rebuild[?allowEmpty=true]` (`editSettings`): the body is the key list,
//!   one per line, streamed; 200 with the rebuild, or 409 when the new generation's estimated
//!   false-positive rate passes `maxErrorRate` (the set keeps its generation). A list without a
//!   key (an empty body, blank lines) is refused with a 400, as it would empty the set, unless
//!   the query says `allowEmpty=true`.
//!
//! Users' seen filters (Coffee Meets Bagel's):
//! - `GET/PUT /1/seen/settings` (`search` / `editSettings`): `{filterBits, errorRate, eventTypes}`;
//! - `GET /1/seen/users/{userToken}` (`search`): info; `DELETE` (`deleteObject`): forget;
//! - `POST /1/seen/users/{userToken}/add` `{objectID}` / `/madd` `{objectIDs}` (`search`, as
//!   events are pushed), `/exists` `{objectID}` / `/mexists` `{objectIDs}` and `/unseen`
//!   `{objectIDs}` → `{objectIDs: [the unseen ones, in order]}` (`search`), neither seen nor
//!   hidden;
//! - "not for me": `POST /1/seen/users/{userToken}/hide` `{objectIDs, days?}` → `{hidden,
//!   until}` and `/unhide` `{objectIDs}` → `{unhidden}` (`search`), `GET
//!   /1/seen/users/{userToken}/hidden` → `{hidden: [{objectID, until}]}` (`search`).

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::{Stream, StreamExt};
use penchant_engine::seen::SeenSettings;
use penchant_engine::sets::SetConfig;
use penchant_engine::tenancy::Acl;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::AppState;
use crate::auth::Auth;
use crate::error::{ApiError, to_json};
use crate::json::{AnyJsonBody, JsonBody};
use crate::routes::ReadConsistency;

/// Bodies of key lists: 100,000 keys of up to ~160 bytes.
const MAX_BODY_BYTES: usize = 16 << 20;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/1/sets", get(list_sets).post(reserve))
        .route("/1/sets/{name}", get(set_info).delete(delete_set))
        .route("/1/sets/{name}/rebuild", post(rebuild))
        .route("/1/sets/{name}/{command}", post(set_command))
        .route(
            "/1/seen/settings",
            get(seen_settings).put(set_seen_settings),
        )
        .route(
            "/1/seen/users/{user_token}",
            get(seen_info).delete(seen_clear),
        )
        .route("/1/seen/users/{user_token}/hidden", get(hidden))
        .route("/1/seen/users/{user_token}/{command}", post(seen_command))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
}

/// The keys of a command's body: `{"<field>": "k"}` (`many` false) or `{"<field>": ["k", ...]}`.
fn keys_of(body: Value, field: &str, many: bool) -> Result<Vec<String>, ApiError> {
    let bad = |m: String| ApiError::new(StatusCode::BAD_REQUEST, m);
    let Value::Object(mut map) = body else {
        return Err(bad(format!("the body must be an object with {field}")));
    };
    let value = map
        .remove(field)
        .ok_or_else(|| bad(format!("missing field `{field}`")))?;
    if let Some(other) = map.keys().next() {
        return Err(bad(format!("unknown field `{other}`, expected `{field}`")));
    }
    let keys = match value {
        Value::String(k) if !many => vec![k],
        Value::Array(items) if many => items
            .into_iter()
            .map(|v| match v {
                Value::String(k) => Ok(k),
                _ => Err(bad(format!("{field} must be an array of strings"))),
            })
            .collect::<Result<_, _>>()?,
        _ if many => return Err(bad(format!("{field} must be an array of strings"))),
        _ => return Err(bad(format!("{field} must be a string"))),
    };
    Ok(keys)
}

/// A list answer, or its only item for a single-key command.
fn answer<T: serde::Serialize>(field: &str, mut items: Vec<T>, many: bool) -> Json<Value> {
    let value = if many {
        json!(items)
    } else {
        json!(items.pop())
    };
    Json(json!({ field: value }))
}

fn unknown_command(command: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!("unknown command `{command}`"),
    )
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Reserve {
    name: String,
    #[serde(flatten)]
    config: SetConfig,
}

async fn reserve(
    auth: Auth,
    State(state): State<AppState>,
    body: Result<JsonBody<Value>, ApiError>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let app = &auth.require(Acl::EditSettings)?.app_id;
    // Parsed in two steps, so that a missing or mistyped field gets a message naming it.
    let JsonBody(body) = body?;
    let Reserve { name, config } = serde_json::from_value(body)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, format!("Invalid set: {e}")))?;
    let info = state.engine.reserve_set(app, &name, config).await?;
    Ok((StatusCode::CREATED, to_json(&info)?))
}

async fn list_sets(auth: Auth, State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Search)?.app_id;
    let sets = state.engine.list_sets(app).await?;
    Ok(Json(json!({ "sets": sets })))
}

async fn set_info(
    auth: Auth,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Search)?.app_id;
    to_json(&state.engine.set_info(app, &name).await?)
}

async fn delete_set(
    auth: Auth,
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::EditSettings)?.app_id;
    state.engine.delete_set(app, &name).await?;
    Ok(Json(json!({ "deletedAt": crate::iso_now() })))
}

/// `add`, `madd` (ACL `addObject`), `exists`, `mexists` (ACL `search`).
async fn set_command(
    auth: Auth,
    State(state): State<AppState>,
    Path((name, command)): Path<(String, String)>,
    AnyJsonBody(body): AnyJsonBody<Value>,
) -> Result<Json<Value>, ApiError> {
    let (acl, field, many) = match command.as_str() {
        "add" => (Acl::AddObject, "added", false),
        "madd" => (Acl::AddObject, "added", true),
        "exists" => (Acl::Search, "exists", false),
        "mexists" => (Acl::Search, "exists", true),
        _ => return Err(unknown_command(&command)),
    };
    let app = &auth.require(acl)?.app_id;
    let keys = keys_of(body, if many { "keys" } else { "key" }, many)?;
    let answers = match acl {
        Acl::AddObject => state.engine.add_to_set(app, &name, &keys).await?,
        _ => state.engine.set_contains(app, &name, &keys).await?,
    };
    Ok(answer(field, answers, many))
}

/// The rebuild's query (beside credentials, which may be there too).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RebuildParams {
    /// An empty key list empties the set only when the caller says so.
    #[serde(default)]
    allow_empty: bool,
}

/// The 400 of a rebuild without a key.
pub const EMPTY_REBUILD: &str = "the key list is empty: a rebuild from it would empty the set; \
     send at least one key (one per line), or add ?allowEmpty=true to empty the set";

async fn rebuild(
    auth: Auth,
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(params): Query<RebuildParams>,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::EditSettings)?.app_id;
    // The key list may be far larger than any JSON body: it is read as a stream.
    let (lines, has_key) = first_key(body.into_data_stream()).await;
    if !has_key && !params.allow_empty {
        return Err(ApiError::new(StatusCode::BAD_REQUEST, EMPTY_REBUILD));
    }
    to_json(&state.engine.rebuild_set(app, &name, lines).await?)
}

/// Reads a key list up to its first key, a line that is not empty once a trailing `\r` is cut
/// (as the rebuild counts keys); returns the list with what was read put back, and whether it
/// has a key. Blank lines before the key are dropped (the rebuild skips them), so a list of
/// only blank lines is not held in memory. A read error counts as a key: the rebuild reports
/// it.
async fn first_key<S, E>(mut lines: S) -> (impl Stream<Item = Result<Bytes, E>> + Unpin, bool)
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
{
    // The current line so far, when no key was found: empty, or a lone `\r`.
    let mut cr = false;
    let mut head: Vec<Result<Bytes, E>> = Vec::new();
    let mut found = false;
    while let Some(chunk) = lines.next().await {
        let line_began_with_cr = cr;
        let chunk = match chunk {
            Ok(chunk) => chunk,
            Err(e) => {
                head.push(Err(e));
                found = true;
                break;
            }
        };
        for &b in chunk.iter() {
            match b {
                b'\n' => cr = false,
                b'\r' if !cr => cr = true,
                _ => {
                    found = true;
                    break;
                }
            }
        }
        if found {
            if line_began_with_cr {
                head.push(Ok(Bytes::from_static(b"\r")));
            }
            head.push(Ok(chunk));
            break;
        }
    }
    (futures::stream::iter(head).chain(lines), found)
}

async fn seen_settings(auth: Auth, State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Search)?.app_id;
    to_json(&*state.engine.seen_settings(app).await?)
}

async fn set_seen_settings(
    auth: Auth,
    State(state): State<AppState>,
    body: Result<JsonBody<Value>, ApiError>,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::EditSettings)?.app_id;
    let JsonBody(body) = body?;
    let settings: SeenSettings = serde_json::from_value(body)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, format!("Invalid settings: {e}")))?;
    state
        .engine
        .set_seen_settings(app, settings.clone())
        .await?;
    Ok(Json(
        json!({ "updatedAt": crate::iso_now(), "settings": settings }),
    ))
}

async fn seen_info(
    auth: Auth,
    State(state): State<AppState>,
    Path(user): Path<String>,
    ReadConsistency(consistency): ReadConsistency,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Search)?.app_id;
    to_json(&state.engine.seen_info(app, &user, consistency).await?)
}

async fn hidden(
    auth: Auth,
    State(state): State<AppState>,
    Path(user): Path<String>,
    ReadConsistency(consistency): ReadConsistency,
) -> Result<Json<Value>, ApiError> {
    let app = &auth.require(Acl::Search)?.app_id;
    let hidden: Vec<Value> = state
        .engine
        .hidden(app, &user, consistency)
        .await?
        .into_iter()
        .map(|(id, until)| json!({"objectID": id, "until": crate::iso(until)}))
        .collect();
    Ok(Json(json!({ "hidden": hidden })))
}

async fn seen_clear(
    auth: Auth,
    State(state): State<AppState>,
    Path(user): Path<String>,
) -> Result<StatusCode, ApiError> {
    let app = &auth.require(Acl::DeleteObject)?.app_id;
    state.engine.clear_seen(app, &user).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `add`, `madd`, `exists`, `mexists` and `unseen` (the candidates not seen), ACL `search`.
async fn seen_command(
    auth: Auth,
    State(state): State<AppState>,
    Path((user, command)): Path<(String, String)>,
    ReadConsistency(consistency): ReadConsistency,
    AnyJsonBody(body): AnyJsonBody<Value>,
) -> Result<Json<Value>, ApiError> {
    let many = !matches!(command.as_str(), "add" | "exists");
    if !matches!(
        command.as_str(),
        "add" | "madd" | "exists" | "mexists" | "unseen" | "hide" | "unhide"
    ) {
        return Err(unknown_command(&command));
    }
    let app = &auth.require(Acl::Search)?.app_id;
    let mut body = body;
    let days = match body.as_object_mut().and_then(|m| m.remove("days")) {
        Some(_) if command != "hide" => {
            return Err(ApiError::bad_request(
                "unknown field `days`, expected `objectIDs`",
            ));
        }
        Some(v) => Some(
            v.as_u64()
                .and_then(|d| u32::try_from(d).ok())
                .ok_or_else(|| ApiError::bad_request("days must be between 1 and 365"))?,
        ),
        None => None,
    };
    let ids = keys_of(body, if many { "objectIDs" } else { "objectID" }, many)?;
    let engine = &state.engine;
    Ok(match command.as_str() {
        "hide" => {
            let until = engine.hide(app, &user, &ids, days).await?;
            Json(json!({"hidden": ids.len(), "until": crate::iso(until)}))
        }
        "unhide" => {
            engine.unhide(app, &user, &ids).await?;
            Json(json!({"unhidden": ids.len()}))
        }
        "add" | "madd" => answer("added", engine.mark_seen(app, &user, &ids).await?, many),
        "exists" | "mexists" => {
            let seen = engine.has_seen(app, &user, &ids, consistency).await?;
            answer("exists", seen, many)
        }
        _ => {
            let unseen = engine.unseen(app, &user, &ids, consistency).await?;
            answer("objectIDs", unseen, true)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `first_key` over these chunks: whether it found a key, and the bytes it gives back.
    async fn peek(chunks: &[&'static str]) -> (bool, String) {
        let chunks = chunks
            .iter()
            .map(|c| Ok::<_, std::convert::Infallible>(Bytes::from_static(c.as_bytes())));
        let (rest, found) = first_key(futures::stream::iter(chunks)).await;
        let rest: Vec<Bytes> = rest.map(Result::unwrap).collect().await;
        (found, String::from_utf8(rest.concat()).unwrap())
    }

    #[tokio::test]
    async fn first_key_counts_keys_as_the_rebuild_does_across_chunks() {
        let blanks: [&[&str]; 5] = [&[], &[""], &["\n", "\r\n", ""], &["\r"], &["\n\r", "\n\r"]];
        for blank in blanks {
            assert_eq!(peek(blank).await, (false, String::new()), "{blank:?}");
        }
        let cases: [(&[&str], &str); 6] = [
            (&["a"], "a"),
            (&["\n\n", "ab\n", "c"], "ab\nc"),
            (&["\r", "x\n"], "\rx\n"),
            (&["\r", "\r\n"], "\r\r\n"),
            (&["\r", "\n\r", "\n", " "], " "),
            (&["\n\r", "\nk"], "\r\nk"),
        ];
        for (chunks, back) in cases {
            assert_eq!(peek(chunks).await, (true, back.to_owned()), "{chunks:?}");
        }
    }
}
