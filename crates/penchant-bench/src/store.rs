//! `penchant bench store`: the store abstraction beside raw RocksDB, same work, same run.
//!
//! The reference writes the same cells straight into a second RocksDB with the same options, in
//! a hand-made layout (`row/family/qualifier` + inverted timestamp; row keys are fixed-length
//! so nothing needs escaping). The ratio column is Penchant ÷ raw: above 1 is better for
//! throughput, worse for latency.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use futures::StreamExt;
use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use penchant_store::{GcRule, Mutation, ReadRows, RowFilter, RowMutation, Store};
use penchant_store_rocksdb::{RocksOptions, RocksStore};
use rand::Rng;
use rocksdb::{
    BlockBasedOptions, Cache, DB, DBCompressionType, Options, ReadOptions, WriteBatch, WriteOptions,
};

use crate::report::{bar, spinner};
use crate::{Bench, Cell, CommonArgs, Report, Table, rate};

const TABLE: &str = "bench";
const FAMILY: &str = "f";
const TS: i64 = 1_700_000_000_000_000;
const BATCH_ROWS: usize = 500;
const SCAN_ROUNDS: usize = 5;

/// `penchant-bench store`'s flags.
#[derive(Debug, clap::Args)]
pub struct StoreBenchArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Rows written by each write workload [default by scale: small 2,000, medium 20,000,
    /// large 200,000].
    #[arg(long)]
    rows: Option<usize>,
    /// Cells per row (qualifiers q0, q1, ...).
    #[arg(long, default_value_t = 4)]
    cells: usize,
    /// Bytes per cell value.
    #[arg(long, default_value_t = 100)]
    value_bytes: usize,
    /// Concurrent writers of single-row mutations (group commit shares their fsyncs).
    #[arg(long, default_value_t = 16)]
    writers: usize,
    /// Point reads for the latency measurement [default by scale: small 2,000, medium
    /// 20,000, large 100,000].
    #[arg(long)]
    reads: Option<usize>,
    /// Folder for the two databases (default: a temporary folder, removed afterwards).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Acknowledge writes without fsync (both sides).
    #[arg(long)]
    no_sync: bool,
    /// Also run Penchant's side on a Bigtable emulator started for the run (informative: the
    /// emulator is an in-memory test server, not Bigtable).
    #[arg(long)]
    bigtable_emulator: bool,
}

impl Bench for StoreBenchArgs {
    const NAME: &'static str = "store";

    fn common(&self) -> &CommonArgs {
        &self.common
    }

    fn run(self, report: &mut Report) -> anyhow::Result<()> {
        run(self, report)
    }
}

/// The workloads' sizes, the scale's unless a flag gave them.
#[derive(Debug, Clone, Copy)]
struct Work {
    rows: usize,
    cells: usize,
    value_bytes: usize,
    writers: usize,
    reads: usize,
}

impl Work {
    fn of(args: &StoreBenchArgs) -> Self {
        let scale = args.common.scale;
        Self {
            rows: args.rows.unwrap_or(scale.pick(2_000, 20_000, 200_000)),
            cells: args.cells,
            value_bytes: args.value_bytes,
            writers: args.writers.max(1),
            reads: args.reads.unwrap_or(scale.pick(2_000, 20_000, 100_000)),
        }
    }
}

fn row_key(prefix: &str, i: usize) -> String {
    format!("{prefix}{i:09}")
}

fn raw_key(row: &str, qualifier: usize) -> Vec<u8> {
    let mut k = format!("{row}/{FAMILY}/q{qualifier}").into_bytes();
    k.push(0);
    k.extend_from_slice(&(!(TS as u64)).to_be_bytes());
    k
}

fn raw_db(path: &std::path::Path, cache_bytes: usize) -> anyhow::Result<DB> {
    let mut opts = Options::default();
    opts.create_if_missing(true);
    opts.set_max_background_jobs(2);
    let cache = Cache::new_lru_cache(cache_bytes);
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(&cache);
    table.set_bloom_filter(10.0, false);
    table.set_cache_index_and_filter_blocks(true);
    opts.set_block_based_table_factory(&table);
    opts.set_compression_type(DBCompressionType::Lz4);
    DB::open(&opts, path).context("cannot open the raw RocksDB")
}

/// One row of a table: a workload measured on both sides.
struct Line {
    workload: String,
    penchant: f64,
    raw: f64,
    unit: &'static str,
}

