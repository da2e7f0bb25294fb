//! Penchant's embedded store: the Bigtable data model of `penchant-store` on RocksDB.
//!
//! One RocksDB instance holds every table in its `data` column family, one RocksDB key per cell
//! (see [`keys`] for the layout); table metadata lives in the `meta` column family.
//!
//! * **Atomicity**: a row mutation is one `WriteBatch`. Writers to a row (mutations,
//!   check-and-mutate, read-modify-write) hold that row's lock stripe, so conditional and
//!   read-modify-write operations are atomic against every other write to the row.
//! * **Durability**: with `sync_writes` (the default) a write is acknowledged only once the WAL is
//!   fsynced; RocksDB groups concurrent writers into one fsync (group commit), so throughput grows
//!   with concurrency. Without it the WAL is still written before the acknowledgement (a process
//!   crash loses nothing) but not fsynced (an OS crash or power loss may lose the last writes).
//! * **Garbage collection**: reads hide expired cells; a compaction filter ([`gc`]) reclaims them,
//!   and periodic compaction makes sure every file is revisited.

mod gc;
pub mod keys;
mod schema;

use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use parking_lot::{Mutex, MutexGuard, RwLock};
use penchant_store::validate::{self, now_micros, resolve_timestamp};
use penchant_store::{
    Cell, CompiledFilter, FamilyChange, FamilyName, GcRule, KeySample, Mutation,
    ReadModifyWriteRule, ReadRows, Result, Row, RowFilter, RowMutation, RowRange, RowStream, Store,
    StoreError, TableSchema, prefix_successor,
};
use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamily, ColumnFamilyDescriptor, DB, DBCompressionType, Options,
    ReadOptions, SliceTransform, WriteBatch, WriteOptions,
};
use tokio::sync::mpsc;

use crate::schema::{Catalog, Table, TableMeta};

const DATA_CF: &str = "data";
const META_CF: &str = "meta";
const TABLE_META_PREFIX: &[u8] = b"table/";
const NEXT_TABLE_ID_KEY: &[u8] = b"next_table_id";
/// A streaming read hands rows to its consumer in chunks of this many rows or bytes...
const CHUNK_ROWS: usize = 128;
const CHUNK_BYTES: usize = 1 << 20;
/// ...and buffers this many chunks ahead of it.
const STREAM_BUFFER_CHUNKS: usize = 4;
const LOCK_STRIPES: usize = 4096;

/// Options of the embedded store.
#[derive(Debug, Clone)]
pub struct RocksOptions {
    /// Fsync the WAL before acknowledging a write (survives power loss). Default: true.
    pub sync_writes: bool,
    /// Bytes of block cache. Default: 256 MiB.
    pub block_cache_bytes: usize,
    /// Every SST file is recompacted (and garbage-collected) at least this often. Default: 1 day.
    pub periodic_compaction_secs: u64,
    /// Target size of SST files; their boundaries are the split points `sample_row_keys`
    /// reports. Default: 64 MiB.
    pub target_file_size_bytes: u64,
}

impl Default for RocksOptions {
    fn default() -> Self {
        Self {
            sync_writes: true,
            block_cache_bytes: 256 << 20,
            periodic_compaction_secs: 24 * 3600,
            target_file_size_bytes: 64 << 20,
        }
    }
}

/// The embedded store. Cheap to clone.
#[derive(Clone, Debug)]
pub struct RocksStore {
    inner: Arc<Inner>,
}

struct Inner {
    db: DB,
    path: PathBuf,
    catalog: Arc<RwLock<Catalog>>,
    /// Serializes table administration.
    admin: Mutex<()>,
    /// Row lock stripes, by hash of (table id, row key).
    stripes: Box<[Mutex<()>]>,
    hasher: std::collections::hash_map::RandomState,
    sync_writes: bool,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocksStore")
            .field("path", &self.path)
            .field("sync_writes", &self.sync_writes)
            .finish_non_exhaustive()
    }
}

fn backend(e: rocksdb::Error) -> StoreError {
    StoreError::Backend(e.into_string())
}

fn join_error(e: tokio::task::JoinError) -> StoreError {
    StoreError::Backend(format!("store task failed: {e}"))
}

impl RocksStore {
    /// Open (or create) a store in `path`.
    pub fn open(path: impl AsRef<Path>, options: RocksOptions) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let catalog = Arc::new(RwLock::new(Catalog::default()));

