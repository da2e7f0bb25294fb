//! A/B tests of personalization and recommendations (Algolia's A/B testing API v2): two
//! variants of one index, each with the parameters Penchant applies to its answers there
//! (`customSearchParameters`), users split between them by a stable hash, and results counted
//! from the Insights events that carry a query ID the test issued.
//!
//! **Assignment.** A user is in variant A when `xxh3(user token, seed = test ID) mod 100` is
//! below A's `trafficPercentage`, else in B: the same on every node and for the whole test, with
//! nothing stored. One running test per index: a second one on the same index is refused (it
//! would split the same users for the same parameters).
//!
//! **Serving.** Re-ranking and Recommend answers for a user of a running test's index apply the
//! user's variant over the request's own parameters and say `abTestID` and `abTestVariantID`
//! (1-based); with `clickAnalytics` they carry a `queryID` that encodes the test and the variant
//! ([`query_id`]), so the events that follow are attributed without any other call.
//!
//! **Results** ([`results`]): counted in memory per node (served answers, attributed clicks and
//! conversions) and added to the store every [`results::FLUSH_EVERY`] with atomic increments —
//! per user (table `abtest_users`, under the user's prefix: deleting the user deletes them) and
//! per variant (the test's row), so a user's first answer, click or conversion is counted once
//! whichever node sees it. Significance ([`significance`]) compares users.
//!
//! | table | row | cells |
//! |---|---|---|
//! | `abtests` | `app 0` | `t:next`: the last test ID given (i64 BE, an atomic increment) |
//! | `abtests` | `app 0 · ID (u32 BE)` | `t:test` the definition (JSON); `c:<variant byte> · <count>` counters (i64 BE) |
//! | `abtest_users` | `app 0 · user 0 · ID (u32 BE)` | `u:<count>` the user's counters in the test |

pub mod results;
pub mod significance;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use penchant_store::{Mutation, ReadModifyWriteRule, ReadRows, RowFilter, RowSet, Store};

use crate::cache::{self, TtlCache};
use crate::clock::Clock;
use crate::{EngineError, Result, internal, keys};

use penchant_model::tables::ABTESTS_DEFINITION as DEFINITION;
pub use penchant_model::tables::{ABTEST_USERS, ABTEST_USERS_TABLE, ABTESTS, ABTESTS_TABLE};
pub use results::{Counts, Revenue};

const TEST: &[u8] = b"test";
const NEXT: &[u8] = b"next";
/// The lease under which a node starts one of an app's tests.
pub const START_LEASE: &str = "abtests";
use penchant_model::abtests::variant_params;
pub use penchant_model::abtests::{
    AbTest, Assignment, MAX_NAME_CHARS, NewTest, NewVariant, Status, Variant, VariantParams,
};

/// What an answer says of A/B testing and analytics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Served {
    /// The test and the user's variant (0 for A), when the user is in a running test.
    pub ab_test: Option<(u32, usize)>,
    /// With `clickAnalytics`: the ID the answer's events carry.
    pub query_id: Option<String>,
    /// Recommend: the model asked, once the variant applied.
    pub model: String,
}

impl Served {
    /// An answer outside any test.
    pub fn plain(tracked: bool) -> Self {
        Self {
            query_id: tracked.then(plain_query_id),
            ..Self::default()
        }
    }
}

/// A query ID that says which test and variant served it: 32 hex digits, `test (8) · variant
/// (2) · random (18) · tag (4)`, the tag a hash of the rest, so that a query ID from elsewhere
/// is taken for one of Penchant's once in 65,536 (and must then name a test of the app that put
/// its user in that variant).
pub fn query_id(test: u32, variant: usize) -> String {
    let random = rand::random::<u128>() & ((1 << 72) - 1);
    let head = format!("{test:08x}{:02x}{random:018x}", variant as u8);
    format!("{head}{:04x}", tag(&head))
}

/// A query ID that names no test.
pub fn plain_query_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

fn tag(head: &str) -> u16 {
    xxhash_rust::xxh3::xxh3_64_with_seed(head.as_bytes(), 0xab7e57) as u16
}

/// The test and variant a query ID was issued for, if it is one of [`query_id`]'s.
pub fn decode_query_id(query_id: &str) -> Option<(u32, usize)> {
    if query_id.len() != 32 || !query_id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let (head, check) = query_id.split_at(28);
    if u16::from_str_radix(check, 16).ok()? != tag(&head.to_ascii_lowercase()) {
        return None;
    }
    let test = u32::from_str_radix(&head[..8], 16).ok()?;
    let variant = usize::from(u8::from_str_radix(&head[8..10], 16).ok()?);
    (variant < 2).then_some((test, variant))
}

