//! Creating the tables the model declares ([`penchant_model::tables::ALL`], whose doc lists
//! every table with its row key) in a store, and the families an older version lacked.

use std::collections::BTreeMap;

use penchant_store::{FamilyChange, GcRule, Store, StoreError, TableSchema};

pub use penchant_model::tables::{ALL, Gc, Rows, Table, named};

use crate::Result;

/// Create `tables` in the store, and the families they lack if they exist (made by an older
/// version); several nodes may do so at once.
pub async fn create(store: &dyn Store, tables: &[Table]) -> Result<()> {
    for table in tables {
        let families = table.family_rules();
        match store.create_table(table.name, families.clone()).await {
            Ok(()) => {}
            Err(StoreError::TableExists(_)) => add_families(store, table.name, &families).await?,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Create the families of `table` it lacks (several nodes may do so at once).
async fn add_families(
    store: &dyn Store,
    table: &str,
    families: &BTreeMap<String, GcRule>,
) -> Result<()> {
    let lacking = |schema: &TableSchema| -> Vec<FamilyChange> {
        families
            .iter()
            .filter(|(family, _)| !schema.families.contains_key(*family))
            .map(|(family, rule)| FamilyChange::Create {
                family: family.clone(),
                gc_rule: rule.clone(),
            })
            .collect()
    };
    let missing = lacking(&store.get_table(table).await?);
    if missing.is_empty() {
        return Ok(());
    }
    if let Err(e) = store.modify_families(table, missing).await
        // Unless another node added them meanwhile.
        && !lacking(&store.get_table(table).await?).is_empty()
    {
        return Err(e.into());
    }
    Ok(())
}
