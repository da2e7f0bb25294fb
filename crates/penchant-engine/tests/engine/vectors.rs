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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_space_is_searched_through_its_graph_with_the_exact_scores() {
    use penchant_engine::vectors::{IndexSettings, SearchPath};

    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let config = EngineConfig {
        vector_index: IndexSettings {
            min_rows: 200,
            ef: 40,
        },
        ..EngineConfig::default()
    };
    let engine = Engine::open(store, config).await.unwrap();
    engine.create_space(APP, "emb", space(3)).await.unwrap();
    // 400 points on a spiral: each one's nearest neighbours are its neighbours on the curve.
    let items: Vec<(String, Vec<f32>)> = (0..400)
        .map(|i| {
            let t = i as f32 * 0.05;
            (format!("i{i}"), vec![t.cos(), t.sin(), 1.0 + t * 0.1])
        })
        .collect();
    engine
        .put_vectors(APP, "emb", Kind::Item, &items)
        .await
        .unwrap();
    let (_, serving) = engine.space_serving(APP, "emb").await.unwrap();
    assert!(!serving.loaded, "nothing is loaded before a search");

    let search = |exact: bool, exclude: Vec<String>| {
        let engine = &engine;
        async move {
            let options = SearchOptions {
                k: 10,
                exclude,
                exact,
                ..SearchOptions::default()
            };
            engine
                .search_vectors(APP, "emb", Query::Item("i200".into()), &options)
                .await
                .unwrap()
        }
    };
    let exact = search(true, Vec::new()).await;
    // The first load starts the graph's build; searches scan until it is ready.
    let mut waited = 0;
    loop {
        let (_, serving) = engine.space_serving(APP, "emb").await.unwrap();
        assert!(serving.loaded);
        assert_eq!(serving.items, 400);
        if serving.search == SearchPath::Hnsw {
            break;
        }
        assert_eq!(serving.search, SearchPath::Building);
        waited += 1;
        assert!(waited < 3000, "the graph of 400 rows was not built in 30 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let approximate = search(false, Vec::new()).await;
    assert_eq!(approximate, exact, "same hits, same scores");
    assert!(
        !ids(&approximate).contains(&"i200"),
        "the item itself is not a hit"
    );

    let excluded: Vec<String> = ids(&exact)[..3].iter().map(|s| s.to_string()).collect();
    let without = search(false, excluded.clone()).await;
    assert_eq!(without.len(), 10);
    assert!(
        ids(&without)
            .iter()
            .all(|id| !excluded.iter().any(|e| e == id))
    );
    assert_eq!(ids(&without)[..7], ids(&exact)[3..]);
}
