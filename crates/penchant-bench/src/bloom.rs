//! `penchant bench bloom`: Penchant's blocked Bloom filter beside the `fastbloom` crate, same
//! bits per key, same keys, same run; then the seed's case, one user's 2^17-bit "seen" filter
//! (10,000 seen items, 50,000 candidates checked in bulk), three ways: the `penchant-bloom`
//! crate in-process, Penchant's HTTP API on loopback, and the Coffee Meets Bagel seed's Redis
//! approach (SETBIT pipeline to add, GET of the whole filter and a client-side check) against a
//! `redis-server` child on loopback.
//!
//! Keys are hashed once up front and both filters are probed by hash, so the first table
//! compares the filters themselves. The workloads take turns for three rounds; the best round
//! counts.

use std::collections::HashSet;
use std::f64::consts::LN_2;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::bail;
use penchant_bloom::{BloomFilter, key_hash};
use penchant_store::Store;
use penchant_store_rocksdb::{RocksOptions, RocksStore};
use rand::{Rng, SeedableRng};

use crate::redis::{Persistence, RedisServer, Reply, Resp, encode_command, find_on_path};
use crate::report::bar;
use crate::{Bench, Cell, CommonArgs, InProcess, Report, Scale, Table, rate};

const ROUNDS: usize = 3;

/// `penchant-bench bloom`'s flags.
#[derive(Debug, clap::Args)]
pub struct BloomBenchArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Bits per key for both filters (10 ≈ 1% false positives).
    #[arg(long, default_value_t = 10)]
    bits_per_key: u64,
    /// Lookups timed per measurement (capped by the key count for small filters ×10)
    /// [default by scale: small 100,000, medium and large 4,000,000].
    #[arg(long)]
    lookups: Option<usize>,
    /// Skip the 128 MB filter (it takes a few seconds and 2 GB of memory); `--scale small`
    /// skips it too.
    #[arg(long)]
    small_only: bool,
    /// The `redis-server` binary for the seed's Redis approach (default: `redis-server` on
    /// PATH; `scripts/redis-server.sh` installs one and prints its path).
    #[arg(long)]
    redis_server: Option<PathBuf>,
}

impl Bench for BloomBenchArgs {
    const NAME: &'static str = "bloom";

    fn common(&self) -> &CommonArgs {
        &self.common
    }

    fn run(self, report: &mut Report) -> anyhow::Result<()> {
        run(self, report)
    }
}

/// Nanoseconds per lookup of one run, and its hit count.
fn ns_per_key(lookups: usize, run: impl FnOnce() -> usize) -> (f64, usize) {
    let start = Instant::now();
    let hits = black_box(run());
    (start.elapsed().as_nanos() as f64 / lookups as f64, hits)
}

