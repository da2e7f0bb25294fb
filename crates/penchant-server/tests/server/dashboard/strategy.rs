//! The strategy page: live validation by the API, saving and its recompute job, and the
//! simulator's two rankings.

use reqwest::Method;
use serde_json::{Value, json};

use super::browser::run;
use super::seed;
use crate::common::Server;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_strategy_is_refused_live_and_a_valid_one_saved() {
    let s = Server::start().await;
    let shop = seed::App::new(&s, "SHOP").await;
    // A key with the strategy's ACL only: the page needs no more.
    let key = s.key("SHOP", &shop.key, &["recommendation"]).await;
    let e = seed::event;
    shop.events(
        (0..6)
            .map(|i| {
                e(
                    "click",
                    "Clicked",
                    &format!("user{i}"),
                    "products",
                    &["p1"],
                    1000,
                )
            })
            .collect(),
    )
    .await;

    let base = s.base.clone();
    let check_key = key.clone();
    run("strategy", &base, super::DESKTOP, move |page| async move {
        page.open("#/strategy").await;
        page.sign_in("SHOP", &key).await;
        // No strategy yet (a 404): an empty form.
        page.until_text("#strategy-load", "No strategy saved yet")
            .await;
        page.click("#add-event").await;
        page.find("#events-rows tr .event-type")
            .await
            .select_by_value("click")
            .await
            .unwrap();
        page.type_into("#events-rows tr .event-name", "Clicked")
            .await;
        page.type_into("#events-rows tr .event-score", "150").await;
        page.click("#add-facet").await;
        page.type_into("#facets-rows tr .facet-name", "brand").await;
        page.type_into("#facets-rows tr .facet-score", "100").await;
        // The API's message, beside the form; Save disabled.
        page.until_text(
            "#strategy-validation .error",
            "eventsScoring.score of `Clicked` must be between 1 and 100",
        )
        .await;
        assert!(
            !page
                .find("#strategy-save")
                .await
                .is_enabled()
                .await
                .unwrap(),
            "Save is enabled for an invalid strategy"
        );

        // Fixed: valid, Save enabled; saved, its job followed until done.
        page.type_into("#events-rows tr .event-score", "40").await;
        page.until_text("#strategy-validation", "Valid strategy")
            .await;
        page.until(
            "Save enabled",
            "!document.getElementById('strategy-save').disabled",
        )
        .await;
        page.click("#strategy-save").await;
        page.until_text("#strategy-save-status", "Strategy was successfully updated")
            .await;
        page.until(
            "the job done",
            "document.querySelector('#strategy-job [data-state=done]')",
        )
        .await;
        page.until_text("#strategy-job", "ranges done").await;

        // The edited strategy saved under a name (the app's stays), listed, loaded back.
        page.until_text("#named-list", "No named strategy yet")
            .await;
        page.type_into("#events-rows tr .event-score", "30").await;
        page.until_text("#strategy-validation", "Valid strategy")
            .await;
        page.type_into("#named-name", "clicks-only").await;
        page.until(
            "Save as enabled",
            "!document.getElementById('named-save').disabled",
        )
        .await;
        page.click("#named-save").await;
        page.until_text("#named-status", "Saved as “clicks-only”")
            .await;
        page.until_text("#named-table", "clicks-only").await;
        page.type_into("#named-name", "other").await;
        page.type_into("#events-rows tr .event-score", "70").await;
        page.click("[data-load='clicks-only']").await;
        page.until(
            "the named strategy in the editor",
            "document.getElementById('named-name').value === 'clicks-only' && \
             document.querySelector('#events-rows tr .event-score').value === '30'",
        )
        .await;
        page.assert_no_errors().await;
    })
    .await;
    let named = |name: &'static str| {
        let (s, key) = (&s, check_key.clone());
        async move {
            s.call(
                Method::GET,
                &format!("/1/strategies/personalization/named/{name}"),
                Some(("SHOP", &key)),
                None,
            )
            .await
        }
    };
    let (_, saved_named) = named("clicks-only").await;
    assert_eq!(
        saved_named["strategy"]["eventsScoring"],
        json!([{"eventName": "Clicked", "eventType": "click", "score": 30}]),
        "{saved_named}"
    );

    // Deleted from the page, after a confirmation.
    let (base, key) = (s.base.clone(), check_key.clone());
    run("strategy", &base, super::DESKTOP, move |page| async move {
        page.open("#/strategy").await;
        page.sign_in("SHOP", &key).await;
        page.until_text("#named-table", "clicks-only").await;
        page.click("[data-delete='clicks-only']").await;
        page.until(
            "the dialog",
            "document.getElementById('confirm-dialog').open",
        )
        .await;
        page.click("#confirm-ok").await;
        page.until_text("#named-list", "No named strategy yet")
            .await;
        page.assert_no_errors().await;
    })
    .await;
    assert_eq!(named("clicks-only").await.0, reqwest::StatusCode::NOT_FOUND);

    // What the page saved is what the API has.
    let (_, saved) = s
        .call(
            Method::GET,
            "/1/strategies/personalization",
            Some(("SHOP", &check_key)),
            None,
        )
        .await;
    assert_eq!(
        saved["eventsScoring"],
        json!([{"eventName": "Clicked", "eventType": "click", "score": 40}])
    );
    assert_eq!(
        saved["facetsScoring"],
        json!([{"facetName": "brand", "score": 100}])
    );
    assert_eq!(saved["personalizationImpact"], json!(50));
}