        let mut db_opts = Options::default();
        db_opts.create_if_missing(true);
        db_opts.create_missing_column_families(true);
        db_opts.set_max_background_jobs(2);
        db_opts.set_keep_log_file_num(4);

        let cache = Cache::new_lru_cache(options.block_cache_bytes);
        let mut table_opts = BlockBasedOptions::default();
        table_opts.set_block_cache(&cache);
        // Bloom filters on row prefixes, not whole keys: reads look rows up, never single keys.
        table_opts.set_bloom_filter(10.0, false);
        table_opts.set_whole_key_filtering(false);
        table_opts.set_cache_index_and_filter_blocks(true);
        let mut data_opts = Options::default();
        data_opts.set_block_based_table_factory(&table_opts);
        data_opts.set_prefix_extractor(SliceTransform::create(
            "penchant-row",
            keys::row_prefix_of,
            Some(keys::has_row_prefix),
        ));
        data_opts.set_memtable_prefix_bloom_ratio(0.05);
        data_opts.set_compression_type(DBCompressionType::Lz4);
        data_opts.set_periodic_compaction_seconds(options.periodic_compaction_secs);
        data_opts.set_target_file_size_base(options.target_file_size_bytes);
        data_opts.set_compaction_filter_factory(gc::GcFilterFactory::new(catalog.clone()));

        let cfs = vec![
            ColumnFamilyDescriptor::new(DATA_CF, data_opts),
            ColumnFamilyDescriptor::new(META_CF, Options::default()),
        ];
        let db = DB::open_cf_descriptors(&db_opts, &path, cfs).map_err(backend)?;

        // Load the catalog.
        {
            let meta = db.cf_handle(META_CF).ok_or_else(|| missing_cf(META_CF))?;
            let mut cat = catalog.write();
            if let Some(v) = db.get_cf(meta, NEXT_TABLE_ID_KEY).map_err(backend)? {
                let bytes: [u8; 4] = v[..]
                    .try_into()
                    .map_err(|_| StoreError::Backend("corrupt next table id".into()))?;
                cat.next_table_id = u32::from_be_bytes(bytes);
            }
            for item in db.prefix_iterator_cf(meta, TABLE_META_PREFIX) {
                let (k, v) = item.map_err(backend)?;
                if !k.starts_with(TABLE_META_PREFIX) {
                    break;
                }
                let table: TableMeta = serde_json::from_slice(&v)
                    .map_err(|e| StoreError::Backend(format!("corrupt table metadata: {e}")))?;
                cat.by_name
                    .insert(table.name.clone(), Arc::new(Table::new(table)));
            }
            cat.loaded = true;
        }

        let stripes = (0..LOCK_STRIPES).map(|_| Mutex::new(())).collect();
        Ok(Self {
            inner: Arc::new(Inner {
                db,
                path,
                catalog,
                admin: Mutex::new(()),
                stripes,
                hasher: Default::default(),
                sync_writes: options.sync_writes,
            }),
        })
    }

    /// Where the store lives on disk.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Compact all data now, reclaiming the space of expired and deleted cells (which background
    /// compactions otherwise do over time).
    pub fn compact(&self) -> Result<()> {
        let db = &self.inner.db;
        let cf = self.inner.data_cf()?;
        db.flush_cf(cf).map_err(backend)?;
        db.compact_range_cf(cf, None::<&[u8]>, None::<&[u8]>);
        Ok(())
    }

    /// How many cells (versions, expired ones included) a table physically holds: a diagnostic
    /// for tests and operators.
    pub fn physical_cell_count(&self, table: &str) -> Result<u64> {
        let t = self.inner.table(table)?;
        let opts = read_options(keys::table_end(t.meta.id), false);
        let mut it = self
            .inner
            .db
            .raw_iterator_cf_opt(self.inner.data_cf()?, opts);
        it.seek(keys::table_start(t.meta.id));
        let mut n = 0;
        while it.valid() {
            n += 1;
            it.next();
        }
        it.status().map_err(backend)?;
        Ok(n)
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Inner) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || f(&inner))
            .await
            .map_err(join_error)?
    }
}

fn missing_cf(name: &str) -> StoreError {
    StoreError::Backend(format!("column family `{name}` is missing"))
}

impl Inner {
    fn data_cf(&self) -> Result<&ColumnFamily> {
        self.db
            .cf_handle(DATA_CF)
            .ok_or_else(|| missing_cf(DATA_CF))
    }

