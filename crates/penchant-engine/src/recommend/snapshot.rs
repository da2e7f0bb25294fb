//! The item side a learned ranker serves from ([`Snapshot`]), and its binary form: what the
//! ranker job ([`super::ranker`]) stores beside the model it learned, and serving
//! ([`super::serving`]) reads back.

use std::sync::Arc;

use penchant_vectors::Matrix;
use penchant_vectors::als::AlsConfig;

use crate::vectors::training::Weights;
use penchant_learn::offline::{Graph, Items, Lists, Models, Trend};

/// The encoding's version, first in the body.
const FORMAT: u32 = 2;

/// What a learned ranker serves from: the item side of the history it ranked, with the
/// objectIDs of its item rows.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub(crate) ids: Vec<String>,
    pub(crate) items: Items,
    /// How the history's events were weighed, and its ALS settings (for the fold-in).
    pub(crate) weights: Weights,
    pub(crate) als: AlsConfig,
}

impl Snapshot {
    /// The body's bytes.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Writer::default();
        let items = &self.items;
        out.u32(FORMAT);
        out.u32(self.ids.len() as u32);
        out.u32(items.vectors.dim() as u32);
        out.i64(items.day);
        for id in &self.ids {
            out.bytes(id.as_bytes());
        }
        out.f32s(items.vectors.as_slice());
        let lists = &items.lists;
        out.f32s(&lists.popularity);
        for &(first, last) in &lists.item_days {
            out.i64(first);
            out.i64(last);
        }
        for each in [&lists.related, &lists.next] {
            for list in each {
                out.pairs(list);
            }
        }
        // Facets are given for every item or for none.
        out.u32(u32::from(!lists.facets.is_empty()));
        for values in &lists.facets {
            out.u32s(values);
        }
        out.f32s(&lists.late);
        let models = &lists.models;
        out.u32s(&models.rows);
        for weights in [&models.ease, &models.next] {
            out.u32(weights.len() as u32);
            out.f32s(weights);
        }
        out.u32s(&items.popular);
        out.pairs(&items.trend.ranked);
        for &(score, place) in &items.trend.of {
            out.f32(score);
            out.u32(place);
        }
        out.0
    }

    pub(crate) fn decode(bytes: &[u8], weights: Weights, als: AlsConfig) -> Option<Self> {
        let mut r = Reader(bytes);
        if r.u32()? != FORMAT {
            return None;
        }
        let n = r.u32()? as usize;
        let dim = r.u32()? as usize;
        let day = r.i64()?;
        let ids = (0..n)
            .map(|_| String::from_utf8(r.bytes()?.to_vec()).ok())
            .collect::<Option<Vec<_>>>()?;
        let vectors = Matrix::from_rows(dim, r.f32_n(n * dim)?);
        let popularity = r.f32_n(n)?;
        let item_days = (0..n)
            .map(|_| Some((r.i64()?, r.i64()?)))
            .collect::<Option<Vec<_>>>()?;
        let related = (0..n).map(|_| r.pairs()).collect::<Option<Vec<_>>>()?;
        let next = (0..n).map(|_| r.pairs()).collect::<Option<Vec<_>>>()?;
        let facets = match r.u32()? {
            1 => (0..n).map(|_| r.u32s()).collect::<Option<Vec<_>>>()?,
            _ => Vec::new(),
        };
        let late = r.f32_n(n)?;
        let rows = r.u32s()?;
        if rows.iter().any(|&i| i as usize >= n) || !rows.is_sorted() {
            return None;
        }
        let mut model = || {
            let len = r.u32()? as usize;
            r.f32_n(len)
        };
        let (ease, sequence) = (model()?, model()?);
        let popular = r.u32s()?;
        let ranked = r.pairs()?;
        let of = (0..n)
            .map(|_| Some((r.f32()?, r.u32()?)))
            .collect::<Option<Vec<_>>>()?;
        if !r.0.is_empty() {
            return None;
        }
        Some(Self {
            ids,
            items: Items {
                vectors,
                lists: Lists {
                    related,
                    next,
                    popularity,
                    item_days,
                    facets,
                    late,
                    models: Models::from_parts(rows, ease, sequence),
                },
                popular,
                trend: Arc::new(Trend { ranked, of }),
                day,
                graph: Graph::default(),
            },
            weights,
            als,
        })
    }
}

/// Little-endian numbers and length-prefixed runs.
#[derive(Default)]
struct Writer(Vec<u8>);

impl Writer {
    fn u32(&mut self, x: u32) {
        self.0.extend_from_slice(&x.to_le_bytes());
    }
    fn i64(&mut self, x: i64) {
        self.0.extend_from_slice(&x.to_le_bytes());
    }
    fn f32(&mut self, x: f32) {
        self.0.extend_from_slice(&x.to_le_bytes());
    }
    fn f32s(&mut self, xs: &[f32]) {
        xs.iter().for_each(|&x| self.f32(x));
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.0.extend_from_slice(b);
    }
    fn u32s(&mut self, xs: &[u32]) {
        self.u32(xs.len() as u32);
        xs.iter().for_each(|&x| self.u32(x));
    }
    fn pairs(&mut self, xs: &[(u32, f32)]) {
        self.u32(xs.len() as u32);
        for &(i, s) in xs {
            self.u32(i);
            self.f32(s);
        }
    }
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_le_bytes)
    }
    fn i64(&mut self) -> Option<i64> {
        self.take().map(i64::from_le_bytes)
    }
    fn f32(&mut self) -> Option<f32> {
        self.take().map(f32::from_le_bytes)
    }
    fn f32_n(&mut self, n: usize) -> Option<Vec<f32>> {
        (0..n).map(|_| self.f32()).collect()
    }
    fn bytes(&mut self) -> Option<&[u8]> {
        let n = self.u32()? as usize;
        let (head, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(head)
    }
    fn u32s(&mut self) -> Option<Vec<u32>> {
        let n = self.u32()? as usize;
        (0..n).map(|_| self.u32()).collect()
    }
    fn pairs(&mut self) -> Option<Vec<(u32, f32)>> {
        let n = self.u32()? as usize;
        (0..n).map(|_| Some((self.u32()?, self.f32()?))).collect()
    }
}
