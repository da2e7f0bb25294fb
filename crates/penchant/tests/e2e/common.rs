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
