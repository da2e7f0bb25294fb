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

/// The smallest millisecond-granular timestamp at or after `t`.
fn ceil_ms(t: i64) -> i64 {
    t.div_euclid(1000) * 1000 + if t.rem_euclid(1000) == 0 { 0 } else { 1000 }
}

/// `Chain`, or its only element.
fn chain(mut filters: Vec<RowFilter>) -> RowFilter {
    if filters.len() == 1 {
        filters.pop().unwrap_or(RowFilter::PassAll)
    } else {
        RowFilter::Chain(filters)
    }
}

/// `Interleave`, or its only element.
fn interleave(mut filters: Vec<RowFilter>) -> RowFilter {
    if filters.len() == 1 {
        filters.pop().unwrap_or(RowFilter::BlockAll)
    } else {
        RowFilter::Interleave(filters)
    }
}

/// The cells of one family that its GC rule keeps at time `now`, or `None` when the rule keeps
/// everything.
///
/// Bigtable applies GC rules lazily (at compaction), so a read must filter what the rule has
/// already expired. A rule expires a cell by its age and by its rank among its column's versions,
/// monotonically in both. The ages the rule names cut time into intervals; within one interval
/// the rule keeps exactly the newest `N` versions for some `N` (0 to unlimited). The filter is
/// the interleave, over intervals, of "timestamp in the interval, and among the newest `N`":
/// disjoint, so no cell appears twice.
pub(crate) fn keep_filter(rule: &GcRule, now: i64) -> Option<RowFilter> {
    fn collect(rule: &GcRule, ages: &mut Vec<Duration>, limits: &mut Vec<u32>) {
        match rule {
            GcRule::None => {}
            GcRule::MaxAge(a) => ages.push(*a),
            GcRule::MaxVersions(n) => limits.push(*n),
            GcRule::Union(rs) | GcRule::Intersection(rs) => {
                rs.iter().for_each(|r| collect(r, ages, limits))
            }
        }
    }
    let (mut ages, mut limits) = (Vec::new(), Vec::new());
    collect(rule, &mut ages, &mut limits);
    limits.sort_unstable();
    limits.dedup();
    // A cell is younger than age `a` iff its timestamp >= now - a (timestamps are whole ms).
    let mut cuts: Vec<i64> = ages
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
        // Any timestamp of the interval stands for all of it: the rule expires by `ts < cut`.
        let probe = start;
        let keep = if rule.expires(probe, 0, now) {
            Some(0)
        } else {
            limits
                .iter()
                .copied()
                .find(|&n| rule.expires(probe, n as usize, now))
        };
        let range = TimeRange {
            start: (start > 0).then_some(start),
            end,
        };
        let in_interval = (range != TimeRange::ALL).then_some(RowFilter::TimestampRange(range));
        match keep {
            Some(0) => keeps_all = false,
            Some(n) => {
                keeps_all = false;
                // The rank counts every version of the column: limit first, then slice by time.
                let mut steps = vec![RowFilter::CellsPerColumnLimit(n)];
                steps.extend(in_interval);
                pieces.push(chain(steps));
            }
            None => pieces.push(in_interval.unwrap_or(RowFilter::PassAll)),
        }
    }
    (!keeps_all).then(|| interleave(pieces))
}

/// The cells of a table that its GC rules keep at `now`, or `None` when every rule keeps all.
pub(crate) fn visibility(schema: &TableSchema, now: i64) -> Option<RowFilter> {
    let per_family: Vec<(&String, Option<RowFilter>)> = schema
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
            .map(|(name, keep)| {
                let mut steps = vec![RowFilter::Family(name.clone())];
                steps.extend(keep);
                chain(steps)
            })
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
        let mut server: Vec<RowFilter> = visibility(schema, now).into_iter().collect();
        let mut rest: Vec<RowFilter> = Vec::new();
        let steps: Vec<&RowFilter> = match user {
            None => Vec::new(),
            Some(RowFilter::Chain(fs)) => fs.iter().collect(),
            Some(f) => vec![f],
        };
        for step in steps {
            if rest.is_empty() && pushable(step) {
                server.push(step.clone());
            } else {
                rest.push(step.clone());
            }
        }
        let client = (!rest.is_empty())
            .then(|| chain(rest).compile())
            .transpose()?;
        let server = (!server.is_empty()).then(|| proto(schema, &chain(server)));
        Ok(Self { server, client })
    }
}

/// Whether Bigtable evaluates a filter exactly like Penchant whatever order it returns families
/// in. Regexes stay here (RE2 on raw bytes and Rust's `regex` differ on non-UTF-8 input), as do
/// row-level limits (they depend on family order), interleaves and conditions.
fn pushable(f: &RowFilter) -> bool {
    match f {
        RowFilter::Chain(fs) => fs.iter().all(pushable),
        RowFilter::PassAll
        | RowFilter::BlockAll
        | RowFilter::Family(_)
        | RowFilter::ColumnRange { .. }
        | RowFilter::Qualifiers(_)
        | RowFilter::QualifierPrefix(_)
        | RowFilter::TimestampRange(_)
        | RowFilter::CellsPerColumnLimit(_)
        | RowFilter::StripValue => true,
        _ => false,
    }
}

