//! The server's integration tests, one binary: `api`, the HTTP API a resource a module; and
//! `dashboard`, the dashboard in headless Chromium. `common` is the test server they share.

mod common;

mod api;
mod dashboard;
