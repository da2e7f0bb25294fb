//! Routes, one module per resource.

pub mod apps;
pub mod bloom;
pub mod dashboard;
pub mod events;
pub mod health;
pub mod indexes;
pub mod keys;
pub mod manage;
pub mod personalization;
pub mod placement;
pub mod recommend;
pub mod stats;
pub mod vectors;

#[cfg(test)]
mod tests {
    /// Handlers call the engine's API, never a subsystem of it or the store.
    #[test]
    fn routes_use_the_engine_api_only() {
        let routes = [
            ("apps.rs", include_str!("apps.rs")),
            ("bloom.rs", include_str!("bloom.rs")),
            ("dashboard.rs", include_str!("dashboard.rs")),
            ("events.rs", include_str!("events.rs")),
            ("health.rs", include_str!("health.rs")),
            ("indexes.rs", include_str!("indexes.rs")),
            ("keys.rs", include_str!("keys.rs")),
            ("manage.rs", include_str!("manage.rs")),
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
