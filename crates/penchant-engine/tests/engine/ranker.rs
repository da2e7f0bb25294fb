//! The ranker job through the engine (its pure learning is tested in `penchant-learn`).

use penchant_learn::offline::FEATURES;

/// The ranker job on a synthetic shop sent through the engine: it learns the index's ranker,
/// stores it, and writes every user's learned queue in the model's order (the answer says so);
/// the queue is the job's alone from then on (a rebuild by hand is refused, the build job
/// leaves it); a node that dies mid-job leaves it to another; a second run stores a new version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ranker_job_learns_an_index_ranker_and_writes_its_learned_queues() {
    ranker_job_on(std::sync::Arc::new(penchant_store::MemStore::new())).await;
}

/// [`the_ranker_job_learns_an_index_ranker_and_writes_its_learned_queues`] on `store` (the
/// Bigtable backend runs it too).
pub async fn ranker_job_on(store: std::sync::Arc<dyn penchant_store::Store>) {
    use std::time::Duration;

    use penchant_engine::catalog::Write;
    use penchant_engine::events::{Event, EventType, Target};
    use penchant_engine::jobs::JobState;
    use penchant_engine::recommend::ranker::RankerConfig;
    use penchant_engine::recommend::{QueueDefinition, Ranker, RecommendRequest};
    use penchant_engine::{Engine, EngineConfig, EngineError};
    use serde_json::json;

    const APP: &str = "RANKED";
    let (users, items, topics) = (300, 120, 4);
    let (planted, truth) = penchant_vectors::synthetic::planted(users, items, topics, 6_000, 5);
    let engine = Engine::open(store.clone(), EngineConfig::default())
        .await
        .unwrap();
    engine
        .tenancy()
        .create_app(Some(APP), "shop")
        .await
        .unwrap();
    let records = (0..items)
        .map(|i| {
            let record = json!({"objectID": format!("i{i}"), "topic": truth.item_topic[i]});
            (
                "items".to_owned(),
                Write::Put(record.as_object().unwrap().clone()),
            )
        })
        .collect();
    engine.write_records(APP, records).await.unwrap();
    // The generator's events, one second apart, ending a minute ago.
    let now = engine.now_ms();
    let last = planted.last().unwrap().3;
    let events: Vec<Event> = planted
        .iter()
        .map(|&(u, i, _, at)| Event {
            event_type: EventType::Click,
            event_subtype: None,
            event_name: "Clicked".into(),
            index: "items".into(),
            user_token: format!("u{u}"),
            authenticated_user_token: None,
            timestamp: now - 60_000 - (last - at),
            target: Target::ObjectIds(vec![format!("i{i}")]),
            query_id: None,
            positions: None,
            object_data: None,
            value: None,
            currency: None,
        })
        .collect();
    for chunk in events.chunks(1000) {
        engine.push_events(APP, chunk).await.unwrap();
    }
    // The most taken item leaves the catalog: the history still has it, no queue may.
    let mut counts = vec![0usize; items];
    planted.iter().for_each(|e| counts[e.1 as usize] += 1);
    let gone = (0..items).max_by_key(|&i| counts[i]).unwrap();
    let gone = format!("i{gone}");
    engine
        .write_records(APP, vec![("items".into(), Write::Delete(gone.clone()))])
        .await
        .unwrap();
    let learned_queue = QueueDefinition {
        index_name: "items".into(),
        size: 50,
        sources: vec![penchant_engine::recommend::Source::Trending { weight: 1.0 }],
        ranker: Ranker::Learned,
    };
    engine
        .define_queue(APP, "learned", &learned_queue)
        .await
        .unwrap();

    let config: RankerConfig = serde_json::from_value(json!({
        "indexName": "items",
        "ranker": {"maxQueries": 300, "cuts": 2, "params": {"trees": 60}}
    }))
    .unwrap();
    let finished = async || {
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        loop {
            let status = engine.ranker_status(APP).await.unwrap().unwrap();
            if status.state != JobState::Running {
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the ranker job did not end"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    engine.start_ranker(APP, config.clone()).await.unwrap();
    let done = finished().await;
    assert_eq!(done.state, JobState::Done, "{done:?}");
    let version = done.version.expect("a model version");
    assert_eq!(done.queues, ["learned"]);
    assert_eq!(done.users, users as u64, "every user's queue: {done:?}");
    assert_eq!(done.phase, penchant_engine::recommend::ranker::Phase::Done);

    let stored = engine.ranker(APP, "items").await.unwrap().expect("stored");
    assert_eq!(stored.version, version);
    assert_eq!(stored.features.len(), FEATURES.len());
    assert_eq!(stored.learned.importance.len(), FEATURES.len());
    assert!(stored.learned.validation_ndcg > 0.0, "{:?}", stored.learned);
    assert_eq!((stored.users, stored.items), (users, items));

    // Each user's queue: ordered by that version, none of what the user had, mostly of the
    // user's own topics (what the generator planted).
    let (mut on_topic, mut served) = (0usize, 0usize);
    for u in 0..users {
        let queue = engine
            .stored_queue(APP, "learned", &format!("u{u}"))
            .await
            .unwrap();
        assert_eq!(queue.ranked_by, Some(version), "u{u}");
        assert!(!queue.items.is_empty() && queue.items.len() <= 50, "u{u}");
        assert!(
            queue.items.iter().all(|(id, _)| *id != gone),
            "u{u}: {gone} was deleted"
        );
        let had: std::collections::HashSet<String> = planted
            .iter()
            .filter(|e| e.0 == u as u32)
            .map(|e| format!("i{}", e.1))
            .collect();
        for (id, _) in &queue.items[..10.min(queue.items.len())] {
            assert!(!had.contains(id), "u{u} had {id}");
            let item: usize = id[1..].parse().unwrap();
            let topic = truth.item_topic[item];
            served += 1;
            on_topic += usize::from(truth.user_topics[u].iter().any(|(t, _)| *t == topic));
        }
        let scores: Vec<f32> = queue.items.iter().map(|(_, s)| *s).collect();
        // Best first, each `e^(s − s_best)`: at most 1 (the best may be left out as seen).
        assert!(
            scores.windows(2).all(|w| w[0] >= w[1]) && scores[0] <= 1.0,
            "{scores:?}"
        );
    }
    let share = on_topic as f64 / served as f64;
    println!(
        "learned queues: {:.0}% of each user's top 10 of the user's topics",
        share * 100.0
    );
    assert!(share > 0.6, "{share}");

    // Recommend reads it, and says which ranker answered.
    let request: RecommendRequest = serde_json::from_value(json!({
        "indexName": "items", "model": "recommended-for-you", "threshold": 0,
        "queue": "learned", "queryParameters": {"userToken": "u7"}
    }))
    .unwrap();
    let answer = engine
        .recommendations(APP, &[request])
        .await
        .unwrap()
        .remove(0);
    assert_eq!(answer.source, "learned-queue", "{answer:?}");
    assert_eq!(answer.ranker_version, Some(version));
    assert!(!answer.hits.is_empty());

    // At request time: trending items for u7, in the learned ranker's order (the job stored
    // what it serves from), each hit with the model's score and its features.
    let ask = |ranker: Option<&str>, user: Option<&str>| -> RecommendRequest {
        let mut request = json!({
            "indexName": "items", "model": "trending-items", "threshold": 0,
            "maxRecommendations": 20, "queryParameters": {"getRankingInfo": true}
        });
        if let Some(ranker) = ranker {
            request["ranker"] = json!(ranker);
        }
        if let Some(user) = user {
            request["queryParameters"]["userToken"] = json!(user);
        }
        serde_json::from_value(request).unwrap()
    };
    let one = async |request: RecommendRequest| {
        engine
            .recommendations(APP, &[request])
            .await
            .map(|mut answers| answers.remove(0))
    };
    let learned_hits = |answer: &penchant_engine::recommend::Recommendations| {
        answer
            .hits
            .iter()
            .map(|hit| match hit {
                penchant_engine::recommend::RecommendHit::Item {
                    record,
                    score,
                    learned,
                    ..
                } => (
                    record["objectID"].as_str().unwrap().to_owned(),
                    *score,
                    learned.clone(),
                ),
                _ => panic!("an item"),
            })
            .collect::<Vec<_>>()
    };
    let plain = one(ask(None, Some("u7"))).await.unwrap();
    assert_eq!(plain.ranker_version, None);
    let ranked = one(ask(Some("learned"), Some("u7"))).await.unwrap();
    assert_eq!(ranked.ranker_version, Some(version), "{ranked:?}");
    assert_eq!(ranked.source, "trending");
    let hits = learned_hits(&ranked);
    assert_eq!(hits.len(), 20);
    assert_eq!(hits[0].1, 100.0, "the best scores 100");
    let model_scores: Vec<f64> = hits
        .iter()
        .map(|(_, _, l)| {
            let l = l.as_ref().expect("the ranker's score");
            assert_eq!(l.features.len(), FEATURES.len());
            // Taken apart by feature (getRankingInfo): the parts sum to the score.
            let (bias, parts) = l.contributions.as_ref().expect("contributions");
            let sum = bias + parts.iter().sum::<f64>();
            assert!((sum - l.score).abs() < 1e-6, "{sum} vs {}", l.score);
            l.score
        })
        .collect();
    assert!(
        model_scores.windows(2).all(|w| w[0] >= w[1]),
        "{model_scores:?}"
    );
    let plain_ids: Vec<String> = learned_hits(&plain).into_iter().map(|h| h.0).collect();
    let ranked_ids: Vec<String> = hits.iter().map(|h| h.0.clone()).collect();
    assert_ne!(plain_ids, ranked_ids, "re-ordered");
    // The served order agrees with the job's queue for the same user: of the queue's items,
    // the served ranker puts first mostly what the job put first (the user's vector is folded
    // in at request time, the job's comes from its own ALS training).
    let queue = engine.stored_queue(APP, "learned", "u7").await.unwrap();
    let queued: Vec<&str> = queue.items.iter().map(|(id, _)| id.as_str()).collect();
    let (_, scored) = engine
        .learned_scores(APP, "items", "u7", &queued)
        .await
        .unwrap()
        .expect("served");
    let mut order: Vec<usize> = (0..queued.len()).collect();
    order.sort_by(|&a, &b| scored.scores[b].total_cmp(&scored.scores[a]));
    let agree = order[..10].iter().filter(|&&n| n < 10).count();
    println!("served ranker vs the job's queue: {agree} of the top 10 shared");
    assert!(agree >= 6, "{agree} of 10: {order:?}");
    // A model of other features (an earlier release's 23) is not served: a node that loads it
    // answers as with no ranker, until the next ranker job.
    let stored = engine.ranker(APP, "items").await.unwrap().unwrap();
    let write_model = async |model: &penchant_engine::recommend::ranker::StoredRanker| {
        let cell = penchant_store::Mutation::SetCell {
            family: "m".into(),
            qualifier: bytes::Bytes::from_static(b"model"),
            timestamp: penchant_store::Timestamp::Micros(model.version),
            value: serde_json::to_vec(model).unwrap().into(),
        };
        let key = penchant_engine::keys::ranker(APP, "items");
        store
            .mutate_row(
                penchant_engine::recommend::ranker::RANKERS_TABLE,
                key,
                vec![cell],
            )
            .await
            .unwrap();
    };
    let mut older = stored.clone();
    older.features.truncate(23);
    write_model(&older).await;
    let node = Engine::open(store.clone(), EngineConfig::default())
        .await
        .unwrap();
    let unserved = node.learned_scores(APP, "items", "u7", &queued).await;
    assert!(matches!(unserved, Ok(None)), "{unserved:?}");
    write_model(&stored).await;
    let served = Engine::open(store.clone(), EngineConfig::default())
        .await
        .unwrap()
        .learned_scores(APP, "items", "u7", &queued)
        .await
        .unwrap();
    assert_eq!(served.unwrap().1.scores, scored.scores);
    // The ranker needs a user, and is `blend` or `learned`.
    let refused = one(ask(Some("learned"), None)).await;
    assert!(
        matches!(&refused, Err(EngineError::Invalid(m)) if m.contains("userToken is required")),
        "{refused:?}"
    );
    let refused = one(ask(Some("gbdt"), Some("u7"))).await;
    assert!(
        matches!(&refused, Err(EngineError::Invalid(m)) if m.contains("`gbdt` is not a ranker")),
        "{refused:?}"
    );
    // Re-ranking by the learned ranker: the hits in its order, with its version and scores.
    let hits: Vec<penchant_engine::catalog::Record> = queued[..12]
        .iter()
        .rev()
        .map(|id| json!({"objectID": id}).as_object().unwrap().clone())
        .collect();
    let reranked = engine
        .rerank(
            APP,
            "items",
            &hits,
            "u7",
            penchant_engine::RerankOptions {
                ranker: Some("learned".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let (at, scores) = reranked.learned.expect("ordered by the ranker");
    assert_eq!(at, version);
    assert!(
        scores.windows(2).all(|w| w[0].score >= w[1].score),
        "{scores:?}"
    );
    let reranked_first = hits[reranked.ranked[0].0]["objectID"].as_str().unwrap();
    let best = (0..12).max_by(|&a, &b| scored.scores[a].total_cmp(&scored.scores[b]));
    assert_eq!(reranked_first, queued[best.unwrap()]);

    // The queue is the job's: a rebuild by hand is refused, the build job leaves it.
    let refused = engine.rebuild_queue(APP, "learned", "u7", None).await;
    assert!(
        matches!(refused, Err(EngineError::Refused(_))),
        "{refused:?}"
    );
    engine.start_build(APP).await.unwrap();
    loop {
        let build = engine.build_status(APP).await.unwrap().unwrap();
        if build.state != JobState::Running {
            assert_eq!(build.state, JobState::Done, "{build:?}");
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let kept = engine.stored_queue(APP, "learned", "u7").await.unwrap();
    assert_eq!(kept.ranked_by, Some(version));

    // A node that died in the queues phase left the job running: the node that takes it over
    // writes the queues again with the model it stored (no new version).
    let mut left = done.clone();
    left.state = JobState::Running;
    left.phase = penchant_engine::recommend::ranker::Phase::Queues;
    left.users = 0;
    left.finished_at = None;
    let before = kept.built_at.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    store
        .mutate_row(
            "jobs",
            bytes::Bytes::from(format!("{APP}\0")),
            vec![penchant_store::Mutation::set_now(
                "j",
                "rank",
                serde_json::to_vec(&left).unwrap(),
            )],
        )
        .await
        .unwrap();
    // The job that just ended gives its claim up after saving its last status: the stale
    // status is taken over once the claim is free.
    let mut taken = 0;
    crate::support::wait_until("the job taken over", Duration::from_secs(2), async || {
        taken += engine.take_over_jobs().await.unwrap();
        taken > 0
    })
    .await;
    assert_eq!(taken, 1);
    let resumed = finished().await;
    assert_eq!(resumed.state, JobState::Done, "{resumed:?}");
    assert_eq!(
        (resumed.version, resumed.users),
        (Some(version), users as u64)
    );
    assert_eq!(
        engine.ranker(APP, "items").await.unwrap().unwrap().version,
        version
    );
    let rewritten = engine.stored_queue(APP, "learned", "u7").await.unwrap();
    assert!(rewritten.built_at.unwrap() > before, "written again");
    assert_eq!(rewritten.ranked_by, Some(version));

    // A second run: a new version, served from then on.
    engine.start_ranker(APP, config).await.unwrap();
    let again = finished().await;
    assert_eq!(again.state, JobState::Done, "{again:?}");
    let newer = again.version.unwrap();
    assert!(newer > version);
    assert_eq!(
        engine.ranker(APP, "items").await.unwrap().unwrap().version,
        newer
    );
    let queue = engine.stored_queue(APP, "learned", "u7").await.unwrap();
    assert_eq!(queue.ranked_by, Some(newer));

    // The schedules start it too (daily by default), with its last settings.
    let started = engine.run_schedules().await.unwrap().unwrap();
    assert!(
        started.contains(&(APP.to_owned(), penchant_engine::schedules::Task::Rank)),
        "{started:?}"
    );
    let scheduled = finished().await;
    assert_eq!(scheduled.state, JobState::Done, "{scheduled:?}");
    assert_eq!(scheduled.config.ranker.max_queries, 300);
    assert!(scheduled.version.unwrap() > newer);

    // From impressions: none is logged yet, so asking for them fails the job.
    let asked = |examples: serde_json::Value| -> RankerConfig {
        serde_json::from_value(json!({
            "indexName": "items",
            "ranker": {"examples": examples, "minImpressions": 50, "maxQueries": 300, "cuts": 2,
                "params": {"trees": 60}}
        }))
        .unwrap()
    };
    // Started right after the last one ended (its claim given up a moment after its last
    // status: the engine waits for it).
    let start = async |config: RankerConfig| engine.start_ranker(APP, config).await.unwrap();
    start(asked(json!("impressions"))).await;
    let failed = finished().await;
    assert_eq!(failed.state, JobState::Failed, "{failed:?}");
    assert!(
        failed
            .error
            .as_deref()
            .unwrap()
            .contains("no logged impression of index 'items'"),
        "{failed:?}"
    );
    // Every user is served a tracked answer from the learned queue (logged as an impression)
    // and clicks the first hit of one of the user's topics with its queryID; every fourth
    // user buys it too.
    let mut clicked = 0usize;
    let mut outcomes = Vec::new();
    for u in 0..users {
        let user = format!("u{u}");
        let request: RecommendRequest = serde_json::from_value(json!({
            "indexName": "items", "model": "recommended-for-you", "threshold": 0,
            "maxRecommendations": 10, "queue": "learned",
            "queryParameters": {"userToken": user, "clickAnalytics": true}
        }))
        .unwrap();
        let (answer, served) = engine
            .recommendations_served(APP, &[request])
            .await
            .unwrap()
            .remove(0);
        let query_id = served.query_id.expect("a queryID");
        let hit = answer
            .hits
            .iter()
            .enumerate()
            .find_map(|(p, hit)| match hit {
                penchant_engine::recommend::RecommendHit::Item { record, .. } => {
                    let topic = record["topic"].as_u64().unwrap() as u32;
                    truth.user_topics[u]
                        .iter()
                        .any(|(t, _)| *t == topic)
                        .then(|| (p, record["objectID"].as_str().unwrap().to_owned()))
                }
                _ => None,
            });
        let Some((place, id)) = hit else { continue };
        clicked += 1;
        let mut types = vec![EventType::Click];
        if u % 4 == 0 {
            types.push(EventType::Conversion);
        }
        for event_type in types {
            outcomes.push(Event {
                event_type,
                event_subtype: None,
                event_name: "After recommend".into(),
                index: "items".into(),
                user_token: user.clone(),
                authenticated_user_token: None,
                timestamp: engine.now_ms(),
                target: Target::ObjectIds(vec![id.clone()]),
                query_id: Some(query_id.clone()),
                positions: (event_type == EventType::Click).then(|| vec![place as i64 + 1]),
                object_data: None,
                value: None,
                currency: None,
            });
        }
    }
    engine.push_events(APP, &outcomes).await.unwrap();
    let logged = store
        .read_all(
            "impressions",
            penchant_store::ReadRows::new(penchant_store::RowSet::prefix(bytes::Bytes::from(
                format!("{APP}\0"),
            ))),
        )
        .await
        .unwrap();
    assert_eq!(logged.len(), users, "one impression per tracked answer");
    // A tracked re-ranking is an impression too, of the hits in the order served (an untracked
    // one is not).
    let hits: Vec<penchant_engine::catalog::Record> = ["i3", "i1", "i2"]
        .iter()
        .map(|id| json!({"objectID": id}).as_object().unwrap().clone())
        .collect();
    let options = |click_analytics| penchant_engine::RerankOptions {
        click_analytics,
        ..Default::default()
    };
    engine
        .rerank(APP, "items", &hits, "reranked", options(false))
        .await
        .unwrap();
    let reranked = engine
        .rerank(APP, "items", &hits, "reranked", options(true))
        .await
        .unwrap();
    let read = |prefix: String| {
        let store = store.clone();
        async move {
            store
                .read_all(
                    "impressions",
                    penchant_store::ReadRows::new(penchant_store::RowSet::prefix(
                        bytes::Bytes::from(prefix),
                    )),
                )
                .await
                .unwrap()
        }
    };
    let rows = read(format!("{APP}\0reranked\0")).await;
    assert_eq!(rows.len(), 1, "the tracked re-ranking only");
    let cell = rows[0].latest("i", b"served".as_slice()).unwrap();
    let impression: serde_json::Value = serde_json::from_slice(&cell.value).unwrap();
    let order: Vec<&str> = reranked
        .ranked
        .iter()
        .map(|(at, _)| hits[*at]["objectID"].as_str().unwrap())
        .collect();
    assert_eq!(impression["objectIDs"], json!(order), "{impression}");
    assert_eq!(
        impression["queryID"],
        json!(reranked.served.query_id.unwrap())
    );
    assert!(clicked >= 100, "{clicked} users clicked");
    // `auto` takes the impressions once `minImpressions` had an outcome.
    start(asked(json!("auto"))).await;
    let from_impressions = finished().await;
    assert_eq!(
        from_impressions.state,
        JobState::Done,
        "{from_impressions:?}"
    );
    let impressed = engine.ranker(APP, "items").await.unwrap().unwrap();
    assert_eq!(impressed.version, from_impressions.version.unwrap());
    assert_eq!(
        impressed.learned.examples,
        penchant_learn::learned::Examples::Impressions
    );
    assert_eq!(impressed.learned.impressions, clicked);
    assert_eq!(
        impressed.learned.train_queries + impressed.learned.validation_queries,
        clicked,
        "each clicked impression is a query"
    );
    let queue = engine.stored_queue(APP, "learned", "u7").await.unwrap();
    assert_eq!(queue.ranked_by, Some(impressed.version));
    // Fewer than `minImpressions`: `auto` learns from the history.
    let mut high = asked(json!("auto"));
    high.ranker.min_impressions = clicked + 1;
    start(high).await;
    assert_eq!(finished().await.state, JobState::Done);
    let from_history = engine.ranker(APP, "items").await.unwrap().unwrap();
    assert_eq!(
        from_history.learned.examples,
        penchant_learn::learned::Examples::History
    );
    assert_eq!(from_history.learned.impressions, clicked, "found, not used");

    // Bad settings are refused before anything runs.
    let bad: RankerConfig = serde_json::from_value(json!({
        "indexName": "items", "ranker": {"maxQueries": 1000000, "perSource": 1000}
    }))
    .unwrap();
    let refused = engine.start_ranker(APP, bad).await;
    assert!(
        matches!(refused, Err(EngineError::Invalid(_))),
        "{refused:?}"
    );
}
