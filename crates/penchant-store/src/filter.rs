//! Row filters, with Cloud Bigtable's semantics, and their evaluation over a row's cells.
//!
//! A filter takes a row's cells (in the store's order) and yields some of them, possibly
//! transformed. Backends that cannot push a filter down evaluate it with [`CompiledFilter`].
//! Regular expressions use RE2 syntax on raw bytes and must match the whole input, as in
//! Bigtable.

use std::collections::BTreeSet;
use std::ops::Bound;

use bytes::Bytes;
use regex::bytes::Regex;

use crate::{Cell, Result, StoreError, TimeRange};

/// A filter over the cells of a row.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RowFilter {
    /// Every cell.
    PassAll,
    /// No cell.
    BlockAll,
    /// Apply each filter to the output of the previous one (AND). An empty chain passes all.
    Chain(Vec<RowFilter>),
    /// Apply each filter to the row and merge their outputs in cell order (OR). A cell that
    /// several filters yield appears once per filter. An empty interleave yields nothing.
    Interleave(Vec<RowFilter>),
    /// If `predicate` yields any cell, apply `on_match` to the row, else `on_no_match`.
    Condition {
        predicate: Box<RowFilter>,
        on_match: Box<RowFilter>,
        on_no_match: Box<RowFilter>,
    },
    /// The whole row if its key matches the regex, else nothing.
    RowKeyRegex(String),
    /// Cells of exactly this family.
    Family(String),
    /// Cells whose family name matches the regex.
    FamilyRegex(String),
    /// Cells whose qualifier is one of these (in any family).
    Qualifiers(BTreeSet<Bytes>),
    /// Cells whose qualifier starts with this prefix (in any family).
    QualifierPrefix(Bytes),
    /// Cells whose qualifier matches the regex.
    QualifierRegex(String),
    /// Cells of `family` whose qualifier lies in the range.
    ColumnRange {
        family: String,
        start: Bound<Bytes>,
        end: Bound<Bytes>,
    },
    /// Cells whose timestamp lies in the range.
    TimestampRange(TimeRange),
    /// Cells whose value matches the regex.
    ValueRegex(String),
    /// Skip the first N cells of the row.
    CellsPerRowOffset(u32),
    /// Keep the first N cells of the row.
    CellsPerRowLimit(u32),
    /// Keep the newest N cells of each column.
    CellsPerColumnLimit(u32),
    /// Replace every value by the empty string.
    StripValue,
}

impl RowFilter {
    /// Cells of one exact column, `family:qualifier`.
    pub fn column(family: impl Into<String>, qualifier: impl Into<Bytes>) -> Self {
        let q = qualifier.into();
        RowFilter::ColumnRange {
            family: family.into(),
            start: Bound::Included(q.clone()),
            end: Bound::Included(q),
        }
    }

    /// Cells whose qualifier is one of `qualifiers`.
    pub fn qualifiers<Q: Into<Bytes>>(qualifiers: impl IntoIterator<Item = Q>) -> Self {
        RowFilter::Qualifiers(qualifiers.into_iter().map(Into::into).collect())
    }

    /// `Chain([self, next])`, flattening chains.
    pub fn and(self, next: RowFilter) -> Self {
        match self {
            RowFilter::Chain(mut filters) => {
                filters.push(next);
                RowFilter::Chain(filters)
            }
            first => RowFilter::Chain(vec![first, next]),
        }
    }

    /// Compile the filter's regular expressions.
    pub fn compile(&self) -> Result<CompiledFilter> {
        CompiledFilter::new(self)
    }
}

/// A filter with its regexes compiled, ready to run over many rows.
#[derive(Debug, Clone)]
pub enum CompiledFilter {
    PassAll,
    BlockAll,
    Chain(Vec<CompiledFilter>),
    Interleave(Vec<CompiledFilter>),
    Condition(Box<[CompiledFilter; 3]>),
    RowKey(Regex),
    Family(String),
    FamilyRegex(Regex),
    Qualifiers(BTreeSet<Bytes>),
    QualifierPrefix(Bytes),
    QualifierRegex(Regex),
    ColumnRange {
        family: String,
        start: Bound<Bytes>,
        end: Bound<Bytes>,
    },
    TimestampRange(TimeRange),
    ValueRegex(Regex),
    CellsPerRowOffset(usize),
    CellsPerRowLimit(usize),
    CellsPerColumnLimit(usize),
    StripValue,
}

