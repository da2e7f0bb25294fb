//! A model's trees laid out to score many rows at once, bit for bit as [`Model::score`] does.
//!
//! Trees of at most 32 leaves (the default is 31) are scored by **QuickScorer** (Lucchese et
//! al., SIGIR 2015), across a block of rows at a time as in its vectorized form (V-QuickScorer):
//! a tree's leaves are numbered left to right, and a row's way through it is a 32-bit vector of
//! the leaves it may still reach. A split whose test a row fails (its value is above the
//! threshold: it goes right) rules out the leaves of the split's left side — an AND with the
//! split's mask — and the row's leaf is then the leftmost one left (the lowest set bit),
//! whatever order the splits were applied in. So the splits of every tree are kept per
//! feature, sorted by threshold: for a block of [`BLOCK`] rows, a feature's splits are applied
//! from the lowest threshold up to the block's largest value and not one further, each one an
//! AND over the block's vectors of one tree (a plain loop the compiler turns into SIMD; with
//! AVX-512 a split's test of 16 rows is one compare into a mask register and its AND one
//! masked instruction). No row walks a tree, no branch waits on a value, and the work stops
//! where the block's values do. The block is first laid out feature by feature (each
//! feature's values and their largest a few vector loads), each tree's vectors on cache lines
//! of their own, and the rows' leaf values are summed side by side, each row's sum in a vector
//! lane rather than read from and written back to memory once per tree. A model with a larger
//! tree is walked instead ([`Walk`]).

use crate::{Model, Node, Tree};

/// A model's trees laid out for scoring many rows at once ([`Forest::score_rows`]).
#[derive(Debug, Clone, Default)]
pub struct Forest {
    features: usize,
    base: Option<(usize, f64)>,
    layout: Layout,
}

#[derive(Debug, Clone)]
enum Layout {
    Quick(Quick),
    Walk(Walk),
}

impl Default for Layout {
    fn default() -> Self {
        Layout::Quick(Quick::default())
    }
}

/// Rows scored together: one leaf vector per tree and row of the block.
const BLOCK: usize = 32;

/// The most leaves of a tree QuickScorer scores: a leaf vector's bits.
const LEAVES: usize = u32::BITS as usize;

impl Forest {
    pub(crate) fn of(model: &Model) -> Self {
        let layout = match Quick::of(model) {
            Some(quick) => Layout::Quick(quick),
            None => Layout::Walk(Walk::of(model)),
        };
        Self {
            features: model.features,
            base: model.base,
            layout,
        }
    }

    /// The scores of many rows (`rows`: the model's `features` values each, one after
    /// another; a partial row at the end is left out), bit for bit those of [`Model::score`]:
    /// the base, then each tree's leaf value added in the trees' order.
    pub fn score_rows(&self, rows: &[f32]) -> Vec<f64> {
        let width = self.features.max(1);
        let mut scores: Vec<f64> = rows
            .chunks_exact(width)
            .map(|row| {
                self.base.map_or(0.0, |(f, w)| {
                    w * f64::from(row.get(f).copied().unwrap_or(0.0))
                })
            })
            .collect();
        let rows = &rows[..scores.len() * width];
        match &self.layout {
            Layout::Quick(quick) => quick.add(width, rows, &mut scores),
            Layout::Walk(walk) => walk.add(width, rows, &mut scores),
        }
        scores
    }
}

/// Every tree's splits by feature, sorted by threshold, and every tree's leaves.
#[derive(Debug, Clone, Default)]
struct Quick {
    /// Per feature, where its splits start in `splits` (one more entry: the end).
    starts: Vec<usize>,
    /// Per split: its threshold, its tree, and the mask that rules out its left leaves.
    splits: Vec<(f32, u32, u32)>,
    /// Per tree: the leaves a row may reach before any split on its features (a split on a
    /// feature past the rows' end reads 0 and is decided once, here).
    reachable: Vec<u32>,
    /// Per tree: its leaves' values left to right (0 past its last).
    leaves: Vec<[f64; LEAVES]>,
}

