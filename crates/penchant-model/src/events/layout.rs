//! The two layouts of an event's counts in table `events` — the seed's narrow and wide schemas —
//! and what reads and writes each.
//!
//! Both keep the event itself in `e:event` and use the same row key; they differ in how its
//! counts (facet → value → n, [`Facets`]) are stored:
//!
//! | layout | family | qualifier | value | a strategy reads |
//! |---|---|---|---|---|
//! | `wide` (default) | `e` | `CSV(event type, event name, facet)` | `{"value": n}` | its (type, name, facet) columns only: filtered in the store |
//! | `narrow` | the event type (`click`, `conversion`, `view`) | the event name | `{"facet": {"value": n}, ...}`, every facet | its (type, name) columns, whole: facets filtered by the reader |
//!
//! An event without counts (no catalog record, no filter) has no counts cell in either. Each
//! layout converts exactly into the other ([`Layout::read_counts`] then [`Layout::cells`]), which
//! the migration between them (the engine's `events::migration`) relies on.

use std::collections::BTreeMap;

use bytes::Bytes;
use penchant_store::{Mutation, Row, RowFilter};
use serde::{Deserialize, Serialize};

use super::{EVENT_COLUMN, EventType, Facets, qualifier};
use crate::strategy::Strategy;
use crate::tables::EVENTS_FAMILY as FAMILY;
pub use crate::tables::NARROW_FAMILIES;
use crate::{EngineError, Result, keys};

/// How an app's events store their counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", try_from = "String")]
pub enum Layout {
    /// One cell per (event type, event name, facet): a strategy's read is filtered in the store.
    #[default]
    Wide,
    /// One cell per event, holding every facet's counts: the reader filters them.
    Narrow,
}

/// The marker of an event row: its `e:event` cell without its value (it gives the row's time
/// when no counts cell of the strategy's is there).
pub fn marker() -> RowFilter {
    RowFilter::column(FAMILY, EVENT_COLUMN).and(RowFilter::StripValue)
}

/// Whether a qualifier of family `e` holds counts in the wide layout (it starts with an event
/// type; the row's other columns — the event, what it waits for — do not).
fn is_wide_counts(qualifier: &[u8]) -> bool {
    NARROW_FAMILIES.iter().any(|t| {
        qualifier
            .strip_prefix(t.as_bytes())
            .is_some_and(|rest| rest.starts_with(b","))
    })
}

fn json(value: &impl Serialize) -> Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| crate::internal("serialization", e))
}

fn corrupt(e: impl std::fmt::Display) -> EngineError {
    crate::internal("corrupt event cell", e)
}

impl Layout {
    pub fn as_str(self) -> &'static str {
        match self {
            Layout::Wide => "wide",
            Layout::Narrow => "narrow",
        }
    }

    /// The other layout.
    pub fn other(self) -> Layout {
        match self {
            Layout::Wide => Layout::Narrow,
            Layout::Narrow => Layout::Wide,
        }
    }

    /// The cells of one event's counts in this layout (its `e:event` cell aside), stamped `ts`
    /// (µs).
    pub fn cells(
        self,
        event_type: EventType,
        event_name: &str,
        counts: &Facets,
        ts: i64,
    ) -> Result<Vec<Mutation>> {
        match self {
            Layout::Wide => counts
                .iter()
                .map(|(facet, values)| {
                    let q = qualifier(event_type, event_name, facet);
                    Ok(Mutation::set(FAMILY, q, ts, json(values)?))
                })
                .collect(),
            Layout::Narrow if counts.is_empty() => Ok(Vec::new()),
            Layout::Narrow => Ok(vec![Mutation::set(
                event_type.as_str(),
                Bytes::copy_from_slice(event_name.as_bytes()),
                ts,
                json(counts)?,
            )]),
        }
    }

    /// Every counts cell of this layout (no marker).
    pub fn counts_filter(self) -> RowFilter {
        match self {
            // Every qualifier of family `e` but `event`: those start with an event type.
            Layout::Wide => RowFilter::Family(FAMILY.to_owned()).and(RowFilter::Interleave(
                NARROW_FAMILIES
                    .iter()
                    .map(|t| RowFilter::QualifierPrefix(Bytes::from(format!("{t},"))))
                    .collect(),
            )),
            Layout::Narrow => RowFilter::Interleave(
                NARROW_FAMILIES
                    .iter()
                    .map(|f| RowFilter::Family((*f).to_owned()))
                    .collect(),
            ),
        }
    }

    /// Every counts cell of this layout, and the marker.
    pub fn all_filter(self) -> RowFilter {
        RowFilter::Interleave(vec![self.counts_filter(), marker()])
    }

    /// What a strategy needs of raw events stored in this layout: its cells, and the marker.
    pub fn read_filter(self, strategy: &Strategy) -> RowFilter {
        let mut filters = Vec::new();
        match self {
            Layout::Wide => {
                let qualifiers: Vec<Bytes> = strategy
                    .events_scoring
                    .iter()
                    .flat_map(|e| {
                        strategy
                            .facets_scoring
                            .iter()
                            .map(|f| qualifier(e.event_type, &e.event_name, &f.facet_name))
                    })
                    .collect();
                if !qualifiers.is_empty() {
                    filters.push(RowFilter::qualifiers(qualifiers));
                }
            }
            Layout::Narrow if strategy.facets_scoring.is_empty() => {}
            Layout::Narrow => filters.extend(strategy.events_scoring.iter().map(|e| {
                RowFilter::column(e.event_type.as_str(), e.event_name.as_bytes().to_vec())
            })),
        }
        if filters.is_empty() {
            return marker();
        }
        filters.push(marker());
        RowFilter::Interleave(filters)
    }

    /// The counts of an event row (as read with [`Layout::all_filter`]) stored in this layout:
    /// the event's type and name, and its counts; `None` for a row without counts cells.
    pub fn read_counts(self, row: &Row) -> Result<Option<(EventType, String, Facets)>> {
        let mut out: Option<(EventType, String, Facets)> = None;
        for cell in &row.cells {
            match self {
                Layout::Wide => {
                    if &*cell.family != FAMILY || !is_wide_counts(&cell.qualifier) {
                        continue;
                    }
                    let [event_type, name, facet] = keys::parse_event_qualifier(&cell.qualifier)
                        .ok_or_else(|| corrupt("a wide qualifier that is not CSV"))?;
                    let event_type = EventType::parse(&event_type)
                        .ok_or_else(|| corrupt(format!("event type `{event_type}`")))?;
                    let values: BTreeMap<String, u64> =
                        serde_json::from_slice(&cell.value).map_err(corrupt)?;
                    let (_, _, counts) =
                        out.get_or_insert_with(|| (event_type, name, Facets::new()));
                    counts.insert(facet, values);
                }
                Layout::Narrow => {
                    let Some(event_type) = EventType::parse(&cell.family) else {
                        continue;
                    };
                    let name = std::str::from_utf8(&cell.qualifier).map_err(corrupt)?;
                    let counts: Facets = serde_json::from_slice(&cell.value).map_err(corrupt)?;
                    out = Some((event_type, name.to_owned(), counts));
                }
            }
        }
        Ok(out)
    }

    /// The mutations that delete this layout's counts cells from a row, given its cells of
    /// this layout (as read with [`Layout::counts_filter`]).
    pub fn delete_cells(self, row: &Row) -> Vec<Mutation> {
        match self {
            Layout::Wide => {
                let mut qualifiers: Vec<&Bytes> =
                    row.family(FAMILY).map(|c| &c.qualifier).collect();
                qualifiers.dedup();
                qualifiers
                    .into_iter()
                    .filter(|q| is_wide_counts(q))
                    .map(|q| Mutation::delete_column(FAMILY, q.clone()))
                    .collect()
            }
            Layout::Narrow => NARROW_FAMILIES
                .iter()
                .filter(|f| row.family(f).next().is_some())
                .map(|f| Mutation::DeleteFromFamily {
                    family: (*f).to_owned(),
                })
                .collect(),
        }
    }
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl TryFrom<String> for Layout {
    type Error = EngineError;
    fn try_from(s: String) -> Result<Self> {
        s.parse()
    }
}

