//! `penchant-bench soak`: a shop's day in a few minutes, with faults, against a real `penchant
//! serve` driven from outside over HTTP; then a checker that trusts nothing the server says about
//! itself (docs/RELIABILITY.md).
//!
//! - **Tenant A, a shop:** events at a steady rate from a pool of users with a heavy-tailed mix
//!   (most users with 1–3 events, 50 heavy users, one bot), views, clicks and purchases on a
//!   catalog; profile reads, every Recommend model, re-ranking with `clickAnalytics`; catalog
//!   updates every few seconds; a strategy change at a third of the run (its recompute runs
//!   under traffic); the schedules on (the server's defaults).
//! - **Tenant B, hostile:** what docs/API.md's limits table refuses, in alternate slices of the
//!   run (so A's latency with and without B compare in one run): a wrong key, another tenant's
//!   users, oversized and gzip-bomb bodies, deep filters, oversized tokens, bad JSON, too many
//!   events, a rate-limited key hammered with rotating user tokens, idle half-sent requests.
//! - **Faults:** `kill -9` of the node at a random moment of every period (`--kill-every`), a
//!   restart on the same data at once. Writers retry what was not acknowledged, as Algolia's
//!   clients do, and send a share of their batches twice at the same moment on two connections
//!   (a retry while the first attempt is still in flight).
//!
//! At the end the nodes are given the time their own repair takes after the last kill, stopped,
//! and their store opened here by the [`check`]er, which runs no repair and trusts no engine
//! computation: every raw event row of the shop must be the one event sent at its time, every
//! acknowledged event must have its row, every per-day aggregate must count the day's stored
//! events value by value, every stored profile must score as the checker scores the events (the
//! documented formula) and none may belong to a user who sent nothing, and no ingestion intent
//! may be left. Tenant B must have read nothing of A and got its 4xx every time, and no 5xx may
//! have come outside the restart windows. Any failed check fails the run.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

use crate::{Bench, Cell, CommonArgs, Report, Table};

mod check;
use check::{Reference, Scoring};

const SHOP: &str = "SHOP";
const HOSTILE: &str = "HOSTILE";
const INDEX: &str = "shop";
const ROOT_KEY: &str = "soak-root-key";
/// The nodes' setting of the background jobs' budget on the store.
const PACE: &str = "PENCHANT_STORE__BATCH_ROWS_PER_SECOND";
const HEAVY_USERS: u32 = 50;
const BRANDS: u32 = 50;
const CATEGORIES: u32 = 20;
/// Events per request of tenant A.
const BATCH: usize = 250;
/// Tenant A's writers, each with one batch in flight (two, when sent twice at once).
const WRITERS: usize = 4;
/// How long after a restart answers a failure may still be the restart's.
const GRACE: Duration = Duration::from_secs(3);
/// What a refused body's request reads as when the connection closed while it was sent.
const CLOSED_WHILE_SENDING: &str = "the connection closed while the body was sent";
/// How a request that got no answer within the client's timeout (30 s for writes, as Algolia's
/// clients wait) is told apart.
const TIMED_OUT: &str = "timed out";
/// How a request that never reached the node (connection refused) fails.
const NOT_CONNECTED: &str = "not connected";
/// A's readers and B's attacker alternate in slices this long (B on in odd ones).
const SLICE: Duration = Duration::from_secs(10);
/// The rate-limited key's queries an hour from one address (each node counts its own, from its
/// start).
const RATE_LIMIT: u64 = 50;
/// How long after its last kill the nodes' own repair has finished what it left: alone on the
/// embedded store (the dead node's 10-second lease, then a round), and sharing a store (a batch
/// is taken for interrupted at a minute old, in rounds every 5 s).
const SETTLE_ALONE: Duration = Duration::from_secs(20);
const SETTLE_SHARED: Duration = Duration::from_secs(90);
/// The strategy set up, and the one it changes to at a third of the run.
const FIRST_STRATEGY: Scoring = Scoring {
    kinds: [10, 20, 50],
    brand: 10,
    category: 5,
};
const CHANGED_STRATEGY: Scoring = Scoring {
    kinds: [5, 30, 80],
    brand: 5,
    category: 10,
};

/// `penchant-bench soak [flags]`.
#[derive(Debug, clap::Args)]
pub struct SoakBenchArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// How long traffic runs (the checks come after).
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Tenant A's events per second (all writers together).
    #[arg(long, default_value_t = 5_000)]
    pub rate: u32,
    /// Tenant A's pool of light users.
    #[arg(long, default_value_t = 1_000_000)]
    pub users: u32,
    /// Items in tenant A's catalog.
    #[arg(long, default_value_t = 50_000)]
    pub items: u32,
    /// `kill -9` the node once in each period this long, at a random moment of it (0s: never).
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub kill_every: Duration,
    /// The share of A's batches sent twice at the same moment, on two connections.
    #[arg(long, default_value_t = 0.2)]
    pub in_flight_retries: f64,
    /// The share of A's attempts that reached the node and failed (a kill mid-request) after
    /// which the client gives up on its batch instead of retrying it (a client that crashed or
    /// moved on): what such a batch stored, the node's repair must finish.
    #[arg(long, default_value_t = 0.5)]
    pub give_up: f64,
    /// Light users whose stored profile is compared with a recompute (heavy users and the bot
    /// always are).
    #[arg(long, default_value_t = 20_000)]
    pub profiles_checked: usize,
    /// The `penchant` binary (default: the one beside this executable).
    #[arg(long)]
    pub penchant: Option<PathBuf>,
    /// Keep the node's data and log in this folder (default: a temporary one, removed).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// The seed of every random choice.
    #[arg(long, default_value_t = 43)]
    pub seed: u64,
    /// The store: one node on the embedded store, or two nodes on a Bigtable emulator (one
    /// killed at a time while the other serves).
    #[arg(long, value_enum, default_value_t = SoakStore::Embedded)]
    pub store: SoakStore,
    /// The nodes' `store.batch_rows_per_second`: the background jobs' budget of store rows a
    /// second, a node (0: none, the server's default).
    #[arg(long, default_value_t = 0)]
    pub batch_rows_per_second: u32,
}

/// Where the soak's nodes keep their data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SoakStore {
    Embedded,
    Bigtable,
}

impl Bench for SoakBenchArgs {
    const NAME: &'static str = "soak";

    fn common(&self) -> &CommonArgs {
        &self.common
    }

    fn run(self, report: &mut Report) -> anyhow::Result<()> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        runtime.block_on(soak(self, report))
    }
}

// ---------------------------------------------------------------------------------------------
// The node

/// The `penchant serve` child, restarted on the same data after each kill.
#[derive(Debug)]
struct Node {
    binary: PathBuf,
    data: PathBuf,
    log: PathBuf,
    /// Extra environment: the Bigtable backend's settings.
    env: Vec<(String, String)>,
    child: Mutex<Child>,
    url: RwLock<String>,
    /// Kill (or death) to listening again plus [`GRACE`]; open (`None`) while it restarts.
    windows: Mutex<Vec<(Instant, Option<Instant>)>>,
    kills: AtomicU64,
    unexpected_deaths: AtomicU64,
}

impl Node {
    fn start(
        binary: &Path,
        data: &Path,
        log: &Path,
        env: Vec<(String, String)>,
    ) -> anyhow::Result<Self> {
        let (child, url) = Self::spawn(binary, data, log, &env)?;
        Ok(Self {
            binary: binary.to_owned(),
            data: data.to_owned(),
            log: log.to_owned(),
            env,
            child: Mutex::new(child),
            url: RwLock::new(url),
            windows: Mutex::new(Vec::new()),
            kills: AtomicU64::new(0),
            unexpected_deaths: AtomicU64::new(0),
        })
    }