impl Quick {
    /// `None` when a tree has more leaves than a vector has bits.
    fn of(model: &Model) -> Option<Self> {
        let mut by_feature: Vec<Vec<(f32, u32, u32)>> = vec![Vec::new(); model.features];
        let mut quick = Quick::default();
        for (t, tree) in model.trees.iter().enumerate() {
            // Per node: the leaves under it, as a range of the tree's leaves left to right.
            let mut under = vec![(0u32, 0u32); tree.nodes.len()];
            let mut leaves = Vec::new();
            number_leaves(tree, 0, &mut leaves, 0, &mut under);
            if leaves.len() > LEAVES {
                return None;
            }
            leaves.resize(LEAVES, 0.0);
            quick.leaves.push(leaves.try_into().ok()?);
            let mut reachable = u32::MAX;
            for node in &tree.nodes {
                let &Node::Split {
                    feature,
                    threshold,
                    left,
                    ..
                } = node
                else {
                    continue;
                };
                let (from, to) = under[left as usize];
                let left_leaves = ((1u64 << to) - (1u64 << from)) as u32;
                match by_feature.get_mut(feature as usize) {
                    // A threshold that is not a number sends every row left.
                    Some(_) if threshold.is_nan() => {}
                    Some(splits) => splits.push((threshold, t as u32, !left_leaves)),
                    None if 0.0 > threshold => reachable &= !left_leaves,
                    None => {}
                }
            }
            quick.reachable.push(reachable);
        }
        quick.starts.push(0);
        for mut splits in by_feature {
            splits.sort_by(|a, b| a.0.total_cmp(&b.0));
            quick.splits.extend(splits);
            quick.starts.push(quick.splits.len());
        }
        Some(quick)
    }

    /// Adds each row's leaf values to its score (`rows`: `width` values each).
    fn add(&self, width: usize, rows: &[f32], scores: &mut [f64]) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("avx512cd")
            && std::arch::is_x86_feature_detected!("bmi1")
        {
            // SAFETY: the CPU has AVX-512 F, VL and CD and BMI1 (checked just above), all
            // `add_avx512` is compiled for.
            #[allow(unsafe_code)]
            unsafe {
                return self.add_avx512(width, rows, scores);
            }
        }
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("bmi1")
        {
            // SAFETY: the CPU has AVX2 and BMI1 (checked just above), all `add_avx2` is compiled
            // for.
            #[allow(unsafe_code)]
            unsafe {
                return self.add_avx2(width, rows, scores);
            }
        }
        self.add_blocks(width, rows, scores);
    }

    /// The same loops compiled for AVX2 (a block's AND is a few 256-bit instructions) and BMI1
    /// (a leaf's number is one instruction).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,bmi1")]
    fn add_avx2(&self, width: usize, rows: &[f32], scores: &mut [f64]) {
        self.add_blocks(width, rows, scores);
    }

    /// The same loops compiled for AVX-512: a split's test of 16 rows is one compare into a
    /// mask register, its AND one masked instruction, and the leaves' numbers of 8 rows one
    /// leading-zero count (CD).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512vl,avx512cd,bmi1")]
    fn add_avx512(&self, width: usize, rows: &[f32], scores: &mut [f64]) {
        self.add_blocks(width, rows, scores);
    }

    #[inline(always)]
    fn add_blocks(&self, width: usize, rows: &[f32], scores: &mut [f64]) {
        let mut reachable: Vec<Aligned<u32>> = Vec::with_capacity(self.reachable.len());
        // The block's values feature by feature (rows past its end read NaN: never right).
        let mut columns = vec![Aligned([f32::NAN; BLOCK]); self.starts.len().saturating_sub(1)];
        for (block, scores) in rows.chunks(width * BLOCK).zip(scores.chunks_mut(BLOCK)) {
            reachable.clear();
            reachable.extend(self.reachable.iter().map(|&r| Aligned([r; BLOCK])));
            for (r, row) in block.chunks_exact(width).enumerate() {
                for (column, &v) in columns.iter_mut().zip(row) {
                    column.0[r] = v;
                }
            }
            if block.len() < width * BLOCK {
                let short = block.len() / width;
                columns.iter_mut().for_each(|c| c.0[short..].fill(f32::NAN));
            }
            for (&Aligned(values), range) in columns.iter().zip(self.starts.windows(2)) {
                let splits = &self.splits[range[0]..range[1]];
                // No value of the block is above a later threshold (read in the loop: its
                // splits are read anyway, a binary search's reads were a miss each).
                let largest = largest(&values);
                for &(threshold, tree, mask) in splits {
                    if threshold >= largest {
                        break;
                    }
                    let vectors = &mut reachable[tree as usize].0;
                    for (vector, &v) in vectors.iter_mut().zip(&values) {
                        // All ones (kept) unless the row goes right (1 − 1); NaN goes left.
                        let kept = u32::from(v > threshold).wrapping_sub(1);
                        *vector &= mask | kept;
                    }
                }
            }
            // Each row's sum in the trees' order, as Model::score adds them; the block's rows
            // side by side (each its own sum: a vector of them).
            let mut sums = [0.0f64; BLOCK];
            sums.iter_mut()
                .zip(scores.iter())
                .for_each(|(s, &x)| *s = x);
            for (vectors, leaves) in reachable.iter().zip(&self.leaves) {
                for (sum, vector) in sums.iter_mut().zip(&vectors.0) {
                    // A row always reaches a leaf: its vector is never 0.
                    *sum += leaves[vector.trailing_zeros() as usize % LEAVES];
                }
            }
            scores.iter_mut().zip(sums).for_each(|(x, s)| *x = s);
        }
    }
}

