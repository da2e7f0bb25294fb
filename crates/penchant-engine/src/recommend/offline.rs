//! Offline evaluation of queue blends: each [`Source`] of a queue computed from a training
//! split in memory, the way a queue rebuild computes it from the store, so that any blend can be
//! scored on held-out events before a shop builds it.
//!
//! What each source is here, beside what the rebuild reads:
//!
//! | source | offline | rebuild |
//! |---|---|---|
//! | `als` | `xᵤ · yᵢ` of the split's own ALS training | the user's vector in the space |
//! | `similar-to-liked` | mean `yⱼ · yᵢ` over the user's last `last` training items | the same over the last clicked or converted items |
//! | `related` | the summed co-interaction lists (`n(a,b) / √(n(a)·n(b))`, each user's latest [`related::MAX_ITEMS_PER_USER`] items, [`related::NEIGHBOURS`] per item) of the last `last` items | the built lists |
//! | `trending` | as of the user's last training event: the training events of the [`trending::WINDOW_DAYS`] days up to it, weighted and halved every [`trending::HALF_LIFE_DAYS`] days | the live counters |
//!
//! Offline, a user's items are the training events the strategy weighs (views too, if it
//! weighs them), and trending weighs events by the strategy where the counters count a
//! conversion as ten clicks. Each source proposes its best [`POOL`] items; each source's scores
//! are divided by its best one and summed with the source's weight, as in a rebuild; the
//! user's training items are left out (the seen filter's part) and the best `k` are scored.
//! Only the trained space can be read offline: a source naming another one is refused.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use penchant_vectors::Metric;
use penchant_vectors::als::{Factors, Interactions};

use super::queues::Source;
use super::{related, trending};
use crate::aggregates::DAY_MS;

/// Item rows with their scores, best first.
type Ranked = Vec<(u32, f32)>;

/// Items each source proposes (a queue's default size).
pub const POOL: usize = super::queues::DEFAULT_SIZE;

/// A training split's sources, ready to blend for any of its users.
#[derive(Debug)]
pub struct Offline<'a> {
    train: &'a Interactions,
    factors: &'a Factors,
    /// Per user row: training items, newest first, distinct.
    recent: Vec<Vec<u32>>,
    /// Per user row: the day of the user's last training event.
    last_day: Vec<i64>,
    /// The training triples and their days, in time order.
    events: &'a [(u32, u32, f32)],
    days: Vec<i64>,
    /// Trending as of each day asked so far: item rows, best first, with their scores.
    trending: Mutex<HashMap<i64, Arc<Ranked>>>,
    /// Per item row: its co-interaction list, best first.
    related: Vec<Vec<(u32, f32)>>,
}

impl<'a> Offline<'a> {
    /// `train_events`: the training triples in time order, with their times.
    pub fn new(
        train: &'a Interactions,
        factors: &'a Factors,
        train_events: &'a [(u32, u32, f32)],
        train_at: &[i64],
    ) -> Self {
        let mut recent: Vec<Vec<u32>> = vec![Vec::new(); train.users()];
        for &(u, i, _) in train_events.iter().rev() {
            let items = &mut recent[u as usize];
            if !items.contains(&i) {
                items.push(i);
            }
        }
        let days: Vec<i64> = train_at.iter().map(|t| t.div_euclid(DAY_MS)).collect();
        let mut last_day = vec![i64::MIN; train.users()];
        for (&(u, ..), &day) in train_events.iter().zip(&days) {
            last_day[u as usize] = last_day[u as usize].max(day);
        }
        let related = co_interaction(train.items(), &recent);
        Self {
            train,
            factors,
            recent,
            last_day,
            events: train_events,
            days,
            trending: Mutex::new(HashMap::new()),
            related,
        }
    }

