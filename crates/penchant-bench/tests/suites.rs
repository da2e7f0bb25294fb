//! Each suite of the `penchant-bench` binary runs end to end on a small workload and prints its
//! table. The numbers are not checked: only that every workload ran and was reported.

use std::process::{Command, Output};

fn bench(args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_penchant-bench"));
    for (key, _) in std::env::vars() {
        if key.starts_with("PENCHANT_") || key == "RUST_LOG" {
            cmd.env_remove(key);
        }
    }
    cmd.args(args).output().unwrap()
}

/// The suite's stdout, after checking it succeeded.
fn ok(args: &[&str]) -> String {
    let out = bench(args);
    assert!(
        out.status.success(),
        "penchant-bench {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn help_lists_the_suites_and_a_missing_suite_is_a_usage_error() {
    let help = ok(&["--help"]);
    for suite in ["store", "bloom", "personalization"] {
        assert!(help.contains(suite), "{help}");
    }
    let store = ok(&["store", "--help"]);
    assert!(store.contains("--bigtable-emulator"), "{store}");
    assert_eq!(bench(&[]).status.code(), Some(2));
    assert_eq!(bench(&["nope"]).status.code(), Some(2));
}

/// Every suite, as `all` runs them.
const SUITES: [&str; 9] = [
    "store",
    "bloom",
    "personalization",
    "ingest",
    "mixed",
    "als",
    "topk",
    "recommend",
    "schema",
];

#[test]
fn every_suite_and_all_take_the_scale_and_json_flags() {
    for suite in SUITES.iter().chain(&["all"]) {
        let help = ok(&[suite, "--help"]);
        for flag in ["--scale", "--json", "small", "medium", "large"] {
            assert!(help.contains(flag), "{suite} --help has no {flag}:\n{help}");
        }
    }
    let all = ok(&["all", "--help"]);
    for suite in SUITES {
        assert!(
            all.contains(suite),
            "all --help does not name {suite}:\n{all}"
        );
    }
}

#[test]
fn an_unknown_scale_is_a_usage_error() {
    for args in [
        &["store", "--scale", "huge"][..],
        &["all", "--scale", "huge"],
        &["ingest", "--scale", "xl"],
    ] {
        let out = bench(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("possible values"), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}: nothing runs");
    }
}

#[test]
fn json_holds_the_machine_the_scale_and_the_suites_tables_with_numbers_as_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bench.json");
    let table = ok(&[
        "store",
        "--scale",
        "small",
        "--rows",
        "1000",
        "--writers",
        "2",
        "--reads",
        "200",
        "--no-sync",
        "--json",
        path.to_str().unwrap(),
    ]);
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let machine = &json["machine"];
    assert!(machine["cores"].as_u64().unwrap() >= 1, "{json}");
    assert!(
        machine["cpu"].as_str().is_some_and(|c| !c.is_empty()),
        "{json}"
    );
    assert!(machine["avx512"].is_boolean(), "{json}");
    assert!(machine["os"].is_string(), "{json}");
    assert_eq!(json["scale"], "small");
    assert!(json["started"].as_str().unwrap().ends_with('Z'), "{json}");
    let suites = json["suites"].as_array().unwrap();
    assert_eq!(suites.len(), 1);
    let store = &suites[0];
    assert_eq!(store["suite"], "store");
    assert_eq!(store["status"], "ok");
    assert!(store["seconds"].as_f64().unwrap() > 0.0);
    let tables = store["tables"].as_array().unwrap();
    assert_eq!(tables.len(), 1, "{store}");
    let columns: Vec<&str> = tables[0]["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(
        columns,
        ["workload", "penchant", "raw rocksdb", "ratio", "unit"]
    );
    let rows = tables[0]["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 7, "{store}");
    // --rows and --reads override the scale's sizes: 1,000 rows, not small's 2,000.
    assert!(tables[0]["title"].as_str().unwrap().contains("1,000 rows"));
    for row in rows {
        let workload = row[0].as_str().unwrap();
        assert!(table.contains(workload), "{workload} printed: {table}");
        for cell in &row.as_array().unwrap()[1..4] {
            assert!(cell.as_f64().is_some_and(|x| x > 0.0), "{row}");
        }
    }
    assert!(tables[0]["notes"].is_array());
}

#[test]
fn a_suite_whose_data_is_missing_fails_alone_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bench.json");
    let out = bench(&[
        "personalization",
        "--movielens",
        dir.path().to_str().unwrap(),
        "--json",
        path.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("MovieLens 100k not found"), "{stdout}");
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(json["suites"][0]["status"], "skipped", "{json}");
}

#[test]
fn store_suite_prints_every_workload_beside_raw_rocksdb() {
    let table = ok(&[
        "store",
        "--rows",
        "2000",
        "--writers",
        "4",
        "--reads",
        "500",
        "--no-sync",
    ]);
    assert!(table.contains("raw rocksdb"), "{table}");
    for workload in [
        "durable writes, 1 row each, 4 writers",
        "durable writes, batches of 500 rows",
        "scan, all cells",
        "scan, qualifier filter (1 of 4)",
        "point read, sequential",
        "point read latency p99",
    ] {
        assert!(table.contains(workload), "{workload}: {table}");
    }
}

#[test]
fn bloom_suite_prints_the_filters_and_the_seen_check() {
    let table = ok(&["bloom", "--small-only", "--lookups", "100000"]);
    assert!(table.contains("fastbloom"), "{table}");
    assert!(table.contains("16 KB"), "{table}");
    assert!(!table.contains("128 MB"), "--small-only: {table}");
    for approach in ["penchant-bloom in-process", "Penchant HTTP API (loopback)"] {
        let line = table
            .lines()
            .find(|l| l.starts_with(approach))
            .unwrap_or_else(|| panic!("{approach}: {table}"));
        assert!(!line.contains("failed"), "{line}");
    }
}

#[test]
fn personalization_suite_runs_on_a_small_movielens() {
    let dir = tempfile::tempdir().unwrap();
    let genres = ["Action", "Comedy", "Drama", "Horror"];
    let mut items =
        String::from("item_id:token\tmovie_title:token_seq\trelease_year:token\tclass:token_seq\n");
    for i in 1..=20 {
        items += &format!("{i}\tMovie {i}\t{}\t{}\n", 1990 + i % 5, genres[i % 4]);
    }
    let mut ratings = String::from("user_id:token\titem_id:token\trating:float\ttimestamp:float\n");
    for n in 0..600 {
        let (user, item) = (1 + n % 30, 1 + (n * 7) % 20);
        ratings += &format!("{user}\t{item}\t{}\t{}\n", 1 + n % 5, 880_000_000 + n * 60);
    }
    std::fs::write(dir.path().join("ml-100k.item"), items).unwrap();
    std::fs::write(dir.path().join("ml-100k.inter"), ratings).unwrap();

    let table = ok(&[
        "personalization",
        "--movielens",
        dir.path().to_str().unwrap(),
        "--pushes",
        "20",
        "--no-sync",
    ]);
    for workload in [
        "ingestion, HTTP, batches of 1000, 4 clients",
        "event -> profile latency p99",
        "full recompute from raw events",
        "plain scan of the same events",
        "full recompute from per-day aggregates",
    ] {
        assert!(table.contains(workload), "{workload}: {table}");
    }
    assert!(table.contains("(30 users)"), "{table}");
}

#[test]
fn recommend_suite_prints_rebuilds_every_model_and_the_quality_table() {
    let dir = tempfile::tempdir().unwrap();
    let mut items =
        String::from("item_id:token\tmovie_title:token_seq\trelease_year:token\tclass:token_seq\n");
    for i in 1..=40 {
        items += &format!("{i}\tMovie {i}\t{}\tDrama\n", 1990 + i % 5);
    }
    let mut ratings = String::from("user_id:token\titem_id:token\trating:float\ttimestamp:float\n");
    for n in 0..1200 {
        let (user, item) = (1 + n % 40, 1 + (n * 7 + n / 40) % 40);
        ratings += &format!("{user}\t{item}\t4\t{}\n", 880_000_000 + n * 600);
    }
    std::fs::write(dir.path().join("ml-100k.item"), items).unwrap();
    std::fs::write(dir.path().join("ml-100k.inter"), ratings).unwrap();
    let table = ok(&[
        "recommend",
        "--candidates",
        "500",
        "--dimension",
        "16",
        "--rebuilds",
        "5",
        "--seen",
        "50",
        "--requests",
        "40",
        "--concurrency",
        "2",
        "--no-sync",
        "--movielens",
        dir.path().to_str().unwrap(),
    ]);
    for row in [
        "exact top-1000 scan alone",
        "rebuild: scan + seen filter + queue write",
        "recommended-for-you (the user's queue)",
        "trending-facets (brand)",
        "bought-together",
        "related-products",
        "looking-similar",
        "Redis ZRANGE",
        "recommended-for-you, queue: als + trending x2",
        "recommended-for-you, queue: als + similar-to-liked 5 + related 10",
        "trending-items, unseen",
        // Table (4): the offline evaluation of each source and blend.
        "blends, each user's latest 20% of events held out",
        "popularity",
        "similar-to-liked",
        "als + similar-to-liked 5 + related 10 + trending x1",
        "als + trending x2 (the app's queue)",
    ] {
        assert!(table.contains(row), "no «{row}» in:\n{table}");
    }
}

#[test]
fn schema_suite_times_both_layouts_and_the_aggregates_per_application_profile() {
    // The Bigtable emulator's tables too where one is found (`scripts/test.sh` sets
    // BIGTABLE_EMULATOR_BINARY).
    let emulator = std::env::var_os("BIGTABLE_EMULATOR_BINARY").is_some();
    let table = ok(&["schema", "--scale", "small", "--events", "3000"]);
    for needle in [
        "full profile build on the embedded store",
        "heavy: a few users, many events",
        "light: many users, a few events",
        "wide/narrow",
        "aggregates/wide",
        "1 of 10",
        "10 of 10",
        "bytes stored per event",
        "on disk (RocksDB",
    ] {
        assert!(table.contains(needle), "no {needle:?} in:\n{table}");
    }
    assert_eq!(
        table.contains("on the Bigtable emulator store"),
        emulator,
        "{table}"
    );
}
