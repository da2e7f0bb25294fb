//! The data model: cells, rows, mutations, row sets and garbage-collection rules.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// When a cell was written, in microseconds since the Unix epoch.
///
/// As in Cloud Bigtable (whose tables default to millisecond granularity), explicit timestamps
/// must be non-negative multiples of 1000.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Timestamp {
    /// The store's clock when the mutation is applied (Bigtable's `-1`), truncated to the
    /// millisecond. Every server-time cell of one row mutation gets the same timestamp.
    Server,
    /// An explicit timestamp in microseconds.
    Micros(i64),
}

/// A half-open time range `[start, end)` in microseconds; `None` is unbounded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct TimeRange {
    pub start: Option<i64>,
    pub end: Option<i64>,
}

impl TimeRange {
    /// Every timestamp.
    pub const ALL: TimeRange = TimeRange {
        start: None,
        end: None,
    };

    /// `[start, end)`.
    pub fn new(start: i64, end: i64) -> Self {
        Self {
            start: Some(start),
            end: Some(end),
        }
    }

    /// Whether `ts` lies in the range.
    pub fn contains(&self, ts: i64) -> bool {
        self.start.is_none_or(|s| ts >= s) && self.end.is_none_or(|e| ts < e)
    }
}

/// One change to one row. A row mutation (a list of these) is applied atomically.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mutation {
    /// Write a cell, replacing the cell of the same column and timestamp if there is one.
    SetCell {
        family: String,
        qualifier: Bytes,
        timestamp: Timestamp,
        value: Bytes,
    },
    /// Delete the cells of one column whose timestamp lies in `range`.
    DeleteFromColumn {
        family: String,
        qualifier: Bytes,
        range: TimeRange,
    },
    /// Delete every cell of one family in the row.
    DeleteFromFamily { family: String },
    /// Delete the whole row.
    DeleteFromRow,
}

impl Mutation {
    /// A `SetCell` with an explicit timestamp.
    pub fn set(
        family: impl Into<String>,
        qualifier: impl Into<Bytes>,
        timestamp_micros: i64,
        value: impl Into<Bytes>,
    ) -> Self {
        Mutation::SetCell {
            family: family.into(),
            qualifier: qualifier.into(),
            timestamp: Timestamp::Micros(timestamp_micros),
            value: value.into(),
        }
    }

    /// A `SetCell` stamped with the store's clock.
    pub fn set_now(
        family: impl Into<String>,
        qualifier: impl Into<Bytes>,
        value: impl Into<Bytes>,
    ) -> Self {
        Mutation::SetCell {
            family: family.into(),
            qualifier: qualifier.into(),
            timestamp: Timestamp::Server,
            value: value.into(),
        }
    }

    /// Delete every version of one column.
    pub fn delete_column(family: impl Into<String>, qualifier: impl Into<Bytes>) -> Self {
        Mutation::DeleteFromColumn {
            family: family.into(),
            qualifier: qualifier.into(),
            range: TimeRange::ALL,
        }
    }

    /// The family the mutation touches, if it names one.
    pub fn family(&self) -> Option<&str> {
        match self {
            Mutation::SetCell { family, .. }
            | Mutation::DeleteFromColumn { family, .. }
            | Mutation::DeleteFromFamily { family } => Some(family),
            Mutation::DeleteFromRow => None,
        }
    }
}

/// The mutations of one row, for [`crate::Store::mutate_rows`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowMutation {
    pub row_key: Bytes,
    pub mutations: Vec<Mutation>,
}

impl RowMutation {
    pub fn new(row_key: impl Into<Bytes>, mutations: Vec<Mutation>) -> Self {
        Self {
            row_key: row_key.into(),
            mutations,
        }
    }
}

/// A column family name as cells carry it: shared, so cloning it for every cell of a scan costs
/// a reference count, not an allocation. Compares with `str` and `String`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FamilyName(Arc<str>);

