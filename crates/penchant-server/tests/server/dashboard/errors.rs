//! The checks every test ends with can fail: a runtime error or a rejected promise is recorded
//! in `window.__dashboardErrors`, and the CSP refuses (and Chromium's console reports) an inline
//! style.

use serde_json::json;

use super::browser::run;
use super::seed;
use crate::common::Server;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_errors_and_csp_violations_are_caught() {
    let s = Server::start().await;
    let shop = seed::App::new(&s, "SHOP").await;
    let admin = shop.key.clone();
    run("errors", &s.base.clone(), super::DESKTOP, move |page| async move {
        page.open("#/overview").await;
        page.sign_in("SHOP", &admin).await;
        page.assert_no_errors().await;

        // A real throw (muted as cross-origin, WebDriver's scripts being foreign to the page:
        // "Script error."), and a rejection event (Chromium fires none for a foreign script's
        // promises).
        page.js("setTimeout(() => { throw new Error('boom'); }, 0); \
                 window.dispatchEvent(new PromiseRejectionEvent('unhandledrejection', \
                   {promise: Promise.resolve(), reason: new Error('nope')}));", vec![]).await;
        let errors = page.until("two recorded errors", "window.__dashboardErrors.length === 2 && window.__dashboardErrors").await;
        let text = errors.to_string();
        assert!(text.contains("nope"), "{text}");
        // The page shows them too.
        page.until_text("#runtime-errors", "Dashboard error").await;
        // What every test's last check reads: both, and the console's report of the throw.
        let seen = page.errors().await;
        assert!(seen.len() >= 2, "{seen:?}");

        // A fresh page; an inline style attribute is refused by the CSP and reported.
        page.open("#/overview").await;
        page.until("the overview", "document.getElementById('page-overview')").await;
        page.console().await;
        let color = page
            .js("document.body.insertAdjacentHTML('beforeend', '<p id=\"inline\" style=\"color: rgb(255, 0, 0)\">x</p>'); return getComputedStyle(document.getElementById('inline')).color", vec![])
            .await;
        assert_ne!(color, json!("rgb(255, 0, 0)"), "the inline style was applied");
        let mut console = Vec::new();
        for _ in 0..50 {
            console.extend(page.console().await);
            if !console.is_empty() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert!(
            console.iter().any(|e| e["level"] == "SEVERE"
                && e["message"].as_str().unwrap_or_default().contains("Content Security Policy")),
            "{console:#?}"
        );
    })
    .await;
}
