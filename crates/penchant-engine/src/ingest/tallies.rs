//! Tally: what a batch's stored events count beside profiles — traffic per minute, trends, A/B
//! tests' attribution, and how many wait for their items.

use super::Ingest;
use crate::Result;
use crate::events::{Event, Stored};

impl Ingest {
    /// Count the events a batch stored: per minute as received, in the trends (but "not for
    /// me" events, which are no interaction), in the A/B tests their users are in, and those
    /// that wait for their items' records.
    pub(super) async fn tally(&self, app: &str, stored: &[Stored<'_>]) -> Result<()> {
        let negative = self.seen.settings(app).await?;
        let counted: Vec<&Event> = stored.iter().map(|s| s.event).collect();
        let trending: Vec<&Event> = counted
            .iter()
            .copied()
            .filter(|e| !negative.is_negative(&e.event_name))
            .collect();
        let waiting = stored.iter().filter(|s| s.waiting > 0).count();
        self.waiting_counts.add(app, waiting as u64, 0);
        self.traffic.add(app, &counted, self.clock.now_ms());
        self.trends.add(app, &trending);
        self.abtests.attribute(app, &counted).await
    }
}
