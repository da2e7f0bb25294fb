//! The W3C WebDriver commands the browser tests use, over `reqwest`: a session, navigation,
//! scripts, elements found by CSS selector and what a person does to them.
//!
//! Written here rather than taken from a WebDriver crate: fantoccini's dependencies bring
//! proc-macros whose `syn` features, unified with the build scripts', rebuilt `bindgen` and so
//! RocksDB's C++ a second time for `cargo test` after `cargo run` (half an hour on two cores).

use serde_json::{Value, json};

/// The key of an element reference in WebDriver's answers.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A WebDriver error: the command and the driver's message.
#[derive(Debug)]
pub struct Error(String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// A session of a browser.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    /// `<driver>/session/<id>`.
    session: String,
    id: String,
}

/// An element of the page.
#[derive(Debug, Clone)]
pub struct Element {
    client: Client,
    id: String,
}

/// Send a command; its answer's `value`, or the driver's error.
async fn command(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    body: Option<Value>,
) -> Result<Value> {
    let what = format!("{method} {url}");
    let mut request = http.request(method, url);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request
        .send()
        .await
        .map_err(|e| Error(format!("{what}: {e}")))?;
    let status = response.status();
    let mut answer: Value = response
        .json()
        .await
        .map_err(|e| Error(format!("{what}: {status}, not JSON: {e}")))?;
    let value = answer["value"].take();
    if !status.is_success() || value.get("error").is_some() {
        return Err(Error(format!(
            "{what}: {} ({})",
            value["error"].as_str().unwrap_or("error"),
            value["message"].as_str().unwrap_or_default()
        )));
    }
    Ok(value)
}

impl Client {
    /// A new session on the driver at `driver` with these capabilities.
    pub async fn connect(driver: &str, capabilities: Value) -> Result<Self> {
        let http = reqwest::Client::new();
        let body = json!({"capabilities": {"alwaysMatch": capabilities}});
        let value = command(
            &http,
            reqwest::Method::POST,
            &format!("{driver}/session"),
            Some(body),
        )
        .await?;
        let id = value["sessionId"]
            .as_str()
            .ok_or_else(|| Error(format!("no sessionId in {value}")))?
            .to_owned();
        Ok(Self {
            http,
            session: format!("{driver}/session/{id}"),
            id,
        })
    }

    async fn post(&self, path: &str, body: Value) -> Result<Value> {
        let url = format!("{}{path}", self.session);
        command(&self.http, reqwest::Method::POST, &url, Some(body)).await
    }

    async fn get(&self, path: &str) -> Result<Value> {
        let url = format!("{}{path}", self.session);
        command(&self.http, reqwest::Method::GET, &url, None).await
    }

    pub fn session_id(&self) -> &str {
        &self.id
    }

    pub async fn set_window_size(&self, width: u32, height: u32) -> Result<()> {
        self.post("/window/rect", json!({"width": width, "height": height}))
            .await
            .map(drop)
    }

    pub async fn goto(&self, url: &str) -> Result<()> {
        self.post("/url", json!({"url": url})).await.map(drop)
    }

    pub async fn refresh(&self) -> Result<()> {
        self.post("/refresh", json!({})).await.map(drop)
    }

    /// Run a script's body (`return ...`) with `args`; what it returns.
    pub async fn execute(&self, script: &str, args: Vec<Value>) -> Result<Value> {
        self.post("/execute/sync", json!({"script": script, "args": args}))
            .await
    }

    /// The first element matching a CSS selector.
    pub async fn find(&self, css: &str) -> Result<Element> {
        let value = self
            .post("/element", json!({"using": "css selector", "value": css}))
            .await?;
        self.element(&value)
    }

    fn element(&self, value: &Value) -> Result<Element> {
        let id = value[ELEMENT]
            .as_str()
            .ok_or_else(|| Error(format!("not an element: {value}")))?;
        Ok(Element {
            client: self.clone(),
            id: id.to_owned(),
        })
    }

    /// A PNG of the viewport.
    pub async fn screenshot(&self) -> Result<Vec<u8>> {
        use base64::Engine as _;
        let value = self.get("/screenshot").await?;
        base64::engine::general_purpose::STANDARD
            .decode(value.as_str().unwrap_or_default())
            .map_err(|e| Error(format!("screenshot: {e}")))
    }

    /// End the session (the browser closes).
    pub async fn close(&self) -> Result<()> {
        command(&self.http, reqwest::Method::DELETE, &self.session, None)
            .await
            .map(drop)
    }
}

impl Element {
    fn path(&self, command: &str) -> String {
        format!("/element/{}/{command}", self.id)
    }

    pub async fn click(&self) -> Result<()> {
        self.client
            .post(&self.path("click"), json!({}))
            .await
            .map(drop)
    }

    pub async fn clear(&self) -> Result<()> {
        self.client
            .post(&self.path("clear"), json!({}))
            .await
            .map(drop)
    }

    /// Type `text` into the element (`\u{e007}` is Enter).
    pub async fn send_keys(&self, text: &str) -> Result<()> {
        self.client
            .post(&self.path("value"), json!({"text": text}))
            .await
            .map(drop)
    }

    pub async fn is_enabled(&self) -> Result<bool> {
        let value = self.client.get(&self.path("enabled")).await?;
        value
            .as_bool()
            .ok_or_else(|| Error(format!("enabled: {value}")))
    }

    /// Choose the option of this `<select>` whose value is `value`, as a click does.
    pub async fn select_by_value(&self, value: &str) -> Result<()> {
        let css = format!("option[value={}]", json!(value));
        let found = self
            .client
            .post(
                &self.path("element"),
                json!({"using": "css selector", "value": css}),
            )
            .await?;
        self.client.element(&found)?.click().await
    }
}