    /// Trending as of the end of `today`: the window's events by their weight, each day
    /// halved every half-life (computed once per day asked).
    fn trending(&self, today: i64) -> Arc<Ranked> {
        let mut cache = self.trending.lock().expect("trending cache");
        cache
            .entry(today)
            .or_insert_with(|| {
                // Days only grow along the events: the window is one slice of them.
                let from = self
                    .days
                    .partition_point(|&d| d <= today - trending::WINDOW_DAYS);
                let to = self.days.partition_point(|&d| d <= today);
                let mut scores: HashMap<u32, f64> = HashMap::new();
                for (&(_, i, w), &day) in self.events[from..to].iter().zip(&self.days[from..to]) {
                    if w > 0.0 {
                        let decay = 0.5f64.powf((today - day) as f64 / trending::HALF_LIFE_DAYS);
                        *scores.entry(i).or_default() += f64::from(w) * decay;
                    }
                }
                let mut ranked: Vec<(u32, f32)> =
                    scores.into_iter().map(|(i, s)| (i, s as f32)).collect();
                ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
                Arc::new(ranked)
            })
            .clone()
    }

    /// Popularity (every training user counts one), best first.
    pub fn popular(&self) -> Vec<u32> {
        penchant_vectors::eval::popularity(self.train)
    }

    /// The best `k` items of a blend for user row `u`, none of the user's training items.
    pub fn blend(&self, sources: &[Source], u: usize, k: usize) -> Vec<u32> {
        let mut scores: HashMap<u32, f32> = HashMap::new();
        for source in sources {
            let items = self.source(source, u);
            let best = items.first().map_or(0.0, |(_, s)| *s);
            if best <= 0.0 {
                continue;
            }
            for &(i, s) in items.iter().filter(|(_, s)| *s > 0.0) {
                *scores.entry(i).or_default() += source.weight() * s / best;
            }
        }
        let (seen, _) = self.train.user_items(u);
        let mut ranked: Vec<(u32, f32)> = scores
            .into_iter()
            .filter(|(i, _)| seen.binary_search(i).is_err())
            .collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        ranked.into_iter().take(k).map(|(i, _)| i).collect()
    }

    /// One source's items for user row `u`, best first.
    fn source(&self, source: &Source, u: usize) -> Vec<(u32, f32)> {
        let rows = |hits: Vec<(usize, f32)>| hits.into_iter().map(|(i, s)| (i as u32, s)).collect();
        match source {
            Source::Als { .. } => rows(self.factors.items.top_k(
                Metric::Dot,
                self.factors.users.row(u),
                POOL,
                |_| false,
            )),
            Source::SimilarToLiked { last, .. } => {
                let liked = &self.recent[u][..(*last).min(self.recent[u].len())];
                let queries: Vec<&[f32]> = liked
                    .iter()
                    .map(|&i| self.factors.items.row(i as usize))
                    .collect();
                rows(self.factors.items.top_k_multi(
                    Metric::Dot,
                    &queries,
                    penchant_vectors::Aggregate::Mean,
                    POOL,
                    |i| liked.contains(&(i as u32)),
                ))
            }
            Source::Related { last, .. } => {
                let liked = &self.recent[u][..(*last).min(self.recent[u].len())];
                let mut scores: HashMap<u32, f32> = HashMap::new();
                for &a in liked {
                    for &(b, s) in &self.related[a as usize] {
                        *scores.entry(b).or_default() += s;
                    }
                }
                let mut ranked: Vec<(u32, f32)> = scores
                    .into_iter()
                    .filter(|(b, _)| !liked.contains(b))
                    .collect();
                ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
                ranked.truncate(POOL);
                ranked
            }
            Source::Trending { .. } => self
                .trending(self.last_day[u])
                .iter()
                .take(POOL)
                .copied()
                .collect(),
        }
    }
}

/// Every item's co-interaction list, as the build makes `related-products`: pairs among each
/// user's latest items, scored `n(a,b) / √(n(a)·n(b))`, the best of each item kept.
fn co_interaction(items: usize, recent: &[Vec<u32>]) -> Vec<Vec<(u32, f32)>> {
    let latest = |u: usize| &recent[u][..recent[u].len().min(related::MAX_ITEMS_PER_USER)];
    let mut users_of: Vec<Vec<u32>> = vec![Vec::new(); items];
    for u in 0..recent.len() {
        for &i in latest(u) {
            users_of[i as usize].push(u as u32);
        }
    }
    let mut lists = vec![Vec::new(); items];
    let mut counts: HashMap<u32, u32> = HashMap::new();
    for (a, users) in users_of.iter().enumerate() {
        counts.clear();
        for &u in users {
            for &b in latest(u as usize) {
                if b as usize != a {
                    *counts.entry(b).or_default() += 1;
                }
            }
        }
        let n_a = users.len() as f32;
        let mut list: Vec<(u32, f32)> = counts
            .iter()
            .map(|(&b, &n)| {
                (
                    b,
                    n as f32 / (n_a * users_of[b as usize].len() as f32).sqrt(),
                )
            })
            .collect();
        list.sort_by(|x, y| y.1.total_cmp(&x.1).then_with(|| x.0.cmp(&y.0)));
        list.truncate(related::NEIGHBOURS);
        lists[a] = list;
    }
    lists
}

