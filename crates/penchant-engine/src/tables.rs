//! Every table the engine keeps, in one registry ([`ALL`]): its column families and how long
//! the store keeps their cells, whose rows it holds, and its row key (encoded in
//! [`crate::keys`]). [`crate::Engine::open`] creates them from it; residency moves what it says
//! moves; deleting a user deletes the rows it says are a user's. A table is declared beside
//! the module that owns it, and listed here.
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
//!
//! Rows: **app**, every row is an app's (`app 0 ...`, one key range per app) and moves with the
//! app; **user**, rows are users' (`app 0 · user ...`, one range per user) and move with a
//! user's own placement, and deleting a user deletes them; **pinned**, rows stay on the default
//! target whatever the placements say (who lives where, and the leases that say who moves it).

use std::collections::BTreeMap;

use penchant_store::{FamilyChange, GcRule, Store, StoreError, TableSchema};

pub use penchant_model::tables::{Gc, Rows, Table};

use crate::Result;

/// Every table, in the order of the module's table.
pub const ALL: [Table; 27] = [
    crate::tenancy::APPS,
    crate::tenancy::KEYS,
    crate::catalog::CATALOG,
    crate::catalog::INDEXES,
    crate::events::EVENTS,
    crate::strategy::STRATEGIES,
    crate::profiles::PROFILES,
    crate::profiles::STATES,
    crate::aggregates::AGGREGATES,
    crate::jobs::JOBS,
    crate::sets::SETS,
    crate::sets::PARTITIONS,
    crate::seen::SEEN,
    crate::leases::LEASES,
    crate::vectors::SPACES,
    crate::vectors::ITEM_VECTORS,
    crate::vectors::USER_VECTORS,
    crate::recommend::queues::QUEUES,
    crate::recommend::related::RELATED,
    crate::recommend::trending::TRENDING,
    crate::stats::STATS,
    crate::residency::PLACEMENTS,
    crate::events::waiting::WAITING,
    crate::abtests::ABTESTS,
    crate::abtests::ABTEST_USERS,
    crate::recommend::ranker::RANKERS,
    crate::recommend::impressions::IMPRESSIONS,
];

/// Create `tables` in the store, and the families they lack if they exist (made by an older
/// version); several nodes may do so at once.
pub async fn create(store: &dyn Store, tables: &[Table]) -> Result<()> {
    for table in tables {
        let families = table.family_rules();
        match store.create_table(table.name, families.clone()).await {
            Ok(()) => {}
            Err(StoreError::TableExists(_)) => add_families(store, table.name, &families).await?,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Create the families of `table` it lacks (several nodes may do so at once).
async fn add_families(
    store: &dyn Store,
    table: &str,
    families: &BTreeMap<String, GcRule>,
) -> Result<()> {
    let lacking = |schema: &TableSchema| -> Vec<FamilyChange> {
        families
            .iter()
            .filter(|(family, _)| !schema.families.contains_key(*family))
            .map(|(family, rule)| FamilyChange::Create {
                family: family.clone(),
                gc_rule: rule.clone(),
            })
            .collect()
    };
    let missing = lacking(&store.get_table(table).await?);
    if missing.is_empty() {
        return Ok(());
    }
    if let Err(e) = store.modify_families(table, missing).await
        // Unless another node added them meanwhile.
        && !lacking(&store.get_table(table).await?).is_empty()
    {
        return Err(e.into());
    }
    Ok(())
}

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
