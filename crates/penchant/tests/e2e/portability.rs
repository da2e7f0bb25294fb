//! Backups and moving apps, as an operator does them with the `penchant` binary: a backup
//! taken while events stream restores to the profiles of its moment; an app exported from the
//! embedded store, imported on a Bigtable emulator and back serves the same profiles.

use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};

use crate::common::{self, admin_command, penchant, post_ok, signal, wait};

const APP: &str = "SHOP";
const USERS: usize = 12;

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// `penchant serve` on `data_dir`, with `backups` as its backup folder.
fn serve(data_dir: &Path, backups: &Path) -> (Child, String) {
    common::serve(|cmd| {
        cmd.arg("--data-dir")
            .arg(data_dir)
            .env("PENCHANT_AUTH__ADMIN_KEY", "root")
            .env("PENCHANT_STORE__BACKUP_DIR", backups)
            .stderr(Stdio::null());
    })
}

/// The app, a catalog of six phones of three brands, a strategy, and views and purchases of
/// `USERS` users.
async fn shop(url: &str) {
    post_ok(url, "/1/apps", "", json!({"appID": APP})).await;
    let records: Vec<Value> = (0..6)
        .map(|i| {
            let brand = ["apple", "samsung", "fairphone"][i % 3];
            json!({"objectID": format!("p{i}"), "brand": brand})
        })
        .collect();
    let batch: Vec<Value> = records
        .iter()
        .map(|r| json!({"action": "addObject", "body": r}))
        .collect();
    post_ok(
        url,
        "/1/indexes/phones/batch",
        APP,
        json!({"requests": batch}),
    )
    .await;
    let strategy = json!({
        "eventsScoring": [
            {"eventName": "Viewed", "eventType": "view", "score": 10},
            {"eventName": "Bought", "eventType": "conversion", "score": 50}
        ],
        "facetsScoring": [{"facetName": "brand", "score": 100}],
        "personalizationImpact": 50,
    });
    post_ok(url, "/1/strategies/personalization", APP, strategy).await;
    let now = now_ms();
    let events: Vec<Value> = (0..USERS * 5)
        .map(|n| {
            let (kind, name) = if n % 5 == 0 {
                ("conversion", "Bought")
            } else {
                ("view", "Viewed")
            };
            json!({"eventType": kind, "eventName": name, "index": "phones",
                "userToken": format!("u{}", n % USERS), "objectIDs": [format!("p{}", (n * 7) % 6)],
                "timestamp": now - 60_000 + n as i64})
        })
        .collect();
    post_ok(url, "/1/events", APP, json!({"events": events})).await;
}

/// Every user's profile, as the server at `url` answers it with `key`.
async fn profiles(url: &str, key: &str) -> Vec<Value> {
    let http = reqwest::Client::new();
    let mut out = Vec::new();
    for u in 0..USERS {
        let resp = http
            .get(format!("{url}/1/profiles/personalization/u{u}"))
            .header("X-Algolia-Application-Id", APP)
            .header("X-Algolia-API-Key", key)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "u{u}");
        out.push(resp.json().await.unwrap());
    }
    out
}

