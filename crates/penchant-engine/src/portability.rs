//! One app, moved between nodes and backends (the embedded store, Bigtable) through a file:
//! [`Engine::export_app`] writes every row the app owns as NDJSON, [`Engine::import_app`] writes
//! them back on another node.
//!
//! The file holds the app's rows as the store keeps them — Bigtable's data model is the same on
//! every backend — so what it restores is the app itself: its description and keys (their
//! SHA-256 only: a key is never stored), settings, strategy, catalog, events, profiles and
//! aggregates, seen filters and key sets, vectors, lists, queues and job statuses. Nothing is
//! recomputed on import, and the imported profiles equal the exported ones. The rows of the
//! tables that never move with an app (`placements`, `leases`) stay behind.
//!
//! | line | fields |
//! |---|---|
//! | first | `{"format":"penchant-app","version":1,"appID":…,"exportedAt":ms,"penchant":version}` |
//! | one per row | `{"table":…,"row":…,"cells":[{"family":…,"qualifier":…,"timestamp":µs,"value":…}]}` |
//! | last | `{"end":{"rows":n}}` |
//!
//! `row` is the row key after the app's prefix (`app 0`), and `row`, `qualifier` and `value`
//! are base64 (standard, padded). A row is read as it is at that moment: an export taken while
//! the app takes traffic holds each row whole, not the app as of one instant.
//!
//! **Import** refuses an app that exists on the node, checks every line before it writes it
//! (a known table and family, a row key, cells), writes the app's description and keys last,
//! and checks the row count of the last line: until the app's own row is written, the app does
//! not exist for any request, and an import that fails is undone (every row it wrote deleted).

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::{Bytes, BytesMut};
use futures::stream::{self};
use futures::{Stream, StreamExt};
use penchant_store::{Mutation, Row, RowMutation};
use serde::{Deserialize, Serialize};

use crate::internal;
use crate::tables::{ALL, Rows, Table};
use crate::{EngineError, Result};