fn run(args: BloomBenchArgs, report: &mut Report) -> anyhow::Result<()> {
    let scale = args.common.scale;
    let lookups = args
        .lookups
        .unwrap_or(scale.pick(100_000, 4_000_000, 4_000_000));
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut sizes = vec![("16 KB", 16u64 << 10)];
    if !args.small_only && scale != Scale::Small {
        sizes.push(("128 MB", 128 << 20));
    }
    let mut table = Table::new(
        format!(
            "bloom: nanoseconds per lookup, Penchant's filter beside fastbloom, {} bits per key, \
             {} lookups, best of {ROUNDS} rounds",
            args.bits_per_key,
            rate(lookups as f64)
        ),
        &[
            "filter",
            "lookup",
            "penchant ns",
            "fastbloom ns",
            "ratio",
            "penchant fp",
            "fastbloom fp",
        ],
    );
    for (name, bytes) in sizes {
        let progress = bar(format!("bloom: {name} filter"), 1 + ROUNDS as u64);
        let bits = bytes * 8;
        let n = (bits / args.bits_per_key) as usize;
        let members: Vec<u64> = (0..n).map(|_| rng.random()).collect();
        let queries: Vec<u64> = (0..lookups).map(|_| rng.random()).collect();

        let mut ours = BloomFilter::with_bytes(bytes, n as u64)?;
        let mut theirs = fastbloom::BloomFilter::with_num_bits(bits as usize).expected_items(n);
        for h in &members {
            ours.insert_hash(*h);
            theirs.insert_hash(*h);
        }
        anyhow::ensure!(
            members.iter().all(|h| ours.contains_hash(*h)),
            "false negative"
        );
        progress.inc(1);

        // The workloads take turns, ROUNDS times; the best round of each counts.
        let (mut p_single, mut f_single, mut p_batch) =
            (f64::INFINITY, f64::INFINITY, f64::INFINITY);
        let (mut p_hits, mut f_hits) = (0, 0);
        let mut out = Vec::new();
        for _ in 0..ROUNDS {
            let (ns, hits) = ns_per_key(queries.len(), || {
                queries.iter().filter(|h| ours.contains_hash(**h)).count()
            });
            (p_single, p_hits) = (p_single.min(ns), hits);
            let (ns, hits) = ns_per_key(queries.len(), || {
                queries.iter().filter(|h| theirs.contains_hash(**h)).count()
            });
            (f_single, f_hits) = (f_single.min(ns), hits);
            let (ns, _) = ns_per_key(queries.len(), || {
                ours.contains_many_hashes(&queries, &mut out);
                out.iter().filter(|x| **x).count()
            });
            p_batch = p_batch.min(ns);
            progress.inc(1);
        }
        let fp = |hits: usize| 100.0 * hits as f64 / queries.len() as f64;
        for (lookup, p, f) in [
            ("single", p_single, f_single),
            ("batched (fastbloom: loop)", p_batch, f_single),
        ] {
            table.row(vec![
                name.into(),
                lookup.into(),
                Cell::fixed(p, 2),
                Cell::fixed(f, 2),
                Cell::fixed(p / f, 2),
                Cell::percent(fp(p_hits), 4),
                Cell::percent(fp(f_hits), 4),
            ]);
        }
        table.note(format!(
            "{name}: penchant {} probes, estimated fp {:.4}%; fastbloom {} hashes",
            ours.probes(),
            100.0 * ours.estimated_fp_rate(),
            theirs.num_hashes()
        ));
    }
    report.table(table);

    seen_table(&args, report)
}

// ---------------------------------------------------------------------------------------------
// The seen filter, three ways.

/// Bits of one user's seen filter (16 KB).
const SEEN_BITS: u64 = 1 << 17;
const SEEN_ITEMS: usize = 10_000;
const CANDIDATES: usize = 50_000;
/// objectIDs per `madd` request.
const MADD_BATCH: usize = 1000;
const APP: &str = "BENCH";

/// One approach's best round.
#[derive(Debug, Clone, Copy)]
struct SeenRow {
    add_ms: f64,
    check_ms: f64,
    unseen: usize,
}

impl SeenRow {
    fn best(self, other: SeenRow) -> SeenRow {
        SeenRow {
            add_ms: self.add_ms.min(other.add_ms),
            check_ms: self.check_ms.min(other.check_ms),
            unseen: other.unseen,
        }
    }
}

fn ms(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e3
}

/// Candidates `item0`..`item49999`; every fifth one is seen (10,000), the other 40,000 are not.
struct Workload {
    candidates: Vec<String>,
    seen: Vec<String>,
    /// Candidates that are not seen, for the false-negative check.
    truly_unseen: HashSet<String>,
}

fn workload() -> Workload {
    let candidates: Vec<String> = (0..CANDIDATES).map(|i| format!("item{i}")).collect();
    let step = CANDIDATES / SEEN_ITEMS;
    let seen: Vec<String> = candidates.iter().step_by(step).cloned().collect();
    let seen_set: HashSet<&String> = seen.iter().collect();
    let truly_unseen = candidates
        .iter()
        .filter(|c| !seen_set.contains(c))
        .cloned()
        .collect();
    Workload {
        candidates,
        seen,
        truly_unseen,
    }
}

