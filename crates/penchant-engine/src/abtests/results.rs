//! A/B tests' counts: what each variant served and what its users did after.
//!
//! A node tallies in memory, per app, test and user — an answer served (tracked when it
//! carried a query ID), a click or conversion attributed by its query ID — and every
//! [`FLUSH_EVERY`] (and at shutdown, and before it reads a test's results) adds its tallies to
//! the store: one atomic increment of the user's row (table `abtest_users`), whose new values
//! tell whether this was the user's first answer, click, conversion..., then one increment of
//! the test's row with the variant's sums. So a user counts once in `userCount` (and once in
//! `convertedUserCount`...) whichever nodes served them, and the per-user revenue's sum of
//! squares stays exact (`new² − old²` from the user's row). A node that crashes loses the tallies
//! of its last seconds (at most `FLUSH_EVERY`); an increment that fails is kept for the next
//! flush. Tallies of a test deleted meanwhile (on another node) are dropped at the flush.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use parking_lot::Mutex;
use penchant_store::{ReadModifyWriteRule, RowFilter, Store};
use serde_json::Value;

use crate::events::{Event, EventType};
use crate::{Result, keys};
use penchant_model::tables::{
    ABTEST_USERS_FAMILY as USER, ABTEST_USERS_TABLE, ABTESTS_COUNTS as COUNTS, ABTESTS_TABLE,
};

/// How often a node adds its tallies to the store.
pub const FLUSH_EVERY: Duration = Duration::from_secs(5);
/// User rows incremented at once by a flush.
const CONCURRENCY: usize = 16;
/// The currency of a `value` given without one.
pub const DEFAULT_CURRENCY: &str = "USD";

/// A user's own counters, and the variant counter of users for whom each went above zero.
const PER_USER: [(&str, &str); 6] = [
    ("searches", "users"),
    ("trackedSearches", "trackedUsers"),
    ("clicks", "clickedUsers"),
    ("conversions", "convertedUsers"),
    ("addToCarts", "addToCartUsers"),
    ("purchases", "purchaseUsers"),
];

/// Revenue in one currency: hundredths (cents), and the sum over users of each user's total
/// squared (cents²), for the spread of revenue per user.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Revenue {
    pub cents: i64,
    pub squares: i64,
}

/// A variant's counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    /// Answers served to its users, and those with a query ID (`clickAnalytics`).
    pub searches: i64,
    pub tracked_searches: i64,
    /// Attributed events.
    pub clicks: i64,
    pub conversions: i64,
    pub add_to_carts: i64,
    pub purchases: i64,
    /// Users served, served with a query ID, with at least one click, conversion...
    pub users: i64,
    pub tracked_users: i64,
    pub clicked_users: i64,
    pub converted_users: i64,
    pub add_to_cart_users: i64,
    pub purchase_users: i64,
    /// Clicks' positions: their sum and how many.
    pub position_sum: i64,
    pub positions: i64,
    pub revenue: BTreeMap<String, Revenue>,
}

impl Counts {
    fn slot(&mut self, name: &str) -> Option<&mut i64> {
        Some(match name {
            "searches" => &mut self.searches,
            "trackedSearches" => &mut self.tracked_searches,
            "clicks" => &mut self.clicks,
            "conversions" => &mut self.conversions,
            "addToCarts" => &mut self.add_to_carts,
            "purchases" => &mut self.purchases,
            "users" => &mut self.users,
            "trackedUsers" => &mut self.tracked_users,
            "clickedUsers" => &mut self.clicked_users,
            "convertedUsers" => &mut self.converted_users,
            "addToCartUsers" => &mut self.add_to_cart_users,
            "purchaseUsers" => &mut self.purchase_users,
            "positionSum" => &mut self.position_sum,
            "positions" => &mut self.positions,
            _ => return None,
        })
    }
}

/// What one user did in one test since the last flush.
#[derive(Debug, Clone, Default)]
struct Tally {
    variant: u8,
    /// By [`PER_USER`]'s first names.
    counts: BTreeMap<&'static str, i64>,
    position_sum: i64,
    positions: i64,
    /// Cents per currency.
    revenue: BTreeMap<String, i64>,
}

impl Tally {
    fn merge(&mut self, other: Tally) {
        for (name, n) in other.counts {
            *self.counts.entry(name).or_default() += n;
        }
        self.position_sum += other.position_sum;
        self.positions += other.positions;
        for (currency, cents) in other.revenue {
            *self.revenue.entry(currency).or_default() += cents;
        }
    }
}

/// The qualifier of a variant's counter: `variant byte · name`.
fn qualifier(variant: u8, name: &str) -> Bytes {
    let mut q = vec![variant];
    q.extend_from_slice(name.as_bytes());
    Bytes::from(q)
}

fn revenue_name(kind: &str, currency: &str) -> String {
    format!("{kind}\0{currency}")
}

fn value_of(cell: &penchant_store::Cell) -> i64 {
    <[u8; 8]>::try_from(&cell.value[..]).map_or(0, i64::from_be_bytes)
}

