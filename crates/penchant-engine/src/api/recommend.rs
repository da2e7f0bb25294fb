//! Recommend: every model's answer, per-user queues, related lists, trending and fallbacks
//! ([`crate::recommend`] holds the pipeline's parts).

use crate::abtests::Served;
use crate::catalog::Record;
use crate::events::EventType;
use crate::recommend::queues::{QueueDefinition, Source};
use crate::recommend::related::Links;
use crate::recommend::{
    ALS_SPACE, Candidates, FACET_ITEMS, FALLBACK_SCAN, LEARNED_POOL, MAX_HIDDEN_SKIPPED, MAX_WALK,
    Ranked, Rebuilt, RecommendHit, Recommendations, Select, VECTOR_K, hits_ranked, older,
    percent_of_best, percents, personal, queues, related, round2, trained_at, vector_percents,
};
use crate::vectors::{Query, SearchOptions};
use crate::{Engine, EngineError, Result, keys};
use penchant_model::recommend::filters::Filter;
use penchant_model::recommend::request::{
    DEFAULT_QUEUE, MAX_RECOMMENDATIONS, Model, RecommendRequest, check_request_count, names_learned,
};
use penchant_store::Consistency;
use penchant_vectors::{Aggregate, Metric};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Queues, and the Recommend API.
impl Engine {
    /// Create or replace a queue's definition.
    pub async fn define_queue(&self, app: &str, name: &str, def: &QueueDefinition) -> Result<()> {
        self.recommend.queues.define(app, name, def).await
    }

    pub async fn queue_definition(&self, app: &str, name: &str) -> Result<QueueDefinition> {
        self.recommend.queues.definition(app, name).await
    }

    pub async fn queue_definitions(&self, app: &str) -> Result<Vec<(String, QueueDefinition)>> {
        self.recommend.queues.definitions(app).await
    }

    /// Delete a queue's definition and every user's queue of that name.
    pub async fn delete_queue(&self, app: &str, name: &str) -> Result<()> {
        self.recommend.queues.undefine(app, name).await
    }

    /// A user's queue as stored (all entries, popped ones included, and the cursor).
    pub async fn stored_queue(&self, app: &str, name: &str, user: &str) -> Result<queues::Stored> {
        keys::check_user_token(user)?;
        self.recommend.queues.definition(app, name).await?;
        self.recommend
            .queues
            .read(app, user, name, Consistency::Eventual)
            .await
    }

    /// Rebuild one user's queue from its definition's sources, plus `given` items (a list the
    /// caller ranks, weighing 1): minus what the user has seen and what the catalog lacks,
    /// best first, cut to the definition's size.
    pub async fn rebuild_queue(
        &self,
        app: &str,
        name: &str,
        user: &str,
        given: Option<Ranked>,
    ) -> Result<Rebuilt> {
        keys::check_user_token(user)?;
        let def = self.recommend.queues.definition(app, name).await?;
        self.rebuild_with(app, name, &def, user, given).await
    }

    pub(crate) async fn rebuild_with(
        &self,
        app: &str,
        name: &str,
        def: &QueueDefinition,
        user: &str,
        given: Option<Ranked>,
    ) -> Result<Rebuilt> {
        if self.ranked_by_job(app, def).await? {
            return Err(EngineError::Refused(format!(
                "queue '{name}' is ordered by the learned ranker of index '{}': the ranker job \
                 writes it (POST /1/ranker/train)",
                def.index_name
            )));
        }
        let mut scores: HashMap<String, f32> = HashMap::new();
        let mut add = |items: &Ranked, weight: f32| {
            let best = items.first().map_or(0.0, |(_, s)| *s);
            if best <= 0.0 {
                return;
            }
            for (id, s) in items.iter().filter(|(_, s)| *s > 0.0) {
                *scores.entry(id.clone()).or_default() += weight * s / best;
            }
        };
        if let Some(mut given) = given {
            given.sort_by(|a, b| b.1.total_cmp(&a.1));
            add(&given, 1.0);
        }
        // Items found in a space of the queue's index have a record: deleting a record deletes
        // its vectors. The others are checked in the catalog.
        let mut vouched: HashSet<String> = HashSet::new();
        for source in &def.sources {
            let (items, of_index) = self.source_items(app, def, user, source).await?;
            add(&items, source.weight());
            if of_index {
                vouched.extend(items.into_iter().map(|(id, _)| id));
            }
        }
        let mut ranked: Ranked = scores.into_iter().collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        self.write_queue(app, user, (name, def), ranked, &vouched, None)
            .await
    }

