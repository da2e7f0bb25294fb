//! Defects found from outside, one test each: all-or-nothing batches, malformed partial
//! updates, array bodies, empty rebuilds, non-JSON errors, attribute names too long, hostile
//! filters, huge vector components, unbounded Recommend calls, batches and `getObjects` calls.

use futures::StreamExt;
use reqwest::header::{ALLOW, CONTENT_TYPE, HeaderMap};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::common::{ROOT, Server, shop};

/// A request with a raw body (or none); status, headers and the body as JSON (`Null` when it
/// is not JSON).
async fn raw(
    s: &Server,
    method: Method,
    path: &str,
    creds: Option<(&str, &str)>,
    body: Option<&'static str>,
) -> (StatusCode, HeaderMap, Value) {
    let mut req = s.http.request(method, format!("{}{path}", s.base));
    if let Some((app, key)) = creds {
        req = req
            .header("X-Algolia-Application-Id", app)
            .header("X-Algolia-API-Key", key);
    }
    if let Some(body) = body {
        req = req.body(body);
    }
    let resp = req.send().await.unwrap();
    let (status, headers) = (resp.status(), resp.headers().clone());
    let text = resp.text().await.unwrap();
    (
        status,
        headers,
        serde_json::from_str(&text).unwrap_or(Value::Null),
    )
}

/// An error answer: the status, JSON content, and Algolia's `{status, message}`.
fn assert_error(got: &(StatusCode, HeaderMap, Value), status: StatusCode, message: &str) {
    let (s, headers, body) = got;
    assert_eq!(*s, status, "{body}");
    assert_eq!(
        headers.get(CONTENT_TYPE).unwrap(),
        "application/json",
        "{body}"
    );
    assert_eq!(body["status"], status.as_u16(), "{body}");
    let text = body["message"].as_str().unwrap();
    assert!(text.contains(message), "{text:?} lacks {message:?}");
}

