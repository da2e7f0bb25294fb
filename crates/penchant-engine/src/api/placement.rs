//! Placements: where an app's (or a user's) rows are, and moving them.

use crate::{Engine, EngineError, Result, events, keys, residency, tenancy};

/// Placements and moves.
impl Engine {
    /// The placement targets; the first is the default.
    pub fn placement_targets(&self) -> Vec<String> {
        self.residency.targets()
    }

    /// Where an app's rows are (or a user's, with `user`), and the app's latest move.
    pub async fn placement(
        &self,
        app: &str,
        user: Option<&str>,
    ) -> Result<(residency::Placement, Option<residency::MoveStatus>)> {
        let unit = self.unit(app, user).await?;
        let placement = self.residency.placement(&unit).await?;
        Ok((placement, self.residency.status(app).await?))
    }

    /// The users of an app placed on their own.
    pub async fn placed_users(&self, app: &str) -> Result<Vec<(String, residency::Placement)>> {
        self.unit(app, None).await?;
        self.residency.placed_users(app).await
    }

    /// Place an app (or one of its users) that has no rows yet in `target`.
    pub async fn place(
        &self,
        app: &str,
        user: Option<&str>,
        target: &str,
    ) -> Result<residency::Placement> {
        let unit = self.unit(app, user).await?;
        self.residency.place(&unit, target).await
    }

    /// Start moving an app's rows (or one user's) to `target`, in the background.
    pub async fn move_placement(
        &self,
        app: &str,
        user: Option<&str>,
        target: &str,
    ) -> Result<residency::MoveStatus> {
        let unit = self.unit(app, user).await?;
        self.residency.start(&unit, target).await
    }

    /// Create an app whose rows live in `target` from the start (its placement is written
    /// before any of its rows). Returns it with its first admin key, as `create_app` does.
    pub async fn create_app_in(
        &self,
        app_id: &str,
        name: &str,
        retention_days: u32,
        event_layout: events::Layout,
        target: &str,
    ) -> Result<(tenancy::App, String)> {
        tenancy::check_app_id(app_id)?;
        if self.tenancy.app(app_id).await?.is_some() {
            return Err(EngineError::Exists(format!(
                "app `{app_id}` exists already"
            )));
        }
        self.residency
            .place(&residency::Unit::app(app_id), target)
            .await?;
        self.create_app(Some(app_id), name, retention_days, event_layout)
            .await
    }

    /// Place the configuration's apps that have no placement yet.
    pub async fn seed_placements(&self, apps: &[(String, String)]) -> Result<()> {
        self.residency.seed(apps).await
    }

    async fn unit(&self, app: &str, user: Option<&str>) -> Result<residency::Unit> {
        if self.tenancy.app(app).await?.is_none() {
            return Err(EngineError::NotFound(format!("app `{app}` does not exist")));
        }
        Ok(match user {
            Some(user) => {
                keys::check_user_token(user)?;
                residency::Unit::user(app, user)
            }
            None => residency::Unit::app(app),
        })
    }
}