/// An amount as hundredths: a JSON number or a numeric string.
fn cents(value: &Value) -> Option<i64> {
    let amount = match value {
        Value::Number(n) => n.as_f64()?,
        Value::String(s) => s.trim().parse().ok()?,
        _ => return None,
    };
    amount.is_finite().then(|| (amount * 100.0).round() as i64)
}

/// A conversion's revenue in cents: its `value`, or the sum of its items' `price × quantity`
/// (less `discount`) from `objectData`.
fn revenue(event: &Event) -> Option<i64> {
    if let Some(value) = &event.value {
        return cents(value);
    }
    let items = event.object_data.as_ref()?;
    let total: i64 = items
        .iter()
        .filter_map(|item| {
            let price = cents(item.get("price")?)?;
            let quantity = item.get("quantity").and_then(Value::as_i64).unwrap_or(1);
            let discount = item.get("discount").and_then(cents).unwrap_or(0);
            Some((price - discount) * quantity)
        })
        .sum();
    (total != 0).then_some(total)
}

/// A node's tallies not yet in the store, and the variant sums whose increment failed.
#[derive(Debug)]
pub struct Results {
    store: Arc<dyn Store>,
    pending: Mutex<HashMap<(String, u32, String), Tally>>,
    unsaved: Mutex<HashMap<(String, u32), BTreeMap<Bytes, i64>>>,
}

