//! User profiles: affinity scores per facet value, computed from a user's events under the app's
//! strategy.
//!
//! **Formula.** Each event the strategy counts (its type and name are in `eventsScoring`) adds,
//! for each facet of `facetsScoring` and each value of that facet the event touched `n` times,
//! `eventScore × facetScore × n` to the value's raw score. Events up to the user's
//! `deletedUntil` (inclusive, in ms) and beyond the retention window do not count. Each facet keeps its 100 best
//! values; scores are then scaled to integers 1..20 against the user's best raw score:
//! `max(1, round(20 × raw / best))`. There is no time decay.
//!
//! **Streaming equals batch.** Both paths run the one function [`compute`] over the same rows:
//! the user's per-day aggregates (read through the wide schema's qualifier filter), with the
//! days a deletion or the retention window cuts replaced by their raw events — or, for a full
//! recompute from raw events, the raw events themselves (the aggregates sum them exactly). The
//! streaming path refreshes a user after each accepted event, once the aggregates of its days
//! are rebuilt; the batch path (a strategy change) recomputes every user of the app. Concurrent
//! writers converge: after writing a profile, a refresh reads the user's days' fingerprints
//! again and recomputes if one changed. The batch path skips profiles already computed with the
//! current strategy and writes the others in batches, stamped with the time it started reading:
//! a streaming refresh stamps its profile later (from events at least as fresh), so the newest
//! cell wins in whichever order the writes land.
//!
//! | file | concern |
//! |---|---|
//! | `scoring.rs` | the formula: a strategy's weights, [`compute`] over a user's rows |
//! | `mod.rs` | stored profiles: read, the streaming refresh, deletions |
//! | `recompute.rs` | the batch path over ranges of users, which [`crate::jobs`] runs |

mod recompute;
mod scoring;

use std::collections::BTreeMap;
use std::sync::Arc;

use penchant_store::{GcRule, Mutation, ReadRows, Row, RowFilter, RowSet, Store};
use serde::{Deserialize, Serialize};

pub use recompute::{RecomputeStats, Source, UserRange};
pub use scoring::{MAX_SCORE, MAX_VALUES_PER_FACET, Scorer, compute};
use scoring::{aggregate_filter, read_filter};

use crate::aggregates::{self, AGGREGATES_TABLE, day_of};
use crate::clock::Clock;
use crate::events::EVENTS_TABLE;
use crate::keys;
use crate::strategy::{Strategies, Versioned};
use crate::tenancy::Tenancy;
use crate::{EngineError, Result};

pub const PROFILES_TABLE: &str = "profiles";
const FAMILY: &str = "p";
const PROFILE: &[u8] = b"profile";
const VERSION: &[u8] = b"version";
const DELETED_UNTIL: &[u8] = b"deletedUntil";

/// The tables this module needs.
pub fn tables() -> Vec<(&'static str, BTreeMap<String, GcRule>)> {
    vec![(
        PROFILES_TABLE,
        BTreeMap::from([(FAMILY.to_owned(), GcRule::MaxVersions(1))]),
    )]
}

/// Scores per facet and value, 1..20.
pub type Scores = BTreeMap<String, BTreeMap<String, u32>>;
/// A user's profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Profile {
    pub user_token: String,
    /// The user's latest counted event, in ms.
    pub last_event_at: Option<i64>,
    pub scores: Scores,
}

/// What a user's days hold: each aggregate row's key and fingerprint (`_print`).
fn prints(days: &[Row]) -> Vec<(&[u8], Option<&[u8]>)> {
    days.iter()
        .map(|r| {
            let print = r.latest(aggregates::FAMILY, aggregates::PRINT);
            (&r.key[..], print.map(|c| &c.value[..]))
        })
        .collect()
}

/// What is stored about a user besides their events.
#[derive(Debug, Default)]
struct Stored {
    profile: Option<Profile>,
    version: Option<i64>,
    deleted_until: i64,
}

impl Stored {
    fn from_row(row: &Row) -> Result<Stored> {
        let value = |q: &[u8]| row.latest(FAMILY, q).map(|c| &c.value[..]);
        let number = |q: &[u8]| value(q).and_then(|v| std::str::from_utf8(v).ok()?.parse().ok());
        Ok(Stored {
            profile: value(PROFILE)
                .map(serde_json::from_slice)
                .transpose()
                .map_err(corrupt)?,
            version: number(VERSION),
            deleted_until: number(DELETED_UNTIL).unwrap_or(i64::MIN),
        })
    }
}

