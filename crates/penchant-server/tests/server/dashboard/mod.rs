//! The dashboard's browser tests: the server in-process on the memory store, headless Chromium
//! over WebDriver (chromedriver; `./scripts/install-deps.sh chromium chromium-driver` installs
//! both), and assertions on what the page shows. Each test saves screenshots of its pages to
//! `$CARGO_TARGET_TMPDIR/dashboard-screenshots/` (and `$DASHBOARD_SCREENSHOTS_DIR` when set:
//! `scripts/dashboard-screenshots.sh` refreshes docs/DASHBOARD.md's).

mod browser;
mod seed;
mod webdriver;

mod abtests;
mod assets;
mod errors;
mod overview;
mod pages;
mod phone;
mod profiles;
mod strategy;

/// The desktop window the tests use.
pub const DESKTOP: (u32, u32) = (1280, 900);
/// A phone's.
pub const PHONE: (u32, u32) = (390, 844);
