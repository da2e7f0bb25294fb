//! `penchant apps ...` and `penchant keys ...`: the admin API of a running server, from the
//! command line, authenticated with the global admin key (`auth.admin_key`).

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{Value, json};

use crate::config::Config;

/// Where the server is and how to reach it as the global admin.
#[derive(Debug, Args)]
pub struct Target {
    /// Base URL of the server (default: `http://` + `server.listen`).
    #[arg(long, global = true)]
    server: Option<String>,
    /// The global admin key (default: `auth.admin_key`).
    #[arg(long, global = true)]
    admin_key: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum AppsCommand {
    /// Create an app and its first admin key (printed once).
    Create {
        /// The app ID (default: 10 random characters).
        #[arg(long)]
        app_id: Option<String>,
        #[arg(long, default_value = "")]
        name: String,
    },
    /// List the apps.
    List,
    /// Delete an app and all its data.
    Delete { app_id: String },
}

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Create an API key (printed once: only its hash is stored).
    Create {
        #[arg(long)]
        app: String,
        /// ACLs, comma-separated: search, recommendation, addObject, deleteObject,
        /// editSettings, admin.
        #[arg(long, value_delimiter = ',', required = true)]
        acl: Vec<String>,
        #[arg(long, default_value = "")]
        description: String,
    },
    /// List an app's keys (their first characters, ACLs and descriptions).
    List {
        #[arg(long)]
        app: String,
    },
    /// Delete a key.
    Delete {
        #[arg(long)]
        app: String,
        key: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// Follow an app's profile recompute (after a strategy change) with a progress bar.
    Watch {
        #[arg(long)]
        app: String,
    },
}

struct Client {
    base: String,
    key: String,
    http: reqwest::Client,
}

impl Client {
    fn new(target: &Target, config: &Config) -> anyhow::Result<Self> {
        let base = target
            .server
            .clone()
            .unwrap_or_else(|| format!("http://{}", config.server.listen));
        let Some(key) = target
            .admin_key
            .clone()
            .or_else(|| config.auth.admin_key.clone())
        else {
            bail!("no admin key: set auth.admin_key (PENCHANT_AUTH__ADMIN_KEY) or --admin-key");
        };
        Ok(Self {
            base: base.trim_end_matches('/').to_owned(),
            key,
            http: reqwest::Client::new(),
        })
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        app: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        let url = format!("{}{path}", self.base);
        let mut req = self
            .http
            .request(method, &url)
            .header("X-Algolia-Application-Id", app)
            .header("X-Algolia-API-Key", &self.key);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req
            .send()
            .await
            .with_context(|| format!("cannot reach {url}"))?;
        let status = resp.status();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            bail!(
                "{status}: {}",
                body["message"].as_str().unwrap_or("no message")
            );
        }
        Ok(body)
    }
}

fn block_on<T>(f: impl Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(f)
}

fn print(v: &Value) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

pub fn apps(command: AppsCommand, target: &Target, config: &Config) -> anyhow::Result<()> {
    let client = Client::new(target, config)?;
    block_on(async {
        let out = match command {
            AppsCommand::Create { app_id, name } => {
                let body = json!({"appID": app_id, "name": name});
                client.call(Method::POST, "/1/apps", "", Some(body)).await?
            }
            AppsCommand::List => client.call(Method::GET, "/1/apps", "", None).await?,
            AppsCommand::Delete { app_id } => {
                client
                    .call(Method::DELETE, &format!("/1/apps/{app_id}"), "", None)
                    .await?
            }
        };
        print(&out)
    })
}

pub fn keys(command: KeysCommand, target: &Target, config: &Config) -> anyhow::Result<()> {
    let client = Client::new(target, config)?;
    block_on(async {
        let out = match command {
            KeysCommand::Create {
                app,
                acl,
                description,
            } => {
                let body = json!({"acl": acl, "description": description});
                client
                    .call(Method::POST, "/1/keys", &app, Some(body))
                    .await?
            }
            KeysCommand::List { app } => client.call(Method::GET, "/1/keys", &app, None).await?,
            KeysCommand::Delete { app, key } => {
                client
                    .call(Method::DELETE, &format!("/1/keys/{key}"), &app, None)
                    .await?
            }
        };
        print(&out)
    })
}

pub fn jobs(command: JobsCommand, target: &Target, config: &Config) -> anyhow::Result<()> {
    let client = Client::new(target, config)?;
    let JobsCommand::Watch { app } = command;
    block_on(async {
        let bar = indicatif::ProgressBar::new(1);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} recompute {bar:30} {pos}/{len} ranges  {msg}",
            )?
            .progress_chars("=> "),
        );
        loop {
            let job = client
                .call(Method::GET, "/1/strategies/personalization/job", &app, None)
                .await?;
            bar.set_length(job["ranges"].as_array().map_or(1, Vec::len) as u64);
            bar.set_position(job["rangesDone"].as_u64().unwrap_or(0));
            bar.set_message(format!(
                "{} users, {} rows, {} already current",
                job["users"], job["events"], job["skipped"]
            ));
            if job["state"] != "running" {
                bar.finish();
                return print(&job);
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    })
}
