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

use std::sync::{Arc, Mutex, OnceLock};

use foldhash::{HashMap, HashMapExt};

use penchant_vectors::als::{Factors, Interactions};
use penchant_vectors::kernels::axpy;
use penchant_vectors::matrix::top_k_of;
use penchant_vectors::regression::{self, SequenceConfig};
use penchant_vectors::{Hnsw, HnswConfig, Matrix, Metric};

use penchant_model::days::DAY_MS;
use penchant_model::recommend::queues::Source;
use penchant_model::recommend::{related, trending};

/// Item rows with their scores, best first.
type Ranked = Vec<(u32, f32)>;

/// Trending as of one day: best first, and each item row's score and place.
#[derive(Debug, Clone, PartialEq)]
pub struct Trend {
    pub ranked: Ranked,
    /// Per item row: its score over the day's best (0 if absent) and its place (the list's
    /// length if absent).
    pub of: Vec<(f32, u32)>,
}

impl Trend {
    /// Item row `i`'s score over the best and its place (`(0, the list's length)`: absent).
    pub fn of(&self, i: u32) -> (f32, u32) {
        self.of
            .get(i as usize)
            .copied()
            .unwrap_or((0.0, self.ranked.len() as u32))
    }
}

/// Items each source proposes (a queue's default size).
pub const POOL: usize = penchant_model::recommend::queues::DEFAULT_SIZE;

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
    /// Trending as of each day asked so far.
    trending: Mutex<HashMap<i64, Arc<Trend>>>,
    /// Per item row: its lists, counts and facet values.
    lists: Lists,
    popular_rows: std::sync::OnceLock<Vec<u32>>,
    graph: Graph,
    /// Per user row: the share of the user's event weight on items with each facet value —
    /// what a profile counts ([`Offline::with_facets`]).
    affinity: Vec<HashMap<u32, f32>>,
}

/// What the features read of each item row, past its vector.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Lists {
    /// Its co-interaction list, best first.
    pub related: Vec<Vec<(u32, f32)>>,
    /// The items users had soon after it ([`transitions`]).
    pub next: Vec<Vec<(u32, f32)>>,
    /// `ln(1 + users who had it)`.
    pub popularity: Vec<f32>,
    /// The days of its first and last events.
    pub item_days: Vec<(i64, i64)>,
    /// Its facet values (as numbers; for every item or for none).
    pub facets: Vec<Vec<u32>>,
    /// The share of the users who had it that had it among their latest fifth of items
    /// ([`late_shares`]).
    pub late: Vec<f32>,
    /// The item × item models over the most popular items.
    pub models: Models,
}

/// An item row past the known ones reads as an item without any event.
impl Lists {
    pub fn related(&self, i: u32) -> &[(u32, f32)] {
        self.related.get(i as usize).map_or(&[], Vec::as_slice)
    }

    pub fn next(&self, i: u32) -> &[(u32, f32)] {
        self.next.get(i as usize).map_or(&[], Vec::as_slice)
    }

    pub fn popularity(&self, i: u32) -> f32 {
        self.popularity.get(i as usize).copied().unwrap_or(0.0)
    }

    pub fn days(&self, i: u32) -> (i64, i64) {
        self.item_days
            .get(i as usize)
            .copied()
            .unwrap_or((i64::MAX, i64::MIN))
    }

    pub fn facets(&self, i: u32) -> &[u32] {
        self.facets.get(i as usize).map_or(&[], Vec::as_slice)
    }

    pub fn late(&self, i: u32) -> f32 {
        self.late.get(i as usize).copied().unwrap_or(0.0)
    }
}

/// The most items the item × item models cover (the most popular): their solves cost `O(n³)`
/// and `n²` floats each (~1 s and 16 MB at 2,000).
pub const MODELLED_ITEMS: usize = 2_000;

/// EASE's ridge ([`penchant_vectors::regression::ease`]).
const EASE_LAMBDA: f64 = 200.0;

/// The sequence model: the next 20 items regressed on the last 20.
const SEQUENCE: SequenceConfig = SequenceConfig {
    past: 20,
    next: 20,
    decay: RECENCY as f64,
    lambda: 3_000.0,
};

/// A user's latest items the models read (of a bot's tens of thousands, the newest).
const MODEL_READS: usize = 200;

/// Each of a user's items, counted back from the newest (`k`), weighs `RECENCY^k` in the
/// models' recency-weighted readings.
const RECENCY: f32 = 0.9;

/// Linear item × item models over the [`MODELLED_ITEMS`] most popular items
/// ([`penchant_vectors::regression`]): EASE (what users' other items say of one) and a sequence
/// model (what their last items say of the next ones). Items past them score 0.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Models {
    /// The item rows modelled, by column.
    pub rows: Vec<u32>,
    /// EASE's weights, `columns × columns` row-major.
    pub ease: Vec<f32>,
    /// The sequence model's.
    pub next: Vec<f32>,
    /// Per item row, its column (`u32::MAX`: not modelled).
    columns: Vec<u32>,
}

impl Models {
    /// Solved from each user's items (newest first, distinct) over the most popular of
    /// `items` item rows (users who had them; ties: the lower row).
    fn learned(items: usize, recent: &[Vec<u32>]) -> Self {
        let mut users = vec![0u32; items];
        for list in recent {
            list.iter().for_each(|&i| users[i as usize] += 1);
        }
        let mut rows: Vec<u32> = (0..items as u32)
            .filter(|&i| users[i as usize] > 0)
            .collect();
        rows.sort_by(|&a, &b| users[b as usize].cmp(&users[a as usize]).then(a.cmp(&b)));
        rows.truncate(MODELLED_ITEMS);
        rows.sort_unstable();
        let models = Self::from_parts(rows, Vec::new(), Vec::new());
        let columns = |list: &[u32]| -> Vec<u32> {
            list.iter()
                .filter_map(|&i| models.column(i).map(|c| c as u32))
                .collect()
        };
        let latest: Vec<Vec<u32>> = recent
            .iter()
            .map(|list| columns(&list[..list.len().min(MODEL_READS)]))
            .collect();
        let sequences: Vec<Vec<u32>> = latest
            .iter()
            .map(|newest_first| newest_first.iter().rev().copied().collect())
            .collect();
        let n = models.rows.len();
        // The two solves side by side.
        let (ease, next) = std::thread::scope(|scope| {
            let ease = scope.spawn(|| regression::ease(n, &latest, EASE_LAMBDA));
            let next = regression::sequence(n, &sequences, &SEQUENCE);
            (ease.join().expect("the EASE solve"), next)
        });
        Self {
            ease,
            next,
            ..models
        }
    }