#[cfg(test)]
mod tests {
    use penchant_vectors::Matrix;

    use super::*;

    fn matrix(rows: &[&[f32]]) -> Matrix {
        let mut m = Matrix::new(rows[0].len());
        for r in rows {
            m.push(r);
        }
        m
    }

    /// Three users, four items. User 0 had items 0 then 1; user 1 items 1 then 2; user 2 item 3
    /// long before the others.
    type Shop = (Interactions, Factors, Vec<(u32, u32, f32)>, Vec<i64>);

    fn shop() -> Shop {
        let day = DAY_MS;
        let events = vec![
            (2, 3, 1.0),
            (0, 0, 1.0),
            (1, 1, 1.0),
            (0, 1, 1.0),
            (1, 2, 1.0),
        ];
        let at = vec![0, 20 * day, 20 * day, 21 * day, 21 * day];
        let train = Interactions::from_triples(3, 4, events.iter().copied());
        let factors = Factors {
            users: matrix(&[&[1.0, 0.0], &[0.0, 1.0], &[1.0, 1.0]]),
            items: matrix(&[&[0.9, 0.1], &[0.5, 0.5], &[0.1, 0.9], &[1.0, 0.0]]),
        };
        (train, factors, events, at)
    }

    #[test]
    fn sources_and_blends_leave_out_what_the_user_has() {
        let (train, factors, events, at) = shop();
        let offline = Offline::new(&train, &factors, &events, &at);
        assert_eq!(offline.recent[0], vec![1, 0], "newest first");
        let als = Source::Als {
            space: "als".into(),
            weight: 1.0,
        };
        // User 0 (x = [1, 0]) has 0 and 1: of 2 and 3, item 3 is closer.
        assert_eq!(offline.blend(std::slice::from_ref(&als), 0, 10), vec![3, 2]);
        // Trending as of day 21: the last 7 days hold item 1 (twice, one a day older), 0, 2;
        // item 3's event is 21 days old. As of day 0, item 3 alone.
        let ids: Vec<u32> = offline.trending(21).iter().map(|(i, _)| *i).collect();
        assert_eq!(ids[0], 1);
        assert!(!ids.contains(&3), "{ids:?}");
        assert_eq!(
            offline
                .trending(0)
                .iter()
                .map(|(i, _)| *i)
                .collect::<Vec<_>>(),
            vec![3]
        );
        // Related: 1 was had with 0 (user 0) and with 2 (user 1).
        let related: Vec<u32> = offline.related[1].iter().map(|(i, _)| *i).collect();
        assert_eq!(related.len(), 2);
        assert!(related.contains(&0) && related.contains(&2));
        let rel = Source::Related {
            last: 1,
            weight: 1.0,
        };
        // User 1's last item is 2; 2 was had with 1 only, which user 1 has: nothing left.
        assert!(offline.blend(std::slice::from_ref(&rel), 1, 10).is_empty());
        // User 0's last is 1: its neighbours 0 (had) and 2.
        assert_eq!(offline.blend(std::slice::from_ref(&rel), 0, 10), vec![2]);
        // A heavy trending weight puts trending's best unseen item first: item 2 for user 0.
        let trend = Source::Trending { weight: 5.0 };
        assert_eq!(offline.blend(&[als.clone(), trend.clone()], 0, 1), vec![2]);
        // User 2 (x = [1, 1]) scores items 0 to 2 alike: the lower row first. Trending as of
        // user 2's last day (0) holds only item 3, which user 2 has: no change.
        assert_eq!(offline.blend(std::slice::from_ref(&als), 2, 1), vec![0]);
        assert_eq!(offline.blend(&[als, trend], 2, 1), vec![0]);
    }
}
