//! Strategy: per-app event and facet weights and the personalization impact.
