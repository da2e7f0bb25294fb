//! The page's files: served without credentials, with their media type, the CSP and no-cache;
//! an unknown file is the API's 404 JSON.

use crate::common::Server;

#[tokio::test]
async fn assets_are_served_with_their_headers() {
    let s = Server::start().await;
    for (path, media_type) in [
        ("/dashboard", "text/html"),
        ("/dashboard/", "text/html"),
        ("/dashboard/index.html", "text/html"),
        ("/dashboard/app.js", "text/javascript"),
        ("/dashboard/strategy.js", "text/javascript"),
        ("/dashboard/style.css", "text/css"),
        ("/dashboard/favicon.svg", "image/svg+xml"),
    ] {
        let resp = s
            .http
            .get(format!("{}{path}", s.base))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        assert!(
            header("content-type").starts_with(media_type),
            "{path}: {}",
            header("content-type")
        );
        assert_eq!(
            header("content-security-policy"),
            "default-src 'self'; img-src 'self' data:; style-src 'self'",
            "{path}"
        );
        assert_eq!(header("cache-control"), "no-cache", "{path}");
        assert!(!resp.bytes().await.unwrap().is_empty(), "{path}");
    }
    let resp = s
        .http
        .get(format!("{}/dashboard/secret.txt", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["status"], 404);
    assert!(
        body["message"].as_str().unwrap().contains("secret.txt"),
        "{body}"
    );
}
