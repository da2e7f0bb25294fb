//! At a phone's width: no page scrolls sideways (tables scroll in their own box) and the nav
//! wraps, every link visible and working.

use serde_json::json;

use super::browser::run;
use super::seed;
use crate::common::Server;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_a_phone_width_nothing_overflows_and_the_nav_works() {
    let s = Server::start().await;
    let shop = seed::App::new(&s, "SHOP").await;
    shop.records("products", &[json!({"objectID": "p1", "brand": "Apple", "description": "a long description that would widen a table well past a phone's screen if nothing wrapped or scrolled it"})]).await;
    let e = seed::event;
    shop.events(vec![e(
        "click",
        "Clicked",
        "alice",
        "products",
        &["p1"],
        1000,
    )])
    .await;

    let admin = shop.key.clone();
    run("phone", &s.base.clone(), super::PHONE, move |page| async move {
        page.open("").await;
        page.sign_in("SHOP", &admin).await;
        let width = page.js("return window.innerWidth", vec![]).await;
        assert_eq!(width, json!(super::PHONE.0), "the window is a phone's width");
        page.until("the chart", "document.querySelector('#events-chart svg')").await;
        page.until_text("#events-chart li[data-type=click]", "click: 1").await;
        // The axis labels as rendered (font size × the SVG's scale to the screen): readable.
        let sizes = page.until(
            "axis labels of 10 px at least",
            "(() => { const s = [...document.querySelectorAll('#events-chart svg text.axis')]                .map(t => parseFloat(getComputedStyle(t).fontSize) * t.getScreenCTM().a);                return s.length && s.every(x => x >= 10) && s; })()",
        )
        .await;
        assert!(sizes.as_array().unwrap().len() >= 7, "{sizes}");
        // Their boxes too, and every label inside the window.
        let boxes = page.js("return [...document.querySelectorAll('#events-chart svg text.axis')].map(t => { const r = t.getBoundingClientRect(); return [r.height, r.left, r.right]; })", vec![]).await;
        for b in boxes.as_array().unwrap() {
            let [height, left, right]: [f64; 3] = serde_json::from_value(b.clone()).unwrap();
            assert!(height >= 10.0 && left >= 0.0 && right <= super::PHONE.0 as f64, "{boxes}");
        }
        page.screenshot("overview-phone").await;
        for (link, page_id) in [
            ("strategy", "page-strategy"),
            ("profiles", "page-profiles"),
            ("jobs", "page-jobs"),
            ("sets", "page-sets"),
            ("recommendations", "page-recommendations"),
            ("overview", "page-overview"),
        ] {
            // The link is on screen (the nav wraps, nothing hidden past the edge) and works.
            let css = format!("#nav a[data-page={link}]");
            let rect = page.js("const r = document.querySelector(arguments[0]).getBoundingClientRect(); return [r.left, r.right, r.width]", vec![json!(css)]).await;
            let rect: Vec<f64> = serde_json::from_value(rect).unwrap();
            assert!(rect[0] >= 0.0 && rect[1] <= super::PHONE.0 as f64 && rect[2] > 0.0, "{link}: {rect:?}");
            page.click(&css).await;
            page.until(&format!("page {link}"), &format!("document.getElementById('{page_id}')")).await;
            // Let the page load its data, then measure.
            tokio::time::sleep(std::time::Duration::from_millis(400)).await;
            let overflow = page.js("return [document.documentElement.scrollWidth, window.innerWidth]", vec![]).await;
            let [scroll, inner]: [u64; 2] = serde_json::from_value(overflow).unwrap();
            assert!(scroll <= inner, "{link}: the page is {scroll} px wide in a {inner} px window");
        }
        page.assert_no_errors().await;
    })
    .await;
}