    /// Models over item rows `rows` (sorted) with their weights (`rows² ` each, or none).
    pub fn from_parts(rows: Vec<u32>, ease: Vec<f32>, next: Vec<f32>) -> Self {
        let size = rows.last().map_or(0, |&r| r as usize + 1);
        let mut columns = vec![u32::MAX; size];
        for (c, &i) in rows.iter().enumerate() {
            columns[i as usize] = c as u32;
        }
        Self {
            rows,
            ease,
            next,
            columns,
        }
    }

    fn column(&self, i: u32) -> Option<usize> {
        match self.columns.get(i as usize) {
            Some(&c) if c != u32::MAX => Some(c as usize),
            _ => None,
        }
    }

    /// A user's scores of every column from their items `recent` (newest first): EASE's
    /// over the latest [`MODEL_READS`], the same weighted by recency, and the sequence model's
    /// over the last [`SEQUENCE`]`.past` weighted by recency. None without weights.
    fn scores(&self, recent: &[u32]) -> Option<[Vec<f32>; 3]> {
        let n = self.rows.len();
        if n == 0 || self.ease.len() != n * n || self.next.len() != n * n {
            return None;
        }
        let mut out = [vec![0.0f32; n], vec![0.0f32; n], vec![0.0f32; n]];
        let mut weight = 1.0f32;
        for (k, &i) in recent.iter().take(MODEL_READS).enumerate() {
            if let Some(c) = self.column(i) {
                let ease = &self.ease[c * n..(c + 1) * n];
                axpy(1.0, ease, &mut out[0]);
                axpy(weight, ease, &mut out[1]);
                if k < SEQUENCE.past {
                    axpy(weight, &self.next[c * n..(c + 1) * n], &mut out[2]);
                }
            }
            weight *= RECENCY;
        }
        Some(out)
    }
}

/// Per item row: of the users who had it, the share that had it among their latest fifth of
/// items (rounded up) — items of the moment against items of the past, as each user's own
/// timeline tells.
fn late_shares(items: usize, recent: &[Vec<u32>]) -> Vec<f32> {
    let (mut late, mut had) = (vec![0.0f32; items], vec![0.0f32; items]);
    for newest_first in recent {
        let cut = newest_first.len().div_ceil(5);
        for (k, &i) in newest_first.iter().enumerate() {
            had[i as usize] += 1.0;
            if k < cut {
                late[i as usize] += 1.0;
            }
        }
    }
    late.iter_mut()
        .zip(had)
        .for_each(|(l, h)| *l = if h > 0.0 { *l / h } else { 0.0 });
    late
}

/// Per user row: the items of its `events` (time-ordered), newest first, each once. Linear in
/// the events, however many one user has (a bot's tens of thousands included).
fn newest_distinct(users: usize, items: usize, events: &[(u32, u32, f32)]) -> Vec<Vec<u32>> {
    // The events' indexes grouped by user, in time order (a counting sort).
    let mut starts = vec![0usize; users + 1];
    for &(u, ..) in events {
        starts[u as usize + 1] += 1;
    }
    for u in 0..users {
        starts[u + 1] += starts[u];
    }
    let mut next = starts.clone();
    let mut order = vec![0u32; events.len()];
    for (e, &(u, ..)) in events.iter().enumerate() {
        order[next[u as usize]] = e as u32;
        next[u as usize] += 1;
    }
    // Per item row, the last user row that took it (so each user takes an item once).
    let mut taken_by = vec![u32::MAX; items];
    (0..users)
        .map(|u| {
            let mut recent = Vec::new();
            for &e in order[starts[u]..starts[u + 1]].iter().rev() {
                let i = events[e as usize].1;
                if taken_by[i as usize] != u as u32 {
                    taken_by[i as usize] = u as u32;
                    recent.push(i);
                }
            }
            recent
        })
        .collect()
}

/// Items had after another within this many of a user's next distinct items count as its
/// followers.
const NEXT_WINDOW: usize = 5;

/// Per item row `a`: the items users had within [`NEXT_WINDOW`] of their next distinct items
/// after `a` (the nearer, the more: `1 / distance`), as a share of all of `a`'s followers, by
/// item row.
fn transitions(items: usize, recent: &[Vec<u32>]) -> Vec<Vec<(u32, f32)>> {
    // Where each item row stands in users' sequences (oldest first): (user row, place), in
    // user then place order — the order the followers are summed in.
    let mut at: Vec<Vec<(u32, u32)>> = vec![Vec::new(); items];
    for (u, newest_first) in recent.iter().enumerate() {
        for (p, &a) in newest_first.iter().rev().enumerate() {
            at[a as usize].push((u as u32, p as u32));
        }
    }
    // Followers' weights by item row (dense), and the rows weighed, to read and reset them.
    let mut weights = vec![0.0f32; items];
    let mut weighed: Vec<u32> = Vec::new();
    at.into_iter()
        .map(|places| {
            for (u, p) in places {
                let newest_first = &recent[u as usize];
                // The items after place `p`, oldest first: newest_first[..n - 1 - p], reversed.
                let after = &newest_first[..newest_first.len() - 1 - p as usize];
                for (d, &b) in after.iter().rev().take(NEXT_WINDOW).enumerate() {
                    let w = &mut weights[b as usize];
                    if *w == 0.0 {
                        weighed.push(b);
                    }
                    *w += 1.0 / (d + 1) as f32;
                }
            }
            weighed.sort_unstable();
            let mut list: Vec<(u32, f32)> = weighed
                .drain(..)
                .map(|b| (b, std::mem::take(&mut weights[b as usize])))
                .collect();
            // Summed in item order, so the shares do not depend on the users' order.
            let total: f32 = list.iter().map(|(_, w)| w).sum();
            list.iter_mut().for_each(|(_, w)| *w /= total);
            list
        })
        .collect()
}

/// The sources whose candidates a learned ranker orders (popularity's besides), in the
/// order [`Offline::ranking_rows`] asks them.
pub fn candidate_sources() -> [Source; 4] {
    let space = || "als".to_owned();
    [
        Source::Als {
            space: space(),
            weight: 1.0,
        },
        Source::SimilarToLiked {
            space: space(),
            last: LIKED,
            weight: 1.0,
        },
        Source::Related {
            last: LIKED,
            weight: 1.0,
        },
        Source::Trending { weight: 1.0 },
    ]
}