    fn spawn(
        binary: &Path,
        data: &Path,
        log: &Path,
        env: &[(String, String)],
    ) -> anyhow::Result<(Child, String)> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)?;
        let mut cmd = Command::new(binary);
        for (key, _) in std::env::vars() {
            if key.starts_with("PENCHANT_") {
                cmd.env_remove(key);
            }
        }
        let mut child = cmd
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data)
            .env("PENCHANT_AUTH__ADMIN_KEY", ROOT_KEY)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let mut stdout = BufReader::new(child.stdout.take().context("stdout")?);
        let mut line = String::new();
        loop {
            line.clear();
            if stdout.read_line(&mut line)? == 0 {
                let status = child.wait()?;
                bail!("the node exited before listening ({status}); see its log");
            }
            if let Some(url) = line.trim().strip_prefix("penchant listening on ") {
                let url = url.to_owned();
                // Drain what else it prints, so that it never blocks on a full pipe.
                std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
                return Ok((child, url));
            }
        }
    }

    fn url(&self) -> String {
        self.url.read().expect("not poisoned").clone()
    }

    fn pid(&self) -> u32 {
        self.child.lock().expect("not poisoned").id()
    }

    /// `kill -9`, then start again on the same data; the window lasts until it listens.
    fn kill_and_restart(&self) -> anyhow::Result<()> {
        let down = Instant::now();
        self.windows
            .lock()
            .expect("not poisoned")
            .push((down, None));
        let mut child = self.child.lock().expect("not poisoned");
        child.kill()?;
        child.wait()?;
        self.kills.fetch_add(1, Ordering::SeqCst);
        self.restart(&mut child, down)
    }

    fn restart(&self, child: &mut Child, down: Instant) -> anyhow::Result<()> {
        let (new, url) = Self::spawn(&self.binary, &self.data, &self.log, &self.env)?;
        *child = new;
        *self.url.write().expect("not poisoned") = url;
        let up = Some(Instant::now() + GRACE);
        let mut windows = self.windows.lock().expect("not poisoned");
        match windows.last_mut() {
            Some((at, end)) if *at == down => *end = up,
            _ => windows.push((down, up)),
        }
        Ok(())
    }

    /// A node that died by itself is counted and started again.
    fn check_alive(&self) -> anyhow::Result<()> {
        let mut child = self.child.lock().expect("not poisoned");
        if let Some(status) = child.try_wait()? {
            eprintln!("soak: the node died by itself ({status}); restarting");
            self.unexpected_deaths.fetch_add(1, Ordering::SeqCst);
            self.restart(&mut child, Instant::now())?;
        }
        Ok(())
    }

    /// Whether `[from, to]` meets a restart window.
    fn in_window(&self, from: Instant, to: Instant) -> bool {
        self.windows
            .lock()
            .expect("not poisoned")
            .iter()
            .any(|&(down, up)| up.is_none_or(|up| from <= up) && to >= down)
    }

    /// SIGTERM, and the exit status.
    fn stop(&self) -> anyhow::Result<std::process::ExitStatus> {
        let mut child = self.child.lock().expect("not poisoned");
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()?;
        Ok(child.wait()?)
    }
}

/// The nodes of the run: one on the embedded store, or several on one Bigtable (emulator).
#[derive(Debug)]
struct Nodes(Vec<Node>);

impl Nodes {
    /// The base URL of the node a request numbered `n` goes to (a load balancer's turn).
    fn url(&self, n: usize) -> String {
        self.pick(n).url()
    }

    /// The node a request numbered `n` goes to.
    fn pick(&self, n: usize) -> &Node {
        &self.0[n % self.0.len()]
    }

    fn kills(&self) -> u64 {
        self.0.iter().map(|n| n.kills.load(Ordering::SeqCst)).sum()
    }

    /// Give the nodes' own repair the time it takes to finish what the last kill left (the
    /// checker runs none): a node alone on its store repairs at start, once its dead
    /// predecessor's lease is past; nodes sharing a store take a batch for interrupted when it
    /// is a minute old, in rounds every half lease.
    async fn settle(&self) {
        let after = match self.0.len() {
            1 => SETTLE_ALONE,
            _ => SETTLE_SHARED,
        };
        let last = self
            .0
            .iter()
            .filter_map(|n| n.windows.lock().expect("not poisoned").last().map(|w| w.0))
            .max();
        if let Some(wait) = last.and_then(|at| (at + after).checked_duration_since(Instant::now()))
        {
            eprintln!("soak: {wait:.0?} for the nodes' repair of the last kill");
            tokio::time::sleep(wait).await;
        }
    }

    fn unexpected_deaths(&self) -> u64 {
        self.0
            .iter()
            .map(|n| n.unexpected_deaths.load(Ordering::SeqCst))
            .sum()
    }
}

// ---------------------------------------------------------------------------------------------
// What the clients saw

/// Requests of one class: statuses, and latencies by slice of the run.
#[derive(Debug, Default)]
struct Class {
    ok: u64,
    expected_4xx: u64,
    unexpected_4xx: u64,
    /// Answers by 4xx status.
    statuses: BTreeMap<u16, u64>,
    failed_in_window: u64,
    failed_outside: u64,
    /// Outside restart windows, no answer within the client's timeout (not a 5xx: reported,
    /// and not yet a failure of the run; docs/RELIABILITY.md).
    timed_out_outside: u64,
    examples: Vec<String>,
    /// Latency (µs) of answered requests, per tenth of the run.
    over_time: BTreeMap<usize, Histogram<u64>>,
    /// Latency (µs) of answered requests outside restart windows, with B attacking or not.
    with_b: Option<Histogram<u64>>,
    without_b: Option<Histogram<u64>>,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid bounds")
}

/// What every client records.
#[derive(Debug)]
struct Seen {
    started: Instant,
    duration: Duration,
    classes: Mutex<BTreeMap<&'static str, Class>>,
    leaks: Mutex<Vec<String>>,
}

/// How a request ended.
enum Outcome {
    Ok(Value),
    /// A 4xx: its status and body.
    Client(u16, String),
    /// A 5xx, a connection error or a timeout.
    Failed(String),
}

impl Seen {
    fn b_active(&self, at: Instant) -> bool {
        (at.duration_since(self.started).as_secs_f64() / SLICE.as_secs_f64()) as u64 % 2 == 1
    }

    /// Record a request of `class` sent to `node` at `from`: `expected` says whether a 4xx was
    /// what it asked for. Only a restart of that node excuses a failure.
    fn record(
        &self,
        node: &Node,
        class: &'static str,
        from: Instant,
        outcome: &Outcome,
        expected: bool,
    ) {
        let to = Instant::now();
        let mut classes = self.classes.lock().expect("not poisoned");
        let c = classes.entry(class).or_default();
        let micros = to.duration_since(from).as_micros().max(1) as u64;
        let answered = match outcome {
            Outcome::Ok(_) => {
                c.ok += 1;
                true
            }
            Outcome::Client(status, body) => {
                *c.statuses.entry(*status).or_default() += 1;
                if expected {
                    c.expected_4xx += 1;
                } else {
                    c.unexpected_4xx += 1;
                    if c.examples.len() < 5 {
                        c.examples.push(format!("{status} {}", trim(body)));
                    }
                }
                true
            }
            Outcome::Failed(why) => {
                if node.in_window(from, to) {
                    c.failed_in_window += 1;
                } else if why.starts_with(TIMED_OUT) {
                    c.timed_out_outside += 1;
                } else {
                    c.failed_outside += 1;
                    if c.examples.len() < 5 {
                        c.examples.push(trim(why));
                    }
                }
                false
            }
        };
        if answered {
            let tenth = (from.duration_since(self.started).as_secs_f64()
                / self.duration.as_secs_f64()
                * 10.0) as usize;
            let _ = c
                .over_time
                .entry(tenth.min(9))
                .or_insert_with(histogram)
                .record(micros);
            if !node.in_window(from, to) {
                let h = if self.b_active(from) {
                    &mut c.with_b
                } else {
                    &mut c.without_b
                };
                let _ = h.get_or_insert_with(histogram).record(micros);
            }
        }
    }
}

fn trim(s: &str) -> String {
    s.chars().take(200).collect()
}

