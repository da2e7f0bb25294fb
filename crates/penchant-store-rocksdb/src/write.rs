//! Writes: row mutations encoded into `WriteBatch`es while their rows' lock stripes are held
//! (version limits collected lazily: see `delete_hidden_versions`), and the store's write
//! calls (mutations, check-and-mutate, read-modify-write, flush).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use parking_lot::MutexGuard;
use penchant_store::validate::{self, now_micros, resolve_timestamp};
use penchant_store::{
    GcRule, Mutation, ReadModifyWriteRule, Result, Row, RowFilter, RowMutation, StoreError,
    prefix_successor,
};
use rocksdb::{ColumnFamily, WriteBatch, WriteOptions};

use crate::gc::KeyRange;
use crate::schema::Table;
use crate::{Inner, RocksStore, backend, keys};

pub(crate) const LOCK_STRIPES: usize = 4096;
/// Garbage a row leaves in a row before its range is compacted ([`Inner::count_garbage`]).
const GARBAGE: u64 = 8192;
/// A deletion of more stored cells than this writes one range tombstone instead of one point
/// delete per cell.
const POINT_DELETES: usize = 1024;

/// The stored keys a write looks at while it encodes its rows (cells to delete, versions to
/// expire), through one iterator made at the first look and seeking from one to the next
/// (making an iterator per column cost more than its seek). Its view is the store as it was at
/// that first look: a write batch's encoding needs nothing newer (none of the batch is written
/// yet, and its rows are locked).
/// How many keys [`StoredKeys::each`] steps over before it seeks instead.
const STEPS_BEFORE_SEEK: usize = 8;

pub(crate) struct StoredKeys<'a> {
    inner: &'a Inner,
    it: Option<rocksdb::DBRawIterator<'a>>,
}

impl<'a> StoredKeys<'a> {
    pub(crate) fn new(inner: &'a Inner) -> Self {
        Self { inner, it: None }
    }

    /// Call `f` with each stored key in `[lo, hi)` (within one row) in order, until it
    /// returns false. Ranges asked in order within a row cost one seek: where the iterator
    /// stands at or a few keys before `lo` (the previous range's end), it steps there instead.
    fn each(&mut self, lo: &[u8], hi: &[u8], mut f: impl FnMut(&[u8]) -> bool) -> Result<()> {
        let it = match &mut self.it {
            Some(it) => it,
            None => {
                let cf = self.inner.data_cf()?;
                let opts = crate::read::row_options();
                self.it.insert(self.inner.db.raw_iterator_cf_opt(cf, opts))
            }
        };
        // Reached: the first key at or after `lo`, stepped to from a key before it in the same
        // row (the iterator never leaves the row it sought), or `lo` itself.
        let mut steps = 0;
        let reached = loop {
            match it.key() {
                Some(k) if k == lo => break true,
                Some(k) if k > lo => {
                    break steps > 0 && keys::row_prefix_of(k) == keys::row_prefix_of(lo);
                }
                Some(_) if steps < STEPS_BEFORE_SEEK => {
                    it.next();
                    steps += 1;
                }
                _ => break false,
            }
        };
        if !reached {
            it.seek(lo);
        }
        while let Some(k) = it.key() {
            if k >= hi || !f(k) {
                break;
            }
            it.next();
        }
        it.status().map_err(backend)
    }
}

/// A write batch, and the range tombstones it holds: the write records them in the batch
/// itself, for compactions ([`crate::gc`]).
#[derive(Default)]
pub(crate) struct Batch {
    cells: WriteBatch,
    dropped: Vec<KeyRange>,
}

impl Batch {
    pub(crate) fn put_cf(
        &mut self,
        cf: &ColumnFamily,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) {
        self.cells.put_cf(cf, key, value);
    }

    pub(crate) fn delete_cf(&mut self, cf: &ColumnFamily, key: impl AsRef<[u8]>) {
        self.cells.delete_cf(cf, key);
    }