/// The object IDs of a simulator column, in order.
fn ids(v: &Value) -> Vec<String> {
    serde_json::from_value(v.clone()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulator_ranks_under_the_saved_and_the_edited_strategy() {
    let s = Server::start().await;
    let shop = seed::App::new(&s, "SHOP").await;
    let record = |id: &str, brand: &str, color: &str| json!({"objectID": id, "brand": brand, "color": color, "shelf": "top", "name": format!("{brand} {id}")});
    shop.records(
        "products",
        &[
            record("a1", "Apple", "red"),
            record("g1", "Google", "green"),
            record("s1", "Samsung", "blue"),
            json!({"objectID": "x1", "brand": "Other", "color": "grey", "shelf": "bottom"}),
        ],
    )
    .await;
    // Saved: clicks count, by brand, impact 100. Alice clicked Samsung and viewed Google.
    shop.strategy(json!({
        "eventsScoring": [{"eventName": "Clicked", "eventType": "click", "score": 50}],
        "facetsScoring": [{"facetName": "brand", "score": 100}],
        "personalizationImpact": 100}))
        .await;
    let e = seed::event;
    shop.events(vec![
        e("click", "Clicked", "alice", "products", &["s1"], 3000),
        e("click", "Clicked", "alice", "products", &["s1"], 2000),
        e("view", "Viewed", "alice", "products", &["g1"], 1000),
        e("view", "Viewed", "alice", "products", &["g1"], 500),
    ])
    .await;

    let admin = shop.key.clone();
    run("simulator", &s.base.clone(), super::DESKTOP, move |page| async move {
        page.open("#/strategy").await;
        page.sign_in("SHOP", &admin).await;
        page.until("the saved strategy", "document.querySelector('#events-rows tr .event-name')?.value === 'Clicked'").await;
        page.until_text("#strategy-validation", "Valid strategy").await;

        // Items: the top items of facet value shelf:top (browse: objectID order a1, g1, s1).
        page.type_into("#sim-user", "alice").await;
        page.type_into("#sim-index", "products").await;
        page.click("#sim-mode-facet").await;
        page.type_into("#sim-facet", "shelf:top").await;
        page.click("#sim-run").await;
        page.until("both columns", "document.querySelectorAll('#sim-saved tbody tr').length === 3 && document.querySelectorAll('#sim-edited tbody tr').length === 3").await;
        let column = |id: &str| format!("return [...document.querySelectorAll('#{id} tbody tr')].map(r => r.cells[2].innerText.trim())");
        // Unedited, both rank Samsung (clicked) first.
        assert_eq!(ids(&page.js(&column("sim-saved"), vec![]).await), ["s1", "a1", "g1"]);
        assert_eq!(ids(&page.js(&column("sim-edited"), vec![]).await), ["s1", "a1", "g1"]);

        // Edited: views count instead of clicks. The simulator runs again by itself.
        page.find("#events-rows tr .event-type").await.select_by_value("view").await.unwrap();
        page.type_into("#events-rows tr .event-name", "Viewed").await;
        page.until("the edited ranking", "[...document.querySelectorAll('#sim-edited tbody tr')].map(r => r.cells[2].innerText.trim()).join() === 'g1,a1,s1'").await;
        assert_eq!(ids(&page.js(&column("sim-saved"), vec![]).await), ["s1", "a1", "g1"]);
        // Moves against the saved order: g1 up 2, a1 in place, s1 down 2.
        let moves = page.js("return [...document.querySelectorAll('#sim-edited tbody tr')].map(r => r.cells[1].innerText.trim())", vec![]).await;
        assert_eq!(moves, json!(["▲2", "=", "▼2"]));
        // Records' attributes are shown (the scored facet first).
        page.until_text("#sim-edited tbody tr:first-child", "brand: Google").await;
        // The edited profile's scores: Google, from the views.
        page.until_text("#sim-edited", "Google: 20").await;
        page.until_text("#sim-saved", "Samsung: 20").await;

        // The listed-items mode: the given order is the basis.
        page.click("#sim-mode-list").await;
        page.type_into("#sim-items", "x1, a1").await;
        page.click("#sim-run").await;
        page.until("the listed items", "[...document.querySelectorAll('#sim-saved tbody tr')].map(r => r.cells[2].innerText.trim()).join() === 'x1,a1'").await;
        page.type_into("#sim-items", "a1\ng1\ns1").await;
        page.click("#sim-run").await;
        page.until("three listed items", "[...document.querySelectorAll('#sim-edited tbody tr')].map(r => r.cells[2].innerText.trim()).join() === 'g1,a1,s1'").await;
        page.screenshot("strategy").await;
        page.assert_no_errors().await;

        // An objectID the catalog lacks is ranked, and marked so in both columns.
        page.type_into("#sim-items", "a1, nope9").await;
        page.click("#sim-run").await;
        page.until("the unknown item", "document.querySelectorAll('#sim-edited tbody tr').length === 2 && document.querySelector('#sim-missing')").await;
        for column in ["sim-saved", "sim-edited"] {
            let marks = page.js(&format!("return Object.fromEntries([...document.querySelectorAll('#{column} tbody tr')].map(r => [r.cells[2].firstChild.textContent.trim(), r.cells[2].querySelector('.not-in-catalog')?.innerText ?? null]))"), vec![]).await;
            assert_eq!(marks, json!({"a1": null, "nope9": "not in the catalog"}), "{column}");
        }
        page.until_text("#sim-missing", "Not in the catalog of products: nope9").await;
        // The mark wraps in its cell: each column's Score header stays inside its box.
        let edges = page.js(
            "return ['sim-saved', 'sim-edited'].map(id => { \
               const th = [...document.querySelectorAll(`#${id} th`)].find(c => c.innerText.trim() === 'Score'); \
               return [th.getBoundingClientRect().right, th.closest('.table-wrap').getBoundingClientRect().right]; })",
            vec![],
        )
        .await;
        for edge in edges.as_array().unwrap() {
            let [score, wrap]: [f64; 2] = serde_json::from_value(edge.clone()).unwrap();
            assert!(score <= wrap + 0.5, "the Score header is past its box: {edges}");
        }
        page.assert_no_errors().await;
    })
    .await;
}
