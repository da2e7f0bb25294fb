//! The `penchant` binary as a user runs it: serve, health, signals, configuration errors.

use std::process::{Child, Stdio};

use crate::common::{self, admin_command, penchant, post_ok, signal, wait};

/// Start `penchant serve` on a free port; returns the child and its base URL.
fn serve(data_dir: &std::path::Path, extra: &[&str]) -> (Child, String) {
    common::serve(|cmd| {
        cmd.arg("--data-dir")
            .arg(data_dir)
            .args(extra)
            .stderr(Stdio::piped());
    })
}

async fn health(url: &str) -> serde_json::Value {
    let resp = reqwest::get(format!("{url}/health")).await.unwrap();
    assert_eq!(resp.status(), 200);
    resp.json().await.unwrap()
}

#[tokio::test]
async fn serve_answers_health_and_stops_cleanly_on_sigterm_and_ctrl_c() {
    let dir = tempfile::tempdir().unwrap();
    let (child, url) = serve(dir.path(), &[]);
    let body = health(&url).await;
    assert_eq!(body["status"], "ok");
    assert_eq!(body["store"], "embedded");
    assert!(
        dir.path().join("CURRENT").exists(),
        "the store lives in --data-dir"
    );
    // The health check's read of the store shows in the metrics, with the route's.
    let metrics = reqwest::get(format!("{url}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for series in [
        r#"penchant_store_operation_duration_seconds_count{backend="embedded",workload="serving",op="read_rows",table="#,
        r#"penchant_http_requests_total{method="GET",route="/health",status="200"} 1"#,
        // RocksDB's own gauges, read at the scrape.
        "penchant_rocksdb_memtable_bytes ",
        "penchant_rocksdb_block_cache_bytes ",
        "penchant_rocksdb_pending_compaction_bytes ",
    ] {
        assert!(
            metrics.contains(series),
            "{series} missing:
{metrics}"
        );
    }
    signal(&child, "-TERM");
    let (status, stderr) = wait(child);
    assert!(
        status.success(),
        "exit 0 after SIGTERM: {status:?}\n{stderr}"
    );
    assert!(stderr.contains("store flushed"), "{stderr}");

    // The store was released: a new server opens the same folder. Ctrl-C stops it too.
    let (child, url) = serve(dir.path(), &["--log-format", "json"]);
    health(&url).await;
    signal(&child, "-INT");
    let (status, stderr) = wait(child);
    assert!(
        status.success(),
        "exit 0 after SIGINT: {status:?}\n{stderr}"
    );
    let first = stderr.lines().next().expect("a log line");
    let line: serde_json::Value = serde_json::from_str(first).expect("JSON logs");
    assert!(line["fields"]["message"].is_string(), "{line}");
}

/// Credentials never reach the log, at any level: not in a query string (search-insights puts
/// them there), not in a path (`/1/keys/{key}`). Each request's log lines carry its request id.
#[tokio::test]
async fn credentials_stay_out_of_the_logs_and_request_ids_go_in() {
    let dir = tempfile::tempdir().unwrap();
    let (child, url) = common::serve(|cmd| {
        cmd.arg("--data-dir")
            .arg(dir.path())
            .env("PENCHANT_AUTH__ADMIN_KEY", "root-secret-key")
            .env("RUST_LOG", "trace")
            .stderr(Stdio::piped());
    });
    let http = reqwest::Client::new();
    let created: serde_json::Value = http
        .post(format!("{url}/1/apps"))
        .header("X-Algolia-API-Key", "root-secret-key")
        .json(&serde_json::json!({"appID": "LOGS"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let admin = created["adminAPIKey"].as_str().unwrap().to_owned();
    // The key in the query string, in a path, and in headers; a request id of ours.
    let resp = http
        .get(format!(
            "{url}/1/keys/{admin}?X-Algolia-Application-Id=LOGS&X-Algolia-API-Key={admin}"
        ))
        .header("x-request-id", "corr-1234")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-request-id"], "corr-1234");
    let resp = http
        .post(format!("{url}/1/indexes/products/query"))
        .header("X-Algolia-Application-Id", "LOGS")
        .header("X-Algolia-API-Key", &admin)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    signal(&child, "-TERM");
    let (status, stderr) = wait(child);
    assert!(status.success(), "{stderr}");
    for secret in [admin.as_str(), "root-secret-key"] {
        assert!(!stderr.contains(secret), "a key is in the log:\n{stderr}");
    }
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("request_id=corr-1234") && l.contains("/1/keys/{key}")),
        "no log line with the request id:\n{stderr}"
    );
}

#[test]
fn unknown_config_keys_are_errors_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("penchant.toml");
    std::fs::write(&file, "[server]\nlisten = \"127.0.0.1:0\"\nlistne = 1\n").unwrap();
    let out = penchant()
        .args(["serve", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("listne"), "{stderr}");

    let out = penchant()
        .arg("config")
        .env("PENCHANT_STORE__DATADIR", "x")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("datadir"));

    // A variable that is not configuration (a client's key) is ignored, and said so; the
    // admin key is never printed.
    let out = penchant()
        .arg("config")
        .env("PENCHANT_KEY", "client-key")
        .env("PENCHANT_AUTH__ADMIN_KEY", "admin-secret")
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("ignoring PENCHANT_KEY"), "{stderr}");
    assert!(!stdout.contains("admin-secret"), "{stdout}");
    let config: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(config["auth"]["admin_key"], "<redacted>");
}

#[test]
fn config_layers_file_env_flags() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("penchant.toml");
    std::fs::write(
        &file,
        "[server]\nlisten = \"127.0.0.1:8001\"\n[store]\ndata_dir = \"file-dir\"\nsync_writes = false\n",
    )
    .unwrap();
    let out = penchant()
        .args(["config", "--listen", "127.0.0.1:8003"])
        .env("PENCHANT_CONFIG", &file)
        .env("PENCHANT_SERVER__LISTEN", "127.0.0.1:8002")
        .env("PENCHANT_STORE__DATA_DIR", "env-dir")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let config: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(config["server"]["listen"], "127.0.0.1:8003", "flags win");
    assert_eq!(config["store"]["data_dir"], "env-dir", "env beats the file");
    assert_eq!(
        config["store"]["sync_writes"], false,
        "the file beats defaults"
    );
    assert_eq!(config["log"]["level"], "info", "defaults fill the rest");
}

