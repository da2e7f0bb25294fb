//! Residency over HTTP: targets, apps created in a target, an app moved, a user placed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::common::{ROOT, Server, assert_error, shop};
use penchant_engine::tenancy::TenancyConfig;
use penchant_engine::{Engine, EngineConfig};
use penchant_server::{AppState, router, serve};
use penchant_store::{MemStore, PlacedStore, ReadRows, RowSet, Store, unit_range};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// A server over two in-memory targets, `us` (the default) and `eu`.
async fn placed_server() -> (Server, Arc<MemStore>, Arc<MemStore>) {
    let (us, eu) = (Arc::new(MemStore::new()), Arc::new(MemStore::new()));
    let targets: BTreeMap<String, Arc<dyn Store>> = BTreeMap::from([
        ("us".to_owned(), us.clone() as Arc<dyn Store>),
        ("eu".to_owned(), eu.clone() as Arc<dyn Store>),
    ]);
    let placed = PlacedStore::new(targets, "us", penchant_engine::residency::pinned_tables());
    let config = EngineConfig {
        tenancy: TenancyConfig {
            admin_key: Some(ROOT.into()),
            cache_ttl: Duration::ZERO,
        },
        placement: Some(placed.clone()),
        placement_refresh: Duration::from_millis(50),
        lease_ttl: Duration::from_secs(2),
        ..EngineConfig::default()
    };
    let store: Arc<dyn Store> = Arc::new(placed);
    let engine = Engine::open(store.clone(), config).await.unwrap();
    engine.start_background(None);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(serve(
        listener,
        router(AppState::new(engine.clone(), "memory")),
        std::future::pending(),
    ));
    let server = Server {
        base,
        http: reqwest::Client::new(),
        store,
        engine,
    };
    (server, us, eu)
}

/// A unit's rows in a table (in `events`, its users' events: not the ingestion intents, which
/// are forgotten in the background).
async fn rows_in(store: &MemStore, table: &str, unit: &[u8]) -> usize {
    let app = std::str::from_utf8(unit).unwrap();
    store
        .read_all(table, ReadRows::new(RowSet::range(unit_range(unit))))
        .await
        .unwrap()
        .iter()
        .filter(|r| table != "events" || penchant_engine::keys::user_of(app, &r.key).is_some())
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apps_are_created_in_a_target_and_moved() {
    let (s, us, eu) = placed_server().await;
    let root = Some(("", ROOT));
    let targets = s.ok(Method::GET, "/1/placement/targets", root, None).await;
    assert_eq!(targets, json!({"targets": ["us", "eu"], "default": "us"}));

    // Created in eu: its rows are there from the first.
    let (status, created) = s
        .call(
            Method::POST,
            "/1/apps",
            root,
            Some(json!({"appID": "EUAPP", "placement": "eu"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(rows_in(&us, "apps", b"EUAPP").await, 0);
    assert_eq!(rows_in(&eu, "apps", b"EUAPP").await, 1);
    let (_, placement) = s
        .call(Method::GET, "/1/apps/EUAPP/placement", root, None)
        .await;
    assert_eq!(
        placement,
        json!({"target": "eu", "alsoWritten": null, "move": null})
    );
    assert_error(
        s.call(
            Method::POST,
            "/1/apps",
            root,
            Some(json!({"appID": "X", "placement": "mars"})),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "unknown placement target `mars`; the targets are: us, eu",
    );
    assert_error(
        s.call(
            Method::POST,
            "/1/apps",
            root,
            Some(json!({"placement": "eu"})),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "placement needs the app's appID",
    );

    // An app in us, with events, moved to eu.
    let admin = s.app("SHOP").await;
    let a = Some(("SHOP", admin.as_str()));
    let events: Vec<Value> = (0..50)
        .map(|i| {
            json!({"eventType": "view", "eventName": "Viewed", "index": "items",
                        "userToken": format!("u{}", i % 5), "filters": ["brand:Apple"]})
        })
        .collect();
    s.ok(
        Method::POST,
        "/1/events",
        a,
        Some(json!({ "events": events })),
    )
    .await;
    assert_eq!(rows_in(&us, "events", b"SHOP").await, 50);
    let path = "/1/apps/SHOP/placement";
    assert_eq!(
        s.call(Method::POST, path, a, Some(json!({"target": "eu"})))
            .await
            .0,
        StatusCode::UNAUTHORIZED,
        "the global admin key only"
    );
    let (status, started) = s
        .call(Method::POST, path, root, Some(json!({"target": "eu"})))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{started}");
    assert_eq!(
        (&started["from"], &started["to"], &started["phase"]),
        (&json!("us"), &json!("eu"), &json!("dualWrite"))
    );
    assert_error(
        s.call(Method::POST, path, root, Some(json!({"target": "eu"})))
            .await,
        StatusCode::CONFLICT,
        "running",
    );
    let mut placement = Value::Null;
    for _ in 0..600 {
        placement = s.call(Method::GET, path, root, None).await.1;
        if placement["move"]["state"] != "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(placement["move"]["state"], "done", "{placement}");
    assert_eq!(placement["target"], "eu");
    assert_eq!(rows_in(&us, "events", b"SHOP").await, 0);
    assert_eq!(rows_in(&eu, "events", b"SHOP").await, 50);
    // The app still answers, from eu.
    let (status, _) = s.call(Method::GET, "/1/keys", a, None).await;
    assert_eq!(status, StatusCode::OK);

    // A user without rows placed on its own; one with rows must be moved.
    let user = "/1/apps/SHOP/placement/users/newcomer";
    s.ok(Method::PUT, user, root, Some(json!({"target": "us"})))
        .await;
    let (_, users) = s
        .call(Method::GET, "/1/apps/SHOP/placement/users", root, None)
        .await;
    assert_eq!(
        users,
        json!({"users": [{"userToken": "newcomer", "target": "us", "alsoWritten": null}]})
    );
    assert_error(
        s.call(
            Method::PUT,
            "/1/apps/SHOP/placement/users/u1",
            root,
            Some(json!({"target": "us"})),
        )
        .await,
        StatusCode::CONFLICT,
        "move it instead",
    );
    assert_error(
        s.call(Method::GET, "/1/apps/NOPE/placement", root, None)
            .await,
        StatusCode::NOT_FOUND,
        "app `NOPE` does not exist",
    );
}

#[tokio::test]
async fn one_store_moves_nothing() {
    let (s, admin) = shop().await;
    let root = Some(("", ROOT));
    // An app's placement is also shown to its own `settings` keys (the dashboard's jobs page).
    let settings = s.key("SHOP", &admin, &["settings"]).await;
    let search = s.key("SHOP", &admin, &["search"]).await;
    let path = "/1/apps/SHOP/placement";
    let shown = s
        .ok(Method::GET, path, Some(("SHOP", settings.as_str())), None)
        .await;
    assert_eq!(
        shown,
        json!({"target": "default", "alsoWritten": null, "move": null})
    );
    let (status, _) = s
        .call(Method::GET, path, Some(("SHOP", search.as_str())), None)
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = s
        .call(
            Method::POST,
            path,
            Some(("SHOP", admin.as_str())),
            Some(json!({"target": "default"})),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "moves take the global admin key"
    );
    let (_, targets) = s
        .call(Method::GET, "/1/placement/targets", root, None)
        .await;
    assert_eq!(
        targets,
        json!({"targets": ["default"], "default": "default"})
    );
    assert_error(
        s.call(
            Method::POST,
            "/1/apps/SHOP/placement",
            root,
            Some(json!({"target": "default"})),
        )
        .await,
        StatusCode::CONFLICT,
        "placement needs targets",
    );
}