/// A block's values or leaf vectors, on a cache line of their own: a vector load or store
/// never straddles two.
#[derive(Debug, Clone, Copy)]
#[repr(align(64))]
struct Aligned<T>([T; BLOCK]);

/// The largest value not NaN (none: -∞), lane by lane so that it is a few vector maxima.
#[inline(always)]
fn largest(values: &[f32; BLOCK]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; 8];
    for chunk in values.chunks_exact(8) {
        for (lane, &v) in lanes.iter_mut().zip(chunk) {
            *lane = if v > *lane { v } else { *lane };
        }
    }
    lanes.into_iter().fold(f32::NEG_INFINITY, f32::max)
}

/// Appends the leaves under `n` to `leaves`, left to right, and records in `under` each
/// node's leaves as a range counted from `first`.
fn number_leaves(
    tree: &Tree,
    n: usize,
    leaves: &mut Vec<f64>,
    first: usize,
    under: &mut [(u32, u32)],
) -> (u32, u32) {
    let range = match tree.nodes[n] {
        Node::Leaf(v) => {
            leaves.push(v);
            let k = (leaves.len() - 1 - first) as u32;
            (k, k + 1)
        }
        Node::Split { left, right, .. } => {
            let (from, _) = number_leaves(tree, left as usize, leaves, first, under);
            let (_, to) = number_leaves(tree, right as usize, leaves, first, under);
            (from, to)
        }
    };
    under[n] = range;
    range
}

/// Every tree's nodes in one set of arrays, a leaf being a node whose both children are
/// itself: rows walk a tree side by side.
#[derive(Debug, Clone, Default)]
struct Walk {
    /// Per node: the feature it splits on, its threshold, its children (left: at most the
    /// threshold or not a number), and its value if a leaf (else 0).
    feature: Vec<u32>,
    threshold: Vec<f32>,
    next: Vec<[u32; 2]>,
    value: Vec<f64>,
    /// Per tree: its root node and its depth (the most splits from root to leaf).
    trees: Vec<(u32, u32)>,
}

/// Rows that walk a tree side by side.
const ROWS_SIDE_BY_SIDE: usize = 16;

impl Walk {
    fn of(model: &Model) -> Self {
        let mut walk = Self::default();
        for tree in &model.trees {
            let root = walk.feature.len() as u32;
            for (n, node) in tree.nodes.iter().enumerate() {
                let at = root + n as u32;
                let (feature, threshold, next, value) = match *node {
                    Node::Leaf(v) => (0, 0.0, [at, at], v),
                    Node::Split {
                        feature,
                        threshold,
                        left,
                        right,
                        ..
                    } => (feature, threshold, [root + left, root + right], 0.0),
                };
                walk.feature.push(feature);
                walk.threshold.push(threshold);
                walk.next.push(next);
                walk.value.push(value);
            }
            walk.trees.push((root, tree.depth()));
        }
        walk
    }

