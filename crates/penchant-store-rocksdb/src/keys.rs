//! The key layout: how a cell's coordinates become one RocksDB key.
//!
//! ```text
//! table id   row key (escaped)   end   family id   qualifier (escaped)   end   timestamp
//! u32 BE     0x00 → 0x00 0xFF    00 01  u16 BE     0x00 → 0x00 0xFF      00 01  !ts as u64 BE
//! ```
//!
//! * Escaping maps each byte on its own, so `esc(p ++ s) = esc(p) ++ esc(s)`: every row whose key
//!   starts with `p` has a RocksDB key starting with `table ++ esc(p)`, and a prefix scan of row
//!   keys is one contiguous range scan.
//! * The terminator `00 01` sorts below both an escaped zero (`00 FF`) and any other byte, so the
//!   encoding preserves the order of row keys (and of qualifiers): `"a"` < `"a\0"` < `"ab"`.
//! * The timestamp is stored inverted, so the newest version of a column comes first.
//! * Families are stored as ids the table's schema assigns (never reused), so a dropped family's
//!   cells are invisible at once and removed by compaction. The value is the cell's value, as is.

/// Bytes of the table id prefix.
pub const TABLE_ID_LEN: usize = 4;
const TERMINATOR: [u8; 2] = [0x00, 0x01];

/// Append the escaped form of `bytes`.
fn escape_into(out: &mut Vec<u8>, bytes: &[u8]) {
    for &b in bytes {
        out.push(b);
        if b == 0 {
            out.push(0xff);
        }
    }
}

/// Decode an escaped, terminated string at the start of `input`: the decoded bytes and the
/// number of input bytes consumed (terminator included). `None` if it is malformed.
fn unescape(input: &[u8]) -> Option<(Vec<u8>, usize)> {
    let mut out = Vec::with_capacity(input.len());
    let mut i = 0;
    loop {
        match *input.get(i)? {
            0 => match *input.get(i + 1)? {
                0xff => {
                    out.push(0);
                    i += 2;
                }
                0x01 => return Some((out, i + 2)),
                _ => return None,
            },
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
}

/// Length of the escaped, terminated string at the start of `input`, terminator included.
fn escaped_len(input: &[u8]) -> Option<usize> {
    let mut i = 0;
    loop {
        if *input.get(i)? == 0 {
            if *input.get(i + 1)? == 0x01 {
                return Some(i + 2);
            }
            i += 2;
        } else {
            i += 1;
        }
    }
}

/// Length of the row prefix (`table ++ esc(row) ++ 00 01`) at the start of a key, if the key
/// holds a whole row key. This is the data family's prefix extractor: every key of one row
/// shares it, so prefix bloom filters answer "is this row here at all".
pub fn row_prefix_len(key: &[u8]) -> Option<usize> {
    Some(TABLE_ID_LEN + escaped_len(key.get(TABLE_ID_LEN..)?)?)
}

/// The row prefix of a key (the prefix extractor's transform).
pub fn row_prefix_of(key: &[u8]) -> &[u8] {
    &key[..row_prefix_len(key).unwrap_or(key.len())]
}

/// Whether a key holds a whole row prefix (the prefix extractor's domain).
pub fn has_row_prefix(key: &[u8]) -> bool {
    row_prefix_len(key).is_some()
}

/// Whether `[start, end)` is exactly the keys of one row (`row_start`..`row_end`).
pub fn is_one_row(start: &[u8], end: &[u8]) -> bool {
    row_prefix_len(start) == Some(start.len())
        && end.len() == start.len()
        && end[..end.len() - 2] == start[..start.len() - 2]
        && end[end.len() - 2..] == [0x00, 0x02]
}

/// `table` alone: the first key of the table's key space.
pub fn table_start(table: u32) -> Vec<u8> {
    table.to_be_bytes().to_vec()
}

/// The first key after the table's key space.
pub fn table_end(table: u32) -> Vec<u8> {
    // Table ids are allocated below u32::MAX, so this never wraps.
    (u64::from(table) + 1).to_be_bytes()[4..].to_vec()
}

/// `table ++ esc(prefix)`: every row starting with `prefix` lies at or after this key, and
/// before its successor.
pub fn row_prefix(table: u32, prefix: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(TABLE_ID_LEN + prefix.len() + 2);
    k.extend_from_slice(&table.to_be_bytes());
    escape_into(&mut k, prefix);
    k
}

/// `table ++ esc(row) ++ 00 01`: the prefix of every key of exactly this row.
pub fn row_start(table: u32, row: &[u8]) -> Vec<u8> {
    let mut k = row_prefix(table, row);
    k.extend_from_slice(&TERMINATOR);
    k
}

/// The first key after every key of `row` (and before any later row).
pub fn row_end(table: u32, row: &[u8]) -> Vec<u8> {
    let mut k = row_prefix(table, row);
    k.extend_from_slice(&[0x00, 0x02]);
    k
}

/// The prefix of every key of one family of one row.
pub fn family_start(row_start: &[u8], family: u16) -> Vec<u8> {
    let mut k = row_start.to_vec();
    k.extend_from_slice(&family.to_be_bytes());
    k
}

/// The prefix of every version of one column.
pub fn column_prefix(row_start: &[u8], family: u16, qualifier: &[u8]) -> Vec<u8> {
    let mut k = family_start(row_start, family);
    escape_into(&mut k, qualifier);
    k.extend_from_slice(&TERMINATOR);
    k
}

/// The encoded timestamp: inverted so newer sorts first.
pub fn encode_ts(ts: i64) -> [u8; 8] {
    (!(ts as u64)).to_be_bytes()
}

/// One cell's full key.
pub fn cell_key(row_start: &[u8], family: u16, qualifier: &[u8], ts: i64) -> Vec<u8> {
    let mut k = column_prefix(row_start, family, qualifier);
    k.extend_from_slice(&encode_ts(ts));
    k
}

/// The parts of a cell key.
#[derive(Debug, PartialEq, Eq)]
pub struct CellKey<'a> {
    pub table: u32,
    /// `table ++ esc(row) ++ 00 01`, to tell rows apart without decoding them.
    pub row_start: &'a [u8],
    pub family: u16,
    /// Everything but the timestamp: tells versions of one column apart.
    pub column: &'a [u8],
    pub timestamp: i64,
}

/// Split a key into its parts without allocating; `None` if it is not a cell key.
pub fn parse(key: &[u8]) -> Option<CellKey<'_>> {
    let table = u32::from_be_bytes(key.get(..TABLE_ID_LEN)?.try_into().ok()?);
    let row_len = escaped_len(&key[TABLE_ID_LEN..])?;
    let row_end = TABLE_ID_LEN + row_len;
    let family = u16::from_be_bytes(key.get(row_end..row_end + 2)?.try_into().ok()?);
    let ts_at = key.len().checked_sub(8)?;
    if ts_at < row_end + 2 + 2 {
        return None;
    }
    let ts = u64::from_be_bytes(key[ts_at..].try_into().ok()?);
    Some(CellKey {
        table,
        row_start: &key[..row_end],
        family,
        column: &key[..ts_at],
        timestamp: !ts as i64,
    })
}