fn corrupt(e: impl std::fmt::Display) -> EngineError {
    crate::internal("corrupt profile", e)
}

/// Profiles of every app.
#[derive(Debug, Clone)]
pub struct Profiles {
    store: Arc<dyn Store>,
    strategies: Arc<Strategies>,
    tenancy: Arc<Tenancy>,
    clock: Clock,
}

impl Profiles {
    pub fn new(
        store: Arc<dyn Store>,
        strategies: Arc<Strategies>,
        tenancy: Arc<Tenancy>,
        clock: Clock,
    ) -> Self {
        Self {
            store,
            strategies,
            tenancy,
            clock,
        }
    }

    /// The oldest event time (ms) that counts for the app: its retention window.
    async fn window_start(&self, app: &str) -> Result<i64> {
        let retention = self.tenancy.retention(app).await?;
        Ok(self.clock.now_ms() - retention.as_millis() as i64)
    }

    async fn stored(&self, app: &str, user: &str) -> Result<Stored> {
        match self
            .store
            .read_row(PROFILES_TABLE, keys::profile(app, user), None)
            .await?
        {
            Some(row) => Stored::from_row(&row),
            None => Ok(Stored::default()),
        }
    }

    /// A user's rows of `table` (raw events, or per-day aggregates), filtered.
    async fn read_user(
        &self,
        table: &str,
        app: &str,
        user: &str,
        filter: RowFilter,
    ) -> Result<Vec<Row>> {
        let request = ReadRows::new(RowSet::prefix(keys::user(app, user))).filter(filter);
        Ok(self.store.read_all(table, request).await?)
    }

