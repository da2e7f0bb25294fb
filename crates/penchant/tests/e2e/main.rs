//! The `penchant` binary end to end, one test binary: its commands (`cli`), `penchant bench`
//! (`bench`), nodes sharing a Bigtable emulator (`nodes`), backups and app exports
//! (`portability`), what it logs (`logs`), Algolia's official clients against `penchant serve`
//! (`clients`), and the README's quick start run as written (`readme`). `common` starts the
//! binary.

mod common;

mod abtests;
mod bench;
mod cli;
mod clients;
mod logs;
mod nodes;
mod portability;
mod readme;