#[tokio::test]
async fn serve_runs_on_a_bigtable_emulator() {
    use penchant_store::Store;
    use penchant_store_bigtable::BigtableStore;
    use penchant_store_bigtable::emulator::Emulator;

    let emulator = Emulator::start();
    let dir = tempfile::tempdir().unwrap();
    let (child, url) = common::serve(|cmd| {
        cmd.arg("--data-dir")
            .arg(dir.path())
            .env("PENCHANT_STORE__BACKEND", "bigtable")
            .env("PENCHANT_BIGTABLE__TABLE_PREFIX", "node_")
            .env("BIGTABLE_EMULATOR_HOST", emulator.addr())
            .stderr(Stdio::piped());
    });
    let body = health(&url).await;
    assert_eq!(body["store"], "bigtable");
    // The node created its tables in the emulator, under its prefix.
    let direct = BigtableStore::connect(emulator.config("node_"))
        .await
        .unwrap();
    let tables: Vec<String> = direct
        .list_tables()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    // Every table of the engine's registry, and no other.
    let mut registry: Vec<&str> = penchant_engine::tables::ALL
        .iter()
        .map(|t| t.name)
        .collect();
    registry.sort_unstable();
    assert_eq!(tables, registry);
    assert!(tables.iter().any(|t| t == "abtests"), "{tables:?}");
    // The health check reaches the emulator: stopping it makes the node unhealthy.
    drop(emulator);
    let resp = reqwest::get(format!("{url}/health")).await.unwrap();
    assert_eq!(resp.status(), 503, "an unreachable store is reported");
    signal(&child, "-TERM");
    let (status, stderr) = wait(child);
    assert!(status.success(), "{stderr}");
    assert!(
        !dir.path().join("CURRENT").exists(),
        "no embedded store was opened"
    );
}