impl FamilyName {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for FamilyName {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for FamilyName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

impl std::fmt::Display for FamilyName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for FamilyName {
    fn from(s: &str) -> Self {
        Self(s.into())
    }
}

impl From<String> for FamilyName {
    fn from(s: String) -> Self {
        Self(s.into())
    }
}

impl PartialEq<str> for FamilyName {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for FamilyName {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl PartialEq<String> for FamilyName {
    fn eq(&self, other: &String) -> bool {
        *self.0 == **other
    }
}

/// One timestamped value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Cell {
    pub family: FamilyName,
    pub qualifier: Bytes,
    pub timestamp: i64,
    pub value: Bytes,
}

/// A row as read: its key and its cells, ordered by family name, then qualifier, then newest
/// timestamp first. A read never returns a row without cells.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Row {
    pub key: Bytes,
    pub cells: Vec<Cell>,
}

impl Row {
    /// The newest cell of a column.
    pub fn latest(&self, family: &str, qualifier: &[u8]) -> Option<&Cell> {
        self.cells
            .iter()
            .find(|c| c.family == family && c.qualifier == qualifier)
    }

    /// The cells of one family.
    pub fn family<'a>(&'a self, family: &'a str) -> impl Iterator<Item = &'a Cell> + 'a {
        self.cells.iter().filter(move |c| c.family == family)
    }
}

/// A range of row keys.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RowRange {
    pub start: Bound<Bytes>,
    pub end: Bound<Bytes>,
}

impl RowRange {
    /// Every row.
    pub fn all() -> Self {
        Self {
            start: Bound::Unbounded,
            end: Bound::Unbounded,
        }
    }

    /// `[start, end)`.
    pub fn closed_open(start: impl Into<Bytes>, end: impl Into<Bytes>) -> Self {
        Self {
            start: Bound::Included(start.into()),
            end: Bound::Excluded(end.into()),
        }
    }

    /// `[start, end]`.
    pub fn closed(start: impl Into<Bytes>, end: impl Into<Bytes>) -> Self {
        Self {
            start: Bound::Included(start.into()),
            end: Bound::Included(end.into()),
        }
    }

    /// Every row whose key starts with `prefix`.
    pub fn prefix(prefix: impl Into<Bytes>) -> Self {
        let prefix = prefix.into();
        let end = match prefix_successor(&prefix) {
            Some(end) => Bound::Excluded(Bytes::from(end)),
            None => Bound::Unbounded,
        };
        let start = if prefix.is_empty() {
            Bound::Unbounded
        } else {
            Bound::Included(prefix)
        };
        Self { start, end }
    }

    /// Whether `key` lies in the range.
    pub fn contains(&self, key: &[u8]) -> bool {
        let after_start = match &self.start {
            Bound::Included(s) => key >= &s[..],
            Bound::Excluded(s) => key > &s[..],
            Bound::Unbounded => true,
        };
        let before_end = match &self.end {
            Bound::Included(e) => key <= &e[..],
            Bound::Excluded(e) => key < &e[..],
            Bound::Unbounded => true,
        };
        after_start && before_end
    }
}

/// The smallest byte string greater than every string that starts with `prefix`, or `None` when
/// there is none (the prefix is empty or all `0xff`).
pub fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// Which rows a read covers: the union of some keys and some ranges. An empty set means the
/// whole table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct RowSet {
    pub keys: Vec<Bytes>,
    pub ranges: Vec<RowRange>,
}

impl RowSet {
    /// The whole table.
    pub fn all() -> Self {
        Self::default()
    }

    /// Exactly these keys.
    pub fn keys<K: Into<Bytes>>(keys: impl IntoIterator<Item = K>) -> Self {
        Self {
            keys: keys.into_iter().map(Into::into).collect(),
            ranges: Vec::new(),
        }
    }

    /// One range.
    pub fn range(range: RowRange) -> Self {
        Self {
            keys: Vec::new(),
            ranges: vec![range],
        }
    }

