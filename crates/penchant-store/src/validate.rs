//! Cloud Bigtable's limits and the checks every backend runs before it applies anything.

use crate::{
    Cell, Mutation, ReadModifyWriteOp, ReadModifyWriteRule, Result, StoreError, TableSchema,
    TimeRange, Timestamp,
};

/// Longest row key, in bytes.
pub const MAX_ROW_KEY_BYTES: usize = 4 * 1024;
/// Longest column qualifier, in bytes.
pub const MAX_QUALIFIER_BYTES: usize = 16 * 1024;
/// Largest cell value, in bytes.
pub const MAX_VALUE_BYTES: usize = 100 * 1024 * 1024;
/// Most mutations in one request (over all its rows).
pub const MAX_MUTATIONS: usize = 100_000;
/// Longest column family name.
pub const MAX_FAMILY_NAME: usize = 64;
/// Longest table name.
pub const MAX_TABLE_NAME: usize = 50;

fn invalid(msg: String) -> StoreError {
    StoreError::InvalidArgument(msg)
}

/// Table names: 1 to 50 of `[-_.a-zA-Z0-9]`, not starting with `-` or `.`.
pub fn check_table_name(name: &str) -> Result<()> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if name.is_empty()
        || name.len() > MAX_TABLE_NAME
        || !name.chars().all(ok_char)
        || name.starts_with(['-', '.'])
    {
        return Err(invalid(format!(
            "table name `{name}` must be 1 to {MAX_TABLE_NAME} characters of [-_.a-zA-Z0-9], \
             not starting with `-` or `.`"
        )));
    }
    Ok(())
}

/// Family names: 1 to 64 of `[-_.a-zA-Z0-9]`.
pub fn check_family_name(name: &str) -> Result<()> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if name.is_empty() || name.len() > MAX_FAMILY_NAME || !name.chars().all(ok_char) {
        return Err(invalid(format!(
            "column family name `{name}` must be 1 to {MAX_FAMILY_NAME} characters of [-_.a-zA-Z0-9]"
        )));
    }
    Ok(())
}

/// Row keys: 1 to 4 KiB.
pub fn check_row_key(key: &[u8]) -> Result<()> {
    if key.is_empty() {
        return Err(invalid("row key must not be empty".into()));
    }
    if key.len() > MAX_ROW_KEY_BYTES {
        return Err(invalid(format!(
            "row key is {} bytes, the limit is {MAX_ROW_KEY_BYTES}",
            key.len()
        )));
    }
    Ok(())
}

fn check_family(schema: &TableSchema, family: &str) -> Result<()> {
    if schema.families.contains_key(family) {
        Ok(())
    } else {
        Err(StoreError::FamilyNotFound {
            table: schema.name.clone(),
            family: family.to_owned(),
        })
    }
}

fn check_qualifier(qualifier: &[u8]) -> Result<()> {
    if qualifier.len() > MAX_QUALIFIER_BYTES {
        return Err(invalid(format!(
            "column qualifier is {} bytes, the limit is {MAX_QUALIFIER_BYTES}",
            qualifier.len()
        )));
    }
    Ok(())
}

fn check_time_range(range: &TimeRange) -> Result<()> {
    for ts in [range.start, range.end].into_iter().flatten() {
        check_timestamp(ts)?;
    }
    if let (Some(s), Some(e)) = (range.start, range.end)
        && s > e
    {
        return Err(invalid(format!(
            "time range start {s} is after its end {e}"
        )));
    }
    Ok(())
}

/// Explicit timestamps: non-negative multiples of 1000 microseconds (millisecond granularity).
pub fn check_timestamp(ts: i64) -> Result<()> {
    if ts < 0 || ts % 1000 != 0 {
        return Err(invalid(format!(
            "timestamp {ts} must be a non-negative number of microseconds at millisecond \
             granularity (a multiple of 1000)"
        )));
    }
    Ok(())
}

/// Check one row's mutations against a table: nothing may be applied if this fails.
pub fn check_mutations(schema: &TableSchema, row_key: &[u8], mutations: &[Mutation]) -> Result<()> {
    check_row_key(row_key)?;
    if mutations.is_empty() {
        return Err(invalid("a row mutation needs at least one mutation".into()));
    }
    if mutations.len() > MAX_MUTATIONS {
        return Err(invalid(format!(
            "{} mutations in one request, the limit is {MAX_MUTATIONS}",
            mutations.len()
        )));
    }
    for m in mutations {
        if let Some(family) = m.family() {
            check_family(schema, family)?;
        }
        match m {
            Mutation::SetCell {
                qualifier,
                timestamp,
                value,
                ..
            } => {
                check_qualifier(qualifier)?;
                if let Timestamp::Micros(ts) = timestamp {
                    check_timestamp(*ts)?;
                }
                if value.len() > MAX_VALUE_BYTES {
                    return Err(invalid(format!(
                        "cell value is {} bytes, the limit is {MAX_VALUE_BYTES}",
                        value.len()
                    )));
                }
            }
            Mutation::DeleteFromColumn {
                qualifier, range, ..
            } => {
                check_qualifier(qualifier)?;
                check_time_range(range)?;
            }
            Mutation::DeleteFromFamily { .. } | Mutation::DeleteFromRow => {}
        }
    }
    Ok(())
}