    /// A tree at a time over every row (its nodes stay in the nearest cache),
    /// [`ROWS_SIDE_BY_SIDE`] rows walking it side by side for as many steps as the tree is
    /// deep — each step a choice of child by index, not a branch (a leaf keeps a row where it
    /// is).
    fn add(&self, width: usize, rows: &[f32], scores: &mut [f64]) {
        for &(root, depth) in &self.trees {
            let blocks = rows.chunks(width * ROWS_SIDE_BY_SIDE);
            for (block, scores) in blocks.zip(scores.chunks_mut(ROWS_SIDE_BY_SIDE)) {
                let mut at = [root; ROWS_SIDE_BY_SIDE];
                let at = &mut at[..scores.len()];
                for _ in 0..depth {
                    for (r, node) in at.iter_mut().enumerate() {
                        let n = *node as usize;
                        // A feature past the row's end reads 0, as in [`Tree::value`].
                        let f = self.feature[n] as usize;
                        let v = if f < width { block[r * width + f] } else { 0.0 };
                        // NaN goes left, as its bin (0) does in training.
                        *node = self.next[n][usize::from(v > self.threshold[n])];
                    }
                }
                for (score, &node) in scores.iter_mut().zip(at.iter()) {
                    *score += self.value[node as usize];
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;

    /// A random tree of `leaves` leaves on `features` features (some past the rows' end),
    /// its nodes in the order they were split.
    fn tree(rng: &mut StdRng, leaves: usize, features: u32) -> Tree {
        let mut nodes = vec![Node::Leaf(rng.random_range(-1.0..1.0))];
        let mut open = vec![0usize];
        while open.len() < leaves {
            let n = open.swap_remove(rng.random_range(0..open.len()));
            let (left, right) = (nodes.len() as u32, nodes.len() as u32 + 1);
            // Thresholds on a coarse grid, so that values and thresholds are often equal.
            let threshold = f32::from(rng.random_range(-4i8..4)) / 4.0;
            nodes[n] = Node::Split {
                feature: rng.random_range(0..features),
                threshold,
                left,
                right,
                value: None,
            };
            nodes.push(Node::Leaf(rng.random_range(-1.0..1.0)));
            nodes.push(Node::Leaf(rng.random_range(-1.0..1.0)));
            open.extend([left as usize, right as usize]);
        }
        Tree { nodes }
    }

    /// Both layouts, with rows of every kind (values equal to thresholds, not numbers,
    /// infinite), blocks full and short, give Model::score's scores bit for bit.
    #[test]
    fn both_layouts_score_as_the_trees_do() {
        let mut rng = StdRng::seed_from_u64(3);
        for leaves in [1, 2, 7, 31, 32, 33, 60] {
            let features = 5;
            let model = Model {
                features,
                base: Some((1, 0.5)),
                trees: (0..20)
                    .map(|_| tree(&mut rng, leaves, features as u32 + 1))
                    .collect(),
                gains: vec![0.0; features],
                history: Vec::new(),
            };
            let forest = model.forest();
            assert_eq!(
                matches!(forest.layout, Layout::Quick(_)),
                leaves <= 32,
                "{leaves} leaves"
            );
            for rows in [0, 1, 31, 32, 33, 100] {
                let values: Vec<f32> = (0..rows * features)
                    .map(|_| match rng.random_range(0..20) {
                        0 => f32::NAN,
                        1 => f32::INFINITY,
                        2 => f32::NEG_INFINITY,
                        _ => f32::from(rng.random_range(-5i8..5)) / 4.0,
                    })
                    .collect();
                let want: Vec<u64> = values
                    .chunks(features)
                    .map(|row| model.score(row).to_bits())
                    .collect();
                let got: Vec<u64> = forest
                    .score_rows(&values)
                    .iter()
                    .map(|s| s.to_bits())
                    .collect();
                assert_eq!(got, want, "{leaves} leaves, {rows} rows");
                // Each of QuickScorer's builds this CPU can run, not only the one chosen.
                if let Layout::Quick(quick) = &forest.layout {
                    for (name, scores) in quick_builds(quick, features, &values) {
                        let bits: Vec<u64> = scores.iter().map(|s| s.to_bits()).collect();
                        assert_eq!(bits, want, "{name}: {leaves} leaves, {rows} rows");
                    }
                }
            }
        }
    }

    /// `rows` scored by each build of [`Quick::add`] the CPU runs, from the test model's base
    /// (feature 1, weight 0.5).
    fn quick_builds(quick: &Quick, width: usize, rows: &[f32]) -> Vec<(&'static str, Vec<f64>)> {
        let start = || -> Vec<f64> {
            rows.chunks_exact(width)
                .map(|row| 0.5 * f64::from(row[1]))
                .collect()
        };
        let mut builds = Vec::new();
        let mut scores = start();
        quick.add_blocks(width, rows, &mut scores);
        builds.push(("portable", scores));
        #[cfg(target_arch = "x86_64")]
        #[allow(unsafe_code)]
        {
            use std::arch::is_x86_feature_detected as has;
            if has!("avx2") && has!("bmi1") {
                let mut scores = start();
                // SAFETY: the CPU has what `add_avx2` is compiled for (checked just above).
                unsafe { quick.add_avx2(width, rows, &mut scores) };
                builds.push(("avx2", scores));
            }
            if has!("avx512f") && has!("avx512vl") && has!("bmi1") {
                let mut scores = start();
                // SAFETY: as above, for `add_avx512`.
                unsafe { quick.add_avx512(width, rows, &mut scores) };
                builds.push(("avx512", scores));
            }
        }
        builds
    }
}