    /// Write a user's queue from candidates ranked best first: minus what the user has seen
    /// and what the catalog lacks (but those `vouched` for), cut to the definition's size,
    /// marked with the learned model's version that ranked them (`None`: a blend).
    pub(crate) async fn write_queue(
        &self,
        app: &str,
        user: &str,
        (name, def): (&str, &QueueDefinition),
        mut ranked: Ranked,
        vouched: &HashSet<String>,
        ranked_by: Option<i64>,
    ) -> Result<Rebuilt> {
        ranked.truncate(crate::seen::MAX_IDS_PER_CALL);
        let ids: Vec<&str> = ranked.iter().map(|(id, _)| id.as_str()).collect();
        let unseen: HashSet<String> = self
            .seen
            .unseen(app, user, &ids, Consistency::Eventual)
            .await?
            .into_iter()
            .map(|id| (*id).to_owned())
            .collect();
        let seen = ranked.len() - unseen.len();
        ranked.retain(|(id, _)| unseen.contains(id.as_str()));
        // Candidates come best first until the queue is full of items the catalog has.
        let mut queue = Vec::with_capacity(def.size.min(ranked.len()));
        let mut missing = 0;
        for chunk in ranked.chunks(def.size.max(64)) {
            let unsure: Vec<String> = chunk
                .iter()
                .filter(|(id, _)| !vouched.contains(id))
                .map(|(id, _)| id.clone())
                .collect();
            let present = self.catalog.present(app, &def.index_name, &unsure).await?;
            for (id, score) in chunk {
                if queue.len() == def.size {
                    break;
                }
                if vouched.contains(id) || present.contains(id) {
                    queue.push((id.clone(), *score));
                } else {
                    missing += 1;
                }
            }
            if queue.len() == def.size {
                break;
            }
        }
        self.recommend
            .queues
            .write(app, user, name, &queue, ranked_by)
            .await?;
        Ok(Rebuilt {
            items: queue.len(),
            seen,
            missing,
        })
    }

    /// One source's candidates for a user, best first, and whether they are items of a space
    /// of the queue's index.
    pub(crate) async fn source_items(
        &self,
        app: &str,
        def: &QueueDefinition,
        user: &str,
        source: &Source,
    ) -> Result<(Ranked, bool)> {
        let k = def.size.min(crate::vectors::MAX_K);
        let options = SearchOptions {
            k,
            ..SearchOptions::default()
        };
        let of_index =
            |space: &crate::vectors::Space| space.index.as_deref() == Some(def.index_name.as_str());
        Ok(match source {
            Source::Als { space, .. } => {
                let Some(described) = self.optional_space(app, space).await? else {
                    return Ok((Vec::new(), false));
                };
                let items = match self
                    .vector(app, space, crate::vectors::Kind::User, user)
                    .await?
                {
                    Some(v) => hits_ranked(
                        self.vectors
                            .search(app, space, Query::Vector(v), &options)
                            .await?,
                    ),
                    None => Vec::new(),
                };
                (items, of_index(&described))
            }
            Source::SimilarToLiked { space, last, .. } => {
                let Some(described) = self.optional_space(app, space).await? else {
                    return Ok((Vec::new(), false));
                };
                let (_, hits) = self
                    .similar_to_liked(app, space, user, *last, Aggregate::Mean, &options)
                    .await?;
                (hits_ranked(hits), of_index(&described))
            }
            Source::Related { last, .. } => {
                let liked = self.liked(app, user, &def.index_name, *last).await?;
                let mut scores: HashMap<String, f32> = HashMap::new();
                for item in &liked {
                    let list =
                        related::list(&self.store, app, &def.index_name, Links::Related, item)
                            .await?;
                    for (id, s) in list {
                        *scores.entry(id).or_default() += s;
                    }
                }
                for item in &liked {
                    scores.remove(item);
                }
                let mut ranked: Ranked = scores.into_iter().collect();
                ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
                (ranked, false)
            }
            Source::Trending { .. } => {
                let mut all = (*self.trending(app, &def.index_name).await?).clone();
                all.truncate(def.size);
                (all, false)
            }
        })
    }

    /// The last `last` items of `index` the user clicked or converted on, newest first.
    pub(crate) async fn liked(
        &self,
        app: &str,
        user: &str,
        index: &str,
        last: usize,
    ) -> Result<Vec<String>> {
        let window = self.tenancy.retention(app).await?;
        let since = self.now_ms() - window.as_millis() as i64;
        let liked = [EventType::Click, EventType::Conversion];
        let negative = &self.seen.settings(app).await?.negative_event_names;
        crate::vectors::recent_items(
            &self.store,
            app,
            user,
            since,
            last,
            |e| {
                liked.contains(&e.event_type)
                    && e.index == index
                    && !negative.contains(&e.event_name)
            },
            |_| true,
        )
        .await
    }

