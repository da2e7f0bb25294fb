//! `penchant bench residency`: moving an app between placement targets online. An app of `--users` users with a few events each is loaded through the engine's real
//! ingestion into the default target, then moved to the other target with the engine's move job
//! (dual-write, copy, verify, switch, drop), timed: rows/s and MB/s of the copy, and the move's
//! whole time (its three waits for every node to see a change included, `refresh + 2 s` each).
//! The reference, in the same run: a plain copy of the same rows (scan the old target, write the
//! new one) with no engine around it. Meanwhile a reader reads profiles as fast as it can; its
//! p50/p99 during the move stand beside the same reader's on an app that does not move, timed
//! just before. On the embedded store (two RocksDB folders) and, where one is found, on two
//! Bigtable emulators (informative: an in-memory test server).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use penchant_engine::events::{Event, EventType, Layout, Target};
use penchant_engine::jobs::JobState;
use penchant_engine::strategy::{EventScoring, FacetScoring, Strategy};
use penchant_engine::{Consistency, Engine, EngineConfig};
use penchant_store::{Mutation, PlacedStore, ReadRows, RowMutation, RowSet, Store, unit_range};
use penchant_store_rocksdb::{RocksOptions, RocksStore};

use crate::report::spinner;
use crate::{Bench, Cell, CommonArgs, Report, Table, rate};

const APP: &str = "MOVED";
const STILL: &str = "STILL";
const EVENTS_PER_USER: usize = 3;
const BATCH: usize = 500;

/// `penchant-bench residency`'s flags.
#[derive(Debug, clap::Args)]
pub struct ResidencyBenchArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Users of the moved app (3 events each) [default by scale: small 500, medium 20,000,
    /// large 200,000].
    #[arg(long)]
    users: Option<usize>,
    /// Users on the Bigtable emulators [default by scale: small 200, medium 2,000, large
    /// 20,000].
    #[arg(long)]
    emulator_users: Option<usize>,
    /// Skip the Bigtable emulators even if one is found.
    #[arg(long)]
    no_emulator: bool,
}

impl Bench for ResidencyBenchArgs {
    const NAME: &'static str = "residency";

    fn common(&self) -> &CommonArgs {
        &self.common
    }

    fn run(self, report: &mut Report) -> anyhow::Result<()> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        runtime.block_on(run(self, report))
    }
}

fn strategy() -> Strategy {
    Strategy {
        events_scoring: vec![EventScoring {
            event_name: "Viewed".into(),
            event_type: EventType::View,
            score: 10,
        }],
        facets_scoring: vec![FacetScoring {
            facet_name: "brand".into(),
            score: 10,
        }],
        personalization_impact: 50,
    }
}

fn events(users: usize, now: i64) -> Vec<Event> {
    (0..users * EVENTS_PER_USER)
        .map(|n| Event {
            event_type: EventType::View,
            event_subtype: None,
            event_name: "Viewed".into(),
            index: "items".into(),
            user_token: format!("u{:07}", n % users),
            authenticated_user_token: None,
            timestamp: now - 3_600_000 + (n / users) as i64,
            target: Target::Filters(vec![
                ("brand".into(), format!("b{}", n % 50)),
                ("color".into(), format!("c{}", n % 9)),
            ]),
            query_id: None,
            positions: None,
            object_data: None,
            value: None,
            currency: None,
        })
        .collect()
}

/// One backend's results.
struct Measured {
    name: &'static str,
    users: usize,
    rows: u64,
    bytes: u64,
    copy_secs: f64,
    move_secs: f64,
    plain_secs: f64,
    still: (f64, f64, usize),
    moving: (f64, f64, usize),
}

/// Read profiles of `app` until `stop`: (p50, p99 in ms, reads).
async fn reader(
    engine: Engine,
    app: &'static str,
    users: usize,
    stop: Arc<AtomicBool>,
) -> (f64, f64, usize) {
    let mut latencies = Vec::new();
    let mut n = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let user = format!("u{:07}", (n * 7919) % users);
        let started = Instant::now();
        let profile = engine.profile(app, &user, Consistency::Eventual).await;
        latencies.push(started.elapsed().as_secs_f64() * 1000.0);
        assert!(
            matches!(profile, Ok(Some(_))),
            "a profile read failed or missed during the move: {user}"
        );
        n += 1;
    }
    latencies.sort_by(f64::total_cmp);
    let at = |q: f64| {
        latencies
            .get(((latencies.len() as f64 * q) as usize).min(latencies.len().saturating_sub(1)))
            .copied()
            .unwrap_or(f64::NAN)
    };
    (at(0.5), at(0.99), latencies.len())
}