    /// The cells of a profile, stamped with the store's clock (`None`) or at a given time.
    fn profile_mutations(
        profile: &Profile,
        version: i64,
        stamp: Option<i64>,
    ) -> Result<Vec<Mutation>> {
        let json = serde_json::to_vec(profile).map_err(corrupt)?;
        let set = |q: &'static [u8], v: Vec<u8>| match stamp {
            Some(ts) => Mutation::set(FAMILY, q, ts, v),
            None => Mutation::set_now(FAMILY, q, v),
        };
        Ok(vec![
            set(PROFILE, json),
            set(VERSION, version.to_string().into_bytes()),
        ])
    }

    /// Recompute one user's profile under the app's current strategy and store it (the
    /// streaming path, after each event, once the aggregates of its days are rebuilt). `None`
    /// when the app has no strategy.
    ///
    /// It reads what a batch recompute reads — the user's per-day aggregates, and the raw events
    /// of a day a deletion or the retention window cuts — so its cost follows the user's active
    /// days, not their events. After writing, it reads the days' fingerprints again and starts
    /// over if another node rebuilt one meanwhile.
    pub async fn refresh(&self, app: &str, user: &str) -> Result<Option<Profile>> {
        let Some(strategy) = self.strategies.get(app).await? else {
            return Ok(None);
        };
        let scorer = Scorer::new(&strategy.strategy);
        let print = RowFilter::column(aggregates::FAMILY, aggregates::PRINT);
        let filter =
            RowFilter::Interleave(vec![aggregate_filter(&strategy.strategy), print.clone()]);
        let mut profile = None;
        // Converges unless events keep arriving for this user; each round sees more of them.
        for _ in 0..8 {
            let stored = self.stored(app, user).await?;
            let days = self
                .read_user(AGGREGATES_TABLE, app, user, filter.clone())
                .await?;
            let since = self.window_start(app).await?;
            let cut = self
                .cut_days(app, user, &days, &strategy, &stored, since)
                .await?;
            let rows = cut.as_deref().unwrap_or(&days);
            let computed = scorer.compute(user, rows, stored.deleted_until, since);
            self.store
                .mutate_row(
                    PROFILES_TABLE,
                    keys::profile(app, user),
                    Self::profile_mutations(&computed, strategy.version, None)?,
                )
                .await?;
            profile = Some(computed);
            let again = self
                .read_user(AGGREGATES_TABLE, app, user, print.clone())
                .await?;
            if prints(&again) == prints(&days) {
                break;
            }
        }
        Ok(profile)
    }

    /// A user's profile: as stored if it was computed with the current strategy, else
    /// recomputed now. `None` for a user without counted events.
    pub async fn get(&self, app: &str, user: &str) -> Result<Option<Profile>> {
        let Some(strategy) = self.strategies.get(app).await? else {
            return Ok(None);
        };
        let stored = self.stored(app, user).await?;
        let profile = match (stored.profile, stored.version) {
            (Some(p), Some(v)) if v == strategy.version => Some(p),
            _ => self.refresh(app, user).await?,
        };
        Ok(profile.filter(|p| p.last_event_at.is_some()))
    }

    /// The profile as stored, with the strategy version it was computed with (no refresh).
    pub async fn stored_profile(&self, app: &str, user: &str) -> Result<Option<(Profile, i64)>> {
        let stored = self.stored(app, user).await?;
        Ok(stored.profile.zip(stored.version))
    }

    /// The profile a full recompute gives now, under the current strategy, without storing it.
    pub async fn recompute_one(&self, app: &str, user: &str) -> Result<Option<Profile>> {
        let Some(strategy) = self.strategies.fresh(app).await? else {
            return Ok(None);
        };
        let stored = self.stored(app, user).await?;
        let rows = self
            .read_user(EVENTS_TABLE, app, user, read_filter(&strategy.strategy))
            .await?;
        let since = self.window_start(app).await?;
        Ok(Some(compute(
            &strategy.strategy,
            user,
            &rows,
            stored.deleted_until,
            since,
        )))
    }

    /// Forget a user's events up to `until` (ms, inclusive): they no longer count, from now on.
    pub async fn delete_profile(&self, app: &str, user: &str, until: i64) -> Result<()> {
        self.store
            .mutate_row(
                PROFILES_TABLE,
                keys::profile(app, user),
                vec![Mutation::set_now(FAMILY, DELETED_UNTIL, until.to_string())],
            )
            .await?;
        self.refresh(app, user).await?;
        Ok(())
    }

    /// Delete every trace of a user: events, aggregates, seen filter and profile.
    pub async fn delete_user(&self, app: &str, user: &str) -> Result<()> {
        // Row by row (Bigtable's DropRowRange is an admin operation, not meant for per-user
        // traffic).
        let prefix = keys::user(app, user);
        for table in [EVENTS_TABLE, AGGREGATES_TABLE, crate::seen::SEEN_TABLE] {
            self.store.delete_prefix(table, prefix.clone()).await?;
        }
        self.store
            .mutate_row(
                PROFILES_TABLE,
                keys::profile(app, user),
                vec![Mutation::DeleteFromRow],
            )
            .await?;
        Ok(())
    }

    /// Aggregate rows of a user, with the days a deletion or the retention window (from
    /// `since`, ms) cuts replaced by their raw events (an aggregate counts the whole day).
    /// `None` when no day is cut.
    async fn cut_days(
        &self,
        app: &str,
        user: &str,
        rows: &[Row],
        strategy: &Versioned,
        stored: &Stored,
        since: i64,
    ) -> Result<Option<Vec<Row>>> {
        let mut cut = vec![day_of(since)];
        if stored.deleted_until > i64::MIN {
            cut.push(day_of(stored.deleted_until));
        }
        let day = |row: &Row| keys::day_of(&row.key);
        // A day without an aggregate has no raw events either (aggregates are rebuilt after
        // every raw write, and expire with their day's last event).
        cut.retain(|d| rows.iter().any(|r| day(r) == Some(*d)));
        if cut.is_empty() {
            return Ok(None);
        }
        let mut out: Vec<Row> = rows
            .iter()
            .filter(|r| day(r).is_some_and(|d| !cut.contains(&d)))
            .cloned()
            .collect();
        for d in cut {
            let request = ReadRows::new(aggregates::raw_day(app, user, d))
                .filter(read_filter(&strategy.strategy));
            out.extend(self.store.read_all(EVENTS_TABLE, request).await?);
        }
        Ok(Some(out))
    }
}
