//! Conversions between Penchant's data model and Bigtable's protocol buffers, and the read plan:
//! which part of a filter runs in Bigtable and which part runs here.

use std::ops::Bound;
use std::time::Duration;

use bytes::Bytes;
use penchant_store::{
    CompiledFilter, GcRule, Mutation, ReadModifyWriteOp, ReadModifyWriteRule, Result, RowFilter,
    RowRange, RowSet, StoreError, TableSchema, TimeRange, Timestamp,
};

use crate::proto::admin;
use crate::proto::v2;
use v2::row_filter::Filter;

/// A mutation as Bigtable takes it. Server timestamps are resolved to `now` here, on the client,
/// so that every mutation Penchant sends is idempotent and can be retried safely.
pub(crate) fn mutation(m: &Mutation, now: i64) -> v2::Mutation {
    use v2::mutation::Mutation as M;
    let inner = match m {
        Mutation::SetCell {
            family,
            qualifier,
            timestamp,
            value,
        } => M::SetCell(v2::mutation::SetCell {
            family_name: family.clone(),
            column_qualifier: qualifier.clone(),
            timestamp_micros: match timestamp {
                Timestamp::Server => now,
                Timestamp::Micros(ts) => *ts,
            },
            value: value.clone(),
        }),
        Mutation::DeleteFromColumn {
            family,
            qualifier,
            range,
        } => M::DeleteFromColumn(v2::mutation::DeleteFromColumn {
            family_name: family.clone(),
            column_qualifier: qualifier.clone(),
            time_range: time_range(range),
        }),
        Mutation::DeleteFromFamily { family } => {
            M::DeleteFromFamily(v2::mutation::DeleteFromFamily {
                family_name: family.clone(),
            })
        }
        Mutation::DeleteFromRow => M::DeleteFromRow(v2::mutation::DeleteFromRow {}),
    };
    v2::Mutation {
        mutation: Some(inner),
    }
}

pub(crate) fn mutations(ms: &[Mutation], now: i64) -> Vec<v2::Mutation> {
    ms.iter().map(|m| mutation(m, now)).collect()
}

fn time_range(r: &TimeRange) -> Option<v2::TimestampRange> {
    if *r == TimeRange::ALL {
        return None;
    }
    Some(v2::TimestampRange {
        start_timestamp_micros: r.start.unwrap_or(0),
        // 0 stands for "no upper bound" in Bigtable.
        end_timestamp_micros: r.end.unwrap_or(0),
    })
}

pub(crate) fn rmw_rule(r: &ReadModifyWriteRule) -> v2::ReadModifyWriteRule {
    use v2::read_modify_write_rule::Rule;
    v2::ReadModifyWriteRule {
        family_name: r.family.clone(),
        column_qualifier: r.qualifier.clone(),
        rule: Some(match &r.op {
            ReadModifyWriteOp::Increment(delta) => Rule::IncrementAmount(*delta),
            ReadModifyWriteOp::Append(suffix) => Rule::AppendValue(suffix.clone()),
        }),
    }
}

pub(crate) fn row_set(set: &RowSet) -> v2::RowSet {
    v2::RowSet {
        row_keys: set.keys.clone(),
        row_ranges: set.ranges.iter().map(row_range).collect(),
    }
}

fn row_range(r: &RowRange) -> v2::RowRange {
    use v2::row_range::{EndKey, StartKey};
    v2::RowRange {
        start_key: match &r.start {
            Bound::Included(k) => Some(StartKey::StartKeyClosed(k.clone())),
            Bound::Excluded(k) => Some(StartKey::StartKeyOpen(k.clone())),
            Bound::Unbounded => None,
        },
        end_key: match &r.end {
            Bound::Included(k) => Some(EndKey::EndKeyClosed(k.clone())),
            Bound::Excluded(k) => Some(EndKey::EndKeyOpen(k.clone())),
            Bound::Unbounded => None,
        },
    }
}

