//! A user's state: what their profile is made of, kept so that a batch of events updates the
//! profile instead of recomputing it (on a store a node is alone on, with atomic writes: the
//! embedded one).
//!
//! Table `states`, family `s`, row [`keys::user`] `app 0 · user 0`, one cell: the user's counted
//! events summed per day — per facet and value, `event score × facet score × n` — with each
//! day's latest event, the strategy version that weighed them and the deletion they were counted
//! after ([`State`], binary). A batch reads its users' states, adds its new events, rescores,
//! and writes states and profiles in the batch's one atomic write, with its events and their
//! aggregate deltas: counted whole or not at all, its users' locks held from the read to the
//! write ([`crate::locks::UserLocks`]). What a state cannot answer — another strategy version, a
//! day at the retention window's edge (its raw events decide), a stale or missing state — the
//! batch marks stale in that write and the full refresh ([`super::Profiles::refresh_many`])
//! rebuilds from the aggregates after it, under the same locks.
//!
//! A missing state means "no counted events" only in an app whose every user has one
//! ([`States::complete`]): an app created with states (no aggregates when first asked), or one
//! whose users the migration job has given states. Its marker is the app's row in the table
//! (`app 0`, cell `s:complete`): it moves with the app, and an import removes it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use penchant_store::{Mutation, ReadRows, RowFilter, RowMutation, RowSet, Store};

use crate::{Result, keys};
pub use penchant_model::profiles::state::{Day, State, profile_of};
use penchant_model::tables::{AGGREGATES_TABLE, STATES_TABLE};
pub use penchant_model::tables::{STATES, STATES_FAMILY as FAMILY};

const STATE: &[u8] = b"s";
const COMPLETE: &[u8] = b"complete";
/// What is stored of a user's state.
#[derive(Debug)]
pub enum Found {
    /// No row: no counted events, in a [`States::complete`] app.
    Missing,
    /// Marked stale, or unreadable: the full refresh rebuilds it.
    Stale,
    State(State),
}

/// Users' states, and which apps have them for every user.
#[derive(Debug)]
pub struct States {
    store: Arc<dyn Store>,
    /// Apps known complete (this node is alone on its store: nothing else makes one so).
    complete: parking_lot::Mutex<HashMap<String, bool>>,
}

impl States {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            complete: Default::default(),
        }
    }

    /// Some users' states (sorted users), one read.
    pub async fn read_many<'u>(
        &self,
        app: &str,
        users: &[&'u str],
    ) -> Result<BTreeMap<&'u str, Found>> {
        let keys = users.iter().map(|u| keys::user(app, u));
        let rows = self
            .store
            .read_all(STATES_TABLE, ReadRows::new(RowSet::keys(keys)))
            .await?;
        let mut out: BTreeMap<&str, Found> = users.iter().map(|u| (*u, Found::Missing)).collect();
        for row in &rows {
            let Some(user) = keys::user_of(app, &row.key) else {
                continue;
            };
            let Ok(i) = users.binary_search(&user) else {
                continue;
            };
            let found = row
                .latest(FAMILY, STATE)
                .and_then(|c| State::decode(&c.value))
                .map_or(Found::Stale, Found::State);
            out.insert(users[i], found);
        }
        Ok(out)
    }

    /// The write of a user's state: `None` marks it stale.
    pub fn write(app: &str, user: &str, state: Option<&State>) -> RowMutation {
        let value = state.map(State::encode).unwrap_or_default();
        RowMutation::new(
            keys::user(app, user),
            vec![Mutation::set_now(FAMILY, STATE, value)],
        )
    }

    /// Whether every user of the app with counted events has a state: the app's marker says
    /// so, or it has no aggregates yet (a new app: the marker is written then).
    pub async fn complete(&self, app: &str) -> Result<bool> {
        if let Some(known) = self.complete.lock().get(app) {
            return Ok(*known);
        }
        let marker = self
            .store
            .read_row(
                STATES_TABLE,
                keys::app(app),
                Some(RowFilter::column(FAMILY, COMPLETE)),
            )
            .await?;
        let complete = match marker {
            Some(_) => true,
            None => {
                let request = ReadRows::new(RowSet::prefix(keys::app(app)))
                    .filter(RowFilter::CellsPerRowLimit(1).and(RowFilter::StripValue))
                    .limit(1);
                let any = self.store.read_all(AGGREGATES_TABLE, request).await?;
                if any.is_empty() {
                    self.mark_complete(app).await?;
                }
                any.is_empty()
            }
        };
        self.complete.lock().insert(app.to_owned(), complete);
        Ok(complete)
    }

    /// Mark the app complete: every user with counted events has a state.
    pub async fn mark_complete(&self, app: &str) -> Result<()> {
        self.store
            .mutate_row(
                STATES_TABLE,
                keys::app(app),
                vec![Mutation::set_now(FAMILY, COMPLETE, Bytes::new())],
            )
            .await?;
        self.complete.lock().insert(app.to_owned(), true);
        Ok(())
    }

    /// Forget what is known of the app (it was deleted, or data was imported into it).
    pub fn forget(&self, app: &str) {
        self.complete.lock().remove(app);
    }
}
