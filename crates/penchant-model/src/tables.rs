//! Every table the engine keeps, in one registry ([`ALL`]): its column families and how long
//! the store keeps their cells, whose rows it holds, and its row key (encoded in
//! [`crate::keys`]). The engine creates them from it (`penchant_engine::tables::create`);
//! residency moves what it says moves; deleting a user deletes the rows it says are a user's.
//! Every table and its families are declared here, and nowhere else.
//!
//! | table | rows | row key |
//! |---|---|---|
//! | `apps` | app | `app 0` |
//! | `keys` | app | `app 0 · SHA-256 of the key (32 bytes)` |
//! | `catalog` | app | `app 0 · index 0 · objectID` |
//! | `indexes` | app | `app 0 · index 0` |
//! | `events` | user | `app 0 · user 0 · time ms (u64 BE) · discriminator (u64 BE)`; a batch's ingestion intent: `app 0 · 0xFF · batch (u64 BE)` |
//! | `strategies` | app | the strategy: `app 0`; a named strategy: `app 0 · name` |
//! | `profiles` | user | `app 0 · user` |
//! | `states` | user | a user's state: `app 0 · user 0`; the app's marker: `app 0` |
//! | `aggregates` | user | `app 0 · user 0 · day since the epoch (u32 BE)` |
//! | `jobs` | app | `app 0` (a column per job kind) |
//! | `sets` | app | `app 0 · set name` |
//! | `set_partitions` | app | `app 0 · set name 0 · generation (u64 BE) · partition (u32 BE)` |
//! | `seen` | user | a user's filter: `app 0 · user 0`; the app's settings: `app 0` |
//! | `leases` | pinned | `app 0 · lease name` (`0 · lease name` for a node-wide one) |
//! | `spaces` | app | `app 0 · space name` |
//! | `item_vectors` | app | `app 0 · space name 0 · objectID` |
//! | `user_vectors` | user | `app 0 · user 0` (one column per space) |
//! | `queues` | user | a user's queue: `app 0 · user 0 · queue name`; a queue's definition: `app 0 · 0xFF · queue name` |
//! | `related` | app | `app 0 · index 0 · model 0 · objectID` |
//! | `trending` | app | `app 0 · index 0 · day (u32 BE) · shard (u8)` |
//! | `stats` | app | `app 0 · hour since the epoch (u32 BE)` |
//! | `placements` | pinned | an app: `app`; a user: `app 0 · user` |
//! | `waiting` | app | `app 0 · index 0 · objectID 0 · event row key` |
//! | `abtests` | app | an A/B test: `app 0 · test ID (u32 BE)`; the app's test ID counter: `app 0` |
//! | `abtest_users` | user | `app 0 · user 0 · test ID (u32 BE)` |
//! | `rankers` | app | a ranker: `app 0 · index`; a chunk of the snapshot it serves from: `app 0 · index 0 · chunk (u32 BE)` |
//! | `impressions` | user | `app 0 · user 0 · time ms (u64 BE) · queryID` |
//! | `retries` | user | a user's events that came without a timestamp: `app 0 · user 0`; a batch answered: `app 0 · 0xFF · batch (u64 BE)` |
//!
//! Rows: **app**, every row is an app's (`app 0 ...`, one key range per app) and moves with the
//! app; **user**, rows are users' (`app 0 · user ...`, one range per user) and move with a
//! user's own placement, and deleting a user deletes them; **pinned**, rows stay on the default
//! target whatever the placements say (who lives where, and the leases that say who moves it).

use std::collections::BTreeMap;
use std::time::Duration;

use penchant_store::GcRule;

use crate::days::DAY_MS;
use crate::recommend::trending::WINDOW_DAYS;

/// A table of the engine.
#[derive(Debug, Clone, Copy)]
pub struct Table {
    pub name: &'static str,
    /// Its column families, and how long the store keeps their cells.
    pub families: &'static [(&'static str, Gc)],
    pub rows: Rows,
}

