//! `penchant bench als`: Penchant's implicit-feedback ALS (`penchant_vectors::als`) beside the
//! `implicit` library's CPU ALS, the reference every ALS recommender is compared with, on the
//! same data in the same run.
//!
//! Two datasets: MovieLens 100k (every rating binarized to weight 1, 943 users × 1,682 items),
//! the public yardstick, and a synthetic set with planted structure
//! (`penchant_vectors::synthetic::planted`, 16 topics, Zipf popularity, heavy-tailed users;
//! `--scale small` 2k users × 500 items × 20k events, a smoke run; `medium` 20k × 5k × 500k;
//! `large` 100k × 20k × 5M) for a size where the time per iteration matters. Each is split 80/20 at random (seeded,
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

use crate::report::{bar, movielens_file, spinner};
use crate::{Bench, Cell, CommonArgs, Missing, Report, Scale, Table, rate};

/// The reference script, written next to the data at run time so the binary needs no checkout.
const SCRIPT: &str = include_str!("../python/als_implicit.py");

/// The cut-off of the ranking metrics.
const K: usize = 10;

/// The share of interactions held out for testing.
const TEST_SHARE: f64 = 0.2;

/// Topics planted in the synthetic data.
const TOPICS: usize = 16;

/// `penchant-bench als`'s flags.
#[derive(Debug, clap::Args)]
pub struct AlsBenchArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Threads for both implementations (0: one per core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// MovieLens 100k: `u.data` (GroupLens) or `ml-100k.inter` (RecBole) in this folder
    /// (missing: its rows are skipped).
    #[arg(long, default_value = "../shared/data/ml-100k")]
    movielens: PathBuf,
    /// A Python with `implicit` installed (default: `scripts/bench-python.sh` makes one).
    #[arg(long, env = "PENCHANT_BENCH_PYTHON")]
    python: Option<PathBuf>,
    /// Use the virtual environment of `scripts/bench-python.sh` only if it is already made
    /// (else skip the `implicit` rows) instead of making it (network access, a few minutes);
    /// `all` runs so.
    #[arg(long)]
    no_install: bool,
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
    /// Fits timed per implementation and dataset, the fastest counts [default: 3, and 1 for
    /// a dataset of 1M events or more and at scale small].
    #[arg(long)]
    repeats: Option<usize>,
    /// Seeds the split, the synthetic data and both models' initial factors.
    #[arg(long, default_value_t = 42)]
    seed: u64,
}

impl Bench for AlsBenchArgs {
    const NAME: &'static str = "als";
    const IN_ALL: &'static [&'static str] = &["--no-install"];

    fn common(&self) -> &CommonArgs {
        &self.common
    }

    fn run(self, report: &mut Report) -> anyhow::Result<()> {
        run(self, report)
    }
}

