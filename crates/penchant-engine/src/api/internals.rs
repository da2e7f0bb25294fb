//! The subsystems and the store, for the engine's own tests and the benchmarks.

use std::sync::Arc;

use penchant_store::Store;

use crate::Engine;
use crate::aggregates::Aggregates;
use crate::catalog::Catalog;
use crate::events::Events;
use crate::profiles::Profiles;
use crate::profiles::job::Recomputes;
use crate::seen::Seen;
use crate::sets::Sets;
use crate::strategy::Strategies;
use crate::tenancy::Tenancy;

/// The subsystems and the store, for the engine's own tests and the benchmarks. The server's
/// handlers never use these: they call the API above (a server test checks its routes).
impl Engine {
    /// Named key sets.
    #[doc(hidden)]
    pub fn sets(&self) -> &Sets {
        &self.sets
    }

    /// Users' seen filters.
    #[doc(hidden)]
    pub fn seen(&self) -> &Seen {
        &self.seen
    }

    /// Strategies.
    #[doc(hidden)]
    pub fn strategies(&self) -> &Strategies {
        &self.strategies
    }

    /// Profiles.
    #[doc(hidden)]
    pub fn profiles(&self) -> &Profiles {
        &self.profiles
    }

    /// Profile recomputes.
    #[doc(hidden)]
    pub fn recomputes(&self) -> &Recomputes {
        &self.recomputes
    }

    /// Per-day aggregates of events.
    #[doc(hidden)]
    pub fn aggregates(&self) -> &Aggregates {
        &self.aggregates
    }

    /// Insights events.
    #[doc(hidden)]
    pub fn events(&self) -> &Events {
        &self.events
    }

    /// Records of the apps' indexes.
    #[doc(hidden)]
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// Apps and API keys.
    #[doc(hidden)]
    pub fn tenancy(&self) -> &Tenancy {
        &self.tenancy
    }

    /// The store the engine writes to.
    #[doc(hidden)]
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }
}
