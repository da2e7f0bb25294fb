//! Reads: scans of encoded key ranges, assembled into rows by [`RowReader`]; the options of
//! iterators over the data; row sets encoded as key ranges; and the store's read calls.

use std::ops::Bound;

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use penchant_store::validate::{self, now_micros};
use penchant_store::{
    Cell, CompiledFilter, FamilyName, KeySample, ReadRows, Result, Row, RowFilter, RowRange,
    RowStream, prefix_successor,
};
use rocksdb::{ErrorKind, ReadOptions, ReadTier};
use tokio::sync::mpsc;

use crate::schema::Table;
use crate::{DATA_CF, Inner, RocksStore, backend, keys};

/// A streaming read hands rows to its consumer in chunks of this many rows or bytes...
const CHUNK_ROWS: usize = 128;
const CHUNK_BYTES: usize = 1 << 20;
/// ...and buffers this many chunks ahead of it.
const STREAM_BUFFER_CHUNKS: usize = 4;
/// The most keys a read may name to be read whole on a blocking thread when its rows are not
/// in memory (a read of more is streamed).
const POINT_READ_KEYS: usize = 8;

impl Inner {
    /// Add the cells stored in `[start, end)` (within one row) to the reader's current row.
    fn read_into(&self, reader: &mut RowReader<'_>, start: &[u8], end: Vec<u8>) -> Result<()> {
        let mut it = self
            .db
            .raw_iterator_cf_opt(self.data_cf()?, read_options(end, true));
        it.seek(start);
        while let (Some(k), Some(v)) = (it.key(), it.value()) {
            reader.push(k, v);
            it.next();
        }
        it.status().map_err(backend)
    }

    /// The visible cells of one row, in the store's order.
    pub(crate) fn row_cells(&self, table: &Table, row: &[u8], now: i64) -> Result<Vec<Cell>> {
        let mut reader = RowReader::new(table, now);
        let start = keys::row_start(table.meta.id, row);
        self.read_into(&mut reader, &start, keys::row_end(table.meta.id, row))?;
        Ok(reader.take_row())
    }

    /// The visible cells of some columns of one row (each column once), in the store's order.
    pub(crate) fn column_cells<'c>(
        &self,
        table: &Table,
        row: &[u8],
        columns: impl IntoIterator<Item = (&'c str, &'c [u8])>,
        now: i64,
    ) -> Result<Vec<Cell>> {
        let mut reader = RowReader::new(table, now);
        let rs = keys::row_start(table.meta.id, row);
        for (family, qualifier) in columns {
            if let Some(id) = table.meta.family_id(family) {
                let col = keys::column_prefix(&rs, id, qualifier);
                let end = prefix_successor(&col).unwrap_or_default();
                self.read_into(&mut reader, &col, end)?;
            }
        }
        Ok(reader.take_row())
    }

    /// Scan encoded key ranges in order, calling `emit` with each non-empty filtered row until
    /// it returns false. With [`Tier::Memory`] the scan stops with [`Scanned::NotInMemory`] (its
    /// rows so far emitted, the rest not) where a block would have to be read from a file.
    fn scan(
        &self,
        table: &Table,
        ranges: &[(Vec<u8>, Vec<u8>)],
        filter: Option<&CompiledFilter>,
        tier: Tier,
        mut emit: impl FnMut(Row) -> bool,
    ) -> Result<Scanned> {
        let now = now_micros();
        let cf = self.data_cf()?;
        let mut reader = RowReader::new(table, now);
        reader.skip_columns(filter);
        let options = |upper: Option<Vec<u8>>| {
            let mut opts = match upper {
                Some(upper) => read_options(upper, false),
                None => row_options(),
            };
            if tier == Tier::Memory {
                opts.set_read_tier(ReadTier::BlockCache);
            }
            opts
        };
        // Two iterators serve every range, seeking from one to the next (making and dropping
        // an iterator per range cost more than the seeks of a batch's rows): one within rows
        // for one-row ranges, one in total order, bounded by the end of the last range (ranges
        // are sorted), for the others; each range stops at its end.
        let last_end = ranges
            .iter()
            .rev()
            .find(|(start, end)| !keys::is_one_row(start, end))
            .map(|(_, end)| end.clone());
        let mut row_iterator = None;
        let mut range_iterator = None;
        for (start, end) in ranges {
            let it = if keys::is_one_row(start, end) {
                row_iterator.get_or_insert_with(|| self.db.raw_iterator_cf_opt(cf, options(None)))
            } else {
                range_iterator.get_or_insert_with(|| {
                    self.db.raw_iterator_cf_opt(cf, options(last_end.clone()))
                })
            };
            it.seek(start);
            // The row being read: its `row_start` prefix.
            let mut current: Option<Vec<u8>> = None;
            loop {
                let entry = it
                    .key()
                    .zip(it.value())
                    .filter(|(k, _)| *k < end.as_slice());
                if entry.is_none() {
                    // The end of the range, or an error: never emit a row cut short by one.
                    match it.status() {
                        Err(e) if e.kind() == ErrorKind::Incomplete => {
                            return Ok(Scanned::NotInMemory);
                        }
                        status => status.map_err(backend)?,
                    }
                }
                let boundary = match (&current, entry) {
                    (Some(rs), Some((k, _))) => !k.starts_with(rs),
                    (Some(_), None) => true,
                    (None, _) => false,
                };
                if boundary && let Some(rs) = current.take() {
                    let cells = reader.take_row();
                    let key = keys::decode_row(&rs).unwrap_or_default();
                    let cells = match filter {
                        Some(f) => f.apply(&key, cells),
                        None => cells,
                    };
                    if !cells.is_empty()
                        && !emit(Row {
                            key: Bytes::from(key),
                            cells,
                        })
                    {
                        return Ok(Scanned::Done);
                    }
                }
                let Some((k, v)) = entry else { break };
                if current.is_none() {
                    current = Some(keys::row_prefix_of(k).to_vec());
                }
                reader.push(k, v);
                it.next();
            }
        }
        Ok(Scanned::Done)
    }
}

