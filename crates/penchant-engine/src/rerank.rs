//! Re-ranking: ordering hits by how well their facets match a profile.