    fn meta_cf(&self) -> Result<&ColumnFamily> {
        self.db
            .cf_handle(META_CF)
            .ok_or_else(|| missing_cf(META_CF))
    }

    fn table(&self, name: &str) -> Result<Arc<Table>> {
        self.catalog.read().get(name)
    }

    fn write_opts(&self) -> WriteOptions {
        let mut o = WriteOptions::default();
        o.set_sync(self.sync_writes);
        o
    }

    fn write(&self, batch: WriteBatch) -> Result<()> {
        self.db
            .write_opt(batch, &self.write_opts())
            .map_err(backend)
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

    /// Save a table's metadata (or delete it) together with other changes, atomically.
    fn save_meta(&self, batch: &mut WriteBatch, meta: &TableMeta, delete: bool) -> Result<()> {
        let mut key = TABLE_META_PREFIX.to_vec();
        key.extend_from_slice(meta.name.as_bytes());
        if delete {
            batch.delete_cf(self.meta_cf()?, key);
        } else {
            let value = serde_json::to_vec(meta)
                .map_err(|e| StoreError::Backend(format!("cannot encode table metadata: {e}")))?;
            batch.put_cf(self.meta_cf()?, key, value);
        }
        Ok(())
    }

    /// Add one row's mutations to a batch: all of them, or nothing if encoding fails.
    fn add_mutations(
        &self,
        batch: &mut WriteBatch,
        table: &Table,
        row: &[u8],
        mutations: &[Mutation],
        now: i64,
    ) -> Result<()> {
        let ops = self.encode_row(table, row, mutations, now)?;
        let cf = self.data_cf()?;
        for op in ops {
            match op {
                BatchOp::Put(k, v) => batch.put_cf(cf, k, v),
                BatchOp::Delete(k) => batch.delete_cf(cf, k),
                BatchOp::DeleteRange(from, to) => batch.delete_range_cf(cf, from, to),
            }
        }
        Ok(())
    }

    /// Encode one row's mutations as batch operations. The caller holds the row's lock:
    /// enforcing version limits reads the columns written.
    fn encode_row(
        &self,
        table: &Table,
        row: &[u8],
        mutations: &[Mutation],
        now: i64,
    ) -> Result<Vec<BatchOp>> {
        let mut ops = Vec::with_capacity(mutations.len());
        let rs = keys::row_start(table.meta.id, row);
        let family_id = |f: &str| {
            table
                .meta
                .family_id(f)
                .ok_or_else(|| StoreError::FamilyNotFound {
                    table: table.meta.name.clone(),
                    family: f.to_owned(),
                })
        };
        for m in mutations {
            match m {
                Mutation::SetCell {
                    family,
                    qualifier,
                    timestamp,
                    value,
                } => {
                    let ts = resolve_timestamp(*timestamp, now);
                    let key = keys::cell_key(&rs, family_id(family)?, qualifier, ts);
                    ops.push(BatchOp::Put(key, value.clone()));
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
                    ops.push(BatchOp::DeleteRange(lo, hi));
                }
                Mutation::DeleteFromFamily { family } => {
                    let start = keys::family_start(&rs, family_id(family)?);
                    let end = prefix_successor(&start).unwrap_or_default();
                    ops.push(BatchOp::DeleteRange(start, end));
                }
                Mutation::DeleteFromRow => {
                    ops.push(BatchOp::DeleteRange(
                        rs.clone(),
                        keys::row_end(table.meta.id, row),
                    ));
                }
            }
        }
        self.enforce_version_limits(&mut ops, table, &rs, mutations, now)?;
        Ok(ops)
    }

    /// For each column written in a family whose rule counts versions, delete the versions the
    /// rule expires once the mutations apply.
    fn enforce_version_limits(
        &self,
        ops: &mut Vec<BatchOp>,
        table: &Table,
        rs: &[u8],
        mutations: &[Mutation],
        now: i64,
    ) -> Result<()> {
        let cf = self.data_cf()?;
        let mut done: Vec<(&str, &[u8])> = Vec::new();
        for m in mutations {
            let Mutation::SetCell {
                family, qualifier, ..
            } = m
            else {
                continue;
            };
            let Some(fam) = table.meta.families.get(family) else {
                continue;
            };
            if fam.gc_rule.is_age_only() || done.contains(&(family.as_str(), &qualifier[..])) {
                continue;
            }
            done.push((family, qualifier));
            // The column's versions as stored, then as the mutations leave them.
            let col = keys::column_prefix(rs, fam.id, qualifier);
            let mut versions = std::collections::BTreeSet::new();
            let opts = read_options(prefix_successor(&col).unwrap_or_default(), true);
            let mut it = self.db.raw_iterator_cf_opt(cf, opts);
            it.seek(&col);
            while let Some(k) = it.key() {
                if let Some(c) = keys::parse(k) {
                    versions.insert(std::cmp::Reverse(c.timestamp));
                }
                it.next();
            }
            it.status().map_err(backend)?;
            for m in mutations {
                match m {
                    Mutation::SetCell {
                        family: f,
                        qualifier: q,
                        timestamp,
                        ..
                    } if f == family && q == qualifier => {
                        versions.insert(std::cmp::Reverse(resolve_timestamp(*timestamp, now)));
                    }
                    Mutation::DeleteFromColumn {
                        family: f,
                        qualifier: q,
                        range,
                    } if f == family && q == qualifier => {
                        versions.retain(|std::cmp::Reverse(ts)| !range.contains(*ts));
                    }
                    Mutation::DeleteFromFamily { family: f } if f == family => versions.clear(),
                    Mutation::DeleteFromRow => versions.clear(),
                    _ => {}
                }
            }
            let newest_first = versions.iter().map(|std::cmp::Reverse(ts)| *ts);
            for ts in validate::expired_versions(&fam.gc_rule, newest_first, now) {
                ops.push(BatchOp::Delete([&col[..], &keys::encode_ts(ts)].concat()));
            }
        }
        Ok(())
    }

    /// Add the cells stored in `[start, end)` (within one row) to the reader's current row.
    fn read_into(&self, reader: &mut RowReader<'_>, start: &[u8], end: Vec<u8>) -> Result<()> {
        let mut it = self
            .db
            .raw_iterator_cf_opt(self.data_cf()?, read_options(end, true));
        it.seek(start);
        while let (Some(k), Some(v)) = (it.key(), it.value()) {
            reader.push(k, v);
            it.next();
        }
        it.status().map_err(backend)
    }

    /// The visible cells of one row, in the store's order.
    fn row_cells(&self, table: &Table, row: &[u8], now: i64) -> Result<Vec<Cell>> {
        let mut reader = RowReader::new(table, now);
        let start = keys::row_start(table.meta.id, row);
        self.read_into(&mut reader, &start, keys::row_end(table.meta.id, row))?;
        Ok(reader.take_row())
    }

    /// The visible cells of some columns of one row (each column once), in the store's order.
    fn column_cells<'c>(
        &self,
        table: &Table,
        row: &[u8],
        columns: impl IntoIterator<Item = (&'c str, &'c [u8])>,
        now: i64,
    ) -> Result<Vec<Cell>> {
        let mut reader = RowReader::new(table, now);
        let rs = keys::row_start(table.meta.id, row);
        for (family, qualifier) in columns {
            if let Some(id) = table.meta.family_id(family) {
                let col = keys::column_prefix(&rs, id, qualifier);
                let end = prefix_successor(&col).unwrap_or_default();
                self.read_into(&mut reader, &col, end)?;
            }
        }
        Ok(reader.take_row())
    }

