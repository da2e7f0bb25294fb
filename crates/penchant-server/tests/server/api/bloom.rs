//! Key sets and seen filters over HTTP.

use crate::common::{Server, shop};
use penchant_store::{ReadRows, RowSet};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

fn keys(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

fn bools(v: &Value) -> Vec<bool> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_bool().unwrap())
        .collect()
}

/// `mexists` of set `blocked`.
async fn mexists(s: &Server, creds: Option<(&str, &str)>, keys: &[String]) -> Vec<bool> {
    let path = "/1/sets/blocked/mexists";
    let body = s
        .ok(Method::POST, path, creds, Some(json!({ "keys": keys })))
        .await;
    bools(&body["exists"])
}

/// POST a key list as the streamed body of a rebuild.
async fn rebuild(
    s: &Server,
    creds: (&str, &str),
    set: &str,
    keys: &[String],
) -> (StatusCode, Value) {
    let resp = s
        .http
        .post(format!("{}/1/sets/{set}/rebuild", s.base))
        .header("X-Algolia-Application-Id", creds.0)
        .header("X-Algolia-API-Key", creds.1)
        .header("Content-Type", "text/plain")
        .body(keys.join("\n"))
        .send()
        .await
        .unwrap();
    let status = resp.status();
    (status, resp.json().await.unwrap())
}

