//! `penchant bench als`: Penchant's implicit-feedback ALS (`penchant_vectors::als`) beside the
//! `implicit` library's CPU ALS, the reference every ALS recommender is compared with, on the
//! same data in the same run.
//!
//! Two datasets: MovieLens 100k (every rating binarized to weight 1, 943 users × 1,682 items),
//! the public yardstick, and a synthetic set with planted structure
//! (`penchant_vectors::synthetic::planted`, 16 topics, Zipf popularity, heavy-tailed users;
//! `--scale small` 20k users × 5k items × 500k events, `large` 100k × 20k × 5M) for a size
//! where the time per iteration matters. Each is split 80/20 at random (seeded,
//! `eval::random_split`); the suite writes the training matrix (distinct pairs, summed
//! weights) and the cleaned test sets to a temporary folder as raw records, and both sides read
//! that: the same matrix, the same test items.
//!
//! Both train the same model: the same factors, regularization, iterations, conjugate-gradient
//! steps (3, implicit's default `use_cg=True`) and thread count, and the same confidence
//! `1 + alpha × weight` (implicit ≥ 0.5 takes its matrix values as the confidence, so the
//! matrix handed to it holds `1 + alpha × weight` and its own `alpha` is 1). implicit runs in a
//! Python child (`crates/penchant-bench/python/als_implicit.py`, embedded in this binary) with
//! `OPENBLAS_NUM_THREADS=1`, as implicit asks; its fit is timed inside Python, so neither side
//! counts loading the data. Each fit is repeated (`--repeats`) and the fastest counts.
//!
//! Quality is precision@10 and NDCG@10 on the test split with `implicit`'s definitions
//! (`ranking_metrics_at_k`: precision = hits / Σᵤ min(K, |testᵤ|), binary NDCG, the user's
//! training items excluded from the recommendations), beside the popularity baseline. Every
//! model is scored twice, by `penchant_vectors::eval` and by `implicit.evaluation` (each side's
//! factors are exported to the other as raw `f32`): the two columns must agree, which checks
//! that the two metric implementations are the same definitions.

use std::hint::black_box;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, bail};
use penchant_vectors::Matrix;
use penchant_vectors::als::{self, AlsConfig, Factors, Interactions};
use penchant_vectors::eval::{self, Metrics, Split};
use penchant_vectors::synthetic;
use serde::Deserialize;

use crate::rate;

/// The reference script, written next to the data at run time so the binary needs no checkout.
const SCRIPT: &str = include_str!("../python/als_implicit.py");

/// The cut-off of the ranking metrics.
const K: usize = 10;

/// The share of interactions held out for testing.
const TEST_SHARE: f64 = 0.2;

/// Topics planted in the synthetic data.
const TOPICS: usize = 16;

/// The size of the synthetic dataset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scale {
    /// 20,000 users × 5,000 items × 500,000 events: a minute.
    Small,
    /// 100,000 users × 20,000 items × 5,000,000 events.
    Large,
}

