//! Learning to rank for Penchant: LambdaMART, the model Metarank and most search engines' learned
//! re-rankers use — gradient-boosted regression trees fitted to the *lambda* gradients of NDCG.
//!
//! A [`Dataset`] holds queries (one user's candidates, say), each candidate a row of features
//! and a relevance label (0 = not taken, higher = better). [`train`] grows trees one at a time:
//!
//! 1. **Lambdas** ([`lambda`]): within each query, candidates are ordered by the model's score so
//!    far; for every pair with different labels where one of the two ranks in the first
//!    [`Params::truncation`] places, the pair pulls the better one up and the worse one down with
//!    force `σ · ρ · |ΔNDCG|`, `ρ = 1 / (1 + e^{σ(s_better − s_worse)})` — how wrong the pair is
//!    ordered, weighted by how much NDCG would change if the two swapped places. The second
//!    derivative is `σ² · ρ(1 − ρ) · |ΔNDCG|`.
//! 2. **A tree** ([`tree`]): features are cut into at most 256 quantile bins once; a tree grows
//!    leaf-wise (the leaf whose best split gains most is split next, up to [`Params::leaves`]),
//!    each split found from per-bin sums of gradients and hessians (a child's histogram is its
//!    parent's less its sibling's), gain `G_L²/(H_L+λ) + G_R²/(H_R+λ) − G²/(H+λ)`.
//! 3. **Leaf values**: a Newton step, `−G / (H + λ)`, times the learning rate.
//!
//! With a validation set, training keeps the trees up to the best validation NDCG and stops
//! after [`Params::patience`] trees without improvement. A [`Model`] is plain data (serde):
//! thresholds are feature values, so scoring needs no bins. [`Model::importance`] is each
//! feature's share of the gain of every split on it.

mod data;
mod forest;
pub mod lambda;
mod tree;

use serde::{Deserialize, Serialize};

pub use data::Dataset;
pub use forest::Forest;
pub use lambda::ndcg;
pub use tree::{Node, Tree};

/// Training parameters (the defaults suit a few thousand queries of a few hundred candidates).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Params {
    /// The most trees.
    pub trees: usize,
    /// Shrinks each tree's leaf values.
    pub learning_rate: f64,
    /// Leaves per tree.
    pub leaves: usize,
    /// Fewest rows in a leaf. Large on purpose: most of a query's candidates are far from its
    /// first places and move the lambdas little, so a leaf of a few dozen rows fits the
    /// training users' noise; on MovieLens 800 (against 50) lifted NDCG@10 by 1.3 points over
    /// eight validation draws and narrowed their spread
    /// (docs/BENCHMARKS.md#the-learned-ranker-on-movielens).
    pub min_rows_in_leaf: usize,
    /// L2 regularization of leaf values (λ).
    pub l2: f64,
    /// The steepness of the pairwise logistic (σ).
    pub sigma: f64,
    /// Pairs count only where one of the two ranks in this many first places.
    pub truncation: usize,
    /// The NDCG cut-off validation reports and early stopping watches.
    pub ndcg_at: usize,
    /// Trees without a better validation NDCG before training stops.
    pub patience: usize,
    /// Boost from a ranking one feature already gives: every score starts at
    /// `base_weight × row[base_feature]`, and the trees learn what to change in that order.
    pub base_feature: Option<usize>,
    pub base_weight: f64,
    /// Threads the largest steps (histograms, gradients) are shared between; 0: the machine's
    /// cores (at most 8). Fewer leave cores to a node's serving.
    pub threads: usize,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            trees: 300,
            learning_rate: 0.05,
            leaves: 31,
            min_rows_in_leaf: 800,
            l2: 1.0,
            sigma: 1.0,
            truncation: 30,
            ndcg_at: 10,
            patience: 40,
            base_feature: None,
            base_weight: 1.0,
            threads: 0,
        }
    }
}

impl Params {
    /// Why these parameters cannot train a model, if they cannot.
    pub fn check(&self) -> Result<(), String> {
        let ok = (1..=10_000).contains(&self.trees)
            && self.learning_rate > 0.0
            && self.learning_rate <= 1.0
            && (2..=1024).contains(&self.leaves)
            && self.min_rows_in_leaf >= 1
            && self.l2 >= 0.0
            && self.l2.is_finite()
            && self.sigma > 0.0
            && self.sigma.is_finite()
            && self.truncation >= 1
            && self.ndcg_at >= 1
            && self.threads <= 64;
        if ok {
            Ok(())
        } else {
            Err(
                "ranker parameters: trees 1 to 10000, learningRate in (0, 1], leaves 2 to \
                 1024, minRowsInLeaf, truncation and ndcgAt at least 1, l2 at least 0, sigma \
                 positive, threads at most 64"
                    .into(),
            )
        }
    }
}

