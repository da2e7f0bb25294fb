//! The soak's checker: it opens the store the nodes left and reads every row of the shop's raw
//! events, per-day aggregates and profiles, each matched against what the soak sent and was
//! told was stored, with arithmetic of its own (docs/RELIABILITY.md):
//!
//! - no repair runs before it: what the nodes left is the result, and an ingestion intent still
//!   in the store is a batch a node never finished;
//! - every raw event row is the one event sent at its time (its user, item and kind): a row of
//!   no event sent is a phantom, a second row of one is a double count, an acknowledged event
//!   without a row is lost;
//! - every aggregate row is summed here from its cells, day by day and value by value, against
//!   the stored events of that user and day: a count on the wrong day, a day no event has and a
//!   qualifier no event has all show;
//! - profiles are scored here from the events by the documented formula (docs/API.md,
//!   "Scores"), not by the engine's code, and a stored profile of a user who sent nothing shows.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use futures::StreamExt;
use penchant_engine::events::{self as ev, Target};
use penchant_engine::profiles::{PROFILES_TABLE, Scores};
use penchant_engine::recommend::trending::TRENDING_TABLE;
use penchant_engine::{Engine, EngineConfig, aggregates as agg, keys};
use penchant_model::tables::PROFILES_FAMILY;
use penchant_store::{ReadRows, RowFilter, RowSet, Store};

use super::{BRANDS, CATEGORIES, KINDS, SHOP, Sent, brand, category, user_token};

/// Examples kept of each kind of fault.
const EXAMPLES: usize = 5;
/// The version cell of an aggregate row (a write's compare-and-set guard, not counts).
const VERSION: &[u8] = b"v";
/// The most values a profile keeps per facet (docs/API.md).
const VALUES_PER_FACET: usize = 100;
/// The best score of a profile (docs/API.md).
const MAX_SCORE: i64 = 20;
/// What each kind adds to its item's trending counter (docs/API.md: conversions, and clicks a
/// tenth as much), in [`KINDS`]' order.
const TRENDING_WEIGHTS: [i64; 3] = [0, 1, 10];
/// How often a node adds its trending counts to the store (docs/API.md).
const TRENDING_FLUSH_SECS: f64 = 5.0;

/// What the strategy weighs: each kind's score (in [`KINDS`]' order), then the brand's and the
/// category's.
#[derive(Debug, Clone, Copy)]
pub(super) struct Scoring {
    pub kinds: [i64; 3],
    pub brand: i64,
    pub category: i64,
}

impl Scoring {
    /// The strategy's body for `POST /1/strategies/personalization`.
    pub fn json(&self) -> Vec<u8> {
        let events: Vec<serde_json::Value> = KINDS
            .iter()
            .zip(self.kinds)
            .map(|((t, name), score)| {
                serde_json::json!({"eventName": name, "eventType": t, "score": score})
            })
            .collect();
        serde_json::to_vec(&serde_json::json!({
            "eventsScoring": events,
            "facetsScoring": [{"facetName": "brand", "score": self.brand},
                              {"facetName": "category", "score": self.category}],
            "personalizationImpact": 50,
        }))
        .expect("JSON")
    }
}

/// What the store must hold.
#[derive(Debug)]
pub(super) struct Reference<'a> {
    /// The shape's light users (how tokens are named).
    pub users: u32,
    /// Each stored exactly once.
    pub acknowledged: &'a [Sent],
    /// Batches given up by their client after a failed attempt: each event stored at most once.
    pub abandoned: &'a [Vec<Sent>],
    /// The strategy the profiles must be scored by.
    pub scoring: Scoring,
    /// Light users whose profile is compared (heavy users and the bot always are).
    pub light_profiles: usize,
    /// Kills of a node, how long the traffic ran, and how many events can be in flight on a node
    /// when it dies: what bounds the trending counts a kill loses.
    pub kills: u64,
    pub traffic: std::time::Duration,
    pub in_flight: u64,
}

/// What the checker found.
#[derive(Debug, Default)]
pub(super) struct Checked {
    /// Ingestion intents left in the store: batches no node finished.
    pub unfinished: usize,
    /// Raw event rows read.
    pub rows: usize,
    /// Acknowledged events without a row.
    pub lost: u64,
    /// Rows past the first of an event sent.
    pub doubled: u64,
    /// Rows of no event sent, or unlike the event sent at their time.
    pub phantom: u64,
    /// Rows or cells the checker cannot read.
    pub unreadable: u64,
    /// Aggregate rows read.
    pub days: usize,
    /// Aggregate counts short of the stored events' and past them (a count is one facet value
    /// of one event).
    pub counts_short: u64,
    pub counts_past: u64,
    /// Users with counted events.
    pub users: usize,
    /// Batches given up by their client, those of their events stored (counted then, as every
    /// stored event is), and those stored in part.
    pub abandoned_batches: usize,
    pub abandoned_stored: Vec<Sent>,
    pub abandoned_in_part: usize,
    /// Profiles compared with the checker's scoring, those unlike it, and stored profiles of
    /// users without a counted event.
    pub profiles: usize,
    pub profile_mismatches: u64,
    pub phantom_profiles: u64,
    /// Light users whose seen filter was read, and items of their counted events it lacks.
    pub seen_users: usize,
    pub unseen: u64,
    /// Trending counts (10 a conversion, 1 a click) the counted events make, those the store
    /// lacks and holds past them, and how many the kills may lose.
    pub trending: i64,
    pub trending_short: i64,
    pub trending_past: i64,
    pub trending_bound: i64,
    /// The first few of each kind of fault.
    pub examples: BTreeMap<&'static str, Vec<String>>,
}