#[tokio::test]
async fn a_batch_with_an_unsupported_operation_writes_nothing() {
    let (s, admin) = shop().await;
    let a = Some(("SHOP", admin.as_str()));
    s.ok(
        Method::POST,
        "/1/indexes/*/batch",
        a,
        Some(json!({"requests": [
            {"action": "addObject", "indexName": "products", "body": {"objectID": "x"}},
            {"action": "addObject", "indexName": "products", "body": {"objectID": "y", "n": 1}},
            {"action": "addObject", "indexName": "other", "body": {"objectID": "o"}},
        ]})),
    )
    .await;
    let exists = |index: &'static str, id: &'static str| {
        let s = &s;
        async move {
            let path = format!("/1/indexes/{index}/{id}");
            s.call(Method::GET, &path, a, None).await.0 == StatusCode::OK
        }
    };
    let bad = json!({"objectID": "y", "n": {"_operation": "Nope", "value": 1}});
    let (status, body) = s
        .call(
            Method::POST,
            "/1/indexes/products/batch",
            a,
            Some(json!({"requests": [
                {"action": "addObject", "body": {"objectID": "new"}},
                {"action": "deleteObject", "body": {"objectID": "x"}},
                {"action": "partialUpdateObject", "body": bad},
            ]})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(!exists("products", "new").await, "added");
    assert!(exists("products", "x").await, "deleted");
    assert_eq!(
        body["message"],
        "partial update of attribute \"n\": unsupported _operation \"Nope\"; supported: \
         Increment, Decrement, Add, Remove, AddUnique, IncrementFrom, IncrementSet"
    );
    // Across indexes, a clear before it is not applied either.
    let (status, body) = s
        .call(
            Method::POST,
            "/1/indexes/*/batch",
            a,
            Some(json!({"requests": [
                {"action": "clear", "indexName": "other"},
                {"action": "addObject", "indexName": "products", "body": {"objectID": "new"}},
                {"action": "partialUpdateObject", "indexName": "products", "body": bad},
            ]})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(exists("other", "o").await, "cleared");
    assert!(!exists("products", "new").await, "added");
    let (_, y) = s.call(Method::GET, "/1/indexes/products/y", a, None).await;
    assert_eq!(y, json!({"objectID": "y", "n": 1}));
}

#[tokio::test]
async fn malformed_partial_updates_are_refused() {
    let (s, admin) = shop().await;
    let a = Some(("SHOP", admin.as_str()));
    let partial = |changes: Value| {
        let s = &s;
        async move {
            s.call(Method::POST, "/1/indexes/p/r/partial", a, Some(changes))
                .await
        }
    };
    let (status, body) = partial(json!({"n": 1, "tags": ["a"]})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    for (changes, message) in [
        (
            json!({"tags": {"_operation": "Add"}}),
            "partial update of attribute \"tags\": operation Add needs a value",
        ),
        (
            json!({"n": {"_operation": "Increment", "value": "x"}}),
            "partial update of attribute \"n\": operation Increment needs a number, not a string",
        ),
        (
            json!({"n": {"_operation": "Increment", "value": null}}),
            "partial update of attribute \"n\": operation Increment needs a number, not null",
        ),
        (
            json!({"n": {"_operation": "Decrement"}}),
            "partial update of attribute \"n\": operation Decrement needs a value",
        ),
        (
            json!({"tags": {"_operation": "Remove", "value": ["a"]}}),
            "partial update of attribute \"tags\": operation Remove needs a number or a string, not an array",
        ),
    ] {
        let (status, body) = partial(changes.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{changes}: {body}");
        assert_eq!(body["message"], message, "{changes}");
    }
    let (_, record) = s.call(Method::GET, "/1/indexes/p/r", a, None).await;
    assert_eq!(record, json!({"objectID": "r", "n": 1, "tags": ["a"]}));
    // An overflow to infinity (stored as `null` before) is refused, the number kept.
    let huge = json!({"big": {"_operation": "Increment", "value": 1.79e308}});
    assert_eq!(partial(huge.clone()).await.0, StatusCode::OK);
    let (status, body) = partial(huge).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .starts_with("partial update of attribute \"big\": operation Increment overflows"),
        "{body}"
    );
    // What exists keeps working, Algolia's conditional increments with it.
    let (status, body) = partial(json!({
        "n": {"_operation": "Decrement", "value": 3},
        "tags": {"_operation": "AddUnique", "value": "b"},
        "version": {"_operation": "IncrementFrom", "value": 0},
    }))
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let stale = json!({"n": 100, "version": {"_operation": "IncrementSet", "value": 1}});
    assert_eq!(
        partial(stale).await.0,
        StatusCode::OK,
        "ignored, not refused"
    );
    let (_, record) = s.call(Method::GET, "/1/indexes/p/r", a, None).await;
    assert_eq!(
        record,
        json!({"objectID": "r", "n": -2, "tags": ["a", "b"], "big": 1.79e308, "version": 1})
    );
}

#[tokio::test]
async fn bodies_that_should_be_objects_are_objects() {
    let (s, admin) = shop().await;
    let a = Some(("SHOP", admin.as_str()));
    let root = Some(("", ROOT));
    let (_, keys) = s.call(Method::GET, "/1/keys", a, None).await;
    let (_, settings) = s.call(Method::GET, "/1/seen/settings", a, None).await;
    // serde reads these arrays as the structs, field by field.
    let strategy = r#"[[{"eventName": "Viewed", "eventType": "view", "score": 10}],
                       [{"facetName": "brand", "score": 100}], 60]"#;
    let cases = [
        (Method::POST, "/1/keys", a, r#"[["admin"], "x"]"#),
        (Method::PUT, "/1/seen/settings", a, "[1024]"),
        (Method::POST, "/1/apps", root, r#"["ID", "n", 5]"#),
        (Method::POST, "/1/strategies/personalization", a, strategy),
    ];
    let mut got = Vec::new();
    for (method, path, creds, body) in cases {
        got.push((path, raw(&s, method, path, creds, Some(body)).await));
    }
    let statuses: Vec<_> = got.iter().map(|(path, got)| (*path, got.0)).collect();
    let refused: Vec<_> = got
        .iter()
        .map(|(path, _)| (*path, StatusCode::BAD_REQUEST))
        .collect();
    assert_eq!(statuses, refused);
    for (_, got) in &got {
        assert_error(
            got,
            StatusCode::BAD_REQUEST,
            "the request body must be a JSON object",
        );
    }
    assert_eq!(s.call(Method::GET, "/1/keys", a, None).await.1, keys);
    assert_eq!(
        s.call(Method::GET, "/1/seen/settings", a, None).await.1,
        settings
    );
    let (_, apps) = s.call(Method::GET, "/1/apps", root, None).await;
    assert_eq!(apps["apps"].as_array().unwrap().len(), 1, "{apps}");
    let (status, _) = s
        .call(Method::GET, "/1/strategies/personalization", a, None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "no strategy was saved");
    // Malformed JSON still says where.
    let got = raw(&s, Method::POST, "/1/keys", a, Some("[1,")).await;
    assert_error(&got, StatusCode::BAD_REQUEST, "Invalid JSON: ");
}

#[tokio::test]
async fn an_empty_rebuild_is_refused_unless_asked_for() {
    let (s, admin) = shop().await;
    let a = Some(("SHOP", admin.as_str()));
    let (status, body) = s
        .call(
            Method::POST,
            "/1/sets",
            a,
            Some(json!({"name": "blocked", "capacity": 1000, "errorRate": 0.01})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let madd = json!({"keys": ["u1", "u2"]});
    let (status, _) = s
        .call(Method::POST, "/1/sets/blocked/madd", a, Some(madd))
        .await;
    assert_eq!(status, StatusCode::OK);
    let exists = || {
        let s = &s;
        async move {
            let body = json!({"key": "u1"});
            let (_, r) = s
                .call(Method::POST, "/1/sets/blocked/exists", a, Some(body))
                .await;
            r["exists"].as_bool().unwrap()
        }
    };
    for body in [None, Some(""), Some("\n\r\n\n"), Some("\r")] {
        let got = raw(&s, Method::POST, "/1/sets/blocked/rebuild", a, body).await;
        assert_error(&got, StatusCode::BAD_REQUEST, "?allowEmpty=true");
        assert!(exists().await, "{body:?} emptied the set");
    }
    // A key after blank lines is a list; then an empty one, asked for.
    let path = "/1/sets/blocked/rebuild";
    let (status, _, body) = raw(&s, Method::POST, path, a, Some("\n\r\nu1\r\n")).await;
    assert_eq!(
        (status, &body["keys"]),
        (StatusCode::OK, &json!(1)),
        "{body}"
    );
    assert!(exists().await);
    let path = "/1/sets/blocked/rebuild?allowEmpty=true";
    let (status, _, body) = raw(&s, Method::POST, path, a, None).await;
    assert_eq!(
        (status, &body["keys"]),
        (StatusCode::OK, &json!(0)),
        "{body}"
    );
    assert!(!exists().await);
}

#[tokio::test]
async fn every_error_is_algolia_json() {
    let (s, admin) = shop().await;
    let a = Some(("SHOP", admin.as_str()));
    let root = Some(("", ROOT));
    // A path segment that is not UTF-8.
    for path in ["/1/indexes/products/%FF", "/1/keys/%FF", "/1/sets/%FF%FE"] {
        let got = raw(&s, Method::GET, path, a, None).await;
        assert_error(&got, StatusCode::BAD_REQUEST, "");
    }
    // A query string that does not parse.
    let path = "/1/indexes/products/x/partial?createIfNotExists=maybe";
    let got = raw(&s, Method::POST, path, a, Some("{}")).await;
    assert_error(&got, StatusCode::BAD_REQUEST, "createIfNotExists");
    // A route without this method, and no route.
    let got = raw(&s, Method::PATCH, "/1/apps/X", root, None).await;
    assert_error(
        &got,
        StatusCode::METHOD_NOT_ALLOWED,
        "method PATCH is not allowed on /1/apps/X",
    );
    let allow = got.1.get(ALLOW).unwrap().to_str().unwrap();
    assert!(allow.contains("PUT") && allow.contains("DELETE"), "{allow}");
    let got = raw(&s, Method::GET, "/1/nope", None, None).await;
    assert_error(&got, StatusCode::NOT_FOUND, "no route for GET /1/nope");
}

#[tokio::test]
async fn attribute_names_are_bounded_so_events_on_records_always_work() {
    let (s, admin) = shop().await;
    let a = Some(("SHOP", admin.as_str()));
    let long = "a".repeat(20_000);
    let refused = "bytes long (by dotted path), the limit is 1000";
    // The name, cut in the message.
    let shown = format!("{}…\"", &long[..50]);
    for (method, path, body) in [
        (Method::PUT, "/1/indexes/p/r", json!({ &long: 1 })),
        (
            Method::POST,
            "/1/indexes/p/batch",
            json!({"requests": [{"action": "addObject", "body": {"objectID": "r", "x": { &long: 1 }}}]}),
        ),
        (
            Method::POST,
            "/1/indexes/p/r/partial",
            json!({ "tags": [{ &long: "v" }] }),
        ),
    ] {
        let (status, body) = s.call(method, path, a, Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
        let message = body["message"].as_str().unwrap();
        assert!(
            message.contains(refused) && message.len() < 200,
            "{message}"
        );
        assert!(message.contains(&shown), "{message}");
    }
    // The longest name, quotes only (doubled in the qualifier's CSV), with the longest event
    // name, also quotes: the event is stored.
    let name = "\"".repeat(1000);
    let record = json!({ &name: "v", "brand": "Apple", "description": "d".repeat(5000) });
    s.ok(Method::PUT, "/1/indexes/p/r", a, Some(record)).await;
    let event = json!({"events": [{"eventType": "conversion", "eventName": "\"".repeat(64),
        "index": "p", "userToken": "u", "objectIDs": ["r"]}]});
    s.ok(Method::POST, "/1/events", a, Some(event)).await;
}

/// Issue 29: a deeply nested filter overflowed the worker's stack and aborted the process, every
/// app down, reachable with a search key. Each way in is now a 400, and the server lives on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deeply_nested_filters_are_refused_not_a_crash() {
    use base64::Engine as _;
    let (s, admin) = shop().await;
    let a = Some(("SHOP", admin.as_str()));
    s.ok(
        Method::PUT,
        "/1/indexes/shop/x1",
        a,
        Some(json!({"brand": "b"})),
    )
    .await;
    let search = s.key("SHOP", &admin, &["search"]).await;
    let browse = s.key("SHOP", &admin, &["browse"]).await;
    let (searching, browsing) = (
        Some(("SHOP", search.as_str())),
        Some(("SHOP", browse.as_str())),
    );
    let nested = format!("{}brand:b{}", "(".repeat(4000), ")".repeat(4000));
    // Under the length limit, each far deeper than a worker's 2 MiB stack held.
    let nots = format!("{}brand:b", "NOT ".repeat(15_000));
    let unclosed = "(".repeat(60_000);
    let deep = "nesting deeper than 64 levels (parentheses and NOTs)";
    for filter in [&nested, &nots, &unclosed] {
        let request = |params: Value| {
            json!({"requests": [{"indexName": "shop", "model": "trending-items", "threshold": 0,
                "queryParameters": params["q"], "fallbackParameters": params["f"]}]})
        };
        for (params, message) in [
            (
                json!({"q": {"filters": filter}}),
                "requests[0]: queryParameters: filters: ",
            ),
            (
                json!({"q": {}, "f": {"filters": filter}}),
                "requests[0]: fallbackParameters: filters: ",
            ),
        ] {
            let (status, got) = s
                .call(
                    Method::POST,
                    "/1/indexes/*/recommendations",
                    searching,
                    Some(request(params)),
                )
                .await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{got}");
            let text = got["message"].as_str().unwrap();
            assert!(text.starts_with(message) && text.contains(deep), "{text}");
        }
        let body = json!({ "filters": filter });
        for (path, creds) in [
            ("/1/indexes/shop/browse", browsing),
            ("/1/indexes/shop/deleteByQuery", a),
        ] {
            let (status, got) = s.call(Method::POST, path, creds, Some(body.clone())).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{path}");
            let message = got["message"].as_str().unwrap();
            assert!(
                message.starts_with("filters: ") && message.contains(deep),
                "{message}"
            );
        }
        // A cursor carries its browse's parameters: a forged one is parsed as they are.
        let cursor = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(json!({"after": "", "params": {"filters": filter}}).to_string());
        let (status, got) = s
            .call(
                Method::POST,
                "/1/indexes/shop/browse",
                browsing,
                Some(json!({ "cursor": cursor })),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{got}");
        assert!(got["message"].as_str().unwrap().contains(deep), "{got}");
    }
    // Longer ones are refused for their length.
    let (status, got) = s
        .call(
            Method::POST,
            "/1/indexes/shop/browse",
            browsing,
            Some(json!({ "filters": "(".repeat(70_000) })),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{got}");
    assert_eq!(got["message"], "filters: 70000 bytes, the limit is 65536");
    // Nothing was deleted, and the server still answers.
    let (status, _) = s.call(Method::GET, "/1/indexes/shop/x1", a, None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = s.call(Method::GET, "/health", None, None).await;
    assert_eq!(status, StatusCode::OK);
    // Lists of filters are bounded too.
    let many: Vec<String> = (0..1001).map(|i| format!("brand:b{i}")).collect();
    let (status, got) = s
        .call(
            Method::POST,
            "/1/indexes/shop/browse",
            browsing,
            Some(json!({ "facetFilters": many })),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{got}");
    assert_eq!(
        got["message"],
        "facetFilters: 1001 filters, the limit is 1000"
    );
}

/// Issue 29: a Recommend call had no cap on its requests (10,000 took 3.6 s and 20 MB).
#[tokio::test]
async fn a_recommend_call_holds_at_most_100_requests() {
    let (s, admin) = shop().await;
    let search = s.key("SHOP", &admin, &["search"]).await;
    let k = Some(("SHOP", search.as_str()));
    let one = json!({"indexName": "shop", "model": "trending-items", "threshold": 0});
    let call = |n: usize| {
        let body = json!({ "requests": vec![one.clone(); n] });
        let s = &s;
        async move {
            s.call(Method::POST, "/1/indexes/*/recommendations", k, Some(body))
                .await
        }
    };
    let (status, body) = call(100).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["results"].as_array().unwrap().len(), 100);
    let (status, body) = call(101).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(
        body["message"],
        "requests: 101 requests in one call, the limit is 100"
    );
}

/// A batch had no cap on its operations: the 2 MB body holds about 100,000 short ones, all
/// checked, then written at once. Past 10,000 a batch is refused whole before anything is
/// written, on either batch route; `getObjects` takes at most 1,000 records.
#[tokio::test]
async fn a_batch_holds_at_most_10000_operations_and_get_objects_1000() {
    let (s, admin) = shop().await;
    let a = Some(("SHOP", admin.as_str()));
    let adds = |n: usize, index: Option<&str>| -> Value {
        let requests: Vec<Value> = (0..n)
            .map(|i| {
                let mut r = json!({"action": "addObject", "body": {"objectID": format!("o{i}")}});
                if let Some(index) = index {
                    r["indexName"] = json!(index);
                }
                r
            })
            .collect();
        json!({ "requests": requests })
    };
    let exists = |index: &'static str, id: &'static str| {
        let s = &s;
        async move {
            let path = format!("/1/indexes/{index}/{id}");
            s.call(Method::GET, &path, a, None).await.0 == StatusCode::OK
        }
    };

    // One past the cap: 400, and nothing of it written.
    let (status, body) = s
        .call(
            Method::POST,
            "/1/indexes/products/batch",
            a,
            Some(adds(10_001, None)),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{}", body["message"]);
    assert_eq!(
        body["message"],
        "requests: 10001 requests in one call, the limit is 10000"
    );
    assert!(
        !exists("products", "o0").await,
        "a refused batch was written"
    );
    assert!(
        !exists("products", "o10000").await,
        "a refused batch was written"
    );
    let (status, body) = s
        .call(
            Method::POST,
            "/1/indexes/*/batch",
            a,
            Some(adds(10_001, Some("other"))),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{}", body["message"]);
    assert_eq!(
        body["message"],
        "requests: 10001 requests in one call, the limit is 10000"
    );
    assert!(!exists("other", "o0").await, "a refused batch was written");

    // At the cap: written, every one.
    let body = s
        .ok(
            Method::POST,
            "/1/indexes/products/batch",
            a,
            Some(adds(10_000, None)),
        )
        .await;
    assert_eq!(body["objectIDs"].as_array().unwrap().len(), 10_000);
    assert!(exists("products", "o0").await);
    assert!(exists("products", "o9999").await);
    let body = s
        .ok(
            Method::POST,
            "/1/indexes/*/batch",
            a,
            Some(adds(10_000, Some("other"))),
        )
        .await;
    assert_eq!(body["objectIDs"].as_array().unwrap().len(), 10_000);
    assert!(exists("other", "o9999").await);

    // getObjects: 1,000 records at most.
    let get = |n: usize| {
        let requests: Vec<Value> = (0..n)
            .map(|i| json!({"indexName": "products", "objectID": format!("o{i}")}))
            .collect();
        let s = &s;
        async move {
            s.call(
                Method::POST,
                "/1/indexes/*/objects",
                a,
                Some(json!({ "requests": requests })),
            )
            .await
        }
    };
    let (status, body) = get(1_000).await;
    assert_eq!(status, StatusCode::OK, "{}", body["message"]);
    let results = body["results"].as_array().unwrap();
    assert_eq!(results.len(), 1_000);
    assert_eq!(results[999]["objectID"], "o999");
    let (status, body) = get(1_001).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{}", body["message"]);
    assert_eq!(
        body["message"],
        "requests: 1001 requests in one call, the limit is 1000"
    );
}

/// An import refused after its first line (the app exists) answers its reason to an upload
/// still streaming. The server reads the rest of the upload before it answers, so a client
/// never writes into a closed connection: `penchant apps import` once got a broken pipe
/// instead of the message (`e2e portability::an_app_moves_...`, a timing this test does not
/// force; it checks the answer such an upload gets).
#[tokio::test]
async fn an_import_refused_early_answers_its_reason_to_a_large_upload() {
    let (s, _) = shop().await;
    let export = s
        .http
        .get(format!("{}/1/apps/SHOP/export", s.base))
        .header("X-Algolia-API-Key", ROOT)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let header = export.lines().next().unwrap();
    // The header, then 16 MB streamed in pieces a little apart, as a file is uploaded: the
    // refusal comes long before the upload ends.
    let first = bytes::Bytes::from(format!("{header}\n"));
    let piece = bytes::Bytes::from(format!("{}\n", "x".repeat(64 << 10)));
    let pieces = futures::stream::iter(
        std::iter::once(first).chain(std::iter::repeat_n(piece, 256)),
    )
    .then(|piece| async move {
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        Ok::<_, std::io::Error>(piece)
    });
    let resp = s
        .http
        .post(format!("{}/1/apps/SHOP/import", s.base))
        .header("X-Algolia-API-Key", ROOT)
        .body(reqwest::Body::wrap_stream(pieces))
        .send()
        .await
        .expect("the answer, not a broken pipe");
    assert_eq!(resp.status(), StatusCode::CONFLICT);
    let answer: Value = resp.json().await.unwrap();
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .contains("exists on this node"),
        "{answer}"
    );
}
