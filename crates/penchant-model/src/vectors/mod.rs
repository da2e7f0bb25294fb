//! Vector spaces' settings and request types: names, limits, what a space is created with and
//! stored as, a vector's checks and its cell value, a search's query, options and hits, and a
//! training's settings ([`training`]).

pub mod training;

use bytes::Bytes;
pub use penchant_vectors::Metric;
use serde::{Deserialize, Serialize};

use crate::catalog::{check_index_name, check_object_id};
use crate::{EngineError, Result, keys};

/// The longest space name, in bytes.
pub const MAX_SPACE_NAME_BYTES: usize = 64;
/// Most liked items a "similar to the last N liked" search starts from.
pub const MAX_LIKED: usize = 100;

/// Space names: 1 to 64 bytes of letters, digits, `-`, `_` and `.`.
pub fn check_space_name(name: &str) -> Result<()> {
    keys::check_name("space", name, MAX_SPACE_NAME_BYTES)
}

/// The largest dimension of a space.
pub const MAX_DIMENSION: usize = 4096;
/// The largest magnitude of a vector's component. Scores are f32 sums over at most
/// [`MAX_DIMENSION`] products: with every |x| <= 1e15, a dot product or squared norm is at most
/// 4,096 × 1e30 ≈ 4.1e33, a squared euclidean distance 4 × that, far below f32's 3.4e38; a
/// component of 3.4e38 overflowed them to infinity (and NaN), dropping hits and scoring others
/// null.
pub const MAX_COMPONENT: f32 = 1e15;
const _: () = assert!(4.0 * MAX_DIMENSION as f64 * 1e30 < f32::MAX as f64);
/// Spaces an app may have.
pub const MAX_SPACES: usize = 64;
/// Most vectors in one upload.
pub const MAX_VECTORS_PER_CALL: usize = 100_000;
/// Most hits a search returns.
pub const MAX_K: usize = 1000;

/// Whose vectors: users' or items'.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    User,
    Item,
}

impl Kind {
    pub fn noun(self) -> &'static str {
        match self {
            Kind::User => "user",
            Kind::Item => "item",
        }
    }
}

/// What a space is created with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SpaceConfig {
    /// Floats per vector, 1 to 4096.
    pub dimension: usize,
    /// How vectors compare (cosine by default).
    #[serde(default = "cosine")]
    pub metric: Metric,
    /// The catalog index its items are records of: deleting a record of that index (or
    /// clearing the index) deletes its vector. Without one, a delete in any index of the app
    /// does.
    #[serde(default)]
    pub index: Option<String>,
}

fn cosine() -> Metric {
    Metric::Cosine
}

impl SpaceConfig {
    pub fn check(&self) -> Result<()> {
        if !(1..=MAX_DIMENSION).contains(&self.dimension) {
            return Err(EngineError::Invalid(format!(
                "dimension must be between 1 and {MAX_DIMENSION}"
            )));
        }
        if let Some(index) = &self.index {
            check_index_name(index)?;
        }
        Ok(())
    }
}

/// A space as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Space {
    pub name: String,
    pub dimension: usize,
    pub metric: Metric,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<String>,
    /// When it was created (ms since the epoch).
    pub created_at: i64,
    /// The last training that wrote it, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub training: Option<training::Trained>,
    /// The training before it, whose vectors are still stored: what a rollback goes back to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_training: Option<training::Trained>,
    /// How many writes its items have had (not stored in the description: its own counter).
    #[serde(default)]
    pub generation: u64,
}

impl Space {
    /// Why `vector` cannot be `id`'s in this space, if it cannot.
    pub fn check(&self, kind: Kind, id: &str, vector: &[f32]) -> Result<()> {
        let invalid = |m: String| Err(EngineError::Invalid(m));
        let who = format!("{} '{id}'", kind.noun());
        if vector.len() != self.dimension {
            return invalid(format!(
                "the vector of {who} has {} dimensions; space '{}' has {}",
                vector.len(),
                self.name,
                self.dimension
            ));
        }
        if let Some(at) = vector.iter().position(|x| x.is_nan()) {
            return invalid(format!("the vector of {who} holds NaN at position {at}"));
        }
        if let Some(at) = vector.iter().position(|x| x.is_infinite()) {
            return invalid(format!(
                "the vector of {who} holds an infinite value at position {at}"
            ));
        }
        if let Some(at) = vector.iter().position(|x| x.abs() > MAX_COMPONENT) {
            return invalid(format!(
                "the vector of {who} holds {:e} at position {at}: components must be between \
                 -1e15 and 1e15",
                vector[at]
            ));
        }
        if self.metric == Metric::Cosine && vector.iter().all(|x| *x == 0.0) {
            return invalid(format!(
                "the vector of {who} is zero: it has no direction, and space '{}' compares by \
                 cosine",
                self.name
            ));
        }
        Ok(())
    }
}

/// Check the id of a user (a user token) or an item (an objectID).
pub fn check_id(kind: Kind, id: &str) -> Result<()> {
    match kind {
        Kind::User if !keys::user_token_ok(id) => Err(EngineError::Invalid(format!(
            "user '{id}': {}",
            keys::USER_TOKEN_MESSAGE
        ))),
        Kind::User => Ok(()),
        Kind::Item => check_object_id(id),
    }
}

/// A vector's cell value: its floats, little-endian.
pub fn encode(vector: &[f32]) -> Bytes {
    let mut out = Vec::with_capacity(vector.len() * 4);
    for x in vector {
        out.extend_from_slice(&x.to_le_bytes());
    }
    Bytes::from(out)
}