impl Checked {
    fn fault(&mut self, what: &'static str, example: impl FnOnce() -> String) {
        let examples = self.examples.entry(what).or_default();
        if examples.len() < EXAMPLES {
            examples.push(example());
        }
    }

    fn examples_of(&self, what: &str) -> String {
        self.examples
            .get(what)
            .map(|e| e.join("; "))
            .unwrap_or_default()
    }

    /// Every check that failed, in words; `atomic_batches` where a batch is one write (the
    /// embedded store), so that a given-up batch is stored whole or not at all.
    pub fn failures(&self, atomic_batches: bool) -> Vec<String> {
        let mut out = Vec::new();
        let mut check = |bad: bool, what: &'static str, line: String| {
            if bad {
                out.push(format!("{line} ({})", self.examples_of(what)));
            }
        };
        check(
            self.unfinished > 0,
            "unfinished",
            format!(
                "{} ingestions left unfinished by the nodes",
                self.unfinished
            ),
        );
        check(
            self.lost > 0,
            "lost",
            format!("{} acknowledged events without a row", self.lost),
        );
        check(
            self.doubled > 0,
            "doubled",
            format!("{} events stored twice", self.doubled),
        );
        check(
            self.phantom > 0,
            "phantom",
            format!("{} event rows of no event sent", self.phantom),
        );
        check(
            self.unreadable > 0,
            "unreadable",
            format!("{} rows or cells unreadable", self.unreadable),
        );
        check(
            self.counts_short > 0 || self.counts_past > 0,
            "counts",
            format!(
                "per-day aggregates {} counts short of the stored events and {} past them",
                self.counts_short, self.counts_past
            ),
        );
        check(
            atomic_batches && self.abandoned_in_part > 0,
            "in part",
            format!(
                "{} batches given up by their client were stored in part",
                self.abandoned_in_part
            ),
        );
        check(
            self.profile_mismatches > 0,
            "profile",
            format!(
                "{} stored profiles unlike the events' scores",
                self.profile_mismatches
            ),
        );
        check(
            self.phantom_profiles > 0,
            "phantom profile",
            format!(
                "{} stored profiles of users without a counted event",
                self.phantom_profiles
            ),
        );
        check(
            self.unseen > 0,
            "unseen",
            format!("{} items of counted events not marked seen", self.unseen),
        );
        check(
            self.trending_past > 0 || self.trending_short > self.trending_bound,
            "trending",
            format!(
                "trending counts {} short of the events' {} (the kills may lose {}) and {} past them",
                self.trending_short, self.trending, self.trending_bound, self.trending_past
            ),
        );
        out
    }
}

/// Check the store against the reference; the engine is opened on it only after its raw rows
/// were read, to decode stored profiles and ask the seen filters.
pub(super) async fn check(
    store: Arc<dyn Store>,
    reference: &Reference<'_>,
) -> anyhow::Result<Checked> {
    let mut checked = Checked::default();
    let counted = checked.events(&*store, reference).await?;
    checked.users = counted.len();
    checked.aggregates(&*store, reference, &counted).await?;
    checked.trending(&*store, reference, &counted).await?;
    let engine = Engine::open(store.clone(), EngineConfig::default()).await?;
    checked
        .profiles(&*store, &engine, reference, &counted)
        .await?;
    checked.seen(&engine, reference, &counted).await?;
    Ok(checked)
}

/// The user a token names (as [`user_token`] names them).
fn user_of_token(users: u32, token: &str) -> Option<u32> {
    if token == "bot" {
        return Some(u32::MAX);
    }
    let (heavy, n) = match token.split_at_checked(1)? {
        ("h", n) => (true, n),
        ("u", n) => (false, n),
        _ => return None,
    };
    let n: u32 = n.parse().ok()?;
    Some(if heavy { users + n } else { n })
}

fn describe(users: u32, e: &Sent) -> String {
    format!(
        "{} {} i{} at {}",
        user_token(users, e.user),
        KINDS[e.kind as usize].0,
        e.item,
        e.at
    )
}

