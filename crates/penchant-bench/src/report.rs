//! What every suite shares: the scale of a run ([`Scale`]) and the flags every suite takes
//! ([`CommonArgs`]: `--scale`, `--json`), the tables a suite reports ([`Table`] of [`Cell`]s),
//! the run's report ([`Report`]: each table printed to stdout as it is done, and the whole run
//! written as one JSON document), the machine it ran on ([`Machine`]), progress bars on stderr
//! ([`bar`], [`spinner`]), and the error a suite returns when a reference it cannot do without
//! is missing ([`Missing`]).

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::Context;
use indicatif::{ProgressBar, ProgressFinish, ProgressStyle};
use serde::{Serialize, Serializer};

/// How big a suite's workloads are. Each suite maps it to its sizes (its `--help`, and
/// `docs/BENCHMARKS.md`); a size flag given explicitly overrides the scale's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scale {
    /// A smoke run: every suite tiny (`all` in a few minutes on 2 cores); the numbers mean
    /// little.
    Small,
    /// The sizes docs/BENCHMARKS.md's numbers were measured at.
    #[default]
    Medium,
    /// The largest workloads (1M users, 1M vectors).
    Large,
}

impl Scale {
    /// The scale's name, as `--scale` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Scale::Small => "small",
            Scale::Medium => "medium",
            Scale::Large => "large",
        }
    }

    /// The value for this scale among the three.
    pub fn pick<T>(self, small: T, medium: T, large: T) -> T {
        match self {
            Scale::Small => small,
            Scale::Medium => medium,
            Scale::Large => large,
        }
    }
}

/// The flags every suite takes, and `all`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct CommonArgs {
    /// Workload sizes: small (a smoke run), medium (docs/BENCHMARKS.md's numbers), large; a size flag
    /// given explicitly overrides the scale's.
    #[arg(long, value_enum, default_value_t = Scale::Medium)]
    pub scale: Scale,
    /// Also write the run to FILE as one JSON document: the machine, the scale, each suite's
    /// tables (numbers as numbers).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// A reference a suite cannot run without is not on this machine (MovieLens, for one): `all`
/// reports the suite as skipped, with this reason, and goes on. A reference only some rows
/// need (Redis, `implicit`) skips those rows instead, with a note.
#[derive(Debug)]
pub struct Missing(pub String);

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Missing {}

/// MovieLens 100k's ratings file in `dir` (RecBole's `ml-100k.inter`, or GroupLens's `u.data`
/// where `grouplens` allows it), or [`Missing`] saying where it was looked for.
pub fn movielens_file(dir: &Path, grouplens: bool) -> Result<PathBuf, Missing> {
    let names: &[&str] = if grouplens {
        &["u.data", "ml-100k.inter"]
    } else {
        &["ml-100k.inter"]
    };
    names
        .iter()
        .map(|name| dir.join(name))
        .find(|path| path.is_file())
        .ok_or_else(|| {
            Missing(format!(
                "MovieLens 100k not found: no {} in {} (pass --movielens DIR; the data is not \
                 redistributable, so a fresh clone has none)",
                names.join(" or "),
                dir.display()
            ))
        })
}

// ---------------------------------------------------------------------------------------------
// Tables.

/// One cell of a table: text, a number (kept as a number in JSON, shown as formatted), or
/// nothing ("-", `null` in JSON).
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    /// Text, left as it is.
    Text(String),
    /// A number and how the table shows it.
    Number { value: f64, shown: String },
    /// No value: shown as "-".
    Empty,
}

impl Cell {
    /// A number shown rounded to an integer with thousands separators (rates, counts).
    pub fn int(value: f64) -> Self {
        Self::Number {
            value: value.round(),
            shown: crate::rate(value),
        }
    }

    /// A number shown with `digits` decimals.
    pub fn fixed(value: f64, digits: usize) -> Self {
        Self::Number {
            value,
            shown: format!("{value:.digits$}"),
        }
    }

    /// A percentage (`value` in percent, as shown) with `digits` decimals and a `%`.
    pub fn percent(value: f64, digits: usize) -> Self {
        Self::Number {
            value,
            shown: format!("{value:.digits$}%"),
        }
    }

    /// A factor with `digits` decimals and an `x` (speed-ups).
    pub fn times(value: f64, digits: usize) -> Self {
        Self::Number {
            value,
            shown: format!("{value:.digits$}x"),
        }
    }

    /// The number, or [`Cell::Empty`].
    pub fn or_empty(value: Option<f64>, make: impl FnOnce(f64) -> Cell) -> Self {
        value.map_or(Cell::Empty, make)
    }

    fn shown(&self) -> &str {
        match self {
            Cell::Text(text) => text,
            Cell::Number { shown, .. } => shown,
            Cell::Empty => "-",
        }
    }
}

impl From<&str> for Cell {
    fn from(text: &str) -> Self {
        Cell::Text(text.to_owned())
    }
}

impl From<String> for Cell {
    fn from(text: String) -> Self {
        Cell::Text(text)
    }
}

