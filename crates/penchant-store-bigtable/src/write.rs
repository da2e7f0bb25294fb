//! Writes: single-row and batched mutations (a batch retries only the entries that failed
//! transiently), and check-and-mutate and read-modify-write (never retried; against an emulator,
//! increments are checked first, since Bigtable applies all of a row's rules or none).

use std::sync::Arc;

use bytes::Bytes;
use penchant_store::validate::{self, now_micros};
use penchant_store::{
    Mutation, ReadModifyWriteRule, Result, Row, RowFilter, RowMutation, Store, StoreError,
    TableSchema,
};

use crate::read::sort_cells;
use crate::{BigtableStore, convert, proto, retry};

impl BigtableStore {
    /// Send one MutateRows request for `entries` (all valid), retrying the entries that fail
    /// transiently. Returns one status per entry.
    async fn mutate_valid(
        &self,
        table: &str,
        entries: Vec<proto::v2::mutate_rows_request::Entry>,
    ) -> Result<Vec<Result<()>>> {
        let table_name = self.table_path(table);
        let mut statuses: Vec<Option<Result<()>>> = (0..entries.len()).map(|_| None).collect();
        let mut pending: Vec<usize> = (0..entries.len()).collect();
        let mut retries = 0;
        loop {
            let message = proto::v2::MutateRowsRequest {
                table_name: table_name.clone(),
                app_profile_id: self.profile.to_string(),
                entries: pending.iter().map(|&i| entries[i].clone()).collect(),
                ..Default::default()
            };
            let mut again = Vec::new();
            let outcome = async {
                let routing = [
                    ("table_name", table_name.as_str()),
                    ("app_profile_id", &self.profile),
                ];
                let request = self.request(message, self.call_timeout(), &routing).await?;
                let mut stream = self
                    .inner
                    .data
                    .clone()
                    .mutate_rows(request)
                    .await?
                    .into_inner();
                while let Some(response) = stream.message().await? {
                    for entry in response.entries {
                        let Some(&i) = usize::try_from(entry.index)
                            .ok()
                            .and_then(|k| pending.get(k))
                        else {
                            continue;
                        };
                        let status = entry.status.unwrap_or_default();
                        let code = tonic::Code::from_i32(status.code);
                        let status = tonic::Status::new(code, status.message);
                        if retry::is_transient(&status) {
                            again.push(i);
                        }
                        statuses[i] = Some(if code == tonic::Code::Ok {
                            Ok(())
                        } else {
                            Err(self.error(table, &status))
                        });
                    }
                }
                Ok::<(), tonic::Status>(())
            }
            .await;
            if let Err(status) = outcome {
                if !retry::is_transient(&status)
                    && retries == 0
                    && statuses.iter().all(Option::is_none)
                {
                    return Err(self.error(table, &status));
                }
                // Entries the broken stream never reported on are retried (or fail) with it.
                for &i in &pending {
                    if statuses[i].is_none() {
                        statuses[i] = Some(Err(self.error(table, &status)));
                        if retry::is_transient(&status) {
                            again.push(i);
                        }
                    }
                }
            }
            if again.is_empty() || retries + 1 >= self.policy().max_attempts {
                break;
            }
            tokio::time::sleep(self.policy().backoff(retries)).await;
            retries += 1;
            again.sort_unstable();
            again.dedup();
            pending = again;
        }
        Ok(statuses
            .into_iter()
            .map(|s| s.unwrap_or_else(|| Err(StoreError::Backend("no status for an entry".into()))))
            .collect())
    }

    /// A FailedPrecondition naming the first column an increment rule would apply to a cell that
    /// is not a 64-bit integer, if there is one.
    async fn non_integer_column(
        &self,
        table: &str,
        row_key: &Bytes,
        rules: &[ReadModifyWriteRule],
    ) -> Option<StoreError> {
        let columns: Vec<RowFilter> = rules
            .iter()
            .filter(|r| matches!(r.op, penchant_store::ReadModifyWriteOp::Increment(_)))
            .map(|r| RowFilter::column(r.family.clone(), r.qualifier.clone()))
            .collect();
        if columns.is_empty() {
            return None;
        }
        let filter = RowFilter::Interleave(columns).and(RowFilter::CellsPerColumnLimit(1));
        let row = self
            .read_row(table, row_key.clone(), Some(filter))
            .await
            .ok()??;
        let c = row.cells.iter().find(|c| c.value.len() != 8)?;
        Some(StoreError::FailedPrecondition(format!(
            "cannot increment column `{}:{}`: its value is {} bytes, not a 64-bit big-endian \
             integer",
            c.family,
            String::from_utf8_lossy(&c.qualifier),
            c.value.len()
        )))
    }
}

pub(crate) async fn mutate_row(
    store: &BigtableStore,
    table: &str,
    row_key: Bytes,
    mutations: Vec<Mutation>,
) -> Result<()> {
    store
        .checked_schema(table, |s| {
            validate::check_mutations(s, &row_key, &mutations)
        })
        .await?;
    let now = now_micros();
    let table_name = store.table_path(table);
    let routing = [
        ("table_name", table_name.as_str()),
        ("app_profile_id", &*store.profile),
    ];
    let message = proto::v2::MutateRowRequest {
        table_name: table_name.clone(),
        app_profile_id: store.profile.to_string(),
        row_key,
        mutations: convert::mutations(&mutations, now),
        ..Default::default()
    };
    store
        .retry(table, || async {
            let request = store
                .request(message.clone(), store.call_timeout(), &routing)
                .await?;
            store.inner.data.clone().mutate_row(request).await
        })
        .await
        .map(drop)
}