fn full_match_regex(what: &str, pattern: &str) -> Result<Regex> {
    let invalid = |e: regex::Error| {
        StoreError::InvalidArgument(format!("invalid {what} regex `{pattern}`: {e}"))
    };
    // The pattern must stand on its own, so that it cannot close the anchoring group below
    // (`x)|(.*` would otherwise match everything).
    Regex::new(&format!("(?-u){pattern}")).map_err(invalid)?;
    // RE2 on raw bytes, anchored on both ends, as Bigtable evaluates its regex filters.
    Regex::new(&format!("(?-u)^(?:{pattern})$")).map_err(invalid)
}

impl CompiledFilter {
    fn new(filter: &RowFilter) -> Result<Self> {
        let all = |fs: &[RowFilter]| fs.iter().map(Self::new).collect::<Result<Vec<_>>>();
        Ok(match filter {
            RowFilter::PassAll => Self::PassAll,
            RowFilter::BlockAll => Self::BlockAll,
            RowFilter::Chain(fs) => Self::Chain(all(fs)?),
            RowFilter::Interleave(fs) => Self::Interleave(all(fs)?),
            RowFilter::Condition {
                predicate,
                on_match,
                on_no_match,
            } => Self::Condition(Box::new([
                Self::new(predicate)?,
                Self::new(on_match)?,
                Self::new(on_no_match)?,
            ])),
            RowFilter::RowKeyRegex(p) => Self::RowKey(full_match_regex("row key", p)?),
            RowFilter::Family(f) => Self::Family(f.clone()),
            RowFilter::FamilyRegex(p) => Self::FamilyRegex(full_match_regex("family", p)?),
            RowFilter::Qualifiers(q) => Self::Qualifiers(q.clone()),
            RowFilter::QualifierPrefix(p) => Self::QualifierPrefix(p.clone()),
            RowFilter::QualifierRegex(p) => Self::QualifierRegex(full_match_regex("qualifier", p)?),
            RowFilter::ColumnRange { family, start, end } => Self::ColumnRange {
                family: family.clone(),
                start: start.clone(),
                end: end.clone(),
            },
            RowFilter::TimestampRange(r) => {
                if let (Some(s), Some(e)) = (r.start, r.end)
                    && s > e
                {
                    return Err(StoreError::InvalidArgument(format!(
                        "timestamp range start {s} is after its end {e}"
                    )));
                }
                Self::TimestampRange(*r)
            }
            RowFilter::ValueRegex(p) => Self::ValueRegex(full_match_regex("value", p)?),
            RowFilter::CellsPerRowOffset(n) => Self::CellsPerRowOffset(*n as usize),
            RowFilter::CellsPerRowLimit(n) => Self::CellsPerRowLimit(*n as usize),
            RowFilter::CellsPerColumnLimit(n) => Self::CellsPerColumnLimit(*n as usize),
            RowFilter::StripValue => Self::StripValue,
        })
    }

    /// Whether a cell of column `family:qualifier` can be in the filter's output, for a filter
    /// that judges every cell on its own (`None` for one that looks at the whole row: cell
    /// limits, conditions, row-key regexes). A store may skip the cells of a column this rejects
    /// before it builds the row: the output stays the same.
    pub fn keeps_column(&self, family: &str, qualifier: &[u8]) -> Option<bool> {
        Some(match self {
            Self::Chain(filters) => {
                let mut keep = true;
                for f in filters {
                    keep &= f.keeps_column(family, qualifier)?;
                }
                keep
            }
            Self::Interleave(filters) => {
                let mut keep = false;
                for f in filters {
                    keep |= f.keeps_column(family, qualifier)?;
                }
                keep
            }
            Self::PassAll | Self::StripValue | Self::TimestampRange(_) | Self::ValueRegex(_) => {
                true
            }
            Self::BlockAll => false,
            Self::Family(f) => f == family,
            Self::FamilyRegex(re) => re.is_match(family.as_bytes()),
            Self::Qualifiers(set) => set.contains(qualifier),
            Self::QualifierPrefix(p) => qualifier.starts_with(p),
            Self::QualifierRegex(re) => re.is_match(qualifier),
            Self::ColumnRange {
                family: f,
                start,
                end,
            } => f == family && in_bounds(qualifier, start, end),
            Self::Condition(_)
            | Self::RowKey(_)
            | Self::CellsPerRowOffset(_)
            | Self::CellsPerRowLimit(_)
            | Self::CellsPerColumnLimit(_) => return None,
        })
    }