/// The `format` of the first line.
pub const FORMAT: &str = "penchant-app";
/// The format's version (the row layout it carries).
pub const VERSION: u32 = 1;
/// Rows written at once on import.
pub(crate) const ROWS_AT_ONCE: usize = 256;
/// The longest line an import reads (a row of a key set's partition, a user's filter).
pub(crate) const MAX_LINE: usize = 64 << 20;
/// The tables whose rows are written last, in this order: the app exists once they are.
pub(crate) const LAST: [&str; 2] = [crate::tenancy::KEYS.name, crate::tenancy::APPS.name];

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Header {
    pub(crate) format: String,
    pub(crate) version: u32,
    #[serde(rename = "appID")]
    pub(crate) app_id: String,
    pub(crate) exported_at: i64,
    pub(crate) penchant: String,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RowLine {
    pub(crate) table: String,
    pub(crate) row: String,
    pub(crate) cells: Vec<CellLine>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CellLine {
    pub(crate) family: String,
    pub(crate) qualifier: String,
    pub(crate) timestamp: i64,
    pub(crate) value: String,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct End {
    pub(crate) end: EndCount,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EndCount {
    pub(crate) rows: u64,
}

/// What an import wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Imported {
    #[serde(rename = "appID")]
    pub app_id: String,
    /// Rows written, per table.
    pub tables: BTreeMap<String, u64>,
    pub rows: u64,
}

/// The tables an app's export holds: all but the pinned ones.
pub(crate) fn exported() -> impl Iterator<Item = &'static Table> {
    ALL.iter().filter(|t| t.rows != Rows::Pinned)
}

pub(crate) fn json_line(value: &impl Serialize) -> Result<Bytes> {
    let mut line = serde_json::to_vec(value).map_err(|e| internal("export line", e))?;
    line.push(b'\n');
    Ok(Bytes::from(line))
}

pub(crate) fn row_line(table: &str, prefix: &[u8], row: &Row) -> Result<Bytes> {
    let suffix = row.key.strip_prefix(prefix).ok_or_else(|| {
        internal(
            "export",
            format!("a row of `{table}` outside the app's range"),
        )
    })?;
    json_line(&RowLine {
        table: table.to_owned(),
        row: B64.encode(suffix),
        cells: row
            .cells
            .iter()
            .map(|c| CellLine {
                family: c.family.to_string(),
                qualifier: B64.encode(&c.qualifier),
                timestamp: c.timestamp,
                value: B64.encode(&c.value),
            })
            .collect(),
    })
}

/// An import's mistake on one line.
pub(crate) fn bad(line: u64, what: impl std::fmt::Display) -> EngineError {
    EngineError::Invalid(format!("line {line}: {what}"))
}

/// A row line checked: its table, and the row as written.
pub(crate) fn parse_row(
    line: u64,
    text: &[u8],
    prefix: &[u8],
) -> Result<(&'static str, RowMutation)> {
    let row: RowLine = serde_json::from_slice(text).map_err(|e| bad(line, e))?;
    let table = exported().find(|t| t.name == row.table).ok_or_else(|| {
        bad(
            line,
            format!("`{}` is not a table an app's export holds", row.table),
        )
    })?;
    let suffix = B64
        .decode(&row.row)
        .map_err(|e| bad(line, format!("row: {e}")))?;
    if row.cells.is_empty() {
        return Err(bad(line, "a row without cells"));
    }
    let mut key = prefix.to_vec();
    key.extend_from_slice(&suffix);
    let mut mutations = Vec::with_capacity(row.cells.len());
    for cell in row.cells {
        if !table.families.iter().any(|(f, _)| *f == cell.family) {
            return Err(bad(
                line,
                format!("table `{}` has no family `{}`", table.name, cell.family),
            ));
        }
        let qualifier = B64
            .decode(&cell.qualifier)
            .map_err(|e| bad(line, format!("qualifier: {e}")))?;
        let value = B64
            .decode(&cell.value)
            .map_err(|e| bad(line, format!("value: {e}")))?;
        if cell.timestamp < 0 {
            return Err(bad(line, "a negative timestamp"));
        }
        mutations.push(Mutation::set(cell.family, qualifier, cell.timestamp, value));
    }
    Ok((table.name, RowMutation::new(Bytes::from(key), mutations)))
}

/// Lines of a byte stream, without their `\n` (and `\r`); empty lines dropped.
pub(crate) fn lines<S, E>(body: S) -> impl Stream<Item = Result<Bytes>>
where
    S: Stream<Item = std::result::Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    stream::unfold(
        (body, BytesMut::new(), false),
        |(mut body, mut buf, mut done)| async move {
            loop {
                if let Some(at) = buf.iter().position(|&b| b == b'\n') {
                    let line = buf.split_to(at + 1).freeze();
                    let line = line.slice(..at);
                    let line = line
                        .strip_suffix(b"\r")
                        .map_or(line.clone(), |l| line.slice(..l.len()));
                    if line.is_empty() {
                        continue;
                    }
                    return Some((Ok(line), (body, buf, done)));
                }
                if done {
                    if buf.is_empty() {
                        return None;
                    }
                    let line = buf.split().freeze();
                    return Some((Ok(line), (body, buf, done)));
                }
                if buf.len() > MAX_LINE {
                    let e =
                        EngineError::Invalid(format!("a line longer than {} MiB", MAX_LINE >> 20));
                    return Some((Err(e), (body, BytesMut::new(), true)));
                }
                match body.next().await {
                    Some(Ok(chunk)) => buf.extend_from_slice(&chunk),
                    Some(Err(e)) => {
                        let e = EngineError::Invalid(format!("reading the export: {e}"));
                        return Some((Err(e), (body, BytesMut::new(), true)));
                    }
                    None => done = true,
                }
            }
        },
    )
}