fn seen_table(args: &BloomBenchArgs, report: &mut Report) -> anyhow::Result<()> {
    let work = workload();
    let k = classic_k();
    let redis_path = match &args.redis_server {
        Some(path) => Some(path.clone()),
        None => find_on_path("redis-server"),
    };
    let mut table = Table::new(
        format!(
            "bloom: a seen filter of 2^17 bits (16 KB), {} seen items, {} candidates ({} unseen), \
             best of {ROUNDS} rounds",
            rate(work.seen.len() as f64),
            rate(work.candidates.len() as f64),
            rate(work.truly_unseen.len() as f64),
        ),
        &[
            "approach",
            "add 10,000 seen (ms)",
            "check 50,000 candidates (ms)",
            "unseen found",
        ],
    );
    table.note(format!(
        "Penchant HTTP: madd in {} requests of {MADD_BATCH} objectIDs, one `unseen` request; \
         fsynced WAL (RocksDB)",
        work.seen.len().div_ceil(MADD_BATCH)
    ));
    table.note(format!(
        "Redis: {k} bits per item (classic k-hash filter, double hashing), one pipeline of {} \
         SETBIT; check = GET of the filter + client-side test; no persistence",
        rate((work.seen.len() * k as usize) as f64)
    ));

    let dir = tempfile::tempdir()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let progress = bar("bloom: seen filter, three approaches", ROUNDS as u64);
    let (inproc, http, redis) = runtime.block_on(async {
        // Set up each side once; failures on one side leave the others' rows.
        let http = PenchantHttp::start(dir.path()).await;
        let redis = redis_path
            .as_deref()
            .map(|path| RedisServer::start(path, Persistence::None, None));
        let mut redis = redis.map(|r| r.and_then(|server| Ok((server.connect()?, server))));

        let (mut inproc, mut http_row, mut redis_row) = (None, None, None);
        let (mut http_err, mut redis_err) = (None, None);
        for round in 0..ROUNDS {
            // The workloads take turns; the best round of each counts.
            let row = seen_in_process(&work)?;
            inproc = Some(inproc.map_or(row, |best: SeenRow| best.best(row)));

            match &http {
                Ok(client) if http_err.is_none() => {
                    match client
                        .seen_round(&work, &format!("bench-user-{round}"))
                        .await
                    {
                        Ok(row) => http_row = Some(http_row.map_or(row, |b: SeenRow| b.best(row))),
                        Err(e) => http_err = Some(format!("{e:#}")),
                    }
                }
                Err(e) if http_err.is_none() => http_err = Some(format!("{e:#}")),
                _ => {}
            }

            match &mut redis {
                Some(Ok((conn, _server))) if redis_err.is_none() => {
                    match redis_round(conn, &work, k, &format!("seen:bench-user-{round}")) {
                        Ok(row) => {
                            redis_row = Some(redis_row.map_or(row, |b: SeenRow| b.best(row)))
                        }
                        Err(e) => redis_err = Some(format!("{e:#}")),
                    }
                }
                Some(Err(e)) if redis_err.is_none() => redis_err = Some(format!("{e:#}")),
                _ => {}
            }
            progress.inc(1);
        }
        // The redis-server child is killed here (RedisServer's Drop).
        drop(redis);
        let http = http_row.ok_or_else(|| http_err.unwrap_or_default());
        let redis = redis_path.map(|_| redis_row.ok_or_else(|| redis_err.unwrap_or_default()));
        anyhow::Ok((inproc.expect("ROUNDS > 0"), http, redis))
    })?;
    drop(progress);

    let mut line = |name: &str, row: &Result<SeenRow, String>| match row {
        Ok(r) => table.row(vec![
            name.into(),
            Cell::fixed(r.add_ms, 3),
            Cell::fixed(r.check_ms, 3),
            Cell::int(r.unseen as f64),
        ]),
        Err(e) => {
            table.row(vec![name.into(), "failed".into(), Cell::Empty, Cell::Empty]);
            table.note(format!("{name} failed: {e}"));
        }
    };
    line("penchant-bloom in-process", &Ok(inproc));
    line("Penchant HTTP API (loopback)", &http);
    let redis_name = "Redis SETBIT pipeline + GET (loopback, the seed's approach)";
    match &redis {
        Some(row) => line(redis_name, row),
        None => {
            table.row(vec![
                redis_name.into(),
                "skipped".into(),
                Cell::Empty,
                Cell::Empty,
            ]);
            table.note(
                "Redis skipped: no redis-server on PATH; run `scripts/redis-server.sh` or pass \
                 --redis-server \"$(scripts/redis-server.sh)\"",
            );
        }
    }
    if let (Ok(h), Some(Ok(r))) = (&http, &redis) {
        table.note(format!(
            "Redis check / Penchant HTTP check: {:.2}x ({:.3} ms / {:.3} ms)",
            r.check_ms / h.check_ms,
            r.check_ms,
            h.check_ms
        ));
    }
    report.table(table);
    if let Err(e) = &http {
        bail!("Penchant HTTP API: {e}");
    }
    if let Some(Err(e)) = &redis {
        bail!("Redis: {e}");
    }
    Ok(())
}