impl std::str::FromStr for Layout {
    type Err = EngineError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "wide" => Ok(Layout::Wide),
            "narrow" => Ok(Layout::Narrow),
            _ => Err(EngineError::Invalid(format!(
                "eventLayout must be `wide` or `narrow`, not `{s}`"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use penchant_store::{Cell, FamilyName};

    /// The row a store holds after these mutations (one version per column).
    fn row_of(mutations: &[Mutation]) -> Row {
        let mut cells: Vec<Cell> = mutations
            .iter()
            .map(|m| match m {
                Mutation::SetCell {
                    family,
                    qualifier,
                    timestamp,
                    value,
                } => Cell {
                    family: FamilyName::from(family.as_str()),
                    qualifier: qualifier.clone(),
                    timestamp: match timestamp {
                        penchant_store::Timestamp::Micros(t) => *t,
                        _ => 0,
                    },
                    value: value.clone(),
                },
                other => panic!("not a set: {other:?}"),
            })
            .collect();
        cells.sort_by(|a, b| (&*a.family, &a.qualifier).cmp(&(&*b.family, &b.qualifier)));
        Row {
            key: Bytes::from_static(b"k"),
            cells,
        }
    }

    #[test]
    fn each_layout_reads_back_what_it_wrote_and_converts_into_the_other() {
        let counts: Facets = BTreeMap::from([
            (
                "brand".to_owned(),
                BTreeMap::from([("Apple".to_owned(), 2)]),
            ),
            (
                "category, main".to_owned(),
                BTreeMap::from([("a\"b".to_owned(), 1), ("c".to_owned(), 3)]),
            ),
        ]);
        for layout in [Layout::Wide, Layout::Narrow] {
            let cells = layout
                .cells(EventType::Conversion, "Bought, twice", &counts, 7_000)
                .unwrap();
            assert_eq!(cells.len(), if layout == Layout::Wide { 2 } else { 1 });
            let back = layout.read_counts(&row_of(&cells)).unwrap();
            let expected = (
                EventType::Conversion,
                "Bought, twice".to_owned(),
                counts.clone(),
            );
            assert_eq!(back, Some(expected.clone()), "{layout}");
            // Into the other layout: the same cells as written there directly.
            let (t, name, c) = back.unwrap();
            let other = layout.other();
            assert_eq!(
                other.cells(t, &name, &c, 7_000).unwrap(),
                other
                    .cells(EventType::Conversion, "Bought, twice", &counts, 7_000)
                    .unwrap()
            );
            // Deleting removes every counts cell.
            assert_eq!(layout.delete_cells(&row_of(&cells)).len(), cells.len());
        }
        for layout in [Layout::Wide, Layout::Narrow] {
            assert!(
                layout
                    .cells(EventType::View, "v", &Facets::new(), 1)
                    .unwrap()
                    .is_empty()
            );
        }
    }

    #[test]
    fn layouts_parse_by_name() {
        assert_eq!("narrow".parse::<Layout>().unwrap(), Layout::Narrow);
        let err = "tall".parse::<Layout>().unwrap_err().to_string();
        assert!(err.contains("`wide` or `narrow`"), "{err}");
        assert_eq!(Layout::default(), Layout::Wide);
    }
}