/// An app's tests, with a per-node cache of their definitions.
#[derive(Debug)]
pub struct AbTests {
    store: Arc<dyn Store>,
    clock: Clock,
    cache: TtlCache<String, Arc<Vec<AbTest>>>,
    pub(crate) results: results::Results,
    /// Held while this node starts a test (with the app's lease for the other nodes): the
    /// check that no test runs on the index and the write are one step.
    pub(crate) starting: tokio::sync::Mutex<()>,
}

fn invalid<T>(message: impl Into<String>) -> Result<T> {
    Err(EngineError::Invalid(message.into()))
}

impl AbTests {
    /// How the tests' cache has served.
    pub fn cache_stats(&self) -> cache::CacheStats {
        self.cache.stats()
    }

    pub fn new(store: Arc<dyn Store>, ttl: Duration, clock: Clock) -> Self {
        Self {
            results: results::Results::new(store.clone()),
            cache: TtlCache::new(cache::DEFAULT_CAPACITY, ttl, clock.clone()),
            starting: tokio::sync::Mutex::new(()),
            store,
            clock,
        }
    }

    /// The app's tests (cached for the TTL), oldest first.
    pub async fn all(&self, app: &str) -> Result<Arc<Vec<AbTest>>> {
        if let Some(tests) = self.cache.get(app) {
            return Ok(tests);
        }
        self.fresh(app).await
    }

    /// The app's tests as stored now, oldest first.
    pub async fn fresh(&self, app: &str) -> Result<Arc<Vec<AbTest>>> {
        let request = ReadRows::new(RowSet::prefix(keys::app(app)))
            .filter(RowFilter::Family(DEFINITION.into()));
        let mut tests = Vec::new();
        for row in self.store.read_all(ABTESTS_TABLE, request).await? {
            if keys::abtest_of(app, &row.key).is_none() {
                continue;
            }
            if let Some(cell) = row.latest(DEFINITION, TEST) {
                let test: AbTest = serde_json::from_slice(&cell.value)
                    .map_err(|e| internal("corrupt A/B test", e))?;
                tests.push(test);
            }
        }
        let tests = Arc::new(tests);
        self.cache.insert(app.to_owned(), tests.clone());
        Ok(tests)
    }

    /// One test as stored now.
    pub async fn get(&self, app: &str, id: u32) -> Result<AbTest> {
        let row = self
            .store
            .read_row(
                ABTESTS_TABLE,
                keys::abtest(app, id),
                Some(RowFilter::Family(DEFINITION.into())),
            )
            .await?;
        let cell = row.as_ref().and_then(|r| r.latest(DEFINITION, TEST));
        let Some(cell) = cell else {
            return Err(EngineError::NotFound(format!(
                "A/B test {id} does not exist"
            )));
        };
        serde_json::from_slice(&cell.value).map_err(|e| internal("corrupt A/B test", e))
    }

    /// The running test of an index, if any.
    pub async fn running(&self, app: &str, index: &str) -> Result<Option<AbTest>> {
        let now = self.clock.now_ms();
        Ok(self
            .all(app)
            .await?
            .iter()
            .find(|t| t.index() == index && t.status(now) == Status::Active)
            .cloned())
    }

    /// The user's variant in the running test of `index`, if there is one.
    pub async fn assign(&self, app: &str, index: &str, user: &str) -> Result<Option<Assignment>> {
        Ok(self.running(app, index).await?.map(|test| {
            let variant = test.variant_of(user);
            Assignment {
                test: test.id,
                variant,
                params: test.variants[variant]
                    .custom_search_parameters
                    .clone()
                    .unwrap_or_default(),
            }
        }))
    }