/// The rows of `set` that come strictly after `key`, or `None` if there are none: where a broken
/// read stream resumes.
pub(crate) fn rows_after(set: &RowSet, key: &Bytes) -> Option<RowSet> {
    let after = RowRange {
        start: Bound::Excluded(key.clone()),
        end: Bound::Unbounded,
    };
    if set.is_all() {
        return Some(RowSet::range(after));
    }
    let keys: Vec<Bytes> = set.keys.iter().filter(|k| *k > key).cloned().collect();
    let ranges: Vec<RowRange> = set
        .ranges
        .iter()
        .filter_map(|r| {
            // The range's end must lie beyond `key`.
            let live = match &r.end {
                Bound::Included(e) => e > key,
                Bound::Excluded(e) => e > key,
                Bound::Unbounded => true,
            };
            if !live {
                return None;
            }
            let start_is_later = match &r.start {
                Bound::Included(s) => s > key,
                Bound::Excluded(s) => s >= key,
                Bound::Unbounded => false,
            };
            Some(if start_is_later {
                r.clone()
            } else {
                RowRange {
                    start: after.start.clone(),
                    end: r.end.clone(),
                }
            })
        })
        .collect();
    (!keys.is_empty() || !ranges.is_empty()).then_some(RowSet { keys, ranges })
}

pub(crate) fn gc_rule(rule: &GcRule) -> admin::GcRule {
    use admin::gc_rule::{Intersection, Rule, Union};
    let inner = match rule {
        GcRule::None => None,
        GcRule::MaxAge(age) => Some(Rule::MaxAge(prost_types::Duration {
            seconds: i64::try_from(age.as_secs()).unwrap_or(i64::MAX),
            nanos: i32::try_from(age.subsec_nanos()).unwrap_or(0),
        })),
        GcRule::MaxVersions(n) => Some(Rule::MaxNumVersions(i32::try_from(*n).unwrap_or(i32::MAX))),
        GcRule::Union(rules) => Some(Rule::Union(Union {
            rules: rules.iter().map(gc_rule).collect(),
        })),
        GcRule::Intersection(rules) => Some(Rule::Intersection(Intersection {
            rules: rules.iter().map(gc_rule).collect(),
        })),
    };
    admin::GcRule { rule: inner }
}

pub(crate) fn gc_rule_from(rule: Option<&admin::GcRule>) -> GcRule {
    use admin::gc_rule::Rule;
    match rule.and_then(|r| r.rule.as_ref()) {
        None => GcRule::None,
        Some(Rule::MaxNumVersions(n)) => GcRule::MaxVersions(u32::try_from(*n).unwrap_or(0)),
        Some(Rule::MaxAge(d)) => GcRule::MaxAge(Duration::new(
            u64::try_from(d.seconds).unwrap_or(0),
            u32::try_from(d.nanos).unwrap_or(0),
        )),
        Some(Rule::Union(u)) => {
            GcRule::Union(u.rules.iter().map(|r| gc_rule_from(Some(r))).collect())
        }
        Some(Rule::Intersection(i)) => {
            GcRule::Intersection(i.rules.iter().map(|r| gc_rule_from(Some(r))).collect())
        }
    }
}

pub(crate) fn column_family(rule: &GcRule) -> admin::ColumnFamily {
    admin::ColumnFamily {
        gc_rule: Some(gc_rule(rule)),
        value_type: None,
    }
}

fn filter(f: Filter) -> v2::RowFilter {
    v2::RowFilter { filter: Some(f) }
}

fn chain(mut filters: Vec<v2::RowFilter>) -> v2::RowFilter {
    if filters.len() == 1 {
        return filters
            .pop()
            .unwrap_or_else(|| filter(Filter::PassAllFilter(true)));
    }
    filter(Filter::Chain(v2::row_filter::Chain { filters }))
}

fn interleave(mut filters: Vec<v2::RowFilter>) -> v2::RowFilter {
    match filters.len() {
        0 => filter(Filter::BlockAllFilter(true)),
        1 => filters
            .pop()
            .unwrap_or_else(|| filter(Filter::BlockAllFilter(true))),
        _ => filter(Filter::Interleave(v2::row_filter::Interleave { filters })),
    }
}