    /// A space, or `None` when the app has none of that name.
    pub(crate) async fn optional_space(
        &self,
        app: &str,
        name: &str,
    ) -> Result<Option<Arc<crate::vectors::Space>>> {
        match self.vectors.space(app, name).await {
            Ok(space) => Ok(Some(space)),
            Err(EngineError::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// An index's trending items now (cached for the node's strategy TTL).
    pub(crate) async fn trending(&self, app: &str, index: &str) -> Result<Arc<Ranked>> {
        let key = (app.to_owned(), index.to_owned());
        if let Some(cached) = self.recommend.trending.get(&key) {
            return Ok(cached);
        }
        let trends = &self.recommend.trends;
        let ranked = Arc::new(trends.scores(app, index, self.now_ms()).await?);
        self.recommend.trending.insert(key, ranked.clone());
        Ok(ranked)
    }

    /// Peek at (or pop) the next `n` items of a user's queue that the user has not seen and
    /// the catalog still has, with their records. Popped items are marked seen. The user's
    /// queue and seen filter are read as consistent as asked.
    pub async fn queue_items(
        &self,
        app: &str,
        name: &str,
        user: &str,
        n: usize,
        pop: bool,
        consistency: Consistency,
    ) -> Result<Vec<(Record, f32)>> {
        keys::check_user_token(user)?;
        if !(1..=1000).contains(&n) {
            return Err(EngineError::Invalid("n must be between 1 and 1000".into()));
        }
        let def = self.recommend.queues.definition(app, name).await?;
        let mut out = Vec::new();
        if !pop {
            let stored = self
                .recommend
                .queues
                .read(app, user, name, consistency)
                .await?;
            for chunk in stored.pending().chunks(n.max(32)) {
                let found = self
                    .servable(app, &def.index_name, user, chunk, consistency)
                    .await?;
                out.extend(found.into_iter().take(n - out.len()));
                if out.len() >= n {
                    break;
                }
            }
            return Ok(out);
        }
        // Pop until `n` servable items came out or the queue ends.
        loop {
            let want = n - out.len();
            let taken = self.recommend.queues.advance(app, user, name, want).await?;
            if taken.is_empty() {
                break;
            }
            let before = out.len();
            let found = self
                .servable(app, &def.index_name, user, &taken, consistency)
                .await?;
            out.extend(found.into_iter().take(n - out.len()));
            let ids: Vec<&str> = out[before..]
                .iter()
                .filter_map(|(r, _)| r.get("objectID").and_then(Value::as_str))
                .collect();
            self.seen.add(app, user, &ids).await?;
            if out.len() >= n {
                break;
            }
        }
        Ok(out)
    }

    /// The entries of `chunk` the user has not seen (the seen filter read as consistent as
    /// asked) and the catalog has, with their records, in their order.
    pub(crate) async fn servable(
        &self,
        app: &str,
        index: &str,
        user: &str,
        chunk: &[(String, f32)],
        consistency: Consistency,
    ) -> Result<Vec<(Record, f32)>> {
        let ids: Vec<&String> = chunk.iter().map(|(id, _)| id).collect();
        let unseen: HashSet<&String> = self
            .seen
            .unseen(app, user, &ids, consistency)
            .await?
            .into_iter()
            .copied()
            .collect();
        let wanted: Vec<String> = chunk
            .iter()
            .filter(|(id, _)| unseen.contains(id))
            .map(|(id, _)| id.clone())
            .collect();
        let mut records = self.catalog.get_many(app, index, &wanted).await?;
        Ok(chunk
            .iter()
            .filter_map(|(id, score)| records.remove(id).map(|r| (r, *score)))
            .collect())
    }

    /// Answer a Recommend call: each request in order.
    pub async fn recommendations(
        &self,
        app: &str,
        requests: &[RecommendRequest],
    ) -> Result<Vec<Recommendations>> {
        Ok(self
            .recommendations_served(app, requests)
            .await?
            .into_iter()
            .map(|(answer, _)| answer)
            .collect())
    }

    /// [`Engine::recommendations`], each answer with what it says of A/B testing: a request
    /// for a user (`queryParameters.userToken`) of a running test on its index is answered with
    /// the user's variant applied over its own parameters ([`crate::abtests`]).
    pub async fn recommendations_served(
        &self,
        app: &str,
        requests: &[RecommendRequest],
    ) -> Result<Vec<(Recommendations, Served)>> {
        check_request_count(requests.len())?;
        let mut out = Vec::with_capacity(requests.len());
        for (i, request) in requests.iter().enumerate() {
            let in_request = |e| match e {
                EngineError::Invalid(m) => EngineError::Invalid(format!("requests[{i}]: {m}")),
                other => other,
            };
            let params = &request.query_parameters;
            let assignment = match params.user_token.as_deref() {
                Some(user) if params.enable_ab_test != Some(false) && keys::user_token_ok(user) => {
                    self.abtests.assign(app, &request.index_name, user).await?
                }
                _ => None,
            };
            let varied;
            let request = match &assignment {
                Some(a) => {
                    varied = a.params.over(request);
                    &varied
                }
                None => request,
            };
            let answer = self.recommend_one(app, request).await.map_err(in_request)?;
            let tracked = params.click_analytics == Some(true);
            let served = match (&assignment, params.user_token.as_deref()) {
                (Some(a), Some(user)) => self.abtests.served(app, a, user, tracked),
                _ => Served::plain(tracked),
            };
            if let (Some(query_id), Some(user)) = (&served.query_id, params.user_token.as_deref()) {
                let served = answer.hits.iter().filter_map(|hit| match hit {
                    RecommendHit::Item { record, .. } => record.get("objectID"),
                    RecommendHit::Facet { .. } => None,
                });
                self.log_impression(app, &request.index_name, query_id, user, served)
                    .await;
            }
            out.push((
                answer,
                Served {
                    model: request.model.clone(),
                    ..served
                },
            ));
        }
        Ok(out)
    }

    /// One request: its model's hits, personalized and boosted if asked ([`personal`]).
    pub(crate) async fn recommend_one(
        &self,
        app: &str,
        req: &RecommendRequest,
    ) -> Result<Recommendations> {
        let max = match req.max_recommendations {
            None => MAX_RECOMMENDATIONS,
            Some(n) if (1..=MAX_RECOMMENDATIONS as i64).contains(&n) => n as usize,
            Some(_) => {
                return Err(EngineError::Invalid(format!(
                    "maxRecommendations must be between 1 and {MAX_RECOMMENDATIONS}"
                )));
            }
        };
        let params = &req.query_parameters;
        let wanted = match params.hits_per_page {
            None => max,
            Some(n) if (1..=MAX_RECOMMENDATIONS as i64).contains(&n) => max.min(n as usize),
            Some(_) => {
                return Err(EngineError::Invalid(format!(
                    "queryParameters.hitsPerPage must be between 1 and {MAX_RECOMMENDATIONS}"
                )));
            }
        };
        let learned = names_learned(req.ranker.as_deref())?;
        if learned && params.user_token.is_none() {
            return Err(EngineError::Invalid(
                "queryParameters.userToken is required with ranker learned".into(),
            ));
        }
        let personal = self.personal(app, req, learned).await?;
        // Items the user said "not for me" about stay out of every model's answer.
        let hidden = match params.user_token.as_deref() {
            Some(user) if keys::user_token_ok(user) => {
                self.seen.hidden(app, user, Consistency::Eventual).await?
            }
            _ => Default::default(),
        };
        let mut pool = personal.pool(wanted) + hidden.len().min(MAX_HIDDEN_SKIPPED);
        if learned {
            pool = pool.max(LEARNED_POOL);
        }
        let mut answer = self.recommend_pool(app, req, pool).await?;
        if !hidden.is_empty() {
            answer.hits.retain(|hit| match hit {
                RecommendHit::Item { record, .. } => !record
                    .get("objectID")
                    .and_then(Value::as_str)
                    .is_some_and(|id| hidden.contains_key(id)),
                RecommendHit::Facet { .. } => true,
            });
        }
        if let (true, Some(user)) = (learned, params.user_token.as_deref()) {
            let explain = params.get_ranking_info == Some(true);
            self.learned_order(app, &req.index_name, user, explain, &mut answer)
                .await?;
        }
        answer.hits = personal.apply(answer.hits, wanted);
        Ok(answer)
    }

    /// An answer's hits in the order of the index's learned ranker for `user`, their
    /// `_score`s `100·e^(s − s_best)`, and the ranker's version; as they were when no ranker
    /// serves yet.
    pub(crate) async fn learned_order(
        &self,
        app: &str,
        index: &str,
        user: &str,
        explain: bool,
        answer: &mut Recommendations,
    ) -> Result<()> {
        let ids: Vec<&str> = answer
            .hits
            .iter()
            .map(|hit| match hit {
                RecommendHit::Item { record, .. } => {
                    record.get("objectID").and_then(Value::as_str).unwrap_or("")
                }
                RecommendHit::Facet { .. } => "",
            })
            .collect();
        if ids.is_empty() || ids.contains(&"") {
            return Ok(());
        }
        let Some((serving, scored)) = self.learned_scores(app, index, user, &ids).await? else {
            return Ok(());
        };
        let best = scored.scores.iter().copied().fold(f64::MIN, f64::max);
        answer.hits = scored
            .in_order(&serving, std::mem::take(&mut answer.hits), explain)
            .into_iter()
            .map(|(mut hit, scored)| {
                if let RecommendHit::Item { score, learned, .. } = &mut hit {
                    *score = round2(100.0 * (scored.score - best).exp());
                    *learned = Some(scored);
                }
                hit
            })
            .collect();
        answer.ranker_version = Some(serving.version);
        Ok(())
    }

    /// How a request re-orders its hits: the user's profile when it personalizes, its
    /// optional filters.
    /// A request for the learned ranker personalizes only when it says so (the ranker weighs
    /// the user's facet affinities itself).
    pub(crate) async fn personal(
        &self,
        app: &str,
        req: &RecommendRequest,
        learned: bool,
    ) -> Result<personal::Personal> {
        let params = &req.query_parameters;
        let boosts = personal::optional_filters(params.optional_filters.as_ref())?;
        let impact = personal::impact(params)?;
        let enabled = params
            .enable_personalization
            .unwrap_or(req.model == Model::RecommendedForYou.name() && !learned);
        let mut out = personal::Personal {
            boosts,
            ..Default::default()
        };
        if !enabled {
            return Ok(out);
        }
        let Some(user) = params.user_token.as_deref() else {
            return Err(EngineError::Invalid(
                "queryParameters.userToken is required with enablePersonalization".into(),
            ));
        };
        keys::check_user_token(user)?;
        let (impact, scores) = self
            .personalization(
                app,
                user,
                impact,
                params.personalization_strategy.as_deref(),
                false,
            )
            .await?;
        out.impact = impact;
        out.scores = scores;
        Ok(out)
    }

    /// One request's hits in its model's order, at most `max`.
    pub(crate) async fn recommend_pool(
        &self,
        app: &str,
        req: &RecommendRequest,
        max: usize,
    ) -> Result<Recommendations> {
        crate::catalog::check_index_name(&req.index_name)?;
        let model = Model::parse(&req.model)?;
        let threshold = match req.threshold {
            Some(t) if (0.0..=100.0).contains(&t) => t,
            Some(_) => {
                return Err(EngineError::Invalid(
                    "threshold must be between 0 and 100".into(),
                ));
            }
            None => {
                return Err(EngineError::Invalid(
                    "threshold is required (0 to 100)".into(),
                ));
            }
        };
        let object_id = match model {
            Model::BoughtTogether | Model::RelatedProducts | Model::LookingSimilar => {
                let id = req.object_id.as_deref().ok_or_else(|| {
                    EngineError::Invalid(format!("objectID is required by model {}", model.name()))
                })?;
                crate::catalog::check_object_id(id)?;
                Some(id)
            }
            _ => None,
        };
        if model == Model::TrendingFacets {
            let facet = req.facet_name.as_deref().ok_or_else(|| {
                EngineError::Invalid("facetName is required by model trending-facets".into())
            })?;
            let hits = self
                .trending_facets(app, &req.index_name, facet, threshold, max)
                .await?;
            let (source, built_at) = match hits.is_empty() {
                true => ("none", None),
                false => ("trending", Some(self.now_ms())),
            };
            return Ok(Recommendations {
                hits,
                answered_by: model.name(),
                source,
                built_at,
                ranker_version: None,
            });
        }
        let mut filter = req.query_parameters.filter("queryParameters")?;
        if model == Model::TrendingItems {
            match (&req.facet_name, &req.facet_value) {
                (Some(name), Some(value)) => {
                    let facet = Filter::facet(name, value);
                    filter = Some(match filter {
                        Some(f) => f.and(facet),
                        None => facet,
                    });
                }
                (None, None) => {}
                _ => {
                    return Err(EngineError::Invalid(
                        "facetName and facetValue go together".into(),
                    ));
                }
            }
        }
        let fallback_filter = match &req.fallback_parameters {
            Some(p) => Some(p.filter("fallbackParameters")?),
            None => None,
        };
        let user = match model {
            Model::RecommendedForYou => {
                let user = req.query_parameters.user_token.as_deref().ok_or_else(|| {
                    EngineError::Invalid(
                        "queryParameters.userToken is required by model recommended-for-you".into(),
                    )
                })?;
                keys::check_user_token(user)?;
                Some(user)
            }
            _ => None,
        };
        // Never the item itself, never what the user has seen (checked per candidate list).
        let exclude: HashSet<String> = object_id.map(str::to_owned).into_iter().collect();
        let select = Select {
            index: &req.index_name,
            user,
            filter: filter.as_ref(),
            exclude: &exclude,
            threshold,
            max,
        };
        let mut ranker_version = None;
        let (candidates, source, built_at) = match model {
            Model::TrendingItems | Model::TrendingFacets => (Vec::new(), "trending", None),
            Model::BoughtTogether => {
                let (list, built_at) = related::list_built(
                    &self.store,
                    app,
                    &req.index_name,
                    Links::BoughtTogether,
                    object_id.unwrap_or_default(),
                )
                .await?;
                (
                    list.into_iter()
                        .map(|(id, s)| (id, f64::from(s) * 100.0))
                        .collect(),
                    "co-interaction",
                    built_at,
                )
            }
            Model::RelatedProducts => {
                self.related_products(app, req, object_id.unwrap_or_default())
                    .await?
            }
            Model::LookingSimilar => {
                self.looking_similar(app, req, object_id.unwrap_or_default())
                    .await?
            }
            Model::RecommendedForYou => {
                let (candidates, ranked_by) = self
                    .for_you_candidates(app, req, user.unwrap_or_default())
                    .await?;
                ranker_version = ranked_by;
                candidates
            }
        };
        if model != Model::TrendingItems {
            let candidates: Vec<(&str, f64)> = candidates
                .iter()
                .take(MAX_WALK)
                .map(|(id, s)| (id.as_str(), *s))
                .collect();
            let hits = self.select(app, &select, &candidates).await?;
            if !hits.is_empty() {
                return Ok(Recommendations {
                    hits,
                    answered_by: model.name(),
                    source,
                    built_at,
                    ranker_version,
                });
            }
        }
        // The zero-day model: trending items under the same filters.
        let ranked = self.trending(app, &req.index_name).await?;
        let trending = percents(&ranked);
        let hits = self.select(app, &select, &trending).await?;
        if !hits.is_empty() {
            return Ok(Recommendations {
                hits,
                answered_by: Model::TrendingItems.name(),
                source: "trending",
                built_at: Some(self.now_ms()),
                ranker_version: None,
            });
        }
        let Some(fallback) = fallback_filter else {
            return Ok(Recommendations {
                hits,
                answered_by: model.name(),
                source: "none",
                built_at: None,
                ranker_version: None,
            });
        };
        // Then `fallbackParameters`: trending under its filters, else the catalog's records
        // that pass them (score 0, no threshold: a fallback is what the caller asked for).
        let loose = Select {
            filter: fallback.as_ref(),
            ..select
        };
        let hits = self.select(app, &loose, &trending).await?;
        if !hits.is_empty() {
            return Ok(Recommendations {
                hits,
                answered_by: "fallbackParameters",
                source: "trending",
                built_at: Some(self.now_ms()),
                ranker_version: None,
            });
        }
        let any = Select {
            threshold: 0.0,
            ..loose
        };
        let ids = self
            .catalog
            .first_ids(app, &req.index_name, FALLBACK_SCAN)
            .await?;
        let scanned: Vec<(&str, f64)> = ids.iter().map(|id| (id.as_str(), 0.0)).collect();
        let hits = self.select(app, &any, &scanned).await?;
        let source = if hits.is_empty() { "none" } else { "catalog" };
        Ok(Recommendations {
            hits,
            answered_by: "fallbackParameters",
            source,
            built_at: None,
            ranker_version: None,
        })
    }

    /// Walk candidates (best first, scores 0–100) and return the records that exist, the user
    /// has not seen, and pass the request's constraints. Candidates are looked at a chunk at a
    /// time (one seen check and one catalog read each), at most [`MAX_WALK`] of them.
    pub(crate) async fn select(
        &self,
        app: &str,
        select: &Select<'_>,
        candidates: &[(&str, f64)],
    ) -> Result<Vec<RecommendHit>> {
        let mut hits = Vec::new();
        let mut eligible: Vec<(&str, f64)> = Vec::with_capacity(candidates.len().min(MAX_WALK));
        for &(id, score) in candidates.iter().take(MAX_WALK) {
            if score >= select.threshold && !select.exclude.contains(id) {
                eligible.push((id, score));
            }
        }
        // A first chunk just over what is wanted (most candidates pass), then larger ones.
        let mut rest = eligible.as_slice();
        let mut size = select.max + 2;
        while !rest.is_empty() {
            let (chunk, after) = rest.split_at(size.min(rest.len()));
            rest = after;
            size = (select.max * 4).max(32);
            let ids: Vec<&str> = chunk.iter().map(|(id, _)| *id).collect();
            let unseen = match select.user {
                Some(user) => {
                    self.seen
                        .unseen(app, user, &ids, Consistency::Eventual)
                        .await?
                }
                None => ids.iter().collect(),
            };
            let ids: Vec<String> = unseen.into_iter().map(|id| (*id).to_owned()).collect();
            let mut records = self.catalog.get_many(app, select.index, &ids).await?;
            for &(id, score) in chunk {
                let Some(record) = records.remove(id) else {
                    continue;
                };
                if select.filter.is_none_or(|f| f.matches(&record)) {
                    hits.push(RecommendHit::Item {
                        record,
                        score: round2(score),
                        personalization: None,
                        learned: None,
                    });
                    if hits.len() == select.max {
                        return Ok(hits);
                    }
                }
            }
        }
        Ok(hits)
    }

    pub(crate) async fn trending_facets(
        &self,
        app: &str,
        index: &str,
        facet: &str,
        threshold: f64,
        max: usize,
    ) -> Result<Vec<RecommendHit>> {
        let ranked = self.facet_values(app, index, facet).await?;
        Ok(percent_of_best((*ranked).clone())
            .into_iter()
            .filter(|(_, s)| *s >= threshold)
            .take(max)
            .map(|(value, score)| RecommendHit::Facet {
                name: facet.to_owned(),
                value,
                score: round2(score),
            })
            .collect())
    }

    /// A facet's values, ranked by the trending scores of the top items holding them (cached
    /// like trending items).
    pub(crate) async fn facet_values(
        &self,
        app: &str,
        index: &str,
        facet: &str,
    ) -> Result<Arc<Ranked>> {
        let key = (app.to_owned(), index.to_owned(), facet.to_owned());
        if let Some(cached) = self.recommend.facets.get(&key) {
            return Ok(cached);
        }
        let trending = self.trending(app, index).await?;
        let top: Vec<String> = trending
            .iter()
            .take(FACET_ITEMS)
            .map(|(id, _)| id.clone())
            .collect();
        let records = self.catalog.get_many(app, index, &top).await?;
        let mut values: HashMap<String, f32> = HashMap::new();
        for (id, score) in trending.iter().take(FACET_ITEMS) {
            let Some(record) = records.get(id) else {
                continue;
            };
            let mut counted = HashSet::new();
            for (attribute, value) in crate::catalog::facet_values(record) {
                if attribute == facet && counted.insert(value.clone()) {
                    *values.entry(value).or_default() += score;
                }
            }
        }
        let mut ranked: Ranked = values.into_iter().collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let ranked = Arc::new(ranked);
        self.recommend.facets.insert(key, ranked.clone());
        Ok(ranked)
    }

    /// Co-interaction, blended half and half with the item's vector neighbours when the app
    /// has a space holding the item.
    pub(crate) async fn related_products(
        &self,
        app: &str,
        req: &RecommendRequest,
        object_id: &str,
    ) -> Result<Candidates> {
        let (list, listed_at) =
            related::list_built(&self.store, app, &req.index_name, Links::Related, object_id)
                .await?;
        let space = req.space.as_deref().unwrap_or(ALS_SPACE);
        let neighbours = self.item_neighbours(app, space, object_id).await?;
        let Some((metric, hits, trained_at)) = neighbours.filter(|(_, h, _)| !h.is_empty()) else {
            let co = list
                .into_iter()
                .map(|(id, s)| (id, f64::from(s) * 100.0))
                .collect();
            return Ok((co, "co-interaction", listed_at));
        };
        let vectors = vector_percents(metric, hits);
        if list.is_empty() {
            return Ok((vectors, "vectors", trained_at));
        }
        let mut blend: HashMap<String, f64> = HashMap::new();
        for (id, s) in list {
            *blend.entry(id).or_default() += f64::from(s) * 50.0;
        }
        for (id, s) in vectors {
            *blend.entry(id).or_default() += s / 2.0;
        }
        let mut ranked: Vec<(String, f64)> = blend.into_iter().collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        Ok((
            ranked,
            "co-interaction+vectors",
            older(listed_at, trained_at),
        ))
    }

    /// The item's neighbours in a space, with the space's metric and when its training ran
    /// (`None` for uploaded vectors); `None` when the space or the item's vector is missing.
    pub(crate) async fn item_neighbours(
        &self,
        app: &str,
        space: &str,
        object_id: &str,
    ) -> Result<Option<(Metric, Vec<crate::vectors::Hit>, Option<i64>)>> {
        let Some(described) = self.optional_space(app, space).await? else {
            return Ok(None);
        };
        let options = SearchOptions {
            k: VECTOR_K,
            ..SearchOptions::default()
        };
        match self
            .vectors
            .search(app, space, Query::Item(object_id.to_owned()), &options)
            .await
        {
            Ok(hits) => Ok(Some((described.metric, hits, trained_at(&described)))),
            Err(EngineError::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `looking-similar`: the item's neighbours in the space the request names, else the space
    /// of the index's uploaded (untrained) vectors; none when the index has no space (the
    /// answer falls back to trending items).
    pub(crate) async fn looking_similar(
        &self,
        app: &str,
        req: &RecommendRequest,
        object_id: &str,
    ) -> Result<Candidates> {
        let space = match &req.space {
            Some(space) => {
                self.vectors.space(app, space).await?;
                space.clone()
            }
            None => {
                let spaces = self.vectors.list(app).await?;
                let of_index = |s: &&crate::vectors::Space| {
                    s.index.as_deref() == Some(req.index_name.as_str())
                };
                let chosen = spaces
                    .iter()
                    .filter(of_index)
                    .find(|s| s.training.is_none())
                    .or_else(|| spaces.iter().find(of_index));
                match chosen {
                    Some(space) => space.name.clone(),
                    // No vectors yet: like any model without data, the answer falls back to
                    // trending items (a page's widget keeps working until vectors arrive).
                    None => return Ok((Vec::new(), "vectors", None)),
                }
            }
        };
        Ok(match self.item_neighbours(app, &space, object_id).await? {
            Some((metric, hits, at)) => (vector_percents(metric, hits), "vectors", at),
            None => (Vec::new(), "vectors", None),
        })
    }

    /// `recommended-for-you`: the user's queue, else the user's vector, else the items closest
    /// to what the user liked.
    /// Rebuild a user's queue in the background when it is older than the app's
    /// `queueStaleAfterMinutes` and than the user's latest event ([`crate::schedules`]); one
    /// rebuild per user and queue at a time on this node.
    pub(crate) async fn refresh_if_stale(
        &self,
        app: &str,
        queue: &str,
        user: &str,
        built_at: Option<i64>,
    ) -> Result<()> {
        let stale_after = self.cached_schedules(app).await?.queue_stale_after_minutes;
        if stale_after == 0 {
            return Ok(());
        }
        // A queue never built waits for the build (it builds every user's).
        let Some(at) = built_at else {
            return Ok(());
        };
        if self.now_ms() - at < i64::from(stale_after) * 60_000 {
            return Ok(());
        }
        let last_event = self
            .profiles
            .stored_profile(app, user)
            .await?
            .and_then(|(p, _)| p.last_event_at);
        if last_event.is_some_and(|e| e <= at) {
            return Ok(());
        }
        let key = (app.to_owned(), queue.to_owned(), user.to_owned());
        if !self.recommend.rebuilding.lock().insert(key.clone()) {
            return Ok(());
        }
        let engine = self.clone();
        self.supervisor.spawn(async move {
            let (app, queue, user) = &key;
            match engine.rebuild_queue(app, queue, user, None).await {
                // A learned queue whose index's ranker came since it was built: the ranker
                // job writes it.
                Ok(_) | Err(EngineError::Refused(_)) => {}
                Err(e) => {
                    tracing::warn!(%app, %queue, %user, error = %e, "cannot rebuild a stale queue")
                }
            }
            engine.recommend.rebuilding.lock().remove(&key);
        });
        Ok(())
    }

    pub(crate) async fn for_you_candidates(
        &self,
        app: &str,
        req: &RecommendRequest,
        user: &str,
    ) -> Result<(Candidates, Option<i64>)> {
        let queue = req.queue.as_deref().unwrap_or(DEFAULT_QUEUE);
        queues::check_name(queue)?;
        let defined = match self.recommend.queues.definition(app, queue).await {
            Ok(def) => def.index_name == req.index_name,
            Err(EngineError::NotFound(_)) if req.queue.is_none() => false,
            Err(e) => return Err(e),
        };
        if defined {
            let stored = self
                .recommend
                .queues
                .read(app, user, queue, Consistency::Eventual)
                .await?;
            // A queue a learned model ordered is the ranker job's to write.
            if stored.ranked_by.is_none() {
                self.refresh_if_stale(app, queue, user, stored.built_at)
                    .await?;
            }
            let pending = stored.pending();
            if !pending.is_empty() {
                let best = f64::from(pending[0].1).max(f64::MIN_POSITIVE);
                let items = pending
                    .iter()
                    .take(MAX_WALK)
                    .map(|(id, s)| (id.clone(), (f64::from(*s) / best * 100.0).clamp(0.0, 100.0)))
                    .collect();
                let source = match stored.ranked_by {
                    Some(_) => "learned-queue",
                    None => "queue",
                };
                return Ok(((items, source, stored.built_at), stored.ranked_by));
            }
        }
        let space = req.space.as_deref().unwrap_or(ALS_SPACE);
        let Some(described) = self.optional_space(app, space).await? else {
            return Ok(((Vec::new(), "none", None), None));
        };
        let options = SearchOptions {
            k: VECTOR_K,
            ..SearchOptions::default()
        };
        if let Some(vector) = self
            .vector(app, space, crate::vectors::Kind::User, user)
            .await?
        {
            let hits = self
                .vectors
                .search(app, space, Query::Vector(vector), &options)
                .await?;
            if !hits.is_empty() {
                let at = trained_at(&described);
                return Ok((
                    (vector_percents(described.metric, hits), "vectors", at),
                    None,
                ));
            }
        }
        let (_, hits) = self
            .similar_to_liked(app, space, user, 10, Aggregate::Mean, &options)
            .await?;
        let at = trained_at(&described);
        let candidates = (
            vector_percents(described.metric, hits),
            "similar-to-liked",
            at,
        );
        Ok((candidates, None))
    }
}
