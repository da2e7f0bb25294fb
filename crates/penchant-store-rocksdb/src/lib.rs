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
//! * **Garbage collection**: reads hide expired cells; a compaction filter ([`gc`]) reclaims them
//!   (versions past a limit nowhere under a range tombstone not yet compacted away), and
//!   periodic compaction makes sure every file is revisited.

mod admin;
mod gc;
pub mod keys;
mod read;
mod schema;
mod write;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use parking_lot::{Mutex, RwLock};
use penchant_store::{
    FamilyChange, Gauge, GcRule, KeySample, Mutation, ReadModifyWriteRule, ReadRows, Result, Row,
    RowFilter, RowMutation, RowStream, Store, StoreError, TableSchema,
};
use rocksdb::{
    BlockBasedIndexType, BlockBasedOptions, Cache, ColumnFamily, ColumnFamilyDescriptor, DB,
    DBCompressionType, Options, SliceTransform,
};

use crate::gc::{KeyRange, Ranking};
use crate::read::read_options;
use crate::schema::{Catalog, Table};
use crate::write::LOCK_STRIPES;

const DATA_CF: &str = "data";
const META_CF: &str = "meta";

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
    /// Dropped with the last handle (before `inner`): waits for the compactor thread to end.
    _compactor: Arc<Compactor>,
    inner: Arc<Inner>,
}

/// The compactor thread of a store, stopped and joined when the store's last handle goes (so
/// that the database is closed once it is dropped, not when a compaction ends).
#[derive(Debug)]
struct Compactor {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Compactor {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

struct Inner {
    db: DB,
    path: PathBuf,
    catalog: Arc<RwLock<Catalog>>,
    /// The range tombstones not yet compacted away, under which compactions rank no
    /// versions ([`gc`]).
    ranking: Arc<Ranking>,
    /// Serializes table administration.
    admin: Mutex<()>,
    /// Row lock stripes, by hash of (table id, row key).
    stripes: Box<[Mutex<()>]>,
    hasher: std::collections::hash_map::RandomState,
    sync_writes: bool,
    /// Per lock stripe: the hash of the last row that left garbage (high 32 bits) and how
    /// much it left in a row (low 32 bits) — see [`Inner::count_garbage`].
    garbage: Box<[AtomicU64]>,
    /// Row ranges to compact (rows that left garbage, range tombstones), for the compactor
    /// thread.
    compactions: SyncSender<(Vec<u8>, Vec<u8>)>,
    /// Deferred writes applied so far ([`Store::mutate_atomically_deferred`]), and how many
    /// of them a sync of the log has made durable (the lock is held through the sync, so
    /// concurrent syncs share one: group commit).
    deferred: AtomicU64,
    synced: Mutex<u64>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocksStore")
            .field("path", &self.path)
            .field("sync_writes", &self.sync_writes)
            .finish_non_exhaustive()
    }
}

/// The thread compacting the rows that deleted many cells (their tombstones, which every read
/// of the row skips one by one, go at the bottom level) and the ranges of range tombstones (so
/// that compactions rank versions there again, [`gc`]); it ends with the store.
fn spawn_compactor(
    inner: Weak<Inner>,
    requests: Receiver<(Vec<u8>, Vec<u8>)>,
) -> Result<Compactor> {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopped = stop.clone();
    let thread = std::thread::Builder::new()
        .name("rocksdb-tombstones".into())
        .spawn(move || {
            while !stopped.load(std::sync::atomic::Ordering::SeqCst) {
                let (start, end) = match requests.recv_timeout(Duration::from_millis(100)) {
                    Ok(range) => range,
                    Err(RecvTimeoutError::Timeout) => continue,
                    Err(RecvTimeoutError::Disconnected) => break,
                };
                let Some(inner) = inner.upgrade() else { break };
                let _ = inner.compact_range(KeyRange::new(Some(&start), Some(&end)));
                // Range tombstones whose requests found the thread busy (read after the
                // compaction, which forgot the one it was asked for).
                for range in inner.ranking.written() {
                    let _ = inner.compact_range(range);
                }
            }
        })
        .map_err(|e| StoreError::Backend(format!("cannot start the compactor thread: {e}")))?;
    Ok(Compactor {
        stop,
        thread: Some(thread),
    })
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
        let ranking = Arc::new(Ranking::default());

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
        // Index and filters in the block cache (charged to its budget), partitioned: a file's
        // index is a small top level, pinned, over index and filter partitions of a few KiB
        // each, cached with high priority. Unpartitioned, a 64 MiB file's index is one block
        // of ~3 MB: at a million users it lost its place in the cache to data blocks, and a
        // profile read decompressed it again (most of a read's CPU).
        table_opts.set_cache_index_and_filter_blocks(true);
        table_opts.set_cache_index_and_filter_blocks_with_high_priority(true);
        table_opts.set_index_type(BlockBasedIndexType::TwoLevelIndexSearch);
        table_opts.set_partition_filters(true);
        table_opts.set_metadata_block_size(4096);
        table_opts.set_pin_top_level_index_and_filter(true);
        table_opts.set_pin_l0_filter_and_index_blocks_in_cache(true);
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
        data_opts.set_compaction_filter_factory(gc::GcFilterFactory::new(
            catalog.clone(),
            ranking.clone(),
        ));

        let cfs = vec![
            ColumnFamilyDescriptor::new(DATA_CF, data_opts),
            ColumnFamilyDescriptor::new(META_CF, Options::default()),
        ];
        let db = DB::open_cf_descriptors(&db_opts, &path, cfs).map_err(backend)?;

        // Load the range tombstones not yet compacted away, then the catalog (until it is
        // loaded, compactions keep everything).
        let meta = db.cf_handle(META_CF).ok_or_else(|| missing_cf(META_CF))?;
        ranking.load(&db, meta)?;
        admin::load_catalog(&db, &catalog)?;

        let stripes = (0..LOCK_STRIPES).map(|_| Mutex::new(())).collect();
        let garbage = (0..LOCK_STRIPES).map(|_| AtomicU64::new(0)).collect();
        let (compactions, requests) = std::sync::mpsc::sync_channel(1);
        let inner = Arc::new(Inner {
            db,
            path,
            catalog,
            ranking,
            admin: Mutex::new(()),
            stripes,
            hasher: Default::default(),
            sync_writes: options.sync_writes,
            garbage,
            compactions,
            deferred: AtomicU64::new(0),
            synced: Mutex::new(0),
        });
        let compactor = Arc::new(spawn_compactor(Arc::downgrade(&inner), requests)?);
        // Range tombstones an earlier run left recorded: the compactor takes them at once (the
        // first asked, the others after it).
        if let Some(range) = inner.ranking.written().into_iter().next() {
            let _ = inner
                .compactions
                .try_send((range.start, range.end.unwrap_or_default()));
        }
        Ok(Self {
            _compactor: compactor,
            inner,
        })
    }