/// Decode the row key of a `row_start`.
pub fn decode_row(row_start: &[u8]) -> Option<Vec<u8>> {
    unescape(row_start.get(TABLE_ID_LEN..)?).map(|(row, _)| row)
}

/// Decode the qualifier of a `column` (as returned by [`parse`]) into `out`; false if it is
/// malformed.
pub fn decode_qualifier_into(
    row_start_len: usize,
    column: &[u8],
    out: &mut bytes::BytesMut,
) -> bool {
    let Some(mut input) = column.get(row_start_len + 2..) else {
        return false;
    };
    loop {
        // Copy up to the next zero byte at once: most qualifiers have none.
        let Some(zero) = input.iter().position(|&b| b == 0) else {
            return false;
        };
        out.extend_from_slice(&input[..zero]);
        match input.get(zero + 1) {
            Some(0xff) => {
                out.extend_from_slice(&[0]);
                input = &input[zero + 2..];
            }
            Some(0x01) => return true,
            _ => return false,
        }
    }
}

/// Decode the row key of any key in the data space (a cell key or a split point), if it holds a
/// whole row key.
pub fn row_of_key(key: &[u8]) -> Option<(u32, Vec<u8>)> {
    let table = u32::from_be_bytes(key.get(..TABLE_ID_LEN)?.try_into().ok()?);
    unescape(&key[TABLE_ID_LEN..]).map(|(row, _)| (table, row))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn roundtrip() {
        let rs = row_start(7, b"us\x00er");
        let key = cell_key(&rs, 3, b"q\x00\xff", 1_000_000);
        let p = parse(&key).unwrap();
        assert_eq!(p.table, 7);
        assert_eq!(p.family, 3);
        assert_eq!(p.timestamp, 1_000_000);
        assert_eq!(decode_row(p.row_start).unwrap(), b"us\x00er");
        let mut out = bytes::BytesMut::new();
        assert!(decode_qualifier_into(p.row_start.len(), p.column, &mut out));
        assert_eq!(&out[..], b"q\x00\xff");
        assert_eq!(row_of_key(&key).unwrap(), (7, b"us\x00er".to_vec()));
        assert!(parse(b"\x00\x00").is_none());
        assert_eq!(row_prefix_of(&key), &rs[..]);
        assert_eq!(row_prefix_of(&rs), &rs[..]);
        assert!(!has_row_prefix(&row_prefix(7, b"us")));
        assert!(is_one_row(&rs, &row_end(7, b"us\x00er")));
        assert!(!is_one_row(&rs, &row_end(7, b"us\x00es")));
        assert!(!is_one_row(&row_prefix(7, b"u"), &row_end(7, b"u")));
        assert!(parse(&[0, 0, 0, 7, b'a', 0, 0x05]).is_none());
    }

    proptest! {
        #[test]
        fn order_is_preserved(
            a in proptest::collection::vec(any::<u8>(), 1..6),
            b in proptest::collection::vec(any::<u8>(), 1..6),
            qa in proptest::collection::vec(prop_oneof![Just(0u8), Just(1u8), Just(0xffu8), any::<u8>()], 0..4),
            qb in proptest::collection::vec(prop_oneof![Just(0u8), Just(1u8), Just(0xffu8), any::<u8>()], 0..4),
            ta in 0i64..1_000_000, tb in 0i64..1_000_000,
        ) {
            let ka = cell_key(&row_start(1, &a), 1, &qa, ta * 1000);
            let kb = cell_key(&row_start(1, &b), 1, &qb, tb * 1000);
            let expected = (&a, &qa, std::cmp::Reverse(ta)).cmp(&(&b, &qb, std::cmp::Reverse(tb)));
            prop_assert_eq!(ka.cmp(&kb), expected);
            // A row prefix scan is contiguous: a key lies in the prefix's range iff its row
            // starts with the prefix.
            let p = &a[..a.len() / 2];
            let lo = row_prefix(1, p);
            let hi = penchant_store::prefix_successor(&lo).unwrap();
            let inside = kb >= lo && kb < hi;
            prop_assert_eq!(inside, b.starts_with(p));
            // Row bounds bracket every key of the row and no other row's.
            let in_row = kb >= row_start(1, &a) && kb < row_end(1, &a);
            prop_assert_eq!(in_row, a == b);
        }
    }
}
