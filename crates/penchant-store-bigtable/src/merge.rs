//! Reassembling rows from the cell chunks of a `ReadRows` response stream.
//!
//! Bigtable streams a row as chunks: the first names the row key, a chunk names a family and a
//! qualifier only when they change, a large value is split over several chunks (all but the last
//! carry the full `value_size`), `reset_row` discards the row so far and `commit_row` ends it.

use bytes::{Bytes, BytesMut};
use penchant_store::{Cell, FamilyName, Result, Row, StoreError};

use crate::proto::v2::read_rows_response::CellChunk;
use crate::proto::v2::read_rows_response::cell_chunk::RowStatus;

/// Turns chunks into rows, checking the protocol's invariants as it goes.
#[derive(Debug, Default)]
pub(crate) struct RowMerger {
    /// The key of the last committed row: keys must grow.
    last_key: Option<Bytes>,
    key: Option<Bytes>,
    cells: Vec<Cell>,
    family: Option<FamilyName>,
    qualifier: Option<Bytes>,
    /// A value split over several chunks, with its cell's timestamp.
    partial: Option<(i64, BytesMut)>,
}

fn bad(msg: &str) -> StoreError {
    StoreError::Backend(format!("malformed ReadRows response: {msg}"))
}

impl RowMerger {
    /// Feed one chunk; returns the row it completes, if any.
    pub fn push(&mut self, chunk: CellChunk) -> Result<Option<Row>> {
        if let Some(RowStatus::ResetRow(true)) = chunk.row_status {
            if !chunk.row_key.is_empty()
                || chunk.family_name.is_some()
                || chunk.qualifier.is_some()
                || !chunk.value.is_empty()
            {
                return Err(bad("a reset chunk carries data"));
            }
            self.reset();
            return Ok(None);
        }
        if !chunk.row_key.is_empty() {
            if self.partial.is_some() {
                return Err(bad("a new row key in the middle of a cell"));
            }
            match &self.key {
                Some(k) if *k != chunk.row_key => return Err(bad("a new row before a commit")),
                Some(_) => {}
                None => {
                    if self.last_key.as_ref().is_some_and(|l| *l >= chunk.row_key) {
                        return Err(bad("row keys out of order"));
                    }
                    self.key = Some(chunk.row_key.clone());
                }
            }
        } else if self.key.is_none() {
            return Err(bad("a chunk without a row key"));
        }
        if let Some(family) = chunk.family_name {
            if chunk.qualifier.is_none() {
                return Err(bad("a new family without a qualifier"));
            }
            self.family = Some(FamilyName::from(family));
        }
        if let Some(q) = chunk.qualifier {
            self.qualifier = Some(Bytes::from(q));
        }
        let value = match self.partial.take() {
            Some((ts, mut buf)) => {
                buf.extend_from_slice(&chunk.value);
                if chunk.value_size > 0 {
                    self.partial = Some((ts, buf));
                    None
                } else {
                    Some((ts, buf.freeze()))
                }
            }
            None if chunk.value_size > 0 => {
                let mut buf =
                    BytesMut::with_capacity(usize::try_from(chunk.value_size).unwrap_or(0));
                buf.extend_from_slice(&chunk.value);
                self.partial = Some((chunk.timestamp_micros, buf));
                None
            }
            None => Some((chunk.timestamp_micros, chunk.value)),
        };
        if let Some((timestamp, value)) = value {
            let (Some(family), Some(qualifier)) = (&self.family, &self.qualifier) else {
                return Err(bad("a cell without a family or qualifier"));
            };
            self.cells.push(Cell {
                family: family.clone(),
                qualifier: qualifier.clone(),
                timestamp,
                value,
            });
        }
        match chunk.row_status {
            Some(RowStatus::CommitRow(true)) => {
                if self.partial.is_some() {
                    return Err(bad("a commit in the middle of a cell"));
                }
                let key = self.key.take().unwrap_or_default();
                let cells = std::mem::take(&mut self.cells);
                self.reset();
                self.last_key = Some(key.clone());
                Ok(Some(Row { key, cells }))
            }
            _ => Ok(None),
        }
    }

