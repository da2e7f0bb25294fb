//! Key sets as the domain has them (RedisBloom's `BF.RESERVE`, `BF.INFO`): what a set is
//! reserved with, its description as stored, its rebuilds, and the checks of its name and
//! settings. The engine's `sets` keeps their partitions.

use penchant_bloom::BloomFilter;
use penchant_store::Row;
use serde::{Deserialize, Serialize};

use crate::tables::SETS_FAMILY as FAMILY;
use crate::{EngineError, Result};

/// The set's shape ([`Shape`], JSON), fixed at its reservation.
pub const DESCRIPTION: &[u8] = b"set";
/// The generation lookups read (decimal): switched by a rebuild with a conditional write.
pub const GENERATION: &[u8] = b"gen";
/// The last rebuild ([`Rebuild`], JSON).
pub const REBUILD: &[u8] = b"rebuild";
/// The default partition size.
pub const DEFAULT_PARTITION_BYTES: u64 = 8 << 10;
/// The largest partition (one store cell).
pub const MAX_PARTITION_BYTES: u64 = 16 << 20;
/// Most keys in one add or lookup request.
pub const MAX_KEYS_PER_CALL: usize = 100_000;

/// What a set is reserved with (RedisBloom's `BF.RESERVE`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SetConfig {
    /// Keys the set is designed for.
    pub capacity: u64,
    /// The false-positive rate at capacity, in (0, 1).
    pub error_rate: f64,
    /// Bytes per partition: a multiple of 64, up to 16 MiB.
    #[serde(default = "default_partition_bytes")]
    pub partition_bytes: u64,
    /// A rebuild whose estimated false-positive rate passes this keeps the old generation.
    /// Default: twice `errorRate` (at most 0.5).
    #[serde(default)]
    pub max_error_rate: Option<f64>,
}

fn default_partition_bytes() -> u64 {
    DEFAULT_PARTITION_BYTES
}

impl SetConfig {
    pub fn max_error_rate(&self) -> f64 {
        self.max_error_rate
            .unwrap_or_else(|| (2.0 * self.error_rate).min(0.5).max(self.error_rate))
    }

    pub fn check(&self) -> Result<()> {
        let bad = |m: &str| Err(EngineError::Invalid(m.to_owned()));
        if self.capacity == 0 {
            return bad("capacity must be at least 1");
        }
        if !(self.error_rate > 0.0 && self.error_rate < 1.0) {
            return bad("errorRate must be between 0 and 1 (exclusive)");
        }
        if self.partition_bytes == 0
            || !self.partition_bytes.is_multiple_of(64)
            || self.partition_bytes > MAX_PARTITION_BYTES
        {
            return bad("partitionBytes must be a multiple of 64 between 64 and 16777216");
        }
        if let Some(max) = self.max_error_rate
            && !(max >= self.error_rate && max < 1.0)
        {
            return bad("maxErrorRate must be at least errorRate and below 1");
        }
        Ok(())
    }
}

/// How a rebuild went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RebuildState {
    Running,
    Done,
    Refused,
    Failed,
}

/// The last rebuild of a set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rebuild {
    pub state: RebuildState,
    /// The generation it built.
    pub generation: u64,
    /// Keys read from the list (duplicates included).
    pub keys: u64,
    pub estimated_error_rate: Option<f64>,
    pub message: Option<String>,
    /// Unix ms.
    pub started_at: i64,
    pub finished_at: Option<i64>,
}

/// A set's description, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SetDescription {
    pub name: String,
    pub config: SetConfig,
    pub partitions: u64,
    pub probes: u32,
    /// The generation lookups read.
    pub generation: u64,
    /// Unix ms.
    pub created_at: i64,
    pub last_rebuild: Option<Rebuild>,
}

impl SetDescription {
    pub fn blocks(&self) -> u64 {
        self.config.partition_bytes / penchant_bloom::BLOCK_BYTES as u64
    }

    pub fn empty_partition(&self) -> Result<BloomFilter> {
        BloomFilter::with_shape(self.blocks(), self.probes)
            .map_err(|e| crate::internal("corrupt set", e))
    }
}

/// What a set's reservation fixes, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Shape {
    pub name: String,
    pub config: SetConfig,
    pub partitions: u64,
    pub probes: u32,
    pub created_at: i64,
}

impl SetDescription {
    /// From a set's row (family `m`).
    pub fn from_row(row: &Row) -> Result<Self> {
        let cell = |q: &[u8]| row.latest(FAMILY, q).map(|c| &c.value[..]);
        let shape: Shape = serde_json::from_slice(cell(DESCRIPTION).unwrap_or_default())
            .map_err(|e| crate::internal("corrupt set", e))?;
        let generation = cell(GENERATION)
            .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok())
            .ok_or_else(|| EngineError::Internal("corrupt set: no generation".into()))?;
        let last_rebuild = cell(REBUILD)
            .map(serde_json::from_slice)
            .transpose()
            .map_err(|e| crate::internal("corrupt set", e))?;
        Ok(Self {
            name: shape.name,
            config: shape.config,
            partitions: shape.partitions,
            probes: shape.probes,
            generation,
            created_at: shape.created_at,
            last_rebuild,
        })
    }
}

/// What `BF.INFO` tells of a set.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SetInfo {
    #[serde(flatten)]
    pub description: SetDescription,
    /// Keys added (each counted once, as far as the filter tells).
    pub keys: u64,
    pub size_bytes: u64,
    /// Set bits over all bits.
    pub fill_ratio: f64,
    /// The mean over partitions of each one's estimated false-positive rate.
    pub estimated_error_rate: f64,
}

/// Set names: 1 to 64 of `A-Z a-z 0-9 _ - .`.
pub fn check_name(name: &str) -> Result<()> {
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(EngineError::Invalid(
            "set names are 1 to 64 characters among A-Z a-z 0-9 _ - .".into(),
        ))
    }
}
