//! An app exported from one node and imported on another (two in-memory stores): the same
//! profiles, keys and strategy, an export of the import equal to the original, and imports
//! that fail leaving nothing.

use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use penchant_engine::tenancy::Acl;
use penchant_engine::{Consistency, Engine, EngineConfig, EngineError};
use penchant_store::{MemStore, Store};

use crate::residency::rows_of;
use crate::support::{self, engine_with_app};

const APP: &str = "SHOP";
const USERS: usize = 20;

async fn export(engine: &Engine) -> Vec<Bytes> {
    let stream = engine.export_app(APP).await.unwrap();
    stream.try_collect().await.unwrap()
}

async fn import(
    engine: &Engine,
    lines: &[Bytes],
) -> Result<penchant_engine::portability::Imported, EngineError> {
    // Lines cut anywhere: the import reads a byte stream, not lines.
    let bytes: Vec<u8> = lines.concat();
    let chunks: Vec<Result<Bytes, std::io::Error>> = bytes
        .chunks(7)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    engine.import_app(APP, futures::stream::iter(chunks)).await
}

async fn fresh() -> (Engine, Arc<dyn Store>) {
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let engine = Engine::open(store.clone(), EngineConfig::default())
        .await
        .unwrap();
    (engine, store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exported_app_imports_with_equal_profiles_keys_and_strategy() {
    let source = engine_with_app(
        Arc::new(MemStore::new()),
        EngineConfig::default(),
        APP,
        support::views_and_purchases(),
    )
    .await;
    let (key, _) = source
        .create_key(APP, [Acl::Search].into(), "front end", 0)
        .await
        .unwrap();
    let now = source.now_ms();
    support::feed(&source, &[APP], 400, 50, |n| {
        crate::residency::event(n, now, USERS)
    })
    .await;
    let exported = export(&source).await;
    assert!(exported.len() > USERS, "{} lines", exported.len());
    assert!(exported[0].starts_with(b"{\"format\":\"penchant-app\""));
    assert!(exported.last().unwrap().starts_with(b"{\"end\":{\"rows\":"));

    let (target, _) = fresh().await;
    let imported = import(&target, &exported).await.unwrap();
    assert_eq!(imported.rows as usize, exported.len() - 2);
    assert_eq!(imported.tables["profiles"], USERS as u64);
    for u in 0..USERS {
        let user = format!("u{u:03}");
        let before = source
            .profile(APP, &user, Consistency::Eventual)
            .await
            .unwrap();
        let after = target
            .profile(APP, &user, Consistency::Eventual)
            .await
            .unwrap();
        assert!(before.is_some(), "{user} has a profile");
        assert_eq!(before, after, "{user}'s profile");
    }
    assert_eq!(
        source.strategy(APP).await.unwrap(),
        target.strategy(APP).await.unwrap()
    );
    let principal = target.authenticate(APP, &key).await.unwrap().unwrap();
    assert_eq!(principal.acl, [Acl::Search].into());
    // Exported again, the same rows (only the moment of the export differs).
    let again = export(&target).await;
    assert_eq!(again[1..], exported[1..]);

    // The app is there now: a second import is refused and changes nothing.
    let e = import(&target, &exported).await.unwrap_err();
    assert!(matches!(e, EngineError::Exists(_)), "{e}");
    assert_eq!(export(&target).await[1..], exported[1..]);
    // An app that does not exist has no export.
    let e = source.export_app("NOPE").await.err().unwrap();
    assert!(matches!(e, EngineError::NotFound(_)), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_export_is_refused_and_leaves_nothing() {
    let source = engine_with_app(
        Arc::new(MemStore::new()),
        EngineConfig::default(),
        APP,
        support::views_and_purchases(),
    )
    .await;
    let now = source.now_ms();
    support::feed(&source, &[APP], 100, 50, |n| {
        crate::residency::event(n, now, USERS)
    })
    .await;
    let exported = export(&source).await;
    let n = exported.len();

    let leases = format!("line {}: `leases` is not a table", n);
    let cases: Vec<(Vec<Bytes>, &str)> = vec![
        // Cut before its end line (a failed download).
        (exported[..n - 1].to_vec(), "no end line"),
        // A row dropped.
        (
            [&exported[..2], &exported[3..]].concat(),
            "its end line counts",
        ),
        // A table that no export holds, after rows were written.
        (
            [
                &exported[..n - 1],
                &[Bytes::from_static(
                    b"{\"table\":\"leases\",\"row\":\"\",\"cells\":[]}\n",
                )],
                &exported[n - 1..],
            ]
            .concat(),
            &leases,
        ),
        (
            vec![Bytes::from_static(b"{\"hello\":1}\n")],
            "line 1: not a Penchant app export",
        ),
    ];
    for (lines, expected) in cases {
        let (target, store) = fresh().await;
        let e = import(&target, &lines).await.unwrap_err();
        assert!(matches!(e, EngineError::Invalid(_)), "{e}");
        assert!(
            e.to_string().contains(expected),
            "{e} (expected: {expected})"
        );
        assert!(target.app(APP).await.unwrap().is_none());
        let left = rows_of(&*store, &penchant_engine::keys::app(APP)).await;
        assert!(left.is_empty(), "rows left by a failed import: {left:?}");
    }
}