    /// Delete a range of keys by one range tombstone, recorded for compactions.
    pub(crate) fn delete_range_cf(&mut self, cf: &ColumnFamily, from: Vec<u8>, to: Vec<u8>) {
        self.cells.delete_range_cf(cf, &from, &to);
        self.dropped.push(KeyRange {
            start: from,
            end: Some(to),
        });
    }

    /// Delete a range of keys by one range tombstone that no compaction needs to know of: one
    /// over a deleted table, or over keys that hold nothing.
    pub(crate) fn clear_cf(&mut self, cf: &ColumnFamily, from: Vec<u8>, to: Vec<u8>) {
        self.cells.delete_range_cf(cf, from, to);
    }

    fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }
}

impl Inner {
    fn write_opts(&self) -> WriteOptions {
        let mut o = WriteOptions::default();
        o.set_sync(self.sync_writes);
        o
    }

    pub(crate) fn write(&self, batch: Batch) -> Result<()> {
        self.write_with(batch, &self.write_opts())
    }

    /// Write a batch, recording its range tombstones in it; once written, the compactor is
    /// asked to compact their ranges.
    fn write_with(&self, batch: Batch, opts: &WriteOptions) -> Result<()> {
        let Batch { mut cells, dropped } = batch;
        if dropped.is_empty() {
            return self.db.write_opt(cells, opts).map_err(backend);
        }
        let ranges: Vec<(Vec<u8>, Vec<u8>)> = dropped
            .iter()
            .map(|r| (r.start.clone(), r.end.clone().unwrap_or_default()))
            .collect();
        let ids = self.ranking.record(dropped, &mut cells, self.meta_cf()?);
        let written = self.db.write_opt(cells, opts).map_err(backend);
        self.ranking.settle(&ids, written.is_ok());
        if written.is_ok() {
            for range in ranges {
                // Busy: the compactor finds the range among the recorded ones.
                let _ = self.compactions.try_send(range);
            }
        }
        written
    }

