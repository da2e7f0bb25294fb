//! Insights events: validation and storage of views, clicks and conversions.
