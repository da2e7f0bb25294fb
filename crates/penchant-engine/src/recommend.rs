//! Recommendations: candidates from vectors and precomputed queues.