    /// Every row whose key starts with `prefix`.
    pub fn prefix(prefix: impl Into<Bytes>) -> Self {
        Self::range(RowRange::prefix(prefix))
    }

    /// Whether the set names nothing, i.e. covers the whole table.
    pub fn is_all(&self) -> bool {
        self.keys.is_empty() && self.ranges.is_empty()
    }

    /// Whether `key` is in the set.
    pub fn contains(&self, key: &[u8]) -> bool {
        self.is_all()
            || self.keys.iter().any(|k| k == key)
            || self.ranges.iter().any(|r| r.contains(key))
    }
}

/// How fresh a read must be, where a store keeps several copies of a row (several clusters of
/// a replicated Bigtable instance, see [`crate::AffineStore`]). Stores with one copy ignore it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Consistency {
    /// Any copy may answer: the row's home cluster, or another one if the home cannot be
    /// reached (which may not have every recent write yet).
    #[default]
    Eventual,
    /// Only the row's home cluster answers (it has every write acknowledged for the row); when
    /// it cannot be reached the read fails with [`crate::StoreError::Unavailable`], never with
    /// an older answer.
    Strong,
}

impl Consistency {
    /// `eventual` or `strong`.
    pub fn as_str(self) -> &'static str {
        match self {
            Consistency::Eventual => "eventual",
            Consistency::Strong => "strong",
        }
    }
}

impl std::fmt::Display for Consistency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Consistency {
    type Err = String;

    /// `eventual` or `strong`; anything else is refused with a message saying so.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "eventual" => Ok(Consistency::Eventual),
            "strong" => Ok(Consistency::Strong),
            _ => Err("consistency must be eventual or strong".to_owned()),
        }
    }
}

/// A read request: which rows, which cells of them, how many rows at most, and how fresh.
#[derive(Debug, Clone, Default)]
pub struct ReadRows {
    pub rows: RowSet,
    pub filter: Option<crate::RowFilter>,
    /// At most this many rows (rows the filter empties do not count).
    pub limit: Option<u64>,
    /// Eventual by default; stores with one copy of each row ignore it.
    pub consistency: Consistency,
}

impl ReadRows {
    pub fn new(rows: RowSet) -> Self {
        Self {
            rows,
            filter: None,
            limit: None,
            consistency: Consistency::Eventual,
        }
    }

    pub fn consistency(mut self, consistency: Consistency) -> Self {
        self.consistency = consistency;
        self
    }

    /// Read from the rows' home cluster only ([`Consistency::Strong`]).
    pub fn strong(self) -> Self {
        self.consistency(Consistency::Strong)
    }

    pub fn filter(mut self, filter: crate::RowFilter) -> Self {
        self.filter = Some(filter);
        self
    }

    pub fn limit(mut self, limit: u64) -> Self {
        self.limit = Some(limit);
        self
    }
}

/// A garbage-collection rule of a column family. Cells a rule has expired are never returned by
/// a read. Age limits are reclaimed in the background; version limits are enforced when a column
/// is written (older versions beyond the limit are deleted in the same atomic write).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GcRule {
    /// Keep every cell.
    #[default]
    None,
    /// Expire cells older than this (by their timestamp).
    MaxAge(Duration),
    /// Keep only the newest N cells of each column.
    MaxVersions(u32),
    /// Expire a cell when any rule expires it.
    Union(Vec<GcRule>),
    /// Expire a cell when every rule expires it.
    Intersection(Vec<GcRule>),
}

impl GcRule {
    /// Whether a cell is expired, given its timestamp, its rank among the versions of its column
    /// (0 = newest) and the current time, all in microseconds.
    pub fn expires(&self, timestamp: i64, version: usize, now: i64) -> bool {
        match self {
            GcRule::None => false,
            GcRule::MaxAge(age) => {
                let age = i64::try_from(age.as_micros()).unwrap_or(i64::MAX);
                timestamp < now.saturating_sub(age)
            }
            GcRule::MaxVersions(n) => version >= *n as usize,
            GcRule::Union(rules) => rules.iter().any(|r| r.expires(timestamp, version, now)),
            GcRule::Intersection(rules) => {
                !rules.is_empty() && rules.iter().all(|r| r.expires(timestamp, version, now))
            }
        }
    }

