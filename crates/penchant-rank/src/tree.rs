//! Regression trees grown leaf-wise on histograms of gradients.

use serde::{Deserialize, Serialize};

use crate::Params;
use crate::data::{Binned, MAX_BINS};

/// One node of a tree: a split (`left`/`right` index the tree's nodes) or a leaf (`value`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Node {
    /// Rows whose `feature` is at most `threshold` (or not a number) go left.
    Split {
        feature: u32,
        threshold: f32,
        left: u32,
        right: u32,
    },
    Leaf(f64),
}

/// A regression tree; its root is node 0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tree {
    pub nodes: Vec<Node>,
}

impl Tree {
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
                } => {
                    let v = row.get(feature as usize).copied().unwrap_or(0.0);
                    // Written so that NaN goes left, as its bin (0) does in training.
                    at = if v > threshold { right } else { left } as usize;
                }
            }
        }
    }
}

/// Per feature and bin: the sums of gradients and hessians, and the rows.
#[derive(Clone)]
struct Histogram(Vec<(f64, f64, u32)>);

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
            for (a, b) in sum.0.iter_mut().zip(part.0) {
                a.0 += b.0;
                a.1 += b.1;
                a.2 += b.2;
            }
        }
        sum
    }

    fn build_one(data: &Binned, rows: &[u32], g: &[f64], h: &[f64]) -> Self {
        let mut sums = vec![(0.0, 0.0, 0u32); data.features * MAX_BINS];
        for &r in rows {
            let r = r as usize;
            let (gr, hr) = (g[r], h[r]);
            for (f, &b) in data.row(r).iter().enumerate() {
                let slot = &mut sums[f * MAX_BINS + b as usize];
                slot.0 += gr;
                slot.1 += hr;
                slot.2 += 1;
            }
        }
        Self(sums)
    }

    /// `self − other` (a parent's histogram less one child's is the other child's).
    fn minus(&self, other: &Histogram) -> Self {
        Self(
            self.0
                .iter()
                .zip(&other.0)
                .map(|(a, b)| (a.0 - b.0, a.1 - b.1, a.2 - b.2))
                .collect(),
        )
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
            let (bg, bh, bn) = histogram.0[f * MAX_BINS + b];
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
) -> Option<Tree> {
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
        // Partition the leaf's rows: left first.
        let rows = &mut order[leaf.rows.clone()];
        let mut mid = 0;
        for i in 0..rows.len() {
            if (data.row(rows[i] as usize)[split.feature] as usize) <= split.bin {
                rows.swap(i, mid);
                mid += 1;
            }
        }
        let left_rows = leaf.rows.start..leaf.rows.start + mid;
        let right_rows = leaf.rows.start + mid..leaf.rows.end;
        let sums = |range: &std::ops::Range<usize>| {
            order[range.clone()].iter().fold((0.0, 0.0), |(a, b), &r| {
                (a + g[r as usize], b + h[r as usize])
            })
        };
        let (lg, lh) = sums(&left_rows);
        let (rg, rh) = sums(&right_rows);
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
    for leaf in open {
        // A Newton step, shrunk by the learning rate.
        nodes[leaf.node] = Node::Leaf(-leaf.g / (leaf.h + params.l2) * params.learning_rate);
    }
    Some(Tree { nodes })
}
