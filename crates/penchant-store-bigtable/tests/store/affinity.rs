//! Row affinity on two emulators standing for two clusters of one replicated instance (two
//! `BigtableStore`s under an `AffineStore`): every operation of a user lands on its home; with
//! the home stopped, eventual reads and writes fail over and strong reads refuse.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use penchant_store::{
    AffineStore, GcRule, Mutation, ReadModifyWriteRule, ReadRows, Row, RowMutation, RowSet, Store,
    StoreError,
};
use penchant_store_bigtable::emulator::Emulator;
use penchant_store_bigtable::{BigtableConfig, BigtableStore, RetryPolicy, with_affinity};

const T: &str = "profiles";

/// `app 0 user` (a profile row) or `app 0 user 0 rest` (a user's other rows).
fn key(user: &str, rest: Option<&str>) -> Bytes {
    match rest {
        None => Bytes::from(format!("APP\0{user}")),
        Some(rest) => Bytes::from(format!("APP\0{user}\0{rest}")),
    }
}

fn set(value: &str) -> Vec<Mutation> {
    vec![Mutation::set(
        "p",
        Bytes::from_static(b"q"),
        1000,
        value.to_owned(),
    )]
}

/// A store on an emulator, giving up quickly when it is gone.
async fn cluster(emulator: &Emulator) -> Arc<dyn Store> {
    let config = BigtableConfig {
        call_timeout_ms: 2_000,
        retry: RetryPolicy {
            max_attempts: 3,
            initial_backoff_ms: 10,
            max_backoff_ms: 50,
        },
        ..emulator.config("")
    };
    Arc::new(BigtableStore::connect(config).await.unwrap())
}