#[test]
fn apps_and_keys_commands_manage_a_running_server() {
    let dir = tempfile::tempdir().unwrap();
    let (child, url) = common::serve(|cmd| {
        cmd.arg("--data-dir")
            .arg(dir.path())
            .env("PENCHANT_AUTH__ADMIN_KEY", "root")
            // Apps' layouts as cached by no node: a migration waits only for ingestions.
            .env("PENCHANT_AUTH__KEY_CACHE_TTL_MS", "0")
            .stderr(Stdio::null());
    });
    let admin = |args: &[&str]| admin_command(&url, args);
    let (ok, app, err) = admin(&[
        "apps",
        "create",
        "--app-id",
        "CLIAPP",
        "--name",
        "Shop",
        "--event-layout",
        "narrow",
    ]);
    assert!(ok, "{err}");
    assert_eq!(app["appID"], "CLIAPP");
    assert_eq!(app["eventLayout"], "narrow");
    let (ok, layout, err) = admin(&["apps", "layout", "CLIAPP"]);
    assert!(ok, "{err}");
    assert_eq!(layout["eventLayout"], "narrow");
    // Moving the events prints the migration's end.
    let (ok, moved, err) = admin(&["apps", "layout", "CLIAPP", "--to", "wide"]);
    assert!(ok, "{err}");
    assert_eq!(moved["eventLayout"], "wide", "{moved}");
    assert_eq!(moved["migration"]["state"], "done", "{moved}");
    let (ok, _, err) = admin(&["apps", "layout", "CLIAPP", "--to", "wide"]);
    assert!(!ok && err.contains("already"), "{err}");
    let (ok, key, err) = admin(&[
        "keys",
        "create",
        "--app",
        "CLIAPP",
        "--acl",
        "search,recommendation",
    ]);
    assert!(ok, "{err}");
    let key = key["key"].as_str().unwrap().to_owned();
    let (_, listed, _) = admin(&["keys", "list", "--app", "CLIAPP"]);
    let acls: Vec<&serde_json::Value> = listed["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| &k["acl"])
        .collect();
    assert!(
        acls.contains(&&serde_json::json!(["search", "recommendation"])),
        "{listed}"
    );
    let (ok, _, err) = admin(&["keys", "delete", "--app", "CLIAPP", &key]);
    assert!(ok, "{err}");
    let (ok, _, err) = admin(&["keys", "delete", "--app", "CLIAPP", &key]);
    assert!(!ok && err.contains("Key does not exist"), "{err}");
    // Every ACL the server accepts is offered, and can be given; another is refused, naming
    // them all.
    let acls: Vec<String> = penchant_engine::tenancy::Acl::ALGOLIA
        .iter()
        .chain([&penchant_engine::tenancy::Acl::Admin])
        .map(|acl| {
            serde_json::to_value(acl)
                .unwrap()
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(acls.len(), 16);
    let help = penchant()
        .args(["keys", "create", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for acl in &acls {
        assert!(help.contains(acl.as_str()), "{acl} missing:\n{help}");
    }
    let all = acls.join(",");
    let (ok, created, err) = admin(&["keys", "create", "--app", "CLIAPP", "--acl", &all]);
    assert!(ok && created["key"].is_string(), "{err}");
    let (ok, _, err) = admin(&["keys", "create", "--app", "CLIAPP", "--acl", "search,fly"]);
    assert!(!ok && err.contains("'fly'"), "{err}");
    for acl in &acls {
        assert!(err.contains(acl.as_str()), "{acl} not named:\n{err}");
    }
    let (_, apps, _) = admin(&["apps", "list"]);
    assert_eq!(apps["apps"][0]["appID"], "CLIAPP");
    // Without a terminal to confirm on, a deletion needs --yes.
    let (ok, _, err) = admin(&["apps", "delete", "CLIAPP"]);
    assert!(!ok && err.contains("pass --yes"), "{err}");
    let (_, apps, _) = admin(&["apps", "list"]);
    assert_eq!(apps["apps"][0]["appID"], "CLIAPP");
    let (ok, _, err) = admin(&["apps", "delete", "CLIAPP", "--yes"]);
    assert!(ok, "{err}");
    signal(&child, "-TERM");
    assert!(wait(child).0.success());
}

/// Residency on the embedded store: a second RocksDB folder as the target `eu`, an app created
/// there, another moved there with the CLI, a user placed back in the default folder.
#[test]
fn placement_commands_place_and_move_apps_between_folders() {
    let dir = tempfile::tempdir().unwrap();
    let eu = dir.path().join("eu");
    let (child, url) = common::serve(|cmd| {
        cmd.arg("--data-dir")
            .arg(dir.path().join("main"))
            .env("PENCHANT_AUTH__ADMIN_KEY", "root")
            .env("PENCHANT_AUTH__KEY_CACHE_TTL_MS", "0")
            .env("PENCHANT_PLACEMENT__TARGETS__EU__DATA_DIR", &eu)
            .env("PENCHANT_PLACEMENT__REFRESH_MS", "100")
            .stderr(Stdio::null());
    });
    let admin = |args: &[&str]| admin_command(&url, args);
    let (ok, targets, err) = admin(&["placement", "targets"]);
    assert!(ok, "{err}");
    assert_eq!(targets["targets"], serde_json::json!(["default", "eu"]));
    let (ok, _, err) = admin(&["apps", "create", "--app-id", "EUAPP", "--placement", "eu"]);
    assert!(ok, "{err}");
    let (ok, shown, err) = admin(&["placement", "show", "--app", "EUAPP"]);
    assert!(ok, "{err}");
    assert_eq!(shown["target"], "eu");
    let (ok, _, err) = admin(&["apps", "create", "--app-id", "SHOP"]);
    assert!(ok, "{err}");
    let (ok, moved, err) = admin(&["placement", "move", "--app", "SHOP", "--to", "eu"]);
    assert!(ok, "{err}");
    assert_eq!(moved["target"], "eu", "{moved}");
    assert_eq!(moved["move"]["state"], "done", "{moved}");
    assert!(moved["move"]["copied"].as_u64().unwrap() >= 2, "{moved}");
    let progress = &moved["move"]["progress"];
    assert_eq!(
        (&progress["step"], &progress["steps"]),
        (&6.into(), &6.into()),
        "{moved}"
    );
    let (ok, _, err) = admin(&["placement", "move", "--app", "SHOP", "--to", "eu"]);
    assert!(!ok && err.contains("already"), "{err}");
    let (ok, placed, err) = admin(&[
        "placement",
        "place",
        "--app",
        "SHOP",
        "--user",
        "alice",
        "--to",
        "default",
    ]);
    assert!(ok, "{err}");
    assert_eq!(placed["target"], "default");
    let (ok, users, err) = admin(&["placement", "users", "--app", "SHOP"]);
    assert!(ok, "{err}");
    assert_eq!(users["users"][0]["userToken"], "alice");
    let (ok, _, err) = admin(&["placement", "move", "--app", "SHOP", "--to", "mars"]);
    assert!(
        !ok && err.contains("unknown placement target `mars`"),
        "{err}"
    );
    signal(&child, "-TERM");
    assert!(wait(child).0.success());
    assert!(
        eu.join("CURRENT").exists(),
        "the eu folder is a RocksDB store"
    );
}

#[tokio::test]
async fn jobs_watch_follows_a_recompute_to_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let (child, url) = common::serve_in(dir.path(), "root");
    post_ok(&url, "/1/apps", "", serde_json::json!({"appID": "JOBS"})).await;
    let events: Vec<serde_json::Value> = (0..3)
        .map(|u| {
            serde_json::json!({"eventType": "view", "eventName": "Viewed", "index": "shop",
                "userToken": format!("u{u}"), "filters": ["brand:acme"]})
        })
        .collect();
    post_ok(
        &url,
        "/1/events",
        "JOBS",
        serde_json::json!({ "events": events }),
    )
    .await;
    let strategy = serde_json::json!({
        "eventsScoring": [{"eventName": "Viewed", "eventType": "view", "score": 10}],
        "facetsScoring": [{"facetName": "brand", "score": 10}],
        "personalizationImpact": 10,
    });
    post_ok(&url, "/1/strategies/personalization", "JOBS", strategy).await;
    let out = penchant()
        .args(["jobs", "watch", "--app", "JOBS", "--server", &url])
        .args(["--progress", "plain"])
        .env("PENCHANT_AUTH__ADMIN_KEY", "root")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let job: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(job["state"], "done", "{job}");
    assert_eq!(job["rangesDone"], job["ranges"].as_array().unwrap().len());
    // Every kind's status carries its progress in one shape (what the CLI's bar is drawn from).
    let progress = &job["progress"];
    assert_eq!(progress["phase"], "recompute", "{job}");
    assert_eq!(progress["unit"], "ranges", "{job}");
    assert_eq!(progress["done"], progress["total"], "{job}");
    // Off a terminal, `--progress plain` prints lines: ranges done out of all (moving within
    // each range), users so far; the last one when the job ended.
    let stderr = String::from_utf8_lossy(&out.stderr);
    let ranges = progress["total"].as_u64().unwrap();
    assert!(
        stderr
            .lines()
            .all(|l| l.starts_with("recompute: ") && l.contains(&format!("/{ranges} ranges, "))),
        "{stderr}"
    );
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with(&format!(
            "recompute: {ranges}/{ranges} ranges, 3 users (done after "
        )),
        "{stderr}"
    );
    signal(&child, "-TERM");
    assert!(wait(child).0.success());
}

#[tokio::test]
async fn als_train_follows_a_training_and_evaluate_prints_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let (child, url) = common::serve_in(dir.path(), "root");
    post_ok(&url, "/1/apps", "", serde_json::json!({"appID": "ALS"})).await;
    // Two tastes: users u0..u9 click items a0..a5, users u10..u19 items b0..b5.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let mut events = Vec::new();
    for u in 0..20 {
        let taste = if u < 10 { "a" } else { "b" };
        for i in 0..4 {
            let item = format!("{taste}{}", (u + i) % 6);
            events.push(
                serde_json::json!({"eventType": "click", "eventName": "Clicked",
                "index": "products", "userToken": format!("u{u}"), "objectIDs": [item],
                "timestamp": now - 60_000 + (u * 4 + i) as i64}),
            );
        }
    }
    post_ok(
        &url,
        "/1/events",
        "ALS",
        serde_json::json!({"events": events}),
    )
    .await;

    let (ok, status, err) = admin_command(
        &url,
        &[
            "als",
            "train",
            "--app",
            "ALS",
            "--factors",
            "4",
            "--iterations",
            "5",
            "--progress",
            "plain",
        ],
    );
    assert!(ok, "{err}");
    assert_eq!(status["state"], "done", "{status}");
    // A training knows its total: its lines count iterations out of it.
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("ALS train: 5/5 iterations (done after "),
        "{err}"
    );
    assert_eq!(
        (&status["users"], &status["items"], &status["interactions"]),
        (
            &serde_json::json!(20),
            &serde_json::json!(12),
            &serde_json::json!(80)
        )
    );
    let (ok, evaluation, err) = admin_command(
        &url,
        &[
            "als",
            "evaluate",
            "--app",
            "ALS",
            "--factors",
            "4",
            "--k",
            "3",
            "--holdout-fraction",
            "0.25",
            "--blend",
            r#"mix=[{"source":"als"},{"source":"trending","weight":2}]"#,
        ],
    );
    assert!(ok, "{err}");
    assert!(err.contains("precision@3"), "the table is printed: {err}");
    for model in [
        "popularity",
        "trending",
        "als",
        "similar-to-liked",
        "related",
        "mix",
    ] {
        assert!(err.lines().any(|l| l.starts_with(model)), "{model}: {err}");
    }
    assert_eq!(evaluation["holdout"], 0.25);
    for row in evaluation["rows"].as_array().unwrap() {
        let precision = row["precision"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&precision), "{evaluation}");
    }
    let (ok, _, err) = admin_command(&url, &["als", "evaluate", "--app", "ALS", "--blend", "mix"]);
    assert!(!ok && err.contains("expected NAME=SOURCES"), "{err}");
    let (ok, _, err) = admin_command(&url, &["als", "train", "--app", "ALS", "--factors", "0"]);
    assert!(
        !ok && err.contains("factors must be between 1 and 1024"),
        "{err}"
    );
    signal(&child, "-TERM");
    assert!(wait(child).0.success());
}

