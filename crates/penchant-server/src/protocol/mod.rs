//! Algolia's wire protocols: request bodies checked and turned into the engine's domain values,
//! with Algolia's exact messages. Routes call these before the engine; the engine never sees
//! Algolia's JSON shapes.

pub mod insights;