async fn keys(store: &dyn Store, request: ReadRows) -> Result<Vec<Bytes>, StoreError> {
    let rows: Vec<Row> = store.read_all(T, request).await?;
    Ok(rows.into_iter().map(|r| r.key).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_user_is_served_by_its_home_cluster() {
    let mut emulators = [Emulator::start(), Emulator::start()];
    let clusters = [cluster(&emulators[0]).await, cluster(&emulators[1]).await];
    // Replication would give every cluster the table; each emulator is its own instance.
    let families = BTreeMap::from([("p".to_owned(), GcRule::None)]);
    for c in &clusters {
        c.create_table(T, families.clone()).await.unwrap();
    }
    let affine = AffineStore::new(clusters.to_vec(), None);

    // 1,000 users spread over the two clusters within ±10 %.
    let users: Vec<String> = (0..1000).map(|u| format!("user-{u:04}")).collect();
    let mut per_home = [0; 2];
    for u in &users {
        let home = affine.home(&key(u, None));
        assert_eq!(affine.home(&key(u, Some("events\x00123"))), home);
        per_home[home] += 1;
    }
    assert!(
        per_home.iter().all(|n| (450..=550).contains(n)),
        "{per_home:?}"
    );

    // Every kind of write, for 40 users.
    let some = &users[..40];
    for u in some {
        affine
            .mutate_row(T, key(u, None), set("profile"))
            .await
            .unwrap();
        affine
            .check_and_mutate_row(T, key(u, Some("c")), None, vec![], set("checked"))
            .await
            .unwrap();
        affine
            .read_modify_write_row(
                T,
                key(u, Some("n")),
                vec![ReadModifyWriteRule::increment(
                    "p",
                    Bytes::from_static(b"q"),
                    1,
                )],
            )
            .await
            .unwrap();
    }
    let batch = some
        .iter()
        .map(|u| RowMutation::new(key(u, Some("e")), set("event")))
        .collect();
    let statuses = affine.mutate_rows(T, batch).await.unwrap();
    assert!(statuses.iter().all(Result::is_ok));

    // Each cluster, read directly, holds exactly the rows of the users it is home to.
    for (i, c) in clusters.iter().enumerate() {
        let mut want: Vec<Bytes> = some
            .iter()
            .filter(|u| affine.home(&key(u, None)) == i)
            .flat_map(|u| {
                [None, Some("c"), Some("e"), Some("n")]
                    .into_iter()
                    .map(|rest| key(u, rest))
            })
            .collect();
        want.sort();
        assert!(!want.is_empty());
        assert_eq!(keys(&**c, ReadRows::default()).await.unwrap(), want);
    }
    // Through the affinity, each user reads its own rows, eventual or strong; a read of keys
    // of both homes is split and merged.
    for u in some {
        let user = ReadRows::new(RowSet::prefix(key(u, None)));
        assert_eq!(keys(&affine, user.clone()).await.unwrap().len(), 4);
        assert_eq!(keys(&affine, user.strong()).await.unwrap().len(), 4);
    }
    let profiles = ReadRows::new(RowSet::keys(some.iter().map(|u| key(u, None)))).strong();
    assert_eq!(keys(&affine, profiles).await.unwrap().len(), 40);

    // Cluster 0 goes away.
    let (gone, other) = (0, 1);
    emulators[gone].stop();
    let homed = |home: usize| {
        users
            .iter()
            .find(|u| affine.home(&key(u, None)) == home)
            .unwrap()
    };
    let (u, v) = (homed(gone), homed(other));

    // Strong reads of its users refuse, never answering from the other cluster.
    let strong = ReadRows::new(RowSet::keys([key(u, None)])).strong();
    match keys(&affine, strong).await {
        Err(StoreError::StrongReadUnavailable(_)) => {}
        other => panic!("a strong read from a stopped home: {other:?}"),
    }
    // Eventual reads are served by the other cluster, which has not got their rows (no
    // replication between emulators): what a user may see during a failover, for a moment.
    let user = ReadRows::new(RowSet::prefix(key(u, None)));
    assert_eq!(
        keys(&affine, user.clone()).await.unwrap(),
        Vec::<Bytes>::new()
    );
    // Writes fail over too, and land on the other cluster.
    affine
        .mutate_row(T, key(u, None), set("during"))
        .await
        .unwrap();
    let statuses = affine
        .mutate_rows(T, vec![RowMutation::new(key(u, Some("e2")), set("event"))])
        .await
        .unwrap();
    assert!(statuses[0].is_ok(), "{statuses:?}");
    affine
        .read_modify_write_row(
            T,
            key(u, Some("n2")),
            vec![ReadModifyWriteRule::increment(
                "p",
                Bytes::from_static(b"q"),
                1,
            )],
        )
        .await
        .unwrap();
    affine
        .check_and_mutate_row(T, key(u, Some("c2")), None, vec![], set("c"))
        .await
        .unwrap();
    let on_other = keys(
        &*clusters[other],
        ReadRows::new(RowSet::prefix(key(u, None))),
    )
    .await
    .unwrap();
    assert_eq!(
        on_other,
        [
            key(u, None),
            key(u, Some("c2")),
            key(u, Some("e2")),
            key(u, Some("n2"))
        ]
    );
    assert_eq!(keys(&affine, user).await.unwrap(), on_other);
    // The other cluster's own users are not affected, strong reads included.
    let strong = ReadRows::new(RowSet::prefix(key(v, None))).strong();
    assert_eq!(keys(&affine, strong).await.unwrap().len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusters_in_the_config_make_an_affine_store() {
    let emulator = Emulator::start();
    let plain = BigtableStore::connect(emulator.config("")).await.unwrap();
    assert!(format!("{:?}", with_affinity(plain)).starts_with("BigtableStore"));
    let config = BigtableConfig {
        clusters: vec!["serving-a".into(), "serving-b".into()],
        batch_app_profile: "batch".into(),
        ..emulator.config("")
    };
    let store = with_affinity(BigtableStore::connect(config).await.unwrap());
    let debug = format!("{store:?}");
    assert!(debug.starts_with("AffineStore"), "{debug}");
    for profile in ["serving-a", "serving-b", "batch"] {
        assert!(
            debug.contains(&format!("app_profile: \"{profile}\"")),
            "{debug}"
        );
    }
    // The emulator ignores app profiles: every call works through either cluster view.
    store
        .create_table(T, [("p".to_owned(), GcRule::None)].into())
        .await
        .unwrap();
    for u in ["a", "b", "c", "d"] {
        store.mutate_row(T, key(u, None), set(u)).await.unwrap();
    }
    let rows = store
        .read_all(T, ReadRows::new(RowSet::all()).strong())
        .await
        .unwrap();
    assert_eq!(rows.len(), 4);
}