/// The existing in-process measurement: `penchant-bloom`, hashing included.
fn seen_in_process(work: &Workload) -> anyhow::Result<SeenRow> {
    let start = Instant::now();
    let mut seen = BloomFilter::with_bytes(SEEN_BITS / 8, SEEN_ITEMS as u64)?;
    for item in &work.seen {
        seen.insert(item.as_bytes());
    }
    let add_ms = ms(start);
    let start = Instant::now();
    let hashes: Vec<u64> = work
        .candidates
        .iter()
        .map(|c| key_hash(c.as_bytes()))
        .collect();
    let mut out = Vec::new();
    seen.contains_many_hashes(&hashes, &mut out);
    let unseen: Vec<&String> = work
        .candidates
        .iter()
        .zip(&out)
        .filter(|(_, hit)| !**hit)
        .map(|(c, _)| c)
        .collect();
    let check_ms = ms(start);
    check_unseen(work, unseen.iter().map(|c| c.as_str()))?;
    Ok(SeenRow {
        add_ms,
        check_ms,
        unseen: unseen.len(),
    })
}

/// A Bloom filter has no false negatives: every candidate reported unseen must be unseen.
fn check_unseen<'a>(work: &Workload, unseen: impl Iterator<Item = &'a str>) -> anyhow::Result<()> {
    for c in unseen {
        anyhow::ensure!(
            work.truly_unseen.contains(c),
            "{c} was reported unseen but was added as seen"
        );
    }
    Ok(())
}

// ----- Penchant's HTTP API -----

/// Penchant's HTTP API, in this process.
struct PenchantHttp(InProcess);

impl PenchantHttp {
    async fn start(dir: &Path) -> anyhow::Result<Self> {
        let store: Arc<dyn Store> = Arc::new(RocksStore::open(dir, RocksOptions::default())?);
        Ok(Self(InProcess::start(store, APP).await?))
    }

