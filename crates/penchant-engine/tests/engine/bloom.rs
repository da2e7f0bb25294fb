//! Key sets and seen filters under concurrent writers: optimistic updates lose no key.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use penchant_engine::Consistency::Eventual;
use penchant_engine::sets::SetConfig;
use penchant_engine::{Engine, EngineConfig};

use crate::support::{Hook, Hooked, Op};

const APP: &str = "APP";

/// Reads of filters take a while, so that concurrent read-change-write cycles overlap.
#[derive(Debug, Default)]
struct SlowReads;

#[async_trait]
impl Hook for SlowReads {
    async fn before(&self, op: Op, table: &str) -> penchant_store::Result<()> {
        if op == Op::Read && (table == "set_partitions" || table == "seen") {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        Ok(())
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
    let unseen = engine
        .seen()
        .unseen(APP, "u", &all, Eventual)
        .await
        .unwrap();
    assert!(unseen.is_empty(), "lost: {unseen:?}");
    assert_eq!(
        engine.seen().info(APP, "u", Eventual).await.unwrap().keys,
        400
    );
}

fn list(
    keys: &[String],
) -> futures::stream::Iter<std::vec::IntoIter<Result<bytes::Bytes, String>>> {
    futures::stream::iter(vec![Ok(bytes::Bytes::from(keys.join("\n")))])
}

fn small_set() -> SetConfig {
    SetConfig {
        capacity: 5000,
        error_rate: 0.01,
        partition_bytes: 512,
        max_error_rate: None,
    }
}

#[tokio::test]
async fn a_node_with_a_stale_description_has_no_false_negatives_after_a_rebuild() {
    let store = Store::default();
    let a = open(store.clone()).await;
    let b = open(store).await;
    a.sets().reserve(APP, "s", small_set()).await.unwrap();
    let old = keys("old", 1000);
    a.sets().add(APP, "s", &old).await.unwrap();
    // Node B caches the description and one partition of the first generation.
    assert!(b.sets().exists(APP, "s", &old[..1]).await.unwrap()[0]);
    let both: Vec<String> = old.iter().cloned().chain(keys("new", 2000)).collect();
    a.sets().rebuild(APP, "s", list(&both)).await.unwrap();
    // B's copy stays stale for its whole TTL (60 s): it answers from the partition it cached
    // or, for the others, finds them gone from the old generation and follows the set to the
    // new one. Either way, no key of both generations is missed.
    let found = b.sets().exists(APP, "s", &old).await.unwrap();
    assert!(found.iter().all(|f| *f), "false negatives on a stale node");
    // Adds go to the generation the set has now, whatever the node's cache.
    b.sets().add(APP, "s", &keys("later", 100)).await.unwrap();
    let found = a
        .sets()
        .exists(APP, "s", &keys("later", 100))
        .await
        .unwrap();
    assert!(found.iter().all(|f| *f));
}

#[tokio::test]
async fn of_two_rebuilds_at_once_the_first_to_finish_wins() {
    let engine = open(Store::default()).await;
    engine.sets().reserve(APP, "s", small_set()).await.unwrap();
    let (tx, rx) = futures::channel::mpsc::unbounded::<Result<bytes::Bytes, String>>();
    let slow = {
        let engine = engine.clone();
        tokio::spawn(async move { engine.sets().rebuild(APP, "s", rx).await })
    };
    tx.unbounded_send(Ok(bytes::Bytes::from(keys("slow", 100).join("\n"))))
        .unwrap();
    // The slow rebuild has started (read the set's generation) before the fast one.
    while engine
        .sets()
        .info(APP, "s")
        .await
        .unwrap()
        .description
        .last_rebuild
        .is_none()
    {
        tokio::task::yield_now().await;
    }
    let fast = keys("fast", 2000);
    let done = engine.sets().rebuild(APP, "s", list(&fast)).await.unwrap();
    drop(tx);
    let err = slow.await.unwrap().unwrap_err();
    assert!(
        err.to_string()
            .contains("another rebuild switched the set first"),
        "{err}"
    );
    let info = engine.sets().info(APP, "s").await.unwrap();
    assert_eq!(info.description.generation, done.generation);
    assert!(
        engine
            .sets()
            .exists(APP, "s", &fast)
            .await
            .unwrap()
            .iter()
            .all(|f| *f)
    );
    // Only the winner's partitions are left.
    let rows = engine
        .store()
        .read_all(
            "set_partitions",
            penchant_store::ReadRows::new(penchant_store::RowSet::all()),
        )
        .await
        .unwrap();
    let prefix_len = "APP\0s\0".len();
    assert!(
        rows.iter()
            .all(|r| r.key[prefix_len..prefix_len + 8] == done.generation.to_be_bytes()),
        "another generation's partitions are left"
    );
}

#[tokio::test]
async fn seen_filters_remember_recent_items_across_rotations_and_compactions() {
    use penchant_engine::seen::{COMPACT_AT, SeenSettings};
    // A plain store: adds follow each other quickly (several in one millisecond).
    let store = Arc::new(penchant_store::MemStore::new());
    let engine = Engine::open(store, EngineConfig::default()).await.unwrap();
    let settings = SeenSettings {
        filter_bits: 4096,
        error_rate: 0.01,
        event_types: vec![],
        ..SeenSettings::default()
    };
    engine.seen().set_settings(APP, settings).await.unwrap();
    // Adds larger than a generation, so that the order of replayed deltas shows.
    let items = keys("item", 12_000);
    for (n, chunk) in items.chunks(500).enumerate() {
        engine.seen().add(APP, "u", chunk).await.unwrap();
        let info = engine.seen().info(APP, "u", Eventual).await.unwrap();
        let end = (n + 1) * 500;
        let recent = &items[end.saturating_sub(info.capacity as usize)..end];
        let forgotten = engine
            .seen()
            .unseen(APP, "u", recent, Eventual)
            .await
            .unwrap();
        assert!(
            forgotten.is_empty(),
            "after {end}: {} recent items forgotten",
            forgotten.len()
        );
        // Deltas are folded into the filter before they pile up.
        let row = engine
            .store()
            .read_row("seen", bytes::Bytes::from_static(b"APP\0u\0"), None)
            .await
            .unwrap()
            .unwrap();
        let deltas = row
            .cells
            .iter()
            .filter(|c| c.qualifier.starts_with(b"+"))
            .count();
        assert!(deltas <= COMPACT_AT, "{deltas} deltas");
    }
}

#[tokio::test]
async fn a_light_users_seen_filter_holds_their_hashes_until_a_bitmap_pays() {
    use penchant_engine::seen::SPARSE_SHARE;
    let store = Arc::new(penchant_store::MemStore::new());
    let engine = Engine::open(store, EngineConfig::default()).await.unwrap();
    let row = || async {
        engine
            .store()
            .read_row("seen", penchant_engine::keys::seen(APP, "u"), None)
            .await
            .unwrap()
            .unwrap()
    };
    let stored_bytes = |row: &penchant_store::Row| {
        row.cells
            .iter()
            .map(|c| c.qualifier.len() + c.value.len())
            .sum::<usize>()
    };
    // Two views: two deltas of 8 bytes each, no 16 KB bitmap.
    engine.seen().add(APP, "u", &["a"]).await.unwrap();
    engine.seen().add(APP, "u", &["b", "a"]).await.unwrap();
    let light = row().await;
    assert!(light.latest("s", b"cur").is_none(), "{light:?}");
    assert!(stored_bytes(&light) < 64, "{} bytes", stored_bytes(&light));
    let seen = engine.seen();
    assert_eq!(
        seen.exists(APP, "u", &["a", "b", "c"], Eventual)
            .await
            .unwrap(),
        [true, true, false]
    );
    let info = seen.info(APP, "u", Eventual).await.unwrap();
    assert_eq!((info.keys, info.filter_bits), (2, 1 << 17));
    // Past the share of the bitmap the hashes may take, the base is written and the deltas
    // folded into it; every item stays seen.
    let items = keys(
        "item",
        (info.filter_bits / 8 / SPARSE_SHARE / 8) as usize + 1,
    );
    for item in &items {
        seen.add(APP, "u", &[item]).await.unwrap();
    }
    let heavy = row().await;
    assert!(heavy.latest("s", b"cur").is_some());
    assert!(
        seen.unseen(APP, "u", &items, Eventual)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        seen.exists(APP, "u", &["a", "b"], Eventual).await.unwrap(),
        [true, true]
    );
}

/// "Not for me": a negative event hides its items from the user's unseen checks (and so from
/// queues and recommendations) until its time is up, marks nothing seen, counts in no trend,
/// and lowers its facets' weight in the profile where the strategy scores it negatively; the
/// route's hide and unhide work alike.
#[tokio::test]
async fn not_for_me_hides_items_for_a_while_and_lowers_their_facets() {
    use penchant_engine::catalog::Write;
    use penchant_engine::clock::Clock;
    use penchant_engine::events::{Event, EventType, Target};
    use penchant_engine::seen::SeenSettings;
    let now = 1_800_000_000_000i64;
    let clock = Clock::manual(now * 1000);
    let store = Arc::new(penchant_store::MemStore::new());
    let config = EngineConfig {
        clock: clock.clone(),
        ..EngineConfig::default()
    };
    let engine = Engine::open(store, config).await.unwrap();
    engine
        .tenancy()
        .create_app(Some(APP), "shop")
        .await
        .unwrap();
    let settings = SeenSettings {
        negative_event_names: vec!["Not Interested".into()],
        hide_days: 7,
        ..SeenSettings::default()
    };
    engine.seen().set_settings(APP, settings).await.unwrap();
    let records = [("a", "Xeno"), ("b", "Yarn"), ("c", "Yarn"), ("d", "Zed")]
        .map(|(id, brand)| {
            let record = serde_json::json!({"objectID": id, "brand": brand});
            (
                "products".to_owned(),
                Write::Put(record.as_object().unwrap().clone()),
            )
        })
        .to_vec();
    engine.write_records(APP, records).await.unwrap();
    engine
        .set_strategy(
            APP,
            crate::support::strategy(
                &[
                    ("Clicked", EventType::Click, 10),
                    ("Not Interested", EventType::Click, -20),
                ],
                &[("brand", 100)],
            ),
        )
        .await
        .unwrap();
    let event = |name: &str, ids: &[&str], at: i64| Event {
        index: "products".into(),
        target: Target::ObjectIds(ids.iter().map(|s| (*s).to_owned()).collect()),
        ..crate::support::event(EventType::Click, name, "u", at, &[])
    };
    let day = 86_400_000;
    engine
        .push_events(
            APP,
            &[
                event("Clicked", &["a", "b"], now - 1000),
                event("Not Interested", &["b", "c"], now - day),
            ],
        )
        .await
        .unwrap();
    let items = ["a", "b", "c", "d"];
    let unseen = |engine: &Engine| {
        let engine = engine.clone();
        async move {
            let got = engine
                .seen()
                .unseen(APP, "u", &items, Eventual)
                .await
                .unwrap();
            got.into_iter().copied().collect::<Vec<&str>>()
        }
    };
    assert_eq!(unseen(&engine).await, ["d"], "a and b seen; b and c hidden");
    let hidden = engine.hidden(APP, "u", Eventual).await.unwrap();
    assert_eq!(hidden.get("c"), Some(&(now - day + 7 * day)));
    // Yarn: one click (10) and two "not for me" (-20 each) leave it out; Xeno stays.
    let profile = engine.profile(APP, "u", Eventual).await.unwrap().unwrap();
    assert!(profile.scores["brand"].contains_key("Xeno"), "{profile:?}");
    assert!(!profile.scores["brand"].contains_key("Yarn"), "{profile:?}");
    // Trending counts the clicks, not the "not for me".
    let request: penchant_engine::recommend::RecommendRequest = serde_json::from_value(
        serde_json::json!({"indexName": "products", "model": "trending-items", "threshold": 0}),
    )
    .unwrap();
    let answer = engine.recommendations(APP, &[request]).await.unwrap();
    let ids: Vec<String> = answer[0]
        .hits
        .iter()
        .filter_map(|h| match h {
            penchant_engine::recommend::RecommendHit::Item { record, .. } => {
                Some(record["objectID"].as_str()?.to_owned())
            }
            penchant_engine::recommend::RecommendHit::Facet { .. } => None,
        })
        .collect();
    assert_eq!(ids, ["a", "b"], "c was only not for me");
    // Shown again; hidden by the route for 1 day.
    engine.unhide(APP, "u", &["c".to_owned()]).await.unwrap();
    assert_eq!(unseen(&engine).await, ["c", "d"]);
    let until = engine
        .hide(APP, "u", &["d".to_owned()], Some(1))
        .await
        .unwrap();
    assert_eq!(until, now + day);
    assert!(
        engine
            .hide(APP, "u", &["d".to_owned()], Some(0))
            .await
            .is_err()
    );
    assert_eq!(unseen(&engine).await, ["c"]);
    // A day and a bit later, d is back; six days later, c was never seen: still back.
    clock.advance(Duration::from_millis(day as u64 + 1));
    assert_eq!(unseen(&engine).await, ["c", "d"]);
    clock.advance(Duration::from_millis(5 * day as u64));
    assert_eq!(unseen(&engine).await, ["c", "d"]);
    assert!(engine.hidden(APP, "u", Eventual).await.unwrap().is_empty());
}
