//! Starting the `penchant` binary in tests.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use reqwest::{Client, Method, RequestBuilder};
use serde_json::Value;

/// The `penchant` binary, without the developer's `PENCHANT_*` or `RUST_LOG` settings.
pub fn penchant() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_penchant"));
    for (key, _) in std::env::vars() {
        if key.starts_with("PENCHANT_") || key == "RUST_LOG" {
            cmd.env_remove(key);
        }
    }
    cmd
}

/// `penchant serve` on a free loopback port, with whatever else `configure` sets; returns the
/// child and its base URL once it listens.
pub fn serve(configure: impl FnOnce(&mut Command)) -> (Child, String) {
    let mut cmd = penchant();
    cmd.args(["serve", "--listen", "127.0.0.1:0"]);
    configure(&mut cmd);
    let mut child = cmd.stdout(Stdio::piped()).spawn().unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    for line in stdout.lines().map_while(Result::ok) {
        if let Some(url) = line.strip_prefix("penchant listening on ") {
            return (child, url.to_owned());
        }
    }
    let out = child.wait_with_output().unwrap();
    panic!(
        "the server did not start: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `penchant serve` on `data_dir` with the admin key `key`, its stderr dropped.
pub fn serve_in(data_dir: &Path, key: &str) -> (Child, String) {
    serve(|cmd| {
        cmd.arg("--data-dir")
            .arg(data_dir)
            .env("PENCHANT_AUTH__ADMIN_KEY", key)
            .stderr(Stdio::null());
    })
}

/// A request to `url` (a server's base URL and a path) with an app's credentials and a JSON
/// body.
pub fn request(
    http: &Client,
    method: Method,
    url: &str,
    (app, key): (&str, &str),
    body: &Value,
) -> RequestBuilder {
    http.request(method, url)
        .header("X-Algolia-Application-Id", app)
        .header("X-Algolia-API-Key", key)
        .json(body)
}

/// A call to `url` with an app's credentials and, if any, a JSON body: its status and its JSON
/// answer (null when it has none).
pub async fn call(
    http: &Client,
    method: Method,
    url: &str,
    (app, key): (&str, &str),
    body: Option<Value>,
) -> (reqwest::StatusCode, Value) {
    let mut req = http
        .request(method, url)
        .header("X-Algolia-Application-Id", app)
        .header("X-Algolia-API-Key", key);
    if let Some(body) = body {
        req = req.json(&body);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// POST `body` to the server at `url` as app `app` with the global admin key `root`; it must
/// succeed.
pub async fn post_ok(url: &str, path: &str, app: &str, body: serde_json::Value) {
    let url = format!("{url}{path}");
    let http = reqwest::Client::new();
    let resp = request(&http, reqwest::Method::POST, &url, (app, "root"), &body)
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success());
}

/// `penchant ARGS --server URL` as the global admin `root`: whether it succeeded, its standard
/// output as JSON (null if it is not) and its standard error.
pub fn admin_command(url: &str, args: &[&str]) -> (bool, serde_json::Value, String) {
    let out = penchant()
        .args(args)
        .args(["--server", url])
        .env("PENCHANT_AUTH__ADMIN_KEY", "root")
        .output()
        .unwrap();
    let json = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (
        out.status.success(),
        json,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Send `sig` (e.g. `-TERM`) to the child.
pub fn signal(child: &Child, sig: &str) {
    let status = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// The child's exit status and standard error, once it ends.
pub fn wait(child: Child) -> (std::process::ExitStatus, String) {
    let out = child.wait_with_output().unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