impl Results {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            pending: Mutex::default(),
            unsaved: Mutex::default(),
        }
    }

    fn add(&self, app: &str, test: u32, user: &str, tally: Tally) {
        let mut pending = self.pending.lock();
        pending
            .entry((app.to_owned(), test, user.to_owned()))
            .or_insert_with(|| Tally {
                variant: tally.variant,
                ..Tally::default()
            })
            .merge(tally);
    }

    /// An answer served to a user of the test's `variant`; `tracked` when it carried a query ID.
    pub fn served(&self, app: &str, test: u32, variant: usize, user: &str, tracked: bool) {
        let mut counts = BTreeMap::from([("searches", 1)]);
        if tracked {
            counts.insert("trackedSearches", 1);
        }
        let tally = Tally {
            variant: variant as u8,
            counts,
            ..Tally::default()
        };
        self.add(app, test, user, tally);
    }

    /// An event attributed to the test's `variant` (a click or a conversion).
    pub fn event(&self, app: &str, test: u32, variant: usize, user: &str, event: &Event) {
        let mut tally = Tally {
            variant: variant as u8,
            ..Tally::default()
        };
        match event.event_type {
            EventType::Click => {
                tally.counts.insert("clicks", 1);
                for p in event.positions.iter().flatten() {
                    tally.position_sum += p;
                    tally.positions += 1;
                }
            }
            EventType::Conversion => {
                tally.counts.insert("conversions", 1);
                match event.event_subtype.as_deref() {
                    Some("addToCart") => {
                        tally.counts.insert("addToCarts", 1);
                    }
                    Some("purchase") => {
                        tally.counts.insert("purchases", 1);
                    }
                    _ => {}
                }
                if let Some(cents) = revenue(event) {
                    let currency = event.currency.as_deref().unwrap_or(DEFAULT_CURRENCY);
                    tally.revenue.insert(currency.to_owned(), cents);
                }
            }
            EventType::View => return,
        }
        self.add(app, test, user, tally);
    }

    /// Drop what this node holds of a deleted user.
    pub fn forget_user(&self, app: &str, user: &str) {
        self.pending
            .lock()
            .retain(|(a, _, u), _| !(a == app && u == user));
    }

    /// Drop what this node holds of a deleted test.
    pub fn forget(&self, app: &str, test: u32) {
        self.pending
            .lock()
            .retain(|(a, t, _), _| !(a == app && *t == test));
        self.unsaved.lock().remove(&(app.to_owned(), test));
    }

    /// Add a user's tally to their row; returns the variant sums it adds to.
    async fn save_user(
        &self,
        app: &str,
        test: u32,
        user: &str,
        tally: &Tally,
    ) -> Result<BTreeMap<Bytes, i64>> {
        let mut rules = Vec::new();
        for (name, n) in tally.counts.iter().filter(|(_, n)| **n != 0) {
            rules.push(ReadModifyWriteRule::increment(
                USER,
                Bytes::from_static(name.as_bytes()),
                *n,
            ));
        }
        for (currency, cents) in &tally.revenue {
            let q = revenue_name("revenue", currency);
            rules.push(ReadModifyWriteRule::increment(USER, Bytes::from(q), *cents));
        }
        let v = tally.variant;
        let mut sums = BTreeMap::new();
        let mut add = |name: &str, n: i64| {
            if n != 0 {
                *sums.entry(qualifier(v, name)).or_insert(0) += n;
            }
        };
        add("positionSum", tally.position_sum);
        add("positions", tally.positions);
        if rules.is_empty() {
            return Ok(sums);
        }
        let row = self
            .store
            .read_modify_write_row(
                ABTEST_USERS_TABLE,
                keys::abtest_user(app, user, test),
                rules,
            )
            .await?;
        let now = |q: &[u8]| row.latest(USER, q).map_or(0, value_of);
        for (name, users) in PER_USER {
            let n = tally.counts.get(name).copied().unwrap_or(0);
            if n == 0 {
                continue;
            }
            add(name, n);
            let after = now(name.as_bytes());
            if after > 0 && after - n <= 0 {
                add(users, 1);
            }
        }
        for (currency, cents) in &tally.revenue {
            let after = i128::from(now(revenue_name("revenue", currency).as_bytes()));
            let before = after - i128::from(*cents);
            let squares = (after * after - before * before).clamp(i64::MIN.into(), i64::MAX.into());
            add(&revenue_name("revenue", currency), *cents);
            add(&revenue_name("revenueSquares", currency), squares as i64);
        }
        Ok(sums)
    }

    /// Add every tally held to the store (see the module).
    pub async fn flush(&self) -> Result<()> {
        let mut pending = std::mem::take(&mut *self.pending.lock());
        let mut sums = std::mem::take(&mut *self.unsaved.lock());
        // A test deleted since (on another node) takes its tallies with it: no counter row
        // outlives its definition.
        let tests: BTreeSet<(String, u32)> = pending
            .keys()
            .map(|(app, test, _)| (app.clone(), *test))
            .chain(sums.keys().cloned())
            .collect();
        for (app, test) in tests {
            match self.exists(&app, test).await {
                Ok(true) => {}
                Ok(false) => {
                    pending.retain(|(a, t, _), _| !(*a == app && *t == test));
                    sums.remove(&(app, test));
                }
                Err(e) => {
                    for ((app, test, user), tally) in pending {
                        self.add(&app, test, &user, tally);
                    }
                    for (key, added) in sums {
                        self.keep(key, added);
                    }
                    return Err(e);
                }
            }
        }
        let saved: Vec<_> = futures::stream::iter(pending)
            .map(|((app, test, user), tally)| async move {
                let saved = self.save_user(&app, test, &user, &tally).await;
                ((app, test, user), tally, saved)
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        let mut failed = None;
        for ((app, test, user), tally, saved) in saved {
            match saved {
                Ok(added) => {
                    let into = sums.entry((app, test)).or_default();
                    for (q, n) in added {
                        *into.entry(q).or_insert(0) += n;
                    }
                }
                Err(e) => {
                    self.add(&app, test, &user, tally);
                    failed = Some(e);
                }
            }
        }
        for ((app, test), added) in sums {
            if added.is_empty() {
                continue;
            }
            let rules = added
                .iter()
                .map(|(q, n)| ReadModifyWriteRule::increment(COUNTS, q.clone(), *n))
                .collect();
            let done = self
                .store
                .read_modify_write_row(ABTESTS_TABLE, keys::abtest(&app, test), rules)
                .await;
            if let Err(e) = done {
                self.keep((app, test), added);
                failed = Some(e.into());
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Keep variant sums whose increment did not happen, for the next flush.
    fn keep(&self, test: (String, u32), added: BTreeMap<Bytes, i64>) {
        let mut unsaved = self.unsaved.lock();
        let into = unsaved.entry(test).or_default();
        for (q, n) in added {
            *into.entry(q).or_insert(0) += n;
        }
    }

    /// Whether the test's definition is stored.
    async fn exists(&self, app: &str, test: u32) -> Result<bool> {
        let filter = RowFilter::Family(super::DEFINITION.into()).and(RowFilter::StripValue);
        let row = self
            .store
            .read_row(ABTESTS_TABLE, keys::abtest(app, test), Some(filter))
            .await?;
        Ok(row.is_some_and(|r| r.latest(super::DEFINITION, super::TEST).is_some()))
    }

    /// The test's counts per variant as stored (A, B).
    pub async fn counts(&self, app: &str, test: u32) -> Result<[Counts; 2]> {
        let mut out = [Counts::default(), Counts::default()];
        let row = self
            .store
            .read_row(
                ABTESTS_TABLE,
                keys::abtest(app, test),
                Some(RowFilter::Family(COUNTS.into())),
            )
            .await?;
        for cell in row.iter().flat_map(|r| r.family(COUNTS)) {
            let Some((&variant, name)) = cell.qualifier.split_first() else {
                continue;
            };
            let (Some(counts), Ok(name)) =
                (out.get_mut(usize::from(variant)), std::str::from_utf8(name))
            else {
                continue;
            };
            let n = value_of(cell);
            match name.split_once('\0') {
                Some(("revenue", currency)) => {
                    counts.revenue.entry(currency.to_owned()).or_default().cents = n;
                }
                Some(("revenueSquares", currency)) => {
                    counts
                        .revenue
                        .entry(currency.to_owned())
                        .or_default()
                        .squares = n;
                }
                _ => {
                    if let Some(slot) = counts.slot(name) {
                        *slot = n;
                    }
                }
            }
        }
        Ok(out)
    }
}