/// Users, items and events of the synthetic set at `scale`.
fn synthetic_size(scale: Scale) -> (usize, usize, usize) {
    scale.pick(
        (2_000, 500, 20_000),
        (20_000, 5_000, 500_000),
        (100_000, 20_000, 5_000_000),
    )
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

fn run(args: AlsBenchArgs, report: &mut Report) -> anyhow::Result<()> {
    let scale = args.common.scale;
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
    let mut table = Table::new(
        format!(
            "als: Penchant's ALS beside implicit, factors {}, regularization {}, confidence 1 + {} \
             x weight, {} iterations, CG {} steps, {threads} threads each, 80/20 random split, \
             metrics @{K}",
            config.factors, config.regularization, config.alpha, config.iterations, config.cg_steps
        ),
        &[
            "dataset",
            "model",
            "s/iter",
            "fit s",
            "P@10 penchant",
            "P@10 implicit",
            "NDCG@10 penchant",
            "NDCG@10 implicit",
            "note",
        ],
    );

    let dir = tempfile::tempdir()?;
    let python = python(&args);
    let script = dir.path().join("als_implicit.py");
    std::fs::write(&script, SCRIPT)?;

    let (users, items, events) = synthetic_size(scale);
    let datasets: Vec<Box<dyn Fn() -> anyhow::Result<Dataset>>> = vec![
        Box::new(|| movielens(&args.movielens, args.seed)),
        Box::new(move || Ok(planted(users, items, events, args.seed))),
    ];
    let mut rows = Vec::new();
    let mut missing = None;
    for make in datasets {
        let data = match make() {
            Ok(data) => data,
            Err(e) => match e.downcast_ref::<Missing>() {
                Some(why) => {
                    table.note(format!("skipped a dataset: {why}"));
                    continue;
                }
                None => return Err(e),
            },
        };
        let train =
            Interactions::from_triples(data.users, data.items, data.split.train.iter().copied());
        let test_pairs: usize = data.split.test.iter().map(Vec::len).sum();
        let test_users = data.split.test.iter().filter(|t| !t.is_empty()).count();
        table.note(format!(
            "{}: {} users x {} items, {} events -> {} training pairs, {} test pairs over {} users",
            data.name,
            rate(data.users as f64),
            rate(data.items as f64),
            rate(data.events as f64),
            rate(train.nnz() as f64),
            rate(test_pairs as f64),
            rate(test_users as f64),
        ));
        let repeats = args
            .repeats
            .unwrap_or(if data.events >= 1_000_000 || scale == Scale::Small {
                1
            } else {
                3
            })
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
        let progress = bar(
            format!("als: {}, Penchant's ALS fits", data.name),
            repeats as u64,
        );
        let mut best: Option<(f64, Factors)> = None;
        for _ in 0..repeats {
            let start = Instant::now();
            let factors =
                als::train(&train, &config, |_| true).context("training was not cancelled")?;
            let seconds = start.elapsed().as_secs_f64();
            if best.as_ref().is_none_or(|(b, _)| seconds < *b) {
                best = Some((seconds, black_box(factors)));
            }
            progress.inc(1);
        }
        drop(progress);
        let (ours_seconds, ours) = best.context("at least one fit")?;
        write_f32(
            &folder.join("penchant/user_factors.f32"),
            ours.users.as_slice(),
        )?;
        write_f32(
            &folder.join("penchant/item_factors.f32"),
            ours.items.as_slice(),
        )?;
        let progress = spinner(format!("als: {}, evaluating", data.name));
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
        drop(progress);

        // implicit.
        let reference = match &python {
            Ok(python) => {
                let progress = spinner(format!(
                    "als: {}, implicit's ALS ({repeats} fits, in Python)",
                    data.name
                ));
                let reference = reference(python, &script, &folder, &data, &config, repeats)
                    .with_context(|| format!("the implicit reference on {}", data.name));
                drop(progress);
                reference
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

    fill(&mut table, &rows);
    table.note(format!("SIMD: {}", crate::report::simd()));
    if let Some(e) = missing {
        table.note(format!(
            "reference skipped: implicit could not run ({e:#}); make its Python with \
             scripts/bench-python.sh, or pass --python / PENCHANT_BENCH_PYTHON"
        ));
    }
    report.table(table);
    Ok(())
}

/// The rows into the table, and the notes on the two evaluators.
fn fill(table: &mut Table, rows: &[Row]) {
    for row in rows {
        let metric = |v: Option<f64>| Cell::or_empty(v, |v| Cell::fixed(v, 4));
        table.row(vec![
            row.dataset.as_str().into(),
            row.model.as_str().into(),
            Cell::or_empty(row.time.map(|t| t.0), |v| Cell::fixed(v, 4)),
            Cell::or_empty(row.time.map(|t| t.1), |v| Cell::fixed(v, 2)),
            Cell::fixed(row.ours.precision, 4),
            metric(row.theirs.map(|m| m.precision)),
            Cell::fixed(row.ours.ndcg, 4),
            metric(row.theirs.map(|m| m.ndcg)),
            row.note.as_str().into(),
        ]);
    }
    table.note(
        "P@10 and NDCG@10 twice: scored by penchant_vectors::eval, then by \
         implicit.evaluation.ranking_metrics_at_k on the same factors",
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
        table.note(format!(
            "metric cross-check: the two evaluators differ by at most {gap:.1e} over {} models",
            gaps.len()
        ));
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

/// MovieLens 100k, every rating as weight 1, split 80/20; [`Missing`] without its file.
fn movielens(dir: &Path, seed: u64) -> anyhow::Result<Dataset> {
    let path = movielens_file(dir, true)?;
    let header = !path.ends_with("u.data");
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
    let progress = spinner(format!(
        "als: generating {} synthetic events",
        rate(events as f64)
    ));
    let (events, _) = synthetic::planted(users, items, TOPICS, events, seed);
    let triples: Vec<(u32, u32, f32)> = events.iter().map(|&(u, i, w, _)| (u, i, w)).collect();
    let split = eval::random_split(&triples, users, TEST_SHARE, seed);
    drop(progress);
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
/// `scripts/bench-python.sh` prints (it makes the virtual environment on first use); with
/// `--no-install`, that environment only if it is made and up to date.
fn python(args: &AlsBenchArgs) -> anyhow::Result<PathBuf> {
    bench_python(
        args.python.as_deref(),
        args.no_install,
        "als: finding implicit's Python",
    )
}

/// The bench's Python (`implicit`, LightGBM): `explicit` if given, else what
/// `scripts/bench-python.sh` prints (it makes the virtual environment on first use); with
/// `no_install`, that environment only if it is made and up to date.
pub(crate) fn bench_python(
    explicit: Option<&Path>,
    no_install: bool,
    label: &str,
) -> anyhow::Result<PathBuf> {
    if let Some(python) = explicit {
        return Ok(python.to_owned());
    }
    if no_install {
        return made_python();
    }
    let candidates = [
        PathBuf::from("scripts/bench-python.sh"),
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/bench-python.sh"),
    ];
    let script = candidates
        .iter()
        .find(|p| p.is_file())
        .context("no --python given and scripts/bench-python.sh not found")?;
    let progress = spinner(format!(
        "{label} with {} (made on first use)",
        script.display()
    ));
    let out = Command::new(script)
        .stderr(Stdio::piped())
        .output()
        .with_context(|| format!("cannot run {}", script.display()))?;
    drop(progress);
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
        bail!(
            "{} failed ({}): {}",
            script.display(),
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        );
    }
    let path = String::from_utf8(out.stdout)?.trim().to_owned();
    if path.is_empty() {
        bail!("{} printed no path", script.display());
    }
    Ok(PathBuf::from(path))
}

/// The requirements `scripts/bench-python.sh` installs, and stamps its environment with.
const REQUIREMENTS: &str = include_str!("../python/requirements.txt");

/// The Python of the virtual environment `scripts/bench-python.sh` makes
/// (`${XDG_CACHE_HOME:-~/.cache}/penchant/bench-venv`), if it is made for the current
/// requirements.
fn made_python() -> anyhow::Result<PathBuf> {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cache")))
        .context("neither XDG_CACHE_HOME nor HOME is set")?;
    let venv = cache.join("penchant/bench-venv");
    let python = venv.join("bin/python");
    let stamp = std::fs::read_to_string(venv.join("requirements.txt")).unwrap_or_default();
    if !python.is_file() || stamp != REQUIREMENTS {
        bail!(
            "no up-to-date virtual environment of scripts/bench-python.sh in {}",
            venv.display()
        );
    }
    Ok(python)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_makes_no_python_environment() {
        let args = crate::defaults::<AlsBenchArgs>(Scale::Medium).unwrap();
        assert!(args.no_install);
        assert!(args.python.is_none() || std::env::var_os("PENCHANT_BENCH_PYTHON").is_some());
    }
}
