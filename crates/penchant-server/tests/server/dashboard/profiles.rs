//! The profiles page: a user's scores as bars, recent events, the seen filter; deleting the
//! profile through the in-page dialog.

use reqwest::{Method, StatusCode};
use serde_json::json;

use super::browser::run;
use super::seed;
use crate::common::Server;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profile_is_shown_and_deleted_through_the_dialog() {
    let s = Server::start().await;
    let shop = seed::App::new(&s, "SHOP").await;
    let record = |id: &str, brand: &str, color: &str| json!({"objectID": id, "brand": brand, "color": color});
    shop.records(
        "products",
        &[
            record("a1", "Apple", "red"),
            record("a2", "Apple", "blue"),
            record("s1", "Samsung", "red"),
            record("g1", "Google", "green"),
        ],
    )
    .await;
    shop.strategy(json!({
        "eventsScoring": [{"eventName": "Clicked", "eventType": "click", "score": 10},
                          {"eventName": "Bought", "eventType": "conversion", "score": 50},
                          {"eventName": "Viewed", "eventType": "view", "score": 1}],
        "facetsScoring": [{"facetName": "brand", "score": 100}, {"facetName": "color", "score": 50}],
        "personalizationImpact": 50}))
    .await;
    let e = seed::event;
    // Apple: 2 clicks + a conversion; Samsung: 1 click; Google: one view (also marks g1 seen).
    shop.events(vec![
        e("click", "Clicked", "alice", "products", &["a1"], 5000),
        e("click", "Clicked", "alice", "products", &["a2"], 4000),
        e("conversion", "Bought", "alice", "products", &["a1"], 3000),
        e("click", "Clicked", "alice", "products", &["s1"], 2000),
        e("view", "Viewed", "alice", "products", &["g1"], 1000),
    ])
    .await;

    let base = s.base.clone();
    let key = shop.key.clone();
    run("profiles", &base, super::DESKTOP, move |page| async move {
        page.open("#/profiles").await;
        page.sign_in("SHOP", &key).await;
        page.type_into("#profile-user", "alice").await;
        page.enter("#profile-user").await;
        page.until("the brand bars", "document.querySelectorAll('.facet[data-facet=brand] .facet-row').length === 3").await;
        // Sorted by score: Apple (the best, 20), Samsung, Google.
        let brands = page.js("return [...document.querySelectorAll('.facet[data-facet=brand] .facet-row')].map(r => [r.dataset.value, Number(r.dataset.score)])", vec![]).await;
        let brands: Vec<(String, i64)> = serde_json::from_value(brands).unwrap();
        let names: Vec<&str> = brands.iter().map(|(v, _)| v.as_str()).collect();
        assert_eq!(names, ["Apple", "Samsung", "Google"], "{brands:?}");
        assert_eq!(brands[0].1, 20);
        assert!(brands[0].1 > brands[1].1 && brands[1].1 > brands[2].1, "{brands:?}");
        // Bars as long as their scores.
        let widths = page.js("return [...document.querySelectorAll('.facet[data-facet=brand] .bar-fill')].map(b => b.style.width)", vec![]).await;
        assert_eq!(widths[0], json!("100%"));
        page.until("the color bars", "document.querySelectorAll('.facet[data-facet=color] .facet-row').length === 3").await;
        // The last event and the recent events, newest first.
        page.until_text("#profile-last-event", "Last event").await;
        page.until("5 recent events", "document.querySelectorAll('#recent-events tbody tr').length === 5").await;
        let first = page.texts("#recent-events tbody tr:first-child td").await;
        assert_eq!(first[1..], ["view", "Viewed", "products", "g1"], "{first:?}");
        // The seen filter holds the viewed item.
        page.until_text("#seen-card", "items (keys)").await;
        page.screenshot("profiles").await;

        // Cancelling the dialog deletes nothing.
        page.click("#delete-profile").await;
        page.until("the dialog", "document.getElementById('confirm-dialog').open").await;
        page.until_text("#confirm-message", "Delete the profile of alice").await;
        page.click("#confirm-cancel").await;
        page.until("the dialog closed", "!document.getElementById('confirm-dialog').open").await;
        assert!(page.js("return !document.getElementById('profile-deleted')", vec![]).await.as_bool().unwrap());
        assert!(page.js("return !!document.querySelector('.facet[data-facet=brand]')", vec![]).await.as_bool().unwrap());

        // Confirmed: gone.
        page.click("#delete-profile").await;
        page.until("the dialog", "document.getElementById('confirm-dialog').open").await;
        page.click("#confirm-ok").await;
        page.until_text("#profile-status", "Profile of alice deleted").await;
        page.until_text("#profile-card", "No profile for alice").await;
        // Her events are still there (they no longer count).
        page.until("5 recent events", "document.querySelectorAll('#recent-events tbody tr').length === 5").await;

        // Deleting the user token: events and seen filter gone too.
        page.click("#delete-user").await;
        page.until_text("#confirm-message", "Delete user token alice").await;
        page.click("#confirm-ok").await;
        page.until_text("#profile-status", "User token alice deleted").await;
        page.until_text("#recent-events", "No events").await;
        page.until_text("#seen-card", "No seen filter").await;
        page.assert_no_errors().await;
    })
    .await;

    let (status, _) = s
        .call(
            Method::GET,
            "/1/profiles/personalization/alice",
            Some(("SHOP", &shop.key)),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