/// A trained ranker: the sum of its trees' leaf values.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Model {
    /// Features each row must have, in order.
    pub features: usize,
    /// The feature scores start from, and its weight ([`Params::base_feature`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<(usize, f64)>,
    pub trees: Vec<Tree>,
    /// Per feature, the gain of the splits on it (see [`Model::importance`]).
    pub gains: Vec<f64>,
    /// What training saw: NDCG of the training and validation queries after each tree.
    pub history: Vec<Round>,
}

/// NDCG after one tree.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Round {
    pub train: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub validation: Option<f64>,
}

impl Model {
    /// The score of one row of features (`features` long; a shorter row reads zeros past its
    /// end). Higher ranks first.
    pub fn score(&self, row: &[f32]) -> f64 {
        let base = self.base.map_or(0.0, |(f, w)| {
            w * f64::from(row.get(f).copied().unwrap_or(0.0))
        });
        // Trees added in order to the base, as training added them.
        self.trees
            .iter()
            .fold(base, |score, t| score + t.value(row))
    }

    /// The scores of many rows at once (`rows`: `features` values each, one after another),
    /// the same as [`Model::score`] of each, by the model laid out as a [`Forest`] (to score
    /// many batches, make the forest once).
    pub fn score_rows(&self, rows: &[f32]) -> Vec<f64> {
        self.forest().score_rows(rows)
    }

    /// The trees laid out for scoring many rows at once.
    pub fn forest(&self) -> Forest {
        Forest::of(self)
    }

    /// Why a row scores what it does: the score's part that no feature moved (the trees'
    /// roots), and each feature's part (the base feature's weight times its value, and what
    /// the splits on it moved, [`Tree::contributions`]); the parts sum to [`Model::score`].
    /// `None` for a model stored before splits kept their values.
    pub fn contributions(&self, row: &[f32]) -> Option<(f64, Vec<f64>)> {
        let mut by_feature = vec![0.0; self.features];
        if let Some((f, w)) = self.base
            && let Some(slot) = by_feature.get_mut(f)
        {
            *slot += w * f64::from(row.get(f).copied().unwrap_or(0.0));
        }
        let mut bias = 0.0;
        for tree in &self.trees {
            bias += tree.contributions(row, &mut by_feature)?;
        }
        Some((bias, by_feature))
    }

    /// Each feature's share of the training gain (sums to 1 unless no tree split).
    pub fn importance(&self) -> Vec<f64> {
        let total: f64 = self.gains.iter().sum();
        self.gains
            .iter()
            .map(|g| if total > 0.0 { g / total } else { 0.0 })
            .collect()
    }
}

impl Params {
    /// The threads a training shares its largest steps between ([`Params::threads`]).
    pub fn threads(&self) -> usize {
        match self.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get().min(8)),
            n => n,
        }
    }
}

