//! Jobs, sets and recommendations: what each shows of the seeded data.

use reqwest::Method;
use serde_json::json;

use super::browser::run;
use super::seed;
use crate::common::Server;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_sets_and_recommendations_show_the_apps_state() {
    let s = Server::start().await;
    let shop = seed::App::new(&s, "SHOP").await;
    let record = |id: &str, brand: &str| json!({"objectID": id, "brand": brand, "name": format!("{brand} {id}")});
    shop.records(
        "products",
        &[
            record("a1", "Apple"),
            record("a2", "Apple"),
            record("s1", "Samsung"),
        ],
    )
    .await;
    shop.strategy(json!({
        "eventsScoring": [{"eventName": "Bought", "eventType": "conversion", "score": 50}],
        "facetsScoring": [{"facetName": "brand", "score": 100}],
        "personalizationImpact": 50}))
        .await;
    // A shop whose items are bought again: only views mark them seen.
    shop.ok(
        Method::PUT,
        "/1/seen/settings",
        json!({"eventTypes": ["view"]}),
    )
    .await;
    let e = seed::event;
    shop.events(vec![
        e(
            "conversion",
            "Bought",
            "alice",
            "products",
            &["a1", "a2"],
            3000,
        ),
        e("conversion", "Bought", "bob", "products", &["a1"], 2000),
        e("conversion", "Bought", "bob", "products", &["s1"], 1000),
        e("view", "Viewed", "carol", "products", &["a1"], 500),
    ])
    .await;
    // A second strategy: two recomputes in the history.
    shop.strategy(json!({
        "eventsScoring": [{"eventName": "Bought", "eventType": "conversion", "score": 60}],
        "facetsScoring": [{"facetName": "brand", "score": 100}],
        "personalizationImpact": 50}))
        .await;
    shop.ok(
        Method::POST,
        "/1/sets",
        json!({"name": "blocked", "capacity": 1000, "errorRate": 0.01}),
    )
    .await;
    shop.ok(
        Method::POST,
        "/1/sets/blocked/madd",
        json!({"keys": ["u1", "u2", "u3"]}),
    )
    .await;
    shop.ok(Method::PUT, "/1/queues/for-you", json!({"indexName": "products", "size": 100, "sources": [{"source": "trending", "weight": 1}]})).await;

    // An ALS training and a build of the lists and queues.
    shop.job("/1/als/train", json!({"factors": 4, "iterations": 3}))
        .await;
    shop.job("/1/recommend/build", json!({})).await;
    // Fold-in off: the page says so.
    shop.ok(
        Method::PUT,
        "/1/schedules",
        json!({"foldInEveryMinutes": 0, "buildEveryMinutes": 90}),
    )
    .await;

    let admin = shop.key.clone();
    run("pages", &s.base.clone(), super::DESKTOP, move |page| async move {
        page.open("#/jobs").await;
        page.sign_in("SHOP", &admin).await;
        // The last recompute, done; both in the history; the other jobs: none yet.
        page.until("the recompute", "document.querySelector('#job-recompute [data-state=done]')").await;
        page.until_text("#job-recompute", "users").await;
        page.until("two past recomputes", "document.querySelectorAll('#job-history tbody tr').length === 2").await;
        page.until("the training", "document.querySelector('#job-als [data-state=done]')").await;
        page.until_text("#job-als", "3 / 3").await;
        // Every kind's progress in one shape: the training's iterations against their total.
        page.until_text("#job-als .job-progress", "train (1/1): 3 / 3 iterations")
            .await;
        page.until("the build", "document.querySelector('#job-build [data-state=done]')").await;
        page.until_text("#job-build", "for-you").await;
        page.until("the build's progress", "document.querySelector('#job-build .job-progress')")
            .await;
        page.until_text("#job-layout", "wide").await;
        page.until_text("#job-layout", "No migration yet").await;
        // One store: the app's rows are in the default target, never moved.
        page.until_text("#job-placement", "default").await;
        page.until_text("#job-placement", "No move yet").await;
        // The schedules: every task, its interval and next run (the app has events: due now).
        page.until("the schedules", "document.querySelectorAll('#job-schedules tbody tr').length === 3").await;
        let rows = page.js("return [...document.querySelectorAll('#job-schedules tbody tr')].map(r => [...r.cells].map(c => c.innerText))", vec![]).await;
        assert_eq!(rows[0][0], "ALS training", "{rows}");
        assert_eq!(rows[0][1], "every 24 h", "{rows}");
        assert_eq!(rows[0][2], "—", "{rows}");
        assert!(rows[0][3].as_str().unwrap().contains(':'), "a time: {rows}");
        assert_eq!(rows[1][1], "off", "{rows}");
        assert_eq!(rows[1][3], "never (off)", "{rows}");
        assert_eq!(rows[2][1], "every 1 h 30 min", "{rows}");
        page.until_text("#queue-staleness", "older than 1 h").await;
        page.screenshot("jobs").await;
        page.assert_no_errors().await;

        page.click("#nav a[data-page=sets]").await;
        page.until("the set", "document.querySelector('.sets-table tbody tr')").await;
        let row = page.texts(".sets-table tbody tr:first-child td").await;
        assert_eq!(row[0], "blocked");
        assert_eq!(row[1], "3");
        assert_eq!(page.js("return document.querySelector('.sets-table .rate').dataset.over", vec![]).await, json!("false"));
        page.type_into("#sets-test-keys", "u1, nobody").await;
        page.js("document.querySelector('#sets-test-keys').form.requestSubmit()", vec![]).await;
        page.until("the keys' answers", "document.querySelectorAll('#sets-test-result li').length === 2").await;
        let exists = page.js("return [...document.querySelectorAll('#sets-test-result li')].map(l => l.dataset.exists)", vec![]).await;
        assert_eq!(exists, json!(["true", "false"]));
        page.until_text("#seen-settings", "view").await;
        // Carol viewed a1: her filter has it.
        page.type_into("#seen-user", "carol").await;
        page.type_into("#seen-items", "a1\ns1").await;
        page.js("document.querySelector('#seen-user').form.requestSubmit()", vec![]).await;
        page.until("the seen answers", "document.querySelectorAll('#seen-result li').length === 2").await;
        let seen = page.js("return [...document.querySelectorAll('#seen-result li')].map(l => l.dataset.exists)", vec![]).await;
        assert_eq!(seen, json!(["true", "false"]));
        page.screenshot("sets").await;
        page.assert_no_errors().await;

        page.click("#nav a[data-page=recommendations]").await;
        page.until("the queue", "document.querySelector('.queues-table tbody tr')").await;
        page.until_text(".queues-table tbody tr", "for-you").await;
        page.until_text(".queues-table tbody tr", "trending").await;
        // Bob's queue: what he has not seen, trending first.
        page.type_into("#peek-user", "bob").await;
        page.enter("#peek-user").await;
        page.until("bob's queue", "document.querySelector('.peek-table tbody tr')").await;
        let queued = page.js("return [...document.querySelectorAll('.peek-table tbody tr')].map(r => r.cells[1].innerText)", vec![]).await;
        assert_eq!(queued[0], json!("a1"), "{queued}");
        // The index comes from the queue; trending items: a1 (two conversions) first.
        page.until("the index filled in", "document.getElementById('rec-index').value === 'products'").await;
        page.type_into("#rec-object", "a1").await;
        page.type_into("#rec-user", "alice").await;
        page.type_into("#rec-facet-name", "brand").await;
        page.js("document.querySelector('#rec-index').form.requestSubmit()", vec![]).await;
        page.until("trending items", "document.querySelector('.rec-model[data-model=trending-items] tbody tr')").await;
        let first = page.texts(".rec-model[data-model=trending-items] tbody tr:first-child td").await;
        assert_eq!(first[1], "a1", "{first:?}");
        assert!(first[2].contains("brand: Apple"), "{first:?}");
        // Every model answered: hits, "no hits" or the API's message.
        page.until("every model", "[...document.querySelectorAll('.rec-model')].every(m => !m.innerText.includes('Asking'))").await;
        page.until_text(".rec-model[data-model=trending-facets]", "Apple").await;
        page.until_text(".rec-model[data-model=bought-together]", "answered by").await;
        page.screenshot("recommendations").await;
        page.assert_no_errors().await;
    })
    .await;
}
