//! Apps and API keys as the domain has them: Algolia's ACLs, an app and what its events need, what
//! is stored of a key, who a request acts as, and the checks of their names and settings. The
//! engine's `tenancy` stores them and looks keys up.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::events::Layout;
use crate::{EngineError, Result};

/// Algolia's access-control lists, and Penchant's `admin` (what an app's admin key holds).
///
/// Every ACL Algolia defines is accepted on a key; routes check the ones Penchant serves
/// (`analytics`, `usage`, `logs`, `seeUnretrievableAttributes`, `inference` and `personalization`
/// guard nothing here yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Acl {
    /// Push events, read recommendations.
    Search,
    /// Strategy and profiles.
    Recommendation,
    AddObject,
    /// Delete records, and user tokens.
    DeleteObject,
    EditSettings,
    /// Everything, keys included.
    Admin,
    /// Export an index's records (`browse`).
    Browse,
    ListIndexes,
    DeleteIndex,
    /// Read an index's settings.
    Settings,
    Analytics,
    Usage,
    Logs,
    SeeUnretrievableAttributes,
    Inference,
    Personalization,
}

impl Acl {
    /// Every ACL of Algolia's (all but [`Acl::Admin`]): what an admin key grants, in Algolia's
    /// terms.
    pub const ALGOLIA: [Acl; 15] = [
        Acl::Search,
        Acl::Browse,
        Acl::AddObject,
        Acl::DeleteObject,
        Acl::ListIndexes,
        Acl::DeleteIndex,
        Acl::Settings,
        Acl::EditSettings,
        Acl::Analytics,
        Acl::Recommendation,
        Acl::Usage,
        Acl::Logs,
        Acl::SeeUnretrievableAttributes,
        Acl::Inference,
        Acl::Personalization,
    ];
}

/// An app: a tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct App {
    #[serde(rename = "appID")]
    pub app_id: String,
    pub name: String,
    /// Unix seconds.
    pub created_at: i64,
    /// How many days of events count for the app's profiles (1 to 90).
    #[serde(default = "default_retention_days")]
    pub retention_days: u32,
    /// How the app's events store their counts (what reads use).
    #[serde(default)]
    pub event_layout: Layout,
    /// During a migration between layouts: the other layout, also written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub also_written: Option<Layout>,
}

/// What the event path needs of an app, cached per node (the engine's `Tenancy::events_of`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppEvents {
    pub retention_days: u32,
    /// The layout reads use.
    pub layout: Layout,
    /// The layout also written during a migration.
    pub also_written: Option<Layout>,
}

impl AppEvents {
    /// The layouts an event's counts are written in.
    pub fn written(&self) -> Vec<Layout> {
        std::iter::once(self.layout)
            .chain(self.also_written)
            .collect()
    }

    /// The retention window.
    pub fn retention(&self) -> Duration {
        Duration::from_secs(u64::from(self.retention_days) * 86_400)
    }
}

impl From<&App> for AppEvents {
    fn from(app: &App) -> Self {
        AppEvents {
            retention_days: app.retention_days,
            layout: app.event_layout,
            also_written: app.also_written,
        }
    }
}

impl Default for AppEvents {
    /// An unknown app's.
    fn default() -> Self {
        AppEvents {
            retention_days: MAX_RETENTION_DAYS,
            layout: Layout::default(),
            also_written: None,
        }
    }
}

/// The longest (and default) retention: the events table's GC rule.
pub const MAX_RETENTION_DAYS: u32 = 90;

fn default_retention_days() -> u32 {
    MAX_RETENTION_DAYS
}

/// Whether a retention of `days` is allowed (1 to [`MAX_RETENTION_DAYS`]).
pub fn check_retention(days: u32) -> Result<()> {
    if (1..=MAX_RETENTION_DAYS).contains(&days) {
        Ok(())
    } else {
        Err(EngineError::Invalid(format!(
            "retentionDays must be between 1 and {MAX_RETENTION_DAYS}"
        )))
    }
}

/// What is stored about an API key (never the key itself).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyInfo {
    pub acl: BTreeSet<Acl>,
    pub description: String,
    /// Unix seconds.
    pub created_at: i64,
    /// The key's first characters, to tell keys apart in a list.
    pub prefix: String,
    /// Algolia's `maxQueriesPerIPPerHour`: requests per client and hour (0: no limit).
    #[serde(default)]
    pub max_queries_per_ip_per_hour: u32,
}

/// Who a request acts as: an app, with some ACLs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub app_id: String,
    pub acl: BTreeSet<Acl>,
    /// The key's rate limit, if it has one.
    pub rate_limit: Option<RateLimit>,
}

/// A key's `maxQueriesPerIPPerHour`, and an id of the key to count its requests by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// The first 8 bytes of the key's hash.
    pub key: u64,
    pub per_hour: u32,
}

impl Principal {
    /// Whether the key grants `acl` (`admin` grants everything).
    pub fn allows(&self, acl: Acl) -> bool {
        self.acl.contains(&Acl::Admin) || self.acl.contains(&acl)
    }
}

/// Tenancy settings.
#[derive(Debug, Clone, Default)]
pub struct TenancyConfig {
    /// The global admin key (bootstrapping), if any.
    pub admin_key: Option<String>,
    /// How long a node trusts a cached key lookup.
    pub cache_ttl: Duration,
}

/// Apps `[A-Za-z0-9_-]{1,64}`.
pub fn check_app_id(app_id: &str) -> Result<()> {
    let ok = !app_id.is_empty()
        && app_id.len() <= 64
        && app_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(EngineError::Invalid(format!(
            "appID `{app_id}` must be 1 to 64 characters of [A-Za-z0-9_-]"
        )))
    }
}
