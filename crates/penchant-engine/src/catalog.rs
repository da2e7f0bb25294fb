//! Catalog: items of an index and the facet values their attributes give.
