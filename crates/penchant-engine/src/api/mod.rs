//! The engine's API by resource, for the server's handlers (and the CLI's): each file adds the
//! methods of one resource to [`Engine`]. Handlers call these, never a subsystem or the store.
//! Recommendations and queues are in [`crate::recommend`], builds in
//! [`crate::recommend::build`].
//!
//! | file | resource |
//! |---|---|
//! | `apps.rs` | apps and API keys |
//! | `catalog.rs` | records and indexes |
//! | `events.rs` | ingestion, the repair of interrupted batches, the retention purge |
//! | `profiles.rs` | strategies, profiles, re-ranking and the simulator |
//! | `sets.rs` | key sets and seen filters |
//! | `vectors.rs` | vector spaces, similarity search, ALS training |
//! | `placement.rs` | placements and moves |
//! | `schedules.rs` | schedules: settings, and the round that starts what is due |
//! | `abtests.rs` | A/B tests and named strategies |

#[cfg(doc)]
use crate::Engine;

mod abtests;
mod apps;
mod catalog;
mod events;
mod placement;
mod profiles;
mod schedules;
mod sets;
mod vectors;

pub use abtests::AbTestResults;
pub use profiles::{Ranking, RerankOptions, Reranked, Simulation};
pub(crate) use schedules::{ScheduleCache, schedule_cache};