/// What a learned ranker knows of a user and a candidate, in the order of
/// [`Offline::ranking_rows`]'s rows. Sources' scores are for this user, raw and over the
/// source's best for the user (`-of-best`); `blend` is the sum of those three, the hand blend
/// `als + similar-to-liked + related`; days are counted back from the user's last training
/// event. The item × item models' scores ([`Models`]) are raw and over their best for the
/// user among the items they have not had.
pub const FEATURES: [&str; 31] = [
    "blend",
    "als-of-best",
    "similar-to-liked-of-best",
    "related-of-best",
    "als",
    "similar-to-liked",
    "similar-to-last",
    "similar-to-last-3",
    "related",
    "related-to-last-3",
    "next-after-last-3",
    "trending",
    "popularity",
    "item-age-days",
    "item-idle-days",
    "user-items",
    "user-popularity",
    "als-place",
    "related-place",
    "trending-place",
    "sources",
    "facet-affinity",
    "facet-affinity-best",
    "ease",
    "ease-recent",
    "sequence",
    "ease-of-best",
    "ease-recent-of-best",
    "sequence-of-best",
    "next-after-last-10",
    "late-share",
];

impl<'a> Offline<'a> {
    /// `train_events`: the training triples in time order, with their times.
    pub fn new(
        train: &'a Interactions,
        factors: &'a Factors,
        train_events: &'a [(u32, u32, f32)],
        train_at: &[i64],
    ) -> Self {
        let recent = newest_distinct(train.users(), train.items(), train_events);
        let days: Vec<i64> = train_at.iter().map(|t| t.div_euclid(DAY_MS)).collect();
        let mut last_day = vec![i64::MIN; train.users()];
        for (&(u, ..), &day) in train_events.iter().zip(&days) {
            last_day[u as usize] = last_day[u as usize].max(day);
        }
        let related = co_interaction(train.items(), &recent);
        let next = transitions(train.items(), &recent);
        let late = late_shares(train.items(), &recent);
        let models = Models::learned(train.items(), &recent);
        let popularity = (0..train.items())
            .map(|i| (1.0 + train.item_users(i).0.len() as f32).ln())
            .collect();
        let mut item_days = vec![(i64::MAX, i64::MIN); train.items()];
        for (&(_, i, _), &day) in train_events.iter().zip(&days) {
            let (first, last) = &mut item_days[i as usize];
            *first = (*first).min(day);
            *last = (*last).max(day);
        }
        Self {
            train,
            factors,
            recent,
            last_day,
            events: train_events,
            days,
            trending: Mutex::new(HashMap::new()),
            lists: Lists {
                related,
                next,
                popularity,
                item_days,
                facets: Vec::new(),
                late,
                models,
            },
            popular_rows: std::sync::OnceLock::new(),
            graph: Graph::above(SCANNED_ROWS),
            affinity: Vec::new(),
        }
    }

    /// Searches the ALS and similar-to-liked sources through a graph of the item factors when
    /// they have more than `rows` rows (default [`SCANNED_ROWS`]), else scans them.
    pub fn searched_above(self, rows: usize) -> Self {
        self.with_graph(Graph::above(rows))
    }

    /// Searches through `graph`, which must be (or become) the graph of these item factors:
    /// that of another split with the same ones, built once for both.
    pub fn with_graph(mut self, graph: Graph) -> Self {
        self.graph = graph;
        self
    }

    /// The items' facet values (per item row, as numbers; an item without any has none), for
    /// the features of the user's affinity to a candidate's values: per user, each value's
    /// share of the weight of the user's training events (as a profile counts them, by facet
    /// value).
    pub fn with_facets(mut self, item_facets: Vec<Vec<u32>>) -> Self {
        let mut affinity: Vec<HashMap<u32, f32>> = vec![HashMap::new(); self.train.users()];
        let mut totals = vec![0.0f32; self.train.users()];
        for &(u, i, w) in self.events {
            let facets = item_facets.get(i as usize).map_or(&[][..], Vec::as_slice);
            add_affinity(
                &mut affinity[u as usize],
                &mut totals[u as usize],
                facets,
                w,
            );
        }
        for (values, total) in affinity.iter_mut().zip(totals) {
            share_of(values, total);
        }
        self.lists.facets = item_facets;
        self.affinity = affinity;
        self
    }

    /// The candidates a learned ranker orders for user row `u` — the best `per_source` items of
    /// each source (ALS, similar-to-liked and related over the last 10 items, trending,
    /// popularity), none of the user's training items — and one row of [`FEATURES`] for each,
    /// appended to `rows`.
    pub fn ranking_rows(&self, u: usize, per_source: usize, rows: &mut Vec<f32>) -> Vec<u32> {
        rows_of(self, &self.user(u), per_source, None, rows)
    }

    /// One row of [`FEATURES`] for each of `items` (item rows, e.g. what an answer served), as
    /// [`Offline::ranking_rows`] computes them: an item no source proposes has no source.
    pub fn rows_for(&self, u: usize, per_source: usize, items: &[u32], rows: &mut Vec<f32>) {
        rows_of(self, &self.user(u), per_source, Some(items), rows);
    }

    /// User row `u` as the features read it.
    fn user(&self, u: usize) -> UserSide<'_> {
        UserSide {
            seen: self.train.user_items(u).0,
            recent: &self.recent[u],
            vector: self.factors.users.row(u),
            today: self.today(u),
            affinity: self.affinity.get(u),
        }
    }

    /// The day user row `u` stands at: that of the user's last training event, else (a user
    /// without any) the last day of the training.
    fn today(&self, u: usize) -> i64 {
        match self.last_day[u] {
            i64::MIN => self.days.last().copied().unwrap_or(0),
            day => day,
        }
    }

    /// Item rows by popularity, best first (computed once).
    fn popular_rows(&self) -> &[u32] {
        self.popular_rows.get_or_init(|| self.popular())
    }

    /// Trending as of the end of `today`: the window's events by their weight, each day
    /// halved every half-life (computed once per day asked).
    fn trending(&self, today: i64) -> Arc<Trend> {
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
                let best = ranked.first().map_or(1.0, |(_, s)| *s);
                let mut of = vec![(0.0, ranked.len() as u32); self.train.items()];
                for (place, &(i, score)) in ranked.iter().enumerate() {
                    of[i as usize] = (score / best, place as u32);
                }
                Arc::new(Trend { ranked, of })
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
            let items = source_of(self, &self.user(u), source, POOL);
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
}

