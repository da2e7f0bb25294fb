//! Vector spaces, uploads, similarity search, "similar to the last liked" and ALS training over
//! HTTP.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use crate::common::{Creds, Server, assert_error, now_ms, shop};
use penchant_learn::offline::FEATURES;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

async fn create(s: &Server, creds: Creds<'_>, body: Value) -> (StatusCode, Value) {
    s.call(Method::POST, "/1/vectors", creds, Some(body)).await
}

/// Upload `(id, vector)`s as JSON.
async fn upload(
    s: &Server,
    creds: Creds<'_>,
    space: &str,
    kind: &str,
    vectors: &[(&str, Vec<f32>)],
) -> (StatusCode, Value) {
    let vectors: Vec<Value> = vectors
        .iter()
        .map(|(id, v)| json!({"id": id, "vector": v}))
        .collect();
    let path = format!("/1/vectors/{space}/{kind}");
    s.call(
        Method::POST,
        &path,
        creds,
        Some(json!({ "vectors": vectors })),
    )
    .await
}

/// Upload and expect every vector written.
async fn put(s: &Server, creds: Creds<'_>, space: &str, kind: &str, vectors: &[(&str, Vec<f32>)]) {
    let (status, body) = upload(s, creds, space, kind, vectors).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, json!({ "written": vectors.len() }));
}

async fn get_vector(
    s: &Server,
    creds: Creds<'_>,
    space: &str,
    kind: &str,
    id: &str,
) -> (StatusCode, Value) {
    let path = format!("/1/vectors/{space}/{kind}/{id}");
    s.call(Method::GET, &path, creds, None).await
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

async fn search_raw(s: &Server, creds: Creds<'_>, space: &str, body: Value) -> (StatusCode, Value) {
    let path = format!("/1/vectors/{space}/search");
    s.call(Method::POST, &path, creds, Some(body)).await
}

/// A search's hits as `(objectID, score)`.
async fn search(s: &Server, creds: Creds<'_>, space: &str, body: Value) -> Vec<(String, f64)> {
    let (status, resp) = search_raw(s, creds, space, body).await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    hits(&resp["hits"])
}

fn hits(v: &Value) -> Vec<(String, f64)> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["objectID"].as_str().unwrap().to_owned(),
                h["score"].as_f64().unwrap(),
            )
        })
        .collect()
}

fn ids(hits: &[(String, f64)]) -> Vec<&str> {
    hits.iter().map(|(id, _)| id.as_str()).collect()
}

/// Hits equal to the expected `(id, score)`s, in order, scores within f32 rounding.
#[track_caller]
fn assert_hits(got: &[(String, f64)], want: &[(&str, f64)]) {
    assert_eq!(
        ids(got),
        want.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        "{got:?}"
    );
    for ((id, score), (_, expected)) in got.iter().zip(want) {
        assert!(
            (score - expected).abs() < 1e-5,
            "{id}: score {score}, expected {expected}"
        );
    }
}

/// Send events, expecting them accepted.
async fn send(s: &Server, creds: Creds<'_>, events: Vec<Value>) {
    for chunk in events.chunks(1000) {
        let body = json!({ "events": chunk });
        s.ok(Method::POST, "/1/events", creds, Some(body)).await;
    }
}

fn event(kind: &str, user: &str, ids: &[&str], timestamp: i64) -> Value {
    json!({
        "eventType": kind, "eventName": format!("Item {kind}"), "index": "products",
        "userToken": user, "objectIDs": ids, "timestamp": timestamp,
    })
}

