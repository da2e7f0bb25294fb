//! Headless Chromium driven over WebDriver: chromedriver as a child process (its process group
//! killed on drop), one session per test ([`super::webdriver`]), and helpers that wait for what
//! the page shows.

use std::future::Future;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::webdriver::{Client, Element};
use serde_json::{Value, json};

const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const CHROMIUM: &str = "/usr/bin/chromium";
/// How long a wait for the page lasts before the test fails.
const WAIT: Duration = Duration::from_secs(15);

/// A chromedriver process, killed with everything it started when dropped.
struct Driver {
    child: Child,
    port: u16,
}

impl Driver {
    fn start() -> Self {
        for binary in [CHROMEDRIVER, CHROMIUM] {
            assert!(
                std::path::Path::new(binary).exists(),
                "{binary} is missing: the dashboard's browser tests need Chromium and chromedriver; \
                 run ./scripts/install-deps.sh chromium chromium-driver (scripts/test.sh does)"
            );
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut command = Command::new(CHROMEDRIVER);
        command
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let child = command.spawn().expect("chromedriver starts");
        Self { child, port }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Until chromedriver answers `/status` as ready.
    async fn ready(&mut self) {
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(resp) = http.get(format!("{}/status", self.url())).send().await
                && let Ok(body) = resp.json::<Value>().await
                && body["value"]["ready"] == json!(true)
            {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("chromedriver exited before it was ready: {status}");
            }
            assert!(
                Instant::now() < deadline,
                "chromedriver was not ready in 20 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // The whole group: chromedriver and any Chromium left behind by a failed test.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A browser session on a page of the dashboard.
#[derive(Clone)]
pub struct Page {
    pub client: Client,
    /// The server's base URL.
    pub base: String,
    driver_url: String,
    /// The screenshot's name prefix (the test's).
    name: &'static str,
}

/// Run `test` in a fresh headless Chromium of `width` × `height`, then close it (a failed test
/// included, whose panic is passed on).
pub async fn run<F, Fut>(name: &'static str, base: &str, (width, height): (u32, u32), test: F)
where
    F: FnOnce(Page) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut driver = Driver::start();
    driver.ready().await;
    let profile = tempfile::tempdir().expect("a profile dir");
    let args = [
        "--headless".to_owned(),
        "--no-sandbox".to_owned(),
        "--disable-gpu".to_owned(),
        "--disable-dev-shm-usage".to_owned(),
        "--disable-quic".to_owned(),
        "--no-first-run".to_owned(),
        "--disable-background-networking".to_owned(),
        "--disable-component-update".to_owned(),
        "--disable-sync".to_owned(),
        "--hide-scrollbars".to_owned(),
        "--force-device-scale-factor=1".to_owned(),
        format!("--window-size={width},{height}"),
        format!("--user-data-dir={}", profile.path().display()),
    ];
    let capabilities = json!({
        "browserName": "chrome",
        "goog:chromeOptions": {"binary": CHROMIUM, "args": args},
        "goog:loggingPrefs": {"browser": "ALL"},
    });
    let client = Client::connect(&driver.url(), capabilities)
        .await
        .expect("a WebDriver session in Chromium");
    client
        .set_window_size(width, height)
        .await
        .expect("the window's size");
    let page = Page {
        client: client.clone(),
        base: base.to_owned(),
        driver_url: driver.url(),
        name,
    };
    let outcome = tokio::spawn(test(page)).await;
    let _ = client.close().await;
    drop(driver);
    drop(profile);
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

impl Page {
    /// Open a dashboard URL (`#/strategy`...).
    pub async fn open(&self, hash: &str) {
        self.client
            .goto(&format!("{}/dashboard{hash}", self.base))
            .await
            .expect("the page opens");
    }

    /// Evaluate a script's body (`return ...`) with `arguments`.
    pub async fn js(&self, script: &str, args: Vec<Value>) -> Value {
        self.client
            .execute(script, args)
            .await
            .unwrap_or_else(|e| panic!("script failed: {e}\n{script}"))
    }

    /// The page's visible text, for failure messages.
    pub async fn text(&self) -> String {
        let text = self
            .js(
                "return document.body ? document.body.innerText : ''",
                vec![],
            )
            .await;
        let text = text.as_str().unwrap_or_default();
        text.chars().take(3000).collect()
    }

    /// Wait until `expr` (a JS expression) is truthy; returns its value.
    pub async fn until(&self, what: &str, expr: &str) -> Value {
        self.until_within(WAIT, what, expr).await
    }

    /// The same, waiting at most `wait`.
    pub async fn until_within(&self, wait: Duration, what: &str, expr: &str) -> Value {
        let script = format!("try {{ return ({expr}) || null; }} catch (e) {{ return null; }}");
        let deadline = Instant::now() + wait;
        loop {
            let v = self.js(&script, vec![]).await;
            if !v.is_null() && v != json!(false) {
                return v;
            }
            if Instant::now() > deadline {
                panic!(
                    "{what}: not seen in {wait:?} (waited for `{expr}`).\nThe page shows:\n{}\nRuntime errors: {}",
                    self.text().await,
                    self.js(
                        "return JSON.stringify(window.__dashboardErrors || [])",
                        vec![]
                    )
                    .await
                );
            }
            tokio::time::sleep(Duration::from_millis(60)).await;
        }
    }

    /// Wait until the element at `css` shows text containing `needle`; returns its text.
    pub async fn until_text(&self, css: &str, needle: &str) -> String {
        let expr = format!(
            "(() => {{ const e = document.querySelector({css}); return e && e.innerText.includes({needle}) ? e.innerText : null; }})()",
            css = json!(css),
            needle = json!(needle),
        );
        self.until(&format!("«{needle}» in {css}"), &expr)
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// The element at `css` (waiting for it).
    pub async fn find(&self, css: &str) -> Element {
        self.until(
            &format!("element {css}"),
            &format!("document.querySelector({})", json!(css)),
        )
        .await;
        self.client
            .find(css)
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"))
    }

    pub async fn click(&self, css: &str) {
        self.find(css)
            .await
            .click()
            .await
            .unwrap_or_else(|e| panic!("click {css}: {e}"));
    }

    /// Replace the text of the input at `css` (typed, as a person would).
    pub async fn type_into(&self, css: &str, text: &str) {
        let input = self.find(css).await;
        input
            .clear()
            .await
            .unwrap_or_else(|e| panic!("clear {css}: {e}"));
        input
            .send_keys(text)
            .await
            .unwrap_or_else(|e| panic!("type into {css}: {e}"));
    }

    /// Press Enter in the input at `css` (submits its form).
    pub async fn enter(&self, css: &str) {
        self.find(css)
            .await
            .send_keys("\u{e007}")
            .await
            .unwrap_or_else(|e| panic!("Enter in {css}: {e}"));
    }

    /// The texts of the elements at `css`, in page order.
    pub async fn texts(&self, css: &str) -> Vec<String> {
        let v = self
            .js(
                "return [...document.querySelectorAll(arguments[0])].map(e => e.innerText.trim())",
                vec![json!(css)],
            )
            .await;
        serde_json::from_value(v).unwrap_or_default()
    }

    /// Sign in through the form.
    pub async fn sign_in(&self, app: &str, key: &str) {
        self.type_into("#signin-app", app).await;
        self.type_into("#signin-key", key).await;
        self.enter("#signin-key").await;
        self.until(
            "the signed-in nav",
            "!document.getElementById('nav').hidden",
        )
        .await;
    }

    /// No runtime error was recorded by the page, and Chromium's console has no error but
    /// failed loads (the API's expected 404s: "none yet").
    pub async fn assert_no_errors(&self) {
        let errors = self.errors().await;
        assert!(errors.is_empty(), "the dashboard had errors: {errors:#?}");
    }

    /// The page's recorded runtime errors, then Chromium's console errors (those since the
    /// last look) but failed loads.
    pub async fn errors(&self) -> Vec<String> {
        let recorded = self
            .js("return window.__dashboardErrors || []", vec![])
            .await;
        let mut errors: Vec<String> = serde_json::from_value(recorded).unwrap_or_default();
        for entry in self.console().await {
            let message = entry["message"].as_str().unwrap_or_default();
            if entry["level"] == "SEVERE" && !message.contains("Failed to load resource") {
                errors.push(format!("console: {message}"));
            }
        }
        errors
    }

    /// Chromium's console entries since the last call (chromedriver's log endpoint).
    pub async fn console(&self) -> Vec<Value> {
        let session = self.client.session_id();
        let resp = reqwest::Client::new()
            .post(format!("{}/session/{session}/se/log", self.driver_url))
            .json(&json!({"type": "browser"}))
            .send()
            .await;
        match resp {
            Ok(r) => r
                .json::<Value>()
                .await
                .ok()
                .and_then(|v| v["value"].as_array().cloned()),
            Err(_) => None,
        }
        .unwrap_or_default()
    }

    /// A PNG of the whole page (at most 2400 px high), saved as `<name>.png` under
    /// `$CARGO_TARGET_TMPDIR/dashboard-screenshots/` and, when set, `$DASHBOARD_SCREENSHOTS_DIR`.
    pub async fn screenshot(&self, name: &str) {
        let png = match self.full_page_png().await {
            Some(png) => png,
            None => self.client.screenshot().await.expect("a screenshot"),
        };
        for dir in screenshot_dirs() {
            std::fs::create_dir_all(&dir).expect("the screenshots' folder");
            let path = dir.join(format!("{name}.png"));
            std::fs::write(&path, &png).expect("the screenshot is written");
            eprintln!("[{}] screenshot: {}", self.name, path.display());
        }
    }

    /// The page beyond the viewport, through Chrome's DevTools protocol (chromedriver's
    /// `goog/cdp/execute`); `None` if that fails.
    async fn full_page_png(&self) -> Option<Vec<u8>> {
        use base64::Engine as _;
        let session = self.client.session_id();
        let http = reqwest::Client::new();
        let url = format!("{}/session/{session}/goog/cdp/execute", self.driver_url);
        let cdp = |cmd: &'static str, params: Value| {
            http.post(&url)
                .json(&json!({"cmd": cmd, "params": params}))
                .send()
        };
        let metrics: Value = cdp("Page.getLayoutMetrics", json!({}))
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        let size = &metrics["value"]["cssContentSize"];
        let width = self
            .js("return document.documentElement.clientWidth", vec![])
            .await
            .as_f64()?;
        let height = size["height"].as_f64()?.min(2400.0);
        let shot: Value = cdp(
            "Page.captureScreenshot",
            json!({"format": "png", "captureBeyondViewport": true,
                   "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1}}),
        )
        .await
        .ok()?
        .json()
        .await
        .ok()?;
        base64::engine::general_purpose::STANDARD
            .decode(shot["value"]["data"].as_str()?)
            .ok()
    }
}

fn screenshot_dirs() -> Vec<PathBuf> {
    let mut dirs = vec![PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard-screenshots")];
    if let Ok(dir) = std::env::var("DASHBOARD_SCREENSHOTS_DIR")
        && !dir.is_empty()
    {
        let dir = PathBuf::from(dir);
        // Relative to the workspace root (where scripts run), not the crate's folder.
        let dir = if dir.is_relative() {
            PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("run by cargo"))
                .join("../..")
                .join(dir)
        } else {
            dir
        };
        dirs.push(dir);
    }
    dirs
}
