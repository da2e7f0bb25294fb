//! What the engine's tests share: hooks for [`Hooked`] stores (a gate to stage races, a stall
//! for a node that dies), strategies, events, an engine with an app, and the backends a scenario
//! runs on.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use penchant_engine::events::{Event, EventType, Target};
use penchant_engine::strategy::{EventScoring, FacetScoring, Strategy};
use penchant_engine::{Consistency, Engine, EngineConfig};
pub use penchant_store::testing::{Hook, Hooked, Op};
use penchant_store::{Result, Store};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Once armed, stops the next operation `op` on `table` until the test lets it go.
#[derive(Debug)]
pub struct Gate {
    op: Op,
    table: &'static str,
    /// (tells the test the operation is waiting, lets it go on).
    armed: tokio::sync::Mutex<Option<(oneshot::Sender<()>, oneshot::Receiver<()>)>>,
}

impl Gate {
    pub fn new(op: Op, table: &'static str) -> Self {
        Self {
            op,
            table,
            armed: tokio::sync::Mutex::new(None),
        }
    }

    /// Arm the gate: the first receiver hears when the operation waits, the sender lets it go.
    pub async fn arm(&self) -> (oneshot::Receiver<()>, oneshot::Sender<()>) {
        let (waiting, waits) = oneshot::channel();
        let (go, gate) = oneshot::channel();
        *self.armed.lock().await = Some((waiting, gate));
        (waits, go)
    }
}

#[async_trait]
impl Hook for Gate {
    async fn before(&self, op: Op, table: &str) -> Result<()> {
        if op == self.op && table == self.table {
            let gate = self.armed.lock().await.take();
            if let Some((waiting, go)) = gate {
                waiting.send(()).unwrap();
                go.await.unwrap();
            }
        }
        Ok(())
    }
}

/// Once closed, stops every operation `op` on `table` after the first `allow`: they never
/// finish, like the writes of a node that dies.
#[derive(Debug)]
pub struct Stall {
    table: &'static str,
    op: Op,
    allow: usize,
    seen: AtomicUsize,
    /// Whether operations past the first `allow` stall (not at first).
    pub closed: AtomicBool,
}

impl Stall {
    pub fn new(table: &'static str, op: Op, allow: usize) -> Self {
        Self {
            table,
            op,
            allow,
            seen: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
        }
    }
}

#[async_trait]
impl Hook for Stall {
    async fn before(&self, op: Op, table: &str) -> Result<()> {
        if op == self.op
            && table == self.table
            && self.closed.load(Ordering::SeqCst)
            && self.seen.fetch_add(1, Ordering::SeqCst) >= self.allow
        {
            std::future::pending::<()>().await;
        }
        Ok(())
    }
}

/// A strategy weighing `events` (name, type, score) and `facets` (name, score), with an impact
/// of 50.
pub fn strategy(events: &[(&str, EventType, i32)], facets: &[(&str, u32)]) -> Strategy {
    Strategy {
        events_scoring: events
            .iter()
            .map(|&(name, event_type, score)| EventScoring {
                event_name: name.into(),
                event_type,
                score,
            })
            .collect(),
        facets_scoring: facets
            .iter()
            .map(|&(name, score)| FacetScoring {
                facet_name: name.into(),
                score,
            })
            .collect(),
        personalization_impact: 50,
    }
}

/// Views (`Viewed`) weigh `view`, brands `brand`.
pub fn views(view: i32, brand: u32) -> Strategy {
    strategy(&[("Viewed", EventType::View, view)], &[("brand", brand)])
}

/// Views weigh 10 and purchases (`Bought`) 50; brands 10.
pub fn views_and_purchases() -> Strategy {
    strategy(
        &[
            ("Viewed", EventType::View, 10),
            ("Bought", EventType::Conversion, 50),
        ],
        &[("brand", 10)],
    )
}

/// An event of `user` on `items` at `timestamp`, with the facets `filters`.
pub fn event(
    event_type: EventType,
    name: &str,
    user: &str,
    timestamp: i64,
    filters: &[(&str, &str)],
) -> Event {
    Event {
        event_type,
        event_subtype: None,
        event_name: name.into(),
        index: "items".into(),
        user_token: user.into(),
        authenticated_user_token: None,
        timestamp,
        target: Target::Filters(
            filters
                .iter()
                .map(|&(f, v)| (f.to_owned(), v.to_owned()))
                .collect(),
        ),
        query_id: None,
        positions: None,
        object_data: None,
        value: None,
        currency: None,
    }
}

