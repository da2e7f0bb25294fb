//! The two guarantees a day's aggregate folds rely on hold on an emulator: value regexes match
//! whole values, a check-and-mutate is atomic against concurrent writes to its row. (The
//! emulator was seen returning some cells of such a row twice, which folds counted twice: issue
//! 15; the engine's scenario runs on an emulator in `penchant-engine/tests/engine/bigtable.rs`.)

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use penchant_store::Store;
use penchant_store_bigtable::BigtableStore;
use penchant_store_bigtable::emulator::Emulator;

#[tokio::test]
async fn value_regexes_match_whole_values_on_bigtable() {
    use penchant_store::{GcRule, Mutation, RowFilter};
    let emulator = Emulator::start();
    let store = BigtableStore::connect(emulator.config("")).await.unwrap();
    let families = BTreeMap::from([("f".to_owned(), GcRule::MaxVersions(1))]);
    store.create_table("t", families).await.unwrap();
    let row = Bytes::from_static(b"r");
    store
        .mutate_row("t", row.clone(), vec![Mutation::set_now("f", "v", "15")])
        .await
        .unwrap();
    let version = |v: &str| RowFilter::column("f", "v").and(RowFilter::ValueRegex(v.into()));
    for (pattern, matches) in [("15", true), ("1", false), ("5", false), ("1.", true)] {
        let matched = store
            .check_and_mutate_row(
                "t",
                row.clone(),
                Some(version(pattern)),
                vec![],
                vec![Mutation::set_now("f", "other", "x")],
            )
            .await
            .unwrap();
        assert_eq!(matched, matches, "{pattern}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_and_mutate_is_atomic_against_concurrent_writes_on_bigtable() {
    use penchant_store::{GcRule, Mutation, RowFilter};
    let emulator = Emulator::start();
    let store = Arc::new(BigtableStore::connect(emulator.config("")).await.unwrap());
    let families = BTreeMap::from([(
        "a".to_owned(),
        GcRule::MaxAge(std::time::Duration::from_secs(90 * 86_400)),
    )]);
    store.create_table("t", families).await.unwrap();
    let row = Bytes::from_static(b"r");
    let ts = penchant_store::validate::now_micros() / 1000 * 1000;
    // Writers add delta cells; folders move them into a sum under a version, as a fold does.
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..4u64 {
        let (store, row) = (store.clone(), row.clone());
        tasks.spawn(async move {
            for i in 0..300u64 {
                let q = format!("d{w}-{i}");
                store
                    .mutate_row("t", row.clone(), vec![Mutation::set("a", q, ts, "1")])
                    .await
                    .unwrap();
            }
        });
    }
    for _ in 0..4 {
        let (store, row) = (store.clone(), row.clone());
        tasks.spawn(async move {
            for _ in 0..150 {
                let read = store.read_row("t", row.clone(), None).await.unwrap();
                let Some(read) = read else { continue };
                let cell = |q: &[u8]| {
                    read.latest("a", q)
                        .map(|c| String::from_utf8_lossy(&c.value).to_string())
                };
                let v: u64 = cell(b"v").and_then(|v| v.parse().ok()).unwrap_or(0);
                let sum: u64 = cell(b"sum").and_then(|v| v.parse().ok()).unwrap_or(0);
                let deltas: Vec<Bytes> = read
                    .cells
                    .iter()
                    .filter(|c| c.qualifier.starts_with(b"d"))
                    .map(|c| c.qualifier.clone())
                    .collect();
                let mut muts: Vec<Mutation> = deltas
                    .iter()
                    .map(|q| Mutation::delete_column("a", q.clone()))
                    .collect();
                muts.push(Mutation::delete_column("a", "sum"));
                muts.push(Mutation::set(
                    "a",
                    "sum",
                    ts,
                    (sum + deltas.len() as u64).to_string(),
                ));
                muts.push(Mutation::delete_column("a", "v"));
                muts.push(Mutation::set("a", "v", ts, (v + 1).to_string()));
                let column = RowFilter::column("a", "v");
                if v == 0 {
                    store
                        .check_and_mutate_row("t", row.clone(), Some(column), vec![], muts)
                        .await
                        .unwrap();
                } else {
                    let same = column.and(RowFilter::ValueRegex(v.to_string()));
                    store
                        .check_and_mutate_row("t", row.clone(), Some(same), muts, vec![])
                        .await
                        .unwrap();
                }
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    let read = store
        .read_row("t", row.clone(), None)
        .await
        .unwrap()
        .unwrap();
    let sum: u64 = read
        .latest("a", b"sum")
        .map_or(0, |c| String::from_utf8_lossy(&c.value).parse().unwrap());
    let deltas = read
        .cells
        .iter()
        .filter(|c| c.qualifier.starts_with(b"d"))
        .count() as u64;
    assert_eq!(sum + deltas, 1200, "sum {sum} + {deltas} deltas left");
}
