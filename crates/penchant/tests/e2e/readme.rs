//! The README's quick start (then its A/B test section), run as written: their `sh` blocks, in
//! order, in one `bash` script
//! against a `penchant serve` of the test's own, so that the README cannot drift from what the
//! server answers. The block that starts the server is replaced by the test's server (a free
//! port, a temporary data folder, the README's admin key), and the README's address by the
//! server's. Needs `bash`, `curl` and `jq` (`scripts/install-deps.sh` installs them).

use std::process::{Child, Command};

use serde_json::Value;

use crate::common;

/// The README, read when the test is built: a change to it rebuilds the test.
const README: &str = include_str!("../../../../README.md");

/// The section whose blocks run.
const SECTION: &str = "## Quick start";
/// The A/B test section's blocks run after the quick start's, with its variables.
const AB_SECTION: &str = "## A/B tests: which variant sells more";

/// The server address the README's blocks use.
const README_URL: &str = "http://127.0.0.1:7070";

/// Every Recommend model the quick start calls; each must answer for itself, with hits.
const MODELS: [&str; 6] = [
    "bought-together",
    "related-products",
    "looking-similar",
    "trending-items",
    "trending-facets",
    "recommended-for-you",
];

/// Put before the README's blocks: `curl` fails on an HTTP error (showing the body), so that a
/// refused request stops the script instead of feeding an error to the next step.
const PRELUDE: &str = r#"command -v jq >/dev/null || { echo "jq is missing: ./scripts/install-deps.sh installs it" >&2; exit 1; }
curl() { command curl -sS --fail-with-body "$@"; }
"#;

/// The fenced `sh` blocks of the section under `heading`, up to the next `## ` heading.
fn sh_blocks(markdown: &str, heading: &str) -> Vec<String> {
    let mut lines = markdown
        .lines()
        .skip_while(|line| line.trim_end() != heading);
    assert!(
        lines.next().is_some(),
        "the README has no section {heading:?}"
    );
    let mut blocks = Vec::new();
    let mut block: Option<String> = None;
    for line in lines {
        match &mut block {
            None if line.starts_with("## ") => break,
            None if line.trim_end() == "```sh" => block = Some(String::new()),
            None => {}
            Some(_) if line.trim_end() == "```" => blocks.extend(block.take()),
            Some(text) => {
                text.push_str(line);
                text.push('\n');
            }
        }
    }
    assert!(
        block.is_none(),
        "an `sh` block of {heading:?} is not closed"
    );
    blocks
}

/// The global admin key the block starting the server sets.
fn admin_key(serve_block: &str) -> String {
    let key = serve_block
        .split_whitespace()
        .find_map(|word| word.strip_prefix("PENCHANT_AUTH__ADMIN_KEY="))
        .expect("the block that starts the server sets PENCHANT_AUTH__ADMIN_KEY");
    key.trim_matches(|c| c == '\'' || c == '"').to_owned()
}

/// The answers the script printed or the README shows: JSON objects with `answeredBy` (a
/// Recommend result) or `abTestID` (an A/B test started).
fn answers<'a>(lines: impl Iterator<Item = &'a str>) -> Vec<Value> {
    lines
        .filter_map(|line| serde_json::from_str::<Value>(line.trim()).ok())
        .filter(|value| value.get("answeredBy").is_some() || value.get("abTestID").is_some())
        .collect()
}

/// Stops the server when the test ends, passed or not.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn quick_start_runs_as_written() {
    let blocks = sh_blocks(README, SECTION);
    let (serve, rest) = blocks
        .split_first()
        .expect("the quick start has `sh` blocks");
    assert!(
        serve.contains("-- serve"),
        "the quick start's first block starts the server:\n{serve}"
    );
    assert!(
        rest.iter().all(|block| !block.contains("-- serve")),
        "only the quick start's first block starts a server"
    );
    let script = rest.concat() + &sh_blocks(README, AB_SECTION).concat();
    assert!(
        script.contains(README_URL),
        "the quick start's blocks name the server as {README_URL}"
    );

    let dir = tempfile::tempdir().unwrap();
    let (child, url) = common::serve_in(&dir.path().join("penchant-data"), &admin_key(serve));
    let _server = Server(child);
    let script = format!("{PRELUDE}{}", script.replace(README_URL, &url));
    let out = Command::new("timeout")
        .args(["120", "bash", "-euo", "pipefail", "-c", &script])
        .current_dir(dir.path())
        .output()
        .expect("bash and timeout run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report = format!(
        "the quick start's script\n{script}\nexited with {}\n--- stdout\n{stdout}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{report}");

    let got = answers(stdout.lines());
    for model in MODELS {
        let answer = got
            .iter()
            .find(|answer| answer["answeredBy"] == model)
            .unwrap_or_else(|| panic!("no answer of {model}, or another model answered\n{report}"));
        let hits = answer["hits"].as_array().map_or(0, Vec::len);
        assert!(hits > 0, "{model} answered no hit\n{report}");
    }
    // The A/B section's request-time ranking was ordered by the learned ranker.
    assert!(
        stdout.contains(r#"{"ranker":"learned","hits":[{"objectID""#),
        "no answer ordered by the learned ranker\n{report}"
    );
    // The answers the README shows (its `# {...}` lines) are those the server gave.
    let shown = answers(script.lines().filter_map(|line| line.strip_prefix("# ")));
    assert_eq!(
        shown
            .iter()
            .filter(|a| a.get("answeredBy").is_some())
            .count(),
        MODELS.len(),
        "the README shows each model's answer once\n{report}"
    );
    assert!(
        shown.iter().any(|a| a.get("abTestID").is_some()),
        "the README shows the A/B test's start\n{report}"
    );
    for answer in &shown {
        assert!(
            got.contains(answer),
            "the README shows {answer}, the server answered otherwise\n{report}"
        );
    }
}