/// The item side of an [`Offline`], owned: what a learned ranker serves from
/// (the engine's `recommend::serving`). Trending is the last day's, whatever day a user stands at.
#[derive(Debug, Clone, PartialEq)]
pub struct Items {
    pub vectors: Matrix,
    pub lists: Lists,
    pub popular: Vec<u32>,
    pub trend: Arc<Trend>,
    /// The day of the last event.
    pub day: i64,
    pub graph: Graph,
}

impl Offline<'_> {
    /// Its item side, as of its last event's day.
    pub fn items(&self) -> Items {
        let day = self.days.last().copied().unwrap_or(0);
        Items {
            vectors: self.factors.items.clone(),
            lists: self.lists.clone(),
            popular: self.popular_rows().to_vec(),
            trend: self.trending(day),
            day,
            graph: self.graph.clone(),
        }
    }
}

impl ItemSide for Items {
    fn vectors(&self) -> &Matrix {
        &self.vectors
    }

    fn lists(&self) -> &Lists {
        &self.lists
    }

    fn popular(&self) -> &[u32] {
        &self.popular
    }

    fn trend(&self, _today: i64) -> Arc<Trend> {
        self.trend.clone()
    }

    fn graph(&self) -> Option<&Hnsw> {
        self.graph.of(&self.vectors)
    }
}

impl ItemSide for Offline<'_> {
    fn vectors(&self) -> &Matrix {
        &self.factors.items
    }

    fn lists(&self) -> &Lists {
        &self.lists
    }

    fn popular(&self) -> &[u32] {
        self.popular_rows()
    }

    fn trend(&self, today: i64) -> Arc<Trend> {
        self.trending(today)
    }

    fn graph(&self) -> Option<&Hnsw> {
        self.graph.of(&self.factors.items)
    }
}

/// Item factors with more rows than this are searched through an HNSW graph by the ALS and
/// similar-to-liked sources of the features ([`Graph`]); fewer are scanned. Past the caches a
/// scan is bound by memory bandwidth: ~0.6 ms for ~45,000 rows of 64 floats (two per user,
/// measured), ~15 ms at 10^6; a search keeping 128 rows costs a few tenths of a millisecond
/// whatever the catalog.
pub const SCANNED_ROWS: usize = 20_000;

/// Rows a graph search keeps (at least the candidates asked for): the vector spaces'
/// serving default.
const SEARCH_EF: usize = 128;

/// The HNSW graph ([`penchant_vectors::Hnsw`], dot product) of a side's item factors, built on
/// first use if they have more than its bound of rows (else none: they are scanned). Clones
/// share one graph, built once for all: give a clone only to a side with the same factors.
/// Two compare equal whatever they hold (each is the graph of the factors beside it).
#[derive(Debug, Clone)]
pub struct Graph {
    above: usize,
    built: Arc<OnceLock<Option<Hnsw>>>,
}

impl Graph {
    pub fn above(rows: usize) -> Self {
        Self {
            above: rows,
            built: Arc::default(),
        }
    }

    /// The graph of `vectors` (built now if not yet), or `None` if they are scanned.
    pub fn of(&self, vectors: &Matrix) -> Option<&Hnsw> {
        self.built
            .get_or_init(|| {
                (vectors.len() > self.above)
                    .then(|| Hnsw::build(vectors, Metric::Dot, HnswConfig::default()))
            })
            .as_ref()
    }
}

impl Default for Graph {
    fn default() -> Self {
        Self::above(SCANNED_ROWS)
    }
}

impl PartialEq for Graph {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// What the features read of the items: a training's own sources ([`Offline`]), or a learned
/// ranker's stored snapshot of them when it serves (the engine's `recommend::serving`). An item row past the
/// known ones (an item the snapshot never saw) reads as an item without any event.
pub trait ItemSide {
    /// The items' ALS factors (the known ones only: what the sources search).
    fn vectors(&self) -> &Matrix;
    /// Each item's lists, counts and facet values.
    fn lists(&self) -> &Lists;
    /// Item rows by popularity, best first.
    fn popular(&self) -> &[u32];
    /// Trending as of the end of `today`.
    fn trend(&self, today: i64) -> Arc<Trend>;
    /// The graph the vectors are searched through, if they are not scanned ([`Graph`]).
    fn graph(&self) -> Option<&Hnsw>;
}

/// One user as the features read it.
#[derive(Debug, Clone, Copy)]
pub struct UserSide<'u> {
    /// The user's item rows, sorted (what no source proposes).
    pub seen: &'u [u32],
    /// The same items, newest first.
    pub recent: &'u [u32],
    /// The user's ALS vector.
    pub vector: &'u [f32],
    /// The day the user stands at (that of their last event).
    pub today: i64,
    /// Each facet value's share of the user's event weight (none: no facet features).
    pub affinity: Option<&'u HashMap<u32, f32>>,
}

/// Each facet value's share of the weight of a user's events `(item row, weight)`, as a
/// profile counts them ([`Offline::with_facets`] for every user at once).
pub fn affinity(
    side: &(impl ItemSide + ?Sized),
    events: impl Iterator<Item = (u32, f32)>,
) -> HashMap<u32, f32> {
    let (mut values, mut total) = (HashMap::new(), 0.0f32);
    for (i, w) in events {
        add_affinity(&mut values, &mut total, side.lists().facets(i), w);
    }
    share_of(&mut values, total);
    values
}

fn add_affinity(values: &mut HashMap<u32, f32>, total: &mut f32, facets: &[u32], w: f32) {
    *total += w.max(0.0);
    for &v in facets {
        *values.entry(v).or_default() += w.max(0.0);
    }
}

fn share_of(values: &mut HashMap<u32, f32>, total: f32) {
    if total > 0.0 {
        values.values_mut().for_each(|a| *a /= total);
    }
}

