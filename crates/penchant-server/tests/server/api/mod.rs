//! The server's HTTP tests: each module is a resource.

mod abtests;
mod affinity;
mod auth;
mod bloom;
mod catalog;
mod dashboard_data;
mod edge;
mod events;
mod http;
mod indexes;
mod layouts;
mod metrics;
mod newcomer;
mod openapi;
mod personalization;
mod placement;
mod recommend;
mod regressions;
mod user_tokens;
mod vectors;
