//! Integration tests for penchant-vectors, one binary (see STYLE: link time): property tests of
//! the kernels and top-k search against naive versions, and ALS end to end.

mod als;
mod hnsw;
mod kernels;
mod matrix;
