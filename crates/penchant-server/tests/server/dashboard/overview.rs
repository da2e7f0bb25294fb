//! Sign-in (a bad key shows the API's message; Enter submits) and the overview's numbers.

use reqwest::Method;
use serde_json::json;

use super::browser::run;
use super::seed;
use crate::common::{ROOT, Server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_and_overview_show_the_apps_numbers() {
    let s = Server::start().await;
    let shop = seed::App::new(&s, "SHOP").await;
    // Five records over two indexes; a strategy; 4 clicks, 2 conversions and 1 view by two users.
    let record = |id: &str, brand: &str| json!({"objectID": id, "brand": brand});
    shop.records(
        "products",
        &[
            record("p1", "Apple"),
            record("p2", "Sony"),
            record("p3", "Apple"),
        ],
    )
    .await;
    shop.records("outlet", &[record("o1", "Sony"), record("o2", "Apple")])
        .await;
    shop.strategy(
        json!({"eventsScoring": [{"eventName": "Clicked", "eventType": "click", "score": 10},
                                 {"eventName": "Bought", "eventType": "conversion", "score": 50},
                                 {"eventName": "Viewed", "eventType": "view", "score": 1}],
               "facetsScoring": [{"facetName": "brand", "score": 100}],
               "personalizationImpact": 50}),
    )
    .await;
    let e = seed::event;
    shop.events(vec![
        e("click", "Clicked", "alice", "products", &["p1"], 3000),
        e("click", "Clicked", "alice", "products", &["p3"], 2000),
        e("click", "Clicked", "bob", "products", &["p2"], 2000),
        e("click", "Clicked", "bob", "outlet", &["o1"], 1000),
        e("conversion", "Bought", "alice", "products", &["p1"], 1000),
        e("conversion", "Bought", "bob", "outlet", &["o1"], 500),
        e("view", "Viewed", "bob", "products", &["p2"], 100),
    ])
    .await;
    // Another app's traffic is not this one's.
    let other = seed::App::new(&s, "OTHER").await;
    other
        .events(vec![e("click", "Clicked", "zed", "x", &["y"], 100)])
        .await;
    let (status, body) = s
        .call(
            Method::PUT,
            "/1/apps/SHOP",
            Some(("", ROOT)),
            Some(json!({"retentionDays": 30})),
        )
        .await;
    assert!(status.is_success(), "{body}");

    let key = shop.key.clone();
    let server = std::sync::Arc::new(s);
    run("overview", &server.base.clone(), super::DESKTOP, move |page| async move {
        page.open("").await;
        // Not signed in: the form, whatever the hash.
        page.find("#signin-form").await;
        page.type_into("#signin-app", "SHOP").await;
        page.type_into("#signin-key", "not-the-key").await;
        page.click("#signin-submit").await;
        page.until_text("#signin-status .error", "Invalid credentials").await;
        assert!(page.js("return document.getElementById('nav').hidden", vec![]).await.as_bool().unwrap());

        // The right key, submitted with Enter.
        page.type_into("#signin-key", &key).await;
        page.enter("#signin-key").await;
        page.until("the overview", "location.hash === '#/overview' && document.getElementById('page-overview')").await;
        page.until("catalog size 5", "document.querySelector('#stat-catalog')?.dataset.count === '5'").await;
        page.until_text("#stat-catalog", "5").await;
        page.until("2 indexes", "document.querySelector('#stat-indexes')?.dataset.count === '2'").await;
        page.until("2 users with profiles", "document.querySelector('#stat-profiles')?.dataset.count === '2'").await;
        page.until_text("#stat-profiles", "2").await;
        page.until_text("#stat-retention", "30 days").await;
        page.until_text("#stat-layout", "wide").await;
        // The chart's totals, by type.
        page.until("the chart", "document.querySelector('#events-chart svg')").await;
        for (kind, n) in [("click", 4), ("conversion", 2), ("view", 1)] {
            page.until_text(&format!("#events-chart li[data-type={kind}]"), &format!("{kind}: {n}")).await;
        }
        // One line per type.
        let lines = page.js("return document.querySelectorAll('#events-chart path.line').length", vec![]).await;
        assert_eq!(lines, json!(3));
        // Another range asks again and shows the same totals.
        page.find("#overview-hours").await.select_by_value("1").await.unwrap();
        page.until_text("#events-chart li[data-type=click]", "click: 4").await;
        page.screenshot("overview").await;
        page.assert_no_errors().await;

        // Refreshed every 10 s: two more clicks show up without a touch.
        let e = seed::event;
        let shop = seed::App { s: &server, app: "SHOP", key: key.clone() };
        shop.events(vec![
            e("click", "Clicked", "carol", "products", &["p1"], 0),
            e("click", "Clicked", "carol", "products", &["p2"], 0),
        ])
        .await;
        page.until_within(
            std::time::Duration::from_secs(25),
            "the refreshed chart",
            "document.querySelector('#events-chart li[data-type=click]')?.dataset.total === '6'",
        )
        .await;

        // Credentials are kept for the tab: a reload stays signed in; signing out forgets them.
        page.client.refresh().await.unwrap();
        page.until("still signed in", "!document.getElementById('nav').hidden && document.getElementById('page-overview')").await;
        page.click("#sign-out").await;
        page.find("#signin-form").await;
        let stored = page.js("return sessionStorage.length", vec![]).await;
        assert_eq!(stored, json!(0));
        page.assert_no_errors().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_without_the_acls_signs_in_and_sees_the_apis_refusals() {
    let s = Server::start().await;
    let shop = seed::App::new(&s, "SHOP").await;
    let search = s.key("SHOP", &shop.key, &["search"]).await;
    run(
        "refusals",
        &s.base.clone(),
        super::DESKTOP,
        move |page| async move {
            page.open("#/overview").await;
            // A valid key of the app without `settings`: signed in all the same.
            page.sign_in("SHOP", &search).await;
            // Each part says what the API said.
            page.until_text(
                "#overview-stats + div",
                "Users with profiles — 403: Method not allowed with this API key",
            )
            .await;
            page.until_text(
                "#overview-stats + div",
                "Catalog size — 403: Method not allowed with this API key",
            )
            .await;
            page.until_text("#overview-app", "403: Method not allowed with this API key")
                .await;
            page.until_text("#events-chart", "403: Method not allowed with this API key")
                .await;
            page.assert_no_errors().await;
        },
    )
    .await;
}
