//! Vector spaces, similarity and ALS training.

use std::sync::Arc;

use penchant_vectors::Aggregate;

use crate::vectors::training::{Evaluation, EvaluationRequest, TrainingConfig, TrainingStatus};
use crate::vectors::{Hit, Kind, Query, SearchOptions, Serving, Space, SpaceConfig};
use crate::{Engine, EngineError, Result};

/// Vector spaces, similarity and ALS training.
impl Engine {
    pub async fn create_space(&self, app: &str, name: &str, config: SpaceConfig) -> Result<Space> {
        self.vectors.create(app, name, config).await
    }

    pub async fn list_spaces(&self, app: &str) -> Result<Vec<Space>> {
        self.vectors.list(app).await
    }

    pub async fn space(&self, app: &str, name: &str) -> Result<Arc<Space>> {
        self.vectors.fresh(app, name).await
    }

    /// A space's description and how this node serves its searches now.
    pub async fn space_serving(&self, app: &str, name: &str) -> Result<(Arc<Space>, Serving)> {
        let space = self.vectors.fresh(app, name).await?;
        let serving = self.vectors.serving(app, &space);
        Ok((space, serving))
    }

    /// Go back to a space's previous training.
    pub async fn rollback_space(&self, app: &str, name: &str) -> Result<Arc<Space>> {
        self.vectors.rollback(app, name).await
    }

    pub async fn delete_space(&self, app: &str, name: &str) -> Result<()> {
        self.vectors.delete(app, name).await
    }

    /// Write vectors (all checked before any is written); returns how many.
    pub async fn put_vectors(
        &self,
        app: &str,
        space: &str,
        kind: Kind,
        vectors: &[(String, Vec<f32>)],
    ) -> Result<usize> {
        self.vectors.put(app, space, kind, vectors).await
    }

    /// A user's or item's vector; a user the space's training did not see is folded in.
    pub async fn vector(
        &self,
        app: &str,
        space: &str,
        kind: Kind,
        id: &str,
    ) -> Result<Option<Vec<f32>>> {
        let stored = self.vectors.get(app, space, kind, id).await?;
        if stored.is_some() || kind == Kind::Item {
            return Ok(stored);
        }
        let space = self.vectors.space(app, space).await?;
        self.trainings.fold_in(app, &space, id).await
    }

    pub async fn delete_vector(&self, app: &str, space: &str, kind: Kind, id: &str) -> Result<()> {
        self.vectors.remove(app, space, kind, id).await
    }

    /// The items closest to a vector, an item or a user (folded in if the training did not see
    /// them), best first.
    pub async fn search_vectors(
        &self,
        app: &str,
        space: &str,
        query: Query,
        options: &SearchOptions,
    ) -> Result<Vec<Hit>> {
        let query = match query {
            Query::User(user) => {
                let vector = self.vector(app, space, Kind::User, &user).await?;
                Query::Vector(vector.ok_or_else(|| {
                    EngineError::NotFound(format!("user '{user}' has no vector in space '{space}'"))
                })?)
            }
            other => other,
        };
        self.vectors.search(app, space, query, options).await
    }

    /// The items closest to the last `last` items the user clicked or converted on (in the
    /// app's retention window); returns those items and the hits.
    pub async fn similar_to_liked(
        &self,
        app: &str,
        space: &str,
        user: &str,
        last: usize,
        aggregate: Aggregate,
        options: &SearchOptions,
    ) -> Result<(Vec<String>, Vec<Hit>)> {
        let window = self.tenancy.retention(app).await?;
        let since = self.now_ms() - window.as_millis() as i64;
        // "Not for me" events are not liked.
        let negative = &self.seen.settings(app).await?.negative_event_names;
        self.vectors
            .similar_to_liked(app, space, user, last, aggregate, options, since, negative)
            .await
    }

    /// Start an ALS training of the app in the background.
    pub async fn train(&self, app: &str, config: TrainingConfig) -> Result<TrainingStatus> {
        self.trainings.start(app, config).await
    }

    /// The app's latest training.
    pub async fn training_status(&self, app: &str) -> Result<Option<TrainingStatus>> {
        self.trainings.status(app).await
    }

    /// Evaluate popularity, each model a queue blends, each blend asked and each queue the
    /// app defines (named `queue NAME`) on a time-ordered holdout of the app's events.
    pub async fn evaluate_als(
        &self,
        app: &str,
        config: &TrainingConfig,
        mut request: EvaluationRequest,
    ) -> Result<Evaluation> {
        // Each blend costs a pass over every test user: as many as an app may define queues.
        let most = crate::recommend::queues::MAX_QUEUES;
        if request.queues.len() > most || request.queues.iter().any(|(_, s)| s.len() > most) {
            return Err(crate::EngineError::Invalid(format!(
                "at most {most} queues, of at most {most} sources each, are evaluated at once"
            )));
        }
        // The app's queues too, but for those no training of this space can stand for.
        let mut skipped = Vec::new();
        for (name, definition) in self.recommend.queues.definitions(app).await? {
            let name = format!("queue {name}");
            let sources = definition.sources;
            match crate::vectors::training::unevaluable(&name, &sources, &config.space) {
                _ if sources.is_empty() => {}
                Some(why) => skipped.push(why),
                None => request.queues.push((name, sources)),
            }
        }
        crate::vectors::training::Trainings::check_evaluation(config, &request)?;
        let data = self.trainings.evaluation_data(app, config).await?;
        // The learned ranker's facet features, where the events are of one index.
        let item_facets = match &config.index {
            Some(index) => self.item_facets(app, index, &data.items).await?,
            None => Vec::new(),
        };
        let mut evaluation =
            crate::vectors::training::Trainings::evaluate(config, &request, data, item_facets)
                .await?;
        evaluation.skipped = skipped;
        Ok(evaluation)
    }
}
