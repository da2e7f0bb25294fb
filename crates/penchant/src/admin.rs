//! `penchant apps|keys|abtests|jobs|placement|sets ...`: the admin API of a running server, from the command line,
//! authenticated with the global admin key (`auth.admin_key`).

use std::sync::LazyLock;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::builder::PossibleValuesParser;
use clap::{Args, Subcommand, ValueEnum};
use futures::StreamExt;
use penchant_engine::recommend::Model;
use penchant_engine::tenancy::Acl;
use reqwest::Method;
use serde_json::{Value, json};

use crate::config::Config;

/// Where the server is and how to reach it as the global admin.
#[derive(Debug, Args)]
pub struct Target {
    /// Base URL of the server (default: `http://` + `server.listen`).
    #[arg(long, global = true)]
    server: Option<String>,
    /// The global admin key (default: `auth.admin_key`).
    #[arg(long, global = true)]
    admin_key: Option<String>,
    /// How a command that follows a job shows its progress: a bar on a terminal (auto),
    /// "done/total" lines on standard error (plain), or nothing (none).
    #[arg(long, value_enum, global = true, default_value_t = ProgressMode::Auto)]
    progress: ProgressMode,
}

/// `--progress`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProgressMode {
    /// A progress bar on standard error when it is a terminal, else nothing.
    Auto,
    /// A line on standard error when the job moves (at most one a second) and when it ends.
    Plain,
    None,
}

/// Declares [`ACLS`] from a list of [`Acl`]'s variants, and a match on them that does not
/// compile while the list misses one: the CLI offers every ACL the server accepts.
macro_rules! every_acl {
    ($($acl:ident),+ $(,)?) => {
        /// Every ACL a key may hold.
        const ACLS: &[Acl] = &[$(Acl::$acl),+];
        const _: fn(Acl) = |acl| match acl {
            $(Acl::$acl)|+ => {}
        };
    };
}

every_acl!(
    Search,
    Recommendation,
    AddObject,
    DeleteObject,
    EditSettings,
    Admin,
    Browse,
    ListIndexes,
    DeleteIndex,
    Settings,
    Analytics,
    Usage,
    Logs,
    SeeUnretrievableAttributes,
    Inference,
    Personalization,
);

/// The ACLs' names, as the server reads them (their serde names).
static ACL_NAMES: LazyLock<Vec<String>> = LazyLock::new(|| {
    ACLS.iter()
        .map(|acl| match serde_json::to_value(acl) {
            Ok(Value::String(name)) => name,
            _ => unreachable!("an ACL serializes as its name"),
        })
        .collect()
});

/// `keys create --acl`: one of [`ACL_NAMES`].
fn acl_parser() -> PossibleValuesParser {
    PossibleValuesParser::new(ACL_NAMES.iter().map(String::as_str))
}

/// `recommend --model`: one of the Recommend API's models.
fn model_parser() -> PossibleValuesParser {
    PossibleValuesParser::new(Model::ALL.map(Model::name))
}

#[derive(Debug, Subcommand)]
pub enum AppsCommand {
    /// Create an app and its first admin key (printed once).
    Create {
        /// The app ID (default: 10 random characters).
        #[arg(long)]
        app_id: Option<String>,
        #[arg(long, default_value = "")]
        name: String,
        /// How its events store their counts (default: wide).
        #[arg(long, value_parser = ["wide", "narrow"])]
        event_layout: Option<String>,
        /// The placement target its rows live in (needs `--app-id`).
        #[arg(long)]
        placement: Option<String>,
    },
    /// List the apps.
    List,
    /// Show an app's event layout; with `--to`, move its events to that layout (dual-write,
    /// backfill, switch reads, drop the old one) and follow the migration with a progress bar.
    Layout {
        app_id: String,
        #[arg(long, value_parser = ["wide", "narrow"])]
        to: Option<String>,
    },
    /// Delete an app and all its data (asks to type the app ID unless `--yes`).
    Delete {
        app_id: String,
        /// Delete without asking (scripts).
        #[arg(long)]
        yes: bool,
    },
    /// Write every row of an app (keys hashed, settings, catalog, events, profiles, models)
    /// as NDJSON, for `apps import` on another node or backend.
    Export {
        app_id: String,
        /// The file written (default: standard output).
        #[arg(long, short)]
        output: Option<std::path::PathBuf>,
    },
    /// Import an app's export (the app must not exist on the server), with a progress bar.
    Import {
        /// The export (`apps export`'s file).
        file: std::path::PathBuf,
    },
}

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Create an API key (printed once: only its hash is stored).
    Create {
        #[arg(long)]
        app: String,
        /// ACLs, comma-separated (`admin`: everything, keys included).
        #[arg(long, value_delimiter = ',', required = true, value_parser = acl_parser())]
        acl: Vec<String>,
        #[arg(long, default_value = "")]
        description: String,
    },
    /// List an app's keys (their first characters, ACLs and descriptions).
    List {
        #[arg(long)]
        app: String,
    },
    /// Delete a key.
    Delete {
        #[arg(long)]
        app: String,
        key: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum PlacementCommand {
    /// The configured targets.
    Targets,
    /// Where an app's rows are (or one user's, with `--user`), and its latest move.
    Show {
        #[arg(long)]
        app: String,
        #[arg(long)]
        user: Option<String>,
    },
    /// The users of an app placed on their own.
    Users {
        #[arg(long)]
        app: String,
    },
    /// Place a user who has no rows yet (a new app is placed by `apps create --placement`).
    Place {
        #[arg(long)]
        app: String,
        #[arg(long)]
        user: String,
        #[arg(long)]
        to: String,
    },
    /// Move an app's rows (or one user's, with `--user`) to another target, online, and follow
    /// the move with a progress bar over its phases.
    Move {
        #[arg(long)]
        app: String,
        #[arg(long)]
        user: Option<String>,
        #[arg(long)]
        to: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum AbtestsCommand {
    /// Start an A/B test between two variants of one index (its ID is printed): the users
    /// are split between A and B, each answered with its variant's search parameters.
    #[command(group = clap::ArgGroup::new("ending").required(true).args(["days", "end"]))]
    Create {
        #[arg(long)]
        app: String,
        #[arg(long)]
        name: String,
        /// The index both variants answer for.
        #[arg(long)]
        index: String,
        /// The share of the users variant A gets, in percent (B gets the rest).
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u8).range(1..=99))]
        split: u8,
        /// Variant A's customSearchParameters, a JSON object, e.g.
        /// '{"enablePersonalization":false}' (default: none, the index as it is).
        #[arg(long, value_name = "JSON", value_parser = parse_object)]
        a: Option<Value>,
        /// Variant B's customSearchParameters, a JSON object, e.g.
        /// '{"personalizationImpact":50}'.
        #[arg(long, value_name = "JSON", value_parser = parse_object)]
        b: Option<Value>,
        #[arg(long)]
        a_description: Option<String>,
        #[arg(long)]
        b_description: Option<String>,
        /// The test ends this many days from now.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=3650))]
        days: Option<u32>,
        /// The test ends at this moment (RFC 3339, e.g. 2026-12-24T00:00:00Z).
        #[arg(long)]
        end: Option<String>,
    },
    /// List an app's A/B tests, newest first: status, split, users and conversion rates.
    List {
        #[arg(long)]
        app: String,
    },
    /// An A/B test's variants side by side, its significances and a verdict.
    Show {
        #[arg(long)]
        app: String,
        id: u64,
    },
    /// Stop an A/B test (it cannot be restarted; its results stay).
    Stop {
        #[arg(long)]
        app: String,
        id: u64,
    },
    /// Delete an A/B test and its results (asks to type its ID unless `--yes`).
    Delete {
        #[arg(long)]
        app: String,
        id: u64,
        /// Delete without asking (scripts).
        #[arg(long)]
        yes: bool,
    },
}