/// Whose rows a table holds (see the registry's table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rows {
    App,
    User,
    Pinned,
}

/// How long a family's cells are kept.
#[derive(Debug, Clone, Copy)]
pub enum Gc {
    /// The newest `n` cells of each column.
    Versions(u32),
    /// Cells younger than this.
    Age(Duration),
    /// The newest `n` cells of each column, while younger than this.
    VersionsAndAge(u32, Duration),
}

impl Gc {
    pub fn rule(self) -> GcRule {
        match self {
            Gc::Versions(n) => GcRule::MaxVersions(n),
            Gc::Age(age) => GcRule::MaxAge(age),
            Gc::VersionsAndAge(n, age) => {
                GcRule::Union(vec![GcRule::MaxVersions(n), GcRule::MaxAge(age)])
            }
        }
    }
}

impl Table {
    /// Its families as the store takes them.
    pub fn family_rules(&self) -> BTreeMap<String, GcRule> {
        self.families
            .iter()
            .map(|(family, gc)| ((*family).to_owned(), gc.rule()))
            .collect()
    }
}

// -- apps and keys ([`penchant_engine::tenancy`])

pub const APPS_TABLE: &str = "apps";
pub const KEYS_TABLE: &str = "keys";
/// The one family of `apps` and `keys`.
pub const TENANCY_FAMILY: &str = "m";

/// Apps.
pub const APPS: Table = Table {
    name: APPS_TABLE,
    families: &[(TENANCY_FAMILY, Gc::Versions(1))],
    rows: Rows::App,
};
/// API keys, by digest.
pub const KEYS: Table = Table {
    name: KEYS_TABLE,
    families: &[(TENANCY_FAMILY, Gc::Versions(1))],
    rows: Rows::App,
};

// -- the catalog

pub const CATALOG_TABLE: &str = "catalog";
pub const CATALOG_FAMILY: &str = "r";
pub const INDEXES_TABLE: &str = "indexes";
pub const INDEXES_FAMILY: &str = "m";

/// Records, per index.
pub const CATALOG: Table = Table {
    name: CATALOG_TABLE,
    families: &[(CATALOG_FAMILY, Gc::Versions(1))],
    rows: Rows::App,
};
/// Indexes' settings.
pub const INDEXES: Table = Table {
    name: INDEXES_TABLE,
    families: &[(INDEXES_FAMILY, Gc::Versions(1))],
    rows: Rows::App,
};

// -- events

pub const EVENTS_TABLE: &str = "events";
/// The wide layout's family (and the event itself, `e:event`).
pub const EVENTS_FAMILY: &str = "e";
/// The narrow layout's families: one per event type.
pub const NARROW_FAMILIES: [&str; 3] = ["click", "conversion", "view"];
/// How long raw events (and what is kept for as long as they are) are kept.
pub const EVENTS_RETENTION: Duration = Duration::from_secs(90 * 24 * 3600);

/// Raw events: the event, and its counts in the narrow layout (a family per event type).
pub const EVENTS: Table = Table {
    name: EVENTS_TABLE,
    families: &[
        (EVENTS_FAMILY, Gc::Age(EVENTS_RETENTION)),
        (NARROW_FAMILIES[0], Gc::Age(EVENTS_RETENTION)),
        (NARROW_FAMILIES[1], Gc::Age(EVENTS_RETENTION)),
        (NARROW_FAMILIES[2], Gc::Age(EVENTS_RETENTION)),
    ],
    rows: Rows::User,
};

// -- strategies

pub const STRATEGIES_TABLE: &str = "strategies";
pub const STRATEGIES_FAMILY: &str = "s";

/// Strategies, with their versions.
pub const STRATEGIES: Table = Table {
    name: STRATEGIES_TABLE,
    families: &[(STRATEGIES_FAMILY, Gc::Versions(1))],
    rows: Rows::App,
};

// -- profiles and states