    /// The stream ended: a row must not be left half-read.
    pub fn finish(&self) -> Result<()> {
        if self.key.is_some() {
            return Err(bad("the stream ended inside a row"));
        }
        Ok(())
    }

    /// Forget a partial row (also when a stream breaks and is resumed).
    pub fn reset(&mut self) {
        self.key = None;
        self.cells.clear();
        self.family = None;
        self.qualifier = None;
        self.partial = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(
        key: &str,
        family: Option<&str>,
        qualifier: Option<&str>,
        ts: i64,
        value: &str,
        value_size: i32,
        status: Option<RowStatus>,
    ) -> CellChunk {
        CellChunk {
            row_key: Bytes::copy_from_slice(key.as_bytes()),
            family_name: family.map(str::to_owned),
            qualifier: qualifier.map(|q| q.as_bytes().to_vec()),
            timestamp_micros: ts,
            labels: Vec::new(),
            value: Bytes::copy_from_slice(value.as_bytes()),
            value_size,
            row_status: status,
        }
    }

    fn render(row: &Row) -> Vec<String> {
        row.cells
            .iter()
            .map(|c| {
                format!(
                    "{}:{}@{}={}",
                    c.family,
                    String::from_utf8_lossy(&c.qualifier),
                    c.timestamp,
                    String::from_utf8_lossy(&c.value)
                )
            })
            .collect()
    }

    #[test]
    fn split_values_families_and_commits() {
        let mut m = RowMerger::default();
        let commit = Some(RowStatus::CommitRow(true));
        assert!(
            m.push(chunk("r1", Some("a"), Some("x"), 2000, "he", 5, None))
                .unwrap()
                .is_none()
        );
        assert!(
            m.push(chunk("", None, None, 0, "ll", 5, None))
                .unwrap()
                .is_none()
        );
        assert!(
            m.push(chunk("", None, None, 0, "o", 0, None))
                .unwrap()
                .is_none()
        );
        assert!(
            m.push(chunk("", None, None, 1000, "old", 0, None))
                .unwrap()
                .is_none()
        );
        assert!(
            m.push(chunk("", None, Some("y"), 1000, "v", 0, None))
                .unwrap()
                .is_none()
        );
        let row = m
            .push(chunk("", Some("b"), Some("z"), 0, "", 0, commit))
            .unwrap()
            .unwrap();
        assert_eq!(row.key, Bytes::from_static(b"r1"));
        assert_eq!(
            render(&row),
            ["a:x@2000=hello", "a:x@1000=old", "a:y@1000=v", "b:z@0="]
        );
        m.finish().unwrap();
        // A reset drops the partial row; the next row must still come after the last commit.
        m.push(chunk("r2", Some("a"), Some("x"), 0, "gone", 0, None))
            .unwrap();
        m.push(chunk(
            "",
            None,
            None,
            0,
            "",
            0,
            Some(RowStatus::ResetRow(true)),
        ))
        .unwrap();
        let row = m
            .push(chunk("r2", Some("a"), Some("q"), 0, "kept", 0, commit))
            .unwrap()
            .unwrap();
        assert_eq!(render(&row), ["a:q@0=kept"]);
        assert!(
            m.push(chunk("r1", Some("a"), Some("x"), 0, "", 0, commit))
                .is_err()
        );
    }

    #[test]
    fn protocol_violations_are_errors() {
        let mut m = RowMerger::default();
        assert!(
            m.push(chunk("", Some("a"), Some("x"), 0, "v", 0, None))
                .is_err()
        );
        let mut m = RowMerger::default();
        assert!(
            m.push(chunk("r", Some("a"), None, 0, "v", 0, None))
                .is_err()
        );
        let mut m = RowMerger::default();
        m.push(chunk("r", Some("a"), Some("x"), 0, "v", 0, None))
            .unwrap();
        assert!(m.finish().is_err());
        assert!(
            m.push(chunk("s", Some("a"), Some("x"), 0, "v", 0, None))
                .is_err()
        );
    }
}