#[tokio::test]
async fn key_sets_reserve_add_check_rebuild() {
    let (s, admin) = shop().await;
    let editor = s.key("SHOP", &admin, &["editSettings"]).await;
    let adder = s.key("SHOP", &admin, &["addObject"]).await;
    let search = s.key("SHOP", &admin, &["search"]).await;
    let (e, a, k) = (
        Some(("SHOP", editor.as_str())),
        Some(("SHOP", adder.as_str())),
        Some(("SHOP", search.as_str())),
    );

    // Bad parameters: clear 400s.
    let good =
        json!({"name": "blocked", "capacity": 10000, "errorRate": 0.01, "partitionBytes": 1024});
    let with = |field: &str, value: Value| {
        let mut body = good.clone();
        body[field] = value;
        body
    };
    let mut missing = good.clone();
    missing.as_object_mut().unwrap().remove("capacity");
    for (body, needle) in [
        (with("capacity", json!(0)), "capacity must be at least 1"),
        (
            with("errorRate", json!(0)),
            "errorRate must be between 0 and 1",
        ),
        (
            with("errorRate", json!(1)),
            "errorRate must be between 0 and 1",
        ),
        (
            with("errorRate", json!(1.5)),
            "errorRate must be between 0 and 1",
        ),
        (
            with("partitionBytes", json!(100)),
            "partitionBytes must be a multiple of 64",
        ),
        (
            with("maxErrorRate", json!(0.001)),
            "maxErrorRate must be at least errorRate",
        ),
        (
            with("name", json!("bad name!")),
            "set names are 1 to 64 characters",
        ),
        (with("extra", json!(1)), "extra"),
        (missing, "capacity"),
    ] {
        let (status, resp) = s.call(Method::POST, "/1/sets", e, Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{resp}");
        let message = resp["message"].as_str().unwrap();
        assert!(message.contains(needle), "{message} should say {needle}");
    }
    let (status, _) = s.call(Method::POST, "/1/sets", k, Some(good.clone())).await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "reserving needs editSettings"
    );

    let (status, info) = s.call(Method::POST, "/1/sets", e, Some(good.clone())).await;
    assert_eq!(status, StatusCode::CREATED, "{info}");
    let partitions = info["partitions"].as_u64().unwrap();
    assert!(partitions > 4, "{info}");
    assert_eq!(info["keys"], 0);
    let (status, _) = s.call(Method::POST, "/1/sets", e, Some(good)).await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, body) = s
        .call(
            Method::POST,
            "/1/sets/nope/exists",
            k,
            Some(json!({"key": "x"})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["message"], "set nope does not exist");

    // Malformed commands.
    for (path, body, needle) in [
        (
            "/1/sets/blocked/madd",
            json!({"key": "x"}),
            "missing field `keys`",
        ),
        (
            "/1/sets/blocked/madd",
            json!({"keys": [1]}),
            "keys must be an array of strings",
        ),
        (
            "/1/sets/blocked/add",
            json!({"key": ["x"]}),
            "key must be a string",
        ),
        (
            "/1/sets/blocked/add",
            json!({"key": "x", "more": 1}),
            "unknown field `more`",
        ),
        (
            "/1/sets/blocked/madd",
            json!(["x"]),
            "must be an object with keys",
        ),
    ] {
        let (status, resp) = s.call(Method::POST, path, a, Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {resp}");
        assert!(resp["message"].as_str().unwrap().contains(needle), "{resp}");
    }
    let (status, resp) = s
        .call(
            Method::POST,
            "/1/sets/blocked/fly",
            a,
            Some(json!({"key": "x"})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(resp["message"], "unknown command `fly`");

    // madd / mexists: no false negatives, few false positives.
    let first = keys("user:", 1000);
    let body = s
        .ok(
            Method::POST,
            "/1/sets/blocked/madd",
            a,
            Some(json!({"keys": first})),
        )
        .await;
    assert!(bools(&body["added"]).iter().all(|b| *b));
    let (_, body) = s
        .call(
            Method::POST,
            "/1/sets/blocked/madd",
            a,
            Some(json!({"keys": first[..10]})),
        )
        .await;
    assert!(
        bools(&body["added"]).iter().all(|b| !*b),
        "added twice: {body}"
    );
    let (status, _) = s
        .call(
            Method::POST,
            "/1/sets/blocked/madd",
            k,
            Some(json!({"keys": ["x"]})),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "adding needs addObject");
    let others = keys("other:", 2000);
    let found = mexists(&s, k, &first).await;
    assert!(found.iter().all(|b| *b), "a false negative");
    let found = mexists(&s, k, &others).await;
    let fp = found.iter().filter(|b| **b).count();
    assert!(fp < 40, "{fp} false positives of 2000 at 10% of capacity");
    let (_, body) = s
        .call(
            Method::POST,
            "/1/sets/blocked/add",
            a,
            Some(json!({"key": "single"})),
        )
        .await;
    assert_eq!(body["added"], true);
    let (_, body) = s
        .call(
            Method::POST,
            "/1/sets/blocked/exists",
            k,
            Some(json!({"key": "single"})),
        )
        .await;
    assert_eq!(body["exists"], true);

    let info = s.ok(Method::GET, "/1/sets/blocked", k, None).await;
    assert_eq!(info["keys"], 1001, "{info}");
    let fill = info["fillRatio"].as_f64().unwrap();
    let rate = info["estimatedErrorRate"].as_f64().unwrap();
    assert!(fill > 0.0 && rate > 0.0 && rate < 0.01, "{info}");
    assert_eq!(info["sizeBytes"], partitions * 1024);

    // Each partition is one cell of about the partition's size.
    let rows = s
        .store
        .read_all("set_partitions", ReadRows::new(RowSet::all()))
        .await
        .unwrap();
    assert!(!rows.is_empty() && rows.len() as u64 <= partitions);
    for row in &rows {
        let filters: Vec<_> = row
            .family("p")
            .filter(|c| &c.qualifier[..] == b"f")
            .collect();
        assert_eq!(filters.len(), 1);
        assert!((1024..1024 + 64).contains(&filters[0].value.len()));
    }

    // A rebuild switches to a new generation made of the list alone.
    let second = keys("member:", 5000);
    let (status, body) = rebuild(&s, ("SHOP", &editor), "blocked", &second).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["state"], "done");
    assert_eq!(body["keys"], 5000);
    let found = mexists(&s, k, &second).await;
    assert!(found.iter().all(|b| *b), "a false negative");
    let found = mexists(&s, k, &first).await;
    let stale = found.iter().filter(|b| **b).count();
    assert!(
        stale < 60,
        "{stale} of the old generation's keys still found"
    );
    let (_, info) = s.call(Method::GET, "/1/sets/blocked", k, None).await;
    assert_eq!(info["keys"], 5000, "{info}");
    assert_eq!(info["lastRebuild"]["state"], "done");
    let generation = info["generation"].clone();

    // Too many keys for the set: the rebuild is refused and the set is unchanged.
    let (status, body) = rebuild(&s, ("SHOP", &editor), "blocked", &keys("flood:", 60_000)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("rebuild refused") && message.contains("maxErrorRate"),
        "{message}"
    );
    let (_, info) = s.call(Method::GET, "/1/sets/blocked", k, None).await;
    assert_eq!(info["generation"], generation);
    assert_eq!(info["lastRebuild"]["state"], "refused", "{info}");
    let found = mexists(&s, k, &second).await;
    assert!(found.iter().all(|b| *b), "the kept generation lost keys");

    // Another app does not see the set; deletion removes it.
    let other = s.app("OTHER").await;
    let (status, _) = s
        .call(
            Method::GET,
            "/1/sets/blocked",
            Some(("OTHER", &other)),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, list) = s.call(Method::GET, "/1/sets", k, None).await;
    assert_eq!(list["sets"][0]["name"], "blocked");
    let (status, _) = s.call(Method::DELETE, "/1/sets/blocked", e, None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = s.call(Method::GET, "/1/sets/blocked", k, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let left = s
        .store
        .read_all("set_partitions", ReadRows::new(RowSet::all()))
        .await
        .unwrap();
    assert!(left.is_empty(), "partitions left after deletion");
}

#[tokio::test]
async fn seen_filters_from_events_api_rotation_and_deletion() {
    let (s, admin) = shop().await;
    let search = s.key("SHOP", &admin, &["search"]).await;
    let deleter = s.key("SHOP", &admin, &["deleteObject"]).await;
    let (k, adm) = (
        Some(("SHOP", search.as_str())),
        Some(("SHOP", admin.as_str())),
    );

    let (_, settings) = s.call(Method::GET, "/1/seen/settings", k, None).await;
    assert_eq!(
        settings,
        json!({"filterBits": 131072, "errorRate": 0.01, "eventTypes": ["click", "conversion", "view"],
               "negativeEventNames": [], "hideDays": 30})
    );
    for (body, needle) in [
        (
            json!({"filterBits": 1000}),
            "filterBits must be a multiple of 512",
        ),
        (json!({"errorRate": 0}), "errorRate must be between 0 and 1"),
        (json!({"eventTypes": ["purchase"]}), "purchase"),
    ] {
        let (status, resp) = s
            .call(Method::PUT, "/1/seen/settings", adm, Some(body))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{resp}");
        assert!(resp["message"].as_str().unwrap().contains(needle), "{resp}");
    }
    let (status, _) = s
        .call(Method::PUT, "/1/seen/settings", k, Some(json!({})))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // With `eventTypes: ["view"]` (a shop whose items are clicked and bought again), views mark
    // items seen and clicks do not.
    s.ok(
        Method::PUT,
        "/1/seen/settings",
        adm,
        Some(json!({"eventTypes": ["view"]})),
    )
    .await;
    let event = |kind: &str, ids: &[&str]| json!({"eventType": kind, "eventName": "E", "index": "items", "userToken": "u1", "objectIDs": ids});
    let events = json!({"events": [event("view", &["a", "b"]), event("click", &["c"])]});
    s.ok(Method::POST, "/1/events", k, Some(events)).await;
    let candidates = json!({"objectIDs": ["a", "b", "c", "d"]});
    let body = s
        .ok(
            Method::POST,
            "/1/seen/users/u1/unseen",
            k,
            Some(candidates.clone()),
        )
        .await;
    assert_eq!(body["objectIDs"], json!(["c", "d"]));

    // The API marks and checks too.
    let (_, body) = s
        .call(
            Method::POST,
            "/1/seen/users/u1/madd",
            k,
            Some(json!({"objectIDs": ["d", "a"]})),
        )
        .await;
    assert_eq!(body["added"], json!([true, false]));
    let (_, body) = s
        .call(
            Method::POST,
            "/1/seen/users/u1/add",
            k,
            Some(json!({"objectID": "e"})),
        )
        .await;
    assert_eq!(body["added"], true);
    let (_, body) = s
        .call(
            Method::POST,
            "/1/seen/users/u1/mexists",
            k,
            Some(candidates),
        )
        .await;
    assert_eq!(body["exists"], json!([true, true, false, true]));
    let (_, body) = s
        .call(
            Method::POST,
            "/1/seen/users/u1/exists",
            k,
            Some(json!({"objectID": "c"})),
        )
        .await;
    assert_eq!(body["exists"], false);
    let info = s.ok(Method::GET, "/1/seen/users/u1", k, None).await;
    assert_eq!(info["keys"], 4);
    assert_eq!(info["filterBits"], 131072);
    assert_eq!(info["rotated"], false);
    let (status, _) = s.call(Method::GET, "/1/seen/users/nobody", k, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) = s
        .call(
            Method::POST,
            "/1/seen/users/bad%20token/add",
            k,
            Some(json!({"objectID": "x"})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    // A small filter rotates instead of overfilling: recent items stay seen and the
    // estimated false-positive rate stays near the design rate.
    s.ok(
        Method::PUT,
        "/1/seen/settings",
        adm,
        Some(json!({"filterBits": 4096, "errorRate": 0.01, "eventTypes": ["view", "click"]})),
    )
    .await;
    let items = keys("item", 3000);
    for chunk in items.chunks(500) {
        s.ok(
            Method::POST,
            "/1/seen/users/u2/madd",
            k,
            Some(json!({"objectIDs": chunk})),
        )
        .await;
    }
    let (_, info) = s.call(Method::GET, "/1/seen/users/u2", k, None).await;
    let capacity = info["capacity"].as_u64().unwrap();
    assert!(capacity < 1000, "{info}");
    assert_eq!(info["rotated"], true, "{info}");
    assert!(info["keys"].as_u64().unwrap() < capacity, "{info}");
    let rate = info["estimatedErrorRate"].as_f64().unwrap();
    assert!(rate <= 0.021, "{info}");
    let recent = &items[items.len() - capacity as usize..];
    let (_, body) = s
        .call(
            Method::POST,
            "/1/seen/users/u2/mexists",
            k,
            Some(json!({"objectIDs": recent})),
        )
        .await;
    assert!(
        bools(&body["exists"]).iter().all(|b| *b),
        "a recent item was forgotten"
    );
    let fresh = keys("fresh", 2000);
    let (_, body) = s
        .call(
            Method::POST,
            "/1/seen/users/u2/unseen",
            k,
            Some(json!({"objectIDs": fresh})),
        )
        .await;
    let unseen = body["objectIDs"].as_array().unwrap().len();
    assert!(unseen > 1900, "only {unseen} of 2000 fresh items unseen");

    // Deleting the user token deletes the filter.
    let (status, _) = s
        .call(
            Method::DELETE,
            "/1/usertokens/u1",
            Some(("SHOP", &deleter)),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = s.call(Method::GET, "/1/seen/users/u1", k, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = s
        .call(
            Method::DELETE,
            "/1/seen/users/u2",
            Some(("SHOP", &deleter)),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = s.call(Method::GET, "/1/seen/users/u2", k, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
