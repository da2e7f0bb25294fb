//! The binary format of a filter, version 1 (all integers little-endian):
//!
//! ```text
//! offset  size  field
//! 0       4     magic "PBLM"
//! 4       2     format version (1)
//! 6       2     probes per key (1..=16)
//! 8       8     number of 512-bit blocks (>= 1)
//! 16      4     CRC-32 (IEEE) of the bit array
//! 20      4     flags (0; reserved)
//! 24      ...   the bit array: blocks × 8 words of 64 bits
//! ```
//!
//! The hash ([`crate::key_hash`], XXH3-64) and the bit layout are part of the format: a filter
//! written by one build is read by every later one.

use crate::{BLOCK_BYTES, Block, BloomFilter, MAX_BLOCKS, MAX_PROBES, WORDS};

const MAGIC: &[u8; 4] = b"PBLM";
/// The version this build writes (and the only one it reads).
pub const FORMAT_VERSION: u16 = 1;
/// Bytes before the bit array.
pub const HEADER_LEN: usize = 24;

/// Why bytes are not a filter.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("{0} bytes are too few for a filter header ({HEADER_LEN} bytes)")]
    TooShort(usize),
    #[error("not a Penchant Bloom filter (bad magic bytes)")]
    BadMagic,
    #[error(
        "filter format version {0} is not supported (this build reads version {FORMAT_VERSION})"
    )]
    UnsupportedVersion(u16),
    #[error("probes must be between 1 and {MAX_PROBES}, the header says {0}")]
    BadProbes(u16),
    #[error("the header says {0} blocks; a filter has between 1 and {MAX_BLOCKS}")]
    BadBlocks(u64),
    #[error("unknown flags {0:#x}")]
    BadFlags(u32),
    #[error("the header announces {expected} bytes of bits, {actual} follow")]
    LengthMismatch { expected: u64, actual: usize },
    #[error("checksum mismatch: the filter is corrupt")]
    BadChecksum,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

impl BloomFilter {
    /// The filter in the binary format.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + self.size_bytes());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&(self.probes as u16).to_le_bytes());
        out.extend_from_slice(&(self.blocks.len() as u64).to_le_bytes());
        out.extend_from_slice(&[0; 8]); // checksum and flags, below
        for w in self.words() {
            out.extend_from_slice(&w.to_le_bytes());
        }
        let crc = crc32fast::hash(&out[HEADER_LEN..]);
        out[16..20].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Read a filter written by [`BloomFilter::to_bytes`]. Anything else is an error, never a
    /// panic.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, DecodeError> {
        if bytes.len() < HEADER_LEN {
            return Err(DecodeError::TooShort(bytes.len()));
        }
        if &bytes[..4] != MAGIC {
            return Err(DecodeError::BadMagic);
        }
        let version = u16_at(bytes, 4);
        if version != FORMAT_VERSION {
            return Err(DecodeError::UnsupportedVersion(version));
        }
        let probes = u16_at(bytes, 6);
        if !(1..=MAX_PROBES as u16).contains(&probes) {
            return Err(DecodeError::BadProbes(probes));
        }
        let blocks = u64_at(bytes, 8);
        if !(1..=MAX_BLOCKS).contains(&blocks) {
            return Err(DecodeError::BadBlocks(blocks));
        }
        let flags = u32_at(bytes, 20);
        if flags != 0 {
            return Err(DecodeError::BadFlags(flags));
        }
        let body = &bytes[HEADER_LEN..];
        let expected = blocks * BLOCK_BYTES as u64;
        if body.len() as u64 != expected {
            return Err(DecodeError::LengthMismatch {
                expected,
                actual: body.len(),
            });
        }
        if crc32fast::hash(body) != u32_at(bytes, 16) {
            return Err(DecodeError::BadChecksum);
        }
        let blocks = body
            .chunks_exact(BLOCK_BYTES)
            .map(|chunk| {
                let mut words = [0u64; WORDS];
                for (w, bytes) in words.iter_mut().zip(chunk.chunks_exact(8)) {
                    *w = u64_at(bytes, 0);
                }
                Block(words)
            })
            .collect();
        Ok(BloomFilter {
            blocks,
            probes: u32::from(probes),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_every_corruption_is_caught() {
        let mut f = BloomFilter::new(50, 0.01).unwrap();
        for i in 0..50u32 {
            f.insert(&i.to_le_bytes());
        }
        let bytes = f.to_bytes();
        assert_eq!(bytes.len(), HEADER_LEN + f.size_bytes());
        assert_eq!(BloomFilter::from_bytes(&bytes).unwrap(), f);
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x40;
            assert!(BloomFilter::from_bytes(&bad).is_err(), "flipped byte {i}");
        }
        for len in 0..bytes.len() {
            assert!(
                BloomFilter::from_bytes(&bytes[..len]).is_err(),
                "cut at {len}"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(matches!(
            BloomFilter::from_bytes(&longer),
            Err(DecodeError::LengthMismatch { .. })
        ));
    }

    #[test]
    fn the_format_is_stable() {
        // A filter written by this version must read the same forever: pin its bytes.
        let mut f = BloomFilter::with_shape(1, 3).unwrap();
        f.insert(b"penchant");
        let bytes = f.to_bytes();
        assert_eq!(
            &bytes[..16],
            b"PBLM\x01\x00\x03\x00\x01\x00\x00\x00\x00\x00\x00\x00"
        );
        assert_eq!(u32_at(&bytes, 16), 0x8807_7c81, "checksum");
        let words: Vec<u64> = bytes[HEADER_LEN..]
            .chunks_exact(8)
            .map(|c| u64_at(c, 0))
            .collect();
        assert_eq!(
            words,
            [1 << 58, 1 << 2, 1 << 50, 0, 0, 0, 0, 0],
            "the hash or the bit layout changed: old filters would not read back"
        );
        assert!(
            BloomFilter::from_bytes(&bytes)
                .unwrap()
                .contains(b"penchant")
        );
    }
}