#[test]
fn sets_commands_reserve_and_rebuild_from_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let (child, url) = common::serve_in(&dir.path().join("data"), "root");
    let admin = |args: &[&str]| admin_command(&url, args);
    let (ok, _, err) = admin(&["apps", "create", "--app-id", "SETS"]);
    assert!(ok, "{err}");
    let (ok, set, err) = admin(&[
        "sets",
        "reserve",
        "--app",
        "SETS",
        "blocked",
        "--capacity",
        "20000",
        "--error-rate",
        "0.01",
    ]);
    assert!(ok, "{err}");
    assert_eq!(set["name"], "blocked");
    let (ok, _, err) = admin(&["sets", "reserve", "--app", "SETS", "bad", "--capacity", "0"]);
    assert!(!ok && err.contains("capacity must be at least 1"), "{err}");

    let keys = |n: usize| (0..n).map(|i| format!("key{i}\n")).collect::<String>();
    let list = dir.path().join("keys.txt");
    std::fs::write(&list, keys(20_000)).unwrap();
    let file = list.to_str().unwrap();
    let (ok, rebuild, err) = admin(&[
        "sets", "rebuild", "--app", "SETS", "blocked", "--file", file,
    ]);
    assert!(ok, "{err}");
    assert_eq!(rebuild["state"], "done", "{rebuild}");
    assert_eq!(rebuild["keys"], 20_000);
    let (ok, info, err) = admin(&["sets", "info", "--app", "SETS", "blocked"]);
    assert!(ok, "{err}");
    // Keys as the filter counts them: a false positive at insert time is not counted.
    let counted = info["keys"].as_u64().unwrap();
    assert!((19_900..=20_000).contains(&counted), "{info}");
    assert_eq!(
        info["config"]["maxErrorRate"], 0.02,
        "the default: twice errorRate"
    );
    let rate = info["estimatedErrorRate"].as_f64().unwrap();
    assert!(rate > 0.001 && rate <= 0.01, "{info}");

    // Ten times the capacity: refused, and the set keeps its generation.
    std::fs::write(&list, keys(200_000)).unwrap();
    let (ok, _, err) = admin(&[
        "sets", "rebuild", "--app", "SETS", "blocked", "--file", file,
    ]);
    assert!(!ok && err.contains("rebuild refused"), "{err}");
    let (_, after, _) = admin(&["sets", "info", "--app", "SETS", "blocked"]);
    assert_eq!(after["generation"], info["generation"]);
    assert_eq!(after["keys"], counted);
    let (ok, _, err) = admin(&["sets", "delete", "--app", "SETS", "blocked"]);
    assert!(ok, "{err}");
    let (_, listed, _) = admin(&["sets", "list", "--app", "SETS"]);
    assert_eq!(listed["sets"], serde_json::json!([]));
    signal(&child, "-TERM");
    assert!(wait(child).0.success());
}

/// `penchant <args> --server <url>` as the global admin ("root"): success, stdout as JSON, stderr.
/// POST `body` to the server at `url` as `app` with the admin key `root`: it must succeed.

