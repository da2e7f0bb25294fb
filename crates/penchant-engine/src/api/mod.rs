//! Every method of [`Engine`], by resource: the facade the server's handlers (and the CLI) call,
//! never a subsystem or the store. Each file adds one resource's methods; the subsystems they
//! drive are the crate's other modules.
//!
//! | file | resource |
//! |---|---|
//! | `lifecycle.rs` | opening the engine over a store, `/metrics` counters, background work, shutdown |
//! | `apps.rs` | apps and API keys |
//! | `catalog.rs` | records and indexes |
//! | `events.rs` | ingestion, the repair of interrupted batches, the retention purge (delegated to [`crate::ingest`] and [`crate::retention`]) |
//! | `profiles.rs` | strategies, profiles, re-ranking and the simulator |
//! | `sets.rs` | key sets and seen filters |
//! | `vectors.rs` | vector spaces, similarity search, ALS training |
//! | `placement.rs` | placements and moves |
//! | `schedules.rs` | schedules: settings, and the round that starts what is due |
//! | `abtests.rs` | A/B tests and named strategies |
//! | `recommend.rs` | Recommend's models, queues, related lists, trending |
//! | `builds.rs` | recommendation builds |
//! | `rankers.rs`, `serving.rs` | learned rankers: the job, and serving them |
//! | `impressions.rs` | the impressions tracked answers served |
//! | `backup.rs`, `portability.rs` | backups; an app's export and import |
//! | `internals.rs` | the subsystems, for the engine's tests and the benchmarks |

#[cfg(doc)]
use crate::Engine;

mod abtests;
mod apps;
mod backup;
mod builds;
mod catalog;
mod events;
mod impressions;
mod internals;
mod lifecycle;
mod placement;
mod portability;
mod profiles;
mod rankers;
mod recommend;
mod schedules;
mod serving;
mod sets;
mod vectors;

pub use abtests::AbTestResults;
pub use profiles::{Ranking, RerankOptions, Reranked, Simulation};
pub(crate) use schedules::{ScheduleCache, schedule_cache};