/// A view (`Viewed`) by `user` of an item of brand `brand`.
pub fn view(user: &str, brand: &str, timestamp: i64) -> Event {
    event(
        EventType::View,
        "Viewed",
        user,
        timestamp,
        &[("brand", brand)],
    )
}

/// The `n`th event of a scenario, the same for every app: one in five a purchase (`Bought`),
/// the others views, of user `n % users`, an hour ago (plus `n` ms), with `filters`.
pub fn nth(n: usize, now: i64, users: usize, filters: &[(&str, &str)]) -> Event {
    let (event_type, name) = if n.is_multiple_of(5) {
        (EventType::Conversion, "Bought")
    } else {
        (EventType::View, "Viewed")
    };
    let user = format!("u{:03}", n % users);
    event(event_type, name, &user, now - 3_600_000 + n as i64, filters)
}

/// An engine on `store` with the app `app` (30 days of events) weighing `strategy`.
pub async fn engine_with_app(
    store: Arc<dyn Store>,
    config: EngineConfig,
    app: &str,
    strategy: Strategy,
) -> Engine {
    let engine = Engine::open(store, config).await.unwrap();
    engine
        .tenancy()
        .create_app_with(Some(app), "test", 30, Default::default())
        .await
        .unwrap();
    engine.set_strategy(app, strategy).await.unwrap();
    engine
}

/// Wait until `done` says so, for `within` at the most.
pub async fn wait_until(what: &str, within: Duration, mut done: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done().await {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Wait until the ingestions of `app` forgot their intents (in the background, after they
/// answer): until then, a fold leaves their deltas alone.
pub async fn intents_forgotten(store: &dyn Store, app: &str) {
    use penchant_store::{ReadRows, RowSet};
    let request = ReadRows::new(RowSet::prefix(penchant_engine::keys::intents(app)));
    wait_until("intents forgotten", Duration::from_secs(10), async || {
        let rows = store
            .read_all(penchant_engine::events::EVENTS_TABLE, request.clone())
            .await
            .unwrap();
        rows.is_empty()
    })
    .await;
}

/// Events `0..count` (`event(n)`), the same to each of `apps`, in requests of `chunk`.
pub async fn feed(
    engine: &Engine,
    apps: &[&str],
    count: usize,
    chunk: usize,
    event: impl Fn(usize) -> Event,
) {
    for chunk in (0..count).collect::<Vec<_>>().chunks(chunk) {
        let events: Vec<Event> = chunk.iter().map(|&n| event(n)).collect();
        for app in apps {
            engine.push_events(app, &events).await.unwrap();
        }
    }
}

/// Until `stop`: requests of `step` events (`event(n)`, from `from` on), the same to each of
/// `apps`, `pause` apart. Answers the number of the next event: `from` plus how many it sent.
pub fn writer(
    engine: Engine,
    apps: [&'static str; 2],
    (from, step, pause): (usize, usize, Duration),
    event: impl Fn(usize) -> Event + Send + 'static,
    stop: Arc<AtomicBool>,
) -> JoinHandle<usize> {
    tokio::spawn(async move {
        let mut n = from;
        while !stop.load(Ordering::SeqCst) {
            let events: Vec<Event> = (n..n + step).map(&event).collect();
            for app in apps {
                engine.push_events(app, &events).await.unwrap();
            }
            n += step;
            tokio::time::sleep(pause).await;
        }
        n
    })
}

/// Until `stop`: reads of the profiles of `app`'s users `u000`.. (`users` of them) in turn, each
/// of which must be there. Answers how many it read.
pub fn reader(
    engine: Engine,
    app: &'static str,
    users: usize,
    stop: Arc<AtomicBool>,
) -> JoinHandle<usize> {
    tokio::spawn(async move {
        let mut reads = 0;
        while !stop.load(Ordering::SeqCst) {
            let user = format!("u{:03}", reads % users);
            let profile = engine
                .profile(app, &user, Consistency::Eventual)
                .await
                .expect("a profile read failed");
            assert!(profile.is_some(), "{user}'s profile went missing");
            reads += 1;
        }
        reads
    })
}