/// A filter as Bigtable's protocol buffer. Qualifier sets and prefixes (which Bigtable has no
/// filter for in any family) become one column range per family and qualifier: disjoint, so
/// their interleave yields each cell once.
fn proto(schema: &TableSchema, f: &RowFilter) -> v2::RowFilter {
    use v2::column_range::{EndQualifier, StartQualifier};
    let all = |fs: &[RowFilter]| fs.iter().map(|f| proto(schema, f)).collect();
    let regex = |p: &str| Bytes::copy_from_slice(p.as_bytes());
    let count = |n: &u32| i32::try_from(*n).unwrap_or(i32::MAX);
    let column_range = |family: &str, start: Bound<Bytes>, end: Bound<Bytes>| {
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
    let interleaved = |filters: Vec<v2::RowFilter>| match filters.len() {
        0 => filter(Filter::BlockAllFilter(true)),
        _ => filter(Filter::Interleave(v2::row_filter::Interleave { filters })),
    };
    match f {
        RowFilter::PassAll => filter(Filter::PassAllFilter(true)),
        RowFilter::BlockAll => filter(Filter::BlockAllFilter(true)),
        RowFilter::Chain(fs) => filter(Filter::Chain(v2::row_filter::Chain { filters: all(fs) })),
        RowFilter::Interleave(fs) => interleaved(all(fs)),
        RowFilter::Condition {
            predicate,
            on_match,
            on_no_match,
        } => filter(Filter::Condition(Box::new(v2::row_filter::Condition {
            predicate_filter: Some(Box::new(proto(schema, predicate))),
            true_filter: Some(Box::new(proto(schema, on_match))),
            false_filter: Some(Box::new(proto(schema, on_no_match))),
        }))),
        RowFilter::RowKeyRegex(p) => filter(Filter::RowKeyRegexFilter(regex(p))),
        // Every column of the family: a range without bounds, not a family name regex, which
        // Bigtable evaluates per cell — and the emulator compiles again for every cell (it
        // was half of the emulator's time under the soak, a read of a row of 100 cells
        // compiling hundreds of regexes).
        RowFilter::Family(name) => column_range(name, Bound::Unbounded, Bound::Unbounded),
        RowFilter::FamilyRegex(p) => filter(Filter::FamilyNameRegexFilter(p.clone())),
        RowFilter::Qualifiers(set) => interleaved(
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
            interleaved(
                schema
                    .families
                    .keys()
                    .map(|family| column_range(family, Bound::Included(p.clone()), end.clone()))
                    .collect(),
            )
        }
        RowFilter::QualifierRegex(p) => filter(Filter::ColumnQualifierRegexFilter(regex(p))),
        RowFilter::ColumnRange { family, start, end } => {
            column_range(family, start.clone(), end.clone())
        }
        RowFilter::TimestampRange(r) => {
            let start = r.start.unwrap_or(0).max(0);
            match r.end {
                // Bigtable reads an end of 0 as "no end"; an empty range matches nothing.
                Some(end) if end <= start => filter(Filter::BlockAllFilter(true)),
                end => filter(Filter::TimestampRangeFilter(v2::TimestampRange {
                    start_timestamp_micros: start,
                    end_timestamp_micros: end.unwrap_or(0),
                })),
            }
        }
        RowFilter::ValueRegex(p) => filter(Filter::ValueRegexFilter(regex(p))),
        RowFilter::CellsPerRowOffset(n) => filter(Filter::CellsPerRowOffsetFilter(count(n))),
        RowFilter::CellsPerRowLimit(n) => filter(Filter::CellsPerRowLimitFilter(count(n))),
        RowFilter::CellsPerColumnLimit(n) => filter(Filter::CellsPerColumnLimitFilter(count(n))),
        RowFilter::StripValue => filter(Filter::StripValueTransformer(true)),
    }
}

/// The filter a check-and-mutate's predicate runs as, inside Bigtable (to be atomic): only cells
/// the GC rules keep can match.
pub(crate) fn predicate(
    schema: &TableSchema,
    user: Option<&RowFilter>,
    now: i64,
) -> Result<Option<v2::RowFilter>> {
    if let Some(f) = user {
        f.compile()?;
    }
    let parts: Vec<RowFilter> = visibility(schema, now)
        .into_iter()
        .chain(user.cloned())
        .collect();
    Ok((!parts.is_empty()).then(|| proto(schema, &chain(parts))))
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

    use penchant_store::Cell;
    use proptest::prelude::*;

    fn rule() -> impl Strategy<Value = GcRule> {
        let hour = 3_600_000_000u64;
        let leaf = prop_oneof![
            Just(GcRule::None),
            (1u32..4).prop_map(GcRule::MaxVersions),
            (1u64..4).prop_map(move |h| GcRule::MaxAge(Duration::from_micros(h * hour))),
        ];
        leaf.prop_recursive(2, 8, 3, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(GcRule::Union),
                prop::collection::vec(inner, 0..3).prop_map(GcRule::Intersection),
            ]
        })
    }

    proptest! {
        /// The filter sent to Bigtable keeps exactly what the embedded store shows: the cells
        /// GC rules have not expired, by age and by rank among all versions.
        #[test]
        fn visibility_filter_keeps_what_gc_rules_keep(
            rules in prop::collection::vec(rule(), 1..3),
            // (family, qualifier, age in half hours, bias) per cell.
            cells in prop::collection::vec((0usize..3, 0u8..2, 0i64..12, 0i64..3), 0..24),
        ) {
            let now = 1_800_000_000_000_000i64;
            let families: Vec<String> = (0..3).map(|i| format!("f.{i}")).collect();
            let schema = TableSchema {
                name: "t".into(),
                families: rules.iter().enumerate().map(|(i, r)| (families[i].clone(), r.clone())).collect(),
            };
            let mut cells: Vec<Cell> = cells
                .into_iter()
                .map(|(f, q, age, bias)| Cell {
                    family: families[f].as_str().into(),
                    qualifier: Bytes::from(vec![b'a' + q]),
                    // Around the hour boundaries, exactly on them included.
                    timestamp: now - age * 1_800_000_000 + (bias - 1) * 1000,
                    value: Bytes::new(),
                })
                .collect();
            cells.sort_by(|a, b| (&a.family, &a.qualifier, std::cmp::Reverse(a.timestamp))
                .cmp(&(&b.family, &b.qualifier, std::cmp::Reverse(b.timestamp))));
            cells.dedup_by(|a, b| (&a.family, &a.qualifier, a.timestamp) == (&b.family, &b.qualifier, b.timestamp));
            let expected = penchant_store::validate::visible_cells(&schema, now, cells.clone());
            let got = match visibility(&schema, now) {
                None => cells.into_iter().filter(|c| schema.families.contains_key(c.family.as_str())).collect(),
                Some(f) => f.compile().unwrap().apply(b"row", cells),
            };
            prop_assert_eq!(got, expected);
        }
    }

    /// Whether a filter sent to Bigtable holds a regex anywhere.
    fn has_regex(f: &v2::RowFilter) -> bool {
        match f.filter.as_ref() {
            Some(Filter::Chain(c)) => c.filters.iter().any(has_regex),
            Some(Filter::Interleave(i)) => i.filters.iter().any(has_regex),
            Some(Filter::Condition(c)) => [&c.predicate_filter, &c.true_filter, &c.false_filter]
                .into_iter()
                .any(|f| f.as_deref().is_some_and(has_regex)),
            Some(
                Filter::RowKeyRegexFilter(_)
                | Filter::FamilyNameRegexFilter(_)
                | Filter::ColumnQualifierRegexFilter(_)
                | Filter::ValueRegexFilter(_),
            ) => true,
            _ => false,
        }
    }

    /// Every read and every check-and-mutate names each family of its table (the GC rules'
    /// visibility). As family name regexes, Bigtable ran them per cell and the emulator
    /// compiled them again per cell: half of its CPU under the soak, 0.5-2 s a read of a row
    /// of 100 cells. Families go as column ranges; a regex goes only where the caller asks.
    #[test]
    fn families_reach_bigtable_as_column_ranges_not_regexes() {
        let now = 1_800_000_000_000_000i64;
        let schema = TableSchema {
            name: "t".into(),
            families: std::collections::BTreeMap::from([
                ("a".to_owned(), GcRule::MaxVersions(1)),
                ("h".to_owned(), GcRule::MaxAge(Duration::from_secs(3_600))),
                ("x-y.z".to_owned(), GcRule::None),
            ]),
        };
        let asked = RowFilter::column("a", Bytes::from_static(b"q")).and(RowFilter::StripValue);
        for user in [None, Some(&asked), Some(&RowFilter::Family("x-y.z".into()))] {
            let plan = ReadPlan::new(&schema, user, now).unwrap();
            let server = plan.server.unwrap();
            assert!(!has_regex(&server), "{user:?}: {server:?}");
            let check = predicate(&schema, user, now).unwrap().unwrap();
            assert!(!has_regex(&check), "{user:?}: {check:?}");
        }
        // A family is all its columns, and only its own.
        let family = proto(&schema, &RowFilter::Family("x-y.z".into()));
        assert_eq!(
            family.filter,
            Some(Filter::ColumnRangeFilter(v2::ColumnRange {
                family_name: "x-y.z".into(),
                start_qualifier: None,
                end_qualifier: None,
            }))
        );
        // What the caller asks as a regex still goes as one where it must run in Bigtable.
        let regex = RowFilter::QualifierRegex("q.*".into());
        assert!(has_regex(
            &predicate(&schema, Some(&regex), now).unwrap().unwrap()
        ));
    }

    #[test]
    fn ceil_to_milliseconds() {
        assert_eq!(ceil_ms(2000), 2000);
        assert_eq!(ceil_ms(2001), 3000);
        assert_eq!(ceil_ms(-1), 0);
    }
}
