//! Strategies, profiles and personalized re-ranking.

use std::sync::Arc;

use crate::abtests::Served;
use crate::catalog::Record;
use crate::profiles::job::RecomputeStatus;
use crate::profiles::{self, Profile};
use crate::strategy::{Strategy, Versioned};
use crate::{Consistency, Engine, EngineError, Result, keys, rerank};
use serde_json::Value;

/// How a re-ranking call asks to personalize (an A/B test's variant applies over it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RerankOptions {
    /// Overrides the strategy's impact.
    pub impact: Option<u32>,
    /// `false`: keep the hits' order.
    pub enable_personalization: Option<bool>,
    /// A named strategy instead of the app's.
    pub strategy: Option<String>,
    /// Return a query ID.
    pub click_analytics: bool,
    /// `false`: answer as if no A/B test ran on the index.
    pub enable_ab_test: bool,
    /// `learned`: order the hits by the index's learned ranker for the user (`blend`, the
    /// default: by the profile).
    pub ranker: Option<String>,
}

impl Default for RerankOptions {
    fn default() -> Self {
        Self {
            impact: None,
            enable_personalization: None,
            strategy: None,
            click_analytics: false,
            enable_ab_test: true,
            ranker: None,
        }
    }
}

/// Hits re-ranked: the impact used, each hit's original position and scores (best first), and
/// what the answer says of A/B testing.
#[derive(Debug, Clone, PartialEq)]
pub struct Reranked {
    pub impact: u32,
    pub ranked: Vec<(usize, rerank::Personalization)>,
    pub served: Served,
    /// With the learned ranker: its version, and each hit's score (in `ranked`'s order).
    pub learned: Option<(i64, Vec<crate::recommend::LearnedScore>)>,
}

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
        self.abtests.results.forget_user(app, user);
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
    ///
    /// For a user of a running A/B test on `index`, the user's variant applies over `options`
    /// ([`crate::abtests`]).
    pub async fn rerank(
        &self,
        app: &str,
        index: &str,
        hits: &[Record],
        user: &str,
        options: RerankOptions,
    ) -> Result<Reranked> {
        keys::check_user_token(user)?;
        let records = self.complete_hits(app, index, hits).await?;
        let assignment = match options.enable_ab_test {
            true => self.abtests.assign(app, index, user).await?,
            false => None,
        };
        let mut options = options;
        if let Some(params) = assignment.as_ref().map(|a| &a.params) {
            options.impact = params.personalization_impact.or(options.impact);
            options.enable_personalization = params
                .enable_personalization
                .or(options.enable_personalization);
            options.strategy = params.personalization_strategy.clone().or(options.strategy);
            options.ranker = params.ranker.clone().or(options.ranker);
        }
        let learned = crate::recommend::names_learned(options.ranker.as_deref())?;
        let (impact, scores) = match options.enable_personalization {
            Some(false) => (0, profiles::Scores::new()),
            _ => {
                self.personalization(app, user, options.impact, options.strategy.as_deref(), true)
                    .await?
            }
        };
        let served = match &assignment {
            Some(a) => self.abtests.served(app, a, user, options.click_analytics),
            None => Served::plain(options.click_analytics),
        };
        let mut ranked = rerank::rerank(&records, &scores, impact);
        let learned = match learned {
            true => {
                self.learned_rerank(app, index, user, &records, &mut ranked)
                    .await?
            }
            false => None,
        };
        if let Some(query_id) = &served.query_id {
            let order = ranked
                .iter()
                .filter_map(|(at, _)| records[*at].get("objectID"));
            self.log_impression(app, index, query_id, user, order).await;
        }
        Ok(Reranked {
            impact,
            ranked,
            served,
            learned,
        })
    }

    /// `ranked` (positions in `records`, personalized) put in the learned ranker's order, with
    /// each hit's score; `None` (and `ranked` as it was) while no ranker serves the index.
    async fn learned_rerank(
        &self,
        app: &str,
        index: &str,
        user: &str,
        records: &[Record],
        ranked: &mut Vec<(usize, rerank::Personalization)>,
    ) -> Result<Option<(i64, Vec<crate::recommend::LearnedScore>)>> {
        let ids: Vec<&str> = ranked
            .iter()
            .map(|(at, _)| {
                records[*at]
                    .get("objectID")
                    .and_then(Value::as_str)
                    .unwrap_or("")
            })
            .collect();
        let Some((serving, scored)) = self.learned_scores(app, index, user, &ids).await? else {
            return Ok(None);
        };
        // Equal scores keep the personalized order.
        let (order, scores): (Vec<_>, Vec<_>) = scored
            .in_order(&serving, std::mem::take(ranked), true)
            .into_iter()
            .unzip();
        *ranked = order;
        Ok(Some((serving.version, scores)))
    }

    /// The impact and the user's scores a personalized answer uses: the app's strategy and the
    /// stored profile, or a named strategy's and the profile computed with its weights from the
    /// user's aggregates. `impact` overrides the strategy's. Without a strategy the impact is 0;
    /// the scores are read only with an impact above 0, unless `always`.
    pub(crate) async fn personalization(
        &self,
        app: &str,
        user: &str,
        impact: Option<u32>,
        named: Option<&str>,
        always: bool,
    ) -> Result<(u32, profiles::Scores)> {
        let Some(name) = named else {
            let strategy = self.strategies.get(app).await?;
            let impact = impact
                .or(strategy.as_ref().map(|s| s.strategy.personalization_impact))
                .unwrap_or(0);
            let scores = match (impact > 0 || always) && strategy.is_some() {
                true => self.scores(app, user).await?,
                false => profiles::Scores::new(),
            };
            return Ok((impact, scores));
        };
        let Some(strategy) = self.strategies.named(app, name).await? else {
            return Err(EngineError::Invalid(format!(
                "personalizationStrategy: no strategy is named `{name}` (PUT \
                 /1/strategies/personalization/named/{name} saves one)"
            )));
        };
        let impact = impact.unwrap_or(strategy.strategy.personalization_impact);
        let scores = match impact > 0 || always {
            true => {
                self.profiles
                    .preview(app, user, &strategy.strategy)
                    .await?
                    .scores
            }
            false => profiles::Scores::new(),
        };
        Ok((impact, scores))
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