impl Checked {
    /// Read every raw event row of the shop: which sent events are stored, and how often.
    /// Returns the events the aggregates must count, per user: every acknowledged one, and
    /// those of given-up batches that are stored.
    async fn events(
        &mut self,
        store: &dyn Store,
        reference: &Reference<'_>,
    ) -> anyhow::Result<HashMap<u32, Vec<Sent>>> {
        // Every event sent has a millisecond of its own.
        let sent: HashMap<i64, &Sent> = reference
            .acknowledged
            .iter()
            .chain(reference.abandoned.iter().flatten())
            .map(|e| (e.at, e))
            .collect();
        let users = reference.users;
        let intents = keys::intents(SHOP);
        let mut found: HashMap<i64, u64> = HashMap::new();
        let request = ReadRows::new(RowSet::prefix(keys::app(SHOP)));
        let mut rows = store.read_rows(ev::EVENTS_TABLE, request).await?;
        while let Some(row) = rows.next().await {
            let row = row?;
            if row.key.starts_with(&intents) {
                self.unfinished += 1;
                self.fault("unfinished", || {
                    format!("intent {:?}", keys::batch_of_intent(SHOP, &row.key))
                });
                continue;
            }
            self.rows += 1;
            let token = keys::user_of(SHOP, &row.key).map(str::to_owned);
            let at = token.as_deref().and_then(|t| {
                let rest = row.key.strip_prefix(&keys::user(SHOP, t)[..])?;
                let ms: [u8; 8] = rest.get(..8)?.try_into().ok()?;
                (rest.len() == 16).then(|| u64::from_be_bytes(ms) as i64)
            });
            let (Some(token), Some(at), Ok(Some(event))) = (token, at, ev::stored_event(&row))
            else {
                self.unreadable += 1;
                self.fault("unreadable", || format!("event row {:?}", row.key));
                continue;
            };
            let like = |e: &Sent| {
                let (t, name) = KINDS[e.kind as usize];
                token == user_token(users, e.user)
                    && event.user() == token
                    && event.event_type.as_str() == t
                    && event.event_name == name
                    && event.timestamp == at
                    && event.target == Target::ObjectIds(vec![format!("i{}", e.item)])
            };
            match sent.get(&at) {
                Some(e) if like(e) => *found.entry(at).or_default() += 1,
                other => {
                    self.phantom += 1;
                    let sent = other.map(|e| describe(users, e));
                    self.fault("phantom", || {
                        format!(
                            "{token} {} {:?} at {at}, where {}",
                            event.event_type.as_str(),
                            event.target,
                            sent.unwrap_or_else(|| "nothing was sent".into())
                        )
                    });
                }
            }
        }
        let mut counted: HashMap<u32, Vec<Sent>> = HashMap::new();
        for e in reference.acknowledged {
            match found.get(&e.at).copied().unwrap_or(0) {
                0 => {
                    self.lost += 1;
                    self.fault("lost", || describe(users, e));
                }
                1 => {}
                n => {
                    self.doubled += n - 1;
                    self.fault("doubled", || format!("{} ({n} rows)", describe(users, e)));
                }
            }
            counted.entry(e.user).or_default().push(*e);
        }
        self.abandoned_batches = reference.abandoned.len();
        for batch in reference.abandoned {
            let stored: Vec<Sent> = batch
                .iter()
                .filter(|e| found.get(&e.at).is_some_and(|&n| n > 0))
                .copied()
                .collect();
            for e in &stored {
                let n = found[&e.at];
                if n > 1 {
                    self.doubled += n - 1;
                    self.fault("doubled", || {
                        format!("{} ({n} rows, given up)", describe(users, e))
                    });
                }
                counted.entry(e.user).or_default().push(*e);
            }
            if !stored.is_empty() && stored.len() < batch.len() {
                self.abandoned_in_part += 1;
                self.fault("in part", || {
                    format!(
                        "{} of {} from {}",
                        stored.len(),
                        batch.len(),
                        describe(users, &batch[0])
                    )
                });
            }
            self.abandoned_stored.extend(stored);
        }
        Ok(counted)
    }

    /// Read every aggregate row of the shop and compare each day's sums, value by value, with
    /// the counted events of that user and day; then the days with counted events and no row.
    async fn aggregates(
        &mut self,
        store: &dyn Store,
        reference: &Reference<'_>,
        counted: &HashMap<u32, Vec<Sent>>,
    ) -> anyhow::Result<()> {
        let users = reference.users;
        let mut visited: BTreeSet<(u32, i64)> = BTreeSet::new();
        let request = ReadRows::new(RowSet::prefix(keys::app(SHOP)));
        let mut rows = store.read_rows(agg::AGGREGATES_TABLE, request).await?;
        while let Some(row) = rows.next().await {
            let row = row?;
            self.days += 1;
            let token = keys::user_of(SHOP, &row.key);
            let user = token.and_then(|t| user_of_token(users, t));
            let day = token
                .filter(|t| row.key.len() == keys::user(SHOP, t).len() + 4)
                .and_then(|_| keys::day_of(&row.key));
            let (Some(token), Some(user), Some(day)) = (token, user, day) else {
                self.unreadable += 1;
                self.fault("unreadable", || format!("aggregate row {:?}", row.key));
                continue;
            };
            visited.insert((user, day));
            // (type, name, facet) → value → count, bases and deltas summed.
            let mut got: Sums = BTreeMap::new();
            for cell in row.family(agg::FAMILY) {
                if cell.qualifier == agg::LAST || cell.qualifier == VERSION {
                    continue;
                }
                let base = keys::aggregate_delta_base(&cell.qualifier).unwrap_or(&cell.qualifier);
                let parsed = keys::parse_event_qualifier(base)
                    .zip(serde_json::from_slice::<BTreeMap<String, u64>>(&cell.value).ok());
                let Some(([t, name, facet], counts)) = parsed else {
                    self.unreadable += 1;
                    self.fault("unreadable", || {
                        format!("{token} day {day}: cell {:?}", cell.qualifier)
                    });
                    continue;
                };
                let sums = got.entry((t, name, facet)).or_default();
                for (value, n) in counts {
                    *sums.entry(value).or_default() += n;
                }
            }
            let events = counted.get(&user).map(Vec::as_slice).unwrap_or_default();
            let expected = day_sums(events.iter().filter(|e| day_of(e.at) == day));
            self.compare_day(token, day, &got, &expected);
        }
        for (user, events) in counted {
            for day in events.iter().map(|e| day_of(e.at)).collect::<BTreeSet<_>>() {
                if !visited.contains(&(*user, day)) {
                    let token = user_token(users, *user);
                    let expected = day_sums(events.iter().filter(|e| day_of(e.at) == day));
                    self.compare_day(&token, day, &Sums::new(), &expected);
                }
            }
        }
        Ok(())
    }

