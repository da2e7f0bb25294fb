//! Recompute jobs run in parallel ranges, save their progress, and resume where they stopped.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use penchant_engine::events::Event;
use penchant_engine::jobs::JobState;
use penchant_engine::profiles::RecomputeStats;
use penchant_engine::profiles::job::{RangeStatus, RecomputeStatus};
use penchant_engine::strategy::Strategy;
use penchant_engine::{Engine, EngineConfig};
use penchant_store::{Mutation, Store};

use crate::support;

const APP: &str = "APP";

fn strategy(score: i32) -> Strategy {
    support::views(score, 10)
}

fn user(i: usize) -> String {
    format!("u{i:03}")
}

/// Store a job record as a node that stopped mid-job left it.
async fn save_job(store: &Arc<dyn Store>, status: &RecomputeStatus) {
    let json = serde_json::to_vec(status).unwrap();
    store
        .mutate_row(
            "jobs",
            Bytes::from_static(b"APP\0"),
            vec![
                Mutation::set_now("j", "recompute", json),
                Mutation::set_now("j", "version", status.strategy_version.to_string()),
            ],
        )
        .await
        .unwrap();
}

async fn wait(engine: &Engine) -> RecomputeStatus {
    loop {
        let status = engine.recomputes().status(APP).await.unwrap().unwrap();
        if status.state != JobState::Running {
            return status;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_split_save_progress_and_resume_from_checkpoints() {
    let store: Arc<dyn Store> = Arc::new(penchant_store::MemStore::new());
    let config = EngineConfig {
        recompute_parallelism: 3,
        ..EngineConfig::default()
    };
    let engine = Engine::open(store.clone(), config).await.unwrap();
    engine.set_strategy(APP, strategy(10)).await.unwrap();
    wait(&engine).await;
    let now = penchant_store::validate::now_micros() / 1000;
    let events: Vec<Event> = (0..150)
        .map(|i| support::view(&user(i), &format!("b{}", i % 7), now - 1000))
        .collect();
    engine.push_events(APP, &events).await.unwrap();

    // A full job: three ranges, every user once.
    engine.set_strategy(APP, strategy(20)).await.unwrap();
    let done = wait(&engine).await;
    assert_eq!(done.state, JobState::Done, "{done:?}");
    assert_eq!(done.ranges.len(), 3, "{done:?}");
    assert_eq!(done.ranges_done, 3);
    assert_eq!(done.stats.users + done.stats.skipped, 150, "{done:?}");

    // An interrupted job under a newer strategy: range 0 done, range 1 half done.
    let v3 = engine.strategies().set(APP, strategy(30)).await.unwrap();
    let ranges = engine.profiles().plan_ranges(APP, 3).await.unwrap();
    assert_eq!(ranges.len(), 3);
    let checkpoint = user(75);
    let status = RecomputeStatus {
        strategy_version: v3.version,
        state: JobState::Running,
        stats: RecomputeStats::default(),
        ranges_done: 1,
        ranges: ranges
            .into_iter()
            .enumerate()
            .map(|(i, mut range)| {
                if i == 1 {
                    range.after = Some(checkpoint.clone());
                }
                RangeStatus {
                    range,
                    done: i == 0,
                    stats: RecomputeStats::default(),
                }
            })
            .collect(),
        started_at: now,
        finished_at: None,
        error: None,
        progress: Default::default(),
    };
    assert!(status.ranges[1].range.start.as_deref() < Some(checkpoint.as_str()));
    save_job(&store, &status).await;
    // The first job's runner gives its claim up just after saving its last status: under
    // load the claim may still be held for a while (more than 2 s seen on a 2-core machine
    // with every test binary running), and the job is taken over once it goes.
    let mut taken = 0;
    support::wait_until("the job taken over", Duration::from_secs(20), async || {
        taken += engine.take_over_jobs().await.unwrap();
        taken > 0
    })
    .await;
    assert_eq!(taken, 1);
    let resumed = wait(&engine).await;
    assert_eq!(resumed.state, JobState::Done, "{resumed:?}");
    assert_eq!(resumed.ranges_done, 3);
    // The resumed job scanned only what was left: nothing of range 0, range 1 after the
    // checkpoint, all of range 2. Profiles the scans skipped but that lag behind are caught by
    // the final pass over stale profiles: every profile ends current.
    let count = |from: Option<&str>, after: bool, to: Option<&str>| {
        (0..150)
            .map(user)
            .filter(|u| match from {
                Some(f) if after => u.as_str() > f,
                Some(f) => u.as_str() >= f,
                None => true,
            })
            .filter(|u| to.is_none_or(|t| u.as_str() < t))
            .count() as u64
    };
    let scanned = |r: &RangeStatus| r.stats.users + r.stats.skipped;
    assert_eq!(scanned(&resumed.ranges[0]), 0, "{resumed:?}");
    let r1 = &status.ranges[1].range;
    assert_eq!(
        scanned(&resumed.ranges[1]),
        count(Some(&checkpoint), true, r1.end.as_deref()),
        "{resumed:?}"
    );
    let r2 = &status.ranges[2].range;
    assert_eq!(
        scanned(&resumed.ranges[2]),
        count(r2.start.as_deref(), false, None)
    );
    for i in 0..150 {
        let u = user(i);
        let (_, version) = engine
            .profiles()
            .stored_profile(APP, &u)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(version, v3.version, "{u}");
    }
    // A job whose strategy is no longer current is not resumed.
    let stale = RecomputeStatus {
        strategy_version: 1,
        state: JobState::Running,
        ..resumed
    };
    save_job(&store, &stale).await;
    assert_eq!(engine.take_over_jobs().await.unwrap(), 0);
    assert_eq!(
        engine
            .recomputes()
            .status(APP)
            .await
            .unwrap()
            .unwrap()
            .state,
        JobState::Superseded
    );
}