    /// Write `batch` to the log, waiting for its fsync or not (then it counts as deferred,
    /// for [`sync`]).
    fn write_synced(&self, batch: Batch, sync: bool) -> Result<()> {
        if sync || !self.sync_writes {
            return self.write(batch);
        }
        let mut o = WriteOptions::default();
        o.set_sync(false);
        self.write_with(batch, &o)?;
        self.deferred
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    fn stripe(&self, table: u32, row: &[u8]) -> usize {
        let mut h = self.hasher.build_hasher();
        table.hash(&mut h);
        row.hash(&mut h);
        (h.finish() as usize) % self.stripes.len()
    }

    /// Lock the stripes of some rows, in stripe order (so two writers never deadlock).
    fn lock_rows<'a>(
        &self,
        table: u32,
        rows: impl Iterator<Item = &'a [u8]>,
    ) -> Vec<MutexGuard<'_, ()>> {
        let mut idx: Vec<usize> = rows.map(|r| self.stripe(table, r)).collect();
        idx.sort_unstable();
        idx.dedup();
        idx.into_iter().map(|i| self.stripes[i].lock()).collect()
    }

    /// Add one row's mutations to a batch: all of them, or nothing if encoding fails.
    fn add_mutations(
        &self,
        batch: &mut Batch,
        stored: &mut StoredKeys<'_>,
        table: &Table,
        row: &[u8],
        mutations: &[Mutation],
        now: i64,
    ) -> Result<()> {
        let ops = self.encode_row(stored, table, row, mutations, now)?;
        // Garbage: tombstones, and versions a put may hide.
        let garbage = ops
            .iter()
            .filter(|op| matches!(op, BatchOp::Delete(_) | BatchOp::Put(.., true)))
            .count();
        if garbage > 0 {
            self.count_garbage(table.meta.id, row, garbage as u64);
        }
        let cf = self.data_cf()?;
        for op in ops {
            match op {
                BatchOp::Put(k, v, _) => batch.put_cf(cf, k, v),
                BatchOp::Delete(k) => batch.delete_cf(cf, k),
                BatchOp::DeleteRange(from, to) => batch.delete_range_cf(cf, from, to),
            }
        }
        Ok(())
    }

    /// Count the garbage a row leaves (the caller holds its lock): the cells it deletes, and
    /// the versions its puts may hide. A row that leaves more than [`GARBAGE`] with no other
    /// row of its stripe leaving some in between (a heavy user's aggregate or profile, rewritten
    /// at every event) has its range compacted in the background: each deleted cell is a
    /// tombstone, each hidden version a cell, that every read of the row steps over until a
    /// compaction drops it, so without this the row's reads would slow down with its history.
    fn count_garbage(&self, table: u32, row: &[u8], n: u64) {
        let stripe = self.stripe(table, row);
        let hash = self.hasher.hash_one(row) >> 32;
        let slot = &self.garbage[stripe];
        let packed = slot.load(Ordering::Relaxed);
        let count = if packed >> 32 == hash {
            (packed & u64::from(u32::MAX)) + n
        } else {
            n
        };
        if count >= GARBAGE {
            slot.store(hash << 32, Ordering::Relaxed);
            let range = (keys::row_start(table, row), keys::row_end(table, row));
            // Busy with another row: this one asks again after as much garbage.
            let _ = self.compactions.try_send(range);
        } else {
            slot.store(
                hash << 32 | count.min(u64::from(u32::MAX)),
                Ordering::Relaxed,
            );
        }
    }

    /// Delete the cells in `[lo, hi)` of one row (the caller holds its lock): those the batch
    /// puts before, and those stored — by point deletes when they are few, else by one range
    /// tombstone. Point deletes, because a read must fragment every range tombstone of a
    /// memtable when it opens an iterator: rows folded often (aggregates, seen filters, profiles)
    /// would make every read slower until a flush.
    fn delete_range(
        stored: &mut StoredKeys<'_>,
        ops: &mut Vec<BatchOp>,
        lo: Vec<u8>,
        hi: Vec<u8>,
    ) -> Result<()> {
        ops.retain(|op| !matches!(op, BatchOp::Put(k, ..) if *k >= lo && *k < hi));
        let mut keys = Vec::new();
        stored.each(&lo, &hi, |k| {
            keys.push(BatchOp::Delete(k.to_vec()));
            keys.len() <= POINT_DELETES
        })?;
        if keys.len() > POINT_DELETES {
            ops.push(BatchOp::DeleteRange(lo, hi));
        } else {
            ops.extend(keys);
        }
        Ok(())
    }

    /// Encode one row's mutations as batch operations. The caller holds the row's lock:
    /// deletes read the columns they delete from.
    fn encode_row(
        &self,
        stored: &mut StoredKeys<'_>,
        table: &Table,
        row: &[u8],
        mutations: &[Mutation],
        now: i64,
    ) -> Result<Vec<BatchOp>> {
        let mut ops = Vec::with_capacity(mutations.len());
        let rs = keys::row_start(table.meta.id, row);
        let family_meta = |f: &str| {
            table
                .meta
                .families
                .get(f)
                .ok_or_else(|| StoreError::FamilyNotFound {
                    table: table.meta.name.clone(),
                    family: f.to_owned(),
                })
        };
        let family_id = |f: &str| family_meta(f).map(|f| f.id);
        for m in mutations {
            match m {
                Mutation::SetCell {
                    family,
                    qualifier,
                    timestamp,
                    value,
                } => {
                    let ts = resolve_timestamp(*timestamp, now);
                    let fam = family_meta(family)?;
                    let key = keys::cell_key(&rs, fam.id, qualifier, ts);
                    let versioned = !fam.gc_rule.is_age_only();
                    ops.push(BatchOp::Put(key, value.clone(), versioned));
                }
                Mutation::DeleteFromColumn {
                    family,
                    qualifier,
                    range,
                } => {
                    let col = keys::column_prefix(&rs, family_id(family)?, qualifier);
                    if range.end.is_some_and(|end| end <= range.start.unwrap_or(0)) {
                        continue; // an empty range
                    }
                    // Timestamps are stored inverted: [start, end) becomes [enc(end - 1), enc(start)].
                    let at = |ts: i64| [&col[..], &keys::encode_ts(ts)].concat();
                    let lo = range.end.map_or_else(|| col.clone(), |end| at(end - 1));
                    let hi = match range.start {
                        Some(start) if start > 0 => at(start - 1),
                        _ => prefix_successor(&col).unwrap_or_default(),
                    };
                    Self::delete_range(stored, &mut ops, lo, hi)?;
                }
                Mutation::DeleteFromFamily { family } => {
                    let start = keys::family_start(&rs, family_id(family)?);
                    let end = prefix_successor(&start).unwrap_or_default();
                    Self::delete_range(stored, &mut ops, start, end)?;
                }
                Mutation::DeleteFromRow => {
                    Self::delete_range(
                        stored,
                        &mut ops,
                        rs.clone(),
                        keys::row_end(table.meta.id, row),
                    )?;
                }
            }
        }
        Self::delete_hidden_versions(stored, &mut ops, table, &rs, mutations, now)?;
        Ok(ops)
    }

    /// Versions past a family's limit are collected lazily: a write that only sets cells looks
    /// nothing up (reads rank a column's versions and hide those its rule expires; compactions
    /// drop them, [`crate::gc`]). A column this write deletes from, in a family whose rule
    /// counts versions, first loses the versions its rule already hides, so that deleting the
    /// newest never brings one back — and so that every version a compaction sees under a newer
    /// one of its column is dead, whatever tombstones lie outside the compaction.
    fn delete_hidden_versions(
        stored: &mut StoredKeys<'_>,
        ops: &mut Vec<BatchOp>,
        table: &Table,
        rs: &[u8],
        mutations: &[Mutation],
        now: i64,
    ) -> Result<()> {
        // The columns deleted from whose family counts versions, in the store's order (one
        // seek reaches them all when they are near each other).
        let mut columns: Vec<(Vec<u8>, &GcRule)> = Vec::new();
        for m in mutations {
            let Mutation::DeleteFromColumn {
                family, qualifier, ..
            } = m
            else {
                continue;
            };
            let Some(fam) = table.meta.families.get(family) else {
                continue;
            };
            if fam.gc_rule.is_age_only() {
                continue;
            }
            columns.push((keys::column_prefix(rs, fam.id, qualifier), &fam.gc_rule));
        }
        columns.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        columns.dedup_by(|a, b| a.0 == b.0);
        for (col, rule) in columns {
            let mut newest_first = Vec::new();
            let end = prefix_successor(&col).unwrap_or_default();
            stored.each(&col, &end, |k| {
                if let Some(c) = keys::parse(k) {
                    newest_first.push(c.timestamp);
                }
                true
            })?;
            for ts in validate::expired_versions(rule, newest_first, now) {
                ops.push(BatchOp::Delete([&col[..], &keys::encode_ts(ts)].concat()));
            }
        }
        Ok(())
    }
}

