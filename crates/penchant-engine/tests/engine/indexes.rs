//! Whole indexes: moves that stop halfway, and copies onto indexes with vectors; events count
//! an item's facets as its record is when they arrive, through every kind of catalog write, on a
//! node that caches them.

use std::sync::Arc;

use penchant_engine::catalog::{CATALOG_TABLE, Record, Scope, Write};
use penchant_engine::{Engine, EngineConfig, keys};
use penchant_store::{MemStore, Mutation, Store};
use serde_json::json;

fn record(id: &str, v: i64) -> Record {
    json!({"objectID": id, "v": v}).as_object().unwrap().clone()
}

async fn put(engine: &Engine, index: &str, ids: &[&str], v: i64) {
    let writes = ids
        .iter()
        .map(|id| (index.to_owned(), Write::Put(record(id, v))))
        .collect();
    engine.write_records("APP", writes).await.unwrap();
}

async fn all(engine: &Engine, index: &str) -> Vec<(String, i64)> {
    let page = engine.browse("APP", index, None, 1000, None).await.unwrap();
    page.hits
        .iter()
        .map(|r| {
            (
                r["objectID"].as_str().unwrap().to_owned(),
                r["v"].as_i64().unwrap(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_move_called_again_after_stopping_halfway_keeps_the_destination() {
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let engine = Engine::open(store.clone(), EngineConfig::default())
        .await
        .unwrap();
    put(&engine, "products", &["a", "b"], 1).await;
    put(&engine, "tmp", &["a", "c", "d"], 2).await;
    engine.move_index("APP", "tmp", "products").await.unwrap();
    assert_eq!(
        all(&engine, "products").await,
        [("a".into(), 2), ("c".into(), 2), ("d".into(), 2)]
    );
    assert!(!engine.index_exists("APP", "tmp").await.unwrap());

    // The state a move leaves when it stops after deleting its source's row, before all of
    // its records: some of tmp's records remain, tmp does not exist.
    let orphan = serde_json::to_vec(&record("d", 2)).unwrap();
    store
        .mutate_row(
            CATALOG_TABLE,
            keys::record("APP", "tmp", "d"),
            vec![Mutation::set_now("r", b"o".as_slice(), orphan)],
        )
        .await
        .unwrap();
    // Called again: the destination is as the move left it, the leftovers are gone.
    engine.move_index("APP", "tmp", "products").await.unwrap();
    assert_eq!(all(&engine, "products").await.len(), 3);
    assert_eq!(engine.record("APP", "tmp", "d").await.unwrap(), None);
}

#[tokio::test]
async fn copies_replace_records_and_settings_and_leave_the_source() {
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let engine = Engine::open(store, EngineConfig::default()).await.unwrap();
    put(&engine, "src", &["x", "y"], 1).await;
    let settings = json!({"attributesForFaceting": ["brand"]});
    engine
        .set_index_settings("APP", "src", settings.as_object().unwrap().clone())
        .await
        .unwrap();
    put(&engine, "dst", &["old"], 9).await;
    engine
        .copy_index("APP", "src", "dst", Scope::ALL)
        .await
        .unwrap();
    assert_eq!(
        all(&engine, "dst").await,
        [("x".into(), 1), ("y".into(), 1)]
    );
    assert_eq!(
        engine.index_settings("APP", "dst").await.unwrap().unwrap()["attributesForFaceting"],
        json!(["brand"])
    );
    assert_eq!(all(&engine, "src").await.len(), 2);
    // A copy of an index that does not exist makes an empty one with default settings.
    engine
        .copy_index("APP", "nothing", "dst", Scope::ALL)
        .await
        .unwrap();
    assert!(engine.index_exists("APP", "dst").await.unwrap());
    assert!(all(&engine, "dst").await.is_empty());
    assert!(
        engine
            .index_settings("APP", "dst")
            .await
            .unwrap()
            .unwrap()
            .is_empty()
    );
    // More than a round of records.
    let many: Vec<String> = (0..2500).map(|i| format!("r{i:05}")).collect();
    let refs: Vec<&str> = many.iter().map(String::as_str).collect();
    put(&engine, "big", &refs, 3).await;
    engine
        .copy_index("APP", "big", "big2", Scope::ALL)
        .await
        .unwrap();
    let list = engine.list_indexes("APP").await.unwrap();
    let big2 = list.iter().find(|i| i.name == "big2").unwrap();
    assert_eq!(big2.entries, 2500);
}

/// A click on `item` of `index`, `n` ms ago (distinct events: the same event again is a retry).
fn click(index: &str, item: &str, n: i64) -> penchant_engine::events::Event {
    use penchant_engine::events::{Event, EventType, Target};
    let at = penchant_store::validate::now_micros() / 1000 - n;
    Event {
        index: index.into(),
        target: Target::ObjectIds(vec![item.into()]),
        ..crate::support::event(EventType::Click, "Clicked", "u1", at, &[])
    }
}

/// The user's click counts of facet `v`, summed over the aggregates.
async fn clicked(engine: &Engine) -> std::collections::BTreeMap<String, u64> {
    let counts = engine.aggregates().counts("APP", "u1").await.unwrap();
    let q = penchant_engine::events::qualifier(
        penchant_engine::events::EventType::Click,
        "Clicked",
        "v",
    );
    counts.get(&q).cloned().unwrap_or_default()
}

#[tokio::test]
async fn a_node_alone_on_its_store_counts_facets_as_records_are_after_every_catalog_write() {
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let config = EngineConfig {
        exclusive_store: true,
        ..EngineConfig::default()
    };
    let engine = Engine::open(store, config).await.unwrap();
    let counts = |pairs: &[(&str, u64)]| -> std::collections::BTreeMap<String, u64> {
        pairs.iter().map(|(v, n)| ((*v).to_owned(), *n)).collect()
    };
    put(&engine, "products", &["a"], 1).await;
    engine
        .push_events("APP", &[click("products", "a", 4)])
        .await
        .unwrap();
    // An update: the next click counts the new value.
    put(&engine, "products", &["a"], 2).await;
    engine
        .push_events("APP", &[click("products", "a", 3)])
        .await
        .unwrap();
    assert_eq!(clicked(&engine).await, counts(&[("1", 1), ("2", 1)]));
    // A move onto the index: its records replace the index's.
    put(&engine, "tmp", &["a"], 3).await;
    engine.move_index("APP", "tmp", "products").await.unwrap();
    engine
        .push_events("APP", &[click("products", "a", 2)])
        .await
        .unwrap();
    assert_eq!(
        clicked(&engine).await,
        counts(&[("1", 1), ("2", 1), ("3", 1)])
    );
    // A deletion: the item has no facets any more.
    engine.delete_index("APP", "products").await.unwrap();
    engine
        .push_events("APP", &[click("products", "a", 1)])
        .await
        .unwrap();
    assert_eq!(
        clicked(&engine).await,
        counts(&[("1", 1), ("2", 1), ("3", 1)])
    );
}