    /// Scan encoded key ranges in order, calling `emit` with each non-empty filtered row until
    /// it returns false.
    fn scan(
        &self,
        table: &Table,
        ranges: Vec<(Vec<u8>, Vec<u8>)>,
        filter: Option<&CompiledFilter>,
        mut emit: impl FnMut(Row) -> bool,
    ) -> Result<()> {
        let now = now_micros();
        let cf = self.data_cf()?;
        let mut reader = RowReader::new(table, now);
        reader.skip_columns(filter);
        for (start, end) in ranges {
            let one_row = keys::is_one_row(&start, &end);
            let mut it = self.db.raw_iterator_cf_opt(cf, read_options(end, one_row));
            it.seek(&start);
            // The row being read: its `row_start` prefix.
            let mut current: Option<Vec<u8>> = None;
            loop {
                let entry = it.key().zip(it.value());
                if entry.is_none() {
                    // The end of the range, or an error: never emit a row cut short by one.
                    it.status().map_err(backend)?;
                }
                let boundary = match (&current, entry) {
                    (Some(rs), Some((k, _))) => !k.starts_with(rs),
                    (Some(_), None) => true,
                    (None, _) => false,
                };
                if boundary && let Some(rs) = current.take() {
                    let cells = reader.take_row();
                    let key = keys::decode_row(&rs).unwrap_or_default();
                    let cells = match filter {
                        Some(f) => f.apply(&key, cells),
                        None => cells,
                    };
                    if !cells.is_empty()
                        && !emit(Row {
                            key: Bytes::from(key),
                            cells,
                        })
                    {
                        return Ok(());
                    }
                }
                let Some((k, v)) = entry else { break };
                if current.is_none() {
                    current = Some(keys::row_prefix_of(k).to_vec());
                }
                reader.push(k, v);
                it.next();
            }
        }
        Ok(())
    }
}

