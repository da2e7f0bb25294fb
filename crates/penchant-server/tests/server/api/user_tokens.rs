//! User tokens in URL paths are checked like those in bodies: a token holding the key layout's
//! separator (`\0`) or any byte outside Algolia's pattern is a 400, and reaches no other user's
//! rows (`a%00` once cut the prefix `APP\0a\0\0`, which holds user `a`'s events and aggregates).

use penchant_store::{ReadRows, Row, RowSet};
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::common::{Server, shop};

/// Every row of user `a` in the tables a deletion touches.
async fn rows_of_a(s: &Server) -> Vec<(String, Vec<Row>)> {
    let mut out = Vec::new();
    for table in ["events", "aggregates", "seen", "profiles"] {
        let prefix = penchant_engine::keys::user("SHOP", "a");
        let mut rows = s
            .store
            .read_all(table, ReadRows::new(RowSet::prefix(prefix)))
            .await
            .unwrap();
        if table == "profiles" {
            let key = penchant_engine::keys::profile("SHOP", "a");
            rows = s
                .store
                .read_all(table, ReadRows::new(RowSet::keys([key])))
                .await
                .unwrap();
        }
        assert!(!rows.is_empty(), "user a has rows in {table}");
        out.push((table.to_owned(), rows));
    }
    out
}

#[tokio::test]
async fn a_separator_in_a_path_token_is_refused_and_reaches_no_one() {
    let (s, admin) = shop().await;
    let creds = Some(("SHOP", admin.as_str()));
    let strategy = json!({
        "eventsScoring": [{"eventName": "Viewed", "eventType": "view", "score": 10}],
        "facetsScoring": [{"facetName": "brand", "score": 10}],
        "personalizationImpact": 50
    });
    let path = "/1/strategies/personalization";
    let (status, _) = s.call(Method::POST, path, creds, Some(strategy)).await;
    assert_eq!(status, StatusCode::OK);
    // A view: events, its day's aggregate, the profile and the seen filter.
    let events = json!({"events": [{"eventType": "view", "eventName": "Viewed", "index": "items",
        "userToken": "a", "objectIDs": ["item-1"]}, {"eventType": "view", "eventName": "Viewed",
        "index": "items", "userToken": "a", "filters": ["brand:Apple"]}]});
    s.ok(Method::POST, "/1/events", creds, Some(events)).await;
    let before = rows_of_a(&s).await;

    let message = "UserToken must contain only alphanumeric, equal, plus, slash, hyphen, or \
                   underscore characters, and be between 1 and 128 characters long";
    for (method, path) in [
        (Method::DELETE, "/1/usertokens/a%00"),
        (Method::DELETE, "/1/profiles/a%00"),
        (Method::GET, "/1/profiles/personalization/a%00"),
        (
            Method::GET,
            "/1/profiles/personalization/a%00/optionalFilters",
        ),
        (Method::DELETE, "/1/seen/users/a%00"),
        (Method::GET, "/1/seen/users/a%00"),
        (Method::DELETE, "/1/usertokens/a%20b"),
    ] {
        let (status, body) = s.call(method.clone(), path, creds, None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{method} {path}: {body}");
        assert_eq!(body["message"], message, "{method} {path}");
    }
    assert_eq!(
        rows_of_a(&s).await,
        before,
        "user a's rows are as they were"
    );
    let body = s
        .ok(Method::GET, "/1/profiles/personalization/a", creds, None)
        .await;
    assert_eq!(body["scores"]["brand"]["Apple"], 20);
}

#[tokio::test]
async fn a_user_with_only_unscored_events_has_no_profile() {
    let (s, admin) = shop().await;
    let creds = Some(("SHOP", admin.as_str()));
    let strategy = json!({
        "eventsScoring": [{"eventName": "Bought", "eventType": "conversion", "score": 10}],
        "facetsScoring": [{"facetName": "brand", "score": 10}],
        "personalizationImpact": 50
    });
    let path = "/1/strategies/personalization";
    s.call(Method::POST, path, creds, Some(strategy)).await;
    // A view the strategy does not count, and a counted event without a scored facet.
    let events = json!({"events": [
        {"eventType": "view", "eventName": "Viewed", "index": "items", "userToken": "u",
         "filters": ["brand:Apple"]},
        {"eventType": "conversion", "eventName": "Bought", "index": "items", "userToken": "u",
         "filters": ["color:red"]}
    ]});
    let (status, _) = s.call(Method::POST, "/1/events", creds, Some(events)).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = s
        .call(Method::GET, "/1/profiles/personalization/u", creds, None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["message"], "User token u not found");
}