#[tokio::test]
async fn spaces_are_created_listed_and_deleted() {
    let (s, admin) = shop().await;
    let search_key = s.key("SHOP", &admin, &["search"]).await;
    let (a, k) = (
        Some(("SHOP", admin.as_str())),
        Some(("SHOP", search_key.as_str())),
    );

    let before = now_ms();
    let (status, img) = create(&s, a, json!({"name": "img", "dimension": 3})).await;
    assert_eq!(status, StatusCode::CREATED, "{img}");
    assert_eq!(img["name"], "img");
    assert_eq!(img["dimension"], 3);
    assert_eq!(img["metric"], "cosine", "cosine by default");
    let created = img["createdAt"].as_i64().unwrap();
    assert!((before..=now_ms()).contains(&created), "{img}");
    assert_error(
        create(
            &s,
            a,
            json!({"name": "img", "dimension": 5, "metric": "dot"}),
        )
        .await,
        StatusCode::CONFLICT,
        "space 'img' exists",
    );
    let (status, emb) = create(
        &s,
        a,
        json!({"name": "emb", "dimension": 2, "metric": "euclidean", "index": "products"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{emb}");
    assert_eq!(emb["metric"], "euclidean");
    assert_eq!(emb["index"], "products");

    // A search key reads, never writes.
    let (status, _) = create(&s, k, json!({"name": "other", "dimension": 3})).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "creating needs editSettings");
    let list = s.ok(Method::GET, "/1/vectors", k, None).await;
    let names: Vec<&str> = list["spaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|sp| sp["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["emb", "img"]);
    let got = s.ok(Method::GET, "/1/vectors/img", k, None).await;
    for field in ["name", "dimension", "metric", "createdAt"] {
        assert_eq!(got[field], img[field], "{field}: {got}");
    }
    assert_error(
        s.call(Method::GET, "/1/vectors/nope", k, None).await,
        StatusCode::NOT_FOUND,
        "space 'nope' does not exist",
    );

    // Bad spaces: 400s saying what is wrong, and nothing created.
    for (body, needle) in [
        (
            json!({"name": "x", "dimension": 0}),
            "dimension must be between 1 and 4096",
        ),
        (
            json!({"name": "x", "dimension": 4097}),
            "dimension must be between 1 and 4096",
        ),
        (
            json!({"name": "x", "dimension": 3, "metric": "manhattan"}),
            "manhattan",
        ),
        (
            json!({"name": "a b", "dimension": 3}),
            "a space name must be 1 to 64 letters",
        ),
        (
            json!({"name": "x".repeat(65), "dimension": 3}),
            "a space name must be 1 to 64 letters",
        ),
        (
            json!({"name": "x", "dimension": 3, "colour": "red"}),
            "unknown field `colour`",
        ),
        (json!({"name": "x"}), "dimension"),
        (json!({"dimension": 3}), "name"),
        (json!({"name": "x", "dimension": -1}), "Invalid space"),
        (json!({"name": "x", "dimension": 3, "index": ""}), "index"),
    ] {
        assert_error(
            create(&s, a, body.clone()).await,
            StatusCode::BAD_REQUEST,
            needle,
        );
    }
    let (_, list) = s.call(Method::GET, "/1/vectors", k, None).await;
    assert_eq!(list["spaces"].as_array().unwrap().len(), 2, "{list}");

    // Deleting takes the space and its vectors; a space created again under the name is empty.
    put(&s, a, "img", "items", &[("i1", vec![1.0, 2.0, 3.0])]).await;
    put(&s, a, "img", "users", &[("u1", vec![1.0, 0.0, 0.0])]).await;
    let (status, _) = s.call(Method::DELETE, "/1/vectors/img", k, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "deleting needs editSettings");
    let body = s.ok(Method::DELETE, "/1/vectors/img", a, None).await;
    assert!(body["deletedAt"].is_string(), "{body}");
    assert_error(
        s.call(Method::GET, "/1/vectors/img", k, None).await,
        StatusCode::NOT_FOUND,
        "space 'img' does not exist",
    );
    assert_error(
        get_vector(&s, k, "img", "items", "i1").await,
        StatusCode::NOT_FOUND,
        "space 'img' does not exist",
    );
    assert_error(
        s.call(Method::DELETE, "/1/vectors/img", a, None).await,
        StatusCode::NOT_FOUND,
        "img",
    );
    let (_, list) = s.call(Method::GET, "/1/vectors", k, None).await;
    assert_eq!(list["spaces"].as_array().unwrap().len(), 1, "{list}");
    let (status, _) = create(&s, a, json!({"name": "img", "dimension": 3})).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(
        get_vector(&s, k, "img", "items", "i1").await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        get_vector(&s, k, "img", "users", "u1").await.0,
        StatusCode::NOT_FOUND
    );
    assert!(
        search(&s, k, "img", json!({"vector": [1, 2, 3]}))
            .await
            .is_empty()
    );

    // Another app sees none of them.
    let other = s.app("OTHER").await;
    let (_, list) = s
        .call(Method::GET, "/1/vectors", Some(("OTHER", &other)), None)
        .await;
    assert_eq!(list, json!({"spaces": []}));

    // An app has at most 64 spaces.
    for i in 2..64 {
        let body = json!({"name": format!("s{i}"), "dimension": 1});
        let (status, resp) = create(&s, a, body).await;
        assert_eq!(status, StatusCode::CREATED, "space {i}: {resp}");
    }
    assert_error(
        create(&s, a, json!({"name": "one-more", "dimension": 1})).await,
        StatusCode::CONFLICT,
        "at most 64 spaces",
    );
    let (_, list) = s.call(Method::GET, "/1/vectors", k, None).await;
    assert_eq!(list["spaces"].as_array().unwrap().len(), 64);
}

#[tokio::test]
async fn json_uploads_are_checked_whole_before_any_is_written() {
    let (s, admin) = shop().await;
    let search_key = s.key("SHOP", &admin, &["search"]).await;
    let adder = s.key("SHOP", &admin, &["addObject"]).await;
    let (a, k, w) = (
        Some(("SHOP", admin.as_str())),
        Some(("SHOP", search_key.as_str())),
        Some(("SHOP", adder.as_str())),
    );
    let (status, _) = create(&s, a, json!({"name": "x", "dimension": 3})).await;
    assert_eq!(status, StatusCode::CREATED);

    put(&s, w, "x", "users", &[("u1", vec![1.0, 0.0, 0.0])]).await;
    let items = [("i1", vec![0.5, 0.25, -1.0]), ("i2", vec![1e-3, 3.0, 7.5])];
    put(&s, w, "x", "items", &items).await;
    for (id, vector) in &items {
        let (status, body) = get_vector(&s, k, "x", "items", id).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["id"], *id);
        assert_eq!(floats(&body["vector"]), *vector);
    }
    let (status, body) = get_vector(&s, k, "x", "users", "u1").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, json!({"id": "u1", "vector": [1.0, 0.0, 0.0]}));
    assert_error(
        get_vector(&s, k, "x", "users", "i1").await,
        StatusCode::NOT_FOUND,
        "user 'i1' has no vector in space 'x'",
    );
    assert_error(
        get_vector(&s, k, "x", "items", "u1").await,
        StatusCode::NOT_FOUND,
        "item 'u1' has no vector in space 'x'",
    );
    // Writing again replaces.
    put(&s, w, "x", "items", &[("i1", vec![2.0, 2.0, 2.0])]).await;
    let (_, body) = get_vector(&s, k, "x", "items", "i1").await;
    assert_eq!(floats(&body["vector"]), [2.0, 2.0, 2.0]);

    // Bad vectors: 400s naming the id and the problem.
    let raw = |vectors: Value| json!({ "vectors": vectors });
    for (kind, body, needle) in [
        (
            "items",
            raw(json!([{"id": "short", "vector": [1, 2]}])),
            "the vector of item 'short' has 2 dimensions; space 'x' has 3",
        ),
        (
            "users",
            raw(json!([{"id": "long", "vector": [1, 2, 3, 4]}])),
            "the vector of user 'long' has 4 dimensions; space 'x' has 3",
        ),
        (
            "items",
            raw(json!([{"id": "hole", "vector": [1, null, 3]}])),
            "the vector of item 'hole' holds NaN at position 1",
        ),
        (
            "items",
            raw(json!([{"id": "huge", "vector": [1, 2, 1e39]}])),
            "the vector of item 'huge' holds an infinite value at position 2",
        ),
        (
            "items",
            raw(json!([{"id": "zero", "vector": [0, 0, 0]}])),
            "the vector of item 'zero' is zero",
        ),
        (
            "users",
            raw(json!([{"id": "a b", "vector": [1, 2, 3]}])),
            "user 'a b'",
        ),
        (
            "items",
            raw(json!([{"id": "", "vector": [1, 2, 3]}])),
            "objectID",
        ),
        (
            "items",
            raw(json!([{"id": "i9", "vector": "1,2,3"}])),
            "Invalid vectors",
        ),
        (
            "items",
            raw(json!([{"id": "i9", "vector": [1, 2, 3], "extra": 1}])),
            "unknown field `extra`",
        ),
        ("items", json!({"vector": []}), "unknown field `vector`"),
        (
            "items",
            json!([[{"id": "i9", "vector": [1, 2, 3]}]]),
            "object",
        ),
    ] {
        let path = format!("/1/vectors/x/{kind}");
        let got = s.call(Method::POST, &path, w, Some(body.clone())).await;
        assert_error(got, StatusCode::BAD_REQUEST, needle);
    }
    let got = s
        .http
        .post(format!("{}/1/vectors/x/items", s.base))
        .header("X-Algolia-Application-Id", "SHOP")
        .header("X-Algolia-API-Key", &adder)
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(got.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        get_vector(&s, k, "x", "items", "i9").await.0,
        StatusCode::NOT_FOUND
    );

    // One bad vector: the batch is refused whole, the good ones are not written.
    let (status, body) = upload(
        &s,
        w,
        "x",
        "items",
        &[
            ("good", vec![1.0, 2.0, 3.0]),
            ("bad", vec![1.0, f32::NAN, 3.0]),
        ],
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("item 'bad'"),
        "{body}"
    );
    assert_error(
        get_vector(&s, k, "x", "items", "good").await,
        StatusCode::NOT_FOUND,
        "item 'good' has no vector",
    );
    let hits = search(&s, k, "x", json!({"vector": [1, 1, 1], "k": 10})).await;
    assert_eq!(ids(&hits).len(), 2, "only i1 and i2: {hits:?}");

    // Kinds are users and items; spaces must exist; writing needs addObject.
    assert_error(
        upload(&s, w, "x", "foo", &[("a", vec![1.0, 2.0, 3.0])]).await,
        StatusCode::NOT_FOUND,
        "unknown vector kind `foo`",
    );
    assert_error(
        get_vector(&s, k, "x", "foo", "i1").await,
        StatusCode::NOT_FOUND,
        "unknown vector kind `foo`",
    );
    assert_error(
        upload(&s, w, "nope", "items", &[("a", vec![1.0, 2.0, 3.0])]).await,
        StatusCode::NOT_FOUND,
        "space 'nope' does not exist",
    );
    let (status, _) = upload(&s, k, "x", "items", &[("a", vec![1.0, 2.0, 3.0])]).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "uploading needs addObject");

    // Deleting one vector.
    let (status, _) = s
        .call(Method::DELETE, "/1/vectors/x/items/i1", k, None)
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "deleting needs deleteObject");
    s.ok(Method::DELETE, "/1/vectors/x/items/i1", a, None).await;
    assert_eq!(
        get_vector(&s, k, "x", "items", "i1").await.0,
        StatusCode::NOT_FOUND
    );
    let hits = search(&s, k, "x", json!({"vector": [1, 1, 1]})).await;
    assert_eq!(ids(&hits), ["i2"], "a deleted item is no hit");
    s.ok(Method::DELETE, "/1/vectors/x/users/u1", a, None).await;
    assert_eq!(
        get_vector(&s, k, "x", "users", "u1").await.0,
        StatusCode::NOT_FOUND
    );
}