/// Options of an iterator over the data column family, bounded above by `upper`.
///
/// The data family has a prefix extractor (the row, see [`keys::row_prefix_len`]) with bloom
/// filters: an iterator within one row uses them and skips files that cannot hold the row; one
/// that spans rows must ask for total order, or RocksDB would stop at the first row.
fn read_options(upper: Vec<u8>, one_row: bool) -> ReadOptions {
    let mut opts = ReadOptions::default();
    opts.set_iterate_upper_bound(upper);
    if one_row {
        opts.set_prefix_same_as_start(true);
    } else {
        opts.set_total_order_seek(true);
    }
    opts
}

/// One operation of a write batch, collected before anything goes into the batch.
enum BatchOp {
    Put(Vec<u8>, Bytes),
    Delete(Vec<u8>),
    DeleteRange(Vec<u8>, Vec<u8>),
}

/// Builds rows from their keys: decodes cells, orders them, applies the GC rules.
///
/// The qualifiers and values of a row are copied into one buffer, and its cells hold slices of
/// it: one allocation per row rather than two per cell.
struct RowReader<'a> {
    table: &'a Table,
    now: i64,
    /// A filter judging cells one by one: the columns it rejects are skipped as they are read.
    column_filter: Option<&'a CompiledFilter>,
    buf: BytesMut,
    pending: Vec<PendingCell<'a>>,
}

/// A decoded cell whose bytes are still in the row buffer.
struct PendingCell<'a> {
    family: &'a FamilyName,
    qualifier: std::ops::Range<usize>,
    timestamp: i64,
    value: std::ops::Range<usize>,
}

impl<'a> RowReader<'a> {
    fn new(table: &'a Table, now: i64) -> Self {
        Self {
            table,
            now,
            column_filter: None,
            buf: BytesMut::new(),
            pending: Vec::new(),
        }
    }

    /// Skip, as they are read, the cells `filter` would drop anyway when it judges each cell on
    /// its own (see [`CompiledFilter::keeps_column`]).
    fn skip_columns(&mut self, filter: Option<&'a CompiledFilter>) {
        // Any probe answers `None` for a filter that looks at whole rows.
        self.column_filter = filter.filter(|f| f.keeps_column("", b"").is_some());
    }

    /// Add one stored cell to the current row; keys of dropped families are skipped.
    fn push(&mut self, key: &[u8], value: &[u8]) {
        let Some(parsed) = keys::parse(key) else {
            return;
        };
        let Some((family, _)) = self.table.by_id.get(&parsed.family) else {
            return;
        };
        let q_start = self.buf.len();
        if !keys::decode_qualifier_into(parsed.row_start.len(), parsed.column, &mut self.buf)
            || self
                .column_filter
                .is_some_and(|f| f.keeps_column(family, &self.buf[q_start..]) == Some(false))
        {
            self.buf.truncate(q_start);
            return;
        }
        let v_start = self.buf.len();
        self.buf.extend_from_slice(value);
        self.pending.push(PendingCell {
            family,
            qualifier: q_start..v_start,
            timestamp: parsed.timestamp,
            value: v_start..self.buf.len(),
        });
    }

