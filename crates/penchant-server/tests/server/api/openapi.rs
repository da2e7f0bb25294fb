//! `docs/openapi.json` against the router: every route the sources mount is documented and every
//! documented operation is routed to its handler (with the credentials the document says it
//! needs); the server serves the document at `/openapi.json`; the document is well formed.

use std::collections::{BTreeMap, BTreeSet};

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::common::{ROOT, Server, shop};

/// The document, as the server embeds it.
const DOCUMENT: &str = include_str!("../../../../../docs/openapi.json");

/// The sources that mount routes (and `lib.rs`, which merges them; `routes/mod.rs`, which lists
/// the modules).
const SOURCES: [(&str, &str); 19] = [
    ("lib.rs", include_str!("../../../src/lib.rs")),
    ("metrics.rs", include_str!("../../../src/metrics.rs")),
    ("routes/mod.rs", include_str!("../../../src/routes/mod.rs")),
    (
        "routes/abtests.rs",
        include_str!("../../../src/routes/abtests.rs"),
    ),
    (
        "routes/apps.rs",
        include_str!("../../../src/routes/apps.rs"),
    ),
    (
        "routes/backups.rs",
        include_str!("../../../src/routes/backups.rs"),
    ),
    (
        "routes/bloom.rs",
        include_str!("../../../src/routes/bloom.rs"),
    ),
    (
        "routes/dashboard.rs",
        include_str!("../../../src/routes/dashboard.rs"),
    ),
    (
        "routes/events.rs",
        include_str!("../../../src/routes/events.rs"),
    ),
    (
        "routes/health.rs",
        include_str!("../../../src/routes/health.rs"),
    ),
    (
        "routes/indexes.rs",
        include_str!("../../../src/routes/indexes.rs"),
    ),
    (
        "routes/keys.rs",
        include_str!("../../../src/routes/keys.rs"),
    ),
    (
        "routes/manage.rs",
        include_str!("../../../src/routes/manage.rs"),
    ),
    (
        "routes/openapi.rs",
        include_str!("../../../src/routes/openapi.rs"),
    ),
    (
        "routes/personalization.rs",
        include_str!("../../../src/routes/personalization.rs"),
    ),
    (
        "routes/placement.rs",
        include_str!("../../../src/routes/placement.rs"),
    ),
    (
        "routes/recommend.rs",
        include_str!("../../../src/routes/recommend.rs"),
    ),
    (
        "routes/stats.rs",
        include_str!("../../../src/routes/stats.rs"),
    ),
    (
        "routes/vectors.rs",
        include_str!("../../../src/routes/vectors.rs"),
    ),
];

/// The HTTP methods an operation may have in a path item.
const METHODS: [&str; 5] = ["get", "put", "post", "delete", "patch"];

fn document() -> Value {
    serde_json::from_str(DOCUMENT).expect("docs/openapi.json is JSON")
}

fn source(name: &str) -> &'static str {
    SOURCES
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("{name} is not among the test's sources"))
        .1
}

/// The part of `text` up to the `)` that closes the call it is in.
fn call_arguments(text: &str) -> &str {
    let mut depth = 0usize;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' if depth == 0 => return &text[..i],
            ')' => depth -= 1,
            _ => {}
        }
    }
    panic!("unclosed call: {text}")
}

/// The methods of a method router's expression (`get(a).post(b).layer(..)`): the calls at its
/// top level named after a method.
fn methods_of(expression: &str) -> Vec<String> {
    let mut methods = Vec::new();
    let mut depth = 0usize;
    for (i, c) in expression.char_indices() {
        match c {
            '(' => {
                if depth == 0 {
                    let before = &expression[..i];
                    let start = before
                        .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .map_or(0, |j| j + 1);
                    let name = &before[start..];
                    if METHODS.contains(&name) || ["head", "options", "any", "on"].contains(&name) {
                        methods.push(name.to_uppercase());
                    }
                }
                depth += 1;
            }
            ')' => depth -= 1,
            _ => {}
        }
    }
    methods
}