    /// Where the store lives on disk.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Compact all data now, reclaiming the space of expired and deleted cells (which background
    /// compactions otherwise do over time).
    pub fn compact(&self) -> Result<()> {
        let cf = self.inner.data_cf()?;
        self.inner.db.flush_cf(cf).map_err(backend)?;
        self.inner.compact_range(KeyRange::default())
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

    /// Compact a range of the data now, down to the last level; the range tombstones in it
    /// that were written before are forgotten ([`gc::Ranking`]).
    fn compact_range(&self, range: KeyRange) -> Result<()> {
        let cf = self.data_cf()?;
        let (start, end) = (range.start.clone(), range.end.clone());
        self.ranking.compact(range, &self.db, self.meta_cf()?, || {
            let start = (!start.is_empty()).then_some(&start[..]);
            self.db.compact_range_cf(cf, start, end.as_deref());
        })
    }
}

#[async_trait]
impl Store for RocksStore {
    async fn create_table(&self, name: &str, families: BTreeMap<String, GcRule>) -> Result<()> {
        admin::create_table(self, name, families).await
    }

    async fn modify_families(
        &self,
        table: &str,
        changes: Vec<FamilyChange>,
    ) -> Result<TableSchema> {
        admin::modify_families(self, table, changes).await
    }

    async fn get_table(&self, table: &str) -> Result<TableSchema> {
        admin::get_table(self, table).await
    }

    async fn list_tables(&self) -> Result<Vec<TableSchema>> {
        admin::list_tables(self).await
    }

    async fn delete_table(&self, table: &str) -> Result<()> {
        admin::delete_table(self, table).await
    }

    async fn drop_row_range(&self, table: &str, prefix: &[u8]) -> Result<()> {
        admin::drop_row_range(self, table, prefix).await
    }

    async fn mutate_row(
        &self,
        table: &str,
        row_key: Bytes,
        mutations: Vec<Mutation>,
    ) -> Result<()> {
        write::mutate_row(self, table, row_key, mutations).await
    }

    async fn mutate_rows(&self, table: &str, entries: Vec<RowMutation>) -> Result<Vec<Result<()>>> {
        write::mutate_rows(self, table, entries).await
    }

    async fn read_rows(&self, table: &str, request: ReadRows) -> Result<RowStream> {
        read::read_rows(self, table, request).await
    }

    async fn check_and_mutate_row(
        &self,
        table: &str,
        row_key: Bytes,
        predicate: Option<RowFilter>,
        on_match: Vec<Mutation>,
        on_no_match: Vec<Mutation>,
    ) -> Result<bool> {
        write::check_and_mutate_row(self, table, row_key, predicate, on_match, on_no_match).await
    }

    async fn read_modify_write_row(
        &self,
        table: &str,
        row_key: Bytes,
        rules: Vec<ReadModifyWriteRule>,
    ) -> Result<Row> {
        write::read_modify_write_row(self, table, row_key, rules).await
    }