impl Serialize for Cell {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Cell::Text(text) => serializer.serialize_str(text),
            // Whole numbers as integers (counts, rates rounded), within f64's exact range.
            Cell::Number { value, .. } if value.fract() == 0.0 && value.abs() < 9.0e15 => {
                serializer.serialize_i64(*value as i64)
            }
            Cell::Number { value, .. } if value.is_finite() => serializer.serialize_f64(*value),
            Cell::Number { .. } | Cell::Empty => serializer.serialize_none(),
        }
    }
}

/// One table of a suite's results: a title, column headers, rows, and notes printed under it.
#[derive(Debug, Clone, Serialize)]
pub struct Table {
    pub title: String,
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Cell>>,
    pub notes: Vec<String>,
}

impl Table {
    /// An empty table with these column headers.
    pub fn new(title: impl Into<String>, columns: &[&str]) -> Self {
        Self {
            title: title.into(),
            columns: columns.iter().map(|c| (*c).to_owned()).collect(),
            rows: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Add a row, one cell per column.
    pub fn row(&mut self, cells: Vec<Cell>) {
        debug_assert_eq!(cells.len(), self.columns.len(), "{}", self.title);
        self.rows.push(cells);
    }

    /// Add a line printed under the table.
    pub fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    /// The table as text: its title, its columns aligned (numbers to the right, except in the
    /// first column), then its notes.
    pub fn render(&self) -> String {
        let columns = self.columns.len();
        let mut widths: Vec<usize> = self.columns.iter().map(|c| c.chars().count()).collect();
        let mut numeric = vec![false; columns];
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate().take(columns) {
                widths[i] = widths[i].max(cell.shown().chars().count());
                numeric[i] |= i > 0 && matches!(cell, Cell::Number { .. });
            }
        }
        let line = |cells: Vec<&str>| {
            let mut out = String::new();
            for (i, text) in cells.iter().enumerate() {
                if i > 0 {
                    out.push_str("  ");
                }
                let pad = widths[i].saturating_sub(text.chars().count());
                if numeric[i] {
                    out.extend(std::iter::repeat_n(' ', pad));
                    out.push_str(text);
                } else {
                    out.push_str(text);
                    if i + 1 < cells.len() {
                        out.extend(std::iter::repeat_n(' ', pad));
                    }
                }
            }
            out.truncate(out.trim_end().len());
            out.push('\n');
            out
        };
        let mut out = format!("{}\n", self.title);
        if columns > 0 {
            out += &line(self.columns.iter().map(String::as_str).collect());
        }
        for row in &self.rows {
            out += &line(row.iter().map(Cell::shown).collect());
        }
        for note in &self.notes {
            out += note;
            out.push('\n');
        }
        out
    }
}

// ---------------------------------------------------------------------------------------------
// The machine.

/// The machine a run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// The CPU's model name.
    pub cpu: String,
    /// Logical cores.
    pub cores: usize,
    /// Whether the CPU has AVX-512 (F).
    pub avx512: bool,
    /// The widest SIMD instruction set `pulp` (the vector kernels) can use here.
    pub simd: &'static str,
    /// The distribution and the kernel.
    pub os: String,
}

impl Machine {
    /// This machine, from `/proc` and `/etc/os-release` where they exist.
    pub fn detect() -> Self {
        let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = info
            .lines()
            .find_map(|l| l.strip_prefix("model name")?.split_once(':'))
            .map_or("unknown CPU".to_owned(), |(_, m)| m.trim().to_owned());
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
        let distribution = release
            .lines()
            .find_map(|l| l.strip_prefix("PRETTY_NAME="))
            .map(|name| name.trim_matches('"').to_owned());
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .ok()
            .map(|k| format!("kernel {}", k.trim()));
        let os = match (distribution, kernel) {
            (Some(d), Some(k)) => format!("{d}, {k}"),
            (d, k) => d.or(k).unwrap_or_else(|| std::env::consts::OS.to_owned()),
        };
        Self {
            cpu,
            cores,
            avx512: avx512(),
            simd: simd(),
            os,
        }
    }
}

fn avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The widest SIMD instruction set `pulp` can use here.
pub fn simd() -> &'static str {
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

// ---------------------------------------------------------------------------------------------
// The report.

/// How a suite ended.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "status", content = "reason", rename_all = "lowercase")]
pub enum Outcome {
    /// Every workload ran (rows whose reference is missing say so).
    Ok,
    /// Not run: a reference it cannot do without is missing ([`Missing`]).
    Skipped(String),
    /// An error, or a panic.
    Failed(String),
}

/// One suite's part of a report.
#[derive(Debug, Serialize)]
struct SuiteReport {
    suite: &'static str,
    seconds: f64,
    #[serde(flatten)]
    outcome: Outcome,
    tables: Vec<Table>,
}

