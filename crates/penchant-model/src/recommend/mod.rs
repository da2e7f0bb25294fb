//! Recommend's definitions: its requests, models and parameters, its `filters` syntax, queue
//! definitions and their sources, and the sources' parameters.

pub mod filters;
pub mod queues;
pub mod related;
pub mod request;
pub mod trending;