    async fn sample_row_keys(&self, table: &str) -> Result<Vec<KeySample>> {
        read::sample_row_keys(self, table).await
    }

    async fn flush(&self) -> Result<()> {
        write::flush(self).await
    }

    fn atomic_writes(&self) -> bool {
        true
    }

    /// One `WriteBatch` (one write to the log, one fsync) for every row of every table.
    async fn mutate_atomically(&self, writes: Vec<penchant_store::TableMutation>) -> Result<()> {
        write::mutate_atomically(self, writes, self.inner.sync_writes).await
    }

    /// The same `WriteBatch`, written to the log without waiting for its fsync.
    async fn mutate_atomically_deferred(
        &self,
        writes: Vec<penchant_store::TableMutation>,
    ) -> Result<()> {
        write::mutate_atomically(self, writes, false).await
    }

    /// One fsync of the log for every deferred write applied before it, shared by the
    /// writers that ask at once (a no-op without `sync_writes`).
    async fn sync(&self) -> Result<()> {
        write::sync(self).await
    }

    /// RocksDB's checkpoint: the memtables flushed, then the live files hard-linked into
    /// `dest` (copied when it is on another file system) — a store that opens as of that
    /// moment, while writes go on.
    async fn checkpoint(&self, dest: &Path) -> Result<()> {
        let dest = dest.to_path_buf();
        self.blocking(move |inner| {
            if dest.exists() {
                return Err(StoreError::FailedPrecondition(format!(
                    "{} exists already",
                    dest.display()
                )));
            }
            if let Some(parent) = dest.parent() {
                std::fs::create_dir_all(parent).map_err(|e| {
                    StoreError::Backend(format!("cannot create {}: {e}", parent.display()))
                })?;
            }
            rocksdb::checkpoint::Checkpoint::new(&inner.db)
                .and_then(|c| c.create_checkpoint(&dest))
                .map_err(backend)
        })
        .await
    }

    fn gauges(&self) -> Vec<Gauge> {
        const PROPERTIES: [(&str, &str, &str); 8] = [
            (
                "rocksdb_l0_files",
                "SST files in level 0 (each one a point read may have to look into)",
                "rocksdb.num-files-at-level0",
            ),
            (
                "rocksdb_memtable_bytes",
                "bytes in RocksDB's memtables",
                "rocksdb.cur-size-all-mem-tables",
            ),
            (
                "rocksdb_memtable_deletes",
                "cell deletions (tombstones) in the active memtable",
                "rocksdb.num-deletes-active-mem-table",
            ),
            (
                "rocksdb_pending_compaction_bytes",
                "bytes RocksDB estimates its compactions must rewrite",
                "rocksdb.estimate-pending-compaction-bytes",
            ),
            (
                "rocksdb_running_compactions",
                "compactions running",
                "rocksdb.num-running-compactions",
            ),
            (
                "rocksdb_block_cache_bytes",
                "bytes in the block cache",
                "rocksdb.block-cache-usage",
            ),
            (
                "rocksdb_sst_bytes",
                "bytes of SST files",
                "rocksdb.total-sst-files-size",
            ),
            (
                "rocksdb_live_data_bytes",
                "bytes of live data RocksDB estimates",
                "rocksdb.estimate-live-data-size",
            ),
        ];
        let Ok(cf) = self.inner.data_cf() else {
            return Vec::new();
        };
        let mut gauges: Vec<Gauge> = PROPERTIES
            .iter()
            .filter_map(|&(name, help, property)| {
                let value = self.inner.db.property_int_value_cf(cf, property).ok()??;
                Some(Gauge {
                    name,
                    help,
                    value: value as f64,
                })
            })
            .collect();
        gauges.push(Gauge {
            name: "rocksdb_range_tombstones_recorded",
            help: "range tombstones not yet compacted away (no version is ranked out under them)",
            value: self.inner.ranking.unranked_count() as f64,
        });
        gauges
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    #[test]
    fn range_tombstones_left_recorded_are_compacted_away_after_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let options = RocksOptions {
            sync_writes: false,
            ..RocksOptions::default()
        };
        {
            // As a stop between a range tombstone's write and its compaction leaves it.
            let store = RocksStore::open(dir.path(), options.clone()).unwrap();
            let inner = &store.inner;
            let mut batch = rocksdb::WriteBatch::default();
            let range = KeyRange::new(Some(b"a"), Some(b"b"));
            let ids = inner
                .ranking
                .record(vec![range], &mut batch, inner.meta_cf().unwrap());
            inner.db.write(batch).unwrap();
            inner.ranking.settle(&ids, true);
        }
        let store = RocksStore::open(dir.path(), options).unwrap();
        assert!(store.inner.ranking.unranked_count() <= 1);
        let deadline = Instant::now() + Duration::from_secs(30);
        while store.inner.ranking.unranked_count() > 0 {
            assert!(Instant::now() < deadline, "the record was never taken");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