    /// Whether the filter yields any cell of the row.
    pub fn matches(&self, row_key: &[u8], cells: &[Cell]) -> bool {
        !self.apply(row_key, cells.to_vec()).is_empty()
    }

    /// Run the filter over a row's cells, given in the store's order.
    pub fn apply(&self, row_key: &[u8], mut cells: Vec<Cell>) -> Vec<Cell> {
        let keep = |cells: &mut Vec<Cell>, pred: &dyn Fn(&Cell) -> bool| cells.retain(pred);
        match self {
            Self::PassAll => {}
            Self::BlockAll => cells.clear(),
            Self::Chain(filters) => {
                for f in filters {
                    if cells.is_empty() {
                        break;
                    }
                    cells = f.apply(row_key, cells);
                }
            }
            Self::Interleave(filters) => {
                let mut out: Vec<Cell> = filters
                    .iter()
                    .flat_map(|f| f.apply(row_key, cells.clone()))
                    .collect();
                // Stable sort: cells yielded by several filters keep the filters' order.
                out.sort_by(|a, b| {
                    (&a.family, &a.qualifier, std::cmp::Reverse(a.timestamp)).cmp(&(
                        &b.family,
                        &b.qualifier,
                        std::cmp::Reverse(b.timestamp),
                    ))
                });
                cells = out;
            }
            Self::Condition(branches) => {
                let [predicate, on_match, on_no_match] = &**branches;
                let branch = if predicate.matches(row_key, &cells) {
                    on_match
                } else {
                    on_no_match
                };
                cells = branch.apply(row_key, cells);
            }
            Self::RowKey(re) => {
                if !re.is_match(row_key) {
                    cells.clear();
                }
            }
            Self::Family(f) => keep(&mut cells, &|c| &c.family == f),
            Self::FamilyRegex(re) => keep(&mut cells, &|c| re.is_match(c.family.as_bytes())),
            Self::Qualifiers(set) => keep(&mut cells, &|c| set.contains(&c.qualifier)),
            Self::QualifierPrefix(p) => keep(&mut cells, &|c| c.qualifier.starts_with(p)),
            Self::QualifierRegex(re) => keep(&mut cells, &|c| re.is_match(&c.qualifier)),
            Self::ColumnRange { family, start, end } => keep(&mut cells, &|c| {
                &c.family == family && in_bounds(&c.qualifier, start, end)
            }),
            Self::TimestampRange(r) => keep(&mut cells, &|c| r.contains(c.timestamp)),
            Self::ValueRegex(re) => keep(&mut cells, &|c| re.is_match(&c.value)),
            Self::CellsPerRowOffset(n) => {
                cells.drain(..(*n).min(cells.len()));
            }
            Self::CellsPerRowLimit(n) => cells.truncate(*n),
            Self::CellsPerColumnLimit(n) => retain_ranked(&mut cells, |_, rank| rank < *n),
            Self::StripValue => {
                for c in &mut cells {
                    c.value = Bytes::new();
                }
            }
        }
        cells
    }
}

/// Keep the cells for which `keep(cell, rank)` holds, where `rank` is the cell's place among the
/// versions of its column (0 = newest). Cells must be in the store's order.
pub(crate) fn retain_ranked(cells: &mut Vec<Cell>, mut keep: impl FnMut(&Cell, usize) -> bool) {
    let mut ranks = Vec::with_capacity(cells.len());
    for (i, c) in cells.iter().enumerate() {
        let same_column = i > 0 && {
            let prev = &cells[i - 1];
            prev.family == c.family && prev.qualifier == c.qualifier
        };
        ranks.push(if same_column { ranks[i - 1] + 1 } else { 0 });
    }
    let mut ranks = ranks.into_iter();
    cells.retain(|c| keep(c, ranks.next().unwrap_or(0)));
}

