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
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::{Bytes, BytesMut};
use futures::stream::{self, BoxStream};
use futures::{Stream, StreamExt, TryStreamExt};
use penchant_store::{Mutation, ReadRows, Row, RowMutation, RowRange, RowSet, Workload};
use serde::{Deserialize, Serialize};

use crate::internal;
use crate::tables::{ALL, Rows, Table};
use crate::{Engine, EngineError, Result, keys};

/// The `format` of the first line.
pub const FORMAT: &str = "penchant-app";
/// The format's version (the row layout it carries).
pub const VERSION: u32 = 1;
/// Rows written at once on import.
const ROWS_AT_ONCE: usize = 256;
/// The longest line an import reads (a row of a key set's partition, a user's filter).
const MAX_LINE: usize = 64 << 20;
/// The tables whose rows are written last, in this order: the app exists once they are.
const LAST: [&str; 2] = [crate::tenancy::KEYS.name, crate::tenancy::APPS.name];

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Header {
    format: String,
    version: u32,
    #[serde(rename = "appID")]
    app_id: String,
    exported_at: i64,
    penchant: String,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RowLine {
    table: String,
    row: String,
    cells: Vec<CellLine>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CellLine {
    family: String,
    qualifier: String,
    timestamp: i64,
    value: String,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct End {
    end: EndCount,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct EndCount {
    rows: u64,
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
fn exported() -> impl Iterator<Item = &'static Table> {
    ALL.iter().filter(|t| t.rows != Rows::Pinned)
}

fn json_line(value: &impl Serialize) -> Result<Bytes> {
    let mut line = serde_json::to_vec(value).map_err(|e| internal("export line", e))?;
    line.push(b'\n');
    Ok(Bytes::from(line))
}

fn row_line(table: &str, prefix: &[u8], row: &Row) -> Result<Bytes> {
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
fn bad(line: u64, what: impl std::fmt::Display) -> EngineError {
    EngineError::Invalid(format!("line {line}: {what}"))
}

/// A row line checked: its table, and the row as written.
fn parse_row(line: u64, text: &[u8], prefix: &[u8]) -> Result<(&'static str, RowMutation)> {
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
fn lines<S, E>(body: S) -> impl Stream<Item = Result<Bytes>>
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

/// Moving apps.
impl Engine {
    /// Every row `app` owns, as NDJSON lines (see the module), read as the stream is consumed.
    pub async fn export_app(&self, app: &str) -> Result<BoxStream<'static, Result<Bytes>>> {
        if self.tenancy.app(app).await?.is_none() {
            return Err(EngineError::NotFound(format!("app `{app}` does not exist")));
        }
        let header = json_line(&Header {
            format: FORMAT.to_owned(),
            version: VERSION,
            app_id: app.to_owned(),
            exported_at: self.clock.now_ms(),
            penchant: env!("CARGO_PKG_VERSION").to_owned(),
        })?;
        // Counts kept in memory go in too.
        self.flush_tallies().await?;
        let store = penchant_store::for_workload(&self.store, Workload::Batch);
        let prefix = keys::app(app);
        let count = Arc::new(AtomicU64::new(0));
        let counted = count.clone();
        let rows = stream::iter(exported())
            .then(move |table| {
                let (store, prefix) = (store.clone(), prefix.clone());
                async move {
                    let range = RowSet::range(RowRange::prefix(prefix.clone()));
                    let rows = store.read_rows(table.name, ReadRows::new(range)).await?;
                    Ok::<_, EngineError>(rows.map(move |row| row_line(table.name, &prefix, &row?)))
                }
            })
            .try_flatten()
            .inspect_ok(move |_| {
                counted.fetch_add(1, Ordering::Relaxed);
            });
        let end = stream::once(async move {
            json_line(&End {
                end: EndCount {
                    rows: count.load(Ordering::Relaxed),
                },
            })
        });
        Ok(stream::once(async move { Ok(header) })
            .chain(rows)
            .chain(end)
            .boxed())
    }

    /// Write the export of app `app_id` (see the module) on this node; refused if the app
    /// exists here or the export is another app's. Nothing is left of an import that fails.
    pub async fn import_app<S, E>(&self, app_id: &str, body: S) -> Result<Imported>
    where
        S: Stream<Item = std::result::Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let mut lines = std::pin::pin!(lines(body));
        let first = lines
            .next()
            .await
            .ok_or_else(|| EngineError::Invalid("the export is empty".into()))??;
        let header: Header = serde_json::from_slice(&first).map_err(|e| {
            EngineError::Invalid(format!(
                "line 1: not a Penchant app export ({e}); it starts with \
                 {{\"format\":\"{FORMAT}\",...}}"
            ))
        })?;
        if header.format != FORMAT || header.version != VERSION {
            return Err(EngineError::Invalid(format!(
                "line 1: format {} version {} cannot be imported: this node reads {FORMAT} \
                 version {VERSION}",
                header.format, header.version
            )));
        }
        let app = header.app_id;
        if app != app_id {
            return Err(EngineError::Invalid(format!(
                "the export is of app `{app}`, not `{app_id}`"
            )));
        }
        crate::tenancy::check_app_id(&app)?;
        if self.tenancy.app(&app).await?.is_some() {
            return Err(EngineError::Exists(format!(
                "app `{app}` exists on this node: delete it first (penchant apps delete) to \
                 replace it"
            )));
        }
        // Rows left by an import that died half-way are not the app's.
        self.tenancy.drop_app_rows(&app).await?;
        let imported = self.write_rows(&app, &mut lines).await;
        let imported = match imported {
            Ok(imported) => imported,
            Err(e) => {
                if let Err(undo) = self.tenancy.drop_app_rows(&app).await {
                    tracing::error!(app, error = %undo, "cannot undo a failed import");
                }
                return Err(e);
            }
        };
        self.tenancy.forget(&app);
        if let Some(states) = self.profiles.states() {
            states.forget(&app);
        }
        self.schedule_cache.remove(&app);
        self.abtests.forget(&app);
        self.strategies.forget(&app);
        self.catalog
            .changing(&app, async { Ok::<_, EngineError>(()) })
            .await?;
        tracing::info!(app, rows = imported.rows, "app imported");
        Ok(imported)
    }

    /// The rows of an import after its header, checked and written; the app's own rows last.
    async fn write_rows(
        &self,
        app: &str,
        lines: &mut (impl Stream<Item = Result<Bytes>> + Unpin),
    ) -> Result<Imported> {
        let prefix = keys::app(app);
        let store = penchant_store::for_workload(&self.store, Workload::Batch);
        let mut tables: BTreeMap<String, u64> = BTreeMap::new();
        let mut batch: Vec<RowMutation> = Vec::new();
        let mut batch_table = "";
        let mut last: BTreeMap<&str, Vec<RowMutation>> = BTreeMap::new();
        let mut number = 1;
        let mut end = None;
        while let Some(text) = lines.next().await {
            let text = text?;
            number += 1;
            if end.is_some() {
                return Err(bad(number, "a line after the end line"));
            }
            if text.starts_with(b"{\"end\"") {
                let line: End = serde_json::from_slice(&text).map_err(|e| bad(number, e))?;
                end = Some(line.end.rows);
                continue;
            }
            let (table, row) = parse_row(number, &text, &prefix)?;
            *tables.entry(table.to_owned()).or_default() += 1;
            if LAST.contains(&table) {
                last.entry(table).or_default().push(row);
                continue;
            }
            if !batch.is_empty() && (table != batch_table || batch.len() >= ROWS_AT_ONCE) {
                store
                    .mutate_all(batch_table, std::mem::take(&mut batch))
                    .await?;
            }
            batch_table = table;
            batch.push(row);
        }
        if !batch.is_empty() {
            store.mutate_all(batch_table, batch).await?;
        }
        let rows = tables.values().sum();
        match end {
            None => {
                return Err(EngineError::Invalid(
                    "the export is incomplete: it has no end line ({\"end\":...})".into(),
                ));
            }
            Some(expected) if expected != rows => {
                return Err(EngineError::Invalid(format!(
                    "the export is incomplete: its end line counts {expected} rows, it holds \
                     {rows}"
                )));
            }
            Some(_) => {}
        }
        if !last.contains_key(crate::tenancy::APPS.name) {
            return Err(EngineError::Invalid(format!(
                "the export has no row of table `apps` for app `{app}`"
            )));
        }
        for table in LAST {
            if let Some(rows) = last.remove(table) {
                store.mutate_all(table, rows).await?;
            }
        }
        Ok(Imported {
            app_id: app.to_owned(),
            tables,
            rows,
        })
    }
}
