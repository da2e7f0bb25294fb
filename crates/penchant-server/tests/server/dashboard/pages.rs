//! Jobs, sets and recommendations: what each shows of the seeded data.

use reqwest::Method;
use serde_json::json;

use penchant_engine::events::Layout;
use penchant_engine::events::migration::{MigrationStatus, Phase};
use penchant_engine::jobs::{JobState, Progress};
use serde_json::Value;

use super::browser::run;
use super::seed;
use crate::common::{Server, now_ms};

/// `GET /1/apps/{app}/layout` of an app whose events move to the narrow layout, the backfill
/// done up to `user`'s event of `event_ms`.
fn running_migration(app: &str, user: &str, event_ms: i64) -> Value {
    let key = penchant_engine::keys::event(app, user, event_ms, 7);
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    let migration = MigrationStatus {
        state: JobState::Running,
        from: Layout::Wide,
        to: Layout::Narrow,
        phase: Phase::Backfill,
        changed_at: None,
        after: Some(hex),
        backfilled: 1500,
        dropped: 0,
        started_at: now_ms() - 5_000,
        finished_at: None,
        error: None,
        progress: Progress::of(&Phase::Backfill, &Phase::ALL[..5], 1500, "rows"),
    };
    json!({"eventLayout": "wide", "alsoWritten": "narrow", "migration": migration})
}

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
    // A ranker learned from the shop's few purchases.
    shop.job("/1/ranker/train", json!({"indexName": "products"}))
        .await;
    // Fold-in off: the page says so.
    shop.ok(
        Method::PUT,
        "/1/schedules",
        json!({"foldInEveryMinutes": 0, "buildEveryMinutes": 90}),
    )
    .await;

    let event_ms = now_ms() - 60_000;
    let running_migration = running_migration("SHOP", "alice", event_ms);

    let admin = shop.key.clone();
    run("pages", &s.base.clone(), super::DESKTOP, move |page| async move {
        page.open("#/jobs").await;
        page.sign_in("SHOP", &admin).await;
        // The last recompute, done; both in the history; the other jobs: none yet.
        page.until("the recompute", "document.querySelector('#job-recompute [data-state=done]')").await;
        page.until_text("#job-recompute", "users").await;
        // Its `events` counts the rows it read (per-day aggregates, fewer than the events):
        // labelled so, nowhere "events".
        let labels = page.js("return [...document.querySelectorAll('#job-recompute .stat-label')].map(e => e.innerText)", vec![]).await;
        let labels: Vec<String> = serde_json::from_value(labels).unwrap();
        assert!(labels.contains(&"rows read".to_owned()), "{labels:?}");
        assert!(labels.iter().all(|l| !l.contains("events")), "{labels:?}");
        page.until_text("#job-recompute .rows-read-note", "per-day aggregates").await;
        page.until("two past recomputes", "document.querySelectorAll('#job-history tbody tr').length === 2").await;
        let headers = page.texts("#job-history th").await;
        assert!(headers.contains(&"Rows read".to_owned()) && !headers.contains(&"Events".to_owned()), "{headers:?}");
        page.until("the training", "document.querySelector('#job-als [data-state=done]')").await;
        page.until_text("#job-als", "3 / 3").await;
        // Every kind's progress in one shape: the training's iterations against their total.
        page.until_text("#job-als .job-progress", "train (1/1): 3 / 3 iterations")
            .await;
        // What it counted: the 4 events read (it once said 0), the 4 (user, item) pairs of the
        // purchases (carol's view weighs nothing).
        let als = page.js("return Object.fromEntries([...document.querySelectorAll('#job-als dt')].map(dt => [dt.innerText, dt.nextElementSibling.innerText]))", vec![]).await;
        assert_eq!(als["events read"], "4", "{als}");
        assert_eq!(als["interactions"], "4", "{als}");
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
        page.until("the schedules", "document.querySelectorAll('#job-schedules tbody tr').length === 4").await;
        let rows = page.js("return [...document.querySelectorAll('#job-schedules tbody tr')].map(r => [...r.cells].map(c => c.innerText))", vec![]).await;
        assert_eq!(rows[0][0], "ALS training", "{rows}");
        assert_eq!(rows[0][1], "every 24 h", "{rows}");
        assert_eq!(rows[0][2], "—", "{rows}");
        assert!(rows[0][3].as_str().unwrap().contains(':'), "a time: {rows}");
        assert_eq!(rows[1][1], "off", "{rows}");
        assert_eq!(rows[1][3], "never (off)", "{rows}");
        assert_eq!(rows[2][1], "every 1 h 30 min", "{rows}");
        assert_eq!(rows[3][0], "Learned ranker", "{rows}");
        assert_eq!(rows[3][1], "every 24 h", "{rows}");
        // The ranker job and the ranker it stored.
        page.until("the ranker job", "document.querySelector('#job-ranker [data-state=done]')").await;
        page.until_text("#job-ranker", "index products, phase done").await;
        page.until_text("#job-ranker .ranker-model", "trees, validation NDCG").await;
        page.until_text("#queue-staleness", "older than 1 h").await;
        page.screenshot("jobs").await;
        page.assert_no_errors().await;

        // A migration caught mid-backfill (the API's answer, as the engine serializes it: a
        // real one is over too fast to see): its checkpoint reads as the user and the event's
        // time, not as the row key's hex.
        page.js(
            "const [path, answer] = arguments; const real = window.fetch; \
             window.fetch = (url, init) => String(url).endsWith(path) \
               ? Promise.resolve(new Response(JSON.stringify(answer), {status: 200, headers: {'Content-Type': 'application/json'}})) \
               : real(url, init);",
            vec![json!("/1/apps/SHOP/layout"), running_migration.clone()],
        )
        .await;
        let checkpoint = page.until_text("#job-layout", "backfill").await;
        let shown = page.until_text("#job-layout .checkpoint", "user alice, event of").await;
        let hex = running_migration["migration"]["after"].as_str().unwrap();
        assert!(!checkpoint.contains(hex) && !checkpoint.contains(&hex[..12]), "{checkpoint}");
        let when = page.js("return new Date(arguments[0]).toLocaleString('en-GB', {hour12: false})", vec![json!(event_ms)]).await;
        assert!(shown.contains(when.as_str().unwrap()), "{shown} lacks {when}");
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

/// A laptop's window.
const LAPTOP: (u32, u32) = (1280, 800);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recommendations_keep_their_scores_inside_their_cards_at_a_laptops_width() {
    let s = Server::start().await;
    let shop = seed::App::new(&s, "SHOP").await;
    // Records as a real catalog has them: long names and descriptions.
    let record = |id: &str, brand: &str| {
        json!({"objectID": id, "brand": brand,
               "name": format!("{brand} UltraWide Curved Gaming Monitor 34 inch {id} edition"),
               "description": "a long description that would widen the table well past its card if nothing wrapped it"})
    };
    shop.records(
        "products",
        &[
            record("monitor-0001-black", "Samsung"),
            record("monitor-0002-silver", "Samsung"),
            record("monitor-0003-white", "LG"),
        ],
    )
    .await;
    // Only views mark items seen: the buyers' queues keep what they bought.
    shop.ok(
        Method::PUT,
        "/1/seen/settings",
        json!({"eventTypes": ["view"]}),
    )
    .await;
    let e = seed::event;
    let ids = ["monitor-0001-black", "monitor-0002-silver"];
    shop.events(vec![
        e("conversion", "Bought", "alice", "products", &ids, 3000),
        e("conversion", "Bought", "bob", "products", &ids, 2000),
        e(
            "click",
            "Clicked",
            "bob",
            "products",
            &["monitor-0003-white"],
            1000,
        ),
    ])
    .await;
    shop.ok(Method::PUT, "/1/queues/for-you", json!({"indexName": "products", "size": 100, "sources": [{"source": "trending", "weight": 1}]})).await;
    shop.job("/1/recommend/build", json!({})).await;

    let admin = shop.key.clone();
    run("recommendations-laptop", &s.base.clone(), LAPTOP, move |page| async move {
        page.open("#/recommendations").await;
        page.sign_in("SHOP", &admin).await;
        page.until("the index filled in", "document.getElementById('rec-index').value === 'products'").await;
        page.type_into("#rec-object", "monitor-0001-black").await;
        page.type_into("#rec-user", "alice").await;
        page.js("document.querySelector('#rec-index').form.requestSubmit()", vec![]).await;
        page.until("every model", "[...document.querySelectorAll('.rec-model')].every(m => !m.innerText.includes('Asking'))").await;
        page.until("trending items", "document.querySelectorAll('.rec-model[data-model=trending-items] tbody tr').length === 3").await;
        page.until("bought together", "document.querySelector('.rec-model[data-model=bought-together] tbody tr')").await;
        page.type_into("#peek-user", "alice").await;
        page.enter("#peek-user").await;
        page.until("alice's queue", "document.querySelector('.peek-table tbody tr')").await;
        // Every table's Score header: inside its scrolling box (not hidden past its edge), its
        // card and the window; each table as wide as its box at most.
        let boxes = page.js(
            "return [...document.querySelectorAll('.hits-table')].map(t => { \
               const th = [...t.querySelectorAll('th')].find(c => c.innerText.trim() === 'Score'); \
               const wrap = t.closest('.table-wrap'), card = t.closest('.card'); \
               return {table: t.className, score: th.getBoundingClientRect().right, \
                       wrap: wrap.getBoundingClientRect().right, card: card.getBoundingClientRect().right, \
                       scroll: wrap.scrollWidth, client: wrap.clientWidth, window: window.innerWidth}; })",
            vec![],
        )
        .await;
        let boxes = boxes.as_array().unwrap();
        assert!(boxes.len() >= 3, "{boxes:?}");
        for b in boxes {
            let f = |k: &str| b[k].as_f64().unwrap();
            assert!(f("score") <= f("wrap") + 0.5, "the Score header is past its box: {b}");
            assert!(f("score") <= f("card") && f("score") <= f("window"), "the Score header is past its card: {b}");
            assert!(f("scroll") <= f("client"), "the table overflows its box: {b}");
        }
        page.screenshot("recommendations-laptop").await;
        page.assert_no_errors().await;
    })
    .await;
}