/// A run's report: each table is printed to stdout when a suite hands it over, and kept for
/// the JSON document ([`Report::write_json`]).
#[derive(Debug, Serialize)]
pub struct Report {
    version: &'static str,
    machine: Machine,
    scale: Scale,
    /// When the run started (RFC 3339, UTC).
    started: String,
    suites: Vec<SuiteReport>,
}

impl Report {
    /// A report for a run at `scale` starting now; prints the machine and the scale.
    pub fn new(scale: Scale) -> Self {
        let machine = Machine::detect();
        let report = Self {
            version: env!("CARGO_PKG_VERSION"),
            started: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
            machine,
            scale,
            suites: Vec::new(),
        };
        let m = &report.machine;
        println!(
            "penchant-bench {}, scale {}: {}, {} cores, AVX-512 {}, {}\n",
            report.version,
            scale.name(),
            m.cpu,
            m.cores,
            if m.avx512 { "yes" } else { "no" },
            m.os
        );
        report
    }

    /// The scale the suites run at.
    pub fn scale(&self) -> Scale {
        self.scale
    }

    /// The suite begun last.
    pub fn last_suite(&self) -> Option<&'static str> {
        self.suites.last().map(|s| s.suite)
    }

    /// Start a suite's part: the tables handed over next are its.
    pub fn begin(&mut self, suite: &'static str) {
        self.suites.push(SuiteReport {
            suite,
            seconds: 0.0,
            outcome: Outcome::Ok,
            tables: Vec::new(),
        });
    }

    /// Print `table` to stdout and keep it in the current suite's part.
    pub fn table(&mut self, table: Table) {
        println!("{}", table.render());
        self.suites
            .last_mut()
            .expect("Report::begin comes before a suite's tables")
            .tables
            .push(table);
    }

    /// End the current suite's part: how long it took and how it ended.
    pub fn end(&mut self, elapsed: Duration, outcome: Outcome) {
        if let Some(suite) = self.suites.last_mut() {
            suite.seconds = elapsed.as_secs_f64();
            suite.outcome = outcome;
        }
    }

    /// Write the report as one JSON document to `path`.
    pub fn write_json(&self, path: &Path) -> anyhow::Result<()> {
        let json = serde_json::to_vec_pretty(self)?;
        std::fs::write(path, json).with_context(|| format!("cannot write {}", path.display()))
    }
}

// ---------------------------------------------------------------------------------------------
// Progress.

/// A progress bar on stderr for `len` steps labelled `label`, cleared when dropped. Draws
/// nothing when stderr is not a terminal (indicatif hides its stderr target then), so logs and
/// tests see none of it.
pub fn bar(label: impl Into<Cow<'static, str>>, len: u64) -> ProgressBar {
    let style = ProgressStyle::with_template(
        "{spinner} {msg} [{bar:25}] {human_pos}/{human_len} ({per_sec:0}, eta {eta})",
    )
    .expect("a valid template")
    .progress_chars("=> ");
    ProgressBar::new(len)
        .with_style(style)
        .with_message(label)
        .with_finish(ProgressFinish::AndClear)
}

/// A spinner on stderr labelled `label`, with the time elapsed, for a phase of unknown length;
/// cleared when dropped, and drawn only when stderr is a terminal.
pub fn spinner(label: impl Into<Cow<'static, str>>) -> ProgressBar {
    let style =
        ProgressStyle::with_template("{spinner} {msg} ({elapsed})").expect("a valid template");
    let spinner = ProgressBar::new_spinner()
        .with_style(style)
        .with_message(label)
        .with_finish(ProgressFinish::AndClear);
    spinner.enable_steady_tick(Duration::from_millis(120));
    spinner
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_aligns_numbers_right_and_text_left() {
        let mut table = Table::new("title", &["workload", "value", "unit"]);
        table.row(vec![
            "a long workload".into(),
            Cell::int(12345.4),
            "ms".into(),
        ]);
        table.row(vec!["b".into(), Cell::Empty, "events/s".into()]);
        table.note("a note");
        let text = table.render();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "title",
                "workload          value  unit",
                "a long workload  12,345  ms",
                "b                     -  events/s",
                "a note",
            ]
        );
    }

    #[test]
    fn cells_keep_numbers_as_numbers_in_json() {
        let cells = vec![
            Cell::from("x"),
            Cell::int(1234.6),
            Cell::percent(99.5, 1),
            Cell::Empty,
            Cell::fixed(f64::NAN, 2),
        ];
        let json = serde_json::to_value(&cells).unwrap();
        assert_eq!(json, serde_json::json!(["x", 1235, 99.5, null, null]));
        assert!(json[1].is_u64(), "{json}");
    }

    #[test]
    fn an_outcome_is_a_status_and_a_reason() {
        let suite = SuiteReport {
            suite: "store",
            seconds: 1.5,
            outcome: Outcome::Skipped("no data".into()),
            tables: Vec::new(),
        };
        let json = serde_json::to_value(&suite).unwrap();
        assert_eq!(json["status"], "skipped");
        assert_eq!(json["reason"], "no data");
        assert_eq!(json["suite"], "store");
    }
}
