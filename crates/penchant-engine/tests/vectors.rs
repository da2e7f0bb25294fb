//! Vector spaces across nodes and lifetimes: another node's writes reach this node's in-memory
//! matrix within the description cache's TTL, and a space deleted and created again starts
//! empty even when the deletion of its vectors did not finish.

use std::sync::Arc;
use std::time::Duration;

use penchant_engine::clock::Clock;
use penchant_engine::vectors::{
    ITEM_VECTORS_TABLE, Kind, Metric, Query, SearchOptions, SpaceConfig,
};
use penchant_engine::{Engine, EngineConfig};
use penchant_store::{MemStore, Mutation, Store};

const APP: &str = "APP";

fn options(k: usize) -> SearchOptions {
    SearchOptions {
        k,
        ..SearchOptions::default()
    }
}

fn ids(hits: &[penchant_engine::vectors::Hit]) -> Vec<&str> {
    hits.iter().map(|h| h.object_id.as_str()).collect()
}

async fn node(store: &Arc<dyn Store>, clock: &Clock) -> Engine {
    let config = EngineConfig {
        bloom_cache_ttl: Duration::from_secs(1),
        clock: clock.clone(),
        ..EngineConfig::default()
    };
    Engine::open(store.clone(), config).await.unwrap()
}

fn space(dimension: usize) -> SpaceConfig {
    SpaceConfig {
        dimension,
        metric: Metric::Dot,
        index: None,
    }
}

#[tokio::test]
async fn another_nodes_writes_are_searched_within_the_ttl() {
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let clock = Clock::manual(1_800_000_000_000_000);
    let (a, b) = (node(&store, &clock).await, node(&store, &clock).await);
    a.create_space(APP, "emb", space(2)).await.unwrap();
    let items = vec![
        ("x".to_owned(), vec![1.0, 0.0]),
        ("y".to_owned(), vec![0.0, 1.0]),
    ];
    a.put_vectors(APP, "emb", Kind::Item, &items).await.unwrap();
    let query = || Query::Vector(vec![1.0, 0.1]);
    let hits = b
        .search_vectors(APP, "emb", query(), &options(5))
        .await
        .unwrap();
    assert_eq!(ids(&hits), ["x", "y"]);

    // Node a writes a closer item; b's cached description hides it until its TTL passes.
    let closer = vec![("z".to_owned(), vec![5.0, 0.0])];
    a.put_vectors(APP, "emb", Kind::Item, &closer)
        .await
        .unwrap();
    let on_a = a
        .search_vectors(APP, "emb", query(), &options(1))
        .await
        .unwrap();
    assert_eq!(ids(&on_a), ["z"], "the writing node sees its write at once");
    let stale = b
        .search_vectors(APP, "emb", query(), &options(1))
        .await
        .unwrap();
    assert_eq!(
        ids(&stale),
        ["x"],
        "within the TTL, b answers from its matrix"
    );
    clock.advance(Duration::from_millis(1001));
    let fresh = b
        .search_vectors(APP, "emb", query(), &options(1))
        .await
        .unwrap();
    assert_eq!(ids(&fresh), ["z"], "past the TTL, b loads the space again");
}

#[tokio::test]
async fn a_space_created_again_never_shows_the_old_ones_vectors() {
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let clock = Clock::manual(1_800_000_000_000_000);
    let engine = node(&store, &clock).await;
    engine.create_space(APP, "emb", space(2)).await.unwrap();
    let old = vec![("old".to_owned(), vec![1.0, 1.0])];
    engine
        .put_vectors(APP, "emb", Kind::Item, &old)
        .await
        .unwrap();
    engine
        .put_vectors(APP, "emb", Kind::User, &[("u".to_owned(), vec![1.0, 0.0])])
        .await
        .unwrap();
    engine.delete_space(APP, "emb").await.unwrap();
    // An interrupted deletion: the old item's cell is back in the store, as a crash between
    // deleting the description and deleting the vectors would leave it.
    let key = penchant_engine::keys::item_vector(APP, "emb", "old");
    let cell = Mutation::set(
        "v",
        &b"v"[..],
        1_800_000_000_000_000,
        penchant_engine::vectors::encode(&[1.0, 1.0]),
    );
    store
        .mutate_row(ITEM_VECTORS_TABLE, key, vec![cell])
        .await
        .unwrap();

    clock.advance(Duration::from_millis(5));
    engine.create_space(APP, "emb", space(2)).await.unwrap();
    let new = vec![("new".to_owned(), vec![0.5, 0.0])];
    engine
        .put_vectors(APP, "emb", Kind::Item, &new)
        .await
        .unwrap();
    let hits = engine
        .search_vectors(APP, "emb", Query::Vector(vec![1.0, 1.0]), &options(5))
        .await
        .unwrap();
    assert_eq!(ids(&hits), ["new"]);
    assert_eq!(
        engine.vector(APP, "emb", Kind::Item, "old").await.unwrap(),
        None
    );
    assert_eq!(
        engine.vector(APP, "emb", Kind::User, "u").await.unwrap(),
        None
    );
}