/// The rows of [`FEATURES`] of `items` for `user`, else of the candidates the sources propose
/// (sorted); returns the items. The one function both training and serving describe a
/// candidate with.
///
/// Each source is computed once and read twice: ALS and similar-to-liked score every item in
/// one pass each ([`Matrix::dots`]) and their best are ranked from those scores — or, past
/// [`SCANNED_ROWS`] items, their best are searched through the side's graph ([`Graph`]) and
/// rescored; the co-interaction sums of the last items make both the related source and the
/// candidates' related scores.
pub fn rows_of(
    side: &(impl ItemSide + ?Sized),
    user: &UserSide<'_>,
    per_source: usize,
    items: Option<&[u32]>,
    rows: &mut Vec<f32>,
) -> Vec<u32> {
    let seen = user.seen;
    let unseen = |i: &u32| seen.binary_search(i).is_err();
    let pool = per_source + seen.len();
    let factors = side.vectors();
    let dot = penchant_vectors::kernels::dot;
    let recent = user.recent;
    let liked = &recent[..recent.len().min(LIKED)];

    // The sources, as `source_of` gives them: each one's best score over every item but
    // those it leaves out (what a blend divides its scores by) and its best `per_source` items
    // the user has not had.
    let of_list = |best: Ranked| {
        let top = best.first().map(|b| b.1);
        let unseen_best = best.into_iter().filter(|(i, _)| unseen(i));
        (top, unseen_best.take(per_source).collect::<Ranked>())
    };
    let graph = side.graph();
    let liked_mean = liked_mean(factors, liked);
    // Scanned: every item's score for each query (the user's vector, the mean of their
    // liked items) in one pass over the factors; the candidates' own are read from them.
    let queries: Vec<&[f32]> = std::iter::once(user.vector)
        .chain(liked_mean.as_deref())
        .collect();
    let scans = match graph {
        None => factors.dots_many(&queries),
        Some(_) => Vec::new(),
    };
    let by_vector = |query: usize, skip: &dyn Fn(u32) -> bool| match graph {
        // Scanned: the best `pool` (enough to leave the user's items out) ranked from the
        // query's scores.
        None => {
            let best = top_k_of(&scans[query], pool, |i| skip(i as u32));
            of_list(best.into_iter().map(|(i, s)| (i as u32, s)).collect())
        }
        // Searched: the user's items are left out of the search, and counted apart for the
        // best score.
        Some(graph) => {
            let query = queries[query];
            let ef = per_source.max(SEARCH_EF);
            let found = graph.search(factors, query, ef, |r| !unseen(&(r as u32)));
            let rescored = found
                .into_iter()
                .map(|(i, _)| (i as u32, dot(query, factors.row(i))));
            let best = best_of(rescored.collect(), per_source);
            let had = seen
                .iter()
                .filter(|&&i| (i as usize) < factors.len() && !skip(i));
            let top = had
                .map(|&i| dot(query, factors.row(i as usize)))
                .chain(best.first().map(|b| b.1))
                .max_by(f32::total_cmp);
            (top, best)
        }
    };
    // What the user's own lists say of each item they name, in one map (a candidate's is one
    // look-up): first the co-interaction sums of `liked` and of its first three.
    let absent = per_source as u32;
    let blank = Near::blank(absent);
    let mut near = match graph {
        None => Nears::dense(factors.len(), blank),
        Some(_) => Nears::sparse(liked.len() * related::NEIGHBOURS + 6 * per_source, blank),
    };
    for (k, &a) in liked.iter().enumerate() {
        for &(b, s) in side.lists().related(a) {
            let entry = near.entry(b);
            entry.related += s;
            if k < 3 {
                entry.related_last += s;
            }
        }
    }
    let related_sums = near.named().map(|(b, n)| (b, n.related));
    let trend = side.trend(user.today);
    let als_best = by_vector(0, &|_| false);
    let similar_best = match liked_mean {
        Some(_) => by_vector(1, &|i| liked.contains(&i)),
        None => (None, Vec::new()),
    };
    let best: [(Option<f32>, Ranked); 4] = [
        als_best,
        similar_best,
        of_list(best_related(related_sums, liked, pool)),
        of_list(trend.ranked.iter().take(pool).copied().collect()),
    ];

    // Per candidate: how many sources proposed it, and its place in ALS's and related's.
    // Each source's best score for this user (what a blend divides its scores by).
    let mut tops = [1.0f32; 4];
    for (s, (top, unseen_best)) in best.iter().enumerate() {
        tops[s] = top.map_or(1.0, |score| score.abs().max(1e-6));
        for (place, &(i, _)) in unseen_best.iter().enumerate() {
            let entry = near.entry(i);
            entry.sources += 1;
            match s {
                0 => entry.als_place = place as u32,
                2 => entry.related_place = place as u32,
                _ => {}
            }
        }
    }
    for &i in side.popular().iter().filter(|i| unseen(i)).take(per_source) {
        near.entry(i).sources += 1;
    }
    // What others had soon after the user's last three items (the newest counts most).
    let mut followed = Vec::new();
    for (k, &a) in user.recent.iter().take(3).enumerate() {
        for &(b, share) in side.lists().next(a) {
            let entry = near.entry(b);
            if !entry.followed {
                entry.followed = true;
                followed.push(b);
            }
            entry.next += share / (k + 1) as f32;
        }
    }
    let followers = followed
        .into_iter()
        .filter(|b| unseen(b))
        .map(|b| (b, near.get(b).next));
    for (i, _) in best_of(followers.collect(), per_source) {
        near.entry(i).sources += 1;
    }
    // What others had soon after any of the user's last ten, alike.
    for &a in user.recent.iter().take(LIKED) {
        for &(b, share) in side.lists().next(a) {
            near.entry(b).next_10 += share;
        }
    }
    // The models' scores of every modelled item, and their best among those not had.
    let models = &side.lists().models;
    let mut modelled = models.scores(recent);
    let model_tops: [f32; 3] = match &mut modelled {
        // The user's own columns set aside for the best of the others, then put back.
        Some(scores) => scores.each_mut().map(|scores| {
            let had: Vec<(usize, f32)> = seen
                .iter()
                .filter_map(|&i| models.column(i))
                .map(|c| (c, std::mem::replace(&mut scores[c], f32::NEG_INFINITY)))
                .collect();
            let best = scores.iter().copied().fold(0.0f32, f32::max).max(1e-6);
            had.into_iter().for_each(|(c, s)| scores[c] = s);
            best
        }),
        None => [1.0; 3],
    };
    let items: Vec<u32> = match items {
        Some(items) => items.to_vec(),
        None => {
            let proposed = near.named().filter(|(_, n)| n.sources > 0);
            let mut items: Vec<u32> = proposed.map(|(i, _)| i).collect();
            items.sort_unstable();
            items
        }
    };

    // The candidates' vector scores, each query's in one pass (a scan's are read from it).
    let zero = vec![0.0f32; factors.dim()];
    let scores_of = |query: Option<&[f32]>, scanned: Option<&Vec<f32>>| match (query, scanned) {
        (Some(query), Some(all)) => items
            .iter()
            .map(|&i| match all.get(i as usize) {
                Some(&score) => score,
                None => dot(query, &zero),
            })
            .collect(),
        (Some(query), None) => factors.dots_of(query, &items),
        (None, _) => vec![0.0; items.len()],
    };
    let last3 = &liked[..liked.len().min(3)];
    let last3_queries: Vec<&[f32]> = last3
        .iter()
        .map(|&i| match i as usize {
            i if i < factors.len() => factors.row(i),
            _ => &zero,
        })
        .collect();
    let last3_mean = (!last3_queries.is_empty())
        .then(|| penchant_vectors::Matrix::mean_query(Metric::Dot, &last3_queries));
    let als_of = scores_of(Some(user.vector), scans.first());
    let similar_of = scores_of(liked_mean.as_deref(), scans.get(1));
    let last_query = liked.first().map(|&l| match l as usize {
        l if l < factors.len() => factors.row(l),
        _ => &zero,
    });
    // The last item's and the last three's mean (both or neither: `liked` is not empty), in
    // one pass over the candidates' rows.
    let last_queries: Vec<&[f32]> = last_query
        .into_iter()
        .chain(last3_mean.as_deref())
        .collect();
    let mut of_last = factors.dots_many_of(&last_queries, &items).into_iter();
    let mut next_or_zero = || of_last.next().unwrap_or_else(|| vec![0.0; items.len()]);
    let (last_of, last3_of) = (next_or_zero(), next_or_zero());
    let today = user.today;
    let user_items = (1.0 + recent.len() as f32).ln();
    let user_popularity = if recent.is_empty() {
        0.0
    } else {
        recent
            .iter()
            .map(|&i| side.lists().popularity(i))
            .sum::<f32>()
            / recent.len() as f32
    };
    rows.reserve(items.len() * FEATURES.len());
    for (k, &i) in items.iter().enumerate() {
        let near = near.get(i);
        let (first, last) = side.lists().days(i);
        // Never had in training (an item of held-out events only): -1.
        let days = |day: i64| {
            if day == i64::MIN || day == i64::MAX {
                -1.0
            } else {
                (today - day) as f32
            }
        };
        let (trending, trending_place) = trend.of(i);
        // An item past the factors' rows has a zero vector.
        let (als, similar, related) = (als_of[k], similar_of[k], near.related);
        let (als_n, similar_n, related_n) = (als / tops[0], similar / tops[1], related / tops[2]);
        // The user's affinity to the candidate's facet values: mean and best.
        let (mut sum, mut best, mut n) = (0.0f32, 0.0f32, 0usize);
        if let Some(affinity) = user.affinity {
            for v in side.lists().facets(i) {
                let a = affinity.get(v).copied().unwrap_or(0.0);
                sum += a;
                best = best.max(a);
                n += 1;
            }
        }
        let facet_mean = if n == 0 { 0.0 } else { sum / n as f32 };
        let model = |m: usize| match (&modelled, models.column(i)) {
            (Some(scores), Some(c)) => scores[m][c],
            _ => 0.0,
        };
        let (ease, ease_recent, sequence) = (model(0), model(1), model(2));
        rows.extend_from_slice(&[
            als_n + similar_n + related_n,
            als_n,
            similar_n,
            related_n,
            als,
            similar,
            last_of[k],
            last3_of[k],
            related,
            near.related_last,
            near.next,
            trending,
            side.lists().popularity(i),
            days(first),
            days(last),
            user_items,
            user_popularity,
            near.als_place as f32,
            near.related_place as f32,
            trending_place as f32,
            near.sources as f32,
            facet_mean,
            best,
            ease,
            ease_recent,
            sequence,
            ease / model_tops[0],
            ease_recent / model_tops[1],
            sequence / model_tops[2],
            near.next_10,
            side.lists().late(i),
        ]);
    }
    items
}