/// One operation of a write batch, collected before anything goes into the batch.
enum BatchOp {
    /// A cell, and whether its family counts versions (the put may hide one).
    Put(Vec<u8>, Bytes, bool),
    Delete(Vec<u8>),
    DeleteRange(Vec<u8>, Vec<u8>),
}

pub(crate) async fn mutate_row(
    store: &RocksStore,
    table: &str,
    row_key: Bytes,
    mutations: Vec<Mutation>,
) -> Result<()> {
    let t = store.inner.table(table)?;
    validate::check_mutations(&t.schema, &row_key, &mutations)?;
    store
        .blocking(move |inner| {
            let _lock = inner.lock_rows(t.meta.id, std::iter::once(&row_key[..]));
            let mut batch = Batch::default();
            let mut stored = StoredKeys::new(inner);
            inner.add_mutations(
                &mut batch,
                &mut stored,
                &t,
                &row_key,
                &mutations,
                now_micros(),
            )?;
            inner.write(batch)
        })
        .await
}

pub(crate) async fn mutate_rows(
    store: &RocksStore,
    table: &str,
    entries: Vec<RowMutation>,
) -> Result<Vec<Result<()>>> {
    let t = store.inner.table(table)?;
    penchant_store::check_batch_size(&entries)?;
    store
        .blocking(move |inner| {
            let now = now_micros();
            let mut statuses: Vec<Result<()>> = entries
                .iter()
                .map(|e| validate::check_mutations(&t.schema, &e.row_key, &e.mutations))
                .collect();
            let valid: Vec<usize> = (0..entries.len())
                .filter(|i| statuses[*i].is_ok())
                .collect();
            let _locks = inner.lock_rows(t.meta.id, valid.iter().map(|i| &entries[*i].row_key[..]));
            // One write for the whole batch, except that a row named again starts a new write,
            // so that its deletes see the earlier entry's cells.
            let mut rounds: Vec<Vec<usize>> = Vec::new();
            let mut rows_in_round = std::collections::HashSet::new();
            for i in valid {
                let repeated = !rows_in_round.insert(&entries[i].row_key);
                match rounds.last_mut() {
                    Some(round) if !repeated => round.push(i),
                    _ => {
                        rows_in_round.clear();
                        rows_in_round.insert(&entries[i].row_key);
                        rounds.push(vec![i]);
                    }
                }
            }
            for round in rounds {
                let mut batch = Batch::default();
                let mut written = Vec::with_capacity(round.len());
                // A round sees what earlier rounds wrote.
                let mut stored = StoredKeys::new(inner);
                for i in round {
                    let e = &entries[i];
                    let added = inner.add_mutations(
                        &mut batch,
                        &mut stored,
                        &t,
                        &e.row_key,
                        &e.mutations,
                        now,
                    );
                    match added {
                        Ok(()) => written.push(i),
                        Err(err) => statuses[i] = Err(err),
                    }
                }
                if batch.is_empty() {
                    continue;
                }
                // A failed write fails exactly the rows it held; earlier rounds stand.
                if let Err(err) = inner.write(batch) {
                    for i in written {
                        statuses[i] = Err(StoreError::Backend(err.to_string()));
                    }
                }
            }
            Ok(statuses)
        })
        .await
}