/// A call with an app's credentials.
async fn call(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    (app, key): (&str, &str),
    body: Option<Vec<u8>>,
    headers: &[(&str, &str)],
) -> Outcome {
    let mut req = http
        .request(method, url)
        .header("X-Algolia-Application-Id", app)
        .header("X-Algolia-API-Key", key);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if let Some(body) = body {
        req = req.header("Content-Type", "application/json").body(body);
    }
    match req.send().await {
        Err(e) if e.is_timeout() => Outcome::Failed(format!("{TIMED_OUT}: {e}")),
        Err(e) if e.is_connect() => Outcome::Failed(format!("{NOT_CONNECTED}: {e}")),
        Err(e) => Outcome::Failed(format!("{e}")),
        Ok(resp) => {
            let status = resp.status().as_u16();
            let text = resp.text().await.unwrap_or_default();
            match status {
                200..=299 => Outcome::Ok(serde_json::from_str(&text).unwrap_or(Value::Null)),
                400..=499 => Outcome::Client(status, text),
                _ => Outcome::Failed(format!("{status} {text}")),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Tenant A

/// An event as the reference keeps it.
#[derive(Debug, Clone, Copy)]
struct Sent {
    user: u32,
    item: u32,
    kind: u8,
    /// Its timestamp (ms): every event sent has a millisecond of its own.
    at: i64,
}

/// The kinds of events: (type, name).
const KINDS: [(&str, &str); 3] = [
    ("view", "Viewed"),
    ("click", "Clicked"),
    ("conversion", "Bought"),
];

fn user_token(users: u32, user: u32) -> String {
    if user == u32::MAX {
        "bot".to_owned()
    } else if user >= users {
        format!("h{}", user - users)
    } else {
        format!("u{user}")
    }
}

fn brand(item: u32) -> String {
    format!("b{}", item % BRANDS)
}

fn category(item: u32) -> String {
    format!("c{}", (item / BRANDS) % CATEGORIES)
}

/// The workload's shape: who, on what, how.
#[derive(Debug, Clone, Copy)]
struct Shape {
    users: u32,
    items: u32,
}

impl Shape {
    fn event(&self, rng: &mut StdRng, at: i64) -> Sent {
        let r: f64 = rng.random();
        let user = if r < 0.2 {
            u32::MAX
        } else if r < 0.4 {
            self.users + rng.random_range(0..HEAVY_USERS)
        } else {
            rng.random_range(0..self.users)
        };
        // Popular items first: a square skews the draw.
        let x: f64 = rng.random();
        let item = ((x * x) * f64::from(self.items)) as u32 % self.items;
        let k: f64 = rng.random();
        let kind = if k < 0.8 {
            0
        } else if k < 0.95 {
            1
        } else {
            2
        };
        Sent {
            user,
            item,
            kind,
            at,
        }
    }

    fn json(&self, e: &Sent) -> Value {
        let (t, name) = KINDS[e.kind as usize];
        let mut event = json!({
            "eventType": t, "eventName": name, "index": INDEX,
            "userToken": user_token(self.users, e.user), "timestamp": e.at,
            "objectIDs": [format!("i{}", e.item)],
        });
        if t == "conversion" {
            event["eventSubtype"] = json!("purchase");
        }
        event
    }
}

/// What tenant A's writers did.
#[derive(Debug, Default)]
struct Writes {
    acknowledged: Mutex<Vec<Sent>>,
    batches: AtomicU64,
    twice_at_once: AtomicU64,
    retried_after_failure: AtomicU64,
    /// Batches given up after a failed attempt.
    abandoned: Mutex<Vec<Vec<Sent>>>,
    /// Recently acknowledged users, for the readers.
    recent: Mutex<Vec<u32>>,
}

struct Ctx {
    node: Arc<Nodes>,
    seen: Arc<Seen>,
    writes: Arc<Writes>,
    stop: Arc<AtomicBool>,
    shape: Shape,
    shop_key: String,
    hostile_key: String,
    limited_key: String,
}

/// What a writer does with its batches.
#[derive(Debug, Clone, Copy)]
struct Sending {
    /// Events a second.
    per_s: f64,
    /// The share of batches sent twice at once.
    twice: f64,
    /// The share of failed attempts after which the batch is given up.
    give_up: f64,
}

/// One writer: batches of [`BATCH`] events at `per_s` events a second until stopped, each sent
/// until acknowledged (or given up after a failure), some twice at once.
async fn writer(ctx: Arc<Ctx>, sending: Sending, seed: u64, clock: Arc<AtomicI64>) {
    let Sending {
        per_s,
        twice,
        give_up,
    } = sending;
    let mut rng = StdRng::seed_from_u64(seed);
    // Two clients: two connection pools, so a second attempt never waits for the first's
    // connection.
    let first = client(Duration::from_secs(30));
    let second = client(Duration::from_secs(30));
    let started = Instant::now();
    let mut sent = 0usize;
    while !ctx.stop.load(Ordering::SeqCst) {
        let due = started + Duration::from_secs_f64(sent as f64 / per_s);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            tokio::time::sleep(wait).await;
        }
        let stamp = clock.fetch_add(BATCH as i64, Ordering::SeqCst);
        let events: Vec<Sent> = (0..BATCH)
            .map(|i| ctx.shape.event(&mut rng, stamp + i as i64))
            .collect();
        let body: Vec<Value> = events.iter().map(|e| ctx.shape.json(e)).collect();
        let body = serde_json::to_vec(&json!({ "events": body })).expect("JSON");
        let mut attempt = 0;
        let acknowledged = loop {
            // A retry goes to the next node, as a load balancer would send it.
            let turn = seed as usize + attempt;
            let (node, other) = (ctx.node.pick(turn), ctx.node.pick(turn + 1));
            let url = format!("{}/1/events", node.url());
            let other_url = format!("{}/1/events", other.url());
            let creds = (SHOP, ctx.shop_key.as_str());
            let from = Instant::now();
            let at_once = attempt == 0 && rng.random_bool(twice);
            let outcome = if at_once {
                ctx.writes.twice_at_once.fetch_add(1, Ordering::SeqCst);
                let (a, b) = tokio::join!(
                    call(
                        &first,
                        reqwest::Method::POST,
                        &url,
                        creds,
                        Some(body.clone()),
                        &[]
                    ),
                    call(
                        &second,
                        reqwest::Method::POST,
                        &other_url,
                        creds,
                        Some(body.clone()),
                        &[]
                    ),
                );
                // Acknowledged if either was; both are requests of their own, and a failure of
                // one is one whatever the other's answer.
                ctx.seen.record(node, "A events", from, &a, false);
                ctx.seen.record(other, "A events", from, &b, false);
                match (a, b) {
                    (Outcome::Ok(v), _) | (_, Outcome::Ok(v)) => Outcome::Ok(v),
                    (a, _) => a,
                }
            } else {
                let outcome = call(
                    &first,
                    reqwest::Method::POST,
                    &url,
                    creds,
                    Some(body.clone()),
                    &[],
                )
                .await;
                ctx.seen.record(node, "A events", from, &outcome, false);
                outcome
            };
            match outcome {
                Outcome::Ok(_) => break true,
                // Counted as unexpected; nothing of it was stored.
                Outcome::Client(..) => break false,
                // The node may have stored it before it died: its repair must finish it.
                Outcome::Failed(why)
                    if !why.starts_with(NOT_CONNECTED) && rng.random_bool(give_up) =>
                {
                    let mut abandoned = ctx.writes.abandoned.lock().expect("not poisoned");
                    abandoned.push(events.clone());
                    break false;
                }
                Outcome::Failed(_) => {
                    attempt += 1;
                    ctx.writes
                        .retried_after_failure
                        .fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        };
        sent += BATCH;
        if !acknowledged {
            continue;
        }
        ctx.writes.batches.fetch_add(1, Ordering::SeqCst);
        let mut recent = ctx.writes.recent.lock().expect("not poisoned");
        recent.extend(events.iter().step_by(25).map(|e| e.user));
        let excess = recent.len().saturating_sub(10_000);
        recent.drain(..excess);
        drop(recent);
        ctx.writes
            .acknowledged
            .lock()
            .expect("not poisoned")
            .extend(events);
    }
}

fn client(timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(timeout)
        .pool_max_idle_per_host(4)
        .build()
        .expect("a client")
}

/// One reader of tenant A: profiles, every Recommend model, re-ranking, in turn.
async fn reader(ctx: Arc<Ctx>, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let http = client(Duration::from_secs(30));
    let models = [
        "trending-items",
        "related-products",
        "bought-together",
        "looking-similar",
        "recommended-for-you",
        "trending-facets",
    ];
    let mut n = 0usize;
    while !ctx.stop.load(Ordering::SeqCst) {
        n += 1;
        let user = {
            let recent = ctx.writes.recent.lock().expect("not poisoned");
            if recent.is_empty() {
                None
            } else {
                Some(recent[rng.random_range(0..recent.len())])
            }
        };
        let Some(user) = user else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let token = user_token(ctx.shape.users, user);
        let item = format!("i{}", rng.random_range(0..ctx.shape.items.min(1000)));
        let node = ctx.node.pick(n);
        let base = node.url();
        let creds = (SHOP, ctx.shop_key.as_str());
        let from = Instant::now();
        match n % 3 {
            0 => {
                let url = format!("{base}/1/profiles/personalization/{token}");
                let outcome = call(&http, reqwest::Method::GET, &url, creds, None, &[]).await;
                ctx.seen.record(node, "A profile", from, &outcome, false);
            }
            1 => {
                let model = models[n / 3 % models.len()];
                let mut request = json!({"indexName": INDEX, "model": model, "threshold": 0,
                    "maxRecommendations": 10, "queryParameters": {"userToken": token, "clickAnalytics": true}});
                match model {
                    "related-products" | "bought-together" | "looking-similar" => {
                        request["objectID"] = json!(item)
                    }
                    "trending-facets" => request["facetName"] = json!("brand"),
                    _ => {}
                }
                let body = serde_json::to_vec(&json!({"requests": [request]})).expect("JSON");
                let url = format!("{base}/1/indexes/*/recommendations");
                let outcome =
                    call(&http, reqwest::Method::POST, &url, creds, Some(body), &[]).await;
                ctx.seen.record(node, "A recommend", from, &outcome, false);
            }
            _ => {
                let hits: Vec<Value> = (0..20)
                    .map(|_| json!({"objectID": format!("i{}", rng.random_range(0..ctx.shape.items))}))
                    .collect();
                let body = serde_json::to_vec(
                    &json!({"userToken": token, "hits": hits, "clickAnalytics": true}),
                )
                .expect("JSON");
                let url = format!("{base}/1/indexes/{INDEX}/rerank");
                let outcome =
                    call(&http, reqwest::Method::POST, &url, creds, Some(body), &[]).await;
                ctx.seen.record(node, "A rerank", from, &outcome, false);
            }
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Catalog updates every few seconds: prices of 100 items (no facet the checks count changes)
/// and 20 new items.
async fn catalog_updates(ctx: Arc<Ctx>, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let http = client(Duration::from_secs(30));
    let mut round = 0u32;
    while !ctx.stop.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_secs(3)).await;
        round += 1;
        let mut requests: Vec<Value> = (0..100)
            .map(|_| {
                let item = rng.random_range(0..ctx.shape.items);
                json!({"action": "partialUpdateObject", "body": {"objectID": format!("i{item}"),
                    "price": rng.random_range(1..1000)}})
            })
            .collect();
        requests.extend((0..20).map(|i| {
            json!({"action": "addObject", "body": {"objectID": format!("new-{round}-{i}"),
                "brand": "new", "category": "new", "price": 1}})
        }));
        let body = serde_json::to_vec(&json!({ "requests": requests })).expect("JSON");
        let node = ctx.node.pick(round as usize);
        let url = format!("{}/1/indexes/{INDEX}/batch", node.url());
        let from = Instant::now();
        let creds = (SHOP, ctx.shop_key.as_str());
        let outcome = call(&http, reqwest::Method::POST, &url, creds, Some(body), &[]).await;
        ctx.seen.record(node, "A catalog", from, &outcome, false);
    }
}

// ---------------------------------------------------------------------------------------------
// Tenant B

/// Tenant B's attacks, one after the other, in the odd slices of the run. Each expects a 4xx
/// (or, for the rate-limited key, a 404 or a 429); a 2xx where A's data could show is a leak.
async fn attacker(ctx: Arc<Ctx>, shop_user: String) {
    let http = client(Duration::from_secs(20));
    let bomb = {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(&vec![b' '; 64 << 20]).expect("in memory");
        gz.finish().expect("in memory")
    };
    let deep = format!("{}brand:b1{}", "(".repeat(200), ")".repeat(200));
    let mut n = 0usize;
    let mut token = 0u64;
    while !ctx.stop.load(Ordering::SeqCst) {
        if !ctx.seen.b_active(Instant::now()) {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        n += 1;
        let node = ctx.node.pick(n);
        let base = node.url();
        let b = (HOSTILE, ctx.hostile_key.as_str());
        let from = Instant::now();
        let get = reqwest::Method::GET;
        let post = reqwest::Method::POST;
        let (class, outcome) = match n % 9 {
            // A's app with B's key.
            0 => {
                let url = format!("{base}/1/profiles/personalization/{shop_user}");
                let creds = (SHOP, ctx.hostile_key.as_str());
                (
                    "B wrong key",
                    call(&http, get, &url, creds, None, &[]).await,
                )
            }
            // A's user through B's app.
            1 => {
                let url = format!("{base}/1/profiles/personalization/{shop_user}");
                (
                    "B other tenant's user",
                    call(&http, get, &url, b, None, &[]).await,
                )
            }
            2 => {
                let url = format!("{base}/1/events");
                let body = vec![b' '; 3 << 20];
                (
                    "B oversized body",
                    call(&http, post, &url, b, Some(body), &[]).await,
                )
            }
            3 => {
                let url = format!("{base}/1/events");
                let headers = [("Content-Encoding", "gzip")];
                (
                    "B gzip bomb",
                    call(&http, post, &url, b, Some(bomb.clone()), &headers).await,
                )
            }
            4 => {
                let body = json!({"requests": [{"indexName": INDEX, "model": "trending-items",
                    "threshold": 0, "queryParameters": {"filters": deep}}]});
                let url = format!("{base}/1/indexes/*/recommendations");
                let body = serde_json::to_vec(&body).expect("JSON");
                (
                    "B deep filters",
                    call(&http, post, &url, b, Some(body), &[]).await,
                )
            }
            5 => {
                let url = format!("{base}/1/events");
                let body = json!({"events": [{"eventType": "view", "eventName": "V", "index": INDEX,
                    "userToken": "x".repeat(300), "objectIDs": ["i1"]}]});
                let body = serde_json::to_vec(&body).expect("JSON");
                (
                    "B oversized token",
                    call(&http, post, &url, b, Some(body), &[]).await,
                )
            }
            6 => {
                let url = format!("{base}/1/events");
                let body = b"{\"events\": [{\"eventType\": ".to_vec();
                (
                    "B bad JSON",
                    call(&http, post, &url, b, Some(body), &[]).await,
                )
            }
            7 => {
                let url = format!("{base}/1/events");
                let events: Vec<Value> = (0..1001)
                    .map(|i| {
                        json!({"eventType": "view", "eventName": "V", "index": INDEX,
                        "userToken": format!("t{i}"), "objectIDs": ["i1"]})
                    })
                    .collect();
                let body = serde_json::to_vec(&json!({ "events": events })).expect("JSON");
                (
                    "B too many events",
                    call(&http, post, &url, b, Some(body), &[]).await,
                )
            }
            _ => {
                token += 1;
                let url = format!("{base}/1/profiles/personalization/rotating-{token}");
                let creds = (HOSTILE, ctx.limited_key.as_str());
                (
                    "B rate-limited key",
                    call(&http, get, &url, creds, None, &[]).await,
                )
            }
        };
        // Past 2 MB the server answers 413 and closes; a client still sending may see the
        // connection close instead of the answer.
        let outcome = match outcome {
            Outcome::Failed(why)
                if class == "B oversized body" && why.starts_with("error sending request") =>
            {
                Outcome::Client(499, CLOSED_WHILE_SENDING.to_owned())
            }
            other => other,
        };
        let expected = match (&outcome, class) {
            (Outcome::Client(429 | 404, _), "B rate-limited key") => true,
            (Outcome::Client(404, _), "B other tenant's user") => true,
            (Outcome::Client(_, _), "B rate-limited key" | "B other tenant's user") => false,
            (Outcome::Client(..), _) => true,
            (Outcome::Ok(v), _) => {
                ctx.seen
                    .leaks
                    .lock()
                    .expect("not poisoned")
                    .push(format!("{class}: 2xx {}", trim(&v.to_string())));
                false
            }
            (Outcome::Failed(_), _) => false,
        };
        ctx.seen.record(node, class, from, &outcome, expected);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Idle, half-sent requests (a slow client): one opened every second of B's slices, its head
/// never finished. The server must close each (its header timeout); returns (opened, closed by
/// the server within 30 s of their last byte).
fn slow_clients(ctx: Arc<Ctx>) -> (u64, u64) {
    let mut open: Vec<(std::net::TcpStream, Instant)> = Vec::new();
    let (mut opened, mut closed) = (0u64, 0u64);
    while !ctx.stop.load(Ordering::SeqCst) || !open.is_empty() {
        if !ctx.stop.load(Ordering::SeqCst) && ctx.seen.b_active(Instant::now()) && open.len() < 20
        {
            let addr = ctx
                .node
                .url(opened as usize)
                .trim_start_matches("http://")
                .to_owned();
            if let Ok(mut s) = std::net::TcpStream::connect(&addr) {
                let _ = s.write_all(
                    b"POST /1/events HTTP/1.1\r\nHost: x\r\nX-Algolia-Application-Id: HOSTILE\r\n",
                );
                let _ = s.set_read_timeout(Some(Duration::from_millis(1)));
                open.push((s, Instant::now()));
                opened += 1;
            }
        }
        open.retain_mut(|(s, since)| {
            let mut buf = [0u8; 512];
            match s.read(&mut buf) {
                Ok(0) => {
                    closed += 1;
                    false
                }
                Ok(_) => true,
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut =>
                {
                    // Still open: given up on after 30 s (counted as not closed).
                    since.elapsed() < Duration::from_secs(30)
                }
                Err(_) => {
                    closed += 1;
                    false
                }
            }
        });
        std::thread::sleep(Duration::from_millis(200));
    }
    (opened, closed)
}

// ---------------------------------------------------------------------------------------------
// Resources

#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Duration,
    rss_kib: u64,
    threads: u64,
    fds: u64,
    disk_bytes: u64,
}

fn sample(pid: u32, data: &Path, at: Duration) -> Option<Sample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
    Some(Sample {
        at,
        rss_kib: field("VmRSS:")?,
        threads: field("Threads:")?,
        fds,
        disk_bytes: disk_usage(data),
    })
}

fn disk_usage(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => disk_usage(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

// ---------------------------------------------------------------------------------------------
// The run

async fn setup(node: &Nodes, shape: Shape) -> anyhow::Result<(String, String, String)> {
    let http = client(Duration::from_secs(120));
    let root = |app| (app, ROOT_KEY);
    let base = node.url(0);
    let mut keys = Vec::new();
    for app in [SHOP, HOSTILE] {
        let body = serde_json::to_vec(&json!({ "appID": app }))?;
        match call(
            &http,
            reqwest::Method::POST,
            &format!("{base}/1/apps"),
            root(app),
            Some(body),
            &[],
        )
        .await
        {
            Outcome::Ok(v) => keys.push(
                v["adminAPIKey"]
                    .as_str()
                    .context("no adminAPIKey")?
                    .to_owned(),
            ),
            Outcome::Client(s, b) => bail!("creating {app}: {s} {b}"),
            Outcome::Failed(e) => bail!("creating {app}: {e}"),
        }
    }
    let (shop_key, hostile_key) = (keys[0].clone(), keys[1].clone());
    let ok = |what: &str, o: Outcome| match o {
        Outcome::Ok(v) => Ok(v),
        Outcome::Client(s, b) => Err(anyhow::anyhow!("{what}: {s} {b}")),
        Outcome::Failed(e) => Err(anyhow::anyhow!("{what}: {e}")),
    };
    let body = serde_json::to_vec(
        &json!({"acl": ["recommendation"], "maxQueriesPerIPPerHour": RATE_LIMIT}),
    )?;
    let limited = ok(
        "a rate-limited key",
        call(
            &http,
            reqwest::Method::POST,
            &format!("{base}/1/keys"),
            (HOSTILE, &hostile_key),
            Some(body),
            &[],
        )
        .await,
    )?;
    let limited_key = limited["key"].as_str().context("no key")?.to_owned();
    let strategy = FIRST_STRATEGY.json();
    ok(
        "the strategy",
        call(
            &http,
            reqwest::Method::POST,
            &format!("{base}/1/strategies/personalization"),
            (SHOP, &shop_key),
            Some(strategy),
            &[],
        )
        .await,
    )?;
    let bar = crate::report::bar("soak: the catalog", u64::from(shape.items));
    for chunk in (0..shape.items).collect::<Vec<_>>().chunks(1000) {
        let requests: Vec<Value> = chunk
            .iter()
            .map(|&i| {
                json!({"action": "addObject", "body": {"objectID": format!("i{i}"),
                "brand": brand(i), "category": category(i), "price": 10 + i % 90}})
            })
            .collect();
        let body = serde_json::to_vec(&json!({ "requests": requests }))?;
        ok(
            "the catalog",
            call(
                &http,
                reqwest::Method::POST,
                &format!("{base}/1/indexes/{INDEX}/batch"),
                (SHOP, &shop_key),
                Some(body),
                &[],
            )
            .await,
        )?;
        bar.inc(chunk.len() as u64);
    }
    bar.finish_and_clear();
    Ok((shop_key, hostile_key, limited_key))
}

/// The recompute a strategy change started: wait (through kills) until it is done.
async fn wait_for_recompute(node: &Nodes, key: &str, within: Duration) -> anyhow::Result<String> {
    let http = client(Duration::from_secs(10));
    let deadline = Instant::now() + within;
    for n in 0.. {
        let url = format!("{}/1/strategies/personalization/job", node.url(n));
        if let Outcome::Ok(v) =
            call(&http, reqwest::Method::GET, &url, (SHOP, key), None, &[]).await
        {
            let state = v["state"].as_str().unwrap_or("").to_owned();
            if state != "running" {
                return Ok(state);
            }
        }
        if Instant::now() > deadline {
            bail!("the recompute is still running after {within:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    unreachable!("an endless loop")
}

async fn soak(args: SoakBenchArgs, report: &mut Report) -> anyhow::Result<()> {
    let binary = match &args.penchant {
        Some(p) => p.clone(),
        None => std::env::current_exe()?
            .parent()
            .context("no folder")?
            .join("penchant"),
    };
    if !binary.exists() {
        bail!(
            "{} not found: build it (cargo build --release -p penchant) or pass --penchant",
            binary.display()
        );
    }
    let temp = tempfile::tempdir()?;
    let root = args
        .data_dir
        .clone()
        .unwrap_or_else(|| temp.path().to_owned());
    std::fs::create_dir_all(&root)?;
    let data = root.join("data");
    // Two nodes on one Bigtable emulator, or one on the embedded store.
    let emulator = (args.store == SoakStore::Bigtable)
        .then(penchant_store_bigtable::emulator::Emulator::start);
    let pace = args.batch_rows_per_second;
    let nodes = match &emulator {
        None => {
            let backups = root.join("backups").display().to_string();
            let env = vec![
                ("PENCHANT_STORE__BACKUP_DIR".to_owned(), backups),
                (PACE.to_owned(), pace.to_string()),
            ];
            vec![Node::start(&binary, &data, &root.join("node.log"), env)?]
        }
        Some(emulator) => (0..2)
            .map(|i| {
                let env = vec![
                    ("PENCHANT_STORE__BACKEND".to_owned(), "bigtable".to_owned()),
                    (
                        "PENCHANT_BIGTABLE__TABLE_PREFIX".to_owned(),
                        "soak_".to_owned(),
                    ),
                    (
                        "BIGTABLE_EMULATOR_HOST".to_owned(),
                        emulator.addr().to_owned(),
                    ),
                    (PACE.to_owned(), pace.to_string()),
                ];
                let dir = root.join(format!("node{i}"));
                Node::start(&binary, &dir, &root.join(format!("node{i}.log")), env)
            })
            .collect::<anyhow::Result<_>>()?,
    };
    let node = Arc::new(Nodes(nodes));
    let shape = Shape {
        users: args.users,
        items: args.items,
    };
    let (shop_key, hostile_key, limited_key) = setup(&node, shape).await?;
    eprintln!(
        "soak: {} of traffic at {} events/s on {} node(s), kill -9 every {:?}, jobs' budget {} \
         rows/s a node (0: none), logs in {}",
        humantime::format_duration(args.duration),
        args.rate,
        node.0.len(),
        args.kill_every,
        pace,
        root.display()
    );

    let started = Instant::now();
    let seen = Arc::new(Seen {
        started,
        duration: args.duration,
        classes: Mutex::default(),
        leaks: Mutex::default(),
    });
    let ctx = Arc::new(Ctx {
        node: node.clone(),
        seen: seen.clone(),
        writes: Arc::default(),
        stop: Arc::default(),
        shape,
        shop_key: shop_key.clone(),
        hostile_key,
        limited_key,
    });
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis() as i64;
    // Every event its own millisecond, from two hours ago on (3.6M events fit in an hour).
    let clock = Arc::new(AtomicI64::new(now_ms - 2 * 3_600_000));
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let sending = Sending {
            per_s: f64::from(args.rate) / WRITERS as f64,
            twice: args.in_flight_retries,
            give_up: args.give_up,
        };
        tasks.push(tokio::spawn(writer(
            ctx.clone(),
            sending,
            args.seed + w as u64,
            clock.clone(),
        )));
    }
    for r in 0..2 {
        tasks.push(tokio::spawn(reader(ctx.clone(), args.seed + 100 + r)));
    }
    tasks.push(tokio::spawn(catalog_updates(ctx.clone(), args.seed + 200)));
    tasks.push(tokio::spawn(attacker(ctx.clone(), "h1".to_owned())));
    let slow = {
        let ctx = ctx.clone();
        std::thread::spawn(move || slow_clients(ctx))
    };

    // The faults, the strategy change and the samples, on this task.
    let mut rng = StdRng::seed_from_u64(args.seed + 300);
    let mut next_kill = (!args.kill_every.is_zero())
        .then(|| started + args.kill_every.mul_f64(rng.random::<f64>()));
    let mut period = 0u32;
    let mut strategy_changed = None;
    let mut backup = None;
    let mut samples = Vec::new();
    let mut last_sample = started;
    let bar = crate::report::bar("soak", args.duration.as_secs());
    while started.elapsed() < args.duration {
        tokio::time::sleep(Duration::from_millis(100)).await;
        for n in &node.0 {
            n.check_alive()?;
        }
        let now = Instant::now();
        if let Some(at) = next_kill
            && now >= at
        {
            // One node at a time, in turn.
            let node = node.clone();
            let victim = period as usize % node.0.len();
            tokio::task::spawn_blocking(move || node.0[victim].kill_and_restart()).await??;
            period += 1;
            let start = started + args.kill_every * period;
            next_kill = Some(start + args.kill_every.mul_f64(rng.random::<f64>()));
        }
        if strategy_changed.is_none() && started.elapsed() >= args.duration / 3 {
            let http = client(Duration::from_secs(30));
            loop {
                let url = format!("{}/1/strategies/personalization", node.url(period as usize));
                let body = CHANGED_STRATEGY.json();
                match call(
                    &http,
                    reqwest::Method::POST,
                    &url,
                    (SHOP, &shop_key),
                    Some(body),
                    &[],
                )
                .await
                {
                    Outcome::Ok(_) => break,
                    Outcome::Client(s, b) => bail!("the strategy change: {s} {b}"),
                    Outcome::Failed(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            }
            strategy_changed = Some(started.elapsed());
        }
        if emulator.is_none() && backup.is_none() && started.elapsed() >= args.duration / 2 {
            backup = Some(tokio::spawn(take_backup(ctx.clone())));
        }
        if now.duration_since(last_sample) >= Duration::from_secs(1) {
            last_sample = now;
            samples.extend(sample(node.0[0].pid(), &data, started.elapsed()));
            bar.set_position(started.elapsed().as_secs());
        }
    }
    bar.finish_and_clear();
    ctx.stop.store(true, Ordering::SeqCst);
    eprintln!("soak: traffic stopped; writers finish their last batches");
    for task in tasks {
        task.await?;
    }
    let (slow_opened, slow_closed) = slow.join().expect("the slow clients' thread");
    let backup = match backup {
        Some(task) => Some(task.await??),
        None => None,
    };
    let seen_check = check_seen(&ctx).await?;
    let recompute = wait_for_recompute(&node, &shop_key, Duration::from_secs(600)).await?;
    node.settle().await;
    let traffic = started.elapsed();
    let mut stopped = Vec::new();
    for n in &node.0 {
        stopped.push(n.stop()?);
    }

    // The checker: the store, read here.
    eprintln!("soak: checking the store");
    let store: Arc<dyn penchant_store::Store> = match &emulator {
        None => Arc::new(penchant_store_rocksdb::RocksStore::open(
            &data,
            Default::default(),
        )?),
        Some(emulator) => Arc::new(
            penchant_store_bigtable::BigtableStore::connect(emulator.config("soak_")).await?,
        ),
    };
    let acknowledged = ctx
        .writes
        .acknowledged
        .lock()
        .expect("not poisoned")
        .clone();
    let abandoned = ctx.writes.abandoned.lock().expect("not poisoned").clone();
    let reference = Reference {
        users: shape.users,
        acknowledged: &acknowledged,
        abandoned: &abandoned,
        scoring: match strategy_changed {
            Some(_) => CHANGED_STRATEGY,
            None => FIRST_STRATEGY,
        },
        light_profiles: args.profiles_checked,
        kills: node.kills(),
        traffic: args.duration,
        in_flight: (WRITERS * 2 * BATCH) as u64,
    };
    let check = check::check(store, &reference).await?;
    let restored = match &backup {
        Some(b) => Some(check_backup(b, &root, shape, &ctx.writes, &check.abandoned_stored).await?),
        None => None,
    };

    // The report.
    let writes = &ctx.writes;
    let acknowledged = acknowledged.len();
    let mut summary = Table::new("soak: events and faults", &["what", "value"]);
    let mut row = |what: &str, value: Cell| summary.row(vec![what.into(), value]);
    row("traffic (s)", Cell::fixed(traffic.as_secs_f64(), 0));
    row("events acknowledged", Cell::int(acknowledged as f64));
    row(
        "acknowledged events/s",
        Cell::fixed(acknowledged as f64 / args.duration.as_secs_f64(), 0),
    );
    row(
        "batches sent twice at once",
        Cell::int(writes.twice_at_once.load(Ordering::SeqCst) as f64),
    );
    row(
        "attempts retried after a failure",
        Cell::int(writes.retried_after_failure.load(Ordering::SeqCst) as f64),
    );
    row(
        "batches given up after a failure (never retried)",
        Cell::int(check.abandoned_batches as f64),
    );
    row(
        "their events stored (so counted)",
        Cell::int(check.abandoned_stored.len() as f64),
    );
    row(
        "given-up batches stored in part",
        Cell::int(check.abandoned_in_part as f64),
    );
    row(
        "ingestions the nodes left unfinished",
        Cell::int(check.unfinished as f64),
    );
    row("raw event rows read", Cell::int(check.rows as f64));
    row("acknowledged events lost", Cell::int(check.lost as f64));
    row("events stored twice", Cell::int(check.doubled as f64));
    row("rows of no event sent", Cell::int(check.phantom as f64));
    row(
        "rows or cells unreadable",
        Cell::int(check.unreadable as f64),
    );
    row("users with counted events", Cell::int(check.users as f64));
    row("per-day aggregate rows read", Cell::int(check.days as f64));
    row(
        "aggregate counts short / past the events",
        format!("{} / {}", check.counts_short, check.counts_past).into(),
    );
    row(
        "profiles scored by the checker and compared",
        Cell::int(check.profiles as f64),
    );
    row(
        "profile mismatches",
        Cell::int(check.profile_mismatches as f64),
    );
    row(
        "profiles of users without a counted event",
        Cell::int(check.phantom_profiles as f64),
    );
    row(
        "trending counts of the events / short (the kills may lose) / past",
        format!(
            "{} / {} ({}) / {}",
            check.trending, check.trending_short, check.trending_bound, check.trending_past
        )
        .into(),
    );
    row("nodes", Cell::int(node.0.len() as f64));
    let timed_out: u64 = seen
        .classes
        .lock()
        .expect("not poisoned")
        .values()
        .map(|c| c.timed_out_outside)
        .sum();
    row(
        "requests timed out outside restarts",
        Cell::int(timed_out as f64),
    );
    row(
        "seen filters checked (light users)",
        Cell::int(check.seen_users as f64),
    );
    row(
        "items of counted events missing from the seen filter",
        Cell::int(check.unseen as f64),
    );
    row(
        "recommendations checked for seen items (users)",
        Cell::int(seen_check.users as f64),
    );
    row(
        "seen items recommended",
        Cell::int(seen_check.violations.len() as f64),
    );
    if let (Some(b), Some(r)) = (&backup, &restored) {
        row("backup taken at (s)", Cell::fixed(b.at.as_secs_f64(), 0));
        row(
            "backup: events acknowledged before / by its answer",
            format!("{} / {}", b.before, b.by_answer).into(),
        );
        row("backup restored: users checked", Cell::int(r.users as f64));
        row(
            "backup restored: events missing / counted twice",
            format!("{} / {}", r.missing, r.doubled).into(),
        );
    }
    row("kills survived", Cell::int(node.kills() as f64));
    row(
        "deaths not by the harness",
        Cell::int(node.unexpected_deaths() as f64),
    );
    row(
        "strategy changed at (s)",
        Cell::or_empty(strategy_changed.map(|d| d.as_secs_f64()), |v| {
            Cell::fixed(v, 0)
        }),
    );
    row("recompute's end state", recompute.as_str().into());
    row(
        "slow clients opened / closed by the server",
        format!("{slow_opened} / {slow_closed}").into(),
    );
    let stops: Vec<String> = stopped.iter().map(ToString::to_string).collect();
    row("final stop", stops.join(", ").into());
    report.table(summary);

    let classes = seen.classes.lock().expect("not poisoned");
    let mut by_class = Table::new(
        "soak: requests by class",
        &[
            "class",
            "2xx",
            "4xx expected",
            "4xx unexpected",
            "failed in restarts",
            "failed outside",
            "timed out outside",
            "p50 ms",
            "p99 ms",
        ],
    );
    for (name, c) in classes.iter() {
        let mut all = histogram();
        for h in c.over_time.values() {
            all.add(h).expect("same bounds");
        }
        by_class.row(vec![
            (*name).into(),
            Cell::int(c.ok as f64),
            Cell::int(c.expected_4xx as f64),
            Cell::int(c.unexpected_4xx as f64),
            Cell::int(c.failed_in_window as f64),
            Cell::int(c.failed_outside as f64),
            Cell::int(c.timed_out_outside as f64),
            ms(&all, 0.5),
            ms(&all, 0.99),
        ]);
        if *name == "B oversized body" {
            by_class.note(format!(
                "{name}: 499 counts requests whose {CLOSED_WHILE_SENDING}"
            ));
        }
        for e in &c.examples {
            by_class.note(format!("{name}: {e}"));
        }
    }
    report.table(by_class);

    let mut over_time = Table::new(
        "soak: p50 / p99 (ms) of tenant A by tenth of the run",
        &["tenth", "A events", "A profile", "A recommend", "A rerank"],
    );
    for tenth in 0..10 {
        let mut cells: Vec<Cell> = vec![Cell::int(tenth as f64)];
        for class in ["A events", "A profile", "A recommend", "A rerank"] {
            cells.push(
                match classes.get(class).and_then(|c| c.over_time.get(&tenth)) {
                    Some(h) => format!(
                        "{:.1} / {:.1}",
                        h.value_at_quantile(0.5) as f64 / 1000.0,
                        h.value_at_quantile(0.99) as f64 / 1000.0
                    )
                    .into(),
                    None => "".into(),
                },
            );
        }
        over_time.row(cells);
    }
    report.table(over_time);

    let mut isolation = Table::new(
        "soak: tenant A's reads while B attacks and while it does not (outside restarts)",
        &["class", "p99 ms, B off", "p99 ms, B on", "ratio"],
    );
    let mut worst_ratio: f64 = 0.0;
    for class in ["A profile", "A recommend", "A rerank"] {
        let Some(c) = classes.get(class) else {
            continue;
        };
        let off = c
            .without_b
            .as_ref()
            .map(|h| h.value_at_quantile(0.99) as f64 / 1000.0);
        let on = c
            .with_b
            .as_ref()
            .map(|h| h.value_at_quantile(0.99) as f64 / 1000.0);
        let ratio = on.zip(off).map(|(on, off)| on / off);
        worst_ratio = worst_ratio.max(ratio.unwrap_or(0.0));
        isolation.row(vec![
            class.into(),
            Cell::or_empty(off, |v| Cell::fixed(v, 2)),
            Cell::or_empty(on, |v| Cell::fixed(v, 2)),
            Cell::or_empty(ratio, |v| Cell::times(v, 2)),
        ]);
    }
    report.table(isolation);

    let mut resources = Table::new(
        "soak: the node's resources over time",
        &["at (s)", "RSS MiB", "threads", "open fds", "disk MiB"],
    );
    let step = (samples.len() / 10).max(1);
    for s in samples.iter().step_by(step) {
        resources.row(vec![
            Cell::int(s.at.as_secs() as f64),
            Cell::fixed(s.rss_kib as f64 / 1024.0, 0),
            Cell::int(s.threads as f64),
            Cell::int(s.fds as f64),
            Cell::fixed(s.disk_bytes as f64 / (1 << 20) as f64, 0),
        ]);
    }
    report.table(resources);

    // The verdict.
    // On the embedded store a batch is one write: stored whole or not at all.
    let mut failures = check.failures(args.store == SoakStore::Embedded);
    if !seen_check.violations.is_empty() {
        failures.push(format!(
            "items the user had seen were recommended: {}",
            first_few(&seen_check.violations, "; ")
        ));
    }
    if let Some(r) = &restored
        && (r.missing > 0 || r.doubled > 0)
    {
        failures.push(format!(
            "the backup restores {} events short of its moment and {} counted twice ({})",
            r.missing,
            r.doubled,
            r.examples.join("; ")
        ));
    }
    let leaks = seen.leaks.lock().expect("not poisoned");
    if !leaks.is_empty() {
        failures.push(format!(
            "tenant B read or wrote with a 2xx: {}",
            leaks.join("; ")
        ));
    }
    for (name, c) in classes.iter() {
        if c.failed_outside > 0 || c.timed_out_outside > 0 || c.unexpected_4xx > 0 {
            failures.push(format!(
                "{name}: {} failed outside restarts, {} timed out outside restarts, {} unexpected \
                 4xx ({})",
                c.failed_outside,
                c.timed_out_outside,
                c.unexpected_4xx,
                c.examples.join("; ")
            ));
        }
    }
    // Each node lifetime answers the rate-limited key's first queries (404: no such user), then
    // 429s only.
    if let Some(c) = classes.get("B rate-limited key") {
        let allowed = RATE_LIMIT * (node.0.len() as u64 + node.kills());
        let answered = c.statuses.get(&404).copied().unwrap_or(0);
        let limited = c.statuses.get(&429).copied().unwrap_or(0);
        if answered > allowed || (answered + limited > allowed && limited == 0) {
            failures.push(format!(
                "the key limited to {RATE_LIMIT} queries an hour was answered {answered} times \
                 and refused {limited} over {} node lifetimes",
                node.0.len() as u64 + node.kills()
            ));
        }
    }
    let deaths = node.unexpected_deaths();
    if deaths > 0 {
        failures.push(format!("the node died {deaths} times by itself"));
    }
    if recompute != "done" {
        failures.push(format!("the strategy's recompute ended {recompute}"));
    }
    if let Some(bad) = stopped.iter().find(|s| !s.success()) {
        failures.push(format!("a node did not stop cleanly: {bad}"));
    }
    if slow_closed < slow_opened {
        failures.push(format!(
            "{} of {slow_opened} idle half-sent requests were not closed by the server",
            slow_opened - slow_closed
        ));
    }
    // Isolation and memory are judged over long runs only: a minute holds too few samples.
    if args.duration >= Duration::from_secs(300) {
        if worst_ratio > 1.5 {
            failures.push(format!(
                "tenant A's p99 with B attacking is {worst_ratio:.2}x that without"
            ));
        }
        if let Some(growth) = rss_growth(&samples)
            && growth > 1.10
        {
            failures.push(format!(
                "RSS grew {:.0}% over the last half of the run",
                (growth - 1.0) * 100.0
            ));
        }
    }
    if failures.is_empty() {
        eprintln!("soak: every check passed");
        Ok(())
    } else {
        bail!("the soak failed:\n- {}", failures.join("\n- "))
    }
}

/// The first five of a list, joined.
fn first_few(items: &[String], separator: &str) -> String {
    items[..items.len().min(5)].join(separator)
}

fn ms(h: &Histogram<u64>, q: f64) -> Cell {
    if h.is_empty() {
        "".into()
    } else {
        Cell::fixed(h.value_at_quantile(q) as f64 / 1000.0, 2)
    }
}

/// The largest RSS of the last quarter of the run over that of the second quarter.
fn rss_growth(samples: &[Sample]) -> Option<f64> {
    let n = samples.len();
    if n < 8 {
        return None;
    }
    let max = |s: &[Sample]| s.iter().map(|s| s.rss_kib).max().unwrap_or(0) as f64;
    let second = max(&samples[n / 4..n / 2]);
    let last = max(&samples[3 * n / 4..]);
    (second > 0.0).then(|| last / second)
}

/// Per user, per (kind, facet): value → count.
type Counts = BTreeMap<(u8, &'static str), BTreeMap<String, u64>>;

/// What these events add up to, per user.
fn reference(events: &[Sent]) -> BTreeMap<u32, Counts> {
    let mut reference: BTreeMap<u32, Counts> = BTreeMap::new();
    for e in events {
        let user = reference.entry(e.user).or_default();
        *user
            .entry((e.kind, "brand"))
            .or_default()
            .entry(brand(e.item))
            .or_default() += 1;
        *user
            .entry((e.kind, "category"))
            .or_default()
            .entry(category(e.item))
            .or_default() += 1;
    }
    reference
}

/// A user's counts as the store holds them, in the reference's shape (only its qualifiers).
async fn counts_of(
    engine: &penchant_engine::Engine,
    token: &str,
    like: &Counts,
) -> anyhow::Result<Counts> {
    use penchant_engine::events::{EventType, qualifier};
    let types = [EventType::View, EventType::Click, EventType::Conversion];
    let stored = engine.aggregates().counts(SHOP, token).await?;
    Ok(like
        .keys()
        .map(|&(kind, facet)| {
            let q = qualifier(types[kind as usize], KINDS[kind as usize].1, facet);
            ((kind, facet), stored.get(&q).cloned().unwrap_or_default())
        })
        .collect())
}

/// The events of `got` short of `low` and past `high`, value by value.
fn short_and_past(got: &Counts, low: Option<&Counts>, high: &Counts) -> (u64, u64) {
    let count = |c: Option<&Counts>, key, value: &str| {
        c.and_then(|c| c.get(key))
            .and_then(|v: &BTreeMap<String, u64>| v.get(value))
            .copied()
            .unwrap_or(0)
    };
    let mut short = 0;
    for (key, values) in low.into_iter().flatten() {
        for (value, &min) in values {
            short += min.saturating_sub(count(Some(got), key, value));
        }
    }
    let mut past = 0;
    for (key, values) in got {
        for (value, &n) in values {
            past += n.saturating_sub(count(Some(high), key, value));
        }
    }
    (short, past)
}

/// A backup taken while traffic runs, and how many events were acknowledged around it.
#[derive(Debug)]
struct Backup {
    path: PathBuf,
    at: Duration,
    before: usize,
    by_answer: usize,
}

/// `POST /1/backups` (retried through kills until answered).
async fn take_backup(ctx: Arc<Ctx>) -> anyhow::Result<Backup> {
    let http = client(Duration::from_secs(120));
    let at = ctx.seen.started.elapsed();
    let before = ctx.writes.acknowledged.lock().expect("not poisoned").len();
    for n in 0.. {
        let url = format!("{}/1/backups", ctx.node.url(n));
        match call(
            &http,
            reqwest::Method::POST,
            &url,
            (SHOP, ROOT_KEY),
            None,
            &[],
        )
        .await
        {
            Outcome::Ok(v) => {
                let by_answer = ctx.writes.acknowledged.lock().expect("not poisoned").len();
                let path = PathBuf::from(v["path"].as_str().context("no path")?);
                return Ok(Backup {
                    path,
                    at,
                    before,
                    by_answer,
                });
            }
            Outcome::Client(s, b) => bail!("the backup: {s} {b}"),
            Outcome::Failed(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
    unreachable!("an endless loop")
}

/// What a restored backup holds.
#[derive(Debug, Default)]
struct Restored {
    users: usize,
    missing: u64,
    doubled: u64,
    examples: Vec<String>,
}

/// Restore the backup into a folder of its own and compare each user's counts with the events
/// acknowledged before it was asked for (all must be there) and with every event acknowledged
/// (none may be there twice).
async fn check_backup(
    backup: &Backup,
    root: &Path,
    shape: Shape,
    writes: &Writes,
    abandoned_stored: &[Sent],
) -> anyhow::Result<Restored> {
    let into = root.join("restored");
    penchant_engine::backup::restore(&backup.path, |target| {
        (target == "default").then(|| into.clone())
    })?;
    let store = penchant_store_rocksdb::RocksStore::open(&into, Default::default())?;
    let engine =
        penchant_engine::Engine::open(Arc::new(store), penchant_engine::EngineConfig::default())
            .await?;
    engine.repair(Duration::ZERO).await?;
    let mut acknowledged = writes.acknowledged.lock().expect("not poisoned").clone();
    let before = reference(&acknowledged[..backup.before]);
    // Events of given-up batches that the node stored may be in the backup, or not.
    acknowledged.extend_from_slice(abandoned_stored);
    let all = reference(&acknowledged);
    let mut restored = Restored::default();
    let bar = crate::report::bar("soak: the restored backup's users", all.len() as u64);
    for (user, high) in &all {
        let token = user_token(shape.users, *user);
        let got = counts_of(&engine, &token, high).await?;
        let (short, past) = short_and_past(&got, before.get(user), high);
        restored.users += 1;
        restored.missing += short;
        restored.doubled += past;
        if (short > 0 || past > 0) && restored.examples.len() < 5 {
            restored
                .examples
                .push(format!("{token}: {short} missing, {past} twice"));
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(restored)
}

/// What the seen-filter check found.
#[derive(Debug, Default)]
struct SeenCheck {
    users: usize,
    violations: Vec<String>,
}

/// Light users' recommended-for-you must hold no item the user viewed, clicked or bought (the
/// default seen settings): asked of 200 light users once the traffic stopped.
async fn check_seen(ctx: &Ctx) -> anyhow::Result<SeenCheck> {
    let mut items: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for e in ctx.writes.acknowledged.lock().expect("not poisoned").iter() {
        if e.user < ctx.shape.users {
            items.entry(e.user).or_default().push(e.item);
        }
    }
    let http = client(Duration::from_secs(30));
    let mut check = SeenCheck::default();
    for (n, (user, had)) in items.iter().step_by((items.len() / 200).max(1)).enumerate() {
        let token = user_token(ctx.shape.users, *user);
        let requests: Vec<Value> = ["recommended-for-you"]
            .iter()
            .map(|model| {
                json!({"indexName": INDEX, "model": model, "threshold": 0,
                "maxRecommendations": 30, "queryParameters": {"userToken": token}})
            })
            .collect();
        let body = serde_json::to_vec(&json!({ "requests": requests }))?;
        let url = format!("{}/1/indexes/*/recommendations", ctx.node.url(n));
        let answer = loop {
            match call(
                &http,
                reqwest::Method::POST,
                &url,
                (SHOP, &ctx.shop_key),
                Some(body.clone()),
                &[],
            )
            .await
            {
                Outcome::Ok(v) => break v,
                Outcome::Client(s, b) => {
                    check.violations.push(format!("{token}: {s} {}", trim(&b)));
                    break Value::Null;
                }
                Outcome::Failed(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        };
        check.users += 1;
        for result in answer["results"].as_array().into_iter().flatten() {
            for hit in result["hits"].as_array().into_iter().flatten() {
                let id = hit["objectID"].as_str().unwrap_or("");
                if let Some(item) = id.strip_prefix('i').and_then(|i| i.parse::<u32>().ok())
                    && had.contains(&item)
                {
                    check
                        .violations
                        .push(format!("{token}: {id} ({})", result["answeredBy"]));
                }
            }
        }
    }
    Ok(check)
}
