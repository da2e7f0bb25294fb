//! A Bigtable emulator process for tests and benchmarks (feature `emulator`).
//!
//! The binary is `$BIGTABLE_EMULATOR_BINARY` when set (`scripts/test.sh` sets it, building a
//! small launcher around Go's `bttest` when the Google Cloud CLI's emulator is not installed),
//! else the Google Cloud CLI's `cbtemulator`. There is no silent fallback: without an emulator,
//! [`Emulator::start`] panics with what to do.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use crate::BigtableConfig;

/// Where the Google Cloud CLI installs its Bigtable emulator.
pub const CLOUD_SDK_EMULATOR: &str =
    "/usr/lib/google-cloud-sdk/platform/bigtable-emulator/cbtemulator";

/// A running emulator, stopped when dropped.
#[derive(Debug)]
pub struct Emulator {
    child: Child,
    addr: String,
}

impl Emulator {
    /// The emulator binary to run.
    pub fn binary() -> PathBuf {
        if let Some(path) = std::env::var_os("BIGTABLE_EMULATOR_BINARY").filter(|p| !p.is_empty()) {
            return PathBuf::from(path);
        }
        let sdk = PathBuf::from(CLOUD_SDK_EMULATOR);
        assert!(
            sdk.exists(),
            "no Bigtable emulator: {CLOUD_SDK_EMULATOR} is not installed and \
             BIGTABLE_EMULATOR_BINARY is not set. Run the tests with ./scripts/test.sh, which \
             finds or builds one (scripts/bigtable-emulator.sh)."
        );
        sdk
    }

    /// Start an emulator on a free loopback port and wait until it listens.
    pub fn start() -> Self {
        let binary = Self::binary();
        let mut child = Command::new(&binary)
            .args(["-host", "127.0.0.1", "-port", "0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start the Bigtable emulator {}: {e}",
                    binary.display()
                )
            });
        let stdout = child.stdout.take().expect("piped stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("reading the emulator's banner");
        let addr = line
            .trim()
            .rsplit(' ')
            .next()
            .filter(|a| a.contains(':'))
            .unwrap_or_else(|| panic!("unexpected emulator banner: {line:?}"))
            .to_owned();
        Self { child, addr }
    }

    /// `host:port`, as `BIGTABLE_EMULATOR_HOST` takes it.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// `http://host:port`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A store configuration pointing at this emulator, with quick retries.
    pub fn config(&self, table_prefix: &str) -> BigtableConfig {
        BigtableConfig {
            endpoint: Some(self.endpoint()),
            table_prefix: table_prefix.to_owned(),
            ..BigtableConfig::default()
        }
    }

    /// The process ID (to stop it from outside, in fault tests).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stop the emulator now (kill its process and wait for it): a cluster gone. Dropping it
    /// afterwards does nothing more.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