/// The compact binary body: `u16 LE id length · id · dimension × f32 LE` per record.
fn binary(records: &[(&str, &[f32])]) -> Vec<u8> {
    let mut body = Vec::new();
    for (id, vector) in records {
        body.extend_from_slice(&(id.len() as u16).to_le_bytes());
        body.extend_from_slice(id.as_bytes());
        for x in *vector {
            body.extend_from_slice(&x.to_le_bytes());
        }
    }
    body
}

async fn upload_binary(s: &Server, key: &str, path: &str, body: Vec<u8>) -> (StatusCode, Value) {
    let resp = s
        .http
        .post(format!("{}{path}", s.base))
        .header("X-Algolia-Application-Id", "SHOP")
        .header("X-Algolia-API-Key", key)
        .header("Content-Type", "application/octet-stream")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = resp.status();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn binary_uploads() {
    let (s, admin) = shop().await;
    let a = Some(("SHOP", admin.as_str()));
    let (status, _) = create(
        &s,
        a,
        json!({"name": "emb", "dimension": 2, "metric": "dot"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);

    let records: [(&str, &[f32]); 3] = [
        ("a", &[1.5, -2.0]),
        ("bé", &[0.25, 4.0]),
        ("c", &[f32::MIN_POSITIVE, 1e15]), // the largest component accepted
    ];
    let (status, body) = upload_binary(&s, &admin, "/1/vectors/emb/items", binary(&records)).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"written": 3})));
    for (id, vector) in records {
        let path = format!("/1/vectors/emb/items/{}", urlencode(id));
        let body = s.ok(Method::GET, &path, a, None).await;
        assert_eq!(body["id"], id);
        assert_eq!(floats(&body["vector"]), vector);
    }
    let (status, body) = upload_binary(
        &s,
        &admin,
        "/1/vectors/emb/users",
        binary(&[("u1", &[3.0, 4.0])]),
    )
    .await;
    assert_eq!((status, body), (StatusCode::OK, json!({"written": 1})));
    let (_, body) = get_vector(&s, a, "emb", "users", "u1").await;
    assert_eq!(body, json!({"id": "u1", "vector": [3.0, 4.0]}));

    // A body cut short anywhere is refused whole.
    let two = binary(&[("x1", &[1.0, 2.0]), ("x2", &[3.0, 4.0])]);
    for cut in [1, 4, two.len() / 2 + 1, two.len() - 1] {
        let (status, body) =
            upload_binary(&s, &admin, "/1/vectors/emb/items", two[..cut].to_vec()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "cut at {cut}: {body}");
        let message = body["message"].as_str().unwrap();
        assert!(message.contains("cut short"), "{message}");
    }
    assert_eq!(
        get_vector(&s, a, "emb", "items", "x1").await.0,
        StatusCode::NOT_FOUND,
        "nothing of a refused body is written"
    );
    // Bodies far over the other routes' limit: 4000 vectors of 256 floats (4 MB).
    let body = json!({"name": "big", "dimension": 256, "metric": "euclidean"});
    assert_eq!(create(&s, a, body).await.0, StatusCode::CREATED);
    let ids: Vec<String> = (0..4000).map(|i| format!("item-{i}")).collect();
    let vectors: Vec<Vec<f32>> = (0..4000).map(|i| vec![i as f32; 256]).collect();
    let records: Vec<(&str, &[f32])> = ids
        .iter()
        .zip(&vectors)
        .map(|(id, v)| (id.as_str(), v.as_slice()))
        .collect();
    let body = binary(&records);
    assert!(body.len() > 4_000_000, "{}", body.len());
    let (status, resp) = upload_binary(&s, &admin, "/1/vectors/big/items", body).await;
    assert_eq!((status, resp), (StatusCode::OK, json!({"written": 4000})));
    let got = search(
        &s,
        a,
        "big",
        json!({"vector": vec![1234.25f32; 256], "k": 2}),
    )
    .await;
    assert_hits(&got, &[("item-1234", -4.0), ("item-1235", -12.0)]);

    // Checked like JSON: a NaN is named.
    let (status, body) = upload_binary(
        &s,
        &admin,
        "/1/vectors/emb/items",
        binary(&[("n", &[f32::NAN, 1.0])]),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("item 'n' holds NaN at position 0"),
        "{body}"
    );
    let (status, body) = upload_binary(
        &s,
        &admin,
        "/1/vectors/nope/items",
        binary(&[("n", &[1.0, 1.0])]),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The score of a row against a query by a metric, computed here.
fn score(metric: &str, q: &[f64], r: &[f64]) -> f64 {
    let dot: f64 = q.iter().zip(r).map(|(a, b)| a * b).sum();
    let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    match metric {
        "cosine" => dot / (norm(q) * norm(r)),
        "dot" => dot,
        "euclidean" => -q
            .iter()
            .zip(r)
            .map(|(a, b)| (a - b).powi(2))
            .sum::<f64>()
            .sqrt(),
        other => panic!("metric {other}"),
    }
}

const POINTS: [(&str, [f64; 2]); 5] = [
    ("a", [1.0, 0.0]),
    ("b", [0.0, 1.0]),
    ("c", [1.0, 1.0]),
    ("d", [2.0, 0.5]),
    ("e", [-1.0, 0.2]),
];

/// The points ranked against `q` by `metric`, best first, without `skip`.
fn ranked(metric: &str, q: &[f64], skip: &[&str]) -> Vec<(&'static str, f64)> {
    let mut out: Vec<(&str, f64)> = POINTS
        .iter()
        .filter(|(id, _)| !skip.contains(id))
        .map(|(id, p)| (*id, score(metric, q, p)))
        .collect();
    out.sort_by(|x, y| y.1.total_cmp(&x.1));
    out
}

#[tokio::test]
async fn search_by_vector_item_and_user() {
    let (s, admin) = shop().await;
    let search_key = s.key("SHOP", &admin, &["search"]).await;
    let (a, k) = (
        Some(("SHOP", admin.as_str())),
        Some(("SHOP", search_key.as_str())),
    );
    let items: Vec<(&str, Vec<f32>)> = POINTS
        .iter()
        .map(|(id, p)| (*id, p.iter().map(|x| *x as f32).collect()))
        .collect();
    let q = [1.0, 0.3];
    for metric in ["cosine", "dot", "euclidean"] {
        let body = json!({"name": metric, "dimension": 2, "metric": metric});
        assert_eq!(create(&s, a, body).await.0, StatusCode::CREATED);
        put(&s, a, metric, "items", &items).await;
        put(&s, a, metric, "users", &[("u1", vec![0.0, 1.0])]).await;

        // By a vector: every item, best first, with the metric's scores.
        let got = search(&s, k, metric, json!({"vector": q, "k": 10})).await;
        assert_hits(&got, &ranked(metric, &q, &[]));
        let got = search(&s, k, metric, json!({"vector": q, "k": 2})).await;
        assert_hits(&got, &ranked(metric, &q, &[])[..2]);
        // By an item: the item itself is no hit.
        let got = search(&s, k, metric, json!({"objectID": "c"})).await;
        assert_hits(&got, &ranked(metric, &[1.0, 1.0], &["c"]));
        // By a user: the user's vector.
        let got = search(&s, k, metric, json!({"userToken": "u1"})).await;
        assert_hits(&got, &ranked(metric, &[0.0, 1.0], &[]));
    }
    // The default k is 10, the metric the space's.
    let got = search(&s, k, "cosine", json!({"vector": [0.0, 1.0]})).await;
    assert_eq!(ids(&got)[0], "b");
    assert_eq!(got.len(), 5);
    // Euclidean scores are negated distances: the closest has the highest, 0 for itself.
    let got = search(&s, k, "euclidean", json!({"vector": [2.0, 0.5], "k": 1})).await;
    assert_hits(&got, &[("d", 0.0)]);
    // Another metric than the space's.
    let got = search(
        &s,
        k,
        "cosine",
        json!({"vector": q, "metric": "euclidean", "k": 10}),
    )
    .await;
    assert_hits(&got, &ranked("euclidean", &q, &[]));

    // Candidates restrict (unknown ones are ignored), exclude removes.
    let got = search(
        &s,
        k,
        "dot",
        json!({"vector": q, "candidates": ["b", "e", "zzz", "b"]}),
    )
    .await;
    assert_hits(&got, &[("b", 0.3), ("e", -0.94)]);
    let got = search(&s, k, "dot", json!({"vector": q, "exclude": ["d", "zzz"]})).await;
    assert_hits(&got, &ranked("dot", &q, &["d"]));
    let got = search(
        &s,
        k,
        "dot",
        json!({"vector": q, "candidates": ["a", "b", "c"], "exclude": ["c"]}),
    )
    .await;
    assert_hits(&got, &[("a", 1.0), ("b", 0.3)]);
    let got = search(
        &s,
        k,
        "dot",
        json!({"objectID": "a", "candidates": ["a", "b", "c"]}),
    )
    .await;
    assert_eq!(ids(&got), ["c", "b"], "the item itself is no candidate");
    let got = search(&s, k, "dot", json!({"vector": q, "candidates": []})).await;
    assert!(got.is_empty(), "{got:?}");

    // Bad searches.
    for (body, status, needle) in [
        (
            json!({"vector": q, "k": 0}),
            StatusCode::BAD_REQUEST,
            "k must be between 1 and 1000",
        ),
        (
            json!({"vector": q, "k": 1001}),
            StatusCode::BAD_REQUEST,
            "k must be between 1 and 1000",
        ),
        (
            json!({"vector": q, "objectID": "a"}),
            StatusCode::BAD_REQUEST,
            "exactly one of `vector`, `objectID` and `userToken`",
        ),
        (
            json!({"objectID": "a", "userToken": "u1"}),
            StatusCode::BAD_REQUEST,
            "exactly one",
        ),
        (json!({"k": 3}), StatusCode::BAD_REQUEST, "exactly one"),
        (
            json!({"vector": [1.0, 2.0, 3.0]}),
            StatusCode::BAD_REQUEST,
            "has 3 dimensions; space 'cosine' has 2",
        ),
        (
            json!({"vector": [0.0, 0.0]}),
            StatusCode::BAD_REQUEST,
            "is zero",
        ),
        (
            json!({"vector": [1.0, null]}),
            StatusCode::BAD_REQUEST,
            "NaN at position 1",
        ),
        (
            json!({"vector": q, "metric": "hamming"}),
            StatusCode::BAD_REQUEST,
            "hamming",
        ),
        (
            json!({"vector": q, "limit": 3}),
            StatusCode::BAD_REQUEST,
            "unknown field `limit`",
        ),
        (
            json!({"objectID": "nope"}),
            StatusCode::NOT_FOUND,
            "item 'nope' has no vector in space 'cosine'",
        ),
        (
            json!({"userToken": "nobody"}),
            StatusCode::NOT_FOUND,
            "user 'nobody' has no vector in space 'cosine'",
        ),
        (
            json!({"userToken": "a b"}),
            StatusCode::BAD_REQUEST,
            "user 'a b'",
        ),
    ] {
        let got = search_raw(&s, k, "cosine", body.clone()).await;
        assert_error(got, status, needle);
    }
    assert_error(
        search_raw(&s, k, "nope", json!({"vector": q})).await,
        StatusCode::NOT_FOUND,
        "space 'nope' does not exist",
    );
    let (status, _) = search_raw(&s, None, "cosine", json!({"vector": q})).await;
    assert!(
        status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN,
        "{status}"
    );
}

#[tokio::test]
async fn similar_to_the_last_liked_items() {
    let (s, admin) = shop().await;
    let search_key = s.key("SHOP", &admin, &["search"]).await;
    let (a, k) = (
        Some(("SHOP", admin.as_str())),
        Some(("SHOP", search_key.as_str())),
    );
    let body = json!({"name": "sim", "dimension": 2, "metric": "dot"});
    assert_eq!(create(&s, a, body).await.0, StatusCode::CREATED);
    // Liked: l1 and l2 (orthogonal). X is close to both, Y and W each to one of them.
    let items = [
        ("l1", vec![1.0, 0.0]),
        ("l2", vec![0.0, 1.0]),
        ("old", vec![-1.0, -0.5]),
        ("x", vec![0.6, 0.6]),
        ("y", vec![0.9, 0.0]),
        ("w", vec![0.0, 0.8]),
        ("z", vec![0.1, 0.1]),
    ];
    put(&s, a, "sim", "items", &items).await;
    let t = now_ms() - 60_000;
    send(
        &s,
        k,
        vec![
            event("click", "u1", &["old"], t),
            event("conversion", "u1", &["l1"], t + 1000),
            event("click", "u1", &["l2"], t + 2000),
            // A view is not a like; an item without a vector is not a start.
            event("view", "u1", &["z"], t + 3000),
            event("click", "u1", &["novector"], t + 4000),
            // Another user's likes are not u1's.
            event("click", "u2", &["y"], t + 5000),
        ],
    )
    .await;
    let path = "/1/vectors/sim/similar-to-liked";
    let server = &s;
    let liked = move |body: Value| async move {
        let resp = server.ok(Method::POST, path, k, Some(body)).await;
        (resp["liked"].clone(), hits(&resp["hits"]))
    };

    // Mean: items close to all the liked ones first.
    let (got, top) = liked(json!({"userToken": "u1", "last": 2})).await;
    assert_eq!(got, json!(["l2", "l1"]), "newest first");
    assert_hits(
        &top,
        &[
            ("x", 0.6),
            ("y", 0.45),
            ("w", 0.4),
            ("z", 0.1),
            ("old", -0.75),
        ],
    );
    // Max: items close to any one of them first.
    let (got, top) = liked(json!({"userToken": "u1", "last": 2, "aggregate": "max"})).await;
    assert_eq!(got, json!(["l2", "l1"]));
    assert_hits(
        &top,
        &[
            ("y", 0.9),
            ("w", 0.8),
            ("x", 0.6),
            ("z", 0.1),
            ("old", -0.5),
        ],
    );
    // The default takes the last 5; the liked items are never hits.
    let (got, top) = liked(json!({"userToken": "u1", "k": 2})).await;
    assert_eq!(got, json!(["l2", "l1", "old"]));
    assert_hits(&top, &[("w", 0.4 / 3.0), ("x", 0.1)]);
    // One liked item.
    let (got, top) = liked(json!({"userToken": "u1", "last": 1})).await;
    assert_eq!(got, json!(["l2"]));
    assert_hits(
        &top,
        &[
            ("w", 0.8),
            ("x", 0.6),
            ("z", 0.1),
            ("l1", 0.0),
            ("y", 0.0),
            ("old", -0.5),
        ],
    );
    // Candidates and exclude.
    let (_, top) =
        liked(json!({"userToken": "u1", "last": 2, "candidates": ["w", "z", "l1"]})).await;
    assert_hits(&top, &[("w", 0.4), ("z", 0.1)]);
    let (_, top) = liked(json!({"userToken": "u1", "last": 2, "exclude": ["x", "y"]})).await;
    assert_eq!(ids(&top), ["w", "z", "old"]);
    // A user with no likes: nothing.
    let (got, top) = liked(json!({"userToken": "nobody"})).await;
    assert_eq!(got, json!([]));
    assert!(top.is_empty());

    for (body, status, needle) in [
        (
            json!({"userToken": "u1", "last": 0}),
            StatusCode::BAD_REQUEST,
            "last must be between 1 and 100",
        ),
        (
            json!({"userToken": "u1", "last": 101}),
            StatusCode::BAD_REQUEST,
            "last must be between 1 and 100",
        ),
        (
            json!({"userToken": "u1", "k": 0}),
            StatusCode::BAD_REQUEST,
            "k must be between 1 and 1000",
        ),
        (
            json!({"userToken": "u1", "aggregate": "min"}),
            StatusCode::BAD_REQUEST,
            "min",
        ),
        (json!({"last": 2}), StatusCode::BAD_REQUEST, "userToken"),
        (
            json!({"userToken": "a b"}),
            StatusCode::BAD_REQUEST,
            "UserToken",
        ),
        (
            json!({"userToken": "u1", "extra": 1}),
            StatusCode::BAD_REQUEST,
            "unknown field `extra`",
        ),
    ] {
        let got = s.call(Method::POST, path, k, Some(body.clone())).await;
        assert_error(got, status, needle);
    }
    let got = s
        .call(
            Method::POST,
            "/1/vectors/nope/similar-to-liked",
            k,
            Some(json!({"userToken": "u1"})),
        )
        .await;
    assert_error(got, StatusCode::NOT_FOUND, "space 'nope' does not exist");
}

#[tokio::test]
async fn deleting_users_and_records_deletes_their_vectors() {
    let (s, admin) = shop().await;
    let search_key = s.key("SHOP", &admin, &["search"]).await;
    let (a, k) = (
        Some(("SHOP", admin.as_str())),
        Some(("SHOP", search_key.as_str())),
    );
    for body in [
        json!({"name": "all", "dimension": 2, "metric": "dot"}),
        json!({"name": "products", "dimension": 2, "metric": "dot", "index": "products"}),
    ] {
        assert_eq!(create(&s, a, body).await.0, StatusCode::CREATED);
    }
    let users = [("u1", vec![1.0, 0.0]), ("u10", vec![0.0, 1.0])];
    let items = [
        ("p1", vec![1.0, 0.0]),
        ("p2", vec![0.0, 1.0]),
        ("p3", vec![1.0, 1.0]),
        ("p4", vec![2.0, 1.0]),
    ];
    for space in ["all", "products"] {
        put(&s, a, space, "users", &users).await;
        put(&s, a, space, "items", &items).await;
    }

    // A deleted user loses their vectors in every space; u10 (u1's prefix plus a digit) keeps
    // theirs.
    let (status, _) = s.call(Method::DELETE, "/1/usertokens/u1", a, None).await;
    assert!(status.is_success(), "{status}");
    for space in ["all", "products"] {
        assert_eq!(
            get_vector(&s, k, space, "users", "u1").await.0,
            StatusCode::NOT_FOUND
        );
        let (status, body) = get_vector(&s, k, space, "users", "u10").await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_error(
            search_raw(&s, k, space, json!({"userToken": "u1"})).await,
            StatusCode::NOT_FOUND,
            "user 'u1' has no vector",
        );
    }

    // Records of index products.
    for id in ["p1", "p2", "p3", "p4"] {
        let path = format!("/1/indexes/products/{id}");
        s.ok(Method::PUT, &path, a, Some(json!({"name": id}))).await;
    }
    let all_ids = |space: &'static str| {
        let s = &s;
        async move {
            let hits = search(s, k, space, json!({"vector": [1.0, 1.0]})).await;
            let mut ids: Vec<String> = hits.into_iter().map(|(id, _)| id).collect();
            ids.sort();
            ids
        }
    };
    assert_eq!(all_ids("all").await, ["p1", "p2", "p3", "p4"]);

    // Deleting a record deletes its vector (search loads the space again).
    s.ok(Method::DELETE, "/1/indexes/products/p1", a, None)
        .await;
    for space in ["all", "products"] {
        assert_error(
            get_vector(&s, k, space, "items", "p1").await,
            StatusCode::NOT_FOUND,
            "item 'p1' has no vector",
        );
        assert_eq!(all_ids(space).await, ["p2", "p3", "p4"], "{space}");
        assert_error(
            search_raw(&s, k, space, json!({"objectID": "p1"})).await,
            StatusCode::NOT_FOUND,
            "item 'p1'",
        );
    }
    // A delete in another index: spaces of any index lose the vector, spaces of products
    // keep it.
    let batch = json!({"requests": [{"action": "deleteObject", "body": {"objectID": "p2"}}]});
    s.ok(Method::POST, "/1/indexes/books/batch", a, Some(batch))
        .await;
    assert_eq!(all_ids("all").await, ["p3", "p4"]);
    assert_eq!(all_ids("products").await, ["p2", "p3", "p4"]);
    // A batch delete in products, then clearing products: every record's vector goes.
    let batch = json!({"requests": [{"action": "deleteObject", "body": {"objectID": "p3"}}]});
    s.ok(Method::POST, "/1/indexes/products/batch", a, Some(batch))
        .await;
    assert_eq!(all_ids("products").await, ["p2", "p4"]);
    // p9 is no record of products: clearing products leaves its vectors.
    for space in ["all", "products"] {
        put(&s, a, space, "items", &[("p9", vec![3.0, 3.0])]).await;
    }
    let batch = json!({"requests": [{"action": "clear"}]});
    s.ok(Method::POST, "/1/indexes/products/batch", a, Some(batch))
        .await;
    assert_eq!(all_ids("all").await, ["p9"]);
    assert_eq!(all_ids("products").await, ["p9"]);
}

