//! Strategies, profiles and personalized re-ranking.

use std::sync::Arc;

use crate::catalog::Record;
use crate::profiles::job::RecomputeStatus;
use crate::profiles::{self, Profile};
use crate::strategy::{Strategy, Versioned};
use crate::{Consistency, Engine, Result, keys, rerank};

/// Strategies and profiles.
impl Engine {
    /// Save an app's strategy and start recomputing every profile of the app under it.
    pub async fn set_strategy(&self, app: &str, strategy: Strategy) -> Result<Arc<Versioned>> {
        let versioned = self.strategies.set(app, strategy).await?;
        self.recomputes.start(app, versioned.clone()).await?;
        Ok(versioned)
    }

    /// The app's strategy as stored now, if it has one.
    pub async fn strategy(&self, app: &str) -> Result<Option<Strategy>> {
        Ok(self
            .strategies
            .fresh(app)
            .await?
            .map(|v| v.strategy.clone()))
    }

    /// The app's latest profile recompute, as last saved by whichever node runs it.
    pub async fn recompute_status(&self, app: &str) -> Result<Option<RecomputeStatus>> {
        self.recomputes.status(app).await
    }

    /// The app's recomputes, newest first: the current or last one, then up to 20 past ones.
    pub async fn recompute_history(&self, app: &str) -> Result<Vec<RecomputeStatus>> {
        self.recomputes.history(app).await
    }

    /// A user's profile; `None` when no counted event gives it a score and none waits for its
    /// items' records. A strong read reads
    /// it (and what recomputing it reads) from the user's home cluster only
    /// ([`penchant_store::AffineStore`]), failing with `Unavailable` when that cluster cannot
    /// be reached.
    pub async fn profile(
        &self,
        app: &str,
        user: &str,
        consistency: Consistency,
    ) -> Result<Option<Profile>> {
        keys::check_user_token(user)?;
        let profile = self.profiles.get_with(app, user, consistency).await?;
        Ok(profile.filter(|p| !p.scores.is_empty() || p.waiting_events > 0))
    }

    /// Forget a user's events up to now: they no longer count. Returns the time (ms) up to
    /// which they were forgotten.
    pub async fn delete_profile(&self, app: &str, user: &str) -> Result<i64> {
        keys::check_user_token(user)?;
        let until = self.now_ms();
        self.profiles.delete_profile(app, user, until).await?;
        Ok(until)
    }

    /// Delete every trace of a user: events, aggregates, seen filter, profile, vectors and
    /// queues.
    pub async fn delete_user(&self, app: &str, user: &str) -> Result<()> {
        keys::check_user_token(user)?;
        self.profiles.delete_user(app, user).await
    }

    /// How many users of the app have a stored profile, counted up to `cap`: `(n, exact)`.
    pub async fn count_profiles(&self, app: &str, cap: usize) -> Result<(usize, bool)> {
        self.profiles.count(app, cap).await
    }

    /// A user's profile as Algolia `optionalFilters` (`facet:value<score=n>`).
    pub async fn optional_filters(&self, app: &str, user: &str) -> Result<Vec<String>> {
        keys::check_user_token(user)?;
        Ok(rerank::optional_filters(&self.scores(app, user).await?))
    }

    async fn scores(&self, app: &str, user: &str) -> Result<profiles::Scores> {
        Ok(self
            .profiles
            .get(app, user)
            .await?
            .map(|p| p.scores)
            .unwrap_or_default())
    }

    /// Re-rank `hits` (records of `index`; a hit holding only its `objectID` is completed from
    /// the catalog) for a user, with the strategy's impact or `impact`. Returns the impact used
    /// and, best first, each hit's position in `hits` with its personalization.
    pub async fn rerank(
        &self,
        app: &str,
        index: &str,
        hits: &[Record],
        user: &str,
        impact: Option<u32>,
    ) -> Result<(u32, Vec<(usize, rerank::Personalization)>)> {
        keys::check_user_token(user)?;
        let records = self.complete_hits(app, index, hits).await?;
        let strategy = self.strategies.get(app).await?;
        let impact = impact
            .or(strategy.as_ref().map(|s| s.strategy.personalization_impact))
            .unwrap_or(0);
        let scores = self.scores(app, user).await?;
        Ok((impact, rerank::rerank(&records, &scores, impact)))
    }

    /// What the simulator shows: `hits` re-ranked for a user under the saved strategy (as
    /// [`Engine::rerank`] does; `None` without one) and under `edited`, an unsaved strategy,
    /// with the profile each gives, and the hits completed from the catalog. Nothing is stored.
    pub async fn simulate(
        &self,
        app: &str,
        index: &str,
        hits: &[Record],
        user: &str,
        edited: &Strategy,
    ) -> Result<Simulation> {
        keys::check_user_token(user)?;
        edited.check()?;
        let records = self.complete_hits(app, index, hits).await?;
        let saved = match self.strategies.get(app).await? {
            Some(saved) => {
                let impact = saved.strategy.personalization_impact;
                let scores = self.scores(app, user).await?;
                let ranked = rerank::rerank(&records, &scores, impact);
                Some(Ranking {
                    impact,
                    scores,
                    ranked,
                })
            }
            None => None,
        };
        let scores = self.profiles.preview(app, user, edited).await?.scores;
        let impact = edited.personalization_impact;
        let ranked = rerank::rerank(&records, &scores, impact);
        Ok(Simulation {
            records,
            saved,
            edited: Ranking {
                impact,
                scores,
                ranked,
            },
        })
    }

    /// Hits as given, those holding only an `objectID` replaced by the catalog's record.
    async fn complete_hits(&self, app: &str, index: &str, hits: &[Record]) -> Result<Vec<Record>> {
        let wanted: Vec<String> = hits
            .iter()
            .filter(|h| h.len() == 1)
            .filter_map(|h| h.get("objectID")?.as_str().map(str::to_owned))
            .collect();
        let catalog = self.catalog.get_many(app, index, &wanted).await?;
        Ok(hits
            .iter()
            .map(|h| {
                let id = h.get("objectID").and_then(|v| v.as_str());
                match id.and_then(|id| catalog.get(id)) {
                    Some(record) if h.len() == 1 => record.clone(),
                    _ => h.clone(),
                }
            })
            .collect())
    }
}

/// A ranking of hits for one user under one strategy (the simulator's).
#[derive(Debug, Clone)]
pub struct Ranking {
    /// The strategy's `personalizationImpact`.
    pub impact: u32,
    /// The user's profile under the strategy.
    pub scores: profiles::Scores,
    /// Best first: each hit's position in the request, with its personalization.
    pub ranked: Vec<(usize, rerank::Personalization)>,
}

/// The simulator's answer: the saved strategy's ranking (none without one) beside an edited one's.
#[derive(Debug, Clone)]
pub struct Simulation {
    /// The hits, those given by `objectID` alone completed from the catalog.
    pub records: Vec<Record>,
    pub saved: Option<Ranking>,
    pub edited: Ranking,
}