    /// One day's sums against what its events add up to. A price changes while the soak runs
    /// (catalog updates), so prices are compared in total: one count per event.
    fn compare_day(&mut self, token: &str, day: i64, got: &Sums, expected: &Sums) {
        let qualifiers: BTreeSet<&(String, String, String)> =
            got.keys().chain(expected.keys()).collect();
        let empty = BTreeMap::new();
        for q in qualifiers {
            let g = got.get(q).unwrap_or(&empty);
            let e = expected.get(q).unwrap_or(&empty);
            let pairs: Vec<(String, u64, u64)> = if q.2 == "price" {
                vec![("(all)".into(), g.values().sum(), e.values().sum())]
            } else {
                let values: BTreeSet<&String> = g.keys().chain(e.keys()).collect();
                values
                    .into_iter()
                    .map(|v| {
                        let n = |m: &BTreeMap<String, u64>| m.get(v).copied().unwrap_or(0);
                        (v.clone(), n(g), n(e))
                    })
                    .collect()
            };
            for (value, got, expected) in pairs {
                if got != expected {
                    self.counts_short += expected.saturating_sub(got);
                    self.counts_past += got.saturating_sub(expected);
                    self.fault("counts", || {
                        format!(
                            "{token} day {day} {}/{}/{}={value}: {got} where {expected}",
                            q.0, q.1, q.2
                        )
                    });
                }
            }
        }
    }

    /// The trending counters of the shop's index (table `trending`: per day and item, one
    /// counter cell) against the counted events: never past them (an event counted twice), and
    /// short of them by no more than the kills may lose (docs/API.md: a node's counts not yet
    /// flushed, at most 5 s of them, and the events of a batch interrupted between storing and
    /// counting them).
    async fn trending(
        &mut self,
        store: &dyn Store,
        reference: &Reference<'_>,
        counted: &HashMap<u32, Vec<Sent>>,
    ) -> anyhow::Result<()> {
        let mut expected: HashMap<(i64, String), i64> = HashMap::new();
        let mut events = 0i64;
        for e in counted.values().flatten() {
            events += 1;
            let weight = TRENDING_WEIGHTS[e.kind as usize];
            if weight > 0 {
                *expected
                    .entry((day_of(e.at), format!("i{}", e.item)))
                    .or_default() += weight;
            }
        }
        let index = keys::index(SHOP, super::INDEX);
        let mut got: HashMap<(i64, String), i64> = HashMap::new();
        let request = ReadRows::new(RowSet::prefix(index.clone()));
        let mut rows = store.read_rows(TRENDING_TABLE, request).await?;
        while let Some(row) = rows.next().await {
            let row = row?;
            let day = (row.key.len() == index.len() + 5)
                .then(|| keys::trending_day_of(&row.key))
                .flatten();
            for cell in &row.cells {
                let item = std::str::from_utf8(&cell.qualifier).ok();
                let n = <[u8; 8]>::try_from(&cell.value[..])
                    .ok()
                    .map(i64::from_be_bytes);
                match (day, item, n) {
                    (Some(day), Some(item), Some(n)) => {
                        *got.entry((day, item.to_owned())).or_default() += n
                    }
                    _ => {
                        self.unreadable += 1;
                        self.fault("unreadable", || format!("trending row {:?}", row.key));
                    }
                }
            }
        }
        self.trending = expected.values().sum();
        for (key, &n) in &got {
            let e = expected.get(key).copied().unwrap_or(0);
            if n > e {
                self.trending_past += n - e;
                self.fault("trending", || {
                    format!("{} day {}: {n} where {e}", key.1, key.0)
                });
            }
        }
        for (key, &e) in &expected {
            self.trending_short += (e - got.get(key).copied().unwrap_or(0)).max(0);
        }
        // A kill loses a flush period and a second of the traffic's counts, and the events in
        // flight on the node, at the run's mean weight.
        let secs = reference.traffic.as_secs_f64().max(1.0);
        let per_kill = self.trending as f64 * (TRENDING_FLUSH_SECS + 1.0) / secs
            + reference.in_flight as f64 * self.trending as f64 / events.max(1) as f64;
        self.trending_bound = (reference.kills as f64 * per_kill).ceil() as i64;
        Ok(())
    }

