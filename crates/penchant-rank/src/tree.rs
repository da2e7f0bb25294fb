//! Regression trees grown leaf-wise on histograms of gradients.

use serde::{Deserialize, Serialize};

use crate::Params;
use crate::data::{Binned, MAX_BINS};

/// One node of a tree: a split (`left`/`right` index the tree's nodes) or a leaf (`value`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Node {
    /// Rows whose `feature` is at most `threshold` (or not a number) go left. `value`: what
    /// the node would give as a leaf (its rows' Newton step), for [`Tree::contributions`];
    /// models stored before it was kept have none.
    Split {
        feature: u32,
        threshold: f32,
        left: u32,
        right: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        value: Option<f64>,
    },
    Leaf(f64),
}

/// A regression tree; its root is node 0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tree {
    pub nodes: Vec<Node>,
}

impl Tree {
    /// The most splits on a way from the root to a leaf.
    pub fn depth(&self) -> u32 {
        let mut deepest = 0;
        let mut stack = vec![(0usize, 0u32)];
        while let Some((n, depth)) = stack.pop() {
            match self.nodes.get(n) {
                Some(&Node::Split { left, right, .. }) => {
                    stack.push((left as usize, depth + 1));
                    stack.push((right as usize, depth + 1));
                }
                _ => deepest = deepest.max(depth),
            }
        }
        deepest
    }

    /// The leaf value a row reaches (missing features read as 0).
    pub fn value(&self, row: &[f32]) -> f64 {
        let mut at = 0usize;
        loop {
            match self.nodes[at] {
                Node::Leaf(v) => return v,
                Node::Split {
                    feature,
                    threshold,
                    left,
                    right,
                    ..
                } => {
                    let v = row.get(feature as usize).copied().unwrap_or(0.0);
                    // Written so that NaN goes left, as its bin (0) does in training.
                    at = if v > threshold { right } else { left } as usize;
                }
            }
        }
    }
}

impl Tree {
    /// How each feature moved a row's value along its way (Saabas): each split on a feature
    /// adds the child's value less its own to `by_feature`; returns the root's value, so that
    /// it and the additions sum to [`Tree::value`]. `None` when a split has no value.
    pub fn contributions(&self, row: &[f32], by_feature: &mut [f64]) -> Option<f64> {
        let value_of = |n: usize| match self.nodes[n] {
            Node::Leaf(v) => Some(v),
            Node::Split { value, .. } => value,
        };
        let root = value_of(0)?;
        let mut at = 0usize;
        while let Node::Split {
            feature,
            threshold,
            left,
            right,
            value,
        } = self.nodes[at]
        {
            let v = row.get(feature as usize).copied().unwrap_or(0.0);
            let next = if v > threshold { right } else { left } as usize;
            let moved = value_of(next)? - value?;
            if let Some(slot) = by_feature.get_mut(feature as usize) {
                *slot += moved;
            }
            at = next;
        }
        Some(root)
    }
}

/// Per feature and bin: the sums of gradients and hessians, and the rows (kept apart: a
/// parent less a child is then two plain subtractions of arrays; ~4% faster a tree than one
/// array of triples, measured).
#[derive(Clone)]
struct Histogram {
    sums: Vec<(f64, f64)>,
    rows: Vec<u32>,
}

/// Rows a histogram needs before its build is split between threads.
const ROWS_PER_THREAD: usize = 32_768;

