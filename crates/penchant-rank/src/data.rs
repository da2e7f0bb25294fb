//! Queries of labelled feature rows, and their features cut into bins for training.

use std::ops::Range;

/// Queries of candidates: each candidate a row of features and a relevance label.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Dataset {
    features: usize,
    values: Vec<f32>,
    labels: Vec<f32>,
    /// Where each query's rows start; the last entry is the number of rows.
    offsets: Vec<usize>,
}

impl Dataset {
    /// An empty dataset of rows with `features` features.
    pub fn new(features: usize) -> Self {
        Self {
            features,
            values: Vec::new(),
            labels: Vec::new(),
            offsets: vec![0],
        }
    }

    /// Add one query: its candidates' features and labels. A row shorter than the dataset's
    /// features is padded with zeros, a longer one cut; a value that is not finite counts as 0.
    pub fn push_query<'a>(&mut self, rows: impl IntoIterator<Item = (&'a [f32], f32)>) {
        for (row, label) in rows {
            let at = self.values.len();
            self.values.resize(at + self.features, 0.0);
            for (slot, &v) in self.values[at..].iter_mut().zip(row) {
                *slot = if v.is_finite() { v } else { 0.0 };
            }
            self.labels
                .push(if label.is_finite() { label } else { 0.0 });
        }
        if self.labels.len() > *self.offsets.last().unwrap_or(&0) {
            self.offsets.push(self.labels.len());
        }
    }

    pub fn features(&self) -> usize {
        self.features
    }

    pub fn rows(&self) -> usize {
        self.labels.len()
    }

    pub fn queries(&self) -> usize {
        self.offsets.len() - 1
    }

    /// The rows of query `q`.
    pub fn query(&self, q: usize) -> Range<usize> {
        self.offsets[q]..self.offsets[q + 1]
    }

    pub fn row(&self, r: usize) -> &[f32] {
        &self.values[r * self.features..(r + 1) * self.features]
    }

    pub fn label(&self, r: usize) -> f32 {
        self.labels[r]
    }

    pub fn labels(&self) -> &[f32] {
        &self.labels
    }
}

/// The most bins a feature is cut into.
pub(crate) const MAX_BINS: usize = 256;
/// Values per feature the cut points are chosen from.
const SAMPLE: usize = 200_000;

/// A dataset's features as bin numbers (column-major: a feature's bins are together, which a
/// histogram build reads one feature at a time), with each feature's cut points: bin `b`
/// holds the values in `(cuts[b - 1], cuts[b]]`, so a split after bin `b` sends `v <= cuts[b]`
/// left — a threshold on values a model keeps without the bins.
#[derive(Debug)]
pub(crate) struct Binned {
    pub features: usize,
    pub rows: usize,
    pub bins: Vec<u8>,
    pub cuts: Vec<Vec<f32>>,
}

impl Binned {
    pub fn new(data: &Dataset) -> Self {
        let (features, rows) = (data.features(), data.rows());
        let step = rows.div_ceil(SAMPLE).max(1);
        let cuts: Vec<Vec<f32>> = (0..features)
            .map(|f| {
                let mut values: Vec<f32> =
                    (0..rows).step_by(step).map(|r| data.row(r)[f]).collect();
                values.sort_by(f32::total_cmp);
                cut_points(&values)
            })
            .collect();
        let mut bins = vec![0u8; rows * features];
        for r in 0..rows {
            for (f, v) in data.row(r).iter().enumerate() {
                let b = cuts[f]
                    .partition_point(|c| c < v)
                    .min(cuts[f].len().saturating_sub(1));
                bins[f * rows + r] = b as u8;
            }
        }
        Self {
            features,
            rows,
            bins,
            cuts,
        }
    }

    /// Every row's bin of feature `f`.
    pub fn column(&self, f: usize) -> &[u8] {
        &self.bins[f * self.rows..(f + 1) * self.rows]
    }
}

/// At most [`MAX_BINS`] cut points for sorted values: each distinct value when there are few,
/// else quantiles; the last is the largest value.
fn cut_points(sorted: &[f32]) -> Vec<f32> {
    let mut distinct = sorted.to_vec();
    distinct.dedup();
    if distinct.len() <= MAX_BINS {
        return distinct;
    }
    let n = sorted.len();
    let mut cuts: Vec<f32> = (1..=MAX_BINS)
        .map(|k| sorted[k * n / MAX_BINS - 1])
        .collect();
    cuts.dedup();
    cuts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_queries_and_bins() {
        let mut data = Dataset::new(2);
        data.push_query([(&[1.0f32, f32::NAN][..], 1.0), (&[3.0][..], 0.0)]);
        data.push_query(std::iter::empty());
        data.push_query([(&[2.0f32, 5.0, 9.0][..], 2.0)]);
        assert_eq!(data.queries(), 2);
        assert_eq!(data.query(1), 2..3);
        assert_eq!(data.row(0), &[1.0, 0.0]);
        assert_eq!(data.row(1), &[3.0, 0.0]);
        assert_eq!(data.row(2), &[2.0, 5.0]);
        let binned = Binned::new(&data);
        assert_eq!(binned.cuts[0], vec![1.0, 2.0, 3.0]);
        assert_eq!(binned.column(0), &[0, 2, 1]);
        assert_eq!(binned.column(1), &[0, 0, 1]);
    }

    #[test]
    fn many_values_are_cut_at_quantiles() {
        let values: Vec<f32> = (0..10_000).map(|v| v as f32).collect();
        let cuts = cut_points(&values);
        assert_eq!(cuts.len(), MAX_BINS);
        assert_eq!(*cuts.last().unwrap(), 9_999.0);
        assert!(cuts.windows(2).all(|w| w[0] < w[1]));
    }
}