/// What a user's own lists say of one item ([`rows_of`]): how many sources proposed it and
/// its places in ALS's and related's best (`absent` if not among them), the co-interaction
/// sums of the user's last [`LIKED`] items and of their last three, and what others had soon
/// after the user's last three (the newest counts most, `followed`: named by one) and after
/// any of their last ten.
#[derive(Debug, Clone, Copy)]
struct Near {
    sources: u32,
    als_place: u32,
    related_place: u32,
    related: f32,
    related_last: f32,
    next: f32,
    followed: bool,
    next_10: f32,
    /// Named by one of the lists ([`Nears`]).
    named: bool,
}

impl Near {
    /// An item no list names.
    fn blank(absent: u32) -> Self {
        Self {
            sources: 0,
            als_place: absent,
            related_place: absent,
            related: 0.0,
            related_last: 0.0,
            next: 0.0,
            followed: false,
            next_10: 0.0,
            named: false,
        }
    }
}

/// [`Near`] by item row, `blank` for an item no list names: a table of every item where a
/// request scans every item anyway (at most [`SCANNED_ROWS`]: the table is a fraction of the
/// scan's bytes), else a map of those named.
enum Nears {
    Dense {
        table: Vec<Near>,
        /// The rows named, in the order first named.
        named: Vec<u32>,
        blank: Near,
    },
    Sparse(HashMap<u32, Near>, Near),
}

impl Nears {
    fn dense(items: usize, blank: Near) -> Self {
        Nears::Dense {
            table: vec![blank; items],
            named: Vec::new(),
            blank,
        }
    }

    fn sparse(capacity: usize, blank: Near) -> Self {
        Nears::Sparse(HashMap::with_capacity(capacity), blank)
    }

    /// Item `i`'s, named now if it was not.
    #[inline]
    fn entry(&mut self, i: u32) -> &mut Near {
        match self {
            Nears::Dense {
                table,
                named,
                blank,
            } => {
                let i = i as usize;
                if i >= table.len() {
                    table.resize(i + 1, *blank);
                }
                let near = &mut table[i];
                if !near.named {
                    near.named = true;
                    named.push(i as u32);
                }
                near
            }
            Nears::Sparse(map, blank) => map.entry(i).or_insert(Near {
                named: true,
                ..*blank
            }),
        }
    }

    #[inline]
    fn get(&self, i: u32) -> Near {
        match self {
            Nears::Dense { table, blank, .. } => table.get(i as usize).copied().unwrap_or(*blank),
            Nears::Sparse(map, blank) => map.get(&i).copied().unwrap_or(*blank),
        }
    }

    /// The items named, in no particular order.
    fn named(&self) -> Box<dyn Iterator<Item = (u32, &Near)> + '_> {
        match self {
            Nears::Dense { table, named, .. } => {
                Box::new(named.iter().map(|&i| (i, &table[i as usize])))
            }
            Nears::Sparse(map, _) => Box::new(map.iter().map(|(&i, n)| (i, n))),
        }
    }
}