/// A cell value's floats, if it holds `dimension` of them.
pub fn decode(bytes: &[u8], dimension: usize) -> Option<Vec<f32>> {
    (bytes.len() == dimension * 4).then(|| {
        bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    })
}

/// Parse the compact binary upload: records of an id's length (u16, little-endian), the id
/// (UTF-8), then `dimension` f32s (little-endian), back to back.
pub fn parse_binary(body: &[u8], dimension: usize) -> Result<Vec<(String, Vec<f32>)>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < body.len() {
        let record = out.len() + 1;
        let cut = || {
            EngineError::Invalid(format!(
                "binary body: record {record} is cut short (byte {at} of {})",
                body.len()
            ))
        };
        let len = body.get(at..at + 2).ok_or_else(cut)?;
        let len = usize::from(u16::from_le_bytes([len[0], len[1]]));
        let id = body.get(at + 2..at + 2 + len).ok_or_else(cut)?;
        let id = std::str::from_utf8(id).map_err(|_| {
            EngineError::Invalid(format!(
                "binary body: the id of record {record} is not UTF-8"
            ))
        })?;
        let floats = body
            .get(at + 2 + len..at + 2 + len + dimension * 4)
            .ok_or_else(cut)?;
        out.push((id.to_owned(), decode(floats, dimension).ok_or_else(cut)?));
        at += 2 + len + dimension * 4;
    }
    Ok(out)
}

/// A search's options.
#[derive(Debug, Clone, Default)]
pub struct SearchOptions {
    /// Hits wanted (1 to [`MAX_K`]).
    pub k: usize,
    /// Only these items (by objectID) are candidates; all items if `None`.
    pub candidates: Option<Vec<String>>,
    /// Items never returned.
    pub exclude: Vec<String>,
    /// Compare by this metric rather than the space's.
    pub metric: Option<Metric>,
    /// Scan every item even where the space has an approximate index.
    pub exact: bool,
}

/// What a search starts from.
#[derive(Debug, Clone)]
pub enum Query {
    /// A vector given with the request.
    Vector(Vec<f32>),
    /// An item's vector (the item itself is not a hit).
    Item(String),
    /// A user's vector.
    User(String),
}

/// One search result: an item and its score by the metric (higher is closer; euclidean scores
/// are negated distances).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hit {
    #[serde(rename = "objectID")]
    pub object_id: String,
    #[serde(serialize_with = "shortest")]
    pub score: f32,
}

/// An f32 as the f64 of its shortest decimal form: JSON numbers are read as f64, where `0.9f32`
/// would print as 0.8999999761581421.
pub fn json_f32(x: f32) -> f64 {
    x.to_string().parse().unwrap_or(f64::from(x))
}

fn shortest<S: serde::Serializer>(x: &f32, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_f64(json_f32(*x))
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_encode_and_binary_bodies_parse() {
        let v = vec![1.5, -2.0, 0.25];
        assert_eq!(decode(&encode(&v), 3), Some(v.clone()));
        assert_eq!(decode(&encode(&v), 2), None);
        let mut body = Vec::new();
        for (id, v) in [("a", &v), ("bé", &v)] {
            body.extend_from_slice(&(id.len() as u16).to_le_bytes());
            body.extend_from_slice(id.as_bytes());
            body.extend_from_slice(&encode(v));
        }
        let parsed = parse_binary(&body, 3).unwrap();
        assert_eq!(
            parsed,
            vec![("a".into(), v.clone()), ("bé".into(), v.clone())]
        );
        let err = parse_binary(&body[..body.len() - 1], 3).unwrap_err();
        assert!(err.to_string().contains("record 2 is cut short"), "{err}");
    }

    #[test]
    fn floats_print_as_given() {
        assert_eq!(serde_json::json!(json_f32(0.9)).to_string(), "0.9");
        let hit = Hit {
            object_id: "a".into(),
            score: 0.969_377_46,
        };
        assert_eq!(
            serde_json::to_value(&hit).unwrap().to_string(),
            r#"{"objectID":"a","score":0.96937746}"#
        );
    }

    #[test]
    fn bad_vectors_are_named() {
        let space = Space {
            name: "img".into(),
            dimension: 3,
            metric: Metric::Cosine,
            index: None,
            created_at: 0,
            training: None,
            previous_training: None,
            generation: 0,
        };
        let err = |v: &[f32]| space.check(Kind::Item, "x1", v).unwrap_err().to_string();
        assert!(err(&[1.0]).contains("item 'x1' has 1 dimensions; space 'img' has 3"));
        assert!(err(&[1.0, f32::NAN, 0.0]).contains("NaN at position 1"));
        assert!(err(&[f32::INFINITY, 0.0, 0.0]).contains("infinite value at position 0"));
        assert!(err(&[0.0, 0.0, 0.0]).contains("is zero"));
        assert_eq!(
            err(&[1.0, 0.0, 3.4e38]),
            "the vector of item 'x1' holds 3.4e38 at position 2: components must be between \
             -1e15 and 1e15"
        );
        assert!(err(&[-1.1e15, 0.0, 1.0]).contains("at position 0"));
        assert!(space.check(Kind::Item, "x1", &[-1e15, 0.0, 1e15]).is_ok());
        assert!(space.check(Kind::Item, "x1", &[0.0, 1.0, 0.0]).is_ok());
        assert!(check_space_name("als").is_ok());
        assert!(check_space_name("a b").is_err());
        assert!(check_id(Kind::User, "bad token!").is_err());
    }
}