    /// The current row's cells, ordered by family name (keys order them by family id), without
    /// the expired ones; the reader is ready for the next row.
    fn take_row(&mut self) -> Vec<Cell> {
        let row_bytes = self.buf.len();
        let buf = self.buf.split().freeze();
        // Rows of a table tend to look alike: one allocation for the next, not a few doublings.
        self.buf.reserve(row_bytes.max(64));
        let mut cells: Vec<Cell> = self
            .pending
            .drain(..)
            .map(|p| Cell {
                family: p.family.clone(),
                qualifier: buf.slice(p.qualifier),
                timestamp: p.timestamp,
                value: buf.slice(p.value),
            })
            .collect();
        if cells.windows(2).any(|w| w[0].family > w[1].family) {
            cells.sort_by(|a, b| a.family.cmp(&b.family));
        }
        if self.table.has_gc {
            cells = validate::visible_cells(&self.table.schema, self.now, cells);
        }
        cells
    }
}

/// The encoded key ranges a row set covers, sorted and disjoint.
fn encoded_ranges(table: u32, request: &penchant_store::RowSet) -> Vec<(Vec<u8>, Vec<u8>)> {
    if request.is_all() {
        return vec![(keys::table_start(table), keys::table_end(table))];
    }
    let mut ranges: Vec<(Vec<u8>, Vec<u8>)> = request
        .keys
        .iter()
        .map(|k| (keys::row_start(table, k), keys::row_end(table, k)))
        .chain(request.ranges.iter().map(|r| encode_range(table, r)))
        .filter(|(s, e)| s < e)
        .collect();
    ranges.sort();
    let mut merged: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(ranges.len());
    for (s, e) in ranges {
        match merged.last_mut() {
            Some((_, last_end)) if s <= *last_end => {
                if e > *last_end {
                    *last_end = e;
                }
            }
            _ => merged.push((s, e)),
        }
    }
    merged
}

fn encode_range(table: u32, r: &RowRange) -> (Vec<u8>, Vec<u8>) {
    let start = match &r.start {
        Bound::Included(k) => keys::row_prefix(table, k),
        Bound::Excluded(k) => keys::row_end(table, k),
        Bound::Unbounded => keys::table_start(table),
    };
    let end = match &r.end {
        Bound::Included(k) => keys::row_end(table, k),
        Bound::Excluded(k) => keys::row_prefix(table, k),
        Bound::Unbounded => keys::table_end(table),
    };
    (start, end)
}

#[async_trait]
impl Store for RocksStore {
    async fn create_table(&self, name: &str, families: BTreeMap<String, GcRule>) -> Result<()> {
        penchant_store::check_new_table(name, &families)?;
        let name = name.to_owned();
        self.blocking(move |inner| {
            let _admin = inner.admin.lock();
            if inner.catalog.read().by_name.contains_key(&name) {
                return Err(StoreError::TableExists(name));
            }
            let id = inner.catalog.read().next_table_id;
            if id == u32::MAX {
                return Err(StoreError::FailedPrecondition("no table ids left".into()));
            }
            let meta = TableMeta::new(id, &name, families)?;
            let mut batch = WriteBatch::default();
            inner.save_meta(&mut batch, &meta, false)?;
            batch.put_cf(inner.meta_cf()?, NEXT_TABLE_ID_KEY, (id + 1).to_be_bytes());
            // Clear the id's key space, in case an older store left anything there.
            batch.delete_range_cf(inner.data_cf()?, keys::table_start(id), keys::table_end(id));
            inner.write(batch)?;
            let mut cat = inner.catalog.write();
            cat.next_table_id = id + 1;
            cat.by_name.insert(name, Arc::new(Table::new(meta)));
            Ok(())
        })
        .await
    }

    async fn modify_families(
        &self,
        table: &str,
        changes: Vec<FamilyChange>,
    ) -> Result<TableSchema> {
        let table = table.to_owned();
        self.blocking(move |inner| {
            let _admin = inner.admin.lock();
            let current = inner.table(&table)?;
            // Validate the whole change list first, then apply it to the metadata.
            penchant_store::change_families(&current.schema, &changes)?;
            let mut meta = current.meta.clone();
            for change in changes {
                match change {
                    FamilyChange::Create { family, gc_rule } => meta.add_family(family, gc_rule)?,
                    FamilyChange::Update { family, gc_rule } => {
                        if let Some(f) = meta.families.get_mut(&family) {
                            f.gc_rule = gc_rule;
                        }
                    }
                    FamilyChange::Drop { family } => {
                        meta.families.remove(&family);
                    }
                }
            }
            let mut batch = WriteBatch::default();
            inner.save_meta(&mut batch, &meta, false)?;
            inner.write(batch)?;
            let table = Arc::new(Table::new(meta));
            inner
                .catalog
                .write()
                .by_name
                .insert(table.meta.name.clone(), table.clone());
            Ok(table.schema.clone())
        })
        .await
    }

