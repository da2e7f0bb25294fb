//! Jobs: batch work over key ranges in parallel, with progress.