/// Train a ranker on `data`, watching `validation` if given (early stopping). `progress` is
/// called after each tree with the trees so far; returning false stops training there.
pub fn train(
    data: &Dataset,
    validation: Option<&Dataset>,
    params: &Params,
    mut progress: impl FnMut(usize) -> bool,
) -> Result<Model, String> {
    params.check()?;
    if let Some(v) = validation
        && v.features() != data.features()
    {
        return Err(format!(
            "validation rows have {} features, training rows {}",
            v.features(),
            data.features()
        ));
    }
    if params.base_feature.is_some_and(|f| f >= data.features()) {
        return Err(format!(
            "baseFeature must be one of the {} features",
            data.features()
        ));
    }
    let binned = data::Binned::new(data);
    let rows = data.rows();
    let mut model = Model {
        features: data.features(),
        base: params.base_feature.map(|f| (f, params.base_weight)),
        trees: Vec::new(),
        gains: vec![0.0; data.features()],
        history: Vec::new(),
    };
    let mut scores: Vec<f64> = (0..rows).map(|r| model.score(data.row(r))).collect();
    let mut valid_scores = validation.map(|v| {
        (0..v.rows())
            .map(|r| model.score(v.row(r)))
            .collect::<Vec<_>>()
    });
    let mut gradients = vec![0.0f64; rows];
    let mut hessians = vec![0.0f64; rows];
    // Each query's ideal DCG, which the scores do not change.
    let truncated = lambda::ideals(data, params.truncation);
    let train_ideals = lambda::ideals(data, params.ndcg_at);
    let valid_ideals = validation.map(|v| lambda::ideals(v, params.ndcg_at));
    // The best validation NDCG so far: after how many trees, with which gains. With a base,
    // no tree at all may be best.
    let mut best = (
        validation
            .zip(valid_scores.as_ref())
            .zip(valid_ideals.as_deref())
            .map_or(f64::NEG_INFINITY, |((v, vs), ideals)| {
                lambda::mean_ndcg_of(v, vs, params.ndcg_at, ideals)
            }),
        0usize,
        model.gains.clone(),
    );
    for t in 0..params.trees {
        lambda::gradients(
            data,
            &scores,
            params,
            &truncated,
            &mut gradients,
            &mut hessians,
        );
        let Some(grown) = tree::grow(&binned, &gradients, &hessians, params, &mut model.gains)
        else {
            break; // nothing left to split on
        };
        grown.add_to(&mut scores);
        let tree = grown.tree;
        let mut round = Round {
            train: lambda::mean_ndcg_of(data, &scores, params.ndcg_at, &train_ideals),
            validation: None,
        };
        if let (Some(v), Some(vs), Some(ideals)) =
            (validation, valid_scores.as_mut(), valid_ideals.as_deref())
        {
            for (r, s) in vs.iter_mut().enumerate() {
                *s += tree.value(v.row(r));
            }
            let ndcg = lambda::mean_ndcg_of(v, vs, params.ndcg_at, ideals);
            round.validation = Some(ndcg);
            if ndcg > best.0 {
                best = (ndcg, t + 1, model.gains.clone());
            }
        }
        model.trees.push(tree);
        model.history.push(round);
        if validation.is_some() && t + 1 >= best.1 + params.patience {
            break;
        }
        if !progress(model.trees.len()) {
            break;
        }
    }
    if validation.is_some() {
        model.trees.truncate(best.1);
        model.history.truncate(best.1);
        model.gains = best.2;
    }
    Ok(model)
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;

    /// Queries of 40 candidates with 4 features; the hidden relevance is 2 when
    /// `x0 > 0.7 && x1 < 0.3`, 1 when `x2 > 0.5`, else 0; feature 3 is noise.
    fn shop(queries: usize, seed: u64) -> Dataset {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut data = Dataset::new(4);
        for _ in 0..queries {
            let rows: Vec<(Vec<f32>, f32)> = (0..40)
                .map(|_| {
                    let x: Vec<f32> = (0..4).map(|_| rng.random::<f32>()).collect();
                    let label = if x[0] > 0.7 && x[1] < 0.3 {
                        2.0
                    } else if x[2] > 0.5 {
                        1.0
                    } else {
                        0.0
                    };
                    (x, label)
                })
                .collect();
            data.push_query(rows.iter().map(|(x, l)| (x.as_slice(), *l)));
        }
        data
    }

    #[test]
    fn learns_a_hidden_ranking_and_says_which_features_matter() {
        let (train_set, valid) = (shop(300, 1), shop(100, 2));
        let params = Params {
            min_rows_in_leaf: 20,
            ..Params::default()
        };
        let model = train(&train_set, Some(&valid), &params, |_| true).unwrap();
        let test = shop(100, 3);
        let scores: Vec<f64> = (0..test.rows()).map(|r| model.score(test.row(r))).collect();
        let learned = lambda::mean_ndcg(&test, &scores, 10);
        let random = lambda::mean_ndcg(&test, &vec![0.0; test.rows()], 10);
        assert!(
            learned > 0.95,
            "NDCG@10 {learned} (ties in input order: {random})"
        );
        assert!(random < 0.7, "{random}");
        let importance = model.importance();
        assert!((importance.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        assert!(importance[3] < 0.05, "noise matters: {importance:?}");
        assert!(importance[0] > 0.1 && importance[2] > 0.1, "{importance:?}");
        // Early stopping kept the best validation round.
        let best = model
            .history
            .iter()
            .filter_map(|r| r.validation)
            .fold(f64::NEG_INFINITY, f64::max);
        assert_eq!(model.history.last().unwrap().validation, Some(best));
        // Each row's score, taken apart by feature: the parts sum to it, and the noise moves
        // it least.
        let mut moved = vec![0.0; 4];
        for r in 0..test.rows() {
            let (bias, parts) = model.contributions(test.row(r)).unwrap();
            let sum = bias + parts.iter().sum::<f64>();
            let score = model.score(test.row(r));
            assert!((sum - score).abs() < 1e-9, "{sum} vs {score}");
            moved
                .iter_mut()
                .zip(&parts)
                .for_each(|(m, p)| *m += p.abs());
        }
        assert!(moved[3] < moved[0] && moved[3] < moved[2], "{moved:?}");
        // A model stored before splits kept their values cannot be taken apart.
        let mut old = model.clone();
        for node in &mut old.trees[0].nodes {
            if let Node::Split { value, .. } = node {
                *value = None;
            }
        }
        assert_eq!(old.contributions(test.row(0)), None);
        assert_eq!(old.score(test.row(0)), model.score(test.row(0)));
    }

    #[test]
    fn a_model_scores_the_same_after_a_round_trip_through_json() {
        let data = shop(50, 4);
        let params = Params {
            trees: 20,
            min_rows_in_leaf: 10,
            ..Params::default()
        };
        let model = train(&data, None, &params, |_| true).unwrap();
        assert_eq!(model.trees.len(), 20);
        // Training added each tree's leaf values to the rows it grouped (no walk down the
        // tree): the model's own scores give the NDCG training saw.
        let scores: Vec<f64> = (0..data.rows()).map(|r| model.score(data.row(r))).collect();
        let ndcg = lambda::mean_ndcg(&data, &scores, params.ndcg_at);
        assert!(
            (ndcg - model.history[19].train).abs() < 1e-9,
            "{ndcg} vs {:?}",
            model.history[19]
        );
        // Scored a tree at a time over every row: the same sums, in the same order.
        let rows: Vec<f32> = (0..data.rows())
            .flat_map(|r| data.row(r).to_vec())
            .collect();
        assert_eq!(model.score_rows(&rows), scores);
        let back: Model = serde_json::from_str(&serde_json::to_string(&model).unwrap()).unwrap();
        // JSON keeps every leaf value to its last digit but one, at most.
        for r in 0..data.rows() {
            let (a, b) = (model.score(data.row(r)), back.score(data.row(r)));
            assert!((a - b).abs() <= 1e-12 * a.abs().max(1.0), "{a} vs {b}");
        }
    }

    #[test]
    fn a_forest_scores_as_the_trees_do_whatever_the_rows_and_node_order() {
        // Nodes listed leaves first, a split on a feature past the rows' end, and a deep
        // chain beside a leaf at depth 1.
        let split = |feature, threshold, left, right| Node::Split {
            feature,
            threshold,
            left,
            right,
            value: None,
        };
        let chain = Tree {
            nodes: vec![
                split(0, 0.5, 1, 4),
                Node::Leaf(-1.0),
                Node::Leaf(2.0),
                Node::Leaf(0.25),
                split(1, 0.3, 5, 3),
                split(2, 0.0, 6, 2),
                split(7, 1.0, 7, 8),
                Node::Leaf(4.0),
                Node::Leaf(8.0),
            ],
        };
        assert_eq!(chain.depth(), 4);
        let model = Model {
            features: 3,
            base: Some((2, 0.5)),
            trees: vec![
                chain,
                Tree {
                    nodes: vec![Node::Leaf(0.125)],
                },
            ],
            gains: vec![0.0; 3],
            history: Vec::new(),
        };
        let mut rng = StdRng::seed_from_u64(9);
        // 37 rows: two full blocks and a short one; some values not numbers.
        let rows: Vec<f32> = (0..37 * 3)
            .map(|n| match n % 7 {
                3 => f32::NAN,
                _ => rng.random_range(-1.0..1.0),
            })
            .collect();
        let scores: Vec<f64> = rows.chunks(3).map(|row| model.score(row)).collect();
        let forest = model.score_rows(&rows);
        // NaN rows' base is NaN: compare bits.
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&forest), bits(&scores));
        let reached: std::collections::HashSet<u64> = scores
            .iter()
            .filter(|s| s.is_finite())
            .map(|s| s.to_bits())
            .collect();
        assert!(reached.len() >= 4, "rows reach several leaves: {reached:?}");
        assert!(model.score_rows(&[]).is_empty());
    }

    #[test]
    fn progress_can_stop_training_and_bad_parameters_are_refused() {
        let data = shop(20, 5);
        let small = Params {
            min_rows_in_leaf: 20,
            ..Params::default()
        };
        let model = train(&data, None, &small, |trees| trees < 3).unwrap();
        assert_eq!(model.trees.len(), 3);
        let bad = Params {
            leaves: 1,
            ..Params::default()
        };
        assert!(train(&data, None, &bad, |_| true).is_err());
        let other = Dataset::new(3);
        assert!(
            train(&data, Some(&other), &Params::default(), |_| true)
                .unwrap_err()
                .contains("features")
        );
    }

    #[test]
    fn queries_with_one_label_give_no_tree() {
        let mut data = Dataset::new(1);
        data.push_query([(&[1.0f32][..], 1.0), (&[2.0][..], 1.0)]);
        let model = train(&data, None, &Params::default(), |_| true).unwrap();
        assert!(model.trees.is_empty());
        assert_eq!(model.score(&[1.0]), 0.0);
    }
}