pub(crate) async fn mutate_rows(
    store: &BigtableStore,
    table: &str,
    entries: Vec<RowMutation>,
) -> Result<Vec<Result<()>>> {
    penchant_store::check_batch_size(&entries)?;
    let schema = store.schema(table, false).await?;
    let now = now_micros();
    let mut statuses: Vec<Option<Result<()>>> = Vec::with_capacity(entries.len());
    let mut valid = Vec::new();
    let mut fresh: Option<Arc<TableSchema>> = None;
    for (i, e) in entries.iter().enumerate() {
        let mut check = validate::check_mutations(&schema, &e.row_key, &e.mutations);
        if let Err(StoreError::FamilyNotFound { .. }) = check {
            if fresh.is_none() {
                fresh = Some(store.schema(table, true).await?);
            }
            if let Some(s) = &fresh {
                check = validate::check_mutations(s, &e.row_key, &e.mutations);
            }
        }
        match check {
            Ok(()) => {
                statuses.push(None);
                valid.push((
                    i,
                    proto::v2::mutate_rows_request::Entry {
                        row_key: e.row_key.clone(),
                        mutations: convert::mutations(&e.mutations, now),
                        idempotency: None,
                    },
                ));
            }
            Err(err) => statuses.push(Some(Err(err))),
        }
    }
    if !valid.is_empty() {
        let (indices, protos): (Vec<usize>, Vec<_>) = valid.into_iter().unzip();
        let results = store.mutate_valid(table, protos).await?;
        for (i, r) in indices.into_iter().zip(results) {
            statuses[i] = Some(r);
        }
    }
    Ok(statuses.into_iter().map(|s| s.unwrap_or(Ok(()))).collect())
}

pub(crate) async fn check_and_mutate_row(
    store: &BigtableStore,
    table: &str,
    row_key: Bytes,
    predicate: Option<RowFilter>,
    on_match: Vec<Mutation>,
    on_no_match: Vec<Mutation>,
) -> Result<bool> {
    let schema = store
        .checked_schema(table, |s| {
            penchant_store::check_conditional(s, &row_key, &on_match, &on_no_match)
        })
        .await?;
    let now = now_micros();
    let table_name = store.table_path(table);
    let message = proto::v2::CheckAndMutateRowRequest {
        table_name: table_name.clone(),
        app_profile_id: store.profile.to_string(),
        row_key,
        predicate_filter: convert::predicate(&schema, predicate.as_ref(), now)?,
        true_mutations: convert::mutations(&on_match, now),
        false_mutations: convert::mutations(&on_no_match, now),
        ..Default::default()
    };
    let routing = [
        ("table_name", table_name.as_str()),
        ("app_profile_id", &*store.profile),
    ];
    let request = store
        .request(message, store.call_timeout(), &routing)
        .await
        .map_err(|s| store.error(table, &s))?;
    let response = store
        .inner
        .data
        .clone()
        .check_and_mutate_row(request)
        .await
        .map_err(|s| store.error(table, &s))?;
    Ok(response.into_inner().predicate_matched)
}

pub(crate) async fn read_modify_write_row(
    store: &BigtableStore,
    table: &str,
    row_key: Bytes,
    rules: Vec<ReadModifyWriteRule>,
) -> Result<Row> {
    store
        .checked_schema(table, |s| validate::check_rmw_rules(s, &row_key, &rules))
        .await?;
    let table_name = store.table_path(table);
    let message = proto::v2::ReadModifyWriteRowRequest {
        table_name: table_name.clone(),
        app_profile_id: store.profile.to_string(),
        row_key: row_key.clone(),
        rules: rules.iter().map(convert::rmw_rule).collect(),
        ..Default::default()
    };
    let routing = [
        ("table_name", table_name.as_str()),
        ("app_profile_id", &*store.profile),
    ];
    let request = store
        .request(message, store.call_timeout(), &routing)
        .await
        .map_err(|s| store.error(table, &s))?;
    // The emulator applies rules one by one and stops at a bad increment, leaving the
    // earlier rules applied; Bigtable applies all or nothing. Against the emulator, check the
    // increment columns first.
    if store.inner.emulated
        && let Some(e) = store.non_integer_column(table, &row_key, &rules).await
    {
        return Err(e);
    }
    // Never retried: an increment applied twice counts twice.
    let response = match store
        .inner
        .data
        .clone()
        .read_modify_write_row(request)
        .await
    {
        Ok(response) => response,
        Err(status) => {
            let error = store.error(table, &status);
            if matches!(error, StoreError::Unavailable(_)) {
                return Err(error);
            }
            // Bigtable's message and code for a bad increment differ from the emulator's:
            // name the column the same way on every backend.
            return Err(store
                .non_integer_column(table, &row_key, &rules)
                .await
                .unwrap_or(error));
        }
    };
    let row = response.into_inner().row.unwrap_or_default();
    let mut out = Row {
        key: row_key,
        cells: row
            .families
            .into_iter()
            .flat_map(|f| {
                let family = penchant_store::FamilyName::from(f.name);
                f.columns.into_iter().flat_map(move |c| {
                    let family = family.clone();
                    c.cells.into_iter().map(move |cell| penchant_store::Cell {
                        family: family.clone(),
                        qualifier: c.qualifier.clone(),
                        timestamp: cell.timestamp_micros,
                        value: cell.value,
                    })
                })
            })
            .collect(),
    };
    sort_cells(&mut out);
    Ok(out)
}