    /// Check a new test alone: its name, two variants of one index splitting all traffic, an
    /// end to come, parameters Penchant applies. Returns the variants as stored.
    pub fn check(&self, new: NewTest) -> Result<(String, Vec<Variant>, i64)> {
        let name = new.name.trim().to_owned();
        if name.is_empty() || name.chars().count() > MAX_NAME_CHARS {
            return invalid(format!("name must be 1 to {MAX_NAME_CHARS} characters"));
        }
        if new.variants.len() != 2 {
            return invalid(format!(
                "variants must hold exactly 2 variants (A, the control, then B), not {}",
                new.variants.len()
            ));
        }
        let mut variants = Vec::with_capacity(2);
        for (i, v) in new.variants.into_iter().enumerate() {
            if v.index.is_empty() || v.index.len() > 256 || v.index.contains('\0') {
                return invalid(format!("variants[{i}].index must be an index name"));
            }
            if !(1..=99).contains(&v.traffic_percentage) {
                return invalid(format!(
                    "variants[{i}].trafficPercentage must be an integer from 1 to 99"
                ));
            }
            variants.push(Variant {
                index: v.index,
                traffic_percentage: v.traffic_percentage as u32,
                description: v.description.unwrap_or_default(),
                custom_search_parameters: variant_params(i, v.custom_search_parameters)?,
            });
        }
        if variants[0].index != variants[1].index {
            return invalid(format!(
                "both variants must be on the same index (Penchant tests customSearchParameters \
                 on one index), not `{}` and `{}`",
                variants[0].index, variants[1].index
            ));
        }
        let total: u32 = variants.iter().map(|v| v.traffic_percentage).sum();
        if total != 100 {
            return invalid(format!(
                "the variants' trafficPercentage must add up to 100, not {total}"
            ));
        }
        if new.end_at <= self.clock.now_ms() {
            return invalid("endAt must be in the future");
        }
        Ok((name, variants, new.end_at))
    }