/// An RE2 pattern matching exactly `name` (family names are `[-_.a-zA-Z0-9]`).
fn exact_family(name: &str) -> v2::RowFilter {
    let mut pattern = String::with_capacity(name.len() + 4);
    for c in name.chars() {
        if !c.is_ascii_alphanumeric() && c != '_' {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    filter(Filter::FamilyNameRegexFilter(pattern))
}

fn timestamps(start: i64, end: Option<i64>) -> v2::RowFilter {
    filter(Filter::TimestampRangeFilter(v2::TimestampRange {
        start_timestamp_micros: start,
        end_timestamp_micros: end.unwrap_or(0),
    }))
}

fn per_column(n: u32) -> v2::RowFilter {
    filter(Filter::CellsPerColumnLimitFilter(
        i32::try_from(n).unwrap_or(i32::MAX),
    ))
}

/// The smallest millisecond-granular timestamp at or after `t`.
fn ceil_ms(t: i64) -> i64 {
    t.div_euclid(1000) * 1000 + if t.rem_euclid(1000) == 0 { 0 } else { 1000 }
}

/// The cells of one family that its GC rule keeps at time `now`, as a Bigtable filter, or `None`
/// when the rule keeps everything.
///
/// Bigtable applies GC rules lazily (at compaction), so a read must filter what the rule has
/// already expired. A rule expires a cell by its age and by its rank among its column's versions,
/// monotonically in both. The ages the rule names cut time into intervals; within one interval
/// the rule keeps exactly the newest `N` versions for some `N` (0 to unlimited). The filter is
/// the interleave, over intervals, of "timestamp in the interval, and among the newest `N`":
/// disjoint, so no cell appears twice.
pub(crate) fn keep_filter(rule: &GcRule, now: i64) -> Option<v2::RowFilter> {
    fn ages(rule: &GcRule, out: &mut Vec<Duration>) {
        match rule {
            GcRule::MaxAge(a) => out.push(*a),
            GcRule::Union(rs) | GcRule::Intersection(rs) => rs.iter().for_each(|r| ages(r, out)),
            GcRule::None | GcRule::MaxVersions(_) => {}
        }
    }
    fn limits(rule: &GcRule, out: &mut Vec<u32>) {
        match rule {
            GcRule::MaxVersions(n) => out.push(*n),
            GcRule::Union(rs) | GcRule::Intersection(rs) => rs.iter().for_each(|r| limits(r, out)),
            GcRule::None | GcRule::MaxAge(_) => {}
        }
    }
    let mut age_list = Vec::new();
    ages(rule, &mut age_list);
    let mut limit_list = Vec::new();
    limits(rule, &mut limit_list);
    limit_list.sort_unstable();
    limit_list.dedup();
    // Interval boundaries: a cell is younger than age `a` iff its timestamp >= now - a.
    let mut cuts: Vec<i64> = age_list
        .iter()
        .map(|a| ceil_ms(now.saturating_sub(i64::try_from(a.as_micros()).unwrap_or(i64::MAX))))
        .filter(|c| *c > 0)
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut pieces = Vec::new();
    let mut keeps_all = true;
    let starts = std::iter::once(0).chain(cuts.iter().copied());
    let ends = cuts.iter().copied().map(Some).chain(std::iter::once(None));
    for (start, end) in starts.zip(ends) {
        // The interval's newest timestamp stands for all of it: ages expire by `ts < cut`.
        let probe = end.map_or(now.max(start), |e| e - 1000).max(start);
        let keep = if rule.expires(probe, 0, now) {
            Some(0)
        } else {
            limit_list
                .iter()
                .copied()
                .find(|&n| rule.expires(probe, n as usize, now))
        };
        let in_interval = (start > 0 || end.is_some()).then(|| timestamps(start, end));
        match keep {
            Some(0) => keeps_all = false,
            Some(n) => {
                keeps_all = false;
                pieces.push(chain(
                    std::iter::once(per_column(n)).chain(in_interval).collect(),
                ));
            }
            None => pieces.push(in_interval.unwrap_or_else(|| filter(Filter::PassAllFilter(true)))),
        }
    }
    (!keeps_all).then(|| interleave(pieces))
}

/// The cells of a table that its GC rules keep at `now`, or `None` when every rule keeps all.
pub(crate) fn visibility(schema: &TableSchema, now: i64) -> Option<v2::RowFilter> {
    let per_family: Vec<(&String, Option<v2::RowFilter>)> = schema
        .families
        .iter()
        .map(|(name, rule)| (name, keep_filter(rule, now)))
        .collect();
    if per_family.iter().all(|(_, keep)| keep.is_none()) {
        return None;
    }
    Some(interleave(
        per_family
            .into_iter()
            .map(|(name, keep)| chain(std::iter::once(exact_family(name)).chain(keep).collect()))
            .collect(),
    ))
}

/// How a read runs: the filter Bigtable applies (the GC visibility filter, then as much of the
/// caller's filter as Bigtable evaluates exactly like Penchant), and the rest, applied here.
#[derive(Debug)]
pub(crate) struct ReadPlan {
    pub server: Option<v2::RowFilter>,
    pub client: Option<CompiledFilter>,
}

impl ReadPlan {
    pub fn new(schema: &TableSchema, user: Option<&RowFilter>, now: i64) -> Result<Self> {
        // Compile the whole filter first so bad regexes fail the same way on every backend.
        if let Some(f) = user {
            f.compile()?;
        }
        let mut server: Vec<v2::RowFilter> = visibility(schema, now).into_iter().collect();
        let mut rest: Vec<RowFilter> = Vec::new();
        let steps: Vec<&RowFilter> = match user {
            None => Vec::new(),
            Some(RowFilter::Chain(fs)) => fs.iter().collect(),
            Some(f) => vec![f],
        };
        for step in steps {
            match (rest.is_empty(), pushdown(schema, step)) {
                (true, Some(f)) => server.push(f),
                _ => rest.push(step.clone()),
            }
        }
        let client = match rest.len() {
            0 => None,
            1 => Some(rest[0].compile()?),
            _ => Some(RowFilter::Chain(rest).compile()?),
        };
        let server = (!server.is_empty()).then(|| chain(server));
        Ok(Self { server, client })
    }
}

/// A filter as Bigtable evaluates it, when Bigtable's result is exactly Penchant's whatever
/// order it returns families in. Regexes stay here (RE2 on raw bytes and Rust's `regex` differ
/// on non-UTF-8 input), as do row-level limits (they depend on family order) and conditions.
fn pushdown(schema: &TableSchema, f: &RowFilter) -> Option<v2::RowFilter> {
    let column_range = |family: &str, start: Bound<Bytes>, end: Bound<Bytes>| {
        use v2::column_range::{EndQualifier, StartQualifier};
        filter(Filter::ColumnRangeFilter(v2::ColumnRange {
            family_name: family.to_owned(),
            start_qualifier: match start {
                Bound::Included(q) => Some(StartQualifier::StartQualifierClosed(q)),
                Bound::Excluded(q) => Some(StartQualifier::StartQualifierOpen(q)),
                Bound::Unbounded => None,
            },
            end_qualifier: match end {
                Bound::Included(q) => Some(EndQualifier::EndQualifierClosed(q)),
                Bound::Excluded(q) => Some(EndQualifier::EndQualifierOpen(q)),
                Bound::Unbounded => None,
            },
        }))
    };
    Some(match f {
        RowFilter::PassAll => filter(Filter::PassAllFilter(true)),
        RowFilter::BlockAll => filter(Filter::BlockAllFilter(true)),
        RowFilter::Chain(fs) => chain(
            fs.iter()
                .map(|f| pushdown(schema, f))
                .collect::<Option<Vec<_>>>()?,
        ),
        RowFilter::Family(name) => exact_family(name),
        RowFilter::ColumnRange { family, start, end } => {
            column_range(family, start.clone(), end.clone())
        }
        // A qualifier set or prefix in any family: one column range per family (and qualifier),
        // disjoint, so the interleave yields each cell once.
        RowFilter::Qualifiers(set) => interleave(
            schema
                .families
                .keys()
                .flat_map(|family| {
                    set.iter().map(move |q| {
                        column_range(
                            family,
                            Bound::Included(q.clone()),
                            Bound::Included(q.clone()),
                        )
                    })
                })
                .collect(),
        ),
        RowFilter::QualifierPrefix(p) => {
            let end = match penchant_store::prefix_successor(p) {
                Some(e) => Bound::Excluded(Bytes::from(e)),
                None => Bound::Unbounded,
            };
            interleave(
                schema
                    .families
                    .keys()
                    .map(|family| column_range(family, Bound::Included(p.clone()), end.clone()))
                    .collect(),
            )
        }
        RowFilter::TimestampRange(r) => timestamps(r.start.unwrap_or(0), r.end),
        RowFilter::CellsPerColumnLimit(n) => per_column(*n),
        RowFilter::StripValue => filter(Filter::StripValueTransformer(true)),
        _ => return None,
    })
}

/// The filter a check-and-mutate's predicate runs as: only cells the GC rules keep can match.
pub(crate) fn predicate(
    schema: &TableSchema,
    user: Option<&RowFilter>,
    now: i64,
) -> Result<Option<v2::RowFilter>> {
    let user = match user {
        None => None,
        Some(f) => {
            f.compile()?;
            Some(predicate_filter(schema, f))
        }
    };
    let parts: Vec<v2::RowFilter> = visibility(schema, now).into_iter().chain(user).collect();
    Ok((!parts.is_empty()).then(|| chain(parts)))
}

/// Every filter, as Bigtable's own (for predicates, which must run inside Bigtable to be atomic).
fn predicate_filter(schema: &TableSchema, f: &RowFilter) -> v2::RowFilter {
    let all = |fs: &[RowFilter]| fs.iter().map(|f| predicate_filter(schema, f)).collect();
    let regex = |p: &str| Bytes::copy_from_slice(p.as_bytes());
    let count = |n: &u32| i32::try_from(*n).unwrap_or(i32::MAX);
    match f {
        RowFilter::Chain(fs) => chain(all(fs)),
        RowFilter::Interleave(fs) => filter(Filter::Interleave(v2::row_filter::Interleave {
            filters: all(fs),
        })),
        RowFilter::Condition {
            predicate,
            on_match,
            on_no_match,
        } => filter(Filter::Condition(Box::new(v2::row_filter::Condition {
            predicate_filter: Some(Box::new(predicate_filter(schema, predicate))),
            true_filter: Some(Box::new(predicate_filter(schema, on_match))),
            false_filter: Some(Box::new(predicate_filter(schema, on_no_match))),
        }))),
        RowFilter::RowKeyRegex(p) => filter(Filter::RowKeyRegexFilter(regex(p))),
        RowFilter::FamilyRegex(p) => filter(Filter::FamilyNameRegexFilter(p.clone())),
        RowFilter::QualifierRegex(p) => filter(Filter::ColumnQualifierRegexFilter(regex(p))),
        RowFilter::ValueRegex(p) => filter(Filter::ValueRegexFilter(regex(p))),
        RowFilter::CellsPerRowOffset(n) => filter(Filter::CellsPerRowOffsetFilter(count(n))),
        RowFilter::CellsPerRowLimit(n) => filter(Filter::CellsPerRowLimitFilter(count(n))),
        other => pushdown(schema, other).unwrap_or_else(|| filter(Filter::PassAllFilter(true))),
    }
}

/// Map a gRPC status onto the store's errors.
pub(crate) fn status_error(table: &str, status: &tonic::Status) -> StoreError {
    use tonic::Code;
    let msg = status.message().to_owned();
    if crate::retry::is_transient(status) {
        return StoreError::Unavailable(format!("{:?}: {msg}", status.code()));
    }
    match status.code() {
        Code::NotFound => StoreError::TableNotFound(table.to_owned()),
        Code::AlreadyExists => StoreError::TableExists(table.to_owned()),
        Code::InvalidArgument | Code::OutOfRange => StoreError::InvalidArgument(msg),
        Code::FailedPrecondition => StoreError::FailedPrecondition(msg),
        Code::ResourceExhausted => StoreError::Unavailable(format!("{:?}: {msg}", status.code())),
        code => StoreError::Backend(format!("Bigtable {code:?}: {msg}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_after_trims_keys_and_ranges() {
        let k = |s: &str| Bytes::copy_from_slice(s.as_bytes());
        let set = RowSet {
            keys: vec![k("a"), k("m"), k("z")],
            ranges: vec![
                RowRange::closed_open(k("b"), k("d")),
                RowRange::closed(k("n"), k("p")),
            ],
        };
        let after = rows_after(&set, &k("c")).unwrap();
        assert_eq!(after.keys, vec![k("m"), k("z")]);
        assert_eq!(after.ranges.len(), 2);
        assert!(!after.ranges[0].contains(b"c") && after.ranges[0].contains(b"c\0"));
        assert_eq!(after.ranges[1], RowRange::closed(k("n"), k("p")));
        assert!(rows_after(&set, &k("z")).is_none());
        let all = rows_after(&RowSet::all(), &k("q")).unwrap();
        assert!(!all.contains(b"q") && all.contains(b"r"));
    }

    #[test]
    fn ceil_to_milliseconds() {
        assert_eq!(ceil_ms(2000), 2000);
        assert_eq!(ceil_ms(2001), 3000);
        assert_eq!(ceil_ms(-1), 0);
    }
}