    /// Every stored profile's user must have counted events; the compared ones (every heavy
    /// user and the bot, and the first light users) must score as the checker scores them.
    async fn profiles(
        &mut self,
        store: &dyn Store,
        engine: &Engine,
        reference: &Reference<'_>,
        counted: &HashMap<u32, Vec<Sent>>,
    ) -> anyhow::Result<()> {
        let users = reference.users;
        let profiles = RowFilter::Family(PROFILES_FAMILY.to_owned()).and(RowFilter::StripValue);
        let request = ReadRows::new(RowSet::prefix(keys::app(SHOP))).filter(profiles);
        let mut rows = store.read_rows(PROFILES_TABLE, request).await?;
        while let Some(row) = rows.next().await {
            let row = row?;
            let user = keys::profile_user(SHOP, &row.key).and_then(|t| user_of_token(users, t));
            if user.is_none_or(|u| !counted.contains_key(&u)) {
                self.phantom_profiles += 1;
                self.fault("phantom profile", || format!("{:?}", row.key));
            }
        }
        let mut compared: Vec<u32> = counted.keys().copied().filter(|&u| u >= users).collect();
        let mut light: Vec<u32> = counted.keys().copied().filter(|&u| u < users).collect();
        light.sort_unstable();
        light.truncate(reference.light_profiles);
        compared.extend(light);
        let bar = crate::report::bar("soak: profiles compared", compared.len() as u64);
        for user in compared {
            let token = user_token(users, user);
            let expected = score(&counted[&user], reference.scoring);
            let stored = engine.profiles().stored_profile(SHOP, &token).await?;
            self.profiles += 1;
            let got = stored.map(|(p, _)| (p.scores, p.last_event_at));
            if got.as_ref() != Some(&expected) {
                self.profile_mismatches += 1;
                self.fault("profile", || {
                    format!("{token}: stored {got:?}, scored {expected:?}")
                });
            }
            bar.inc(1);
        }
        bar.finish_and_clear();
        Ok(())
    }

    /// Every light user's counted items must be in their seen filter (a heavy user's filter
    /// may rotate its oldest generation out).
    async fn seen(
        &mut self,
        engine: &Engine,
        reference: &Reference<'_>,
        counted: &HashMap<u32, Vec<Sent>>,
    ) -> anyhow::Result<()> {
        for (user, events) in counted.iter().filter(|(u, _)| **u < reference.users) {
            let token = user_token(reference.users, *user);
            let items: Vec<String> = events.iter().map(|e| format!("i{}", e.item)).collect();
            let seen = engine
                .seen()
                .exists(SHOP, &token, &items, penchant_engine::Consistency::Strong)
                .await?;
            self.seen_users += 1;
            for (item, seen) in items.iter().zip(seen) {
                if !seen {
                    self.unseen += 1;
                    self.fault("unseen", || format!("{token}: {item}"));
                }
            }
        }
        Ok(())
    }
}

/// Per (type, name, facet): value → count.
type Sums = BTreeMap<(String, String, String), BTreeMap<String, u64>>;

fn day_of(ms: i64) -> i64 {
    ms.div_euclid(86_400_000)
}

/// What events add up to in a day's aggregates: each counts once for its item's brand,
/// category and price (the catalog's facets).
fn day_sums<'e>(events: impl Iterator<Item = &'e Sent>) -> Sums {
    let mut sums = Sums::new();
    for e in events {
        let (t, name) = KINDS[e.kind as usize];
        let q = |facet: &str| (t.to_owned(), name.to_owned(), facet.to_owned());
        for (facet, value) in [
            ("brand", brand(e.item)),
            ("category", category(e.item)),
            ("price", String::new()),
        ] {
            *sums.entry(q(facet)).or_default().entry(value).or_default() += 1;
        }
    }
    sums
}