    /// Start a checked test ([`AbTests::check`]), unless a running test is on its index. The
    /// caller holds [`AbTests::starting`] and the app's lease [`START_LEASE`], so that two
    /// tests started at once on one index, on any nodes, cannot both pass the check.
    pub async fn add(
        &self,
        app: &str,
        name: String,
        variants: Vec<Variant>,
        end_at: i64,
    ) -> Result<AbTest> {
        let now = self.clock.now_ms();
        let index = &variants[0].index;
        if let Some(other) = self
            .fresh(app)
            .await?
            .iter()
            .find(|t| t.index() == index && t.status(now) == Status::Active)
        {
            return Err(EngineError::Invalid(format!(
                "index `{index}` is already in the running A/B test {} (\"{}\"): a user can be in \
                 one test of an index at a time; stop it first, or wait for its end",
                other.id, other.name
            )));
        }
        let row = self
            .store
            .read_modify_write_row(
                ABTESTS_TABLE,
                keys::app(app),
                vec![ReadModifyWriteRule::increment(
                    DEFINITION,
                    Bytes::from_static(NEXT),
                    1,
                )],
            )
            .await?;
        let id = row
            .latest(DEFINITION, NEXT)
            .and_then(|c| <[u8; 8]>::try_from(&c.value[..]).ok())
            .map(i64::from_be_bytes)
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| internal("A/B test IDs", "no counter value"))?;
        let test = AbTest {
            id,
            name,
            variants,
            created_at: now,
            updated_at: now,
            end_at,
            stopped_at: None,
        };
        self.write(app, &test).await?;
        Ok(test)
    }

    async fn write(&self, app: &str, test: &AbTest) -> Result<()> {
        let value = serde_json::to_vec(test).map_err(|e| internal("serialization", e))?;
        self.store
            .mutate_row(
                ABTESTS_TABLE,
                keys::abtest(app, test.id),
                vec![Mutation::set_now(DEFINITION, TEST, value)],
            )
            .await?;
        self.cache.remove(app);
        Ok(())
    }

    /// Stop a test: its answers go back to normal, and events after now do not count.
    pub async fn stop(&self, app: &str, id: u32) -> Result<AbTest> {
        let mut test = self.get(app, id).await?;
        let now = self.clock.now_ms();
        match test.status(now) {
            Status::Active => {}
            status => {
                return Err(EngineError::Invalid(format!(
                    "A/B test {id} is {}: only an active test can be stopped (a stopped test \
                     cannot restart)",
                    status.as_str()
                )));
            }
        }
        test.stopped_at = Some(now);
        test.updated_at = now;
        self.write(app, &test).await?;
        Ok(test)
    }

    /// Delete a test and its counts (users' own counts go with their rows' age).
    pub async fn delete(&self, app: &str, id: u32) -> Result<AbTest> {
        let test = self.get(app, id).await?;
        self.store
            .mutate_row(
                ABTESTS_TABLE,
                keys::abtest(app, id),
                vec![Mutation::DeleteFromRow],
            )
            .await?;
        self.results.forget(app, id);
        self.cache.remove(app);
        Ok(test)
    }

    /// Count an answer served to a user of a test; with a query ID when `tracked`.
    pub fn served(&self, app: &str, assignment: &Assignment, user: &str, tracked: bool) -> Served {
        self.results
            .served(app, assignment.test, assignment.variant, user, tracked);
        Served {
            ab_test: Some((assignment.test, assignment.variant)),
            query_id: tracked.then(|| query_id(assignment.test, assignment.variant)),
            model: String::new(),
        }
    }

    /// Attribute clicks and conversions that carry a test's query ID to its variant: those of
    /// a user the test put in that variant, timestamped while it ran.
    pub async fn attribute(&self, app: &str, events: &[&crate::events::Event]) -> Result<()> {
        let mut tests = None;
        for event in events {
            let Some((id, variant)) = event.query_id.as_deref().and_then(decode_query_id) else {
                continue;
            };
            if event.event_type == crate::events::EventType::View {
                continue;
            }
            if tests.is_none() {
                tests = Some(self.all(app).await?);
            }
            let Some(test) = tests.as_ref().and_then(|t| t.iter().find(|t| t.id == id)) else {
                continue;
            };
            let user = [
                Some(event.user_token.as_str()),
                event.authenticated_user_token.as_deref(),
            ]
            .into_iter()
            .flatten()
            .find(|u| test.variant_of(u) == variant);
            if let Some(user) = user.filter(|_| test.counts_at(event.timestamp)) {
                self.results.event(app, id, variant, user, event);
            }
        }
        Ok(())
    }

    /// Forget what this node knows of an app (its tests were replaced or dropped).
    pub fn forget(&self, app: &str) {
        self.cache.remove(app);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test(split: u32) -> AbTest {
        let variant = |p| Variant {
            index: "products".into(),
            traffic_percentage: p,
            description: String::new(),
            custom_search_parameters: None,
        };
        AbTest {
            id: 7,
            name: "t".into(),
            variants: vec![variant(split), variant(100 - split)],
            created_at: 0,
            updated_at: 0,
            end_at: 1000,
            stopped_at: None,
        }
    }

    #[test]
    fn query_ids_say_their_test_and_variant_and_others_do_not() {
        for (t, v) in [(1, 0), (7, 1), (u32::MAX, 1)] {
            let id = query_id(t, v);
            assert_eq!(id.len(), 32);
            assert!(id.bytes().all(|b| b.is_ascii_hexdigit()));
            assert_eq!(decode_query_id(&id), Some((t, v)));
            assert_eq!(decode_query_id(&id.to_ascii_uppercase()), Some((t, v)));
        }
        let foreign = (0..10_000)
            .filter(|_| decode_query_id(&plain_query_id()).is_some())
            .count();
        assert!(foreign < 5, "{foreign} random query IDs decoded");
        assert_eq!(decode_query_id("a00dbc80a8d13c4565a442e7e2dca80"), None);
        let mut wrong = query_id(3, 1);
        wrong.replace_range(0..1, if wrong.starts_with('0') { "1" } else { "0" });
        assert_eq!(decode_query_id(&wrong), None, "the tag covers the test ID");
    }

    #[test]
    fn users_split_by_the_percentages_and_stay_in_their_variant() {
        for split in [10, 50, 90] {
            let t = test(split);
            let users: Vec<String> = (0..20_000).map(|i| format!("user-{i}")).collect();
            let in_a = users.iter().filter(|u| t.variant_of(u) == 0).count();
            let share = in_a as f64 / users.len() as f64;
            assert!(
                (share - f64::from(split) / 100.0).abs() < 0.015,
                "split {split}: {share}"
            );
            assert!(users.iter().all(|u| t.variant_of(u) == t.variant_of(u)));
        }
        // Another test splits the same users independently.
        let (a, mut b) = (test(50), test(50));
        b.id = 8;
        let same = (0..10_000)
            .map(|i| format!("u{i}"))
            .filter(|u| a.variant_of(u) == b.variant_of(u))
            .count();
        assert!((4_500..5_500).contains(&same), "{same}");
    }

    #[test]
    fn a_test_counts_events_from_its_start_to_its_end_or_stop() {
        let mut t = test(50);
        t.created_at = 100;
        assert!(!t.counts_at(99));
        assert!(t.counts_at(100) && t.counts_at(1000));
        assert!(!t.counts_at(1001));
        assert_eq!(t.status(999), Status::Active);
        assert_eq!(t.status(1000), Status::Expired);
        t.stopped_at = Some(500);
        assert_eq!(t.status(200), Status::Stopped);
        assert!(t.counts_at(500) && !t.counts_at(501));
    }
}
