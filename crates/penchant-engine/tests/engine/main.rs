//! The engine's integration tests, one module a subject; `support` is what they share, and
//! `bigtable` runs scenarios of the others on the Bigtable backend (emulators).

mod support;

mod abtests;
mod batch_race;
mod bigtable;
mod bloom;
mod concurrent_days;
mod consistency;
mod fold_race;
mod indexes;
mod jobs;
mod layouts;
mod nodes;
mod portability;
mod profiles;
mod ranker;
mod residency;
mod retention;
mod retries;
mod schedules;
mod states;
mod vectors;