/// A profile as docs/API.md scores it: each event adds `eventScore × facetScore` to its
/// brand's and its category's raw score; values at 0 or below leave; each facet keeps its 100
/// best; a score is `max(1, round(20 × raw / best))` against the best raw score of all. With
/// the latest weighed event's time.
fn score(events: &[Sent], scoring: Scoring) -> (Scores, Option<i64>) {
    debug_assert!(BRANDS as usize <= VALUES_PER_FACET && CATEGORIES as usize <= VALUES_PER_FACET);
    let mut raw: BTreeMap<&str, BTreeMap<String, i64>> = BTreeMap::new();
    let mut last = None;
    for e in events {
        let weight = scoring.kinds[e.kind as usize];
        if weight == 0 {
            continue;
        }
        last = last.max(Some(e.at));
        for (facet, value, score) in [
            ("brand", brand(e.item), scoring.brand),
            ("category", category(e.item), scoring.category),
        ] {
            *raw.entry(facet).or_default().entry(value).or_default() += weight * score;
        }
    }
    for values in raw.values_mut() {
        values.retain(|_, r| *r > 0);
    }
    raw.retain(|_, values| !values.is_empty());
    let best = raw
        .values()
        .flat_map(|v| v.values())
        .copied()
        .max()
        .unwrap_or(1);
    let scores = raw
        .into_iter()
        .map(|(facet, values)| {
            let mut ranked: Vec<(String, i64)> = values.into_iter().collect();
            ranked.sort_by_key(|&(_, r)| std::cmp::Reverse(r));
            ranked.truncate(VALUES_PER_FACET);
            // Half up: ⌊(40 raw + best) / (2 best)⌋ = round(20 raw / best).
            let scaled = ranked
                .into_iter()
                .map(|(v, r)| {
                    (
                        v,
                        ((2 * MAX_SCORE * r + best) / (2 * best)).clamp(1, MAX_SCORE) as u32,
                    )
                })
                .collect();
            (facet.to_owned(), scaled)
        })
        .collect();
    (scores, last)
}

#[cfg(test)]
mod tests {
    //! The checker on crafted stores: one a real engine wrote from the reference passes; each
    //! fault written into it fails the check that names it.

    use super::*;
    use penchant_engine::catalog::Write;
    use penchant_engine::events::{Event, EventType};
    use penchant_engine::strategy::Strategy;
    use penchant_store::{MemStore, Mutation};

    const USERS: u32 = 10;
    const SCORING: Scoring = Scoring {
        kinds: [10, 20, 50],
        brand: 10,
        category: 5,
    };
    /// Two hours ago, as the soak's first event.
    fn start() -> i64 {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        now - 2 * 3_600_000
    }

    /// Events of light users 0..5, heavy user h0 and the bot, each its own millisecond from `at`.
    fn sent(at: i64, n: usize) -> Vec<Sent> {
        (0..n)
            .map(|i| Sent {
                user: match i % 7 {
                    5 => USERS,
                    6 => u32::MAX,
                    u => u as u32,
                },
                item: (i * 7 % 120) as u32,
                kind: (i % 3) as u8,
                at: at + i as i64,
            })
            .collect()
    }

    fn event(e: &Sent) -> Event {
        let (t, name) = KINDS[e.kind as usize];
        let event_type = EventType::parse(t).unwrap();
        Event {
            event_type,
            event_subtype: (event_type == EventType::Conversion).then(|| "purchase".into()),
            event_name: name.into(),
            index: super::super::INDEX.into(),
            user_token: user_token(USERS, e.user),
            authenticated_user_token: None,
            timestamp: e.at,
            target: Target::ObjectIds(vec![format!("i{}", e.item)]),
            query_id: None,
            positions: None,
            object_data: None,
            value: None,
            currency: None,
        }
    }