/// A JSON object (`abtests create --a/--b`).
fn parse_object(arg: &str) -> Result<Value, String> {
    let value: Value = serde_json::from_str(arg).map_err(|e| format!("not JSON: {e}"))?;
    if !value.is_object() {
        return Err("expected a JSON object, e.g. '{\"enablePersonalization\":false}'".into());
    }
    Ok(value)
}

#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// Follow an app's profile recompute (after a strategy change) with a progress bar.
    Watch {
        #[arg(long)]
        app: String,
    },
}

/// An ALS training's parameters (unset: the server's defaults).
#[derive(Debug, Args)]
pub struct AlsParams {
    /// The space written.
    #[arg(long)]
    space: Option<String>,
    #[arg(long)]
    factors: Option<usize>,
    #[arg(long)]
    regularization: Option<f32>,
    #[arg(long)]
    alpha: Option<f32>,
    #[arg(long)]
    iterations: Option<usize>,
    /// Count only the events of this index.
    #[arg(long)]
    index: Option<String>,
}

impl AlsParams {
    fn body(&self) -> Value {
        let mut body = json!({});
        let fields = [
            ("space", self.space.as_ref().map(|s| json!(s))),
            ("factors", self.factors.map(|v| json!(v))),
            ("regularization", self.regularization.map(|v| json!(v))),
            ("alpha", self.alpha.map(|v| json!(v))),
            ("iterations", self.iterations.map(|v| json!(v))),
            ("index", self.index.as_ref().map(|s| json!(s))),
        ];
        for (field, value) in fields {
            if let Some(value) = value {
                body[field] = value;
            }
        }
        body
    }
}

#[derive(Debug, Subcommand)]
pub enum AlsCommand {
    /// Train an app's ALS vectors from its events and follow the training with a progress bar.
    Train {
        #[arg(long)]
        app: String,
        #[command(flatten)]
        params: AlsParams,
    },
    /// Give a vector to every user and item of the retention window that the last training
    /// did not see (one least-squares solve each, with that training's settings), without
    /// training again; follow it like a training.
    FoldIn {
        #[arg(long)]
        app: String,
        /// The trained space.
        #[arg(long, default_value = "als")]
        space: String,
    },
    /// Follow an app's latest training.
    Watch {
        #[arg(long)]
        app: String,
    },
    /// Hold out each user's latest interactions, train on the rest, and print precision,
    /// recall and NDCG at k of popularity, each model a queue blends, each blend given and
    /// each queue the app defines.
    Evaluate {
        #[arg(long)]
        app: String,
        #[command(flatten)]
        params: AlsParams,
        /// Interactions held out per user (the default: 1).
        #[arg(long, conflicts_with = "holdout_fraction")]
        holdout: Option<usize>,
        /// The share of each user's interactions held out, latest first (e.g. 0.2).
        #[arg(long)]
        holdout_fraction: Option<f64>,
        #[arg(long, default_value_t = 10)]
        k: usize,
        /// A blend to score: NAME=SOURCES, SOURCES a queue's JSON list of sources, e.g.
        /// 'mix=[{"source":"als"},{"source":"trending","weight":2}]' (repeatable).
        #[arg(long = "blend", value_parser = parse_blend)]
        blends: Vec<(String, Value)>,
    },
}

/// `NAME=[sources…]` of `als evaluate --blend`.
fn parse_blend(arg: &str) -> Result<(String, Value), String> {
    let (name, sources) = arg
        .split_once('=')
        .ok_or("expected NAME=SOURCES, SOURCES a JSON list")?;
    let sources: Value =
        serde_json::from_str(sources).map_err(|e| format!("SOURCES is not JSON: {e}"))?;
    if !sources.is_array() {
        return Err("SOURCES must be a JSON list of sources".into());
    }
    Ok((name.to_owned(), sources))
}

#[derive(Debug, Subcommand)]
pub enum SetsCommand {
    /// Reserve a key set (a partitioned Bloom filter).
    Reserve {
        #[arg(long)]
        app: String,
        name: String,
        /// Keys the set is designed for.
        #[arg(long)]
        capacity: u64,
        /// False-positive rate at capacity.
        #[arg(long, default_value_t = 0.01)]
        error_rate: f64,
        /// Bytes per partition (a multiple of 64).
        #[arg(long, default_value_t = 8192)]
        partition_bytes: u64,
        /// A rebuild above this estimated rate keeps the old generation (default: 2 × errorRate).
        #[arg(long)]
        max_error_rate: Option<f64>,
    },
    /// List an app's sets.
    List {
        #[arg(long)]
        app: String,
    },
    /// A set's keys, size, fill and estimated false-positive rate.
    Info {
        #[arg(long)]
        app: String,
        name: String,
    },
    /// Rebuild a set from a key list, one key per line, streamed to the server with a progress
    /// bar. The set switches to the new generation unless its estimated false-positive rate
    /// passes the set's maxErrorRate.
    Rebuild {
        #[arg(long)]
        app: String,
        name: String,
        /// The key list.
        #[arg(long)]
        file: std::path::PathBuf,
    },
    /// Delete a set.
    Delete {
        #[arg(long)]
        app: String,
        name: String,
    },
}

struct Client {
    base: String,
    key: String,
    http: reqwest::Client,
    progress: ProgressMode,
}

impl Client {
    fn new(target: &Target, config: &Config) -> anyhow::Result<Self> {
        let base = target
            .server
            .clone()
            .unwrap_or_else(|| format!("http://{}", config.server.listen));
        let Some(key) = target
            .admin_key
            .clone()
            .or_else(|| config.auth.admin_key.clone())
        else {
            bail!("no admin key: set auth.admin_key (PENCHANT_AUTH__ADMIN_KEY) or --admin-key");
        };
        Ok(Self {
            base: base.trim_end_matches('/').to_owned(),
            key,
            http: reqwest::Client::new(),
            progress: target.progress,
        })
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        app: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        let body = body.map(|b| (reqwest::Body::from(b.to_string()), "application/json"));
        self.send(method, path, app, body).await
    }

    /// A request with a body of any type; the JSON answer, or the server's message as an error.
    async fn send(
        &self,
        method: Method,
        path: &str,
        app: &str,
        body: Option<(reqwest::Body, &str)>,
    ) -> anyhow::Result<Value> {
        let url = format!("{}{path}", self.base);
        let mut req = self
            .http
            .request(method, &url)
            .header("X-Algolia-Application-Id", app)
            .header("X-Algolia-API-Key", &self.key);
        if let Some((body, content_type)) = body {
            req = req.header("Content-Type", content_type).body(body);
        }
        let resp = req
            .send()
            .await
            .with_context(|| format!("cannot reach {url}"))?;
        let status = resp.status();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            bail!(
                "{status}: {}",
                body["message"].as_str().unwrap_or("no message")
            );
        }
        Ok(body)
    }
}

fn block_on<T>(f: impl Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(f)
}

fn print(v: &Value) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

pub fn apps(command: AppsCommand, target: &Target, config: &Config) -> anyhow::Result<()> {
    let client = Client::new(target, config)?;
    block_on(async {
        let out = match command {
            AppsCommand::Create {
                app_id,
                name,
                event_layout,
                placement,
            } => {
                let mut body = json!({"appID": app_id, "name": name});
                if let Some(layout) = event_layout {
                    body["eventLayout"] = json!(layout);
                }
                if let Some(target) = placement {
                    body["placement"] = json!(target);
                }
                client.call(Method::POST, "/1/apps", "", Some(body)).await?
            }
            AppsCommand::Layout { app_id, to } => {
                let path = format!("/1/apps/{app_id}/layout");
                match to {
                    Some(to) => {
                        let body = json!({"eventLayout": to});
                        client.call(Method::POST, &path, "", Some(body)).await?;
                        watch(&client, &path, "", Some("migration"), "migration", measured).await?
                    }
                    None => client.call(Method::GET, &path, "", None).await?,
                }
            }
            AppsCommand::List => client.call(Method::GET, "/1/apps", "", None).await?,
            AppsCommand::Delete { app_id, yes } => {
                if !yes {
                    confirm_delete(&app_id)?;
                }
                client
                    .call(Method::DELETE, &format!("/1/apps/{app_id}"), "", None)
                    .await?
            }
            AppsCommand::Export { app_id, output } => {
                export(&client, &app_id, output.as_deref()).await?
            }
            AppsCommand::Import { file } => import(&client, &file).await?,
        };
        print(&out)
    })
}