impl Scale {
    /// Users, items and events of the synthetic set.
    fn synthetic(self) -> (usize, usize, usize) {
        match self {
            Scale::Small => (20_000, 5_000, 500_000),
            Scale::Large => (100_000, 20_000, 5_000_000),
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct AlsBenchArgs {
    /// The synthetic dataset: small 20k users × 5k items × 500k events, large 100k × 20k × 5M.
    #[arg(long, value_enum, default_value_t = Scale::Small)]
    scale: Scale,
    /// Threads for both implementations (0: one per core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// MovieLens 100k: `u.data` (GroupLens) or `ml-100k.inter` (RecBole) in this folder.
    #[arg(long, default_value = "../shared/data/ml-100k")]
    movielens: PathBuf,
    /// A Python with `implicit` installed (default: `scripts/bench-python.sh` makes one).
    #[arg(long, env = "PENCHANT_BENCH_PYTHON")]
    python: Option<PathBuf>,
    /// Latent factors.
    #[arg(long, default_value_t = 64)]
    factors: usize,
    /// L2 regularization, λ.
    #[arg(long, default_value_t = 0.01)]
    regularization: f32,
    /// Confidence of a seen item: 1 + alpha × weight.
    #[arg(long, default_value_t = 10.0)]
    alpha: f32,
    /// ALS iterations.
    #[arg(long, default_value_t = 15)]
    iterations: usize,
    /// Conjugate-gradient steps per row per iteration.
    #[arg(long, default_value_t = 3)]
    cg_steps: usize,
    /// Fits timed per implementation and dataset, the fastest counts (default: 3, and 1 for
    /// the large synthetic set).
    #[arg(long)]
    repeats: Option<usize>,
    /// Seeds the split, the synthetic data and both models' initial factors.
    #[arg(long, default_value_t = 42)]
    seed: u64,
}

/// One dataset, split.
struct Dataset {
    name: String,
    users: usize,
    items: usize,
    events: usize,
    split: Split,
}

/// What the Python reference printed.
#[derive(Debug, Deserialize)]
struct Reference {
    implicit_version: String,
    fit_seconds: f64,
    metrics: PyMetrics,
    penchant_metrics: PyMetrics,
}

#[derive(Debug, Clone, Copy, Deserialize)]
struct PyMetrics {
    precision: f64,
    ndcg: f64,
}

/// One row of the table.
struct Row {
    dataset: String,
    model: String,
    /// Seconds per iteration and of the whole fit.
    time: Option<(f64, f64)>,
    /// By `penchant_vectors::eval`.
    ours: Metrics,
    /// By `implicit.evaluation.ranking_metrics_at_k`.
    theirs: Option<PyMetrics>,
    note: String,
}

pub fn run(args: AlsBenchArgs) -> anyhow::Result<()> {
    let threads = match args.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let config = AlsConfig {
        factors: args.factors,
        regularization: args.regularization,
        alpha: args.alpha,
        iterations: args.iterations,
        cg_steps: args.cg_steps,
        seed: args.seed,
        threads,
    };
    config.validate().map_err(anyhow::Error::msg)?;
    let (cpu, cores) = crate::ingest::cpu();
    println!(
        "penchant bench als: {cpu}, {cores} cores, {threads} threads each, SIMD {}",
        simd()
    );
    println!(
        "factors {}, regularization {}, confidence 1 + {} x weight, {} iterations, CG {} steps, \
         80/20 random split, metrics @{K}",
        config.factors, config.regularization, config.alpha, config.iterations, config.cg_steps
    );

    let dir = tempfile::tempdir()?;
    let python = python(&args);
    let script = dir.path().join("als_implicit.py");
    std::fs::write(&script, SCRIPT)?;

    let (users, items, events) = args.scale.synthetic();
    let datasets: Vec<Box<dyn Fn() -> anyhow::Result<Dataset>>> = vec![
        Box::new(|| movielens(&args.movielens, args.seed)),
        Box::new(move || Ok(planted(users, items, events, args.seed))),
    ];
    let mut rows = Vec::new();
    let mut missing = None;
    for make in datasets {
        let data = make()?;
        let train =
            Interactions::from_triples(data.users, data.items, data.split.train.iter().copied());
        let test_pairs: usize = data.split.test.iter().map(Vec::len).sum();
        let test_users = data.split.test.iter().filter(|t| !t.is_empty()).count();
        println!(
            "{}: {} users x {} items, {} events -> {} training pairs, {} test pairs over {} users",
            data.name,
            rate(data.users as f64),
            rate(data.items as f64),
            rate(data.events as f64),
            rate(train.nnz() as f64),
            rate(test_pairs as f64),
            rate(test_users as f64),
        );
        let repeats = args
            .repeats
            .unwrap_or(if data.events >= 1_000_000 { 1 } else { 3 })
            .max(1);
        let folder = dir.path().join(data.name.replace(' ', "-"));
        std::fs::create_dir_all(folder.join("penchant"))?;
        write_records(&folder.join("train.bin"), train_records(&train))?;
        write_records(
            &folder.join("test.bin"),
            data.split
                .test
                .iter()
                .enumerate()
                .flat_map(|(u, items)| items.iter().map(move |&i| (u as u32, i, 1.0))),
        )?;

        // Penchant.
        eprintln!("{}: training Penchant's ALS ({repeats} fits)", data.name);
        let mut best: Option<(f64, Factors)> = None;
        for _ in 0..repeats {
            let start = Instant::now();
            let factors =
                als::train(&train, &config, |_| true).context("training was not cancelled")?;
            let seconds = start.elapsed().as_secs_f64();
            if best.as_ref().is_none_or(|(b, _)| seconds < *b) {
                best = Some((seconds, black_box(factors)));
            }
        }
        let (ours_seconds, ours) = best.context("at least one fit")?;
        write_f32(
            &folder.join("penchant/user_factors.f32"),
            ours.users.as_slice(),
        )?;
        write_f32(
            &folder.join("penchant/item_factors.f32"),
            ours.items.as_slice(),
        )?;
        let ours_metrics = evaluate(&data.split.test, threads, |u| {
            eval::recommend(&ours, &train, u, K)
        });

        // Popularity.
        let popular = eval::popularity(&train);
        let popularity = evaluate(&data.split.test, threads, |u| {
            let (seen, _) = train.user_items(u);
            popular
                .iter()
                .copied()
                .filter(|i| seen.binary_search(i).is_err())
                .take(K)
                .collect()
        });

        // implicit.
        let reference = match &python {
            Ok(python) => {
                eprintln!("{}: training implicit's ALS ({repeats} fits)", data.name);
                reference(python, &script, &folder, &data, &config, repeats)
                    .with_context(|| format!("the implicit reference on {}", data.name))
            }
            Err(e) => Err(anyhow::anyhow!("{e}")),
        };
        let per_iteration = |fit: f64| (fit / config.iterations as f64, fit);
        match reference {
            Ok((reference, theirs)) => {
                let theirs_metrics = evaluate(&data.split.test, threads, |u| {
                    eval::recommend(&theirs, &train, u, K)
                });
                let theirs_time = per_iteration(reference.fit_seconds);
                let ratio = ours_seconds / reference.fit_seconds;
                rows.push(Row {
                    dataset: data.name.clone(),
                    model: "penchant ALS".into(),
                    time: Some(per_iteration(ours_seconds)),
                    ours: ours_metrics,
                    theirs: Some(reference.penchant_metrics),
                    note: format!("time/implicit's = {ratio:.2}"),
                });
                rows.push(Row {
                    dataset: data.name.clone(),
                    model: format!("implicit {} ALS", reference.implicit_version),
                    time: Some(theirs_time),
                    ours: theirs_metrics,
                    theirs: Some(reference.metrics),
                    note: format!("reference (best of {repeats} fits)"),
                });
            }
            Err(e) => {
                rows.push(Row {
                    dataset: data.name.clone(),
                    model: "penchant ALS".into(),
                    time: Some(per_iteration(ours_seconds)),
                    ours: ours_metrics,
                    theirs: None,
                    note: "no reference".into(),
                });
                missing.get_or_insert(e);
            }
        }
        rows.push(Row {
            dataset: data.name.clone(),
            model: "popularity".into(),
            time: None,
            ours: popularity,
            theirs: None,
            note: "baseline".into(),
        });
    }

    print_table(&rows);
    if let Some(e) = missing {
        println!(
            "\nreference missing: implicit could not run ({e:#}); make its Python with \
             scripts/bench-python.sh, or pass --python / PENCHANT_BENCH_PYTHON"
        );
    }
    Ok(())
}

fn print_table(rows: &[Row]) {
    println!(
        "\n{:<16} {:<20} {:>9} {:>8}  {:>8} {:>8}  {:>8} {:>8}  note",
        "dataset", "model", "s/iter", "fit s", "P@10", "P@10", "NDCG@10", "NDCG@10"
    );
    println!(
        "{:<16} {:<20} {:>9} {:>8}  {:>8} {:>8}  {:>8} {:>8}",
        "", "", "", "", "penchant", "implicit", "penchant", "implicit"
    );
    let opt = |v: Option<f64>, width: usize, digits: usize| match v {
        Some(v) => format!("{v:>width$.digits$}"),
        None => format!("{:>width$}", "-"),
    };
    for row in rows {
        println!(
            "{:<16} {:<20} {} {}  {:>8.4} {}  {:>8.4} {}  {}",
            row.dataset,
            row.model,
            opt(row.time.map(|t| t.0), 9, 4),
            opt(row.time.map(|t| t.1), 8, 2),
            row.ours.precision,
            opt(row.theirs.map(|m| m.precision), 8, 4),
            row.ours.ndcg,
            opt(row.theirs.map(|m| m.ndcg), 8, 4),
            row.note,
        );
    }
    println!(
        "(P@10 and NDCG@10 twice: scored by penchant_vectors::eval, then by \
         implicit.evaluation.ranking_metrics_at_k on the same factors)"
    );
    let gaps: Vec<f64> = rows
        .iter()
        .filter_map(|r| {
            let theirs = r.theirs?;
            Some(
                (r.ours.precision - theirs.precision)
                    .abs()
                    .max((r.ours.ndcg - theirs.ndcg).abs()),
            )
        })
        .collect();
    if let Some(gap) = gaps.iter().copied().reduce(f64::max) {
        println!(
            "metric cross-check: the two evaluators differ by at most {gap:.1e} over {} models",
            gaps.len()
        );
    }
}

/// Ranking metrics of the lists `recommend` gives, computed on `threads` threads first.
fn evaluate(
    test: &[Vec<u32>],
    threads: usize,
    recommend: impl Fn(usize) -> Vec<u32> + Sync,
) -> Metrics {
    let chunk = test.len().div_ceil(threads.max(1)).max(1);
    let lists: Vec<Vec<u32>> = std::thread::scope(|s| {
        let recommend = &recommend;
        let handles: Vec<_> = (0..test.len())
            .step_by(chunk)
            .map(|start| {
                s.spawn(move || {
                    (start..(start + chunk).min(test.len()))
                        .map(|u| {
                            if test[u].is_empty() {
                                Vec::new()
                            } else {
                                recommend(u)
                            }
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("evaluation thread panicked"))
            .collect()
    });
    eval::ranking_metrics(test, K, |u| lists[u].clone())
}

/// MovieLens 100k, every rating as weight 1, split 80/20.
fn movielens(dir: &Path, seed: u64) -> anyhow::Result<Dataset> {
    let (path, header) = if dir.join("u.data").is_file() {
        (dir.join("u.data"), false)
    } else {
        (dir.join("ml-100k.inter"), true)
    };
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read MovieLens 100k from {}", path.display()))?;
    let mut raw = Vec::new();
    for line in text.lines().skip(usize::from(header)) {
        let mut fields = line.split('\t');
        let (Some(user), Some(item)) = (fields.next(), fields.next()) else {
            continue;
        };
        raw.push((user.trim().to_owned(), item.trim().to_owned()));
    }
    if raw.is_empty() {
        bail!("no ratings in {}", path.display());
    }
    // Dense rows in order of id, numerically where the ids are numbers.
    let rows = |ids: Vec<&String>| {
        let mut ids: Vec<&String> = ids;
        ids.sort_by(|a, b| match (a.parse::<u64>(), b.parse::<u64>()) {
            (Ok(a), Ok(b)) => a.cmp(&b),
            _ => a.cmp(b),
        });
        ids.dedup();
        ids.into_iter()
            .enumerate()
            .map(|(row, id)| (id.clone(), row as u32))
            .collect::<std::collections::HashMap<_, _>>()
    };
    let user_rows = rows(raw.iter().map(|(u, _)| u).collect());
    let item_rows = rows(raw.iter().map(|(_, i)| i).collect());
    let triples: Vec<(u32, u32, f32)> = raw
        .iter()
        .map(|(u, i)| (user_rows[u], item_rows[i], 1.0))
        .collect();
    let split = eval::random_split(&triples, user_rows.len(), TEST_SHARE, seed);
    Ok(Dataset {
        name: "movielens-100k".into(),
        users: user_rows.len(),
        items: item_rows.len(),
        events: triples.len(),
        split,
    })
}

/// The planted synthetic set, split 80/20.
fn planted(users: usize, items: usize, events: usize, seed: u64) -> Dataset {
    let started = Instant::now();
    let (events, _) = synthetic::planted(users, items, TOPICS, events, seed);
    let triples: Vec<(u32, u32, f32)> = events.iter().map(|&(u, i, w, _)| (u, i, w)).collect();
    let split = eval::random_split(&triples, users, TEST_SHARE, seed);
    eprintln!(
        "synthetic data generated in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Dataset {
        name: format!("synthetic {}k", events.len() / 1000),
        users,
        items,
        events: events.len(),
        split,
    }
}

/// The training matrix as `(user, item, weight)` per distinct pair.
fn train_records(train: &Interactions) -> impl Iterator<Item = (u32, u32, f32)> + '_ {
    (0..train.users()).flat_map(move |u| {
        let (items, weights) = train.user_items(u);
        items
            .iter()
            .zip(weights)
            .map(move |(&i, &w)| (u as u32, i, w))
    })
}

/// Little-endian `(u32, u32, f32)` records, as the script reads them.
fn write_records(
    path: &Path,
    records: impl Iterator<Item = (u32, u32, f32)>,
) -> anyhow::Result<()> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    for (u, i, w) in records {
        out.write_all(&u.to_le_bytes())?;
        out.write_all(&i.to_le_bytes())?;
        out.write_all(&w.to_le_bytes())?;
    }
    out.flush()?;
    Ok(())
}

fn write_f32(path: &Path, values: &[f32]) -> anyhow::Result<()> {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    Ok(std::fs::write(path, bytes)?)
}

fn read_f32(path: &Path, rows: usize, dim: usize) -> anyhow::Result<Matrix> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    if bytes.len() != rows * dim * 4 {
        bail!(
            "{}: {} bytes, expected {rows} x {dim} f32",
            path.display(),
            bytes.len()
        );
    }
    let values = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    Ok(Matrix::from_rows(dim, values))
}

/// The Python to run the reference with: `--python`/`PENCHANT_BENCH_PYTHON`, else what
/// `scripts/bench-python.sh` prints (it makes the virtualenv on first use).
fn python(args: &AlsBenchArgs) -> anyhow::Result<PathBuf> {
    if let Some(python) = &args.python {
        return Ok(python.clone());
    }
    let candidates = [
        PathBuf::from("scripts/bench-python.sh"),
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/bench-python.sh"),
    ];
    let script = candidates
        .iter()
        .find(|p| p.is_file())
        .context("no --python given and scripts/bench-python.sh not found")?;
    eprintln!("finding implicit's Python with {}", script.display());
    let out = Command::new(script)
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("cannot run {}", script.display()))?;
    if !out.status.success() {
        bail!("{} failed ({})", script.display(), out.status);
    }
    let path = String::from_utf8(out.stdout)?.trim().to_owned();
    if path.is_empty() {
        bail!("{} printed no path", script.display());
    }
    Ok(PathBuf::from(path))
}

/// Runs the reference on `folder`'s files; its report and its factors.
fn reference(
    python: &Path,
    script: &Path,
    folder: &Path,
    data: &Dataset,
    config: &AlsConfig,
    repeats: usize,
) -> anyhow::Result<(Reference, Factors)> {
    let out = folder.join("implicit");
    let output = Command::new(python)
        .arg(script)
        .arg("--train")
        .arg(folder.join("train.bin"))
        .arg("--test")
        .arg(folder.join("test.bin"))
        .args([
            "--users",
            &data.users.to_string(),
            "--items",
            &data.items.to_string(),
        ])
        .args(["--factors", &config.factors.to_string()])
        .args(["--regularization", &config.regularization.to_string()])
        .args(["--alpha", &config.alpha.to_string()])
        .args(["--iterations", &config.iterations.to_string()])
        .args(["--cg-steps", &config.cg_steps.to_string()])
        .args(["--threads", &config.threads.to_string()])
        .args(["--seed", &config.seed.to_string()])
        .args(["--k", &K.to_string(), "--repeats", &repeats.to_string()])
        .arg("--out")
        .arg(&out)
        .arg("--penchant-factors")
        .arg(folder.join("penchant"))
        .env("OPENBLAS_NUM_THREADS", "1")
        .stderr(Stdio::piped())
        .output()
        .with_context(|| format!("cannot run {}", python.display()))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
        bail!(
            "{} exited with {}: {}",
            python.display(),
            output.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        );
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    let reference: Reference = serde_json::from_str(line)
        .with_context(|| format!("unexpected output from the script: {line:?}"))?;
    let factors = Factors {
        users: read_f32(&out.join("user_factors.f32"), data.users, config.factors)?,
        items: read_f32(&out.join("item_factors.f32"), data.items, config.factors)?,
    };
    Ok((reference, factors))
}

/// The widest SIMD instruction set `pulp` can use here.
pub(crate) fn simd() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            "AVX-512 available (pulp uses it only when built with x86-v4)"
        } else if std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
        {
            "AVX2+FMA"
        } else {
            "SSE"
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        "NEON"
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        "portable"
    }
}
