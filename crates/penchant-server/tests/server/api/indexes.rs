//! Whole indexes and the rest of Algolia's client surface over HTTP: settings and existence,
//! listing, browsing, copies and moves, deletion, several records at once, tasks, routes
//! Penchant does not serve, gzip bodies and request ids.

use std::io::Write as _;

use crate::common::{Server, assert_error, shop};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

async fn records(s: &Server, creds: Option<(&str, &str)>, index: &str, records: Value) {
    let requests: Vec<Value> = records
        .as_array()
        .unwrap()
        .iter()
        .map(|r| json!({"action": "addObject", "body": r}))
        .collect();
    s.ok(
        Method::POST,
        &format!("/1/indexes/{index}/batch"),
        creds,
        Some(json!({ "requests": requests })),
    )
    .await;
}

fn ids(hits: &Value) -> Vec<String> {
    hits.as_array()
        .unwrap()
        .iter()
        .map(|h| h["objectID"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn settings_are_settings_and_say_whether_an_index_exists() {
    let (s, admin) = shop().await;
    let a = Some(("SHOP", admin.as_str()));
    // No index yet: 404, as index_exists reads it.
    assert_error(
        s.call(Method::GET, "/1/indexes/products/settings", a, None)
            .await,
        StatusCode::NOT_FOUND,
        "Index does not exist",
    );
    let body = s.ok(Method::PUT,
            "/1/indexes/products/settings?forwardToReplicas=true",
            a,
            Some(json!({"attributesForFaceting": ["brand", "filterOnly(price)"], "customRanking": ["desc(sales)"]}))).await;
    assert!(body["taskID"].as_i64().unwrap() > 0);
    assert!(body["updatedAt"].as_str().unwrap().ends_with('Z'));
    // Merged: a later change keeps the other settings; null removes one.
    let (status, _) = s
        .call(
            Method::PUT,
            "/1/indexes/products/settings",
            a,
            Some(json!({"hitsPerPage": 5, "customRanking": null})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, got) = s
        .call(Method::GET, "/1/indexes/products/settings", a, None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        got,
        json!({"attributesForFaceting": ["brand", "filterOnly(price)"], "hitsPerPage": 5})
    );
    // Never a record.
    assert_error(
        s.call(Method::GET, "/1/indexes/products/settings-record", a, None)
            .await,
        StatusCode::NOT_FOUND,
        "ObjectID does not exist",
    );
    let (_, listed) = s.call(Method::GET, "/1/indexes", a, None).await;
    assert_eq!(listed["items"][0]["entries"], 0, "{listed}");
    // Bad settings are refused, and change nothing.
    assert_error(
        s.call(
            Method::PUT,
            "/1/indexes/products/settings",
            a,
            Some(json!({"attributesForFaceting": "brand"})),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "attributesForFaceting must be a list",
    );
    assert_error(
        s.call(
            Method::PUT,
            "/1/indexes/products/settings",
            a,
            Some(json!({"attributesForFaceting": ["searchable(brand"]})),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "searchable(brand",
    );
    let (_, again) = s
        .call(Method::GET, "/1/indexes/products/settings", a, None)
        .await;
    assert_eq!(again, got);
    // A record write creates an index too; defaults show until settings are set.
    records(&s, a, "other", json!([{"objectID": "x"}])).await;
    let (status, other) = s
        .call(Method::GET, "/1/indexes/other/settings", a, None)
        .await;
    assert_eq!(
        (status, other),
        (StatusCode::OK, json!({"attributesForFaceting": []}))
    );
    // The ACLs: settings to read, editSettings to write.
    let search = s.key("SHOP", &admin, &["search"]).await;
    let reader = s.key("SHOP", &admin, &["settings"]).await;
    assert_eq!(
        s.call(
            Method::GET,
            "/1/indexes/products/settings",
            Some(("SHOP", &search)),
            None
        )
        .await
        .0,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        s.call(
            Method::GET,
            "/1/indexes/products/settings",
            Some(("SHOP", &reader)),
            None
        )
        .await
        .0,
        StatusCode::OK
    );
    assert_eq!(
        s.call(
            Method::PUT,
            "/1/indexes/products/settings",
            Some(("SHOP", &reader)),
            Some(json!({}))
        )
        .await
        .0,
        StatusCode::FORBIDDEN
    );
}

#[tokio::test]
async fn indexes_are_listed_cleared_deleted_and_read_several_records_at_once() {
    let (s, admin) = shop().await;
    let a = Some(("SHOP", admin.as_str()));
    records(
        &s,
        a,
        "products",
        json!([{"objectID": "p1", "brand": "Apple"}, {"objectID": "p2", "brand": "Sony"}]),
    )
    .await;
    // save_object: a record without an objectID gets one; 201.
    let (status, saved) = s
        .call(
            Method::POST,
            "/1/indexes/products",
            a,
            Some(json!({"brand": "Nokia"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{saved}");
    let generated = saved["objectID"].as_str().unwrap().to_owned();
    assert!(saved["createdAt"].as_str().unwrap().ends_with('Z'));
    records(&s, a, "blog", json!([{"objectID": "b1"}])).await;

    let listed = s.ok(Method::GET, "/1/indexes", a, None).await;
    let items = listed["items"].as_array().unwrap();
    let names: Vec<&str> = items.iter().map(|i| i["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["blog", "products"]);
    assert_eq!(items[1]["entries"], 3);
    assert!(items[1]["createdAt"].as_str().unwrap().ends_with('Z'));
    assert_eq!(items[1]["pendingTask"], false);

    // Several records of several indexes, in request order, null where none.
    let got = s
        .ok(
            Method::POST,
            "/1/indexes/*/objects",
            a,
            Some(json!({"requests": [
                {"indexName": "products", "objectID": "p2", "attributesToRetrieve": ["brand"]},
                {"indexName": "products", "objectID": "nope"},
                {"indexName": "blog", "objectID": "b1"},
                {"indexName": "products", "objectID": generated},
            ]})),
        )
        .await;
    assert_eq!(
        got["results"],
        json!([{"objectID": "p2", "brand": "Sony"}, null, {"objectID": "b1"}, {"objectID": generated, "brand": "Nokia"}])
    );

    // Clear keeps the index; delete removes it and its settings.
    let cleared = s
        .ok(Method::POST, "/1/indexes/products/clear", a, None)
        .await;
    assert!(cleared["updatedAt"].is_string());
    let (status, _) = s
        .call(Method::GET, "/1/indexes/products/settings", a, None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_error(
        s.call(Method::GET, "/1/indexes/products/p1", a, None).await,
        StatusCode::NOT_FOUND,
        "ObjectID does not exist",
    );
    let deleter = s.key("SHOP", &admin, &["deleteObject"]).await;
    assert_eq!(
        s.call(
            Method::DELETE,
            "/1/indexes/blog",
            Some(("SHOP", &deleter)),
            None
        )
        .await
        .0,
        StatusCode::FORBIDDEN,
        "deleting an index takes deleteIndex"
    );
    let deleted = s.ok(Method::DELETE, "/1/indexes/blog", a, None).await;
    assert!(deleted["deletedAt"].is_string());
    let task = deleted["taskID"].as_i64().unwrap();
    let (status, t) = s
        .call(
            Method::GET,
            &format!("/1/indexes/blog/task/{task}"),
            a,
            None,
        )
        .await;
    assert_eq!(
        (status, &t["status"]),
        (StatusCode::OK, &json!("published"))
    );
    assert_error(
        s.call(Method::GET, "/1/indexes/blog/settings", a, None)
            .await,
        StatusCode::NOT_FOUND,
        "Index does not exist",
    );
    assert_error(
        s.call(Method::GET, "/1/indexes/blog/b1", a, None).await,
        StatusCode::NOT_FOUND,
        "ObjectID does not exist",
    );
    let (_, listed) = s.call(Method::GET, "/1/indexes", a, None).await;
    assert_eq!(listed["items"].as_array().unwrap().len(), 1);
    // Another app sees none of it.
    let other = s.app("OTHER").await;
    let (_, listed) = s
        .call(Method::GET, "/1/indexes", Some(("OTHER", &other)), None)
        .await;
    assert_eq!(listed["items"], json!([]));
}

#[tokio::test]
async fn tasks_penchant_did_not_issue_are_unknown() {
    let (s, admin) = shop().await;
    let other = s.app("OTHER").await;
    let a = Some(("SHOP", admin.as_str()));
    let (_, body) = s
        .call(
            Method::PUT,
            "/1/indexes/products/p1",
            a,
            Some(json!({"brand": "Apple"})),
        )
        .await;
    let task = body["taskID"].as_i64().unwrap();
    assert!(task < 1 << 53, "JavaScript reads task IDs as doubles");
    let path = |t: i64| format!("/1/indexes/products/task/{t}");
    assert_eq!(
        s.call(Method::GET, &path(task), a, None).await.0,
        StatusCode::OK
    );
    for unknown in [12345, task + 1, task ^ (1 << 40), i64::MAX] {
        assert_error(
            s.call(Method::GET, &path(unknown), a, None).await,
            StatusCode::NOT_FOUND,
            "Task does not exist",
        );
    }
    // Another app's task is not this app's.
    assert_error(
        s.call(Method::GET, &path(task), Some(("OTHER", &other)), None)
            .await,
        StatusCode::NOT_FOUND,
        "Task does not exist",
    );
    assert_error(
        s.call(Method::GET, "/1/indexes/products/task/abc", a, None)
            .await,
        StatusCode::BAD_REQUEST,
        "Invalid taskID",
    );
}

#[tokio::test]
async fn browse_pages_through_filtered_records_with_a_cursor() {
    let (s, admin) = shop().await;
    let a = Some(("SHOP", admin.as_str()));
    let all: Vec<Value> = (0..25)
        .map(|i| json!({"objectID": format!("p{i:02}"), "brand": if i % 2 == 0 { "Apple" } else { "Sony" }, "price": i}))
        .collect();
    records(&s, a, "products", Value::Array(all)).await;

    // Pages of 4 of the Apple records under 20, in objectID order, the filters carried by the
    // cursor.
    let mut seen = Vec::new();
    let mut body = json!({"hitsPerPage": 4, "filters": "brand:Apple AND price < 20", "attributesToRetrieve": ["brand"]});
    let mut pages = 0;
    loop {
        let page = s
            .ok(
                Method::POST,
                "/1/indexes/products/browse",
                a,
                Some(body.clone()),
            )
            .await;
        pages += 1;
        for hit in page["hits"].as_array().unwrap() {
            assert_eq!(hit.as_object().unwrap().len(), 2, "{hit}");
        }
        seen.extend(ids(&page["hits"]));
        match page["cursor"].as_str() {
            Some(cursor) => body = json!({ "cursor": cursor }),
            None => break,
        }
    }
    let want: Vec<String> = (0..20).step_by(2).map(|i| format!("p{i:02}")).collect();
    assert_eq!(seen, want);
    assert_eq!(pages, 3);

    // GET with a query string, and Algolia's {"params": "..."} body.
    let page = s
        .ok(
            Method::GET,
            "/1/indexes/products/browse?hitsPerPage=2&numericFilters=price%3E%3D23",
            a,
            None,
        )
        .await;
    assert_eq!(ids(&page["hits"]), ["p23", "p24"]);
    assert!(page.get("cursor").is_none());
    let (_, page) = s
        .call(
            Method::POST,
            "/1/indexes/products/browse",
            a,
            Some(json!({"params": "facetFilters=%5B%22brand%3ASony%22%5D&hitsPerPage=1000"})),
        )
        .await;
    assert_eq!(page["hits"].as_array().unwrap().len(), 12);
    // No body at all: everything.
    let (status, page) = s
        .call(Method::POST, "/1/indexes/products/browse", a, None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page["hits"].as_array().unwrap().len(), 25);

    // What browse cannot do says so.
    for (body, needle) in [
        (json!({"query": "iphone"}), "Penchant does not search"),
        (json!({"cursor": "not-a-cursor"}), "cursor"),
        (json!({"filters": "brand:Apple AND"}), "filters"),
        (json!({"hitsPerPage": 1001}), "hitsPerPage"),
    ] {
        assert_error(
            s.call(Method::POST, "/1/indexes/products/browse", a, Some(body))
                .await,
            StatusCode::BAD_REQUEST,
            needle,
        );
    }
    assert_error(
        s.call(Method::POST, "/1/indexes/nothing/browse", a, None)
            .await,
        StatusCode::NOT_FOUND,
        "Index does not exist",
    );
    let search = s.key("SHOP", &admin, &["search"]).await;
    assert_eq!(
        s.call(
            Method::POST,
            "/1/indexes/products/browse",
            Some(("SHOP", &search)),
            None
        )
        .await
        .0,
        StatusCode::FORBIDDEN,
        "browsing takes the browse ACL"
    );

    // deleteBy: the records that pass the filters.
    s.ok(
        Method::POST,
        "/1/indexes/products/deleteByQuery",
        a,
        Some(json!({"filters": "price >= 10"})),
    )
    .await;
    let (_, page) = s
        .call(Method::POST, "/1/indexes/products/browse", a, None)
        .await;
    assert_eq!(page["hits"].as_array().unwrap().len(), 10);
    assert_error(
        s.call(
            Method::POST,
            "/1/indexes/products/deleteByQuery",
            a,
            Some(json!({})),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "/clear",
    );
    assert_error(
        s.call(
            Method::POST,
            "/1/indexes/products/deleteByQuery",
            a,
            Some(json!({"aroundLatLng": "1,2"})),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "aroundLatLng",
    );
}

#[tokio::test]
async fn copies_and_moves_replace_the_destination() {
    let (s, admin) = shop().await;
    let a = Some(("SHOP", admin.as_str()));
    records(
        &s,
        a,
        "products",
        json!([{"objectID": "p1", "v": 1}, {"objectID": "p2", "v": 1}]),
    )
    .await;
    s.call(
        Method::PUT,
        "/1/indexes/products/settings",
        a,
        Some(json!({"attributesForFaceting": ["brand"]})),
    )
    .await;
    records(&s, a, "old", json!([{"objectID": "stale"}])).await;
    let op = |body: Value| {
        let s = &s;
        async move {
            s.call(Method::POST, "/1/indexes/products/operation", a, Some(body))
                .await
        }
    };
    let browse = |index: &'static str| {
        let s = &s;
        async move {
            let (_, page) = s
                .call(Method::POST, &format!("/1/indexes/{index}/browse"), a, None)
                .await;
            ids(&page["hits"])
        }
    };

    // A copy replaces the destination's records and settings.
    let (status, body) = op(json!({"operation": "copy", "destination": "old"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(browse("old").await, ["p1", "p2"]);
    let (_, settings) = s
        .call(Method::GET, "/1/indexes/old/settings", a, None)
        .await;
    assert_eq!(settings["attributesForFaceting"], json!(["brand"]));
    // The copy's task is published under either name (clients wait on the destination).
    let task = body["taskID"].as_i64().unwrap();
    for index in ["products", "old"] {
        let (status, _) = s
            .call(
                Method::GET,
                &format!("/1/indexes/{index}/task/{task}"),
                a,
                None,
            )
            .await;
        assert_eq!(status, StatusCode::OK);
    }
    // A scoped copy takes the settings only, leaving records.
    records(&s, a, "tmp", json!([{"objectID": "new"}])).await;
    let (status, _) = s
        .call(
            Method::POST,
            "/1/indexes/products/operation",
            a,
            Some(json!({"operation": "copy", "destination": "tmp", "scope": ["settings", "rules", "synonyms"]})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(browse("tmp").await, ["new"]);
    let (_, settings) = s
        .call(Method::GET, "/1/indexes/tmp/settings", a, None)
        .await;
    assert_eq!(settings["attributesForFaceting"], json!(["brand"]));

    // A move replaces the destination and deletes the source (replace_all_objects' last step).
    let (status, _) = s
        .call(
            Method::POST,
            "/1/indexes/tmp/operation",
            a,
            Some(json!({"operation": "move", "destination": "products"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(browse("products").await, ["new"]);
    assert_error(
        s.call(Method::GET, "/1/indexes/tmp/settings", a, None)
            .await,
        StatusCode::NOT_FOUND,
        "Index does not exist",
    );
    // Moving an index that does not exist changes nothing.
    let (status, _) = s
        .call(
            Method::POST,
            "/1/indexes/tmp/operation",
            a,
            Some(json!({"operation": "move", "destination": "products"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(browse("products").await, ["new"]);

    for (body, needle) in [
        (
            json!({"operation": "rename", "destination": "x"}),
            "expected `copy` or `move`",
        ),
        (
            json!({"operation": "copy", "destination": "x", "scope": ["records"]}),
            "unknown scope 'records'",
        ),
        (
            json!({"operation": "move", "destination": "x", "scope": ["settings"]}),
            "scope is only for copy",
        ),
        (
            json!({"operation": "copy", "destination": "products"}),
            "another index",
        ),
    ] {
        assert_error(op(body).await, StatusCode::BAD_REQUEST, needle);
    }
}

/// A raw request: status, headers and JSON body.
async fn raw(
    s: &Server,
    method: Method,
    path: &str,
    creds: (&str, &str),
    build: impl FnOnce(reqwest::RequestBuilder) -> reqwest::RequestBuilder,
) -> (StatusCode, reqwest::header::HeaderMap, Value) {
    let req = s
        .http
        .request(method, format!("{}{path}", s.base))
        .header("X-Algolia-Application-Id", creds.0)
        .header("X-Algolia-API-Key", creds.1);
    let resp = build(req).send().await.unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    (status, headers, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn routes_penchant_does_not_serve_say_what_to_use_instead() {
    let (s, admin) = shop().await;
    let a = Some(("SHOP", admin.as_str()));
    let cases = [
        (Method::POST, "/1/indexes/products/query", "/rerank"),
        (Method::POST, "/1/indexes/*/queries", "optionalFilters"),
        (
            Method::GET,
            "/1/indexes/products",
            "Penchant does not search",
        ),
        (
            Method::POST,
            "/1/indexes/products/facets/brand/query",
            "Penchant does not search",
        ),
        (Method::POST, "/1/indexes/products/rules/search", "rules"),
        (Method::PUT, "/1/indexes/products/synonyms/s1", "synonyms"),
        (
            Method::GET,
            "/1/indexes/products/related-products/recommend/rules/r1",
            "Recommend rules",
        ),
        (Method::GET, "/1/logs", "/metrics"),
        (Method::PUT, "/1/keys/abc", "POST /1/keys"),
        (Method::GET, "/2/analytics/searches", "/metrics"),
        (Method::POST, "/1/dictionaries/*/search", "dictionaries"),
    ];
    for (method, path, needle) in cases {
        let got = s.call(method.clone(), path, a, Some(json!({}))).await;
        assert_error(got, StatusCode::BAD_REQUEST, needle);
    }
    // An unknown route: a 404 in Algolia's shape that points at the route list; a key in a path
    // is not echoed.
    assert_error(
        s.call(Method::GET, "/1/nothing/here", a, None).await,
        StatusCode::NOT_FOUND,
        "GET /openapi.json",
    );
    let (status, body) = s
        .call(Method::POST, "/1/keys/0123456789abcdef/x", a, None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(!body.to_string().contains("0123456789abcdef"), "{body}");
    // A path under `*` is not a record of an index called `*`.
    assert_eq!(
        s.call(
            Method::POST,
            "/1/indexes/*/objects",
            a,
            Some(json!({"requests": []}))
        )
        .await,
        (StatusCode::OK, json!({"results": []}))
    );
}

#[tokio::test]
async fn gzip_bodies_are_read_and_every_response_has_a_request_id() {
    let (s, admin) = shop().await;
    let creds = ("SHOP", admin.as_str());
    let body =
        json!({"requests": [{"action": "addObject", "body": {"objectID": "z1", "brand": "Zed"}}]});
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(body.to_string().as_bytes()).unwrap();
    let gzipped = gz.finish().unwrap();
    let (status, headers, got) = raw(&s, Method::POST, "/1/indexes/products/batch", creds, |r| {
        r.header("Content-Encoding", "gzip")
            .header("Content-Type", "application/json")
            .body(gzipped.clone())
    })
    .await;
    assert_eq!(status, StatusCode::OK, "{got}");
    let id = headers["x-request-id"].to_str().unwrap();
    assert_eq!(id.len(), 16, "{id}");
    let (_, _, record) = raw(&s, Method::GET, "/1/indexes/products/z1", creds, |r| r).await;
    assert_eq!(record["brand"], "Zed");

    // A body that says gzip and is not: a 400 in Algolia's shape, nothing written.
    let (status, _, got) = raw(&s, Method::POST, "/1/indexes/products/batch", creds, |r| {
        r.header("Content-Encoding", "gzip")
            .body(body.to_string().replace("z1", "z2"))
    })
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{got}");
    assert!(got["message"].is_string(), "{got}");
    let (status, _, _) = raw(&s, Method::GET, "/1/indexes/products/z2", creds, |r| r).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // An encoding Penchant does not read: 415.
    let (status, _, got) = raw(&s, Method::POST, "/1/indexes/products/batch", creds, |r| {
        r.header("Content-Encoding", "zstd").body("x")
    })
    .await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{got}");

    // The caller's request id is kept; errors carry one too.
    let (status, headers, _) = raw(&s, Method::GET, "/1/indexes/products/none", creds, |r| {
        r.header("x-request-id", "trace-42")
    })
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(headers["x-request-id"], "trace-42");
    // The Algolia clients' `request-id` (one per helper call) becomes the request's id.
    let (_, headers, _) = raw(&s, Method::GET, "/1/indexes/products/z1", creds, |r| {
        r.header("request-id", "helper-7")
    })
    .await;
    assert_eq!(headers["x-request-id"], "helper-7");
}

#[tokio::test]
async fn keys_are_listed_as_algolia_lists_them() {
    let (s, admin) = shop().await;
    let a = Some(("SHOP", admin.as_str()));
    // Every ACL of Algolia's is accepted.
    let acl = [
        "search",
        "browse",
        "addObject",
        "deleteObject",
        "listIndexes",
        "deleteIndex",
        "settings",
        "editSettings",
        "analytics",
        "recommendation",
        "usage",
        "logs",
        "seeUnretrievableAttributes",
        "inference",
        "personalization",
    ];
    let key = s.key("SHOP", &admin, &acl).await;
    let (status, listed) = s.call(Method::GET, "/1/keys", a, None).await;
    assert_eq!(status, StatusCode::OK);
    // The admin key is not listed (Algolia never lists its Admin API key).
    let keys = listed["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 1, "{listed}");
    assert_eq!(keys[0]["acl"].as_array().unwrap().len(), acl.len());
    assert_eq!(&keys[0]["value"].as_str().unwrap()[..6], &key[..6]);
    // Read directly, the admin key shows what it grants in Algolia's ACLs.
    let (status, me) = s
        .call(Method::GET, &format!("/1/keys/{admin}"), a, None)
        .await;
    assert_eq!(status, StatusCode::OK);
    let granted: Vec<&str> = me["acl"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(!granted.contains(&"admin"));
    assert_eq!(granted.len(), acl.len());
    assert_error(
        s.call(
            Method::POST,
            "/1/keys",
            a,
            Some(json!({"acl": ["superuser"]})),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "superuser",
    );
}

#[tokio::test]
async fn a_keys_rate_limit_answers_429_with_the_headers_clients_read() {
    let (s, admin) = shop().await;
    let created = s
        .ok(
            Method::POST,
            "/1/keys",
            Some(("SHOP", &admin)),
            Some(json!({"acl": ["search"], "maxQueriesPerIPPerHour": 3})),
        )
        .await;
    let key = created["key"].as_str().unwrap().to_owned();
    let (_, shown) = s
        .call(
            Method::GET,
            &format!("/1/keys/{key}"),
            Some(("SHOP", &admin)),
            None,
        )
        .await;
    assert_eq!(shown["maxQueriesPerIPPerHour"], 3);
    let creds = ("SHOP", key.as_str());
    let path = "/1/indexes/products/p1";
    for remaining in ["2", "1", "0"] {
        let (status, headers, _) = raw(&s, Method::GET, path, creds, |r| r).await;
        assert_eq!(
            status,
            StatusCode::NOT_FOUND,
            "under the limit: the route answers"
        );
        assert_eq!(headers["x-ratelimit-limit"], "3");
        assert_eq!(headers["x-ratelimit-remaining"], remaining);
        let reset: u64 = headers["x-ratelimit-reset"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(reset % 3600, 0, "the end of the hour");
        assert!(headers.get("retry-after").is_none());
    }
    let (status, headers, body) = raw(&s, Method::GET, path, creds, |r| r).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("3 requests per IP"),
        "{body}"
    );
    assert_eq!(headers["x-ratelimit-remaining"], "0");
    let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=3600).contains(&retry), "{retry}");
    // Counted per client IP: a user token from an untrusted peer is not a client of its own.
    let (status, _, _) = raw(&s, Method::GET, path, creds, |r| {
        r.header("X-Algolia-UserToken", "alice")
    })
    .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    // Keys without a limit carry no rate-limit headers.
    let (_, headers, _) = raw(&s, Method::GET, path, ("SHOP", &admin), |r| r).await;
    assert!(headers.get("x-ratelimit-limit").is_none());
}

#[tokio::test]
async fn unretrievable_attributes_stay_hidden_wherever_records_are_served() {
    let (s, admin) = shop().await;
    let a = Some(("SHOP", admin.as_str()));
    records(
        &s,
        a,
        "products",
        json!([{"objectID": "p1", "brand": "Apple", "cost": 400, "supplier": {"name": "Foxconn", "price": 380}, "notes": "x"}]),
    )
    .await;
    let (status, _) = s
        .call(
            Method::PUT,
            "/1/indexes/products/settings",
            a,
            Some(json!({
                "unretrievableAttributes": ["cost", "supplier.price"],
                "attributesToRetrieve": ["brand", "cost", "supplier"],
            })),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let search = s.key("SHOP", &admin, &["search", "browse"]).await;
    let r = Some(("SHOP", search.as_str()));
    let shown = json!({"objectID": "p1", "brand": "Apple", "supplier": {"name": "Foxconn"}});
    let (_, got) = s.call(Method::GET, "/1/indexes/products/p1", r, None).await;
    assert_eq!(got, shown);
    // Asking for a hidden attribute does not show it.
    let (_, got) = s
        .call(
            Method::GET,
            "/1/indexes/products/p1?attributesToRetrieve=cost,notes",
            r,
            None,
        )
        .await;
    assert_eq!(got, json!({"objectID": "p1", "notes": "x"}));
    let (_, got) = s
        .call(
            Method::POST,
            "/1/indexes/*/objects",
            r,
            Some(json!({"requests": [{"indexName": "products", "objectID": "p1"}]})),
        )
        .await;
    assert_eq!(got["results"][0], shown);
    let (_, page) = s
        .call(Method::POST, "/1/indexes/products/browse", r, None)
        .await;
    assert_eq!(page["hits"][0], shown);
    let recommended = s.ok(Method::POST,
            "/1/indexes/*/recommendations",
            r,
            Some(json!({"requests": [{"indexName": "products", "model": "trending-items", "threshold": 0, "fallbackParameters": {}}]}))).await;
    let hit = &recommended["results"][0]["hits"][0];
    assert_eq!(hit["objectID"], "p1", "{recommended}");
    assert!(
        hit.get("cost").is_none() && hit["supplier"].get("price").is_none(),
        "{hit}"
    );
    // An admin key, or one with seeUnretrievableAttributes, sees them (within the setting's
    // attributesToRetrieve).
    let seer = s
        .key("SHOP", &admin, &["search", "seeUnretrievableAttributes"])
        .await;
    for key in [admin.as_str(), seer.as_str()] {
        let (_, got) = s
            .call(
                Method::GET,
                "/1/indexes/products/p1",
                Some(("SHOP", key)),
                None,
            )
            .await;
        assert_eq!(got["cost"], 400);
        assert_eq!(got["supplier"]["price"], 380);
        assert!(got.get("notes").is_none());
    }
}
