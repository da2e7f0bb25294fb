//! The A/B tests page: a test started through the form (a preset), served and converted through
//! the HTTP API, its results shown as the API gives them, a second test on the index refused
//! beside the form, then the test stopped and deleted.

use reqwest::Method;
use serde_json::{Value, json};

use super::browser::{Page, run};
use super::seed;
use crate::common::{Server, now_ms};

/// The variants' counts the page shows, by the API's names.
const COUNTS: &[&str] = &[
    "userCount",
    "trackedUserCount",
    "searchCount",
    "trackedSearchCount",
    "clickCount",
    "conversionCount",
    "addToCartCount",
    "purchaseCount",
    "clickedUserCount",
    "convertedUserCount",
    "estimatedSampleSize",
];

/// Its rates.
const RATES: &[&str] = &[
    "clickThroughRate",
    "conversionRate",
    "addToCartRate",
    "purchaseRate",
    "userConversionRate",
];

/// A number as the page's `num` writes it (en-US: thousands separated by commas).
fn grouped(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}

/// A significance as the page writes it: rounded down to two decimals.
fn significance(s: f64) -> String {
    format!("{:.2}", (s * 100.0).floor() / 100.0)
}

/// The cell of `metric` for the 1-based `variant`: its `data-value` and its text.
async fn cell(page: &Page, metric: &str, variant: usize) -> (String, String) {
    let v = page
        .js(
            "const td = document.querySelector(`#abtest-metrics tr[data-metric=\"${arguments[0]}\"] td[data-variant=\"${arguments[1]}\"]`); \
             return td ? [td.dataset.value, td.innerText.trim()] : null",
            vec![json!(metric), json!(variant)],
        )
        .await;
    assert!(!v.is_null(), "no cell for {metric} of variant {variant}");
    (
        v[0].as_str().unwrap().to_owned(),
        v[1].as_str().unwrap().to_owned(),
    )
}