/// Check read-modify-write rules against a table.
pub fn check_rmw_rules(
    schema: &TableSchema,
    row_key: &[u8],
    rules: &[ReadModifyWriteRule],
) -> Result<()> {
    check_row_key(row_key)?;
    if rules.is_empty() {
        return Err(invalid(
            "a read-modify-write needs at least one rule".into(),
        ));
    }
    for r in rules {
        check_family(schema, &r.family)?;
        check_qualifier(&r.qualifier)?;
    }
    Ok(())
}

/// The store's clock: microseconds since the Unix epoch, truncated to the millisecond.
pub fn now_micros() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX / 1000) * 1000
}

/// The timestamp a cell gets, given the mutation's clock reading.
pub fn resolve_timestamp(ts: Timestamp, now: i64) -> i64 {
    match ts {
        Timestamp::Server => now,
        Timestamp::Micros(t) => t,
    }
}

/// Check a GC rule: version limits of at least 1, ages of at least a millisecond.
pub fn check_gc_rule(family: &str, rule: &crate::GcRule) -> Result<()> {
    use crate::GcRule;
    match rule {
        GcRule::None => Ok(()),
        GcRule::MaxVersions(0) => Err(invalid(format!(
            "GC rule of family `{family}`: max versions must be at least 1"
        ))),
        GcRule::MaxVersions(_) => Ok(()),
        GcRule::MaxAge(age) if age.as_millis() == 0 => Err(invalid(format!(
            "GC rule of family `{family}`: max age must be at least 1 ms"
        ))),
        GcRule::MaxAge(_) => Ok(()),
        GcRule::Union(rules) | GcRule::Intersection(rules) => {
            rules.iter().try_for_each(|r| check_gc_rule(family, r))
        }
    }
}

/// The versions of one column that a rule expires, given all its timestamps newest first.
///
/// Backends call this whenever a column of a family whose rule counts versions is written, and
/// delete what it returns in the same atomic write: version limits are enforced on write.
pub fn expired_versions(
    rule: &crate::GcRule,
    newest_first: impl IntoIterator<Item = i64>,
    now: i64,
) -> Vec<i64> {
    newest_first
        .into_iter()
        .enumerate()
        .filter(|(rank, ts)| rule.expires(*ts, *rank, now))
        .map(|(_, ts)| ts)
        .collect()
}

/// Drop the cells a table's GC rules have expired. `cells` must be in the store's order
/// (family, qualifier, newest first) so that version ranks can be counted.
pub fn visible_cells(schema: &TableSchema, now: i64, mut cells: Vec<Cell>) -> Vec<Cell> {
    crate::filter::retain_ranked(&mut cells, |c, rank| {
        // A family dropped from the schema has no visible cells.
        schema
            .families
            .get(c.family.as_str())
            .is_some_and(|rule| !rule.expires(c.timestamp, rank, now))
    });
    cells
}

/// Compute the cells a read-modify-write writes, from the row's visible cells. Rules apply in
/// order; a later rule on the same column sees the earlier one's result. The new cell's timestamp
/// is the store's clock, or the old cell's if that is later.
pub fn read_modify_write(
    current: &[Cell],
    rules: &[ReadModifyWriteRule],
    now: i64,
) -> Result<Vec<Cell>> {
    let mut out: Vec<Cell> = Vec::new();
    for rule in rules {
        let prior = out
            .iter()
            .find(|c| c.family == rule.family && c.qualifier == rule.qualifier)
            .or_else(|| {
                current
                    .iter()
                    .find(|c| c.family == rule.family && c.qualifier == rule.qualifier)
            });
        let timestamp = prior.map_or(now, |c| c.timestamp.max(now));
        let value = match &rule.op {
            ReadModifyWriteOp::Increment(delta) => {
                let old = match prior {
                    None => 0,
                    Some(c) => {
                        let bytes: [u8; 8] = c.value[..].try_into().map_err(|_| {
                            StoreError::FailedPrecondition(format!(
                                "cannot increment column `{}:{}`: its value is {} bytes, not a \
                                 64-bit big-endian integer",
                                rule.family,
                                String::from_utf8_lossy(&rule.qualifier),
                                c.value.len()
                            ))
                        })?;
                        i64::from_be_bytes(bytes)
                    }
                };
                bytes::Bytes::copy_from_slice(&old.wrapping_add(*delta).to_be_bytes())
            }
            ReadModifyWriteOp::Append(suffix) => {
                let mut v = prior.map_or_else(Vec::new, |c| c.value.to_vec());
                v.extend_from_slice(suffix);
                if v.len() > MAX_VALUE_BYTES {
                    return Err(invalid(format!(
                        "append would make a {} byte value, the limit is {MAX_VALUE_BYTES}",
                        v.len()
                    )));
                }
                bytes::Bytes::from(v)
            }
        };
        let cell = Cell {
            family: rule.family.as_str().into(),
            qualifier: rule.qualifier.clone(),
            timestamp,
            value,
        };
        match out
            .iter_mut()
            .find(|c| c.family == cell.family && c.qualifier == cell.qualifier)
        {
            Some(slot) => *slot = cell,
            None => out.push(cell),
        }
    }
    out.sort_by(|a, b| (&a.family, &a.qualifier).cmp(&(&b.family, &b.qualifier)));
    Ok(out)
}