/// Ask on the terminal to type the app ID before deleting it; refused without a terminal.
fn confirm_delete(app_id: &str) -> anyhow::Result<()> {
    confirm_typed(
        app_id,
        &format!("deleting app {app_id} removes all its data"),
        &format!("Delete app {app_id} and all its data (events, profiles, models)?"),
    )
}

/// Ask `question` on the terminal and expect `id` typed; refused without a terminal, saying
/// `consequence` and that `--yes` confirms.
fn confirm_typed(id: &str, consequence: &str, question: &str) -> anyhow::Result<()> {
    use std::io::{BufRead, IsTerminal, Write};
    if !std::io::stdin().is_terminal() {
        bail!("{consequence}: pass --yes to confirm");
    }
    eprint!("{question} Type its ID: ");
    std::io::stderr().flush()?;
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    if answer.trim() != id {
        bail!("not deleted: the ID typed was not {id}");
    }
    Ok(())
}

/// `penchant apps export`: the server's NDJSON to a file or standard output, as it comes.
async fn export(
    client: &Client,
    app_id: &str,
    output: Option<&std::path::Path>,
) -> anyhow::Result<Value> {
    use std::io::Write;
    let url = format!("{}/1/apps/{app_id}/export", client.base);
    let resp = client
        .http
        .get(&url)
        .header("X-Algolia-Application-Id", "")
        .header("X-Algolia-API-Key", &client.key)
        .send()
        .await
        .with_context(|| format!("cannot reach {url}"))?;
    let status = resp.status();
    if !status.is_success() {
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        bail!(
            "{status}: {}",
            body["message"].as_str().unwrap_or("no message")
        );
    }
    // A command line's own output: written as it comes, blocking is fine.
    let mut out: Box<dyn std::io::Write> = match output {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path)
                .with_context(|| format!("cannot create {}", path.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    let (mut bytes, mut lines) = (0u64, 0u64);
    let mut last = Vec::new();
    let mut body = resp.bytes_stream();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.context("the export was cut short")?;
        bytes += chunk.len() as u64;
        lines += chunk.iter().filter(|&&b| b == b'\n').count() as u64;
        last.extend_from_slice(&chunk);
        last.drain(..last.len().saturating_sub(64));
        out.write_all(&chunk)?;
    }
    out.flush()?;
    // The server ends a whole export with its end line; anything else was cut short.
    if !String::from_utf8_lossy(&last).contains("{\"end\":") {
        bail!("the export was cut short (no end line): the server logged why");
    }
    Ok(json!({"appID": app_id, "lines": lines, "bytes": bytes}))
}

/// `penchant apps import`: the file streamed to the server with a progress bar; the app is the
/// one its first line names.
async fn import(client: &Client, file: &std::path::Path) -> anyhow::Result<Value> {
    let first = {
        use std::io::BufRead;
        let opened =
            std::fs::File::open(file).with_context(|| format!("cannot open {}", file.display()))?;
        let mut line = String::new();
        std::io::BufReader::new(opened).read_line(&mut line)?;
        line
    };
    let header: Value = serde_json::from_str(&first)
        .with_context(|| format!("{} is not an app export", file.display()))?;
    let Some(app_id) = header["appID"].as_str() else {
        bail!(
            "{} is not an app export (no appID on its first line)",
            file.display()
        );
    };
    let path = format!("/1/apps/{app_id}/import");
    upload(
        client,
        &path,
        "",
        file,
        "application/x-ndjson",
        "import",
        "",
    )
    .await
}

/// POST a file to `path` as it is read, with a progress bar of the bytes sent (and `after`, a
/// message shown once all is sent while the server works); the server's JSON answer.
async fn upload(
    client: &Client,
    path: &str,
    app: &str,
    file: &std::path::Path,
    content_type: &str,
    what: &str,
    after: &'static str,
) -> anyhow::Result<Value> {
    let opened = tokio::fs::File::open(file)
        .await
        .with_context(|| format!("cannot open {}", file.display()))?;
    let bar = indicatif::ProgressBar::new(opened.metadata().await?.len());
    bar.set_style(
        indicatif::ProgressStyle::with_template(&format!(
            "{{spinner}} {what} {{bar:30}} {{bytes}}/{{total_bytes}} ({{eta}} left)  {{msg}}"
        ))?
        .progress_chars("=> "),
    );
    bar.set_message(after);
    let sent = bar.clone();
    let stream = tokio_util::io::ReaderStream::new(opened).inspect(move |chunk| {
        if let Ok(chunk) = chunk {
            sent.inc(chunk.len() as u64);
        }
    });
    let body = reqwest::Body::wrap_stream(stream);
    let result = client
        .send(Method::POST, path, app, Some((body, content_type)))
        .await;
    bar.finish_and_clear();
    result
}

#[derive(Debug, Subcommand)]
pub enum BackupCommand {
    /// Take a backup of the running server's embedded store, online, into its backup folder
    /// (`store.backup_dir`).
    Create,
    /// List the server's backups.
    List,
    /// Restore a backup into this configuration's store folders (offline: the server stopped,
    /// the folders absent or empty). Bigtable: `gcloud bigtable backups restore`.
    Restore {
        /// The backup's folder.
        backup: std::path::PathBuf,
    },
}

/// `penchant backup ...`.
pub fn backup(command: BackupCommand, target: &Target, config: &Config) -> anyhow::Result<()> {
    if let BackupCommand::Restore { backup } = command {
        return restore(&backup, config);
    }
    let client = Client::new(target, config)?;
    block_on(async {
        let out = match command {
            BackupCommand::Create => client.call(Method::POST, "/1/backups", "", None).await?,
            BackupCommand::List => client.call(Method::GET, "/1/backups", "", None).await?,
            BackupCommand::Restore { .. } => unreachable!("restored above"),
        };
        print(&out)
    })
}

/// `penchant backup restore`: the backup's stores copied into the configured folders, then
/// each opened once (a backup that does not open is reported now, not at the next start).
fn restore(backup: &std::path::Path, config: &Config) -> anyhow::Result<()> {
    use crate::config::{Backend, DEFAULT_TARGET};
    if config.store.backend != Backend::Embedded {
        bail!(
            "backups are of the embedded store; a Bigtable instance is restored by Bigtable \
             (gcloud bigtable backups restore), one app by `penchant apps import`"
        );
    }
    let restored = penchant_engine::backup::restore(backup, |target| {
        if target == DEFAULT_TARGET {
            Some(config.store.data_dir.clone())
        } else {
            config.placement.targets.get(target)?.data_dir.clone()
        }
    })?;
    let mut folders = Vec::new();
    for (target, folder) in restored {
        penchant_store_rocksdb::RocksStore::open(&folder, Default::default())
            .with_context(|| format!("the restored store {} does not open", folder.display()))?;
        folders.push(json!({"target": target, "folder": folder}));
    }
    print(&json!({"restored": folders}))
}

pub fn placement(
    command: PlacementCommand,
    target: &Target,
    config: &Config,
) -> anyhow::Result<()> {
    let client = Client::new(target, config)?;
    let path = |app: &str, user: &Option<String>| match user {
        Some(user) => format!("/1/apps/{app}/placement/users/{user}"),
        None => format!("/1/apps/{app}/placement"),
    };
    block_on(async {
        let out = match command {
            PlacementCommand::Targets => {
                client
                    .call(Method::GET, "/1/placement/targets", "", None)
                    .await?
            }
            PlacementCommand::Show { app, user } => {
                client
                    .call(Method::GET, &path(&app, &user), "", None)
                    .await?
            }
            PlacementCommand::Users { app } => {
                let users = format!("/1/apps/{app}/placement/users");
                client.call(Method::GET, &users, "", None).await?
            }
            PlacementCommand::Place { app, user, to } => {
                let body = json!({ "target": to });
                client
                    .call(Method::PUT, &path(&app, &Some(user)), "", Some(body))
                    .await?
            }
            PlacementCommand::Move { app, user, to } => {
                let body = json!({ "target": to });
                client
                    .call(Method::POST, &path(&app, &user), "", Some(body))
                    .await?;
                watch_move(&client, &path(&app, &None)).await?
            }
        };
        print(&out)
    })
}

/// Follow a placement move to its end; its last status.
async fn watch_move(client: &Client, path: &str) -> anyhow::Result<Value> {
    let status = watch(client, path, "", Some("move"), "move", measured).await?;
    let job = &status["move"];
    if job["state"] != "done" {
        bail!("the move ended {}: {}", job["state"], job["error"]);
    }
    Ok(status)
}

/// Where a job stands, as `watch` shows it.
#[derive(Debug, Clone, PartialEq)]
struct Measured {
    /// The phase, with its place among the kind's phases when it has several.
    phase: String,
    /// Work done in the phase, in `unit`s (a recompute counts ranges by their fraction done),
    /// and its total when the status knows one.
    done: f64,
    total: Option<f64>,
    unit: String,
    /// Other work counted along, and its unit (a recompute's users).
    also: Option<(f64, &'static str)>,
}

/// How far a job is, from its status's `progress` (the same shape for every kind).
fn measured(job: &Value) -> Measured {
    let progress = &job["progress"];
    let name = progress["phase"].as_str().unwrap_or_default();
    let steps = progress["steps"].as_u64().unwrap_or(1);
    let phase = match steps {
        0 | 1 => name.to_owned(),
        _ => format!("{name} ({}/{steps})", progress["step"]),
    };
    Measured {
        phase,
        done: progress["done"].as_u64().unwrap_or(0) as f64,
        total: progress["total"].as_u64().map(|t| t as f64),
        unit: progress["unit"].as_str().unwrap_or_default().to_owned(),
        also: None,
    }
}

/// Alphabets user tokens are commonly written in, each in byte order: a token's characters
/// read as digits of the smallest one that holds them all place it better than its bytes do.
const ALPHABETS: [&[u8]; 4] = [
    b"0123456789",
    b"0123456789abcdef",
    b"0123456789ABCDEF",
    b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
];

/// Characters of a token that place it (after the prefix every token shares).
const PLACING: usize = 6;

/// How far a profile recompute is, in ranges, moving within each range: a range done counts
/// 1, one still running the place of its last user done between the range's bounds (as the
/// dashboard does: user tokens read as fractions, from their first characters after the prefix
/// that every known token shares), and its users so far.
fn recompute_measured(job: &Value) -> Measured {
    let ranges = job["ranges"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    fn text<'a>(range: &'a Value, field: &str) -> Option<&'a [u8]> {
        range[field].as_str().map(str::as_bytes)
    }
    // The prefix every bound and checkpoint shares carries no information: skip it.
    let known: Vec<&[u8]> = ranges
        .iter()
        .flat_map(|r| ["start", "end", "after"].map(|f| text(r, f)))
        .flatten()
        .collect();
    let shared = known
        .iter()
        .skip(1)
        .fold(known.first().map_or(0, |k| k.len()), |n, k| {
            known[0]
                .iter()
                .zip(*k)
                .take(n)
                .take_while(|(a, b)| a == b)
                .count()
        });
    let prefix = known.first().map_or(&[][..], |k| &k[..shared]);
    let alphabet = ALPHABETS.into_iter().find(|a| {
        known
            .iter()
            .all(|k| k[shared..].iter().take(PLACING).all(|b| a.contains(b)))
    });
    // A token as a fraction: its characters as digits, in base the alphabet's size.
    let place = |key: &[u8]| -> f64 {
        let Some(rest) = key.strip_prefix(prefix) else {
            return if key < prefix { 0.0 } else { 1.0 };
        };
        let (base, digit): (f64, &dyn Fn(u8) -> usize) = match alphabet {
            Some(a) => (a.len() as f64, &|b| a.partition_point(|&c| c < b)),
            None => (256.0, &usize::from),
        };
        rest.iter()
            .take(PLACING)
            .rev()
            .fold(0.0, |x, &b| (x + digit(b) as f64) / base)
    };
    let done: f64 = ranges
        .iter()
        .map(|r| {
            if r["done"] == true {
                return 1.0;
            }
            let Some(after) = text(r, "after") else {
                return 0.0;
            };
            let start = text(r, "start").map_or(0.0, place);
            let end = text(r, "end").map_or(1.0, place);
            if end <= start {
                return 0.0;
            }
            // Not done until the status says so.
            ((place(after) - start) / (end - start)).clamp(0.0, 0.99)
        })
        .sum();
    let users = job["users"].as_u64().unwrap_or(0) + job["skipped"].as_u64().unwrap_or(0);
    Measured {
        phase: job["progress"]["phase"]
            .as_str()
            .unwrap_or("recompute")
            .to_owned(),
        done,
        total: Some(ranges.len() as f64),
        unit: "ranges".into(),
        also: Some((users as f64, "users")),
    }
}

/// A count as shown: whole, or with one decimal (rounded down: 2.96 ranges are not 3).
fn count(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{:.1}", (x * 10.0).floor() / 10.0)
    }
}

