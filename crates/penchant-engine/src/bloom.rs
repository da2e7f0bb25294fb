//! Bloom filters: per-user seen filters and large partitioned key sets.