pub const PROFILES_TABLE: &str = "profiles";
pub const PROFILES_FAMILY: &str = "p";
/// The family of a user's events that wait for their items' records: a column per event (its
/// row key), stamped like the event.
pub const PROFILES_WAITING_FAMILY: &str = "w";
pub const STATES_TABLE: &str = "states";
pub const STATES_FAMILY: &str = "s";

/// Stored profiles.
pub const PROFILES: Table = Table {
    name: PROFILES_TABLE,
    families: &[
        (PROFILES_FAMILY, Gc::Versions(1)),
        (PROFILES_WAITING_FAMILY, Gc::Age(EVENTS_RETENTION)),
    ],
    rows: Rows::User,
};
/// Users' states.
pub const STATES: Table = Table {
    name: STATES_TABLE,
    families: &[(STATES_FAMILY, Gc::Versions(1))],
    rows: Rows::User,
};

// -- aggregates

pub const AGGREGATES_TABLE: &str = "aggregates";
pub const AGGREGATES_FAMILY: &str = "a";
/// A day row's hold cells: one per batch in flight whose deltas it holds.
pub const AGGREGATES_HOLDS: &str = "h";

/// Per-day aggregates of users' events.
pub const AGGREGATES: Table = Table {
    name: AGGREGATES_TABLE,
    families: &[
        (AGGREGATES_FAMILY, Gc::Age(EVENTS_RETENTION)),
        (AGGREGATES_HOLDS, Gc::Age(EVENTS_RETENTION)),
    ],
    rows: Rows::User,
};

// -- jobs and leases

pub const JOBS_TABLE: &str = "jobs";
pub const JOBS_FAMILY: &str = "j";
pub const LEASES_TABLE: &str = "leases";
pub const LEASES_FAMILY: &str = "l";

/// Job statuses: a row per app, a column per kind.
pub const JOBS: Table = Table {
    name: JOBS_TABLE,
    families: &[(JOBS_FAMILY, Gc::Versions(1))],
    rows: Rows::App,
};
/// Leases on background work.
pub const LEASES: Table = Table {
    name: LEASES_TABLE,
    families: &[(LEASES_FAMILY, Gc::Versions(1))],
    rows: Rows::Pinned,
};

// -- key sets and seen filters

pub const SETS_TABLE: &str = "sets";
pub const SETS_FAMILY: &str = "m";
pub const PARTITIONS_TABLE: &str = "set_partitions";
pub const PARTITIONS_FAMILY: &str = "p";
pub const SEEN_TABLE: &str = "seen";
pub const SEEN_FAMILY: &str = "s";
/// Items the user hid ("not for me"), until when.
pub const SEEN_HIDDEN: &str = "n";
/// The longest an item stays hidden.
pub const MAX_HIDE_DAYS: u32 = 365;

/// Sets' descriptions.
pub const SETS: Table = Table {
    name: SETS_TABLE,
    families: &[(SETS_FAMILY, Gc::Versions(1))],
    rows: Rows::App,
};
/// Sets' filter partitions.
pub const PARTITIONS: Table = Table {
    name: PARTITIONS_TABLE,
    families: &[(PARTITIONS_FAMILY, Gc::Versions(1))],
    rows: Rows::App,
};
/// Users' seen filters, and the apps' settings.
pub const SEEN: Table = Table {
    name: SEEN_TABLE,
    families: &[
        (SEEN_FAMILY, Gc::Versions(1)),
        (
            SEEN_HIDDEN,
            Gc::VersionsAndAge(
                1,
                Duration::from_millis((MAX_HIDE_DAYS as u64 + 1) * DAY_MS as u64),
            ),
        ),
    ],
    rows: Rows::User,
};

// -- vectors

pub const SPACES_TABLE: &str = "spaces";
pub const SPACES_FAMILY: &str = "m";
pub const ITEM_VECTORS_TABLE: &str = "item_vectors";
pub const USER_VECTORS_TABLE: &str = "user_vectors";
pub const VECTORS_FAMILY: &str = "v";