    /// A store an engine wrote these events into, as a node does: the shop, its catalog and
    /// strategy, the events in batches; once their intents are let go, the node stopped.
    async fn shop(events: &[Sent]) -> Arc<MemStore> {
        let store = Arc::new(MemStore::new());
        let engine = Engine::open(store.clone(), EngineConfig::default())
            .await
            .unwrap();
        engine
            .tenancy()
            .create_app_with(Some(SHOP), "soak", 30, Default::default())
            .await
            .unwrap();
        let records = (0..120u32)
            .map(|i| {
                let record = serde_json::json!({"objectID": format!("i{i}"), "brand": brand(i),
                    "category": category(i), "price": 10 + i % 90});
                let record = record.as_object().unwrap().clone();
                (super::super::INDEX.to_owned(), Write::Put(record))
            })
            .collect();
        engine.write_records(SHOP, records).await.unwrap();
        let strategy: Strategy = serde_json::from_slice(&SCORING.json()).unwrap();
        engine.set_strategy(SHOP, strategy).await.unwrap();
        for batch in events.chunks(25) {
            let batch: Vec<Event> = batch.iter().map(event).collect();
            engine.push_events(SHOP, &batch).await.unwrap();
        }
        let intents = ReadRows::new(RowSet::prefix(keys::intents(SHOP)));
        for _ in 0..1000 {
            let left = store
                .read_all(ev::EVENTS_TABLE, intents.clone())
                .await
                .unwrap();
            if left.is_empty() {
                // A node's stop adds its trending counts to the store.
                engine.shutdown().await.unwrap();
                return store;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("the intents were never let go");
    }

    async fn checked(
        store: &Arc<MemStore>,
        acknowledged: &[Sent],
        abandoned: &[Vec<Sent>],
    ) -> Checked {
        let reference = Reference {
            users: USERS,
            acknowledged,
            abandoned,
            scoring: SCORING,
            light_profiles: 100,
            kills: 0,
            traffic: std::time::Duration::from_secs(60),
            in_flight: 0,
        };
        check(store.clone(), &reference).await.unwrap()
    }

    /// The failures' first words, to compare.
    fn failed(checked: &Checked) -> Vec<String> {
        checked
            .failures(true)
            .iter()
            .map(|f| f.split(" (").next().unwrap().to_owned())
            .collect()
    }

    /// A copy of a row's cells under another key, or in another store.
    async fn copy_row(from: &dyn Store, to: &dyn Store, table: &str, key: Bytes, into: Bytes) {
        let row = from.read_row(table, key, None).await.unwrap().unwrap();
        let mut mutations = vec![Mutation::DeleteFromRow];
        mutations.extend(row.cells.iter().map(|c| {
            Mutation::set(
                c.family.as_str(),
                c.qualifier.clone(),
                c.timestamp,
                c.value.clone(),
            )
        }));
        to.mutate_row(table, into, mutations).await.unwrap();
    }

    use bytes::Bytes;

    /// The key of the raw row of an event, found by its time.
    async fn event_row(store: &dyn Store, e: &Sent) -> Bytes {
        let token = user_token(USERS, e.user);
        let rows = keys::events_between(SHOP, &token, e.at, e.at + 1);
        let found = store
            .read_all(ev::EVENTS_TABLE, ReadRows::new(rows))
            .await
            .unwrap();
        assert_eq!(found.len(), 1, "one row of {e:?}");
        found[0].key.clone()
    }

    #[tokio::test]
    async fn a_store_that_holds_what_was_sent_passes() {
        let events = sent(start(), 100);
        let store = shop(&events).await;
        let checked = checked(&store, &events, &[]).await;
        assert_eq!(checked.failures(true), Vec::<String>::new());
        assert_eq!(checked.rows, 100);
        assert_eq!(checked.users, 7);
        assert_eq!(checked.profiles, 7);
        assert!(checked.days >= 7, "{checked:?}");
        assert_eq!(checked.seen_users, 5);
    }

    #[tokio::test]
    async fn a_phantom_event_of_a_user_never_sent_fails_it() {
        let events = sent(start(), 50);
        let mut written = events.clone();
        written.push(Sent {
            user: 9,
            item: 3,
            kind: 1,
            at: start() + 10_000,
        });
        let store = shop(&written).await;
        let checked = checked(&store, &events, &[]).await;
        assert_eq!(
            failed(&checked),
            [
                "1 event rows of no event sent",
                "per-day aggregates 0 counts short of the stored events and 3 past them",
                "1 stored profiles of users without a counted event",
                // A click: one trending count.
                &format!(
                    "trending counts 0 short of the events' {}",
                    checked.trending
                ),
            ]
        );
        assert_eq!(checked.trending_past, 1);
    }

    #[tokio::test]
    async fn an_event_stored_unlike_it_was_sent_fails_it() {
        let events = sent(start(), 50);
        let mut written = events.clone();
        written[7].item += 1;
        let store = shop(&written).await;
        let checked = checked(&store, &events, &[]).await;
        let failures = failed(&checked);
        assert!(
            failures.contains(&"1 event rows of no event sent".to_owned()),
            "{failures:?}"
        );
        assert!(
            failures.contains(&"1 acknowledged events without a row".to_owned()),
            "{failures:?}"
        );
    }

    #[tokio::test]
    async fn a_count_on_the_wrong_day_fails_it() {
        let events = sent(start(), 50);
        let store = shop(&events).await;
        let token = user_token(USERS, 0);
        let day = day_of(events[0].at);
        let (from, to) = (
            keys::day(SHOP, &token, day),
            keys::day(SHOP, &token, day - 1),
        );
        copy_row(&*store, &*store, agg::AGGREGATES_TABLE, from.clone(), to).await;
        store
            .mutate_row(agg::AGGREGATES_TABLE, from, vec![Mutation::DeleteFromRow])
            .await
            .unwrap();
        let checked = checked(&store, &events, &[]).await;
        let user0 = events.iter().filter(|e| e.user == 0).count() as u64;
        assert_eq!(checked.counts_short, 3 * user0, "{checked:?}");
        assert_eq!(checked.counts_past, 3 * user0);
        assert_eq!(failed(&checked).len(), 1, "{:?}", checked.failures(true));
    }

    #[tokio::test]
    async fn a_double_count_fails_it() {
        let events = sent(start(), 50);
        let store = shop(&events).await;
        // An event's row again under another discriminator, and a delta counting it again.
        let key = event_row(&*store, &events[3]).await;
        let mut again = key.to_vec();
        *again.last_mut().unwrap() ^= 1;
        copy_row(
            &*store,
            &*store,
            ev::EVENTS_TABLE,
            key,
            Bytes::from(again.clone()),
        )
        .await;
        let token = user_token(USERS, events[3].user);
        let (t, name) = KINDS[events[3].kind as usize];
        let q = keys::event_qualifier(t, name, "brand");
        let delta = keys::aggregate_delta(&q, &again);
        let value = serde_json::to_vec(&BTreeMap::from([(brand(events[3].item), 1u64)])).unwrap();
        let day = keys::day(SHOP, &token, day_of(events[3].at));
        store
            .mutate_row(
                agg::AGGREGATES_TABLE,
                day,
                vec![Mutation::set(
                    agg::FAMILY,
                    delta,
                    events[3].at * 1000,
                    value,
                )],
            )
            .await
            .unwrap();
        let checked = checked(&store, &events, &[]).await;
        assert_eq!(
            (checked.doubled, checked.counts_past, checked.counts_short),
            (1, 1, 0)
        );
        assert_eq!(failed(&checked).len(), 2, "{:?}", checked.failures(true));
    }

    #[tokio::test]
    async fn a_batch_left_for_a_repair_that_never_ran_fails_it() {
        // The events of a batch whose node died after writing its raw rows and intent: only a
        // repair would count them.
        let events = sent(start(), 50);
        let (counted, died) = events.split_at(40);
        let store = shop(counted).await;
        let full = shop(&events).await;
        for e in died {
            let key = event_row(&*full, e).await;
            copy_row(&*full, &*store, ev::EVENTS_TABLE, key.clone(), key).await;
        }
        let intent = keys::intent(SHOP, 7);
        store
            .mutate_row(
                ev::EVENTS_TABLE,
                intent,
                vec![Mutation::set(
                    ev::FAMILY,
                    Bytes::from_static(b"u"),
                    start() * 1000,
                    "x",
                )],
            )
            .await
            .unwrap();
        let checked = checked(&store, &events, &[]).await;
        assert_eq!(checked.unfinished, 1);
        assert_eq!(checked.counts_short, 3 * died.len() as u64);
        assert!(checked.profile_mismatches > 0, "{checked:?}");
        // A batch given up may be left out whole, never in part.
        let checked = self::checked(&store, counted, &[died.to_vec()]).await;
        assert_eq!(checked.abandoned_stored.len(), died.len());
        let mut in_part = died.to_vec();
        in_part.push(Sent {
            at: start() + 99_999,
            ..died[0]
        });
        let checked = self::checked(&store, counted, &[in_part]).await;
        assert_eq!(checked.abandoned_in_part, 1);
    }

    #[tokio::test]
    async fn a_profile_off_by_one_event_fails_it() {
        let events = sent(start(), 50);
        let store = shop(&events).await;
        let short = shop(&events[..events.len() - 7]).await;
        let token = user_token(USERS, events.last().unwrap().user);
        let key = keys::profile(SHOP, &token);
        copy_row(&*short, &*store, PROFILES_TABLE, key.clone(), key).await;
        let checked = checked(&store, &events, &[]).await;
        assert_eq!(
            failed(&checked),
            ["1 stored profiles unlike the events' scores"]
        );
    }

    #[tokio::test]
    async fn a_trending_count_past_the_events_or_lost_without_a_kill_fails_it() {
        let events = sent(start(), 50);
        let store = shop(&events).await;
        let checked = checked(&store, &events, &[]).await;
        assert!(
            checked.trending > 0 && checked.trending_short == 0,
            "{checked:?}"
        );
        let row = keys::trending(SHOP, super::super::INDEX, day_of(events[0].at), 3);
        let rule =
            penchant_store::ReadModifyWriteRule::increment("t", Bytes::from_static(b"i4"), 1);
        store
            .read_modify_write_row(TRENDING_TABLE, row, vec![rule])
            .await
            .unwrap();
        let checked = self::checked(&store, &events, &[]).await;
        assert_eq!((checked.trending_past, checked.trending_short), (1, 0));
        assert_eq!(failed(&checked).len(), 1, "{:?}", checked.failures(true));
        // Without a kill, no count may be lost.
        store
            .delete_prefix(TRENDING_TABLE, keys::index(SHOP, super::super::INDEX))
            .await
            .unwrap();
        let checked = self::checked(&store, &events, &[]).await;
        assert_eq!(checked.trending_short, checked.trending);
        assert_eq!(failed(&checked).len(), 1, "{:?}", checked.failures(true));
    }

    /// The checker's scores are the documented formula's, worked by hand.
    #[test]
    fn scores_follow_the_documented_formula() {
        let at = 1_000;
        // A view of i1 (brand b1, category c0), a purchase of i51 (b1, c1), a click of i2 (b2,
        // c0), under views 10, clicks 20, purchases 50, brands 10, categories 5.
        let events = [
            Sent {
                user: 0,
                item: 1,
                kind: 0,
                at,
            },
            Sent {
                user: 0,
                item: 51,
                kind: 2,
                at: at + 1,
            },
            Sent {
                user: 0,
                item: 2,
                kind: 1,
                at: at + 2,
            },
        ];
        let (scores, last) = score(&events, SCORING);
        assert_eq!(last, Some(at + 2));
        // Raw: b1 600, b2 200, c0 (item 1, 2) 50 + 100 = 150, c1 (item 51) 250; best 600.
        assert_eq!(
            scores["brand"],
            BTreeMap::from([("b1".into(), 20), ("b2".into(), 7)])
        );
        assert_eq!(
            scores["category"],
            BTreeMap::from([("c0".into(), 5), ("c1".into(), 8)])
        );
    }
}