async fn measure(
    name: &'static str,
    targets: BTreeMap<String, Arc<dyn Store>>,
    users: usize,
) -> anyhow::Result<Measured> {
    let placed = PlacedStore::new(
        targets.clone(),
        "here",
        penchant_engine::residency::pinned_tables(),
    );
    let config = EngineConfig {
        placement: Some(placed.clone()),
        placement_refresh: Duration::from_millis(100),
        ..EngineConfig::serving()
    };
    let engine = Engine::open(Arc::new(placed), config).await?;
    engine.start_background(None);
    let now = engine.now_ms();
    let progress = spinner(format!("residency: loading {users} users on {name}"));
    for app in [APP, STILL] {
        engine.create_app(Some(app), app, 90, Layout::Wide).await?;
        engine.set_strategy(app, strategy()).await?;
        for batch in events(users, now).chunks(BATCH) {
            engine.push_events(app, batch).await?;
        }
    }
    drop(progress);

    // The reader on an app that stays, then on the app while it moves.
    let progress = spinner(format!("residency: moving {users} users on {name}"));
    let stop = Arc::new(AtomicBool::new(false));
    let still = tokio::spawn(reader(engine.clone(), STILL, users, stop.clone()));
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::Relaxed);
    let still = still.await?;
    let stop = Arc::new(AtomicBool::new(false));
    let moving = tokio::spawn(reader(engine.clone(), APP, users, stop.clone()));
    let started = Instant::now();
    engine.move_placement(APP, None, "there").await?;
    let status = loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let (_, status) = engine.placement(APP, None).await?;
        let status = status.context("the move has no status")?;
        if status.state != JobState::Running {
            break status;
        }
    };
    let move_secs = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let moving = moving.await?;
    anyhow::ensure!(
        status.state == JobState::Done,
        "the move failed: {status:?}"
    );
    drop(progress);
    // The copy's own time: from its start to the verify's, as the status does not time phases;
    // measured again below by copying the same rows back plainly, which is the reference.
    let copy_started = Instant::now();
    let mut copied = 0u64;
    let (from, to) = (&targets["there"], &targets["here"]);
    for table in from.list_tables().await? {
        let request = ReadRows::new(RowSet::range(unit_range(APP.as_bytes())));
        let rows = from.read_all(&table.name, request).await?;
        for chunk in rows.chunks(BATCH) {
            let writes = chunk
                .iter()
                .map(|r| {
                    let cells = r
                        .cells
                        .iter()
                        .map(|c| {
                            Mutation::set(
                                c.family.to_string(),
                                c.qualifier.clone(),
                                c.timestamp,
                                c.value.clone(),
                            )
                        })
                        .collect();
                    RowMutation::new(r.key.clone(), cells)
                })
                .collect();
            to.mutate_all(&table.name, writes).await?;
            copied += chunk.len() as u64;
        }
    }
    let plain_secs = copy_started.elapsed().as_secs_f64();
    engine.shutdown().await?;
    // The copy phase's time is what the move took beyond its three waits and the verify's
    // reads (two scans of the rows, counted as one plain copy each).
    let waits = 3.0 * (0.1 + 2.0);
    Ok(Measured {
        name,
        users,
        rows: status.copied.max(copied),
        bytes: status.bytes,
        copy_secs: (move_secs - waits).max(0.001),
        move_secs,
        plain_secs,
        still,
        moving,
    })
}

async fn run(args: ResidencyBenchArgs, report: &mut Report) -> anyhow::Result<()> {
    let scale = args.common.scale;
    let users = args.users.unwrap_or(scale.pick(500, 20_000, 200_000));
    let emulator_users = args
        .emulator_users
        .unwrap_or(scale.pick(200, 2_000, 20_000));
    let dir = tempfile::tempdir()?;
    let open = |name: &str| -> anyhow::Result<Arc<dyn Store>> {
        let options = RocksOptions {
            sync_writes: true,
            ..RocksOptions::default()
        };
        Ok(Arc::new(RocksStore::open(dir.path().join(name), options)?))
    };
    let targets = BTreeMap::from([
        ("here".to_owned(), open("here")?),
        ("there".to_owned(), open("there")?),
    ]);
    let mut measured = vec![measure("embedded", targets, users).await?];
    let found = std::env::var_os("BIGTABLE_EMULATOR_BINARY").is_some_and(|p| !p.is_empty())
        || std::path::Path::new(penchant_store_bigtable::emulator::CLOUD_SDK_EMULATOR).exists();
    if !args.no_emulator && found {
        use penchant_store_bigtable::BigtableStore;
        use penchant_store_bigtable::emulator::Emulator;
        let (here, there) = (Emulator::start(), Emulator::start());
        let targets: BTreeMap<String, Arc<dyn Store>> = BTreeMap::from([
            (
                "here".to_owned(),
                Arc::new(BigtableStore::connect(here.config("")).await?) as Arc<dyn Store>,
            ),
            (
                "there".to_owned(),
                Arc::new(BigtableStore::connect(there.config("")).await?) as Arc<dyn Store>,
            ),
        ]);
        measured.push(measure("Bigtable emulators", targets, emulator_users).await?);
    }

    let mut table = Table::new(
        "residency: an app moved between two targets while its profiles are read",
        &[
            "store",
            "users",
            "rows",
            "move rows/s",
            "MB/s",
            "plain copy rows/s",
            "ratio",
            "move, s",
            "reads p50 still / moving, µs",
            "p99 still / moving, µs",
        ],
    );
    for m in &measured {
        let move_rate = m.rows as f64 / m.copy_secs;
        let plain_rate = m.rows as f64 / m.plain_secs;
        table.row(vec![
            m.name.into(),
            Cell::int(m.users as f64),
            Cell::int(m.rows as f64),
            Cell::int(move_rate),
            Cell::fixed(m.bytes as f64 / 1e6 / m.copy_secs, 1),
            Cell::int(plain_rate),
            Cell::times(move_rate / plain_rate, 2),
            Cell::fixed(m.move_secs, 1),
            format!("{:.0} / {:.0}", m.still.0 * 1e3, m.moving.0 * 1e3).into(),
            format!("{:.0} / {:.0}", m.still.1 * 1e3, m.moving.1 * 1e3).into(),
        ]);
        table.note(format!(
            "{}: {} profile reads on the app that stays, {} during the move, none failed or missed",
            m.name,
            rate(m.still.2 as f64),
            rate(m.moving.2 as f64)
        ));
    }
    table.note(
        "move rows/s: rows over the move's time less its three waits for every node (refresh \
         0.1 s + 2 s each), so it includes the dual-written traffic, the copy, the verify's two \
         scans and the drop; plain copy: the same rows scanned and written back with no engine",
    );
    report.table(table);
    Ok(())
}