pub(crate) async fn mutate_atomically(
    store: &RocksStore,
    writes: Vec<penchant_store::TableMutation>,
    sync: bool,
) -> Result<()> {
    penchant_store::check_atomic(&writes)?;
    // A row named twice gets its mutations in order, in one entry: the encoding of a batch
    // sees the store as it was before the batch.
    let mut rows: Vec<(Arc<Table>, Bytes, Vec<Mutation>)> = Vec::new();
    let mut at: HashMap<(&'static str, Bytes), usize> = HashMap::new();
    for w in writes {
        match at.get(&(w.table, w.row.row_key.clone())) {
            Some(&i) => rows[i].2.extend(w.row.mutations),
            None => {
                let t = store.inner.table(w.table)?;
                at.insert((w.table, w.row.row_key.clone()), rows.len());
                rows.push((t, w.row.row_key, w.row.mutations));
            }
        }
    }
    for (t, key, mutations) in &rows {
        validate::check_mutations(&t.schema, key, mutations)?;
    }
    store
        .blocking(move |inner| {
            let mut stripes: Vec<usize> = rows
                .iter()
                .map(|(t, key, _)| inner.stripe(t.meta.id, key))
                .collect();
            stripes.sort_unstable();
            stripes.dedup();
            let _locks: Vec<_> = stripes
                .into_iter()
                .map(|i| inner.stripes[i].lock())
                .collect();
            let now = now_micros();
            let mut batch = Batch::default();
            let mut stored = StoredKeys::new(inner);
            for (t, key, mutations) in &rows {
                inner.add_mutations(&mut batch, &mut stored, t, key, mutations, now)?;
            }
            inner.write_synced(batch, sync)
        })
        .await
}

/// Make the deferred writes applied so far durable: one fsync of the log, unless one that
/// started after the last of them has finished meanwhile (the writers waiting on the lock
/// while a sync runs mostly find their writes synced by it).
pub(crate) async fn sync(store: &RocksStore) -> Result<()> {
    use std::sync::atomic::Ordering;
    let inner = &store.inner;
    let target = inner.deferred.load(Ordering::SeqCst);
    if !inner.sync_writes || *inner.synced.lock() >= target {
        return Ok(());
    }
    store
        .blocking(move |inner| {
            let mut synced = inner.synced.lock();
            if *synced >= target {
                return Ok(());
            }
            let applied = inner.deferred.load(Ordering::SeqCst);
            inner.db.flush_wal(true).map_err(backend)?;
            *synced = applied;
            Ok(())
        })
        .await
}

pub(crate) async fn check_and_mutate_row(
    store: &RocksStore,
    table: &str,
    row_key: Bytes,
    predicate: Option<RowFilter>,
    on_match: Vec<Mutation>,
    on_no_match: Vec<Mutation>,
) -> Result<bool> {
    let t = store.inner.table(table)?;
    penchant_store::check_conditional(&t.schema, &row_key, &on_match, &on_no_match)?;
    let predicate = predicate.as_ref().map(RowFilter::compile).transpose()?;
    store
        .blocking(move |inner| {
            let _lock = inner.lock_rows(t.meta.id, std::iter::once(&row_key[..]));
            let now = now_micros();
            let cells = inner.row_cells(&t, &row_key, now)?;
            let matched = match &predicate {
                Some(p) => p.matches(&row_key, &cells),
                None => !cells.is_empty(),
            };
            let mutations = if matched { &on_match } else { &on_no_match };
            if !mutations.is_empty() {
                let mut batch = Batch::default();
                let mut stored = StoredKeys::new(inner);
                inner.add_mutations(&mut batch, &mut stored, &t, &row_key, mutations, now)?;
                inner.write(batch)?;
            }
            Ok(matched)
        })
        .await
}

pub(crate) async fn read_modify_write_row(
    store: &RocksStore,
    table: &str,
    row_key: Bytes,
    rules: Vec<ReadModifyWriteRule>,
) -> Result<Row> {
    let t = store.inner.table(table)?;
    validate::check_rmw_rules(&t.schema, &row_key, &rules)?;
    store
        .blocking(move |inner| {
            let _lock = inner.lock_rows(t.meta.id, std::iter::once(&row_key[..]));
            let now = now_micros();
            // Only the columns the rules touch are read, however wide the row.
            let mut columns: Vec<(&str, &[u8])> = Vec::new();
            for r in &rules {
                if !columns.contains(&(r.family.as_str(), &r.qualifier[..])) {
                    columns.push((&r.family, &r.qualifier));
                }
            }
            let current = inner.column_cells(&t, &row_key, columns, now)?;
            let cells = validate::read_modify_write(&current, &rules, now)?;
            let mutations: Vec<Mutation> =
                cells.iter().map(penchant_store::cell_to_mutation).collect();
            let mut batch = Batch::default();
            let mut stored = StoredKeys::new(inner);
            inner.add_mutations(&mut batch, &mut stored, &t, &row_key, &mutations, now)?;
            inner.write(batch)?;
            Ok(Row {
                key: row_key,
                cells,
            })
        })
        .await
}

pub(crate) async fn flush(store: &RocksStore) -> Result<()> {
    store
        .blocking(|inner| {
            inner.db.flush_wal(true).map_err(backend)?;
            inner.db.flush_cf(inner.data_cf()?).map_err(backend)?;
            inner.db.flush_cf(inner.meta_cf()?).map_err(backend)
        })
        .await
}
