//! Mark seen: the objectIDs a batch's events mark seen by their users, and those its "not for
//! me" events hide from them ([`crate::seen`]).

use std::collections::BTreeMap;

use super::Ingest;
use crate::Result;
use crate::events::{Event, Target};
use crate::seen::SeenSettings;

/// The objectIDs events mark seen, by user.
pub(super) type SeenItems<'e> = BTreeMap<&'e str, Vec<&'e str>>;
/// The objectIDs "not for me" events hide, by user, with until when.
pub(super) type HiddenItems<'e> = BTreeMap<&'e str, Vec<(&'e str, i64)>>;

impl Ingest {
    /// Mark the objectIDs of the app's seen-marking events as seen by their users, and hide
    /// those of its "not for me" events from them.
    pub(super) async fn mark_seen(&self, app: &str, events: &[Event]) -> Result<()> {
        let settings = self.seen.settings(app).await?;
        let (seen, hidden) = seen_items(&settings, events);
        self.seen.add_many(app, &seen, &hidden).await
    }
}

/// The objectIDs events mark seen, by user, and those "not for me" events hide, with until when.
pub(super) fn seen_items<'e>(
    settings: &SeenSettings,
    events: &'e [Event],
) -> (SeenItems<'e>, HiddenItems<'e>) {
    let mut seen = SeenItems::default();
    let mut hidden = HiddenItems::default();
    for event in events {
        let Target::ObjectIds(ids) = &event.target else {
            continue;
        };
        if settings.is_negative(&event.event_name) {
            let until = settings.hidden_until(event.timestamp);
            hidden
                .entry(event.user())
                .or_default()
                .extend(ids.iter().map(|id| (id.as_str(), until)));
        } else if settings.event_types.contains(&event.event_type) {
            seen.entry(event.user())
                .or_default()
                .extend(ids.iter().map(String::as_str));
        }
    }
    (seen, hidden)
}