/// The last items similar-to-liked and related read ([`candidate_sources`]).
const LIKED: usize = 10;

/// The mean of the vectors of `liked` that the factors have (none: `None`), as
/// similar-to-liked queries with it.
fn liked_mean(factors: &Matrix, liked: &[u32]) -> Option<Vec<f32>> {
    let queries: Vec<&[f32]> = liked
        .iter()
        .filter(|&&i| (i as usize) < factors.len())
        .map(|&i| factors.row(i as usize))
        .collect();
    (!queries.is_empty()).then(|| Matrix::mean_query(Metric::Dot, &queries))
}

/// The co-interaction lists of `liked` summed by item.
fn related_sums(side: &(impl ItemSide + ?Sized), liked: &[u32]) -> HashMap<u32, f32> {
    let mut all: HashMap<u32, f32> = HashMap::with_capacity(liked.len() * related::NEIGHBOURS);
    for &a in liked {
        for &(b, s) in side.lists().related(a) {
            *all.entry(b).or_default() += s;
        }
    }
    all
}

/// The related source's best `pool` from the sums of `liked`'s lists (`sums`), `liked` left
/// out.
fn best_related(sums: impl Iterator<Item = (u32, f32)>, liked: &[u32], pool: usize) -> Ranked {
    best_of(sums.filter(|(b, _)| !liked.contains(b)).collect(), pool)
}

/// The best `k` of `scored`, best first (ties: lower item row first): the whole list sorted
/// and cut, without sorting what is cut.
fn best_of(mut scored: Ranked, k: usize) -> Ranked {
    let order = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0));
    if scored.len() > k && k > 0 {
        scored.select_nth_unstable_by(k - 1, order);
    }
    scored.truncate(k);
    scored.sort_unstable_by(order);
    scored
}