    async fn get_table(&self, table: &str) -> Result<TableSchema> {
        Ok(self.inner.table(table)?.schema.clone())
    }

    async fn list_tables(&self) -> Result<Vec<TableSchema>> {
        let cat = self.inner.catalog.read();
        let mut tables: Vec<TableSchema> = cat.by_name.values().map(|t| t.schema.clone()).collect();
        tables.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(tables)
    }

    async fn delete_table(&self, table: &str) -> Result<()> {
        let table = table.to_owned();
        self.blocking(move |inner| {
            let _admin = inner.admin.lock();
            let t = inner.table(&table)?;
            let mut batch = WriteBatch::default();
            inner.save_meta(&mut batch, &t.meta, true)?;
            batch.delete_range_cf(
                inner.data_cf()?,
                keys::table_start(t.meta.id),
                keys::table_end(t.meta.id),
            );
            inner.write(batch)?;
            inner.catalog.write().by_name.remove(&table);
            Ok(())
        })
        .await
    }

    async fn drop_row_range(&self, table: &str, prefix: &[u8]) -> Result<()> {
        let t = self.inner.table(table)?;
        let prefix = prefix.to_vec();
        self.blocking(move |inner| {
            let id = t.meta.id;
            let start = keys::row_prefix(id, &prefix);
            let end = prefix_successor(&start).unwrap_or_else(|| keys::table_end(id));
            let mut batch = WriteBatch::default();
            batch.delete_range_cf(inner.data_cf()?, start, end);
            inner.write(batch)
        })
        .await
    }

    async fn mutate_row(
        &self,
        table: &str,
        row_key: Bytes,
        mutations: Vec<Mutation>,
    ) -> Result<()> {
        let t = self.inner.table(table)?;
        validate::check_mutations(&t.schema, &row_key, &mutations)?;
        self.blocking(move |inner| {
            let _lock = inner.lock_rows(t.meta.id, std::iter::once(&row_key[..]));
            let mut batch = WriteBatch::default();
            inner.add_mutations(&mut batch, &t, &row_key, &mutations, now_micros())?;
            inner.write(batch)
        })
        .await
    }