/// A duration as shown: 4.2s, 42s, 3m07s, 2h05m.
fn duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..10 => format!("{:.1}s", d.as_secs_f64()),
        10..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s / 60 % 60),
    }
}

/// What `watch` has seen of the current phase: since when, and how far it was then.
struct Pace {
    phase: String,
    since: Instant,
    done: f64,
    also: f64,
}

impl Pace {
    fn new(now: &Measured) -> Self {
        Self {
            phase: now.phase.clone(),
            since: Instant::now(),
            done: now.done,
            also: now.also.map_or(0.0, |(n, _)| n),
        }
    }

    /// The counts and, while running, the time left (when there is a total) or the rate (when
    /// there is none), as the bar's message and the plain lines show them.
    fn describe(&self, now: &Measured, running: bool) -> String {
        let elapsed = self.since.elapsed();
        // Rates over less than half a second say little.
        let timed = running && elapsed >= Duration::from_millis(500);
        let rate = |moved: f64, unit: &str| {
            if timed && moved > 0.0 {
                format!(" ({:.0} {unit}/s)", moved / elapsed.as_secs_f64())
            } else {
                String::new()
            }
        };
        let moved = now.done - self.done;
        let mut out = match now.total {
            Some(total) => format!("{}/{} {}", count(now.done), count(total), now.unit),
            None => format!("{} {}{}", count(now.done), now.unit, rate(moved, &now.unit)),
        };
        if let Some((n, unit)) = now.also {
            out += &format!(", {} {unit}{}", count(n), rate(n - self.also, unit));
        }
        if let Some(total) = now.total
            && timed
            && moved > 0.0
        {
            let left = elapsed.as_secs_f64() * (total - now.done).max(0.0) / moved;
            out += &format!(", about {} left", duration(Duration::from_secs_f64(left)));
        }
        out
    }
}

