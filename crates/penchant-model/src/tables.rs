//! A table's definition: its name, its column families with how long the store keeps their
//! cells, and whose rows it holds. Each table is declared beside the engine module that owns it
//! and listed in the engine's registry (`penchant_engine::tables`), which documents every row key.

use std::collections::BTreeMap;
use std::time::Duration;

use penchant_store::GcRule;

/// A table of the engine.
#[derive(Debug, Clone, Copy)]
pub struct Table {
    pub name: &'static str,
    /// Its column families, and how long the store keeps their cells.
    pub families: &'static [(&'static str, Gc)],
    pub rows: Rows,
}

/// Whose rows a table holds (see the registry's table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rows {
    App,
    User,
    Pinned,
}

/// How long a family's cells are kept.
#[derive(Debug, Clone, Copy)]
pub enum Gc {
    /// The newest `n` cells of each column.
    Versions(u32),
    /// Cells younger than this.
    Age(Duration),
    /// The newest `n` cells of each column, while younger than this.
    VersionsAndAge(u32, Duration),
}

impl Gc {
    pub fn rule(self) -> GcRule {
        match self {
            Gc::Versions(n) => GcRule::MaxVersions(n),
            Gc::Age(age) => GcRule::MaxAge(age),
            Gc::VersionsAndAge(n, age) => {
                GcRule::Union(vec![GcRule::MaxVersions(n), GcRule::MaxAge(age)])
            }
        }
    }
}

impl Table {
    /// Its families as the store takes them.
    pub fn family_rules(&self) -> BTreeMap<String, GcRule> {
        self.families
            .iter()
            .map(|(family, gc)| ((*family).to_owned(), gc.rule()))
            .collect()
    }
}