/// A cell's `data-value` against the API's value (a number, or null for an empty one).
fn same_number(shown: &str, api: &Value, what: &str) {
    match api.as_f64() {
        None => assert_eq!(shown, "", "{what}: the API says {api}"),
        Some(x) => {
            let y: f64 = shown
                .parse()
                .unwrap_or_else(|_| panic!("{what}: «{shown}» for {x}"));
            assert!(
                (x - y).abs() < 1e-12,
                "{what}: the page shows {y}, the API says {x}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_started_in_the_form_shows_the_apis_results_and_stops() {
    let s = Server::start().await;
    let shop = seed::App::new(&s, "SHOP").await;
    let record = |id: &str, brand: &str| json!({"objectID": id, "brand": brand, "name": format!("{brand} {id}")});
    shop.records(
        "products",
        &[
            record("p1", "Apple"),
            record("p2", "Samsung"),
            record("p3", "Nokia"),
        ],
    )
    .await;
    shop.strategy(json!({
        "eventsScoring": [{"eventName": "Bought", "eventType": "conversion", "score": 50}],
        "facetsScoring": [{"facetName": "brand", "score": 100}],
        "personalizationImpact": 50}))
        .await;
    // Two queues for the queue preset.
    for queue in ["for-you", "trending-first"] {
        shop.ok(
            Method::PUT,
            &format!("/1/queues/{queue}"),
            json!({"indexName": "products", "size": 100, "sources": [{"source": "trending", "weight": 1}]}),
        )
        .await;
    }

    let admin = shop.key.clone();
    let base = s.base.clone();
    let s = std::sync::Arc::new(s);
    let server = s.clone();
    run("abtests", &base, super::DESKTOP, move |page| async move {
        let shop = seed::App { s: &server, app: "SHOP", key: admin.clone() };
        page.open("#/abtests").await;
        page.sign_in("SHOP", &admin).await;
        page.until_text("#abtests-list", "No A/B tests yet").await;
        page.until("the form's choices", "document.querySelector('#abtest-form[data-ready=true]')").await;
        // The index is the app's; the end 14 days ahead.
        let index = page.js("return document.getElementById('abtest-index').value", vec![]).await;
        assert_eq!(index, json!("products"));
        let end = page.js("return document.getElementById('abtest-end').value", vec![]).await;
        let in_14_days = page
            .js("const d = new Date(Date.now() + 14 * 86400000); return `${d.getFullYear()}-${String(d.getMonth() + 1).padStart(2, '0')}-${String(d.getDate()).padStart(2, '0')}`", vec![])
            .await;
        assert_eq!(end, in_14_days);

        // The queue preset: one queue per variant.
        page.click("#preset-queues").await;
        let queues = page.js("return [document.getElementById('abtest-a-queue').value, document.getElementById('abtest-b-queue').value, document.getElementById('abtest-name').value]", vec![]).await;
        assert_eq!(queues, json!(["for-you", "trending-first", "Queue A vs queue B"]));
        // The personalization preset replaces it; B's share typed.
        page.click("#preset-perso").await;
        page.type_into("#abtest-split", "40").await;
        page.until_text("#abtest-split-b", "60%").await;
        let request: Value = serde_json::from_str(
            page.js("return document.getElementById('abtest-request').textContent", vec![]).await.as_str().unwrap(),
        )
        .unwrap();
        assert_eq!(request["name"], "Personalization off vs impact 50", "{request}");
        assert_eq!(request["variants"][0]["customSearchParameters"], json!({"enablePersonalization": false}), "{request}");
        assert_eq!(
            request["variants"][1]["customSearchParameters"],
            json!({"enablePersonalization": true, "personalizationImpact": 50}),
            "{request}"
        );
        page.click("#abtest-submit").await;

        // Started: the page shows its results.
        let id = page
            .until("the test's page", "(location.hash.match(/^#\\/abtests\\/(\\d+)$/) || [])[1]")
            .await;
        let id: u32 = id.as_str().unwrap().parse().unwrap();
        page.until_text("#abtest-head", "Personalization off vs impact 50").await;
        page.until("the test active", "document.querySelector('#abtest-head [data-state=active]')").await;
        let test = shop.ok(Method::GET, &format!("/2/abtests/{id}"), json!({})).await;
        assert_eq!(test["status"], "active", "{test}");
        assert_eq!(test["variants"][0]["trafficPercentage"], 40, "{test}");
        assert_eq!(test["variants"][1]["trafficPercentage"], 60, "{test}");
        assert_eq!(test["variants"][0]["index"], "products", "{test}");
        assert_eq!(test["variants"][1]["customSearchParameters"]["personalizationImpact"], 50, "{test}");
        let end_at = page.js("return Date.parse(arguments[0])", vec![test["endAt"].clone()]).await;
        let end_at = end_at.as_i64().unwrap_or_else(|| panic!("endAt: {test}"));
        let days = (end_at - now_ms()) as f64 / 86_400_000.0;
        assert!((13.9..15.1).contains(&days), "ends in {days} days: {test}");

        // Users served through the API: each a tracked re-ranking; in B everyone clicks and
        // buys, in A one user in three clicks and nobody buys.
        let mut users = [0_usize; 2];
        for i in 0..30 {
            let user = format!("user-{i}");
            let answer = shop
                .ok(
                    Method::POST,
                    "/1/indexes/products/rerank",
                    json!({"userToken": user, "clickAnalytics": true,
                           "hits": [{"objectID": "p1"}, {"objectID": "p2"}, {"objectID": "p3"}]}),
                )
                .await;
            assert_eq!(answer["abTestID"], id, "{answer}");
            let variant = answer["abTestVariantID"].as_u64().expect("a variant") as usize;
            let query = answer["queryID"].as_str().expect("a queryID").to_owned();
            assert_eq!(query.len(), 32, "{answer}");
            users[variant - 1] += 1;
            let event = |kind: &str, name: &str| {
                json!({"eventType": kind, "eventName": name, "index": "products", "userToken": user,
                       "queryID": query, "objectIDs": ["p1"], "timestamp": now_ms()})
            };
            let mut events = Vec::new();
            if variant == 2 || i % 3 == 0 {
                let mut click = event("click", "Clicked");
                click["positions"] = json!([1 + i % 3]);
                events.push(click);
            }
            if variant == 2 {
                let mut cart = event("conversion", "Added to cart");
                cart["eventSubtype"] = json!("addToCart");
                events.push(cart);
                let mut purchase = event("conversion", "Bought");
                purchase["eventSubtype"] = json!("purchase");
                purchase["value"] = json!(19.5);
                purchase["currency"] = json!("USD");
                events.push(purchase);
            }
            if !events.is_empty() {
                shop.events(events).await;
            }
        }
        assert!(users[0] >= 3 && users[1] >= 3, "both variants have users: {users:?}");

        // The page (refreshed every few seconds) shows what the API says.
        let test = shop.ok(Method::GET, &format!("/2/abtests/{id}"), json!({})).await;
        let variants = test["variants"].as_array().unwrap().clone();
        assert_eq!(variants[0]["userCount"], users[0], "{test}");
        assert_eq!(variants[1]["userCount"], users[1], "{test}");
        assert_eq!(variants[1]["purchaseCount"], users[1], "{test}");
        page.until_within(
            std::time::Duration::from_secs(20),
            "the page's counts refreshed",
            &format!(
                "document.querySelector('#abtest-metrics tr[data-metric=purchaseCount] td[data-variant=\"2\"]').dataset.value === '{}' && \
                 document.querySelector('#abtest-metrics tr[data-metric=userCount] td[data-variant=\"1\"]').dataset.value === '{}'",
                users[1], users[0]
            ),
        )
        .await;
        for (i, v) in variants.iter().enumerate() {
            for metric in COUNTS {
                let (value, text) = cell(&page, metric, i + 1).await;
                let what = format!("{metric} of variant {}", i + 1);
                same_number(&value, &v[*metric], &what);
                match v[*metric].as_i64() {
                    Some(n) => assert_eq!(text, grouped(n), "{what}"),
                    None => assert_eq!(text, "—", "{what}"),
                }
            }
            for metric in RATES {
                let (value, text) = cell(&page, metric, i + 1).await;
                let what = format!("{metric} of variant {}", i + 1);
                same_number(&value, &v[*metric], &what);
                match v[*metric].as_f64() {
                    Some(x) => assert_eq!(text, format!("{:.2}%", x * 100.0), "{what}"),
                    None => assert_eq!(text, "—", "{what}"),
                }
            }
            // Revenue: B's purchases, in dollars.
            let revenue = v["currencies"]["USD"]["revenue"].as_f64().unwrap_or(0.0);
            let (value, text) = cell(&page, "revenue.USD", i + 1).await;
            same_number(&value, &json!(revenue), "revenue");
            assert_eq!(text, format!("USD {revenue:.2}"), "revenue of variant {}", i + 1);
        }
        assert!((variants[1]["currencies"]["USD"]["revenue"].as_f64().unwrap() - 19.5 * users[1] as f64).abs() < 1e-9, "{test}");

        // Each significance as the API gives it, with its verdict: B converts better.
        for key in ["clickSignificance", "conversionSignificance", "addToCartSignificance", "purchaseSignificance"] {
            let shown = page
                .js(
                    "const li = document.querySelector(`#abtest-verdicts li[data-significance=\"${arguments[0]}\"]`); \
                     return li ? [li.dataset.value, li.innerText] : null",
                    vec![json!(key)],
                )
                .await;
            assert!(!shown.is_null(), "no verdict for {key}");
            same_number(shown[0].as_str().unwrap(), &test[key], key);
            let text = shown[1].as_str().unwrap();
            match test[key].as_f64() {
                None => assert!(text.contains("no data yet"), "{key}: {text}"),
                Some(x) if x >= 0.95 => assert!(text.contains("B ") && text.contains(&format!("significance {}", significance(x))), "{key}: {text}"),
                Some(x) => assert!(text.contains(&format!("not significant yet ({})", significance(x))) || text.contains("no difference yet"), "{key}: {text}"),
            }
        }
        let conversion = test["conversionSignificance"].as_f64().expect("a conversion significance");
        assert!(conversion >= 0.95, "everyone in B converts, nobody in A: {test}");
        page.until_text(
            "#abtest-verdicts li[data-significance=conversionSignificance]",
            &format!("Conversions: B converts better, significance {}", significance(conversion)),
        )
        .await;
        page.until_text("#abtest-updated", "refreshed every 3 s").await;
        // The other verdicts, as the page words them.
        page.js(
            "import('/dashboard/abtests.js').then(m => { window.__verdicts = [ \
               m.verdict(0.62, 0.1, 0.2, 'converts better', 1200).text, \
               m.verdict(0.9499, 0.1, 0.2, 'converts better', null).text, \
               m.verdict(0.999, 0.3, 0.1, 'converts better', 10).text, \
               m.verdict(0.5, 0.2, 0.2, 'converts better', null).text, \
               m.verdict(null, null, null, 'converts better', null).text]; })",
            vec![],
        )
        .await;
        let verdicts = page.until("the verdicts", "window.__verdicts").await;
        assert_eq!(
            verdicts,
            json!([
                "not significant yet (0.62) — about 1,200 more users needed",
                "not significant yet (0.94)",
                "A converts better, significance 0.99",
                "no difference yet, significance 0.50",
                "no data yet: both variants need users",
            ])
        );
        page.screenshot("abtests").await;
        page.assert_no_errors().await;

        // The list: the test, its users and conversion rates as the API says.
        page.click("#abtests-back").await;
        let row = format!("#abtests-list tr[data-id=\"{id}\"]");
        page.until_text(&row, "Personalization off vs impact 50").await;
        let cells = page.texts(&format!("{row} td")).await;
        assert_eq!(cells[2], "active", "{cells:?}");
        assert_eq!(cells[3], "products", "{cells:?}");
        assert_eq!(cells[4], "40 / 60", "{cells:?}");
        assert_eq!(cells[7], format!("{} / {}", users[0], users[1]), "{cells:?}");
        let rate = |v: &Value| v.as_f64().map_or("—".to_owned(), |x| format!("{:.2}%", x * 100.0));
        assert_eq!(cells[8], format!("{} / {}", rate(&variants[0]["conversionRate"]), rate(&variants[1]["conversionRate"])), "{cells:?}");
        assert_eq!(cells[9], significance(conversion), "{cells:?}");

        // A second test on the index: the API's refusal, beside the form.
        page.until("the form's choices", "document.querySelector('#abtest-form[data-ready=true]')").await;
        page.click("#preset-perso").await;
        page.click("#abtest-submit").await;
        page.until_text("#abtest-form-status .error", "already in the running A/B test").await;
        let hash = page.js("return location.hash", vec![]).await;
        assert_eq!(hash, json!("#/abtests"));
        page.screenshot("abtests-list").await;
        page.assert_no_errors().await;

        // Stopped after a confirmation: stopped for the API, no Stop button, no more refreshes.
        page.click(&format!("{row} a.abtest-link")).await;
        page.until("the test active", "document.querySelector('#abtest-head [data-state=active]')").await;
        page.click("#abtest-stop").await;
        page.click("#confirm-ok").await;
        page.until("the test stopped", "document.querySelector('#abtest-head [data-state=stopped]')").await;
        page.until_text("#abtest-status", "The test is stopped").await;
        page.until_text("#abtest-updated", "the test has ended").await;
        let hidden = page.js("return document.getElementById('abtest-stop').hidden", vec![]).await;
        assert_eq!(hidden, json!(true));
        let test = shop.ok(Method::GET, &format!("/2/abtests/{id}"), json!({})).await;
        assert_eq!(test["status"], "stopped", "{test}");
        page.click("#abtests-back").await;
        page.until(
            "the stopped test in the list",
            &format!("document.querySelector('{row}[data-status=stopped]')"),
        )
        .await;

        // Deleted after a confirmation: gone from the list and the API.
        page.click(&format!("{row} a.abtest-link")).await;
        page.until("the test stopped", "document.querySelector('#abtest-head [data-state=stopped]')").await;
        page.click("#abtest-delete").await;
        page.click("#confirm-ok").await;
        page.until_text("#abtests-list", "No A/B tests yet").await;
        let creds = Some(("SHOP", admin.as_str()));
        let (status, _) = server.call(Method::GET, &format!("/2/abtests/{id}"), creds, None).await;
        assert_eq!(status, 404);
        page.assert_no_errors().await;
    })
    .await;
}

/// A test's list and results at a phone's width: nothing wider than the screen (the tables
/// scroll in their own box).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_a_phone_width_the_ab_test_pages_do_not_overflow() {
    let s = Server::start().await;
    let shop = seed::App::new(&s, "SHOP").await;
    shop.records("products", &[json!({"objectID": "p1", "brand": "Apple"})])
        .await;
    shop.ok(
        Method::PUT,
        "/1/queues/for-you-with-a-long-name",
        json!({"indexName": "products", "size": 100, "sources": [{"source": "trending", "weight": 1}]}),
    )
    .await;
    let end = "2099-01-01T00:00:00Z";
    let test = shop
        .ok(
            Method::POST,
            "/2/abtests",
            json!({"name": "A test with a rather long name, as people give them", "endAt": end, "variants": [
                {"index": "products", "trafficPercentage": 50, "description": "control",
                 "customSearchParameters": {"enablePersonalization": false}},
                {"index": "products", "trafficPercentage": 50, "description": "a queue and a model",
                 "customSearchParameters": {"queue": "for-you-with-a-long-name", "model": "recommended-for-you"}},
            ]}),
        )
        .await;
    let id = test["abTestID"].as_u64().unwrap();
    for i in 0..6 {
        shop.ok(
            Method::POST,
            "/1/indexes/products/rerank",
            json!({"userToken": format!("user-{i}"), "clickAnalytics": true, "hits": [{"objectID": "p1"}]}),
        )
        .await;
    }

    let admin = shop.key.clone();
    run(
        "abtests-phone",
        &s.base.clone(),
        super::PHONE,
        move |page| async move {
            page.open("#/abtests").await;
            page.sign_in("SHOP", &admin).await;
            page.until(
                "the test",
                &format!("document.querySelector('#abtests-list tr[data-id=\"{id}\"]')"),
            )
            .await;
            page.until(
                "the form's choices",
                "document.querySelector('#abtest-form[data-ready=true]')",
            )
            .await;
            let overflow = page
                .js(
                    "return [document.documentElement.scrollWidth, window.innerWidth]",
                    vec![],
                )
                .await;
            let [scroll, inner]: [u64; 2] = serde_json::from_value(overflow).unwrap();
            assert!(
                scroll <= inner,
                "the list is {scroll} px wide in a {inner} px window"
            );
            page.open(&format!("#/abtests/{id}")).await;
            page.until(
                "the users",
                "document.querySelector('#abtest-metrics tr[data-metric=userCount] td')",
            )
            .await;
            page.until(
                "the verdicts",
                "document.querySelector('#abtest-verdicts li')",
            )
            .await;
            let overflow = page
                .js(
                    "return [document.documentElement.scrollWidth, window.innerWidth]",
                    vec![],
                )
                .await;
            let [scroll, inner]: [u64; 2] = serde_json::from_value(overflow).unwrap();
            assert!(
                scroll <= inner,
                "the results are {scroll} px wide in a {inner} px window"
            );
            page.assert_no_errors().await;
        },
    )
    .await;
}