    async fn post<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        body: &impl serde::Serialize,
    ) -> anyhow::Result<T> {
        self.0.post(path, body).await
    }

    async fn seen_round(&self, work: &Workload, user: &str) -> anyhow::Result<SeenRow> {
        #[derive(serde::Serialize)]
        struct ObjectIds<'a> {
            #[serde(rename = "objectIDs")]
            object_ids: &'a [String],
        }
        #[derive(serde::Deserialize)]
        struct Added {
            added: Vec<bool>,
        }
        #[derive(serde::Deserialize)]
        struct Unseen {
            #[serde(rename = "objectIDs")]
            object_ids: Vec<String>,
        }

        let start = Instant::now();
        for chunk in work.seen.chunks(MADD_BATCH) {
            let resp: Added = self
                .post(
                    &format!("/1/seen/users/{user}/madd"),
                    &ObjectIds { object_ids: chunk },
                )
                .await?;
            anyhow::ensure!(
                resp.added.len() == chunk.len(),
                "madd: {} results for {} objectIDs",
                resp.added.len(),
                chunk.len()
            );
        }
        let add_ms = ms(start);
        let start = Instant::now();
        let resp: Unseen = self
            .post(
                &format!("/1/seen/users/{user}/unseen"),
                &ObjectIds {
                    object_ids: &work.candidates,
                },
            )
            .await?;
        let check_ms = ms(start);
        check_unseen(work, resp.object_ids.iter().map(String::as_str))?;
        Ok(SeenRow {
            add_ms,
            check_ms,
            unseen: resp.object_ids.len(),
        })
    }
}

// ----- The seed's Redis approach -----

/// Hash functions of a classic Bloom filter of 2^17 bits sized for 10,000 items:
/// k = (m / n) ln 2, rounded (9).
fn classic_k() -> u32 {
    ((SEEN_BITS as f64 / SEEN_ITEMS as f64) * LN_2).round() as u32
}

/// The k bit positions of a key: double hashing h1 + i*h2 mod 2^17 on a 64-bit hash.
fn classic_positions(key: &[u8], k: u32) -> impl Iterator<Item = u64> {
    let h = key_hash(key);
    let (h1, h2) = (h & 0xffff_ffff, (h >> 32) | 1);
    (0..u64::from(k)).map(move |i| h1.wrapping_add(i.wrapping_mul(h2)) % SEEN_BITS)
}

/// Redis numbers bits from the most significant bit of each byte.
fn redis_bit(filter: &[u8], offset: u64) -> bool {
    filter
        .get((offset / 8) as usize)
        .is_some_and(|byte| byte & (0x80 >> (offset % 8)) != 0)
}

fn redis_round(conn: &mut Resp, work: &Workload, k: u32, key: &str) -> anyhow::Result<SeenRow> {
    // Add: one pipeline of SETBIT key offset 1, k per item.
    let start = Instant::now();
    let mut buf = Vec::with_capacity(work.seen.len() * k as usize * 48);
    let mut commands = 0;
    for item in &work.seen {
        for offset in classic_positions(item.as_bytes(), k) {
            encode_command(
                &mut buf,
                &[
                    b"SETBIT",
                    key.as_bytes(),
                    offset.to_string().as_bytes(),
                    b"1",
                ],
            );
            commands += 1;
        }
    }
    conn.pipeline(&buf, commands, |reply| match reply {
        Reply::Integer(0 | 1) => Ok(()),
        other => bail!("SETBIT: unexpected reply {other:?}"),
    })?;
    let add_ms = ms(start);

    // Check: GET the whole filter, test each candidate's k bits here.
    let start = Instant::now();
    let filter = match conn.command(&[b"GET", key.as_bytes()])? {
        Reply::Bulk(Some(bytes)) => bytes,
        other => bail!("GET {key}: unexpected reply {other:?}"),
    };
    let unseen: Vec<&String> = work
        .candidates
        .iter()
        .filter(|c| !classic_positions(c.as_bytes(), k).all(|o| redis_bit(&filter, o)))
        .collect();
    let check_ms = ms(start);
    anyhow::ensure!(
        filter.len() as u64 <= SEEN_BITS / 8,
        "GET {key}: {} bytes, more than the filter's",
        filter.len()
    );
    check_unseen(work, unseen.iter().map(|c| c.as_str()))?;
    Ok(SeenRow {
        add_ms,
        check_ms,
        unseen: unseen.len(),
    })
}