/// Where a scan may read blocks from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tier {
    /// Anywhere: memtables, the block cache, files.
    Any,
    /// Memtables and the block cache only: never waits on a file.
    Memory,
}

/// How a scan ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
enum Scanned {
    /// Every range read, or `emit` asked to stop.
    Done,
    /// ([`Tier::Memory`] only) a block was not in memory.
    NotInMemory,
}

/// Options of an iterator over the data column family, bounded above by `upper`.
///
/// The data family has a prefix extractor (the row, see [`keys::row_prefix_len`]) with bloom
/// filters: an iterator within one row uses them and skips files that cannot hold the row; one
/// that spans rows must ask for total order, or RocksDB would stop at the first row.
pub(crate) fn read_options(upper: Vec<u8>, one_row: bool) -> ReadOptions {
    let mut opts = if one_row {
        row_options()
    } else {
        let mut opts = ReadOptions::default();
        opts.set_total_order_seek(true);
        opts
    };
    opts.set_iterate_upper_bound(upper);
    opts
}

/// Options of an iterator that stays within the row it seeks to: the prefix extractor bounds
/// it, so it needs no upper bound and one iterator can seek from row to row.
pub(crate) fn row_options() -> ReadOptions {
    let mut opts = ReadOptions::default();
    opts.set_prefix_same_as_start(true);
    opts
}

/// Builds rows from their keys: decodes cells, orders them, applies the GC rules.
///
/// The qualifiers and values of a row are copied into one buffer, and its cells hold slices of
/// it: one allocation per row rather than two per cell.
struct RowReader<'a> {
    table: &'a Table,
    now: i64,
    /// A filter judging cells one by one: the columns it rejects are skipped as they are read.
    column_filter: Option<&'a CompiledFilter>,
    buf: BytesMut,
    pending: Vec<PendingCell<'a>>,
}

/// A decoded cell whose bytes are still in the row buffer.
struct PendingCell<'a> {
    family: &'a FamilyName,
    qualifier: std::ops::Range<usize>,
    timestamp: i64,
    value: std::ops::Range<usize>,
}

impl<'a> RowReader<'a> {
    fn new(table: &'a Table, now: i64) -> Self {
        Self {
            table,
            now,
            column_filter: None,
            buf: BytesMut::new(),
            pending: Vec::new(),
        }
    }

    /// Skip, as they are read, the cells `filter` would drop anyway when it judges each cell on
    /// its own (see [`CompiledFilter::keeps_column`]).
    fn skip_columns(&mut self, filter: Option<&'a CompiledFilter>) {
        // Any probe answers `None` for a filter that looks at whole rows.
        self.column_filter = filter.filter(|f| f.keeps_column("", b"").is_some());
    }

