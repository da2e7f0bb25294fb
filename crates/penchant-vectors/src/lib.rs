//! Penchant's vector maths: pure computation over dense `f32` vectors, with no storage, no I/O
//! and no async, so the engine can run it on any thread and tests can check it exactly.
//!
//! | module | what it owns |
//! | --- | --- |
//! | [`kernels`] | SIMD dot product, distance, norm, `axpy` (run-time CPU dispatch) |
//! | [`matrix`] | [`Matrix`]: contiguous rows with exact top-k search by [`Metric`] |
//! | [`hnsw`] | [`Hnsw`]: an approximate nearest-neighbour graph over a matrix's rows |
//! | [`als`] | implicit-feedback ALS training (conjugate gradient) and fold-in of new users |
//! | [`eval`] | holdout splits and ranking metrics matching the `implicit` library's |
//! | [`regression`] | closed-form item × item models (EASE, a linear sequence model) |
//! | [`synthetic`] | seeded low-rank interaction data for tests and benchmarks |

pub mod als;
pub mod eval;
pub mod hnsw;
pub mod kernels;
pub mod matrix;
pub mod regression;
pub mod synthetic;

pub use hnsw::{Hnsw, HnswConfig};
pub use matrix::{Aggregate, Matrix, Metric};