/// Spaces' descriptions.
pub const SPACES: Table = Table {
    name: SPACES_TABLE,
    families: &[(SPACES_FAMILY, Gc::Versions(1))],
    rows: Rows::App,
};
/// Item vectors (two versions: a rollback restores the previous training's).
pub const ITEM_VECTORS: Table = Table {
    name: ITEM_VECTORS_TABLE,
    families: &[(VECTORS_FAMILY, Gc::Versions(2))],
    rows: Rows::App,
};
/// User vectors (two versions, as items').
pub const USER_VECTORS: Table = Table {
    name: USER_VECTORS_TABLE,
    families: &[(VECTORS_FAMILY, Gc::Versions(2))],
    rows: Rows::User,
};

// -- recommendations

pub const QUEUES_TABLE: &str = "queues";
pub const QUEUES_FAMILY: &str = "q";
pub const RELATED_TABLE: &str = "related";
pub const RELATED_FAMILY: &str = "r";
pub const TRENDING_TABLE: &str = "trending";
pub const TRENDING_FAMILY: &str = "t";
pub const RANKERS_TABLE: &str = "rankers";
/// A ranker's model (`m:model`).
pub const RANKERS_MODEL_FAMILY: &str = "m";
/// The chunks of the snapshot a ranker serves from.
pub const RANKERS_SNAPSHOT_FAMILY: &str = "s";
pub const IMPRESSIONS_TABLE: &str = "impressions";
pub const IMPRESSIONS_FAMILY: &str = "i";

/// Users' queues and the queues' definitions.
pub const QUEUES: Table = Table {
    name: QUEUES_TABLE,
    families: &[(QUEUES_FAMILY, Gc::Versions(1))],
    rows: Rows::User,
};
/// Co-interaction lists.
pub const RELATED: Table = Table {
    name: RELATED_TABLE,
    families: &[(RELATED_FAMILY, Gc::Versions(1))],
    rows: Rows::App,
};
/// Trending counters, kept a little longer than the window.
pub const TRENDING: Table = Table {
    name: TRENDING_TABLE,
    families: &[(
        TRENDING_FAMILY,
        Gc::VersionsAndAge(
            1,
            Duration::from_millis(((WINDOW_DAYS + 7) * DAY_MS) as u64),
        ),
    )],
    rows: Rows::App,
};
/// Learned rankers, per app and index (the newest two).
pub const RANKERS: Table = Table {
    name: RANKERS_TABLE,
    families: &[
        (RANKERS_MODEL_FAMILY, Gc::Versions(2)),
        (RANKERS_SNAPSHOT_FAMILY, Gc::Versions(2)),
    ],
    rows: Rows::App,
};
/// Served answers, per user and time.
pub const IMPRESSIONS: Table = Table {
    name: IMPRESSIONS_TABLE,
    families: &[(IMPRESSIONS_FAMILY, Gc::Age(EVENTS_RETENTION))],
    rows: Rows::User,
};

// -- traffic, placements, waiting events, A/B tests

pub const STATS_TABLE: &str = "stats";
pub const STATS_FAMILY: &str = "m";
/// The longest window a traffic read covers; counters expire a day after it.
pub const STATS_MAX_HOURS: u32 = 48;
pub const PLACEMENTS_TABLE: &str = "placements";
pub const PLACEMENTS_FAMILY: &str = "p";
pub const WAITING_TABLE: &str = "waiting";
pub const WAITING_INDEX_FAMILY: &str = "w";
pub const ABTESTS_TABLE: &str = "abtests";
/// A test's definition.
pub const ABTESTS_DEFINITION: &str = "t";
/// A test's per-variant counts.
pub const ABTESTS_COUNTS: &str = "c";
pub const ABTEST_USERS_TABLE: &str = "abtest_users";
pub const ABTEST_USERS_FAMILY: &str = "u";

