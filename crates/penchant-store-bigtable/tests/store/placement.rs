//! Data residency on two emulators standing for two regions: each holds only its apps' rows.

use std::sync::Arc;

use bytes::Bytes;
use penchant_store::{GcRule, Mutation, PlacedStore, ReadRows, Route, RowMutation, RowSet, Store};
use penchant_store_bigtable::BigtableStore;
use penchant_store_bigtable::emulator::Emulator;

fn key(app: &str, user: &str) -> Bytes {
    Bytes::from(format!("{app}\0{user}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_region_holds_only_its_apps_rows() {
    let (us_emulator, eu_emulator) = (Emulator::start(), Emulator::start());
    let us: Arc<dyn Store> = Arc::new(
        BigtableStore::connect(us_emulator.config(""))
            .await
            .unwrap(),
    );
    let eu: Arc<dyn Store> = Arc::new(
        BigtableStore::connect(eu_emulator.config(""))
            .await
            .unwrap(),
    );
    let targets = [("us".to_owned(), us.clone()), ("eu".to_owned(), eu.clone())];
    let placed = PlacedStore::new(targets.into_iter().collect(), "us", []);
    placed
        .set_routes([Route::at(Bytes::from_static(b"APPEU"), "eu")])
        .unwrap();
    placed
        .create_table("events", [("e".to_owned(), GcRule::None)].into())
        .await
        .unwrap();
    let set = |k: Bytes| {
        RowMutation::new(
            k,
            vec![Mutation::set(
                "e",
                Bytes::from_static(b"q"),
                0,
                Bytes::from_static(b"1"),
            )],
        )
    };
    let statuses = placed
        .mutate_rows(
            "events",
            vec![
                set(key("APPEU", "u1")),
                set(key("APPUS", "u1")),
                set(key("APPEU", "u2")),
            ],
        )
        .await
        .unwrap();
    assert!(statuses.iter().all(Result::is_ok));
    placed
        .mutate_row(
            "events",
            key("APPUS", "u2"),
            vec![Mutation::set(
                "e",
                Bytes::from_static(b"q"),
                0,
                Bytes::from_static(b"2"),
            )],
        )
        .await
        .unwrap();
    let keys = |rows: Vec<penchant_store::Row>| rows.into_iter().map(|r| r.key).collect::<Vec<_>>();
    // Direct reads of each emulator.
    assert_eq!(
        keys(eu.read_all("events", ReadRows::default()).await.unwrap()),
        vec![key("APPEU", "u1"), key("APPEU", "u2")]
    );
    assert_eq!(
        keys(us.read_all("events", ReadRows::default()).await.unwrap()),
        vec![key("APPUS", "u1"), key("APPUS", "u2")]
    );
    // Through the placement, one table.
    assert_eq!(
        placed
            .read_all("events", ReadRows::default())
            .await
            .unwrap()
            .len(),
        4
    );
    let eu_only = ReadRows::new(RowSet::prefix(Bytes::from_static(b"APPEU\0")));
    assert_eq!(
        keys(placed.read_all("events", eu_only).await.unwrap()).len(),
        2
    );
}