    /// Add one stored cell to the current row; keys of dropped families are skipped.
    fn push(&mut self, key: &[u8], value: &[u8]) {
        let Some(parsed) = keys::parse(key) else {
            return;
        };
        let Some((family, _)) = self.table.by_id.get(&parsed.family) else {
            return;
        };
        let q_start = self.buf.len();
        if !keys::decode_qualifier_into(parsed.row_start.len(), parsed.column, &mut self.buf)
            || self
                .column_filter
                .is_some_and(|f| f.keeps_column(family, &self.buf[q_start..]) == Some(false))
        {
            self.buf.truncate(q_start);
            return;
        }
        let v_start = self.buf.len();
        self.buf.extend_from_slice(value);
        self.pending.push(PendingCell {
            family,
            qualifier: q_start..v_start,
            timestamp: parsed.timestamp,
            value: v_start..self.buf.len(),
        });
    }

    /// The current row's cells, ordered by family name (keys order them by family id), without
    /// the expired ones; the reader is ready for the next row.
    fn take_row(&mut self) -> Vec<Cell> {
        let row_bytes = self.buf.len();
        let buf = self.buf.split().freeze();
        // Rows of a table tend to look alike: one allocation for the next, not a few doublings.
        self.buf.reserve(row_bytes.max(64));
        let mut cells: Vec<Cell> = self
            .pending
            .drain(..)
            .map(|p| Cell {
                family: p.family.clone(),
                qualifier: buf.slice(p.qualifier),
                timestamp: p.timestamp,
                value: buf.slice(p.value),
            })
            .collect();
        if cells.windows(2).any(|w| w[0].family > w[1].family) {
            cells.sort_by(|a, b| a.family.cmp(&b.family));
        }
        if self.table.has_gc {
            cells = validate::visible_cells(&self.table.schema, self.now, cells);
        }
        cells
    }
}

/// The encoded key ranges a row set covers, sorted and disjoint.
fn encoded_ranges(table: u32, request: &penchant_store::RowSet) -> Vec<(Vec<u8>, Vec<u8>)> {
    if request.is_all() {
        return vec![(keys::table_start(table), keys::table_end(table))];
    }
    let mut ranges: Vec<(Vec<u8>, Vec<u8>)> = request
        .keys
        .iter()
        .map(|k| (keys::row_start(table, k), keys::row_end(table, k)))
        .chain(request.ranges.iter().map(|r| encode_range(table, r)))
        .filter(|(s, e)| s < e)
        .collect();
    ranges.sort();
    let mut merged: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(ranges.len());
    for (s, e) in ranges {
        match merged.last_mut() {
            Some((_, last_end)) if s <= *last_end => {
                if e > *last_end {
                    *last_end = e;
                }
            }
            _ => merged.push((s, e)),
        }
    }
    merged
}

fn encode_range(table: u32, r: &RowRange) -> (Vec<u8>, Vec<u8>) {
    let start = match &r.start {
        Bound::Included(k) => keys::row_prefix(table, k),
        Bound::Excluded(k) => keys::row_end(table, k),
        Bound::Unbounded => keys::table_start(table),
    };
    let end = match &r.end {
        Bound::Included(k) => keys::row_end(table, k),
        Bound::Excluded(k) => keys::row_prefix(table, k),
        Bound::Unbounded => keys::table_end(table),
    };
    (start, end)
}

/// What a row weighs in a chunk: its key and its cells' values, with 32 bytes a cell.
fn row_bytes(row: &Row) -> usize {
    row.key.len() + row.cells.iter().map(|c| c.value.len() + 32).sum::<usize>()
}

