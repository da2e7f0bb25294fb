//! An app's export and import as NDJSON lines ([`crate::portability`] holds the line format).

use crate::portability::{
    End, EndCount, FORMAT, Header, Imported, LAST, ROWS_AT_ONCE, VERSION, bad, exported, json_line,
    lines, parse_row, row_line,
};
use crate::{Engine, EngineError, Result, keys};
use bytes::Bytes;
use futures::stream::{self, BoxStream};
use futures::{Stream, StreamExt, TryStreamExt};
use penchant_store::{ReadRows, RowMutation, RowRange, RowSet, Workload};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

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
    pub(crate) async fn write_rows(
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