/// Poll a job's status at `path` (the answer, or its field `key`) until the job stops running,
/// showing how far it is as `measure` reads it from the status: a bar on a terminal (the
/// phase's work against its total, with the time left, when the status knows the total; else
/// the work done so far and its rate), or lines with `--progress plain`. Returns the last
/// answer.
async fn watch(
    client: &Client,
    path: &str,
    app: &str,
    key: Option<&str>,
    what: &str,
    measure: fn(&Value) -> Measured,
) -> anyhow::Result<Value> {
    let counted = indicatif::ProgressStyle::with_template("{spinner} {prefix} {bar:30} {msg}")?
        .progress_chars("=> ");
    let open = indicatif::ProgressStyle::with_template("{spinner} {prefix} {msg}")?;
    // Drawn (on a terminal, with `--progress auto`) once the first status is in.
    let bar = indicatif::ProgressBar::hidden();
    bar.set_length(BAR_LENGTH);
    let mut drawn = false;
    let started = Instant::now();
    let mut pace: Option<Pace> = None;
    // When the last line was printed, in which phase, and what it said.
    let mut printed: Option<(Instant, String, String)> = None;
    loop {
        let answer = client.call(Method::GET, path, app, None).await?;
        let job = key.map_or(&answer, |k| &answer[k]);
        let now = measure(job);
        let running = job["state"] == "running";
        // Each phase has its own work and pace.
        let pace = match &mut pace {
            Some(p) if p.phase == now.phase => p,
            slot => slot.insert(Pace::new(&now)),
        };
        let label = match now.phase.as_str() {
            "" => what.to_owned(),
            phase if phase == what => what.to_owned(),
            phase => format!("{what} {phase}"),
        };
        let text = pace.describe(&now, running);
        let total = now.total.filter(|t| *t > 0.0);
        bar.set_style(if total.is_some() { &counted } else { &open }.clone());
        bar.set_prefix(label.clone());
        bar.set_message(text.clone());
        if let Some(total) = total {
            bar.set_position((now.done / total * BAR_LENGTH as f64) as u64);
        }
        if client.progress == ProgressMode::Auto && !drawn {
            bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
            drawn = true;
        }
        bar.tick();
        if client.progress == ProgressMode::Plain {
            // A line when the phase changes, when the job ends, and at most one a second
            // between, when it moved.
            let line = format!("{label}: {text}");
            let due = match &printed {
                None => true,
                Some((at, phase, last)) => {
                    !running
                        || *phase != now.phase
                        || (at.elapsed() >= Duration::from_secs(1) && *last != line)
                }
            };
            if due {
                if running {
                    eprintln!("{line}");
                } else {
                    let state = job["state"].as_str().unwrap_or("ended");
                    eprintln!("{line} ({state} after {})", duration(started.elapsed()));
                }
                printed = Some((Instant::now(), now.phase.clone(), line));
            }
        }
        if !running {
            bar.finish();
            return Ok(answer);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The positions of a progress bar with a total (the work's share of it, in thousandths).
const BAR_LENGTH: u64 = 1000;

pub fn keys(command: KeysCommand, target: &Target, config: &Config) -> anyhow::Result<()> {
    let client = Client::new(target, config)?;
    block_on(async {
        let out = match command {
            KeysCommand::Create {
                app,
                acl,
                description,
            } => {
                let body = json!({"acl": acl, "description": description});
                client
                    .call(Method::POST, "/1/keys", &app, Some(body))
                    .await?
            }
            KeysCommand::List { app } => client.call(Method::GET, "/1/keys", &app, None).await?,
            KeysCommand::Delete { app, key } => {
                client
                    .call(Method::DELETE, &format!("/1/keys/{key}"), &app, None)
                    .await?
            }
        };
        print(&out)
    })
}

/// `penchant abtests ...`: the A/B testing API (`/2/abtests`) of an app.
pub fn abtests(command: AbtestsCommand, target: &Target, config: &Config) -> anyhow::Result<()> {
    let client = Client::new(target, config)?;
    block_on(async {
        // What people read goes to stderr; the server's JSON to stdout, as every command.
        let out = match command {
            AbtestsCommand::Create {
                app,
                name,
                index,
                split,
                a,
                b,
                a_description,
                b_description,
                days,
                end,
            } => {
                let end_at = match (days, end) {
                    (_, Some(end)) => end,
                    (Some(days), None) => {
                        let now = std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)?
                            .as_secs();
                        rfc3339(now + u64::from(days) * 86_400)
                    }
                    (None, None) => bail!("give --days or --end"),
                };
                let variant = |share: u8, description: Option<String>, params: Option<Value>| {
                    let mut v = json!({"index": index, "trafficPercentage": share});
                    if let Some(d) = description {
                        v["description"] = json!(d);
                    }
                    if let Some(p) = params {
                        v["customSearchParameters"] = p;
                    }
                    v
                };
                let body = json!({
                    "name": name,
                    "variants": [
                        variant(split, a_description, a),
                        variant(100 - split, b_description, b),
                    ],
                    "endAt": end_at,
                });
                let out = client
                    .call(Method::POST, "/2/abtests", &app, Some(body))
                    .await?;
                eprintln!(
                    "A/B test {} created on {}: A {split}% / B {}%, ends {end_at}",
                    out["abTestID"],
                    out["index"].as_str().unwrap_or(&index),
                    100 - split
                );
                out
            }
            AbtestsCommand::List { app } => {
                let out = list_abtests(&client, &app).await?;
                eprint!("{}", abtests_table(&out["abtests"]));
                out
            }
            AbtestsCommand::Show { app, id } => {
                let path = format!("/2/abtests/{id}");
                let out = client.call(Method::GET, &path, &app, None).await?;
                eprint!("{}", abtest_report(&out));
                out
            }
            AbtestsCommand::Stop { app, id } => {
                let path = format!("/2/abtests/{id}/stop");
                let out = client.call(Method::POST, &path, &app, None).await?;
                eprintln!("A/B test {id} stopped");
                out
            }
            AbtestsCommand::Delete { app, id, yes } => {
                let path = format!("/2/abtests/{id}");
                if !yes {
                    let test = client.call(Method::GET, &path, &app, None).await?;
                    let name = test["name"].as_str().unwrap_or_default();
                    confirm_typed(
                        &id.to_string(),
                        &format!("deleting A/B test {id} removes its results"),
                        &format!("Delete A/B test {id} ({name}) and its results?"),
                    )?;
                }
                let out = client.call(Method::DELETE, &path, &app, None).await?;
                eprintln!("A/B test {id} deleted");
                out
            }
        };
        print(&out)
    })
}

/// Every A/B test of an app, page by page, as one answer of `GET /2/abtests`.
async fn list_abtests(client: &Client, app: &str) -> anyhow::Result<Value> {
    const PAGE: usize = 100;
    let mut tests: Vec<Value> = Vec::new();
    loop {
        let path = format!("/2/abtests?offset={}&limit={PAGE}", tests.len());
        let page = client.call(Method::GET, &path, app, None).await?;
        let got = page["abtests"].as_array().cloned().unwrap_or_default();
        let total = page["total"].as_u64().unwrap_or(0) as usize;
        let empty = got.is_empty();
        tests.extend(got);
        if empty || tests.len() >= total {
            let count = tests.len();
            return Ok(json!({"abtests": tests, "count": count, "total": total.max(count)}));
        }
    }
}

/// `abtests list`'s table.
fn abtests_table(tests: &Value) -> String {
    let tests = tests.as_array().map(Vec::as_slice).unwrap_or_default();
    if tests.is_empty() {
        return "no A/B tests\n".to_owned();
    }
    let header = [
        "ID",
        "NAME",
        "STATUS",
        "INDEX",
        "SPLIT",
        "USERS A/B",
        "CR A/B",
        "CONV. SIG.",
    ];
    let mut rows = vec![header.map(str::to_owned).to_vec()];
    for test in tests {
        let (a, b) = (&test["variants"][0], &test["variants"][1]);
        rows.push(vec![
            test["abTestID"].to_string(),
            text(&test["name"]),
            text(&test["status"]),
            text(&a["index"]),
            format!(
                "{}/{}",
                number(&a["trafficPercentage"]),
                number(&b["trafficPercentage"])
            ),
            format!("{}/{}", number(&a["userCount"]), number(&b["userCount"])),
            format!(
                "{}/{}",
                percent(&a["conversionRate"]),
                percent(&b["conversionRate"])
            ),
            significance(&test["conversionSignificance"]),
        ]);
    }
    table(&rows, &[false, false, false, false, true, true, true, true])
}

/// `abtests show`'s report: the variants side by side, the significances and a verdict.
fn abtest_report(test: &Value) -> String {
    let (a, b) = (&test["variants"][0], &test["variants"][1]);
    let mut out = format!(
        "A/B test {} \"{}\" on {}: {}, created {}, ends {}",
        test["abTestID"],
        text(&test["name"]),
        text(&a["index"]),
        text(&test["status"]),
        text(&test["createdAt"]),
        text(&test["endAt"]),
    );
    if let Some(stopped) = test["stoppedAt"].as_str() {
        out += &format!(", stopped {stopped}");
    }
    out.push('\n');
    let title = |name: &str, v: &Value| match v["description"].as_str() {
        Some(d) if !d.is_empty() => format!("{name} ({d})"),
        _ => name.to_owned(),
    };
    // The parameters can be long: on their own lines, above the table.
    for (name, v) in [("A", a), ("B", b)] {
        let params = match &v["customSearchParameters"] {
            Value::Null => "none (the index as it is)".to_owned(),
            p => p.to_string(),
        };
        out += &format!("{}: {params}\n", title(name, v));
    }
    let row = |label: &str, f: &dyn Fn(&Value) -> String| vec![label.to_owned(), f(a), f(b)];
    let mut rows = vec![
        vec![String::new(), title("A", a), title("B", b)],
        row("traffic", &|v| {
            format!("{}%", number(&v["trafficPercentage"]))
        }),
        row("users", &|v| number(&v["userCount"])),
        row("tracked users", &|v| number(&v["trackedUserCount"])),
        row("searches", &|v| number(&v["searchCount"])),
        row("tracked searches", &|v| number(&v["trackedSearchCount"])),
        row("no results", &|v| number(&v["noResultCount"])),
        row("clicks", &|v| number(&v["clickCount"])),
        row("conversions", &|v| number(&v["conversionCount"])),
        row("add to cart", &|v| number(&v["addToCartCount"])),
        row("purchases", &|v| number(&v["purchaseCount"])),
        row("click-through rate", &|v| percent(&v["clickThroughRate"])),
        row("conversion rate", &|v| percent(&v["conversionRate"])),
        row("add-to-cart rate", &|v| percent(&v["addToCartRate"])),
        row("purchase rate", &|v| percent(&v["purchaseRate"])),
        row(
            "avg click position",
            &|v| match v["averageClickPosition"].as_f64() {
                Some(p) => format!("{p:.1}"),
                None => "-".to_owned(),
            },
        ),
        row("users who clicked", &|v| number(&v["clickedUserCount"])),
        row("users who converted", &|v| {
            format!(
                "{} ({})",
                number(&v["convertedUserCount"]),
                percent(&v["userConversionRate"])
            )
        }),
    ];
    for currency in currencies(test) {
        rows.push(row(
            &format!("revenue {currency}"),
            &|v| match v["currencies"][currency.as_str()]["revenue"].as_f64() {
                Some(r) => format!("{r:.2}"),
                None => "-".to_owned(),
            },
        ));
    }
    rows.push(row("estimated sample size", &|v| {
        number(&v["estimatedSampleSize"])
    }));
    out += &table(&rows, &[false, true, true]);
    let mut significances = vec![
        format!("clicks {}", significance(&test["clickSignificance"])),
        format!(
            "conversions {}",
            significance(&test["conversionSignificance"])
        ),
        format!(
            "add to cart {}",
            significance(&test["addToCartSignificance"])
        ),
        format!("purchases {}", significance(&test["purchaseSignificance"])),
    ];
    if let Some(revenue) = test["revenueSignificance"].as_object() {
        for (currency, s) in revenue {
            significances.push(format!("revenue {currency} {}", significance(s)));
        }
    }
    out += &format!("significance: {}\n", significances.join(", "));
    out += &format!(
        "users still needed: {}\n",
        number(&test["usersStillNeeded"])
    );
    out += &format!("verdict: {}\n", verdict(test));
    out
}

/// The currencies either variant has revenue in, sorted.
fn currencies(test: &Value) -> Vec<String> {
    let mut all: Vec<String> = test["variants"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["currencies"].as_object())
        .flat_map(|c| c.keys().cloned())
        .collect();
    all.sort();
    all.dedup();
    all
}

/// The significance at or above which a difference is significant (5% risk).
const SIGNIFICANT: f64 = 0.95;

/// One line on the test's conversions: which variant converts better, if significantly, or
/// what is missing.
fn verdict(test: &Value) -> String {
    let (a, b) = (&test["variants"][0], &test["variants"][1]);
    let users = |v: &Value| v["userCount"].as_u64().unwrap_or(0);
    // The significance compares users who converted: so does the verdict, by default.
    let rate = |v: &Value| {
        v["userConversionRate"]
            .as_f64()
            .or_else(|| v["conversionRate"].as_f64())
            .unwrap_or(0.0)
    };
    match test["conversionSignificance"].as_f64() {
        Some(s) if s >= SIGNIFICANT => {
            let better = if rate(b) > rate(a) {
                "B converts better"
            } else if rate(a) > rate(b) {
                "A converts better"
            } else {
                "A and B convert alike"
            };
            format!("{better} (significance {})", significance(&json!(s)))
        }
        s => {
            let so_far = s.map_or(String::new(), |s| {
                format!(" (significance {})", significance(&json!(s)))
            });
            match test["usersStillNeeded"].as_u64() {
                Some(n) => format!("not significant yet{so_far}: about {n} more users needed"),
                None if users(a) == 0 || users(b) == 0 => {
                    "not significant yet: each variant needs users".to_owned()
                }
                None => format!("not significant yet{so_far}: no difference in conversions so far"),
            }
        }
    }
}

/// A string field, or `-`.
fn text(v: &Value) -> String {
    v.as_str().unwrap_or("-").to_owned()
}

/// A count, or `-` when null.
fn number(v: &Value) -> String {
    match v {
        Value::Number(n) => n.to_string(),
        _ => "-".to_owned(),
    }
}

/// A rate in [0, 1] as a percentage, or `-` when null.
fn percent(v: &Value) -> String {
    match v.as_f64() {
        Some(r) => format!("{:.1}%", r * 100.0),
        None => "-".to_owned(),
    }
}

/// A significance, rounded down to 3 decimals (0.9496 is not shown as 0.95; above 0.999,
/// `>0.999`), or `-`.
fn significance(v: &Value) -> String {
    match v.as_f64() {
        Some(s) if s > 0.999 => ">0.999".to_owned(),
        Some(s) => {
            let floored = (s * 1000.0).floor() / 1000.0;
            let shown = format!("{floored:.3}");
            shown.trim_end_matches('0').trim_end_matches('.').to_owned()
        }
        None => "-".to_owned(),
    }
}

/// Rows as a table, columns two spaces apart, right-aligned where `right` says so.
fn table(rows: &[Vec<String>], right: &[bool]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(c, cell)| {
                let width = widths[c];
                if right.get(c).copied().unwrap_or(false) {
                    format!("{cell:>width$}")
                } else {
                    format!("{cell:<width$}")
                }
            })
            .collect();
        out += cells.join("  ").trim_end();
        out.push('\n');
    }
    out
}

/// Seconds since the epoch as RFC 3339, in UTC, to the second.
fn rfc3339(secs: u64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
    humantime::format_rfc3339_seconds(at).to_string()
}

pub fn jobs(command: JobsCommand, target: &Target, config: &Config) -> anyhow::Result<()> {
    let client = Client::new(target, config)?;
    let JobsCommand::Watch { app } = command;
    block_on(async {
        let path = "/1/strategies/personalization/job";
        print(&watch(&client, path, &app, None, "recompute", recompute_measured).await?)
    })
}

pub fn als(command: AlsCommand, target: &Target, config: &Config) -> anyhow::Result<()> {
    let client = Client::new(target, config)?;
    block_on(async {
        let app = match command {
            AlsCommand::Train { app, params } => {
                client
                    .call(Method::POST, "/1/als/train", &app, Some(params.body()))
                    .await?;
                app
            }
            AlsCommand::FoldIn { app, space } => {
                let body = json!({"mode": "fold-in", "space": space});
                client
                    .call(Method::POST, "/1/als/train", &app, Some(body))
                    .await?;
                app
            }
            AlsCommand::Watch { app } => app,
            AlsCommand::Evaluate {
                app,
                params,
                holdout,
                holdout_fraction,
                k,
                blends,
            } => {
                let mut body = params.body();
                if let Some(n) = holdout {
                    body["holdout"] = json!(n);
                }
                if let Some(f) = holdout_fraction {
                    body["holdoutFraction"] = json!(f);
                }
                body["k"] = json!(k);
                if !blends.is_empty() {
                    body["queues"] = Value::Object(blends.into_iter().collect());
                }
                let out = client
                    .call(Method::POST, "/1/als/evaluate", &app, Some(body))
                    .await?;
                // The table for people on stderr; the JSON on stdout, as every command.
                let rows = out["rows"].as_array().cloned().unwrap_or_default();
                let width = rows
                    .iter()
                    .filter_map(|r| r["name"].as_str())
                    .map(str::len)
                    .max()
                    .unwrap_or(5)
                    .max(5);
                eprintln!(
                    "{} test users; held out: {}",
                    out["testUsers"], out["holdout"]
                );
                eprintln!("{:<width$}  precision@{k}  recall@{k}  ndcg@{k}", "model");
                for row in &rows {
                    let m = |f: &str| row[f].as_f64().unwrap_or(f64::NAN);
                    eprintln!(
                        "{:<width$}  {:>12.4} {:>9.4} {:>7.4}",
                        row["name"].as_str().unwrap_or("?"),
                        m("precision"),
                        m("recall"),
                        m("ndcg")
                    );
                }
                // The learned ranker: what it learned from, and which features it leans on.
                let learned = &out["learned"];
                if let Some(importance) = learned["importance"].as_array() {
                    eprintln!(
                        "learned: {} trees from {} users' next events ({} to validate), {:.1} s; \
                         feature importance:",
                        learned["trees"],
                        learned["trainQueries"],
                        learned["validationQueries"],
                        learned["trainSeconds"].as_f64().unwrap_or(f64::NAN)
                    );
                    for pair in importance {
                        eprintln!(
                            "  {:<18} {:>5.1}%",
                            pair[0].as_str().unwrap_or("?"),
                            pair[1].as_f64().unwrap_or(f64::NAN) * 100.0
                        );
                    }
                }
                return print(&out);
            }
        };
        print(&watch(&client, "/1/als/train", &app, None, "ALS", measured).await?)
    })
}

#[derive(Debug, Subcommand)]
pub enum RecommendCommand {
    /// Build the app's co-interaction lists and every user's queues, with a progress bar.
    Build {
        #[arg(long)]
        app: String,
    },
    /// Show the app's schedules (what keeps its models fresh, and when each runs next); with
    /// a setting, change it (the others stay; 0 turns a task off).
    Schedules {
        #[arg(long)]
        app: String,
        /// Hours between ALS trainings.
        #[arg(long)]
        train_every_hours: Option<u32>,
        /// Minutes between fold-ins of new users and items.
        #[arg(long)]
        fold_in_every_minutes: Option<u32>,
        /// Minutes between builds of the co-interaction lists and queues.
        #[arg(long)]
        build_every_minutes: Option<u32>,
        /// Hours between trainings of the learned ranker (and writes of its queues).
        #[arg(long)]
        rank_every_hours: Option<u32>,
        /// A user's queue older than this and than their latest event is rebuilt when read.
        #[arg(long)]
        queue_stale_after_minutes: Option<u32>,
    },
}

/// `penchant recommend schedules`: show, or change some settings and show.
async fn schedules(client: &Client, command: RecommendCommand) -> anyhow::Result<()> {
    let RecommendCommand::Schedules {
        app,
        train_every_hours,
        fold_in_every_minutes,
        build_every_minutes,
        rank_every_hours,
        queue_stale_after_minutes,
    } = command
    else {
        unreachable!("called for schedules only");
    };
    let mut out = client.call(Method::GET, "/1/schedules", &app, None).await?;
    let changes = [
        ("trainEveryHours", train_every_hours),
        ("foldInEveryMinutes", fold_in_every_minutes),
        ("buildEveryMinutes", build_every_minutes),
        ("rankEveryHours", rank_every_hours),
        ("queueStaleAfterMinutes", queue_stale_after_minutes),
    ];
    if changes.iter().any(|(_, v)| v.is_some()) {
        let mut settings = out["settings"].clone();
        for (name, value) in changes {
            if let Some(v) = value {
                settings[name] = json!(v);
            }
        }
        out = client
            .call(Method::PUT, "/1/schedules", &app, Some(settings))
            .await?;
    }
    for task in out["tasks"].as_array().into_iter().flatten() {
        let every = match task["everyMinutes"].as_i64() {
            Some(m) => format!("every {m} min"),
            None => "off".to_owned(),
        };
        eprintln!(
            "{:<10} {:<18} last {:<26} next {}",
            task["task"].as_str().unwrap_or("?"),
            every,
            task["lastStartedAt"].as_str().unwrap_or("never"),
            task["nextRunAt"].as_str().unwrap_or("-")
        );
    }
    print(&out)
}

/// `penchant recommend --app A [--user u | --object-id i | --model trending-facets --facet-name f]`:
/// what the Recommend API answers.
#[derive(Debug, Args)]
pub struct ShowArgs {
    #[arg(long)]
    app: Option<String>,
    /// The user token.
    #[arg(long)]
    user: Option<String>,
    /// The index (default: the index of the app's `for-you` queue).
    #[arg(long)]
    index: Option<String>,
    /// The model.
    #[arg(long, default_value = "recommended-for-you", value_parser = model_parser())]
    model: String,
    /// The item, for bought-together, related-products and looking-similar.
    #[arg(long)]
    object_id: Option<String>,
    /// The facet whose values trending-facets ranks (e.g. brand); with --facet-value, the
    /// facet trending-items keeps to.
    #[arg(long, required_if_eq("model", "trending-facets"))]
    facet_name: Option<String>,
    /// The facet value trending-items keeps to (with --facet-name).
    #[arg(long, requires = "facet_name")]
    facet_value: Option<String>,
    #[arg(long, default_value_t = 10)]
    max: usize,
}

pub fn recommend(
    command: Option<RecommendCommand>,
    show: ShowArgs,
    target: &Target,
    config: &Config,
) -> anyhow::Result<()> {
    let client = Client::new(target, config)?;
    block_on(async {
        match command {
            Some(RecommendCommand::Build { app }) => {
                client
                    .call(Method::POST, "/1/recommend/build", &app, None)
                    .await?;
                let path = "/1/recommend/build";
                return print(&watch(&client, path, &app, None, "build", measured).await?);
            }
            Some(command) => return schedules(&client, command).await,
            None => {}
        }
        let Some(app) = &show.app else {
            bail!("give --app (or a subcommand: penchant recommend build --app A)");
        };
        let for_user = show.model == "recommended-for-you";
        let user = match (&show.user, for_user) {
            (Some(user), _) => user.as_str(),
            (None, true) => bail!("give --user: {} is a user's model", show.model),
            (None, false) => "",
        };
        let index = match &show.index {
            Some(index) => index.clone(),
            None => {
                let queue = client
                    .call(Method::GET, "/1/queues/for-you", app, None)
                    .await
                    .context("no --index, and no `for-you` queue to take it from")?;
                queue["indexName"].as_str().unwrap_or_default().to_owned()
            }
        };
        let mut request = json!({
            "indexName": index, "model": show.model, "threshold": 0,
            "maxRecommendations": show.max,
        });
        if !user.is_empty() {
            request["queryParameters"] = json!({"userToken": user});
        }
        if let Some(id) = &show.object_id {
            request["objectID"] = json!(id);
        }
        if let Some(name) = &show.facet_name {
            request["facetName"] = json!(name);
        }
        if let Some(value) = &show.facet_value {
            request["facetValue"] = json!(value);
        }
        let out = client
            .call(
                Method::POST,
                "/1/indexes/*/recommendations",
                app,
                Some(json!({ "requests": [request] })),
            )
            .await?;
        let result = &out["results"][0];
        // The table for people on stderr; the JSON on stdout, as every command.
        let whom = match (&show.object_id, user) {
            (Some(id), _) => id.clone(),
            (None, "") => "everyone".to_owned(),
            (None, user) => user.to_owned(),
        };
        // What is ranked: a facet's values, or the items of one facet value, or items.
        let what = match (&show.facet_name, &show.facet_value) {
            (Some(name), Some(value)) => format!("{} of {name}:{value}", show.model),
            (Some(name), None) => format!("{} {name}", show.model),
            _ => show.model.clone(),
        };
        eprintln!(
            "{what} for {whom} in {index}: answered by {} ({})",
            result["answeredBy"].as_str().unwrap_or("?"),
            result["source"].as_str().unwrap_or("?")
        );
        for (rank, hit) in result["hits"].as_array().into_iter().flatten().enumerate() {
            let id = hit["objectID"].as_str().or(hit["facetValue"].as_str());
            eprintln!(
                "{:>3}. {:<30} {:>7}",
                rank + 1,
                id.unwrap_or("?"),
                hit["_score"]
            );
        }
        print(result)
    })
}

pub fn sets(command: SetsCommand, target: &Target, config: &Config) -> anyhow::Result<()> {
    let client = Client::new(target, config)?;
    block_on(async {
        let out = match command {
            SetsCommand::Reserve {
                app,
                name,
                capacity,
                error_rate,
                partition_bytes,
                max_error_rate,
            } => {
                let mut body = json!({"name": name, "capacity": capacity, "errorRate": error_rate,
                    "partitionBytes": partition_bytes});
                if let Some(max) = max_error_rate {
                    body["maxErrorRate"] = json!(max);
                }
                client
                    .call(Method::POST, "/1/sets", &app, Some(body))
                    .await?
            }
            SetsCommand::List { app } => client.call(Method::GET, "/1/sets", &app, None).await?,
            SetsCommand::Info { app, name } => {
                client
                    .call(Method::GET, &format!("/1/sets/{name}"), &app, None)
                    .await?
            }
            SetsCommand::Rebuild { app, name, file } => {
                let path = format!("/1/sets/{name}/rebuild");
                upload(
                    &client,
                    &path,
                    &app,
                    &file,
                    "text/plain",
                    "rebuild",
                    "building the new generation once all is sent",
                )
                .await?
            }
            SetsCommand::Delete { app, name } => {
                client
                    .call(Method::DELETE, &format!("/1/sets/{name}"), &app, None)
                    .await?
            }
        };
        print(&out)
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn every_acl_is_offered_by_its_server_name() {
        assert_eq!(ACL_NAMES.len(), 16);
        for name in ["search", "addObject", "seeUnretrievableAttributes", "admin"] {
            assert!(ACL_NAMES.iter().any(|n| n == name), "{name}");
        }
    }

    #[test]
    fn abtest_dates_significances_and_verdicts_read_right() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400 + 3_661), "2000-02-29T01:01:01Z");
        assert_eq!(rfc3339(1_798_070_400), "2026-12-24T00:00:00Z");
        assert_eq!(rfc3339(4_107_542_400), "2100-03-01T00:00:00Z");
        assert_eq!(significance(&json!(0.9496)), "0.949");
        assert_eq!(significance(&json!(0.99)), "0.99");
        assert_eq!(significance(&json!(1.0)), ">0.999");
        assert_eq!(significance(&json!(0.999)), "0.999");
        assert_eq!(significance(&json!(0.5)), "0.5");
        assert_eq!(significance(&Value::Null), "-");
        assert_eq!(percent(&json!(0.0833)), "8.3%");
        let test = |sig: Value, needed: Value, rates: [f64; 2], users: [u64; 2]| {
            json!({"conversionSignificance": sig, "usersStillNeeded": needed, "variants": [
                {"userCount": users[0], "userConversionRate": rates[0]},
                {"userCount": users[1], "userConversionRate": rates[1]},
            ]})
        };
        let v = verdict(&test(json!(0.991), Value::Null, [0.1, 0.3], [50, 50]));
        assert_eq!(v, "B converts better (significance 0.991)");
        let v = verdict(&test(json!(0.97), Value::Null, [0.4, 0.3], [50, 50]));
        assert_eq!(v, "A converts better (significance 0.97)");
        let v = verdict(&test(json!(0.6), json!(1200), [0.1, 0.12], [50, 50]));
        assert_eq!(
            v,
            "not significant yet (significance 0.6): about 1200 more users needed"
        );
        let v = verdict(&test(Value::Null, Value::Null, [0.0, 0.0], [3, 0]));
        assert_eq!(v, "not significant yet: each variant needs users");
        let rows = [
            vec!["ID".to_owned(), "N".to_owned()],
            vec!["12".to_owned(), "7".to_owned()],
        ];
        assert_eq!(table(&rows, &[false, true]), "ID  N\n12  7\n");
    }

    /// A recompute's bar moves within its ranges, from their checkpoints, not range by range.
    #[test]
    fn a_recompute_is_measured_within_its_ranges() {
        let job = |ranges: Value| {
            json!({"state": "running", "users": 700, "skipped": 2, "ranges": ranges,
                   "progress": {"phase": "recompute"}})
        };
        // Tokens share "user_0": the digits after it place the checkpoints.
        let measured = recompute_measured(&job(json!([
            {"start": null, "end": "user_05000", "after": "user_02500", "done": false},
            {"start": "user_05000", "end": null, "after": "user_06000", "done": false},
        ])));
        assert_eq!(measured.total, Some(2.0));
        assert_eq!(measured.also, Some((702.0, "users")));
        // Read as decimals: half of the first range, a fifth of the second.
        assert!((measured.done - 0.7).abs() < 0.001, "{}", measured.done);
        // A range done counts one; one not started, none; a range never shows done early.
        let measured = recompute_measured(&job(json!([
            {"start": null, "end": "m", "after": "l", "done": true},
            {"start": "m", "end": null, "after": null, "done": false},
        ])));
        assert_eq!(measured.done, 1.0);
        let measured = recompute_measured(&job(json!([
            {"start": null, "end": null, "after": "zzz", "done": false},
        ])));
        assert!(measured.done < 1.0);
        assert_eq!(count(2.96), "2.9");
        assert_eq!(count(3.0), "3");
    }
}