impl Histogram {
    /// Built by up to `threads` threads, each over a share of the rows, then summed.
    fn build(data: &Binned, rows: &[u32], g: &[f64], h: &[f64], threads: usize) -> Self {
        let threads = threads.min(rows.len() / ROWS_PER_THREAD).max(1);
        if threads == 1 {
            return Self::build_one(data, rows, g, h);
        }
        let share = rows.len().div_ceil(threads);
        let parts: Vec<Histogram> = std::thread::scope(|scope| {
            let handles: Vec<_> = rows
                .chunks(share)
                .map(|part| scope.spawn(move || Self::build_one(data, part, g, h)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a histogram thread"))
                .collect()
        });
        let mut parts = parts.into_iter();
        let mut sum = parts.next().expect("one part at least");
        for part in parts {
            for (a, b) in sum.sums.iter_mut().zip(part.sums) {
                a.0 += b.0;
                a.1 += b.1;
            }
            for (a, b) in sum.rows.iter_mut().zip(part.rows) {
                *a += b;
            }
        }
        sum
    }

    /// One feature at a time (its histogram stays in the nearest cache), the rows' gradients
    /// gathered first; two copies of the feature's histogram take alternate rows, so that
    /// rows falling in the same bin one after another do not wait on each other's sums.
    fn build_one(data: &Binned, rows: &[u32], g: &[f64], h: &[f64]) -> Self {
        let mut sums = vec![(0.0, 0.0); data.features * MAX_BINS];
        let mut counts = vec![0u32; data.features * MAX_BINS];
        let gh: Vec<(f64, f64)> = rows
            .iter()
            .map(|&r| (g[r as usize], h[r as usize]))
            .collect();
        for f in 0..data.features {
            let column = data.column(f);
            let mut copies = [[(0.0f64, 0.0f64, 0u32); MAX_BINS]; 2];
            let [a, b] = &mut copies;
            let mut pairs = rows.chunks_exact(2).zip(gh.chunks_exact(2));
            for (r, gh) in &mut pairs {
                let (x, y) = (
                    column[r[0] as usize] as usize,
                    column[r[1] as usize] as usize,
                );
                let (sa, sb) = (&mut a[x], &mut b[y]);
                sa.0 += gh[0].0;
                sa.1 += gh[0].1;
                sa.2 += 1;
                sb.0 += gh[1].0;
                sb.1 += gh[1].1;
                sb.2 += 1;
            }
            if rows.len() % 2 == 1 {
                let (r, (gr, hr)) = (rows[rows.len() - 1], gh[rows.len() - 1]);
                let slot = &mut a[column[r as usize] as usize];
                slot.0 += gr;
                slot.1 += hr;
                slot.2 += 1;
            }
            let at = f * MAX_BINS;
            for (bin, (x, y)) in a.iter().zip(b.iter()).enumerate() {
                sums[at + bin] = (x.0 + y.0, x.1 + y.1);
                counts[at + bin] = x.2 + y.2;
            }
        }
        Self { sums, rows: counts }
    }

    /// `self − other` (a parent's histogram less one child's is the other child's).
    fn minus(mut self, other: &Histogram) -> Self {
        for (a, b) in self.sums.iter_mut().zip(&other.sums) {
            a.0 -= b.0;
            a.1 -= b.1;
        }
        for (a, b) in self.rows.iter_mut().zip(&other.rows) {
            *a -= b;
        }
        self
    }
}

/// A leaf that may be split: its rows (a range of the row order), sums, and best split.
struct Open {
    node: usize,
    rows: std::ops::Range<usize>,
    g: f64,
    h: f64,
    histogram: Histogram,
    best: Option<Split>,
}

#[derive(Clone, Copy)]
struct Split {
    feature: usize,
    /// Rows in bins `<= bin` go left.
    bin: usize,
    gain: f64,
    /// The left side's sums of gradients and hessians.
    left: (f64, f64),
}

fn score(g: f64, h: f64, l2: f64) -> f64 {
    g * g / (h + l2)
}

fn best_split(
    histogram: &Histogram,
    data: &Binned,
    (g, h, n): (f64, f64, usize),
    params: &Params,
) -> Option<Split> {
    let parent = score(g, h, params.l2);
    let mut best: Option<Split> = None;
    for f in 0..data.features {
        let bins = data.cuts[f].len();
        let (mut gl, mut hl, mut nl) = (0.0, 0.0, 0usize);
        for b in 0..bins.saturating_sub(1) {
            let (bg, bh) = histogram.sums[f * MAX_BINS + b];
            let bn = histogram.rows[f * MAX_BINS + b];
            gl += bg;
            hl += bh;
            nl += bn as usize;
            if nl < params.min_rows_in_leaf {
                continue;
            }
            if n - nl < params.min_rows_in_leaf {
                break;
            }
            let gain = score(gl, hl, params.l2) + score(g - gl, h - hl, params.l2) - parent;
            if gain > 1e-12 && best.is_none_or(|s| gain > s.gain) {
                best = Some(Split {
                    feature: f,
                    bin: b,
                    gain,
                    left: (gl, hl),
                });
            }
        }
    }
    best
}

/// Grow one tree on the gradients; `None` if no split gains anything. Each split's gain is
/// added to its feature's entry of `gains`.
pub(crate) fn grow(
    data: &Binned,
    g: &[f64],
    h: &[f64],
    params: &Params,
    gains: &mut [f64],
) -> Option<Grown> {
    let mut order: Vec<u32> = (0..data.rows as u32).collect();
    let (gs, hs) = (g.iter().sum::<f64>(), h.iter().sum::<f64>());
    let histogram = Histogram::build(data, &order, g, h, params.threads());
    let best = Some(best_split(&histogram, data, (gs, hs, data.rows), params)?);
    let mut nodes = vec![Node::Leaf(0.0)];
    let mut open = vec![Open {
        node: 0,
        rows: 0..data.rows,
        g: gs,
        h: hs,
        histogram,
        best,
    }];
    let mut leaves = 1;
    let mut right_scratch: Vec<u32> = Vec::new();
    while leaves < params.leaves {
        // The open leaf whose split gains most.
        let Some(at) = (0..open.len())
            .filter(|&i| open[i].best.is_some())
            .max_by(|&a, &b| {
                let gain = |i: usize| open[i].best.map_or(0.0, |s| s.gain);
                gain(a).total_cmp(&gain(b))
            })
        else {
            break;
        };
        let leaf = open.swap_remove(at);
        let Some(split) = leaf.best else { break };
        gains[split.feature] += split.gain;
        // Partition the leaf's rows, left first, each side in row order (histogram builds then
        // read the rows' bins and gradients in memory order).
        let rows = &mut order[leaf.rows.clone()];
        let column = data.column(split.feature);
        right_scratch.clear();
        let mut mid = 0;
        for i in 0..rows.len() {
            let r = rows[i];
            if (column[r as usize] as usize) <= split.bin {
                rows[mid] = r;
                mid += 1;
            } else {
                right_scratch.push(r);
            }
        }
        rows[mid..].copy_from_slice(&right_scratch);
        let left_rows = leaf.rows.start..leaf.rows.start + mid;
        let right_rows = leaf.rows.start + mid..leaf.rows.end;
        let (lg, lh) = split.left;
        let (rg, rh) = (leaf.g - lg, leaf.h - lh);
        // Build the smaller child's histogram; the larger one's is the parent's less it.
        let small = if left_rows.len() <= right_rows.len() {
            &left_rows
        } else {
            &right_rows
        };
        let small_hist = Histogram::build(data, &order[small.clone()], g, h, params.threads());
        let large_hist = leaf.histogram.minus(&small_hist);
        let (left_hist, right_hist) = if small == &left_rows {
            (small_hist, large_hist)
        } else {
            (large_hist, small_hist)
        };
        let (left, right) = (nodes.len(), nodes.len() + 1);
        nodes.push(Node::Leaf(0.0));
        nodes.push(Node::Leaf(0.0));
        nodes[leaf.node] = Node::Split {
            feature: split.feature as u32,
            threshold: data.cuts[split.feature][split.bin],
            left: left as u32,
            right: right as u32,
            value: Some(newton(leaf.g, leaf.h, params)),
        };
        for (node, rows, g, h, histogram) in [
            (left, left_rows, lg, lh, left_hist),
            (right, right_rows, rg, rh, right_hist),
        ] {
            let best = best_split(&histogram, data, (g, h, rows.len()), params);
            open.push(Open {
                node,
                rows,
                g,
                h,
                histogram,
                best,
            });
        }
        leaves += 1;
    }
    let leaves = open
        .into_iter()
        .map(|leaf| {
            let value = newton(leaf.g, leaf.h, params);
            nodes[leaf.node] = Node::Leaf(value);
            (leaf.rows, value)
        })
        .collect();
    Some(Grown {
        tree: Tree { nodes },
        order,
        leaves,
    })
}

/// A leaf's value: a Newton step on its rows' gradients, shrunk by the learning rate.
fn newton(g: f64, h: f64, params: &Params) -> f64 {
    -g / (h + params.l2) * params.learning_rate
}

/// A tree just grown, and where its training rows went.
pub(crate) struct Grown {
    pub tree: Tree,
    /// The rows, grouped by leaf.
    order: Vec<u32>,
    /// Each leaf's range of `order`, and its value.
    leaves: Vec<(std::ops::Range<usize>, f64)>,
}

impl Grown {
    /// Add each training row's leaf value to its score (what [`Tree::value`] gives it, without
    /// walking the tree).
    pub fn add_to(&self, scores: &mut [f64]) {
        for (rows, value) in &self.leaves {
            for &r in &self.order[rows.clone()] {
                scores[r as usize] += value;
            }
        }
    }
}
