//! The `penchant` binary end to end, one test binary: its commands (`cli`), `penchant bench`
//! (`bench`), nodes sharing a Bigtable emulator (`nodes`) and Algolia's official clients against
//! `penchant serve` (`clients`). `common` starts the binary.

mod common;

mod bench;
mod cli;
mod clients;
mod nodes;
