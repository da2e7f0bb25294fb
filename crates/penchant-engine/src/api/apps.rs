//! Apps and API keys.

use std::collections::BTreeSet;

use crate::tenancy::{Acl, App, KeyInfo, Principal};
use crate::{Engine, Result};

/// Apps and API keys.
impl Engine {
    /// Whether `key` is the global admin key.
    pub fn is_global_admin(&self, key: &str) -> bool {
        self.tenancy.is_global_admin(key)
    }

    /// Whether this node has a global admin key at all (without one, no key manages apps).
    pub fn has_global_admin(&self) -> bool {
        self.tenancy.has_global_admin()
    }

    /// The principal of an (app, key) pair, or `None` if the key is not valid for the app.
    pub async fn authenticate(&self, app_id: &str, key: &str) -> Result<Option<Principal>> {
        self.tenancy.authenticate(app_id, key).await
    }

    /// Create an app (a random ID if none is given) with a retention window and an event
    /// layout; returns it and its admin key.
    pub async fn create_app(
        &self,
        app_id: Option<&str>,
        name: &str,
        retention_days: u32,
        event_layout: crate::events::Layout,
    ) -> Result<(App, String)> {
        self.tenancy
            .create_app_with(app_id, name, retention_days, event_layout)
            .await
    }

    /// Change an app's name or retention window.
    pub async fn update_app(
        &self,
        app_id: &str,
        name: Option<String>,
        retention_days: Option<u32>,
    ) -> Result<App> {
        self.tenancy.update_app(app_id, name, retention_days).await
    }

    /// Start moving an app's events to another layout, in the background
    /// ([`crate::events::migration`]).
    pub async fn migrate_layout(
        &self,
        app_id: &str,
        to: crate::events::Layout,
    ) -> Result<crate::events::migration::MigrationStatus> {
        self.migrations.start(app_id, to).await
    }

    /// An app's latest layout migration, as last saved.
    pub async fn layout_migration(
        &self,
        app_id: &str,
    ) -> Result<Option<crate::events::migration::MigrationStatus>> {
        self.migrations.status(app_id).await
    }

    /// One app, if it exists.
    pub async fn app(&self, app_id: &str) -> Result<Option<App>> {
        self.tenancy.app(app_id).await
    }

    /// Every app.
    pub async fn list_apps(&self) -> Result<Vec<App>> {
        self.tenancy.list_apps().await
    }

    /// Delete an app and every row it owns.
    pub async fn delete_app(&self, app_id: &str) -> Result<()> {
        self.recommend.trends.forget(&crate::keys::app(app_id));
        if let Some(states) = self.profiles.states() {
            states.forget(app_id);
        }
        let deleted = self.tenancy.delete_app(app_id);
        self.catalog.changing(app_id, deleted).await
    }

    /// Create an API key (with a rate limit per client and hour, 0 for none); returns the key
    /// (shown only now) and its info.
    pub async fn create_key(
        &self,
        app_id: &str,
        acl: BTreeSet<Acl>,
        description: &str,
        max_queries_per_ip_per_hour: u32,
    ) -> Result<(String, KeyInfo)> {
        self.tenancy
            .create_key(app_id, acl, description, max_queries_per_ip_per_hour)
            .await
    }

    /// One key's info.
    pub async fn get_key(&self, app_id: &str, key: &str) -> Result<Option<KeyInfo>> {
        self.tenancy.get_key(app_id, key).await
    }

    /// Every key of an app.
    pub async fn list_keys(&self, app_id: &str) -> Result<Vec<KeyInfo>> {
        self.tenancy.list_keys(app_id).await
    }

    /// Delete a key; `false` if it did not exist.
    pub async fn delete_key(&self, app_id: &str, key: &str) -> Result<bool> {
        self.tenancy.delete_key(app_id, key).await
    }
}