#[tokio::test]
async fn a_backup_taken_while_events_stream_restores_to_its_moment() {
    let dir = tempfile::tempdir().unwrap();
    let (live, backups) = (dir.path().join("live"), dir.path().join("backups"));
    let (child, url) = serve(&live, &backups);
    shop(&url).await;
    let before = profiles(&url, "root").await;
    assert!(before.iter().all(|p| p["scores"]["brand"].is_object()));

    // Other users' events stream while the backup is taken.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (url, stop) = (url.clone(), stop.clone());
        tokio::spawn(async move {
            let mut sent = 0;
            while !stop.load(Ordering::SeqCst) {
                let event = json!({"eventType": "view", "eventName": "Viewed",
                    "index": "phones", "userToken": format!("w{}", sent % 50),
                    "objectIDs": ["p1"], "timestamp": now_ms()});
                post_ok(&url, "/1/events", APP, json!({"events": [event]})).await;
                sent += 1;
            }
            sent
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let (ok, backup, err) = tokio::task::spawn_blocking({
        let url = url.clone();
        move || admin_command(&url, &["backup", "create"])
    })
    .await
    .unwrap();
    assert!(ok, "{err}");
    stop.store(true, Ordering::SeqCst);
    assert!(writer.await.unwrap() > 0);
    let path = backup["path"].as_str().unwrap().to_owned();
    assert!(backup["name"].as_str().unwrap().starts_with("penchant-"));
    assert_eq!(backup["targets"], json!(["default"]));
    assert!(backup["sizeBytes"].as_u64().unwrap() > 0, "{backup}");
    let (ok, list, err) = admin_command(&url, &["backup", "list"]);
    assert!(ok, "{err}");
    assert_eq!(list["backups"][0]["name"], backup["name"]);

    // After the backup, u0 buys samsung phones: its profile moves on.
    let bought: Vec<Value> = (0..5)
        .map(|i| {
            json!({"eventType": "conversion", "eventName": "Bought", "index": "phones",
            "userToken": "u0", "objectIDs": ["p1"], "timestamp": now_ms() + i})
        })
        .collect();
    post_ok(&url, "/1/events", APP, json!({"events": bought})).await;
    let moved = profiles(&url, "root").await;
    assert_ne!(moved[0]["scores"], before[0]["scores"]);
    signal(&child, "-TERM");
    assert!(wait(child).0.success());

    // A restore never overwrites a store.
    let restore = |data_dir: &Path| {
        let out = penchant()
            .args(["backup", "restore", &path, "--data-dir"])
            .arg(data_dir)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.success(), stderr)
    };
    let (ok, err) = restore(&live);
    assert!(!ok && err.contains("is not empty"), "{err}");
    let restored = dir.path().join("restored");
    let (ok, err) = restore(&restored);
    assert!(ok, "{err}");

    let (child, url) = serve(&restored, &backups);
    let after = profiles(&url, "root").await;
    assert_eq!(after, before, "the profiles of the backup's moment");
    signal(&child, "-TERM");
    assert!(wait(child).0.success());
}

/// `penchant apps export` from the server at `url` into `file`.
fn export(url: &str, file: &Path) {
    let (ok, out, err) = admin_command(
        url,
        &["apps", "export", APP, "--output", file.to_str().unwrap()],
    );
    assert!(ok, "{err}");
    assert!(out["lines"].as_u64().unwrap() > USERS as u64, "{out}");
}

/// An export's lines after its first (which says when it was taken).
fn rows_of(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap();
    text.lines().skip(1).map(str::to_owned).collect()
}

#[tokio::test]
async fn an_app_moves_from_the_embedded_store_to_bigtable_and_back_with_its_profiles() {
    use penchant_store_bigtable::emulator::Emulator;

    let dir = tempfile::tempdir().unwrap();
    let backups = dir.path().join("backups");
    let (embedded, url) = serve(&dir.path().join("a"), &backups);
    shop(&url).await;
    let created: Value = {
        let http = reqwest::Client::new();
        let body = json!({"acl": ["search", "recommendation", "settings"], "description": "front"});
        let resp = common::request(
            &http,
            reqwest::Method::POST,
            &format!("{url}/1/keys"),
            (APP, "root"),
            &body,
        )
        .send()
        .await
        .unwrap();
        resp.json().await.unwrap()
    };
    let key = created["key"].as_str().unwrap().to_owned();
    let before = profiles(&url, &key).await;
    let first = dir.path().join("first.ndjson");
    export(&url, &first);
    signal(&embedded, "-TERM");
    assert!(wait(embedded).0.success());

    // On a Bigtable emulator.
    let emulator = Emulator::start();
    let (bigtable, bt_url) = common::serve(|cmd| {
        cmd.arg("--data-dir")
            .arg(dir.path().join("unused"))
            .env("PENCHANT_AUTH__ADMIN_KEY", "root")
            .env("PENCHANT_STORE__BACKEND", "bigtable")
            .env("PENCHANT_BIGTABLE__TABLE_PREFIX", "node_")
            .env("BIGTABLE_EMULATOR_HOST", emulator.addr())
            .stderr(Stdio::null());
    });
    let (ok, imported, err) = admin_command(&bt_url, &["apps", "import", first.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert_eq!(imported["appID"], APP);
    assert_eq!(imported["tables"]["profiles"], USERS);
    // The key made on the embedded node opens the app here: keys moved (as hashes).
    assert_eq!(profiles(&bt_url, &key).await, before);
    // Imported twice: refused, with what to do.
    let (ok, _, err) = admin_command(&bt_url, &["apps", "import", first.to_str().unwrap()]);
    assert!(!ok && err.contains("exists on this node"), "{err}");
    let second = dir.path().join("second.ndjson");
    export(&bt_url, &second);
    assert_eq!(
        rows_of(&second),
        rows_of(&first),
        "the same rows on Bigtable"
    );
    // Bigtable's backups are Bigtable's.
    let (ok, _, err) = admin_command(&bt_url, &["backup", "create"]);
    assert!(
        !ok && err.contains("gcloud bigtable backups create"),
        "{err}"
    );
    signal(&bigtable, "-TERM");
    assert!(wait(bigtable).0.success());

    // And back on another embedded node.
    let (embedded, url) = serve(&dir.path().join("c"), &backups);
    let (ok, _, err) = admin_command(&url, &["apps", "import", second.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert_eq!(profiles(&url, &key).await, before);
    let third = dir.path().join("third.ndjson");
    export(&url, &third);
    assert_eq!(rows_of(&third), rows_of(&first));
    signal(&embedded, "-TERM");
    assert!(wait(embedded).0.success());
}
