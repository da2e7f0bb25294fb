//! Routes, one module per resource.

pub mod abtests;
pub mod apps;
pub mod backups;
pub mod bloom;
pub mod dashboard;
pub mod events;
pub mod health;
pub mod indexes;
pub mod keys;
pub mod manage;
pub mod openapi;
pub mod personalization;
pub mod placement;
pub mod recommend;
pub mod stats;
pub mod vectors;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use penchant_engine::Consistency;

use crate::error::ApiError;

/// A read's `?consistency=eventual|strong` (eventual when absent), for the reads of a user's
/// rows: profiles, seen filters, queues. Strong reads are served by the user's home cluster only
/// and fail with 503 when it cannot be reached; anything else is a 400.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadConsistency(pub Consistency);

impl<S: Send + Sync> FromRequestParts<S> for ReadConsistency {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let query = parts.uri.query().unwrap_or_default();
        let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query)
            .map_err(|e| ApiError::bad_request(format!("invalid query string: {e}")))?;
        match pairs.iter().find(|(k, _)| k == "consistency") {
            None => Ok(Self::default()),
            Some((_, v)) => v.parse().map(Self).map_err(ApiError::bad_request),
        }
    }
}

#[cfg(test)]
mod tests {
    /// Handlers call the engine's API, never a subsystem of it or the store.
    #[test]
    fn routes_use_the_engine_api_only() {
        let routes = [
            ("abtests.rs", include_str!("abtests.rs")),
            ("apps.rs", include_str!("apps.rs")),
            ("backups.rs", include_str!("backups.rs")),
            ("bloom.rs", include_str!("bloom.rs")),
            ("dashboard.rs", include_str!("dashboard.rs")),
            ("events.rs", include_str!("events.rs")),
            ("health.rs", include_str!("health.rs")),
            ("indexes.rs", include_str!("indexes.rs")),
            ("keys.rs", include_str!("keys.rs")),
            ("manage.rs", include_str!("manage.rs")),
            ("openapi.rs", include_str!("openapi.rs")),
            ("personalization.rs", include_str!("personalization.rs")),
            ("placement.rs", include_str!("placement.rs")),
            ("recommend.rs", include_str!("recommend.rs")),
            ("stats.rs", include_str!("stats.rs")),
            ("vectors.rs", include_str!("vectors.rs")),
            ("auth.rs", include_str!("../auth.rs")),
        ];
        let internals = [
            "store()",
            "sets()",
            "seen()",
            "strategies()",
            "profiles()",
            "jobs()",
            "events()",
            "catalog()",
            "tenancy()",
        ];
        for (file, source) in routes {
            for internal in internals {
                assert!(
                    !source.contains(&format!(".{internal}")),
                    "{file} reaches past the engine's API: .{internal}"
                );
            }
        }
    }
}
