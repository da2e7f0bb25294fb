//! Profiles: per-user affinity scores, kept fresh per event and recomputed in bulk.