/// One source's best `pool` items for `user`, best first.
fn source_of(
    side: &(impl ItemSide + ?Sized),
    user: &UserSide<'_>,
    source: &Source,
    pool: usize,
) -> Vec<(u32, f32)> {
    let rows = |hits: Vec<(usize, f32)>| hits.into_iter().map(|(i, s)| (i as u32, s)).collect();
    let vectors = side.vectors();
    match source {
        Source::Als { .. } => rows(vectors.top_k(Metric::Dot, user.vector, pool, |_| false)),
        Source::SimilarToLiked { last, .. } => {
            let liked = &user.recent[..(*last).min(user.recent.len())];
            let Some(mean) = liked_mean(vectors, liked) else {
                return Vec::new();
            };
            rows(vectors.top_k(Metric::Dot, &mean, pool, |i| liked.contains(&(i as u32))))
        }
        Source::Related { last, .. } => {
            let liked = &user.recent[..(*last).min(user.recent.len())];
            best_related(related_sums(side, liked).into_iter(), liked, pool)
        }
        Source::Trending { .. } => side
            .trend(user.today)
            .ranked
            .iter()
            .take(pool)
            .copied()
            .collect(),
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
    // Counts by item row (dense: a hash map per item was most of the time), and the rows
    // counted, to read and reset them.
    let mut counts = vec![0u32; items];
    let mut counted: Vec<u32> = Vec::new();
    let best_first = |x: &(u32, f32), y: &(u32, f32)| y.1.total_cmp(&x.1).then(x.0.cmp(&y.0));
    for (a, users) in users_of.iter().enumerate() {
        for &u in users {
            for &b in latest(u as usize) {
                if b as usize != a {
                    let n = &mut counts[b as usize];
                    if *n == 0 {
                        counted.push(b);
                    }
                    *n += 1;
                }
            }
        }
        let n_a = users.len() as f32;
        let mut list: Vec<(u32, f32)> = counted
            .drain(..)
            .map(|b| {
                let n = std::mem::take(&mut counts[b as usize]);
                (
                    b,
                    n as f32 / (n_a * users_of[b as usize].len() as f32).sqrt(),
                )
            })
            .collect();
        if list.len() > related::NEIGHBOURS {
            list.select_nth_unstable_by(related::NEIGHBOURS, best_first);
            list.truncate(related::NEIGHBOURS);
        }
        list.sort_by(best_first);
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

    /// Users' items in a seeded random order: some with none, one with many repeats.
    fn sequences() -> (usize, Vec<(u32, u32, f32)>) {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        // Enough items that co-interaction lists hold more than they keep.
        let (users, items) = (40u32, 150u32);
        let mut events: Vec<(u32, u32, f32)> = (0..3000)
            .map(|_| (rng.random_range(1..users), rng.random_range(0..items), 1.0))
            .collect();
        events.extend((0..400).map(|_| (7, rng.random_range(0..items), 1.0)));
        (items as usize, events)
    }

    #[test]
    fn lists_match_their_definitions_computed_the_plain_way() {
        let (items, events) = sequences();
        let users = 40;
        // Newest first, each item once.
        let mut recent: Vec<Vec<u32>> = vec![Vec::new(); users];
        for &(u, i, _) in events.iter().rev() {
            if !recent[u as usize].contains(&i) {
                recent[u as usize].push(i);
            }
        }
        assert_eq!(newest_distinct(users, items, &events), recent);
        assert!(recent[0].is_empty());
        assert!(recent[7].len() > related::MAX_ITEMS_PER_USER);
        // Followers within the window, summed per item pair in users' then places' order.
        let mut next: Vec<HashMap<u32, f32>> = vec![HashMap::new(); items];
        for newest_first in &recent {
            let seq: Vec<u32> = newest_first.iter().rev().copied().collect();
            for (p, &a) in seq.iter().enumerate() {
                for (d, &b) in seq[p + 1..].iter().take(NEXT_WINDOW).enumerate() {
                    *next[a as usize].entry(b).or_default() += 1.0 / (d + 1) as f32;
                }
            }
        }
        let plain: Vec<Vec<(u32, f32)>> = next
            .into_iter()
            .map(|followers| {
                let mut list: Vec<(u32, f32)> = followers.into_iter().collect();
                list.sort_unstable_by_key(|(b, _)| *b);
                let total: f32 = list.iter().map(|(_, w)| w).sum();
                list.iter_mut().for_each(|(_, w)| *w /= total);
                list
            })
            .collect();
        assert_eq!(transitions(items, &recent), plain);
        // Co-interaction: pairs among each user's latest items, the best of each item.
        let lists = co_interaction(items, &recent);
        let mut longest = 0;
        let latest = |u: usize| &recent[u][..recent[u].len().min(related::MAX_ITEMS_PER_USER)];
        let had = |i: u32| (0..users).filter(|&u| latest(u).contains(&i)).count() as f32;
        for (a, list) in lists.iter().enumerate() {
            let mut plain: Vec<(u32, f32)> = (0..items as u32)
                .filter(|&b| b as usize != a)
                .filter_map(|b| {
                    let n = (0..users)
                        .filter(|&u| latest(u).contains(&(a as u32)) && latest(u).contains(&b))
                        .count();
                    (n > 0).then(|| (b, n as f32 / (had(a as u32) * had(b)).sqrt()))
                })
                .collect();
            plain.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.cmp(&y.0)));
            let kept = plain.len().min(related::NEIGHBOURS);
            longest = longest.max(plain.len());
            plain.truncate(kept);
            assert_eq!(list, &plain, "item {a}");
        }
        assert!(longest > related::NEIGHBOURS, "{longest}");
        // Late shares: of the users who had an item, those who had it in their latest fifth.
        let shares = late_shares(items, &recent);
        for i in 0..items as u32 {
            let had: Vec<&Vec<u32>> = recent.iter().filter(|r| r.contains(&i)).collect();
            let late = had
                .iter()
                .filter(|r| r.iter().position(|&j| j == i).unwrap() < r.len().div_ceil(5))
                .count();
            let expected = if had.is_empty() {
                0.0
            } else {
                late as f32 / had.len() as f32
            };
            assert_eq!(shares[i as usize], expected, "item {i}");
        }
    }

    /// The models cover the most popular items, and a user's scores are the sums of their
    /// items' rows: all of the latest, by recency, and the last ones' for the sequence model.
    #[test]
    fn the_models_score_a_user_by_the_rows_of_their_items() {
        let (items, events) = sequences();
        let recent = newest_distinct(40, items, &events);
        let models = Models::learned(items, &recent);
        let n = models.rows.len();
        assert_eq!(n, items.min(MODELLED_ITEMS));
        assert_eq!((models.ease.len(), models.next.len()), (n * n, n * n));
        assert!(models.ease.iter().any(|&w| w != 0.0) && models.next.iter().any(|&w| w != 0.0));
        let user = &recent[7];
        let [ease, by_recency, sequence] = models.scores(user).unwrap();
        for (c, &i) in models.rows.iter().enumerate().step_by(7) {
            let (mut e, mut r, mut q) = (0.0f64, 0.0f64, 0.0f64);
            for (k, &a) in user.iter().take(MODEL_READS).enumerate() {
                let row = models.column(a).unwrap();
                let w = f64::from(RECENCY).powi(k as i32);
                e += f64::from(models.ease[row * n + c]);
                r += w * f64::from(models.ease[row * n + c]);
                if k < SEQUENCE.past {
                    q += w * f64::from(models.next[row * n + c]);
                }
            }
            for (got, want) in [(ease[c], e), (by_recency[c], r), (sequence[c], q)] {
                assert!(
                    (f64::from(got) - want).abs() < 1e-4,
                    "item {i}: {got} {want}"
                );
            }
        }
        // An item past the models scores nothing; models without weights give no scores.
        assert_eq!(models.column(items as u32), None);
        let bare = Models::from_parts(models.rows.clone(), Vec::new(), Vec::new());
        assert!(bare.scores(user).is_none());
    }

    #[test]
    fn a_user_without_training_events_stands_at_the_trainings_last_day() {
        let (_, factors, events, at) = shop();
        let train = Interactions::from_triples(4, 4, events.iter().copied());
        let users = matrix(&[&[1.0, 0.0], &[0.0, 1.0], &[1.0, 1.0], &[0.0, 0.0]]);
        let factors = Factors {
            users,
            items: factors.items,
        };
        let offline = Offline::new(&train, &factors, &events, &at);
        let mut rows = Vec::new();
        offline.rows_for(3, 10, &[1, 2], &mut rows);
        assert_eq!(rows.len(), 2 * FEATURES.len());
        // As of day 21, item 1 trends most (twice in the week).
        let trending = FEATURES.iter().position(|f| *f == "trending").unwrap();
        assert_eq!(rows[trending], 1.0);
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
        let ids: Vec<u32> = offline
            .trending(21)
            .ranked
            .iter()
            .map(|(i, _)| *i)
            .collect();
        assert_eq!(ids[0], 1);
        assert!(!ids.contains(&3), "{ids:?}");
        assert_eq!(
            offline
                .trending(0)
                .ranked
                .iter()
                .map(|(i, _)| *i)
                .collect::<Vec<_>>(),
            vec![3]
        );
        // Related: 1 was had with 0 (user 0) and with 2 (user 1).
        let related: Vec<u32> = offline.lists.related[1].iter().map(|(i, _)| *i).collect();
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

    #[test]
    fn a_searched_catalog_gives_the_scanned_rows() {
        // 120 items (fewer than a search keeps: it finds them all), 40 users with 1 to 100
        // events (a heavy one has had most of the catalog).
        let (events, _) = penchant_vectors::synthetic::planted(40, 120, 4, 1_500, 3);
        let mut events: Vec<(u32, u32, f32)> =
            events.iter().map(|&(u, i, w, _)| (u, i, w)).collect();
        events.extend((0..100).map(|i| (0, i, 1.0)));
        let at: Vec<i64> = (0..events.len() as i64).map(|n| n * DAY_MS / 50).collect();
        let train = Interactions::from_triples(40, 120, events.iter().copied());
        let config = penchant_vectors::als::AlsConfig {
            factors: 8,
            ..Default::default()
        };
        let factors = penchant_vectors::als::train(&train, &config, |_| true).unwrap();
        let scanned = Offline::new(&train, &factors, &events, &at);
        let searched = Offline::new(&train, &factors, &events, &at).searched_above(0);
        assert!(scanned.graph().is_none() && searched.graph().is_some());
        for u in 0..40 {
            for per_source in [5, 100] {
                let (mut a, mut b) = (Vec::new(), Vec::new());
                let items = scanned.ranking_rows(u, per_source, &mut a);
                assert_eq!(
                    searched.ranking_rows(u, per_source, &mut b),
                    items,
                    "user {u}"
                );
                let bits = |rows: &[f32]| rows.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&a), bits(&b), "user {u}, {per_source} per source");
            }
        }
        // The served side holds the same graph.
        assert!(searched.items().graph().is_some());
    }
}
