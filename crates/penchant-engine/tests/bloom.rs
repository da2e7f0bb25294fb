//! Key sets and seen filters under concurrent writers: optimistic updates lose no key.

mod common;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use common::{Hook, Hooked, Op};
use penchant_engine::sets::SetConfig;
use penchant_engine::{Engine, EngineConfig};

const APP: &str = "APP";

/// Reads of filters take a while, so that concurrent read-change-write cycles overlap.
#[derive(Debug, Default)]
struct SlowReads;

#[async_trait]
impl Hook for SlowReads {
    async fn before(&self, op: Op, table: &str) {
        if op == Op::Read && (table == "set_partitions" || table == "seen") {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

type Store = Arc<Hooked<SlowReads>>;

async fn open(store: Store) -> Engine {
    let config = EngineConfig {
        set_cache_bytes: 1 << 20,
        bloom_cache_ttl: Duration::from_secs(60),
        ..EngineConfig::default()
    };
    Engine::open(store, config).await.unwrap()
}

fn keys(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_adds_to_one_partition_lose_nothing() {
    let store = Store::default();
    let engine = open(store.clone()).await;
    let config = SetConfig {
        capacity: 1000,
        error_rate: 0.01,
        partition_bytes: 64 << 10,
        max_error_rate: None,
    };
    let info = engine.sets().reserve(APP, "s", config).await.unwrap();
    assert_eq!(
        info.description.partitions, 1,
        "every writer hits the same cell"
    );
    let writers: Vec<_> = (0..8)
        .map(|w| {
            let engine = engine.clone();
            tokio::spawn(async move {
                for chunk in keys(&format!("w{w}"), 100).chunks(5) {
                    engine.sets().add(APP, "s", chunk).await.unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }
    // Through another node, which reads the partition as stored.
    let other = open(store).await;
    for w in 0..8 {
        let found = other
            .sets()
            .exists(APP, "s", &keys(&format!("w{w}"), 100))
            .await
            .unwrap();
        assert!(found.iter().all(|f| *f), "writer {w} lost keys");
    }
    let info = engine.sets().info(APP, "s").await.unwrap();
    assert!((795..=800).contains(&info.keys), "{}", info.keys);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_seen_marks_lose_nothing() {
    let engine = open(Store::default()).await;
    let writers: Vec<_> = (0..8)
        .map(|w| {
            let engine = engine.clone();
            tokio::spawn(async move {
                for chunk in keys(&format!("w{w}"), 50).chunks(5) {
                    engine.seen().add(APP, "u", chunk).await.unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }
    let all: Vec<String> = (0..8).flat_map(|w| keys(&format!("w{w}"), 50)).collect();
    let unseen = engine.seen().unseen(APP, "u", &all).await.unwrap();
    assert!(unseen.is_empty(), "lost: {unseen:?}");
    assert_eq!(engine.seen().info(APP, "u").await.unwrap().keys, 400);
}