    async fn mutate_rows(&self, table: &str, entries: Vec<RowMutation>) -> Result<Vec<Result<()>>> {
        let t = self.inner.table(table)?;
        penchant_store::check_batch_size(&entries)?;
        self.blocking(move |inner| {
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
            // so that its version limits see the earlier entry.
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
                let mut batch = WriteBatch::default();
                let mut written = Vec::with_capacity(round.len());
                for i in round {
                    let e = &entries[i];
                    match inner.add_mutations(&mut batch, &t, &e.row_key, &e.mutations, now) {
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

    async fn read_rows(&self, table: &str, request: ReadRows) -> Result<RowStream> {
        let t = self.inner.table(table)?;
        let filter = request
            .filter
            .as_ref()
            .map(RowFilter::compile)
            .transpose()?;
        let ranges = encoded_ranges(t.meta.id, &request.rows);
        let limit = request.limit.unwrap_or(u64::MAX);
        if limit == 0 {
            return Ok(Box::pin(futures::stream::empty()));
        }
        // Point reads of a few rows: read them at once rather than through a streaming task.
        let rows = &request.rows;
        if rows.ranges.is_empty() && !rows.keys.is_empty() && rows.keys.len() <= 8 {
            let mut out = Vec::new();
            self.inner.scan(&t, ranges, filter.as_ref(), |row| {
                out.push(Ok(row));
                (out.len() as u64) < limit
            })?;
            return Ok(Box::pin(futures::stream::iter(out)));
        }
        // Rows travel from the scanning thread in chunks: one hand-off per chunk, not per row.
        let (tx, rx) = mpsc::channel::<Result<Vec<Row>>>(STREAM_BUFFER_CHUNKS);
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            let mut sent = 0u64;
            let mut chunk = Vec::new();
            let mut chunk_bytes = 0usize;
            let mut reader_alive = true;
            let result = inner.scan(&t, ranges, filter.as_ref(), |row| {
                sent += 1;
                chunk_bytes +=
                    row.key.len() + row.cells.iter().map(|c| c.value.len() + 32).sum::<usize>();
                chunk.push(row);
                if chunk.len() >= CHUNK_ROWS || chunk_bytes >= CHUNK_BYTES {
                    reader_alive = tx.blocking_send(Ok(std::mem::take(&mut chunk))).is_ok();
                    chunk_bytes = 0;
                }
                // Stop when the reader went away or the limit is reached.
                reader_alive && sent < limit
            });
            if reader_alive && !chunk.is_empty() {
                let _ = tx.blocking_send(Ok(chunk));
            }
            if let Err(e) = result {
                let _ = tx.blocking_send(Err(e));
            }
        });
        let rows = tokio_stream::wrappers::ReceiverStream::new(rx).flat_map(|chunk| {
            let (rows, error) = match chunk {
                Ok(rows) => (rows, None),
                Err(e) => (Vec::new(), Some(Err(e))),
            };
            futures::stream::iter(rows.into_iter().map(Ok).chain(error))
        });
        Ok(Box::pin(rows))
    }

    async fn check_and_mutate_row(
        &self,
        table: &str,
        row_key: Bytes,
        predicate: Option<RowFilter>,
        on_match: Vec<Mutation>,
        on_no_match: Vec<Mutation>,
    ) -> Result<bool> {
        let t = self.inner.table(table)?;
        penchant_store::check_conditional(&t.schema, &row_key, &on_match, &on_no_match)?;
        let predicate = predicate.as_ref().map(RowFilter::compile).transpose()?;
        self.blocking(move |inner| {
            let _lock = inner.lock_rows(t.meta.id, std::iter::once(&row_key[..]));
            let now = now_micros();
            let cells = inner.row_cells(&t, &row_key, now)?;
            let matched = match &predicate {
                Some(p) => p.matches(&row_key, &cells),
                None => !cells.is_empty(),
            };
            let mutations = if matched { &on_match } else { &on_no_match };
            if !mutations.is_empty() {
                let mut batch = WriteBatch::default();
                inner.add_mutations(&mut batch, &t, &row_key, mutations, now)?;
                inner.write(batch)?;
            }
            Ok(matched)
        })
        .await
    }

    async fn read_modify_write_row(
        &self,
        table: &str,
        row_key: Bytes,
        rules: Vec<ReadModifyWriteRule>,
    ) -> Result<Row> {
        let t = self.inner.table(table)?;
        validate::check_rmw_rules(&t.schema, &row_key, &rules)?;
        self.blocking(move |inner| {
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
            let mut batch = WriteBatch::default();
            inner.add_mutations(&mut batch, &t, &row_key, &mutations, now)?;
            inner.write(batch)?;
            Ok(Row {
                key: row_key,
                cells,
            })
        })
        .await
    }

    async fn sample_row_keys(&self, table: &str) -> Result<Vec<KeySample>> {
        let t = self.inner.table(table)?;
        self.blocking(move |inner| {
            let id = t.meta.id;
            let (lo, hi) = (keys::table_start(id), keys::table_end(id));
            let mut files: Vec<(Vec<u8>, u64)> = inner
                .db
                .live_files()
                .map_err(backend)?
                .into_iter()
                .filter(|f| f.column_family_name == DATA_CF)
                .filter_map(|f| {
                    let start = f.start_key?;
                    let end = f.end_key?;
                    (end >= lo && start < hi).then(|| {
                        let row = keys::row_of_key(&start)
                            .filter(|(tid, _)| *tid == id)
                            .map(|(_, row)| row)
                            .unwrap_or_default();
                        (row, f.size as u64)
                    })
                })
                .collect();
            files.sort();
            let mut samples: Vec<KeySample> = Vec::new();
            let mut offset = 0u64;
            for (row, size) in files {
                // A split before the first file would only make an empty range.
                if offset > 0
                    && !row.is_empty()
                    && samples.last().is_none_or(|s| s.row_key[..] < row[..])
                {
                    samples.push(KeySample {
                        row_key: Bytes::from(row),
                        offset_bytes: offset,
                    });
                }
                offset += size;
            }
            samples.push(KeySample {
                row_key: Bytes::new(),
                offset_bytes: offset,
            });
            Ok(samples)
        })
        .await
    }

    async fn flush(&self) -> Result<()> {
        self.blocking(|inner| {
            inner.db.flush_wal(true).map_err(backend)?;
            inner.db.flush_cf(inner.data_cf()?).map_err(backend)?;
            inner.db.flush_cf(inner.meta_cf()?).map_err(backend)
        })
        .await
    }
}
