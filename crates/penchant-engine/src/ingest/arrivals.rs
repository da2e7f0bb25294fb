//! Step 0 of a request whose events came without a timestamp: each takes its first attempt's
//! arrival, remembered for the retry window ([`penchant_model::events::retries`]), so that a
//! retry of the request — at once, later, reordered or cut — names the same events.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bytes::Bytes;
use penchant_store::{Mutation, ReadRows, RowFilter, RowSet, TimeRange};

use super::Ingest;
use crate::events::Event;
use crate::{Result, keys};
use penchant_model::events::retries::{RETRY_WINDOW, arrival_ids, decode_arrival, encode_arrival};
use penchant_model::tables::{ARRIVALS_FAMILY, RETRIES_TABLE};

impl Ingest {
    /// Give each of the events at `stamped` (stamped with this attempt's arrival) the arrival
    /// of the first attempt that brought it within the retry window: one read of their users'
    /// rows, then, for each user with events new to it, one conditional write claiming them
    /// (another attempt at the same moment claims them first, or this one does).
    pub(super) async fn first_arrivals(
        &self,
        app: &str,
        events: &mut [Event],
        stamped: &[usize],
    ) -> Result<()> {
        let stamped: BTreeSet<usize> = stamped
            .iter()
            .copied()
            .filter(|i| *i < events.len())
            .collect();
        if stamped.is_empty() {
            return Ok(());
        }
        let ids = {
            let of: Vec<&Event> = stamped.iter().map(|i| &events[*i]).collect();
            arrival_ids(&of)?
        };
        // Per user: each event's identity, its position and its stamp.
        let mut by_user: BTreeMap<String, Vec<(Bytes, usize, i64)>> = BTreeMap::new();
        for (id, i) in ids.into_iter().zip(stamped) {
            let e = &events[i];
            by_user
                .entry(e.user().to_owned())
                .or_default()
                .push((id, i, e.timestamp));
        }
        let fresh = self.fresh();
        let request = ReadRows::new(RowSet::keys(
            by_user.keys().map(|user| keys::arrivals(app, user)),
        ))
        .filter(
            RowFilter::Family(ARRIVALS_FAMILY.to_owned())
                .and(fresh.clone())
                .and(RowFilter::CellsPerColumnLimit(1)),
        );
        let mut known: HashMap<(String, Bytes), i64> = HashMap::new();
        for row in self.store.read_all(RETRIES_TABLE, request).await? {
            let Some((_, user)) = keys::app_and_user_of(&row.key) else {
                continue;
            };
            for cell in row.family(ARRIVALS_FAMILY) {
                if let Some(ms) = decode_arrival(&cell.value) {
                    known.insert((user.to_owned(), cell.qualifier.clone()), ms);
                }
            }
        }
        let claims = by_user.iter().filter_map(|(user, of)| {
            let new: Vec<(Bytes, i64)> = of
                .iter()
                .filter(|(id, _, _)| !known.contains_key(&(user.clone(), id.clone())))
                .map(|(id, _, ms)| (id.clone(), *ms))
                .collect();
            (!new.is_empty()).then_some(async move {
                let claimed = self.claim(app, user, new).await?;
                Ok::<_, crate::EngineError>((user, claimed))
            })
        });
        for (user, claimed) in futures::future::try_join_all(claims).await? {
            for (id, ms) in claimed {
                known.insert((user.clone(), id), ms);
            }
        }
        for (user, of) in &by_user {
            for (id, i, _) in of {
                if let Some(ms) = known.get(&(user.clone(), id.clone())) {
                    events[*i].timestamp = *ms;
                }
            }
        }
        Ok(())
    }

    /// Claim the arrivals of a user's events (identity, this attempt's stamp) that no attempt
    /// claimed within the window: a conditional write of them all unless one is there; if one
    /// is (an attempt at the same moment), read what it claimed and claim the rest. Returns
    /// each event's arrival.
    async fn claim(
        &self,
        app: &str,
        user: &str,
        mut new: Vec<(Bytes, i64)>,
    ) -> Result<Vec<(Bytes, i64)>> {
        let key = keys::arrivals(app, user);
        let mut out = Vec::with_capacity(new.len());
        while !new.is_empty() {
            let now = self.clock.now_ms() * 1000;
            let ids: BTreeSet<Bytes> = new.iter().map(|(id, _)| id.clone()).collect();
            let theirs = RowFilter::Family(ARRIVALS_FAMILY.to_owned())
                .and(RowFilter::Qualifiers(ids))
                .and(self.fresh());
            let sets = new
                .iter()
                .map(|(id, ms)| {
                    Mutation::set(ARRIVALS_FAMILY, id.clone(), now, encode_arrival(*ms))
                })
                .collect();
            let taken = self
                .store
                .check_and_mutate_row(
                    RETRIES_TABLE,
                    key.clone(),
                    Some(theirs.clone().and(RowFilter::StripValue)),
                    vec![],
                    sets,
                )
                .await?;
            if !taken {
                out.append(&mut new);
                break;
            }
            let row = self
                .store
                .read_row(
                    RETRIES_TABLE,
                    key.clone(),
                    Some(theirs.and(RowFilter::CellsPerColumnLimit(1))),
                )
                .await?;
            let claimed: HashMap<Bytes, i64> = row
                .iter()
                .flat_map(|r| r.family(ARRIVALS_FAMILY))
                .filter_map(|c| Some((c.qualifier.clone(), decode_arrival(&c.value)?)))
                .collect();
            new.retain(|(id, _)| match claimed.get(id) {
                Some(ms) => {
                    out.push((id.clone(), *ms));
                    false
                }
                None => true,
            });
        }
        Ok(out)
    }

    /// The cells written within the retry window.
    fn fresh(&self) -> RowFilter {
        let since = (self.clock.now_ms() - RETRY_WINDOW.as_millis() as i64) * 1000;
        RowFilter::TimestampRange(TimeRange::new(since, i64::MAX))
    }
}