    /// Whether the rule only needs the cell's age (no version rank).
    pub fn is_age_only(&self) -> bool {
        match self {
            GcRule::None | GcRule::MaxAge(_) => true,
            GcRule::MaxVersions(_) => false,
            GcRule::Union(rules) | GcRule::Intersection(rules) => {
                rules.iter().all(GcRule::is_age_only)
            }
        }
    }
}

/// A table's name and its column families with their GC rules.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableSchema {
    pub name: String,
    pub families: BTreeMap<String, GcRule>,
}

/// A change to a table's column families.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FamilyChange {
    Create { family: String, gc_rule: GcRule },
    Update { family: String, gc_rule: GcRule },
    Drop { family: String },
}

/// A rule of [`crate::Store::read_modify_write_row`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadModifyWriteRule {
    pub family: String,
    pub qualifier: Bytes,
    pub op: ReadModifyWriteOp,
}

impl ReadModifyWriteRule {
    /// Add `delta` to a 64-bit big-endian integer cell (absent counts as 0).
    pub fn increment(family: impl Into<String>, qualifier: impl Into<Bytes>, delta: i64) -> Self {
        Self {
            family: family.into(),
            qualifier: qualifier.into(),
            op: ReadModifyWriteOp::Increment(delta),
        }
    }

    /// Append bytes to a cell (absent counts as empty).
    pub fn append(
        family: impl Into<String>,
        qualifier: impl Into<Bytes>,
        suffix: impl Into<Bytes>,
    ) -> Self {
        Self {
            family: family.into(),
            qualifier: qualifier.into(),
            op: ReadModifyWriteOp::Append(suffix.into()),
        }
    }
}

/// What a read-modify-write rule does to the latest cell of its column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadModifyWriteOp {
    Increment(i64),
    Append(Bytes),
}

/// A split point of a table: rows before `row_key` hold about `offset_bytes` bytes. The last
/// sample has an empty key, standing for the end of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySample {
    pub row_key: Bytes,
    pub offset_bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_range_covers_exactly_the_prefix() {
        let r = RowRange::prefix(Bytes::from_static(b"ab\xff"));
        assert!(r.contains(b"ab\xff"));
        assert!(r.contains(b"ab\xff\x00"));
        assert!(!r.contains(b"ac"));
        assert!(!r.contains(b"ab"));
        assert!(!r.contains(b"ab\xfe\xff"));
        assert!(RowRange::prefix(Bytes::new()).contains(b"anything"));
        assert_eq!(prefix_successor(b"\xff\xff"), None);
        assert_eq!(prefix_successor(b"a\xff"), Some(b"b".to_vec()));
    }

    #[test]
    fn gc_rule_combinations() {
        let now = 10_000_000_000;
        let hour = Duration::from_secs(3600);
        let old = now - 2 * 3_600_000_000;
        let age = GcRule::MaxAge(hour);
        assert!(age.expires(old, 0, now));
        assert!(!age.expires(now - 1000, 5, now));
        let union = GcRule::Union(vec![age.clone(), GcRule::MaxVersions(1)]);
        assert!(union.expires(now, 1, now));
        assert!(union.expires(old, 0, now));
        let inter = GcRule::Intersection(vec![age, GcRule::MaxVersions(1)]);
        assert!(!inter.expires(now, 1, now));
        assert!(!inter.expires(old, 0, now));
        assert!(inter.expires(old, 1, now));
        assert!(!GcRule::Intersection(vec![]).expires(old, 9, now));
        assert!(!GcRule::None.expires(0, 1000, now));
    }
}
