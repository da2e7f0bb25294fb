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
use penchant_store::{GcRule, Mutation, ReadRows, RowFilter, RowMutation, Store};
use penchant_store_rocksdb::{RocksOptions, RocksStore};
use rand::Rng;
use rocksdb::{
    BlockBasedOptions, Cache, DB, DBCompressionType, Options, ReadOptions, WriteBatch, WriteOptions,
};

use crate::rate;

const TABLE: &str = "bench";
const FAMILY: &str = "f";
const TS: i64 = 1_700_000_000_000_000;
const BATCH_ROWS: usize = 500;
const SCAN_ROUNDS: usize = 5;

#[derive(Debug, clap::Args)]
pub struct StoreBenchArgs {
    /// Rows written by each write workload.
    #[arg(long, default_value_t = 20_000)]
    rows: usize,
    /// Cells per row (qualifiers q0, q1, ...).
    #[arg(long, default_value_t = 4)]
    cells: usize,
    /// Bytes per cell value.
    #[arg(long, default_value_t = 100)]
    value_bytes: usize,
    /// Concurrent writers of single-row mutations (group commit shares their fsyncs).
    #[arg(long, default_value_t = 16)]
    writers: usize,
    /// Point reads for the latency measurement.
    #[arg(long, default_value_t = 20_000)]
    reads: usize,
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

struct Line {
    workload: String,
    penchant: f64,
    raw: f64,
    unit: &'static str,
}

pub fn run(args: StoreBenchArgs) -> anyhow::Result<()> {
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
    let value = Bytes::from(vec![b'v'; args.value_bytes]);

    eprintln!(
        "penchant bench store: {} rows x {} cells x {} B, {} writers, {} WAL, in {}",
        args.rows,
        args.cells,
        args.value_bytes,
        args.writers,
        if args.no_sync { "unsynced" } else { "fsynced" },
        dir.display()
    );
    let mut lines = Vec::new();
    runtime.block_on(async {
        store
            .create_table(TABLE, [(FAMILY.to_string(), GcRule::None)].into())
            .await?;

        // 1. Single-row durable writes from concurrent writers.
        let per_writer = args.rows / args.writers.max(1);
        let total = per_writer * args.writers;
        let p = write_single(store.clone(), &args, &value).await?;
        let start = Instant::now();
        std::thread::scope(|s| {
            for w in 0..args.writers {
                let (raw, sync, value) = (&raw, &sync, &value);
                s.spawn(move || {
                    for i in 0..per_writer {
                        let row = row_key("s", w * per_writer + i);
                        let mut batch = WriteBatch::default();
                        for q in 0..args.cells {
                            batch.put(raw_key(&row, q), value);
                        }
                        raw.write_opt(batch, sync).expect("raw write");
                    }
                });
            }
        });
        let r = total as f64 / start.elapsed().as_secs_f64();
        lines.push(Line {
            workload: format!("durable writes, 1 row each, {} writers", args.writers),
            penchant: p,
            raw: r,
            unit: "rows/s",
        });

        // 2. Batched durable writes.
        let p = write_batches(&store, &args, &value).await?;
        let start = Instant::now();
        for chunk in (0..args.rows).collect::<Vec<_>>().chunks(BATCH_ROWS) {
            let mut batch = WriteBatch::default();
            for i in chunk {
                let row = row_key("b", *i);
                for q in 0..args.cells {
                    batch.put(raw_key(&row, q), &value);
                }
            }
            raw.write_opt(batch, &sync)?;
        }
        let r = args.rows as f64 / start.elapsed().as_secs_f64();
        lines.push(Line {
            workload: format!("durable writes, batches of {BATCH_ROWS} rows"),
            penchant: p,
            raw: r,
            unit: "rows/s",
        });

        // Same physical state on both sides before reading: everything in SST files.
        rocks.compact()?;
        raw.flush()?;
        raw.compact_range(None::<&[u8]>, None::<&[u8]>);
        let total_cells = (total + args.rows) * args.cells;

        // 3. Full scans, without and with a qualifier filter (one qualifier of N).
        for filtered in [false, true] {
            // Each side scans SCAN_ROUNDS times, alternating; the best round counts.
            let (mut p, mut r) = (0f64, 0f64);
            for _ in 0..SCAN_ROUNDS {
                let (rate, cells) = scan(&store, filtered, total_cells).await?;
                p = p.max(rate);
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
                anyhow::ensure!(cells == raw_cells, "scan mismatch: {cells} vs {raw_cells}");
            }
            lines.push(Line {
                workload: if filtered {
                    format!("scan, qualifier filter (1 of {})", args.cells)
                } else {
                    "scan, all cells".into()
                },
                penchant: p,
                raw: r,
                unit: "cells scanned/s",
            });
        }

        // 4. Point reads of random rows.
        let mut rng = rand::rng();
        let keys: Vec<usize> = (0..args.reads)
            .map(|_| rng.random_range(0..args.rows))
            .collect();
        let (p_rate, p_hist) = point_reads(&store, &keys, args.cells).await?;
        let mut r_hist = Histogram::<u64>::new(3)?;
        let start = Instant::now();
        for &i in &keys {
            let t = Instant::now();
            let row = row_key("b", i);
            let mut opts = ReadOptions::default();
            opts.set_iterate_upper_bound(format!("{row}0"));
            let mut it = raw.raw_iterator_opt(opts);
            it.seek(format!("{row}/"));
            let mut n = 0;
            while let Some(v) = it.value() {
                std::hint::black_box(v);
                n += 1;
                it.next();
            }
            r_hist.record(t.elapsed().as_nanos() as u64)?;
            anyhow::ensure!(n == args.cells);
        }
        let r_rate = keys.len() as f64 / start.elapsed().as_secs_f64();
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

    print_table(&lines, "penchant", "raw rocksdb");
    if args.bigtable_emulator {
        println!();
        let bigtable = runtime.block_on(on_bigtable(&args, &value, &lines))?;
        print_table(&bigtable, "bt emulator", "embedded");
    }
    Ok(())
}

fn micros(h: &Histogram<u64>, q: f64) -> f64 {
    Duration::from_nanos(h.value_at_quantile(q)).as_secs_f64() * 1e6
}

fn mutations(args: &StoreBenchArgs, value: &Bytes, row: &str) -> RowMutation {
    RowMutation::new(
        Bytes::from(row.to_owned()),
        (0..args.cells)
            .map(|q| Mutation::set(FAMILY, Bytes::from(format!("q{q}")), TS, value.clone()))
            .collect(),
    )
}

/// Single-row writes from `args.writers` concurrent writers, in rows/s.
async fn write_single(
    store: Arc<dyn Store>,
    args: &StoreBenchArgs,
    value: &Bytes,
) -> anyhow::Result<f64> {
    let per_writer = args.rows / args.writers.max(1);
    let start = Instant::now();
    let tasks: Vec<_> = (0..args.writers)
        .map(|w| {
            let store = store.clone();
            let rows: Vec<RowMutation> = (0..per_writer)
                .map(|i| mutations(args, value, &row_key("s", w * per_writer + i)))
                .collect();
            tokio::spawn(async move {
                for r in rows {
                    store.mutate_row(TABLE, r.row_key, r.mutations).await?;
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for t in tasks {
        t.await??;
    }
    Ok((per_writer * args.writers) as f64 / start.elapsed().as_secs_f64())
}

/// Batches of `BATCH_ROWS` rows, in rows/s.
async fn write_batches(
    store: &Arc<dyn Store>,
    args: &StoreBenchArgs,
    value: &Bytes,
) -> anyhow::Result<f64> {
    let start = Instant::now();
    for chunk in (0..args.rows).collect::<Vec<_>>().chunks(BATCH_ROWS) {
        let entries = chunk
            .iter()
            .map(|i| mutations(args, value, &row_key("b", *i)))
            .collect();
        for status in store.mutate_rows(TABLE, entries).await? {
            status?;
        }
    }
    Ok(args.rows as f64 / start.elapsed().as_secs_f64())
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
) -> anyhow::Result<(f64, Histogram<u64>)> {
    let mut hist = Histogram::<u64>::new(3)?;
    let start = Instant::now();
    for &i in keys {
        let t = Instant::now();
        let row = store
            .read_row(TABLE, Bytes::from(row_key("b", i)), None)
            .await?
            .context("row missing")?;
        hist.record(t.elapsed().as_nanos() as u64)?;
        anyhow::ensure!(row.cells.len() == cells);
    }
    Ok((keys.len() as f64 / start.elapsed().as_secs_f64(), hist))
}

/// The same workloads on a Bigtable emulator, beside the embedded store's numbers.
async fn on_bigtable(
    args: &StoreBenchArgs,
    value: &Bytes,
    embedded: &[Line],
) -> anyhow::Result<Vec<Line>> {
    use penchant_store_bigtable::emulator::Emulator;
    let emulator = Emulator::start();
    eprintln!("Bigtable emulator on {}", emulator.addr());
    let store: Arc<dyn Store> =
        Arc::new(penchant_store_bigtable::BigtableStore::connect(emulator.config("")).await?);
    store
        .create_table(TABLE, [(FAMILY.to_string(), GcRule::None)].into())
        .await?;
    let mut results = vec![
        write_single(store.clone(), args, value).await?,
        write_batches(&store, args, value).await?,
    ];
    let per_writer = args.rows / args.writers.max(1);
    let total_cells = (per_writer * args.writers + args.rows) * args.cells;
    for filtered in [false, true] {
        let mut best = 0f64;
        for _ in 0..SCAN_ROUNDS {
            best = best.max(scan(&store, filtered, total_cells).await?.0);
        }
        results.push(best);
    }
    let mut rng = rand::rng();
    let keys: Vec<usize> = (0..args.reads)
        .map(|_| rng.random_range(0..args.rows))
        .collect();
    let (rate, hist) = point_reads(&store, &keys, args.cells).await?;
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

fn print_table(lines: &[Line], left: &str, right: &str) {
    println!(
        "{:<44} {:>16} {:>16} {:>9}  unit",
        "workload", left, right, "ratio"
    );
    for l in lines {
        let fmt = |v: f64| {
            if l.unit == "µs" {
                format!("{v:.1}")
            } else {
                rate(v)
            }
        };
        println!(
            "{:<44} {:>16} {:>16} {:>9.2}  {}",
            l.workload,
            fmt(l.penchant),
            fmt(l.raw),
            l.penchant / l.raw,
            l.unit
        );
    }
}