#[tokio::test]
async fn recommend_builds_with_progress_and_shows_a_users_recommendations() {
    let dir = tempfile::tempdir().unwrap();
    let (child, url) = common::serve_in(dir.path(), "root");
    let http = reqwest::Client::new();
    let call = |method: reqwest::Method, path: &str, app: &str, body: serde_json::Value| {
        let url = format!("{url}{path}");
        common::request(&http, method, &url, (app, "root"), &body).send()
    };
    use reqwest::Method;
    let steps = [
        (
            Method::POST,
            "/1/apps",
            "",
            serde_json::json!({"appID": "REC"}),
        ),
        (
            Method::POST,
            "/1/indexes/shop/batch",
            "REC",
            serde_json::json!({"requests": [
                {"action": "addObject", "body": {"objectID": "a", "brand": "acme"}},
                {"action": "addObject", "body": {"objectID": "b", "brand": "zenith"}},
                {"action": "addObject", "body": {"objectID": "c", "brand": "acme"}},
            ]}),
        ),
        (
            Method::PUT,
            "/1/queues/for-you",
            "REC",
            serde_json::json!({"indexName": "shop", "sources": [{"source": "trending"}]}),
        ),
        (
            Method::POST,
            "/1/events",
            "REC",
            serde_json::json!({"events": [
                {"eventType": "conversion", "eventName": "Bought", "index": "shop",
                 "userToken": "u1", "objectIDs": ["a", "b"]},
                {"eventType": "conversion", "eventName": "Bought", "index": "shop",
                 "userToken": "u2", "objectIDs": ["a"]},
            ]}),
        ),
    ];
    for (method, path, app, body) in steps {
        let resp = call(method, path, app, body).await.unwrap();
        assert!(
            resp.status().is_success(),
            "{path}: {}",
            resp.text().await.unwrap()
        );
    }
    let args = ["recommend", "build", "--app", "REC", "--progress", "plain"];
    let (ok, status, err) = admin_command(&url, &args);
    assert!(ok, "{err}");
    assert_eq!(status["state"], "done", "{status}");
    assert_eq!(status["users"], 2, "{status}");
    // Off a terminal, `--progress plain` prints the progress as lines; the build's status
    // knows no totals (events, users), so its lines count without one.
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("build done (2/2): 2 users (done after "),
        "{err}"
    );
    // u2 converted on "a": its queue holds the rest; the index comes from the queue.
    let (ok, result, err) = admin_command(&url, &["recommend", "--app", "REC", "--user", "u2"]);
    assert!(ok, "{err}");
    assert_eq!(result["source"], "queue", "{result}");
    let ids: Vec<&str> = result["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["objectID"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        ["b"],
        "what a user bought stays out of their recommendations by default: {result}"
    );
    assert!(
        err.contains("answered by recommended-for-you (queue)"),
        "{err}"
    );
    let (ok, _, err) = admin_command(&url, &["recommend", "--app", "REC"]);
    assert!(!ok && err.contains("give --user"), "{err}");
    // An item's model needs no user.
    let args = [
        "recommend",
        "--app",
        "REC",
        "--model",
        "bought-together",
        "--object-id",
        "a",
        "--index",
        "shop",
    ];
    let (ok, result, err) = admin_command(&url, &args);
    assert!(ok, "{err}");
    assert_eq!(result["answeredBy"], "bought-together", "{result}");
    assert!(err.contains("bought-together for a in shop"), "{err}");
    // Trending facets: a facet's values, ranked by the trending items holding them.
    let args = [
        "recommend",
        "--app",
        "REC",
        "--model",
        "trending-facets",
        "--facet-name",
        "brand",
    ];
    let (ok, result, err) = admin_command(&url, &args);
    assert!(ok, "{err}");
    assert_eq!(result["answeredBy"], "trending-facets", "{result}");
    let values: Vec<(&str, &str)> = result["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["facetName"].as_str().unwrap(),
                h["facetValue"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(values, [("brand", "acme"), ("brand", "zenith")], "{result}");
    assert!(
        err.contains("trending-facets brand for everyone in shop"),
        "{err}"
    );
    assert!(
        err.contains("1. acme") && err.contains("2. zenith"),
        "{err}"
    );
    // Trending items of one facet value.
    let args = [
        "recommend",
        "--app",
        "REC",
        "--model",
        "trending-items",
        "--facet-name",
        "brand",
        "--facet-value",
        "zenith",
    ];
    let (ok, result, err) = admin_command(&url, &args);
    assert!(ok, "{err}");
    let ids: Vec<&str> = result["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["objectID"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["b"], "{result}");
    // trending-facets needs its facet; a model is one of the API's.
    let args = ["recommend", "--app", "REC", "--model", "trending-facets"];
    let (ok, _, err) = admin_command(&url, &args);
    assert!(!ok && err.contains("--facet-name"), "{err}");
    let (ok, _, err) = admin_command(&url, &["recommend", "--app", "REC", "--model", "hot"]);
    assert!(!ok && err.contains("trending-facets"), "{err}");
    // Schedules: shown, then one setting changed (the others stay).
    let (ok, shown, err) = admin_command(&url, &["recommend", "schedules", "--app", "REC"]);
    assert!(ok, "{err}");
    assert_eq!(shown["settings"]["buildEveryMinutes"], 60, "{shown}");
    assert!(err.contains("build"), "{err}");
    let args = [
        "recommend",
        "schedules",
        "--app",
        "REC",
        "--build-every-minutes",
        "15",
    ];
    let (ok, changed, err) = admin_command(&url, &args);
    assert!(ok, "{err}");
    assert_eq!(changed["settings"]["buildEveryMinutes"], 15, "{changed}");
    assert_eq!(changed["settings"]["trainEveryHours"], 24, "{changed}");
    assert!(err.contains("every 15 min"), "{err}");
    signal(&child, "-TERM");
    assert!(wait(child).0.success());
}

/// `kill -9` of a node while four clients ingest, five times, each restart taking traffic on
/// the same users while it repairs what the killed node left half-done. Clients retry every
/// unanswered batch with the same events (and timestamps) until it is acknowledged. Afterwards
/// every user's aggregates count each of the user's events exactly once, and the user's
/// profile is the one a recompute from them gives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_ingestion_loses_no_acknowledged_event_and_counts_none_twice() {
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const APP: &str = "CRASH";
    const USERS: u64 = 300;
    const WRITERS: usize = 4;
    const BATCHES: usize = 16;
    let dir = tempfile::tempdir().unwrap();
    let start = |dir: &std::path::Path| common::serve_in(dir, "root");
    let (mut child, first_url) = start(dir.path());
    let http = reqwest::Client::new();
    post_ok(
        &first_url,
        "/1/apps",
        APP,
        serde_json::json!({"appID": APP}),
    )
    .await;
    let strategy = serde_json::json!({
        "eventsScoring": [{"eventName": "Viewed", "eventType": "view", "score": 10}],
        "facetsScoring": [{"facetName": "brand", "score": 10}],
        "personalizationImpact": 50,
    });
    post_ok(&first_url, "/1/strategies/personalization", APP, strategy).await;

    // Batches of 100 to 400 events over every user; each event has its own timestamp.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut expected: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    let mut stamp = now - 3_600_000;
    let mut batches: Vec<Vec<serde_json::Value>> = vec![Vec::new(); WRITERS];
    for writer in &mut batches {
        for _ in 0..BATCHES {
            let size = 100 + next() % 300;
            let events: Vec<serde_json::Value> = (0..size)
                .map(|_| {
                    let user = format!("u{}", next() % USERS);
                    let brand = format!("b{}", next() % 5);
                    *expected
                        .entry(user.clone())
                        .or_default()
                        .entry(brand.clone())
                        .or_default() += 1;
                    stamp += 1;
                    serde_json::json!({
                        "eventType": "view", "eventName": "Viewed", "index": "shop",
                        "userToken": user, "timestamp": stamp,
                        "filters": [format!("brand:{brand}")],
                    })
                })
                .collect();
            writer.push(serde_json::json!({ "events": events }));
        }
    }

    let url = Arc::new(std::sync::RwLock::new(first_url));
    let acknowledged = Arc::new(AtomicUsize::new(0));
    let writers: Vec<_> = batches
        .into_iter()
        .map(|batches| {
            let (url, acknowledged, http) = (url.clone(), acknowledged.clone(), http.clone());
            tokio::spawn(async move {
                for batch in batches {
                    // Until acknowledged: a node killed mid-request answers nothing.
                    loop {
                        let to = url.read().unwrap().clone();
                        let url = format!("{to}/1/events");
                        let sent = common::request(
                            &http,
                            reqwest::Method::POST,
                            &url,
                            (APP, "root"),
                            &batch,
                        )
                        .send()
                        .await;
                        match sent {
                            Ok(resp) if resp.status().is_success() => break,
                            Ok(resp) if resp.status().is_client_error() => {
                                panic!("{}: {}", resp.status(), resp.text().await.unwrap())
                            }
                            _ => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
                        }
                    }
                    acknowledged.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    // Five kills, each after a few more acknowledged batches, each node restarted at once.
    for kill in 1..=5 {
        while acknowledged.load(Ordering::SeqCst) < kill * WRITERS * BATCHES / 6 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        child.kill().unwrap();
        child.wait().unwrap();
        let (restarted, new_url) = start(dir.path());
        child = restarted;
        *url.write().unwrap() = new_url;
    }
    for writer in writers {
        writer.await.unwrap();
    }
    signal(&child, "-TERM");
    assert!(wait(child).0.success());

    // Read the store the nodes left.
    let store = penchant_store_rocksdb::RocksStore::open(dir.path(), Default::default()).unwrap();
    let engine =
        penchant_engine::Engine::open(Arc::new(store), penchant_engine::EngineConfig::default())
            .await
            .unwrap();
    let brand = penchant_engine::events::qualifier(
        penchant_engine::events::EventType::View,
        "Viewed",
        "brand",
    );
    let mut wrong = Vec::new();
    for (user, brands) in &expected {
        let counts = engine.aggregates().counts(APP, user).await.unwrap();
        let counted = counts.get(&brand).cloned().unwrap_or_default();
        if &counted != brands {
            wrong.push(format!("{user}: counted {counted:?}, sent {brands:?}"));
            continue;
        }
        let stored = engine.profiles().stored_profile(APP, user).await.unwrap();
        let full = engine.profiles().recompute_one(APP, user).await.unwrap();
        if stored.map(|(p, _)| p) != full {
            wrong.push(format!(
                "{user}: the stored profile is not the recomputed one"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} users wrong:\n{}",
        wrong.len(),
        expected.len(),
        wrong.join("\n")
    );
}

/// `kill -9` of a node while its ranker job learns (phase `learn`, some trees grown and saved),
/// and a node restarted on the same folder with a 2 s lease. Right after the restart the job
/// still reads `running`: the dead node left it, neither lost nor failed. The restarted node
/// takes it over once the dead node's lease has expired and finishes it: the same job (its
/// `startedAt`) ends `done` with a ranker stored after the kill, every user's learned queue
/// written, and Recommend serves a user from that queue with that ranker's version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_the_ranker_job_leaves_it_to_the_restarted_node() {
    use reqwest::{Method, StatusCode};
    use serde_json::{Value, json};
    use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

    const APP: &str = "RANK";
    const USERS: usize = 1_000;
    const CLICKS: usize = 15;
    const KINDS: usize = 4;
    const PER_KIND: usize = 15;
    let dir = tempfile::tempdir().unwrap();
    let start = |dir: &std::path::Path| {
        common::serve(|cmd| {
            cmd.arg("--data-dir")
                .arg(dir)
                .env("PENCHANT_AUTH__ADMIN_KEY", "root")
                .env("PENCHANT_PERSONALIZATION__LEASE_TTL_SECS", "2")
                .stderr(Stdio::null());
        })
    };
    let (mut child, url) = start(dir.path());
    let http = reqwest::Client::new();
    let call = |url: &str, method: Method, path: &str, body: Option<Value>| {
        let (http, url) = (http.clone(), format!("{url}{path}"));
        async move { common::call(&http, method, &url, (APP, "root"), body).await }
    };
    let ok = |url: &str, method: Method, path: &str, body: Option<Value>| {
        let call = call(url, method, path, body);
        let path = path.to_owned();
        async move {
            let (status, answer) = call.await;
            assert!(status.is_success(), "{path}: {status} {answer}");
            answer
        }
    };
    post_ok(&url, "/1/apps", APP, json!({"appID": APP})).await;
    // No scheduled job: the ranker job is the only work.
    let off = json!({"trainEveryHours": 0, "foldInEveryMinutes": 0, "buildEveryMinutes": 0,
        "rankEveryHours": 0, "queueStaleAfterMinutes": 0});
    ok(&url, Method::PUT, "/1/schedules", Some(off)).await;

    // 60 products in 4 kinds; each user clicks 15 items of their own kind, the popular ones
    // (low numbers) more often.
    let products: Vec<Value> = (0..KINDS * PER_KIND)
        .map(|i| {
            json!({"action": "addObject", "body": {
                "objectID": format!("p{i}"), "kind": format!("k{}", i % KINDS),
            }})
        })
        .collect();
    let batch = json!({ "requests": products });
    ok(&url, Method::POST, "/1/indexes/products/batch", Some(batch)).await;
    let mut seed = 17u64;
    let mut next = || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) as usize
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let t = now - 3_600_000;
    let events: Vec<Value> = (0..USERS * CLICKS)
        .map(|n| {
            let user = n % USERS;
            let rank = (next() % PER_KIND).min(next() % PER_KIND);
            json!({
                "eventType": "click", "eventName": "Clicked", "index": "products",
                "userToken": format!("u{user}"),
                "objectIDs": [format!("p{}", rank * KINDS + user % KINDS)],
                "timestamp": t + n as i64 * 100,
            })
        })
        .collect();
    for chunk in events.chunks(1000) {
        let body = json!({ "events": chunk });
        ok(&url, Method::POST, "/1/events", Some(body)).await;
    }
    let queue = json!({"indexName": "products", "ranker": "learned", "size": 20,
        "sources": [{"source": "trending"}]});
    ok(&url, Method::PUT, "/1/queues/learned", Some(queue)).await;

    // Learning that lasts: no early stop, slow steps.
    let settings = json!({"indexName": "products", "ranker": {
        "examples": "history", "maxQueries": 1000, "cuts": 2,
        "params": {"trees": 150, "patience": 150, "learningRate": 0.01, "minRowsInLeaf": 5},
    }});
    let (status, started) = call(&url, Method::POST, "/1/ranker/train", Some(settings)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{started}");
    assert_eq!(started["phase"], "learn", "{started}");
    let learning = Instant::now();
    // Mid-learning, with trees grown and saved.
    let killed_at = loop {
        let status = ok(&url, Method::GET, "/1/ranker/train", None).await;
        assert_eq!(status["state"], "running", "{status}");
        assert_eq!(
            status["phase"], "learn",
            "the job learned too fast: {status}"
        );
        if status["trees"].as_u64().unwrap() > 0 {
            break status;
        }
        assert!(learning.elapsed() < Duration::from_secs(60), "{status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    child.kill().unwrap();
    child.wait().unwrap();
    let killed_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    println!(
        "killed after {:.1} s of learning, {} trees grown: {killed_at}",
        learning.elapsed().as_secs_f64(),
        killed_at["trees"]
    );

    let (restarted, url) = start(dir.path());
    child = restarted;
    let restart = Instant::now();
    let left = ok(&url, Method::GET, "/1/ranker/train", None).await;
    assert_eq!(left["state"], "running", "the dead node's job: {left}");
    assert_eq!(left["startedAt"], killed_at["startedAt"], "{left}");
    println!("right after the restart: {left}");
    // When the restarted node was seen writing queues: its learning done.
    let mut learned = None;
    let done = loop {
        let status = ok(&url, Method::GET, "/1/ranker/train", None).await;
        if status["state"] != "running" {
            break status;
        }
        if status["phase"] == "queues" && learned.is_none() {
            learned = Some(restart.elapsed());
        }
        assert!(
            restart.elapsed() < Duration::from_secs(90),
            "not taken over and finished in 90 s: {status}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let took = restart.elapsed();
    assert_eq!(done["state"], "done", "{done}");
    assert_eq!(done["phase"], "done", "{done}");
    assert_eq!(
        done["startedAt"], killed_at["startedAt"],
        "the same job: {done}"
    );
    assert_eq!(done["queues"], json!(["learned"]), "{done}");
    assert_eq!(done["users"], USERS, "{done}");
    let version = done["version"].as_i64().expect("a version");
    assert!(version > killed_ms * 1000, "learned after the kill: {done}");

    let ranker = ok(&url, Method::GET, "/1/rankers/products", None).await;
    assert_eq!(ranker["version"], version, "{ranker}");
    let asked = json!({"requests": [{"indexName": "products", "model": "recommended-for-you",
        "threshold": 0, "queue": "learned", "queryParameters": {"userToken": "u5"}}]});
    let answer = ok(
        &url,
        Method::POST,
        "/1/indexes/*/recommendations",
        Some(asked),
    )
    .await;
    let answer = &answer["results"][0];
    assert_eq!(answer["source"], "learned-queue", "{answer}");
    assert_eq!(answer["rankerVersion"], version, "{answer}");
    println!(
        "taken over, learned {:.1} s and done {:.1} s after the restart: {} trees, {} users: \
         {done}",
        learned.unwrap_or(took).as_secs_f64(),
        took.as_secs_f64(),
        ranker["learned"]["trees"],
        done["users"]
    );
    signal(&child, "-TERM");
    assert!(wait(child).0.success());
}

/// A node started without an admin key says why no key can manage apps.
#[tokio::test]
async fn a_node_without_an_admin_key_says_so_when_asked_to_manage_apps() {
    let dir = tempfile::tempdir().unwrap();
    let (child, url) = common::serve(|cmd| {
        cmd.arg("--data-dir")
            .arg(dir.path())
            .env_remove("PENCHANT_AUTH__ADMIN_KEY")
            .stderr(Stdio::null());
    });
    let resp = reqwest::Client::new()
        .post(format!("{url}/1/apps"))
        .header("X-Algolia-API-Key", "anything")
        .json(&serde_json::json!({"appID": "SHOP"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), reqwest::StatusCode::UNAUTHORIZED);
    let body: serde_json::Value = resp.json().await.unwrap();
    let message = body["message"].as_str().unwrap();
    assert!(
        message.starts_with("Invalid credentials: this node has no admin key"),
        "{body}"
    );
    assert!(message.contains("PENCHANT_AUTH__ADMIN_KEY"), "{body}");
    signal(&child, "-TERM");
}

/// `penchant abtests`: a test started on an index, its users split between the variants by
/// the rerank route, their conversions attributed by queryID, the variants shown side by side
/// with a verdict; then stopped, listed and deleted. The server's refusals read as it words
/// them.
#[tokio::test]
async fn abtests_commands_create_show_list_stop_and_delete() {
    let dir = tempfile::tempdir().unwrap();
    let (child, url) = common::serve_in(dir.path(), "root");
    post_ok(&url, "/1/apps", "", serde_json::json!({"appID": "ABT"})).await;
    post_ok(
        &url,
        "/1/indexes/shop/batch",
        "ABT",
        serde_json::json!({"requests": [
            {"action": "addObject", "body": {"objectID": "a", "brand": "acme"}},
            {"action": "addObject", "body": {"objectID": "b", "brand": "zenith"}},
        ]}),
    )
    .await;
    let admin = |args: &[&str]| admin_command(&url, args);
    let create = |name: &'static str, extra: &'static [&'static str]| {
        let mut args = vec![
            "abtests", "create", "--app", "ABT", "--name", name, "--index", "shop",
        ];
        args.extend_from_slice(extra);
        admin_command(&url, &args)
    };
    // A variant's parameters are a JSON object: the CLI says so before asking the server.
    let (ok, _, err) = create("bad", &["--days", "7", "--a", "[1]"]);
    assert!(!ok && err.contains("expected a JSON object"), "{err}");
    let (ok, _, err) = create("no end", &[]);
    assert!(!ok && err.contains("--days"), "{err}");
    // A parameter the server does not know: its message, as it is.
    let (ok, _, err) = create("bad", &["--days", "7", "--b", r#"{"fly":1}"#]);
    assert!(!ok && err.contains("400") && err.contains("fly"), "{err}");
    let (ok, created, err) = create(
        "perso off vs 50",
        &[
            "--days",
            "7",
            "--split",
            "50",
            "--a",
            r#"{"enablePersonalization":false}"#,
            "--a-description",
            "control",
            "--b",
            r#"{"personalizationImpact":50}"#,
        ],
    );
    assert!(ok, "{err}");
    let id = created["abTestID"].as_u64().expect("an ID");
    assert_eq!(created["index"], "shop", "{created}");
    assert!(
        err.contains(&format!("A/B test {id} created on shop: A 50% / B 50%")),
        "{err}"
    );
    let (ok, _, err) = create("again", &["--end", "2099-01-01T00:00:00Z"]);
    assert!(
        !ok && err.contains("already in the running A/B test"),
        "{err}"
    );

    // 100 users searched; B's all bought, one A user in ten did.
    let http = reqwest::Client::new();
    let mut events = Vec::new();
    let mut seen = [0u32; 2];
    for u in 0..100 {
        let user = format!("user{u}");
        let body = serde_json::json!({"userToken": user, "clickAnalytics": true,
            "hits": [{"objectID": "a"}, {"objectID": "b"}]});
        let answer: serde_json::Value = common::request(
            &http,
            reqwest::Method::POST,
            &format!("{url}/1/indexes/shop/rerank"),
            ("ABT", "root"),
            &body,
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
        assert_eq!(answer["abTestID"], id, "{answer}");
        let variant = answer["abTestVariantID"].as_u64().expect("a variant");
        seen[variant as usize - 1] += 1;
        if variant == 2 || seen[0] % 10 == 1 {
            events.push(
                serde_json::json!({"eventType": "conversion", "eventName": "Bought",
                "index": "shop", "userToken": user, "objectIDs": ["a"],
                "queryID": answer["queryID"]}),
            );
        }
    }
    assert!(seen[0] > 10 && seen[1] > 10, "{seen:?}");
    post_ok(
        &url,
        "/1/events",
        "ABT",
        serde_json::json!({ "events": events }),
    )
    .await;
    let id_arg = id.to_string();
    let (ok, shown, err) = admin(&["abtests", "show", "--app", "ABT", &id_arg]);
    assert!(ok, "{err}");
    assert_eq!(shown["status"], "active", "{shown}");
    let users: Vec<u64> = (0..2)
        .map(|v| shown["variants"][v]["userCount"].as_u64().unwrap())
        .collect();
    assert_eq!(users, [seen[0] as u64, seen[1] as u64], "{shown}");
    assert_eq!(shown["variants"][1]["conversionCount"], seen[1], "{shown}");
    for line in [
        "A (control): {\"enablePersonalization\":false}",
        "B: {\"personalizationImpact\":50}",
        "users who converted",
        "significance: clicks",
        "verdict: B converts better (significance >0.999)",
    ] {
        assert!(err.contains(line), "{line} missing:\n{err}");
    }
    assert!(
        shown["conversionSignificance"].as_f64().unwrap() > 0.999,
        "{shown}"
    );
    let (ok, listed, err) = admin(&["abtests", "list", "--app", "ABT"]);
    assert!(ok, "{err}");
    assert_eq!(listed["abtests"][0]["abTestID"], id, "{listed}");
    let header = err.lines().next().unwrap_or_default();
    assert!(
        header.starts_with("ID") && header.contains("USERS A/B") && header.contains("CR A/B"),
        "{err}"
    );
    let row = err.lines().nth(1).unwrap_or_default();
    assert!(
        row.contains("perso off vs 50") && row.contains("active") && row.contains("50/50"),
        "{err}"
    );
    assert!(row.contains(&format!("{}/{}", seen[0], seen[1])), "{err}");

    let (ok, _, err) = admin(&["abtests", "stop", "--app", "ABT", &id_arg]);
    assert!(ok, "{err}");
    let (_, shown, _) = admin(&["abtests", "show", "--app", "ABT", &id_arg]);
    assert_eq!(shown["status"], "stopped", "{shown}");
    // The index is free again; a test without users yet has no verdict.
    let (ok, second, err) = create("second", &["--days", "1", "--split", "30"]);
    assert!(ok, "{err}");
    let second = second["abTestID"].to_string();
    let (ok, shown, err) = admin(&["abtests", "show", "--app", "ABT", &second]);
    assert!(ok, "{err}");
    assert_eq!(shown["variants"][1]["trafficPercentage"], 70, "{shown}");
    assert!(
        err.contains("verdict: not significant yet: each variant needs users"),
        "{err}"
    );
    let (_, listed, err) = admin(&["abtests", "list", "--app", "ABT"]);
    assert_eq!(listed["abtests"].as_array().unwrap().len(), 2, "{listed}");
    assert!(err.contains("stopped") && err.contains("30/70"), "{err}");

    // Without a terminal to confirm on, a deletion needs --yes.
    let (ok, _, err) = admin(&["abtests", "delete", "--app", "ABT", &id_arg]);
    assert!(!ok && err.contains("pass --yes"), "{err}");
    let (ok, _, err) = admin(&["abtests", "delete", "--app", "ABT", &id_arg, "--yes"]);
    assert!(ok, "{err}");
    let (ok, _, err) = admin(&["abtests", "show", "--app", "ABT", &id_arg]);
    assert!(
        !ok && err.contains(&format!("A/B test {id} does not exist")),
        "{err}"
    );
    signal(&child, "-TERM");
    assert!(wait(child).0.success());
}