fn run(args: StoreBenchArgs, report: &mut Report) -> anyhow::Result<()> {
    let work = Work::of(&args);
    let tmp;
    let dir = match &args.dir {
        Some(d) => d.clone(),
        None => {
            tmp = tempfile::tempdir()?;
            tmp.path().to_path_buf()
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let options = RocksOptions {
        sync_writes: !args.no_sync,
        ..RocksOptions::default()
    };
    let rocks = Arc::new(RocksStore::open(dir.join("penchant"), options.clone())?);
    let store: Arc<dyn Store> = rocks.clone();
    let raw = Arc::new(raw_db(&dir.join("raw"), options.block_cache_bytes)?);
    let mut sync = WriteOptions::default();
    sync.set_sync(!args.no_sync);
    let sync = Arc::new(sync);
    let value = Bytes::from(vec![b'v'; work.value_bytes]);

    let mut lines = Vec::new();
    runtime.block_on(async {
        store
            .create_table(TABLE, [(FAMILY.to_string(), GcRule::None)].into())
            .await?;

        // 1. Single-row durable writes from concurrent writers.
        let per_writer = work.rows / work.writers;
        let total = per_writer * work.writers;
        let progress = bar(
            "store: durable writes, 1 row each (penchant, then raw rocksdb)",
            2 * total as u64,
        );
        let p = write_single(store.clone(), &work, &value, &progress).await?;
        let start = Instant::now();
        std::thread::scope(|s| {
            for w in 0..work.writers {
                let (raw, sync, value, progress) = (&raw, &sync, &value, &progress);
                s.spawn(move || {
                    for i in 0..per_writer {
                        let row = row_key("s", w * per_writer + i);
                        let mut batch = WriteBatch::default();
                        for q in 0..work.cells {
                            batch.put(raw_key(&row, q), value);
                        }
                        raw.write_opt(batch, sync).expect("raw write");
                        progress.inc(1);
                    }
                });
            }
        });
        let r = total as f64 / start.elapsed().as_secs_f64();
        drop(progress);
        lines.push(Line {
            workload: format!("durable writes, 1 row each, {} writers", work.writers),
            penchant: p,
            raw: r,
            unit: "rows/s",
        });

        // 2. Batched durable writes.
        let progress = bar(
            format!("store: durable writes, batches of {BATCH_ROWS} rows"),
            2 * work.rows as u64,
        );
        let p = write_batches(&store, &work, &value, &progress).await?;
        let start = Instant::now();
        for chunk in (0..work.rows).collect::<Vec<_>>().chunks(BATCH_ROWS) {
            let mut batch = WriteBatch::default();
            for i in chunk {
                let row = row_key("b", *i);
                for q in 0..work.cells {
                    batch.put(raw_key(&row, q), &value);
                }
            }
            raw.write_opt(batch, &sync)?;
            progress.inc(chunk.len() as u64);
        }
        let r = work.rows as f64 / start.elapsed().as_secs_f64();
        drop(progress);
        lines.push(Line {
            workload: format!("durable writes, batches of {BATCH_ROWS} rows"),
            penchant: p,
            raw: r,
            unit: "rows/s",
        });

        // Same physical state on both sides before reading: everything in SST files.
        let progress = spinner("store: compacting both databases");
        rocks.compact()?;
        raw.flush()?;
        raw.compact_range(None::<&[u8]>, None::<&[u8]>);
        drop(progress);
        let total_cells = (total + work.rows) * work.cells;

        // 3. Full scans, without and with a qualifier filter (one qualifier of N).
        for filtered in [false, true] {
            let workload = if filtered {
                format!("scan, qualifier filter (1 of {})", work.cells)
            } else {
                "scan, all cells".into()
            };
            let progress = bar(
                format!("store: {workload}, {SCAN_ROUNDS} rounds each"),
                2 * SCAN_ROUNDS as u64,
            );
            // Each side scans SCAN_ROUNDS times, alternating; the best round counts.
            let (mut p, mut r) = (0f64, 0f64);
            for _ in 0..SCAN_ROUNDS {
                let (rate, cells) = scan(&store, filtered, total_cells).await?;
                p = p.max(rate);
                progress.inc(1);
                let start = Instant::now();
                let mut raw_cells = 0usize;
                let mut it = raw.raw_iterator();
                it.seek_to_first();
                while let Some(k) = it.key() {
                    let keep = !filtered || {
                        let q = &k[..k.len() - 9];
                        q.ends_with(b"/q0")
                    };
                    if keep {
                        std::hint::black_box(it.value());
                        raw_cells += 1;
                    }
                    it.next();
                }
                it.status()?;
                r = r.max(total_cells as f64 / start.elapsed().as_secs_f64());
                progress.inc(1);
                anyhow::ensure!(cells == raw_cells, "scan mismatch: {cells} vs {raw_cells}");
            }
            lines.push(Line {
                workload,
                penchant: p,
                raw: r,
                unit: "cells scanned/s",
            });
        }

        // 4. Point reads of random rows.
        let mut rng = rand::rng();
        let keys: Vec<usize> = (0..work.reads)
            .map(|_| rng.random_range(0..work.rows))
            .collect();
        let progress = bar("store: point reads", 2 * keys.len() as u64);
        let (p_rate, p_hist) = point_reads(&store, &keys, work.cells, &progress).await?;
        let mut r_hist = Histogram::<u64>::new(3)?;
        let start = Instant::now();
        for (n, &i) in keys.iter().enumerate() {
            let t = Instant::now();
            let row = row_key("b", i);
            let mut opts = ReadOptions::default();
            opts.set_iterate_upper_bound(format!("{row}0"));
            let mut it = raw.raw_iterator_opt(opts);
            it.seek(format!("{row}/"));
            let mut cells = 0;
            while let Some(v) = it.value() {
                std::hint::black_box(v);
                cells += 1;
                it.next();
            }
            r_hist.record(t.elapsed().as_nanos() as u64)?;
            anyhow::ensure!(cells == work.cells);
            tick(&progress, n);
        }
        let r_rate = keys.len() as f64 / start.elapsed().as_secs_f64();
        drop(progress);
        lines.push(Line {
            workload: "point read, sequential".into(),
            penchant: p_rate,
            raw: r_rate,
            unit: "reads/s",
        });
        for (name, q) in [("p50", 0.5), ("p99", 0.99)] {
            lines.push(Line {
                workload: format!("point read latency {name}"),
                penchant: micros(&p_hist, q),
                raw: micros(&r_hist, q),
                unit: "µs",
            });
        }
        anyhow::Ok(())
    })?;

    let sizes = format!(
        "{} rows x {} cells x {} B, {} writers, {} WAL",
        rate(work.rows as f64),
        work.cells,
        work.value_bytes,
        work.writers,
        if args.no_sync { "unsynced" } else { "fsynced" },
    );
    let mut table = lines_table(
        format!("store: Penchant's store beside raw RocksDB, {sizes}"),
        &lines,
        "penchant",
        "raw rocksdb",
    );
    table.note(
        "ratio: penchant / raw rocksdb (above 1 is better for throughput, worse for latency)",
    );
    report.table(table);
    if args.bigtable_emulator {
        let bigtable = runtime.block_on(on_bigtable(&work, &value, &lines))?;
        let mut table = lines_table(
            format!(
                "store: the Bigtable backend on an emulator beside the embedded store, {sizes}"
            ),
            &bigtable,
            "bt emulator",
            "embedded",
        );
        table.note("informative only: the emulator is an in-memory test server, not Bigtable");
        report.table(table);
    }
    Ok(())
}

/// Advance `progress` by a batch of point reads every 256 (so the reads' loop stays tight).
fn tick(progress: &ProgressBar, n: usize) {
    if n % 256 == 255 {
        progress.inc(256);
    }
}

fn micros(h: &Histogram<u64>, q: f64) -> f64 {
    Duration::from_nanos(h.value_at_quantile(q)).as_secs_f64() * 1e6
}

fn mutations(work: &Work, value: &Bytes, row: &str) -> RowMutation {
    RowMutation::new(
        Bytes::from(row.to_owned()),
        (0..work.cells)
            .map(|q| Mutation::set(FAMILY, Bytes::from(format!("q{q}")), TS, value.clone()))
            .collect(),
    )
}

/// Single-row writes from `work.writers` concurrent writers, in rows/s.
async fn write_single(
    store: Arc<dyn Store>,
    work: &Work,
    value: &Bytes,
    progress: &ProgressBar,
) -> anyhow::Result<f64> {
    let per_writer = work.rows / work.writers;
    let start = Instant::now();
    let tasks: Vec<_> = (0..work.writers)
        .map(|w| {
            let (store, progress) = (store.clone(), progress.clone());
            let rows: Vec<RowMutation> = (0..per_writer)
                .map(|i| mutations(work, value, &row_key("s", w * per_writer + i)))
                .collect();
            tokio::spawn(async move {
                for r in rows {
                    store.mutate_row(TABLE, r.row_key, r.mutations).await?;
                    progress.inc(1);
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for t in tasks {
        t.await??;
    }
    Ok((per_writer * work.writers) as f64 / start.elapsed().as_secs_f64())
}

/// Batches of `BATCH_ROWS` rows, in rows/s.
async fn write_batches(
    store: &Arc<dyn Store>,
    work: &Work,
    value: &Bytes,
    progress: &ProgressBar,
) -> anyhow::Result<f64> {
    let start = Instant::now();
    for chunk in (0..work.rows).collect::<Vec<_>>().chunks(BATCH_ROWS) {
        let entries = chunk
            .iter()
            .map(|i| mutations(work, value, &row_key("b", *i)))
            .collect();
        for status in store.mutate_rows(TABLE, entries).await? {
            status?;
        }
        progress.inc(chunk.len() as u64);
    }
    Ok(work.rows as f64 / start.elapsed().as_secs_f64())
}

/// One full scan, optionally keeping one qualifier: (cells scanned/s, cells returned).
async fn scan(
    store: &Arc<dyn Store>,
    filtered: bool,
    total_cells: usize,
) -> anyhow::Result<(f64, usize)> {
    let mut request = ReadRows::default();
    if filtered {
        request = request.filter(RowFilter::qualifiers(["q0"]));
    }
    let start = Instant::now();
    let mut cells = 0usize;
    let mut stream = store.read_rows(TABLE, request).await?;
    while let Some(row) = stream.next().await {
        cells += row?.cells.len();
    }
    Ok((total_cells as f64 / start.elapsed().as_secs_f64(), cells))
}

/// Point reads of the given batch rows, one after another: (reads/s, latency histogram in ns).
async fn point_reads(
    store: &Arc<dyn Store>,
    keys: &[usize],
    cells: usize,
    progress: &ProgressBar,
) -> anyhow::Result<(f64, Histogram<u64>)> {
    let mut hist = Histogram::<u64>::new(3)?;
    let start = Instant::now();
    for (n, &i) in keys.iter().enumerate() {
        let t = Instant::now();
        let row = store
            .read_row(TABLE, Bytes::from(row_key("b", i)), None)
            .await?
            .context("row missing")?;
        hist.record(t.elapsed().as_nanos() as u64)?;
        anyhow::ensure!(row.cells.len() == cells);
        tick(progress, n);
    }
    Ok((keys.len() as f64 / start.elapsed().as_secs_f64(), hist))
}

/// The same workloads on a Bigtable emulator, beside the embedded store's numbers.
async fn on_bigtable(work: &Work, value: &Bytes, embedded: &[Line]) -> anyhow::Result<Vec<Line>> {
    use penchant_store_bigtable::emulator::Emulator;
    let progress = spinner("store: starting a Bigtable emulator");
    let emulator = Emulator::start();
    let store: Arc<dyn Store> =
        Arc::new(penchant_store_bigtable::BigtableStore::connect(emulator.config("")).await?);
    store
        .create_table(TABLE, [(FAMILY.to_string(), GcRule::None)].into())
        .await?;
    drop(progress);
    let per_writer = work.rows / work.writers;
    let progress = bar(
        "store: durable writes on the Bigtable emulator",
        (per_writer * work.writers + work.rows) as u64,
    );
    let mut results = vec![
        write_single(store.clone(), work, value, &progress).await?,
        write_batches(&store, work, value, &progress).await?,
    ];
    drop(progress);
    let total_cells = (per_writer * work.writers + work.rows) * work.cells;
    let progress = bar(
        "store: scans on the Bigtable emulator",
        2 * SCAN_ROUNDS as u64,
    );
    for filtered in [false, true] {
        let mut best = 0f64;
        for _ in 0..SCAN_ROUNDS {
            best = best.max(scan(&store, filtered, total_cells).await?.0);
            progress.inc(1);
        }
        results.push(best);
    }
    drop(progress);
    let mut rng = rand::rng();
    let keys: Vec<usize> = (0..work.reads)
        .map(|_| rng.random_range(0..work.rows))
        .collect();
    let progress = bar(
        "store: point reads on the Bigtable emulator",
        keys.len() as u64,
    );
    let (rate, hist) = point_reads(&store, &keys, work.cells, &progress).await?;
    results.extend([rate, micros(&hist, 0.5), micros(&hist, 0.99)]);
    Ok(embedded
        .iter()
        .zip(results)
        .map(|(e, bt)| Line {
            workload: e.workload.clone(),
            penchant: bt,
            raw: e.penchant,
            unit: e.unit,
        })
        .collect())
}

/// The lines as a table: each workload, both sides' figures and their ratio.
fn lines_table(title: String, lines: &[Line], left: &str, right: &str) -> Table {
    let mut table = Table::new(title, &["workload", left, right, "ratio", "unit"]);
    for l in lines {
        let cell = |v: f64| {
            if l.unit == "µs" {
                Cell::fixed(v, 1)
            } else {
                Cell::int(v)
            }
        };
        table.row(vec![
            l.workload.as_str().into(),
            cell(l.penchant),
            cell(l.raw),
            Cell::fixed(l.penchant / l.raw, 2),
            l.unit.into(),
        ]);
    }
    table
}