/// Every `(METHOD, path)` the `.route("PATH", method_router)` calls of `source` mount. Axum's
/// `{param}` templates are OpenAPI's as they are.
fn routes_in(file: &str, source: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut rest = source;
    while let Some(at) = rest.find(".route(") {
        rest = &rest[at + ".route(".len()..];
        let arguments = call_arguments(rest);
        let literal = arguments
            .trim_start()
            .strip_prefix('"')
            .unwrap_or_else(|| panic!("{file}: a route whose path is not a literal: {arguments}"));
        let end = literal.find('"').expect("a closed string literal");
        let path = &literal[..end];
        let router = literal[end + 1..]
            .trim_start()
            .strip_prefix(',')
            .unwrap_or_else(|| panic!("{file}: no method router after {path}"));
        let methods = methods_of(router);
        assert!(
            !methods.is_empty(),
            "{file}: no method found for {path} in `{}`",
            router.trim()
        );
        for method in methods {
            assert!(
                !["ANY", "ON", "HEAD", "OPTIONS"].contains(&method.as_str()),
                "{file}: {path} is mounted with `{}`: document its methods and teach this test",
                method.to_lowercase()
            );
            found.push((method, path.to_owned()));
        }
    }
    found
}

/// Every `(METHOD, path)` the document has.
fn documented(doc: &Value) -> BTreeSet<(String, String)> {
    let paths = doc["paths"].as_object().expect("paths");
    let mut set = BTreeSet::new();
    for (path, item) in paths {
        for method in item.as_object().expect("a path item").keys() {
            if METHODS.contains(&method.as_str()) {
                set.insert((method.to_uppercase(), path.clone()));
            }
        }
    }
    set
}

/// Every operation: its method, path, path item and operation object.
fn operations(doc: &Value) -> Vec<(Method, String, &Value, &Value)> {
    let mut ops = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("a path item") {
            if METHODS.contains(&method.as_str()) {
                let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
                ops.push((method, path.clone(), item, op));
            }
        }
    }
    ops
}

/// The `{name}`s of a path template.
fn template_names(path: &str) -> Vec<&str> {
    path.split('/')
        .filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
        .collect()
}

/// The parameters of an operation, its path item's included.
fn parameters<'a>(item: &'a Value, op: &'a Value) -> Vec<&'a Value> {
    [item, op]
        .iter()
        .flat_map(|v| v["parameters"].as_array().into_iter().flatten())
        .collect()
}

/// The path with each `{name}` given a plausible value: its parameter's example, else the first
/// value its schema allows, else `x`.
fn concrete(path: &str, item: &Value, op: &Value) -> String {
    let mut out = path.to_owned();
    for name in template_names(path) {
        let param = parameters(item, op)
            .into_iter()
            .find(|p| p["in"] == "path" && p["name"] == name);
        let value = param
            .and_then(|p| p["example"].as_str().or(p["schema"]["enum"][0].as_str()))
            .unwrap_or("x");
        out = out.replace(&format!("{{{name}}}"), value);
    }
    out
}

/// Whether an operation needs no key: its own `security` is empty.
fn is_public(op: &Value) -> bool {
    op["security"].as_array().is_some_and(Vec::is_empty)
}

/// The request of an operation: a JSON object body for writes.
fn request(s: &Server, method: &Method, path: &str) -> reqwest::RequestBuilder {
    let req = s.http.request(method.clone(), format!("{}{path}", s.base));
    if *method == Method::POST || *method == Method::PUT {
        req.json(&json!({}))
    } else {
        req
    }
}

#[test]
fn every_route_the_router_has_is_documented_and_no_other() {
    // Every module the router merges, and every module of `routes`, is read here: a new one
    // must be added to `SOURCES`.
    let lib = source("lib.rs");
    let mut merged = vec!["routes/indexes.rs".to_owned()];
    assert!(
        lib.contains("routes::indexes::add("),
        "lib.rs no longer adds the indexes"
    );
    for call in lib.split(".merge(").skip(1) {
        let call = call_arguments(call).trim();
        let module = call
            .strip_suffix("::routes()")
            .unwrap_or_else(|| panic!("lib.rs merges `{call}`: teach this test to read it"));
        merged.push(format!("{}.rs", module.replace("::", "/")));
    }
    let modules = source("routes/mod.rs")
        .lines()
        .filter_map(|l| l.strip_prefix("pub mod ")?.strip_suffix(';'))
        .map(|m| format!("routes/{m}.rs"));
    for file in merged.into_iter().chain(modules) {
        assert!(
            SOURCES.iter().any(|(n, _)| *n == file),
            "{file} is not among this test's SOURCES"
        );
    }

    let mut mounted = BTreeSet::new();
    for (file, text) in SOURCES {
        for route in routes_in(file, text) {
            assert!(mounted.insert(route.clone()), "{route:?} is mounted twice");
        }
    }
    let doc = document();
    let documented = documented(&doc);
    let undocumented: Vec<_> = mounted.difference(&documented).collect();
    let unrouted: Vec<_> = documented.difference(&mounted).collect();
    assert!(
        undocumented.is_empty() && unrouted.is_empty(),
        "docs/openapi.json and the router differ.\nmounted, not documented: {undocumented:#?}\n\
         documented, not mounted: {unrouted:#?}"
    );
    assert!(
        mounted.len() > 90,
        "{} routes: the parser lost some",
        mounted.len()
    );
}