/// Events per minute, kept a day longer than the longest window shown.
pub const STATS: Table = Table {
    name: STATS_TABLE,
    families: &[(
        STATS_FAMILY,
        Gc::VersionsAndAge(
            1,
            Duration::from_millis((STATS_MAX_HOURS as u64 + 24) * 3_600_000),
        ),
    )],
    rows: Rows::App,
};
/// Placements of apps and users.
pub const PLACEMENTS: Table = Table {
    name: PLACEMENTS_TABLE,
    families: &[(PLACEMENTS_FAMILY, Gc::Versions(1))],
    rows: Rows::Pinned,
};
/// Waiting events by the item they wait for.
pub const WAITING: Table = Table {
    name: WAITING_TABLE,
    families: &[(WAITING_INDEX_FAMILY, Gc::Age(EVENTS_RETENTION))],
    rows: Rows::App,
};
/// Tests and their per-variant counts.
pub const ABTESTS: Table = Table {
    name: ABTESTS_TABLE,
    families: &[
        (ABTESTS_DEFINITION, Gc::Versions(1)),
        (ABTESTS_COUNTS, Gc::Versions(1)),
    ],
    rows: Rows::App,
};
/// Each user's counts in each test; a year after its last change a user's row goes.
pub const ABTEST_USERS: Table = Table {
    name: ABTEST_USERS_TABLE,
    families: &[(
        ABTEST_USERS_FAMILY,
        Gc::VersionsAndAge(1, Duration::from_secs(365 * 86_400)),
    )],
    rows: Rows::User,
};

// -- what tells a retry ([`crate::events::retries`])

pub const RETRIES_TABLE: &str = "retries";
/// The arrival of each event of a user that came without a timestamp: a column per event
/// (its identity, [`crate::events::retries::arrival_id`]), the arrival (ms, i64 BE) its value.
pub const ARRIVALS_FAMILY: &str = "a";
/// A batch answered ([`crate::keys::answered`]): one empty cell.
pub const ANSWERED_FAMILY: &str = "b";

/// What tells a retry from new events: the arrivals of events without a timestamp, for the
/// retry window; the batches answered, a day.
pub const RETRIES: Table = Table {
    name: RETRIES_TABLE,
    families: &[
        (
            ARRIVALS_FAMILY,
            Gc::Age(crate::events::retries::RETRY_WINDOW),
        ),
        (
            ANSWERED_FAMILY,
            Gc::Age(crate::events::retries::ANSWERED_FOR),
        ),
    ],
    rows: Rows::User,
};

/// Every table, in the order of the module's table.
pub const ALL: [Table; 28] = [
    APPS,
    KEYS,
    CATALOG,
    INDEXES,
    EVENTS,
    STRATEGIES,
    PROFILES,
    STATES,
    AGGREGATES,
    JOBS,
    SETS,
    PARTITIONS,
    SEEN,
    LEASES,
    SPACES,
    ITEM_VECTORS,
    USER_VECTORS,
    QUEUES,
    RELATED,
    TRENDING,
    STATS,
    PLACEMENTS,
    WAITING,
    ABTESTS,
    ABTEST_USERS,
    RANKERS,
    IMPRESSIONS,
    RETRIES,
];

/// The names of the tables whose rows are `rows`.
pub fn named(rows: Rows) -> impl Iterator<Item = &'static str> {
    ALL.iter().filter(move |t| t.rows == rows).map(|t| t.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The module's table is the registry's: every table, in order, with its rows.
    #[test]
    fn the_documented_layout_lists_every_table() {
        let documented: Vec<(String, String)> = include_str!("tables.rs")
            .lines()
            .filter_map(|l| l.strip_prefix("//! | `"))
            .map(|l| {
                let (name, rest) = l.split_once('`').unwrap();
                let rows = rest.trim_start_matches(" | ").split(' ').next().unwrap();
                (name.to_owned(), rows.to_owned())
            })
            .collect();
        let registered: Vec<(String, String)> = ALL
            .iter()
            .map(|t| (t.name.to_owned(), format!("{:?}", t.rows).to_lowercase()))
            .collect();
        assert_eq!(documented, registered);
        let mut names: Vec<_> = ALL.iter().map(|t| t.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len(), "a table is listed twice");
    }
}