pub(crate) async fn read_rows(
    store: &RocksStore,
    table: &str,
    request: ReadRows,
) -> Result<RowStream> {
    let t = store.inner.table(table)?;
    let filter = request
        .filter
        .as_ref()
        .map(RowFilter::compile)
        .transpose()?;
    let ranges = encoded_ranges(t.meta.id, &request.rows);
    let limit = request.limit.unwrap_or(u64::MAX);
    if limit == 0 {
        return Ok(Box::pin(futures::stream::empty()));
    }
    // A read that fits one chunk (a few rows, a user's events, a queue) is first tried at once
    // from memory (memtables, block cache) on this thread, which then never waits on a file:
    // the hand-off to a blocking thread costs two thread wake-ups, more than a cached read.
    // One that needs a block not in memory, or is larger, is read again (the wasted part is at
    // most one chunk, from memory), never on the async runtime's workers: a point read of a
    // few rows whole on a blocking thread, any other by the streaming task below.
    let mut out = Vec::new();
    let (mut bytes, mut larger) = (0usize, false);
    let scanned = store
        .inner
        .scan(&t, &ranges, filter.as_ref(), Tier::Memory, |row| {
            bytes += row_bytes(&row);
            out.push(Ok(row));
            let more = (out.len() as u64) < limit;
            larger = more && (out.len() >= CHUNK_ROWS || bytes >= CHUNK_BYTES);
            more && !larger
        })?;
    if scanned == Scanned::Done && !larger {
        return Ok(Box::pin(futures::stream::iter(out)));
    }
    let rows = &request.rows;
    if rows.ranges.is_empty() && !rows.keys.is_empty() && rows.keys.len() <= POINT_READ_KEYS {
        let out = store
            .blocking(move |inner| {
                let mut out = Vec::new();
                // From any tier a scan reads every range (or stops at the limit).
                let _done = inner.scan(&t, &ranges, filter.as_ref(), Tier::Any, |row| {
                    out.push(Ok(row));
                    (out.len() as u64) < limit
                })?;
                Ok(out)
            })
            .await?;
        return Ok(Box::pin(futures::stream::iter(out)));
    }
    // Rows travel from the scanning thread in chunks: one hand-off per chunk, not per row.
    let (tx, rx) = mpsc::channel::<Result<Vec<Row>>>(STREAM_BUFFER_CHUNKS);
    let inner = store.inner.clone();
    tokio::task::spawn_blocking(move || {
        let mut sent = 0u64;
        let mut chunk = Vec::new();
        let mut chunk_bytes = 0usize;
        let mut reader_alive = true;
        let result = inner.scan(&t, &ranges, filter.as_ref(), Tier::Any, |row| {
            sent += 1;
            chunk_bytes += row_bytes(&row);
            chunk.push(row);
            if chunk.len() >= CHUNK_ROWS || chunk_bytes >= CHUNK_BYTES {
                reader_alive = tx.blocking_send(Ok(std::mem::take(&mut chunk))).is_ok();
                chunk_bytes = 0;
            }
            // Stop when the reader went away or the limit is reached.
            reader_alive && sent < limit
        });
        if reader_alive && !chunk.is_empty() {
            let _ = tx.blocking_send(Ok(chunk));
        }
        if let Err(e) = result {
            let _ = tx.blocking_send(Err(e));
        }
    });
    let rows = tokio_stream::wrappers::ReceiverStream::new(rx).flat_map(|chunk| {
        let (rows, error) = match chunk {
            Ok(rows) => (rows, None),
            Err(e) => (Vec::new(), Some(Err(e))),
        };
        futures::stream::iter(rows.into_iter().map(Ok).chain(error))
    });
    Ok(Box::pin(rows))
}

pub(crate) async fn sample_row_keys(store: &RocksStore, table: &str) -> Result<Vec<KeySample>> {
    let t = store.inner.table(table)?;
    store
        .blocking(move |inner| {
            let id = t.meta.id;
            let (lo, hi) = (keys::table_start(id), keys::table_end(id));
            let mut files: Vec<(Vec<u8>, u64)> = inner
                .db
                .live_files()
                .map_err(backend)?
                .into_iter()
                .filter(|f| f.column_family_name == DATA_CF)
                .filter_map(|f| {
                    let start = f.start_key?;
                    let end = f.end_key?;
                    (end >= lo && start < hi).then(|| {
                        let row = keys::row_of_key(&start)
                            .filter(|(tid, _)| *tid == id)
                            .map(|(_, row)| row)
                            .unwrap_or_default();
                        (row, f.size as u64)
                    })
                })
                .collect();
            files.sort();
            let mut samples: Vec<KeySample> = Vec::new();
            let mut offset = 0u64;
            for (row, size) in files {
                // A split before the first file would only make an empty range.
                if offset > 0
                    && !row.is_empty()
                    && samples.last().is_none_or(|s| s.row_key[..] < row[..])
                {
                    samples.push(KeySample {
                        row_key: Bytes::from(row),
                        offset_bytes: offset,
                    });
                }
                offset += size;
            }
            samples.push(KeySample {
                row_key: Bytes::new(),
                offset_bytes: offset,
            });
            Ok(samples)
        })
        .await
}