/// Start a training: 202 and its status. A training that has just ended may hold its claim a
/// moment after its status says it ended: a 409 is retried.
async fn start_training(s: &Server, creds: Creds<'_>, body: Value) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, resp) = s
            .call(Method::POST, "/1/als/train", creds, Some(body.clone()))
            .await;
        if status == StatusCode::ACCEPTED {
            assert_eq!(resp["state"], "running", "{resp}");
            return resp;
        }
        assert_eq!(status, StatusCode::CONFLICT, "{resp}");
        assert!(Instant::now() < deadline, "still refused: {resp}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Start a training and wait for its end.
async fn train(s: &Server, creds: Creds<'_>, body: Value) -> Value {
    start_training(s, creds, body).await;
    trained(s, creds).await
}

/// Poll the app's training until it is no longer running.
async fn trained(s: &Server, creds: Creds<'_>) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let body = s.ok(Method::GET, "/1/als/train", creds, None).await;
        if body["state"] != "running" {
            return body;
        }
        assert!(Instant::now() < deadline, "still running: {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A user of [`cluster_events`]: token, cluster and the items clicked.
type Clicker = (String, char, Vec<String>);

/// Two clusters of 30 items; 30 users each click 10 items of their cluster, drawn at random
/// (seeded). (With 8 factors, clusters of fewer items than this are learnt item by item: a
/// user's unclicked items of the cluster score no better than the other cluster's.)
fn cluster_events() -> (Vec<Value>, Vec<Clicker>) {
    let t = now_ms() - 3_600_000;
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut random = move |n: usize| {
        // xorshift64*
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        (state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
    };
    let (mut events, mut users) = (Vec::new(), Vec::new());
    for cluster in ['a', 'b'] {
        for j in 0..30usize {
            let user = format!("{cluster}user{j}");
            let mut items: Vec<usize> = (0..30).collect();
            for i in (1..items.len()).rev() {
                items.swap(i, random(i + 1));
            }
            let clicked: Vec<String> = items[..10]
                .iter()
                .map(|i| format!("{cluster}{i}"))
                .collect();
            for (m, item) in clicked.iter().enumerate() {
                let at = t + (j * 100 + m) as i64 * 1000;
                events.push(event("click", &user, &[item], at));
            }
            users.push((user, cluster, clicked));
        }
    }
    (events, users)
}

#[tokio::test]
async fn als_trains_from_events_and_folds_in_new_users() {
    let s = Server::start().await;
    let admin = s.app("ALS").await;
    let search_key = s.key("ALS", &admin, &["search"]).await;
    let (a, k) = (
        Some(("ALS", admin.as_str())),
        Some(("ALS", search_key.as_str())),
    );
    assert_error(
        s.call(Method::GET, "/1/als/train", k, None).await,
        StatusCode::NOT_FOUND,
        "no training",
    );
    // Without events, a training has nothing to learn from.
    let status = train(&s, a, json!({"factors": 4})).await;
    assert_eq!(status["state"], "failed", "{status}");
    assert!(
        status["error"].as_str().unwrap().contains("no event"),
        "{status}"
    );
    assert_eq!(
        s.call(Method::GET, "/1/vectors/als", k, None).await.0,
        StatusCode::NOT_FOUND,
        "a failed training creates no space"
    );

    // Evaluating without events is refused as training is.
    let (status, body) = s
        .call(
            Method::POST,
            "/1/als/evaluate",
            a,
            Some(json!({"factors": 4})),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("no event"),
        "{body}"
    );

    let (events, users) = cluster_events();
    send(&s, k, events).await;

    // Bad trainings.
    for (body, needle) in [
        (json!({"factors": 0}), "factors must be between 1 and 1024"),
        (
            json!({"factors": 2000}),
            "factors must be between 1 and 1024",
        ),
        (
            json!({"iterations": 0}),
            "iterations must be between 1 and 1000",
        ),
        (json!({"alpha": -1}), "alpha"),
        (json!({"regularization": -1}), "regularization"),
        (json!({"space": "a b"}), "a space name"),
        (json!({"weights": {"click": -1}}), "the weight of 'click'"),
        (json!({"colour": "red"}), "unknown field `colour`"),
        (json!({"factors": "eight"}), "Invalid training"),
    ] {
        let got = s.call(Method::POST, "/1/als/train", a, Some(body)).await;
        assert_error(got, StatusCode::BAD_REQUEST, needle);
    }
    let (status, _) = s
        .call(Method::POST, "/1/als/train", k, Some(json!({})))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "training needs editSettings");

    // Weights of 0 for everything there is: nothing counts.
    let status = train(
        &s,
        a,
        json!({"factors": 8, "weights": {"view": 1, "click": 0}}),
    )
    .await;
    assert_eq!(status["state"], "failed", "{status}");
    assert!(
        status["error"].as_str().unwrap().contains("no event"),
        "{status}"
    );

    let config = json!({"factors": 8, "iterations": 10});
    let body = start_training(&s, a, config.clone()).await;
    assert_eq!(body["state"], "running");
    assert_eq!(body["config"]["factors"], 8);
    assert_eq!(body["config"]["space"], "als");
    // Another one while it runs is refused (or starts, if the first has ended).
    let (status, body) = s
        .call(Method::POST, "/1/als/train", a, Some(config.clone()))
        .await;
    assert!(
        status == StatusCode::CONFLICT || status == StatusCode::ACCEPTED,
        "{status}: {body}"
    );
    let status = trained(&s, k).await;
    assert_eq!(status["state"], "done", "{status}");
    assert_eq!(status["iteration"], 10);
    assert_eq!(status["users"], 60);
    assert_eq!(status["items"], 60);
    assert_eq!(status["interactions"], 600);

    let space = s.ok(Method::GET, "/1/vectors/als", k, None).await;
    assert_eq!(space["dimension"], 8);
    assert_eq!(space["metric"], "dot");
    assert_eq!(space["training"]["users"], 60, "{space}");
    assert_eq!(space["training"]["items"], 60, "{space}");
    let (status, body) = get_vector(&s, k, "als", "users", "auser0").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["vector"].as_array().unwrap().len(), 8);
    let (status, body) = get_vector(&s, k, "als", "items", "b3").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["vector"].as_array().unwrap().len(), 8);

    // Users' nearest unclicked items are their cluster's.
    let mut in_cluster = 0;
    for (user, cluster, clicked) in &users {
        let body = json!({"userToken": user, "k": 5, "exclude": clicked});
        let hits = search(&s, k, "als", body).await;
        assert_eq!(hits.len(), 5, "{user}: {hits:?}");
        assert!(
            hits.iter().all(|(id, _)| !clicked.contains(id)),
            "{user}: {hits:?}"
        );
        if hits.iter().all(|(id, _)| id.starts_with(*cluster)) {
            in_cluster += 1;
        }
    }
    assert!(
        in_cluster * 10 >= users.len() * 8,
        "{in_cluster} of {} users get their cluster",
        users.len()
    );
    // Items' nearest items too.
    let hits = search(&s, k, "als", json!({"objectID": "a0", "k": 5})).await;
    assert!(hits.iter().all(|(id, _)| id.starts_with('a')), "{hits:?}");

    // A training into a space of another dimension is refused at once, not failed later.
    let refused = s
        .call(
            Method::POST,
            "/1/als/train",
            a,
            Some(json!({"factors": 4, "iterations": 2})),
        )
        .await;
    assert_error(
        refused,
        StatusCode::CONFLICT,
        "space 'als' has dimension 8, the training 4 factors: train with factors 8",
    );
    let (_, last) = s.call(Method::GET, "/1/als/train", k, None).await;
    assert_eq!(
        last["state"], "done",
        "the last training is still the last: {last}"
    );
    let (_, space) = s.call(Method::GET, "/1/vectors/als", k, None).await;
    assert_eq!(space["dimension"], 8, "the space is as it was");

    // Evaluation: ALS against popularity.
    let eval = s
        .ok(
            Method::POST,
            "/1/als/evaluate",
            a,
            Some(json!({"factors": 8, "iterations": 10, "holdout": 1, "k": 5})),
        )
        .await;
    assert_eq!(eval["k"], 5);
    assert_eq!(eval["holdout"], 1);
    assert_eq!(eval["users"], 60);
    assert_eq!(eval["testUsers"], 60);
    assert_eq!(eval["trainInteractions"], 540);
    for model in ["als", "popularity"] {
        for metric in ["precision", "recall", "ndcg"] {
            let x = eval[model][metric].as_f64().unwrap_or(-1.0);
            assert!((0.0..=1.0).contains(&x), "{model}.{metric}: {eval}");
        }
    }
    // Every model a queue blends, a blend given and the app's queue, on a share of each
    // user's latest events.
    s.ok(
        Method::PUT,
        "/1/queues/mix",
        a,
        Some(json!({"indexName": "products", "sources": [{"source": "als"}, {"source": "trending", "weight": 2}]})),
    )
    .await;
    let eval = s
        .ok(
            Method::POST,
            "/1/als/evaluate",
            a,
            Some(json!({"factors": 8, "iterations": 10, "holdoutFraction": 0.2, "k": 5,
                "queues": {"liked": [{"source": "similar-to-liked", "last": 3}, {"source": "related"}]}})),
        )
        .await;
    assert_eq!(eval["holdout"], 0.2);
    let mut names: Vec<&str> = eval["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    // The learned ranker comes last, when some user's next events were among their
    // candidates at the cuts of the training events (tiny here), with what it leans on.
    if names.last() == Some(&"learned") {
        names.pop();
        let importance = eval["learned"]["importance"].as_array().unwrap();
        assert_eq!(
            importance.len(),
            FEATURES.len(),
            "one share per feature: {eval}"
        );
    } else {
        assert!(eval.get("learned").is_none(), "{eval}");
    }
    assert_eq!(
        names,
        [
            "popularity",
            "trending",
            "als",
            "similar-to-liked",
            "related",
            "liked",
            "queue mix"
        ],
        "{eval}"
    );
    for row in eval["rows"].as_array().unwrap() {
        assert_eq!(row["users"], eval["testUsers"], "{row}");
        let x = row["ndcg"].as_f64().unwrap_or(-1.0);
        assert!((0.0..=1.0).contains(&x), "{row}");
    }
    assert_eq!(eval["rows"][6]["sources"][1]["weight"], 2.0);
    assert!(eval.get("skipped").is_none(), "{eval}");
    // A queue on another space is left out of the app's, and said so.
    s.ok(
        Method::PUT,
        "/1/queues/pictures",
        a,
        Some(json!({"indexName": "products", "sources": [{"source": "similar-to-liked", "space": "images"}]})),
    )
    .await;
    let skipping = s
        .ok(
            Method::POST,
            "/1/als/evaluate",
            a,
            Some(json!({"factors": 8, "iterations": 2})),
        )
        .await;
    let rows = skipping["rows"].as_array().unwrap();
    assert_eq!(
        rows.len(),
        6 + usize::from(skipping.get("learned").is_some()),
        "{skipping}"
    );
    assert!(
        skipping["skipped"][0]
            .as_str()
            .unwrap()
            .contains("queue 'queue pictures': space 'images'"),
        "{skipping}"
    );
    s.ok(Method::DELETE, "/1/queues/pictures", a, None).await;
    // Ten events a user: a share of 0.2 holds out two of each.
    assert_eq!(eval["trainInteractions"], 480);
    s.ok(Method::DELETE, "/1/queues/mix", a, None).await;
    for (body, needle) in [
        (
            json!({"holdout": 0}),
            "holdout must be a count between 1 and 100",
        ),
        (
            json!({"holdoutFraction": 1.0}),
            "or a fraction between 0 and 1",
        ),
        (json!({"holdout": 2, "holdoutFraction": 0.5}), "not both"),
        (
            json!({"queues": {"x": [{"source": "als", "space": "images"}]}}),
            "queue 'x': space 'images' cannot be evaluated offline",
        ),
        (
            json!({"queues": {"x": [{"source": "nope"}]}}),
            "queues must map names to lists of sources",
        ),
        (
            json!({"queues": (0..33)
                .map(|i| (format!("q{i}"), json!([{"source": "trending"}])))
                .collect::<serde_json::Map<_, _>>()}),
            "at most 32 queues, of at most 32 sources each",
        ),
        (json!({"k": 0}), "k between 1 and 1000"),
        (
            json!({"holdout": "one"}),
            "holdout must be a positive integer",
        ),
        (json!({"factors": 0}), "factors"),
        (json!({"colour": 1}), "unknown field `colour`"),
        (
            json!({"ranker": {"perSource": 0}}),
            "perSource must be between 1 and 1000",
        ),
        (
            json!({"ranker": {"params": {"leaves": 1}}}),
            "leaves 2 to 1024",
        ),
        (
            json!({"ranker": {"colour": 1}}),
            "ranker must be the learned ranker's settings",
        ),
    ] {
        let got = s.call(Method::POST, "/1/als/evaluate", a, Some(body)).await;
        assert_error(got, StatusCode::BAD_REQUEST, needle);
    }
    let (status, _) = s
        .call(Method::POST, "/1/als/evaluate", k, Some(json!({})))
        .await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "evaluating needs editSettings"
    );

    // A user the training did not see: folded in from their events when first needed.
    assert_error(
        get_vector(&s, k, "als", "users", "newbie").await,
        StatusCode::NOT_FOUND,
        "user 'newbie' has no vector in space 'als'",
    );
    let t = now_ms() - 10_000;
    let clicked = ["a0", "a1", "a2"];
    let events = clicked
        .iter()
        .enumerate()
        .map(|(i, id)| event("click", "newbie", &[id], t + i as i64 * 1000))
        .collect();
    send(&s, k, events).await;
    let (status, body) = get_vector(&s, k, "als", "users", "newbie").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["vector"].as_array().unwrap().len(), 8);
    let hits = search(
        &s,
        k,
        "als",
        json!({"userToken": "newbie", "k": 5, "exclude": clicked}),
    )
    .await;
    assert_eq!(hits.len(), 5);
    assert!(hits.iter().all(|(id, _)| id.starts_with('a')), "{hits:?}");
    // Search folds in too.
    let events = vec![event("click", "newbie2", &["b4", "b5"], t)];
    send(&s, k, events).await;
    let hits = search(
        &s,
        k,
        "als",
        json!({"userToken": "newbie2", "k": 3, "exclude": ["b4", "b5"]}),
    )
    .await;
    assert!(hits.iter().all(|(id, _)| id.starts_with('b')), "{hits:?}");
    let seen: HashSet<&str> = ids(&hits).into_iter().collect();
    assert_eq!(seen.len(), 3);

    // A new item clicked by ten users of cluster a, and a new user who clicked b items: a
    // fold-in job gives both vectors without training again.
    let mut events: Vec<Value> = (0..10)
        .map(|j| event("click", &format!("auser{j}"), &["anew"], t + j))
        .collect();
    events.push(event("click", "newbie3", &["b0", "b1", "b2"], t));
    send(&s, k, events).await;
    assert_error(
        get_vector(&s, k, "als", "items", "anew").await,
        StatusCode::NOT_FOUND,
        "item 'anew' has no vector in space 'als'",
    );
    let (_, before) = get_vector(&s, k, "als", "items", "a0").await;
    let status = train(&s, a, json!({"mode": "fold-in"})).await;
    assert_eq!(status["state"], "done", "{status}");
    assert_eq!(status["config"]["mode"], "fold-in", "{status}");
    assert_eq!(status["items"], 1, "{status}");
    assert_eq!(
        status["users"], 1,
        "newbie and newbie2 were folded in already: {status}"
    );
    assert_eq!(status["interactions"], 13, "{status}");
    let (_, after) = get_vector(&s, k, "als", "items", "a0").await;
    assert_eq!(before, after, "trained vectors stay as they are");
    let hits = search(&s, k, "als", json!({"objectID": "anew", "k": 5})).await;
    assert_eq!(hits.len(), 5);
    assert!(hits.iter().all(|(id, _)| id.starts_with('a')), "{hits:?}");
    let (status, body) = get_vector(&s, k, "als", "users", "newbie3").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // This node holds the 61 item vectors and scans them (the test server never indexes).
    let (_, space) = s.call(Method::GET, "/1/vectors/als", k, None).await;
    assert_eq!(
        space["serving"],
        json!({"loaded": true, "items": 61, "search": "exact"}),
        "{space}"
    );
    // Folding into a space no training wrote is refused.
    let (status, _) = create(&s, a, json!({"name": "plain", "dimension": 8})).await;
    assert_eq!(status, StatusCode::CREATED);
    let status = train(&s, a, json!({"mode": "fold-in", "space": "plain"})).await;
    assert_eq!(status["state"], "failed", "{status}");
    assert!(
        status["error"]
            .as_str()
            .unwrap()
            .contains("space 'plain' was never trained"),
        "{status}"
    );
    assert_error(
        s.call(
            Method::POST,
            "/1/als/train",
            a,
            Some(json!({"mode": "retrain"})),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "unknown variant `retrain`",
    );
    // Rollback: back to the previous training's vectors, once.
    let rollback = |space: &'static str, creds| {
        let s = &s;
        async move {
            let path = format!("/1/vectors/{space}/rollback");
            s.call(Method::POST, &path, creds, None).await
        }
    };
    assert_error(
        rollback("als", a).await,
        StatusCode::CONFLICT,
        "space 'als' has no previous training to roll back to",
    );
    let (_, first_user) = get_vector(&s, k, "als", "users", "auser0").await;
    let (_, folded_item) = get_vector(&s, k, "als", "items", "anew").await;
    let status = train(&s, a, json!({"factors": 8, "iterations": 10, "seed": 7})).await;
    assert_eq!(status["state"], "done", "{status}");
    let (_, second_user) = get_vector(&s, k, "als", "users", "auser0").await;
    assert_ne!(first_user, second_user, "another seed, other vectors");
    let (_, space) = s.call(Method::GET, "/1/vectors/als", k, None).await;
    assert_eq!(space["training"]["als"]["seed"], 7, "{space}");
    assert_eq!(space["previousTraining"]["als"]["seed"], 42, "{space}");
    assert_eq!(
        rollback("als", k).await.0,
        StatusCode::FORBIDDEN,
        "a rollback needs editSettings"
    );
    let (status, space) = rollback("als", a).await;
    assert_eq!(status, StatusCode::OK, "{space}");
    assert_eq!(space["training"]["als"]["seed"], 42, "{space}");
    assert!(space.get("previousTraining").is_none(), "{space}");
    assert_eq!(
        get_vector(&s, k, "als", "users", "auser0").await.1,
        first_user
    );
    assert_eq!(
        get_vector(&s, k, "als", "items", "anew").await.1,
        folded_item,
        "what the fold-in wrote before the second training is back too"
    );
    let hits = search(&s, k, "als", json!({"objectID": "a0", "k": 5})).await;
    assert!(hits.iter().all(|(id, _)| id.starts_with('a')), "{hits:?}");
    assert_error(
        rollback("als", a).await,
        StatusCode::CONFLICT,
        "no previous training",
    );
    assert_error(
        rollback("nope", a).await,
        StatusCode::NOT_FOUND,
        "space 'nope'",
    );
}

/// Issue 29: a component of 3.4e38 passed as finite, then dot products overflowed: hits scored
/// `null`, others dropped, rankings wrong. Components are bounded (the query's too), and a space
/// at the bound scores finitely.
#[tokio::test]
async fn huge_components_are_refused_and_scores_stay_finite() {
    let (s, admin) = shop().await;
    let a = Some(("SHOP", admin.as_str()));
    let (status, _) = create(&s, a, json!({"name": "d", "dimension": 3, "metric": "dot"})).await;
    assert_eq!(status, StatusCode::CREATED);
    let message = "the vector of item 'big' holds 3.4e38 at position 1: components must be \
                   between -1e15 and 1e15";
    assert_error(
        upload(
            &s,
            a,
            "d",
            "items",
            &[("ok", vec![1.0, 0.0, 0.0]), ("big", vec![1.0, 3.4e38, 1.0])],
        )
        .await,
        StatusCode::BAD_REQUEST,
        message,
    );
    assert_error(
        upload_binary(
            &s,
            &admin,
            "/1/vectors/d/items",
            binary(&[("big", &[1.0, 3.4e38, 1.0])]),
        )
        .await,
        StatusCode::BAD_REQUEST,
        message,
    );
    assert_error(
        upload(&s, a, "d", "users", &[("u1", vec![-2e15, 0.0, 0.0])]).await,
        StatusCode::BAD_REQUEST,
        "the vector of user 'u1' holds -2e15 at position 0",
    );
    // At the bound, in the largest sums a 3-dimensional space has: finite scores, all hits.
    let items = [
        ("a", vec![1e15, 1e15, 1e15]),
        ("b", vec![-1e15, -1e15, -1e15]),
        ("c", vec![1.0, 2.0, 3.0]),
    ];
    put(&s, a, "d", "items", &items).await;
    let (status, body) =
        search_raw(&s, a, "d", json!({"vector": [1e15, 1e15, 1e15], "k": 10})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let got = hits(&body["hits"]);
    assert_eq!(ids(&got), ["a", "c", "b"], "{body}");
    assert!(got.iter().all(|(_, score)| score.is_finite()), "{body}");
    assert_error(
        search_raw(&s, a, "d", json!({"vector": [3.4e38, 0, 0]})).await,
        StatusCode::BAD_REQUEST,
        "holds 3.4e38 at position 0",
    );
}