/// Whether `value` lies between the bounds.
pub fn in_bounds(value: &[u8], start: &Bound<Bytes>, end: &Bound<Bytes>) -> bool {
    let after = match start {
        Bound::Included(s) => value >= &s[..],
        Bound::Excluded(s) => value > &s[..],
        Bound::Unbounded => true,
    };
    let before = match end {
        Bound::Included(e) => value <= &e[..],
        Bound::Excluded(e) => value < &e[..],
        Bound::Unbounded => true,
    };
    after && before
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(f: &str, q: &str, ts: i64, v: &str) -> Cell {
        Cell {
            family: f.into(),
            qualifier: Bytes::copy_from_slice(q.as_bytes()),
            timestamp: ts,
            value: Bytes::copy_from_slice(v.as_bytes()),
        }
    }

    fn row() -> Vec<Cell> {
        vec![
            cell("a", "x", 3000, "1"),
            cell("a", "x", 2000, "2"),
            cell("a", "y", 1000, "3"),
            cell("b", "x", 5000, "4"),
        ]
    }

    fn run(f: RowFilter) -> Vec<Cell> {
        f.compile().unwrap().apply(b"row", row())
    }

    #[test]
    fn regexes_match_whole_input() {
        assert_eq!(run(RowFilter::FamilyRegex("a".into())).len(), 3);
        assert_eq!(run(RowFilter::FamilyRegex("".into())).len(), 0);
        assert_eq!(run(RowFilter::RowKeyRegex("ro".into())).len(), 0);
        assert_eq!(run(RowFilter::RowKeyRegex("ro.".into())).len(), 4);
        assert!(matches!(
            RowFilter::ValueRegex("(".into()).compile(),
            Err(StoreError::InvalidArgument(_))
        ));
        // A pattern cannot escape the anchors.
        assert!(matches!(
            RowFilter::RowKeyRegex("x)|(.*".into()).compile(),
            Err(StoreError::InvalidArgument(_))
        ));
    }

    #[test]
    fn per_column_limit_keeps_newest() {
        let out = run(RowFilter::CellsPerColumnLimit(1));
        let ts: Vec<i64> = out.iter().map(|c| c.timestamp).collect();
        assert_eq!(ts, vec![3000, 1000, 5000]);
    }

    #[test]
    fn interleave_duplicates_and_orders() {
        let out = run(RowFilter::Interleave(vec![
            RowFilter::Family("b".into()),
            RowFilter::qualifiers(["x"]),
        ]));
        let vals: Vec<&[u8]> = out.iter().map(|c| &c.value[..]).collect();
        assert_eq!(vals, vec![&b"1"[..], b"2", b"4", b"4"]);
    }

    #[test]
    fn skipping_rejected_columns_keeps_the_output() {
        let cell_local = [
            RowFilter::Interleave(vec![
                RowFilter::qualifiers(["y"]),
                RowFilter::column("b", "x").and(RowFilter::StripValue),
            ]),
            RowFilter::Family("a".into()).and(RowFilter::QualifierRegex("x".into())),
            RowFilter::TimestampRange(TimeRange::new(0, 2500)).and(RowFilter::Family("a".into())),
            RowFilter::BlockAll,
        ];
        for f in cell_local {
            let c = f.compile().unwrap();
            let mut kept = row();
            kept.retain(|cell| c.keeps_column(&cell.family, &cell.qualifier) == Some(true));
            assert!(kept.len() < row().len(), "{f:?} skips nothing here");
            assert_eq!(c.apply(b"row", kept), run(f.clone()), "{f:?}");
        }
        // Filters that look at whole rows are not judged column by column.
        for f in [
            RowFilter::CellsPerRowLimit(1),
            RowFilter::Family("a".into()).and(RowFilter::CellsPerColumnLimit(1)),
        ] {
            assert_eq!(f.compile().unwrap().keeps_column("a", b"x"), None, "{f:?}");
        }
    }

    #[test]
    fn condition_picks_branch() {
        let f = RowFilter::Condition {
            predicate: Box::new(RowFilter::ValueRegex("4".into())),
            on_match: Box::new(RowFilter::CellsPerRowLimit(1)),
            on_no_match: Box::new(RowFilter::BlockAll),
        };
        assert_eq!(run(f).len(), 1);
    }
}