#[tokio::test]
async fn openapi_json_is_served_without_a_key_as_the_document() {
    let s = Server::start().await;
    let resp = s
        .http
        .get(format!("{}/openapi.json", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        resp.headers()["content-type"].to_str().unwrap(),
        "application/json"
    );
    let text = resp.text().await.unwrap();
    assert!(text == DOCUMENT, "/openapi.json is not docs/openapi.json");
    let served: Value = serde_json::from_str(&text).unwrap();
    let version = served["openapi"].as_str().unwrap_or_default();
    assert!(version.starts_with("3.1"), "openapi: {version}");
    assert_eq!(
        served["info"]["version"].as_str(),
        Some(env!("CARGO_PKG_VERSION")),
        "info.version is the server's version"
    );
}

#[tokio::test]
async fn every_documented_operation_reaches_its_handler() {
    let (s, _) = shop().await;
    let doc = document();
    let ops = operations(&doc);

    // Without credentials, a route that needs a key answers 401 from its handler (no fallback
    // does); one that needs none answers.
    let mut statuses = Vec::new();
    for (method, path, item, op) in &ops {
        let url = concrete(path, item, op);
        let resp = request(&s, method, &url).send().await.unwrap();
        let status = resp.status();
        let body = resp.text().await.unwrap_or_default();
        if is_public(op) {
            assert!(
                status.is_success(),
                "{method} {url} is documented without a key, and answers {status}: {body}"
            );
        } else {
            assert_eq!(
                status,
                StatusCode::UNAUTHORIZED,
                "{method} {url} is documented as needing a key: {body}"
            );
        }
        statuses.push((method.clone(), path.clone(), status));
    }

    // The router matched each request to the documented template itself (the metrics label a
    // request with the route that matched, `unmatched` for none).
    let metrics = s
        .http
        .get(format!("{}/metrics", s.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for (method, path, status) in &statuses {
        let series = format!(
            r#"penchant_http_requests_total{{method="{method}",route="{path}",status="{}"}}"#,
            status.as_u16()
        );
        assert!(
            metrics.lines().any(|l| l.starts_with(&series)),
            "{method} {path} was not routed to its template: no {series}"
        );
    }

    // With credentials (the global admin key, an admin of every app and the key of app
    // management), every handler answers: never the router's 404 (`no route for ...`) nor a 405,
    // and no server error.
    for (method, path, item, op) in &ops {
        let url = concrete(path, item, op);
        let resp = request(&s, method, &url)
            .header("X-Algolia-Application-Id", "SHOP")
            .header("X-Algolia-API-Key", ROOT)
            .send()
            .await
            .unwrap();
        let status = resp.status();
        let body = resp.text().await.unwrap_or_default();
        let message = serde_json::from_str::<Value>(&body)
            .ok()
            .and_then(|v| v["message"].as_str().map(str::to_owned))
            .unwrap_or_default();
        assert!(
            status != StatusCode::METHOD_NOT_ALLOWED
                && !(status == StatusCode::NOT_FOUND && message.starts_with("no route for")),
            "{method} {url}: the router has no such route ({status}: {body})"
        );
        assert!(
            !status.is_server_error(),
            "{method} {url} failed: {status}: {body}"
        );
    }
}

/// Every `$ref` in `value`, with where it is.
fn refs<'a>(value: &'a Value, at: String, out: &mut Vec<(String, &'a str)>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("$ref", Value::String(target)) => out.push((at.clone(), target)),
                    _ => refs(v, format!("{at}/{k}"), out),
                }
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                refs(v, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn the_document_is_well_formed() {
    let doc = document();
    assert_eq!(doc["openapi"], "3.1.0");
    // Pretty-printed with two spaces, one value a line.
    assert!(
        DOCUMENT.starts_with("{\n  \"openapi\": "),
        "not pretty-printed"
    );
    for (n, line) in DOCUMENT.lines().enumerate() {
        let indent = line.len() - line.trim_start_matches(' ').len();
        assert!(
            indent % 2 == 0 && !line.starts_with('\t') && line.trim_end() == line,
            "docs/openapi.json:{}: not indented with two spaces",
            n + 1
        );
    }

    // Every `$ref` resolves within the document.
    let mut found = Vec::new();
    refs(&doc, String::new(), &mut found);
    assert!(found.len() > 100, "{} refs", found.len());
    for (at, target) in &found {
        let pointer = target
            .strip_prefix('#')
            .unwrap_or_else(|| panic!("{at}: {target} is not a local reference"));
        assert!(
            doc.pointer(pointer).is_some(),
            "{at}: {target} does not resolve"
        );
    }

    let schemes = doc["components"]["securitySchemes"]
        .as_object()
        .expect("security schemes");
    for (name, header) in [
        ("appId", "X-Algolia-Application-Id"),
        ("apiKey", "X-Algolia-API-Key"),
    ] {
        assert_eq!(schemes[name]["type"], "apiKey");
        assert_eq!(schemes[name]["in"], "header");
        assert_eq!(schemes[name]["name"], header);
    }
    let requirements = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .flat_map(|r| r.as_object().unwrap().keys().cloned())
            .collect()
    };
    assert!(requirements(&doc["security"]).contains(&"apiKey".to_owned()));

    let tags: BTreeSet<&str> = doc["tags"]
        .as_array()
        .expect("tags")
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    let mut used_tags = BTreeSet::new();
    let mut ids: BTreeMap<&str, String> = BTreeMap::new();
    for (method, path, item, op) in operations(&doc) {
        let at = format!("{method} {path}");
        // A unique operationId, a summary, one declared tag.
        let id = op["operationId"]
            .as_str()
            .unwrap_or_else(|| panic!("{at} has no operationId"));
        if let Some(other) = ids.insert(id, at.clone()) {
            panic!("operationId {id} is both {other} and {at}");
        }
        assert!(
            op["summary"].as_str().is_some_and(|s| !s.is_empty()),
            "{at} has no summary"
        );
        let op_tags = op["tags"].as_array().expect("tags");
        assert_eq!(op_tags.len(), 1, "{at}: one tag");
        let tag = op_tags[0].as_str().unwrap();
        assert!(tags.contains(tag), "{at}: tag {tag} is not declared");
        used_tags.insert(tag);
        // Its path's parameters, each declared once and required.
        let declared: Vec<&str> = parameters(item, op)
            .into_iter()
            .filter(|p| p["in"] == "path")
            .map(|p| {
                assert_eq!(p["required"], true, "{at}: path parameters are required");
                p["name"].as_str().unwrap()
            })
            .collect();
        let mut in_path = template_names(&path);
        let mut declared_sorted = declared.clone();
        in_path.sort_unstable();
        declared_sorted.sort_unstable();
        assert_eq!(in_path, declared_sorted, "{at}: path parameters");
        // A success answer, and schemes that exist.
        let responses = op["responses"].as_object().expect("responses");
        assert!(
            responses.keys().any(|code| code.starts_with('2')),
            "{at} has no success response"
        );
        for scheme in requirements(&op["security"]) {
            assert!(
                schemes.contains_key(&scheme),
                "{at}: no security scheme {scheme}"
            );
        }
    }
    let unused: Vec<_> = tags.difference(&used_tags).collect();
    assert!(unused.is_empty(), "tags without operations: {unused:?}");
}

/// The ranker's settings as documented (`LearnedConfig`, with its `params`) are the engine's:
/// the same fields, each with the engine's default (none where the engine's is null).
#[test]
fn the_rankers_documented_settings_and_defaults_are_the_engines() {
    let doc = document();
    let code = serde_json::to_value(penchant_learn::learned::LearnedConfig::default())
        .expect("the ranker's settings serialize");
    same_defaults(
        &doc["components"]["schemas"]["LearnedConfig"],
        &code,
        "ranker",
    );
}

fn same_defaults(schema: &Value, code: &Value, at: &str) {
    let properties = schema["properties"]
        .as_object()
        .unwrap_or_else(|| panic!("{at}: no properties"));
    let documented: BTreeSet<&String> = properties.keys().collect();
    let fields: BTreeSet<&String> = code.as_object().expect("an object").keys().collect();
    assert_eq!(
        documented, fields,
        "{at}: documented fields against the engine's"
    );
    for (name, property) in properties {
        let (value, at) = (&code[name], format!("{at}.{name}"));
        if value.is_object() {
            same_defaults(property, value, &at);
            continue;
        }
        match (property.get("default"), value) {
            (None, Value::Null) => {}
            (Some(Value::Number(d)), Value::Number(v)) => {
                assert_eq!(d.as_f64(), v.as_f64(), "{at}: documented default");
            }
            (documented, value) => {
                assert_eq!(documented, Some(value), "{at}: documented default")
            }
        }
    }
}
