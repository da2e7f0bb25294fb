"""LightGBM's lambdarank on the examples penchant-bench wrote, the reference of the learned
ranker's boosting (`penchant-bench recommend`, table 5).

Usage: lambdamart_lightgbm.py FOLDER SETTINGS_JSON. FOLDER holds train.* and validation.*:
`.rows` (f32 LE, `features` per row), `.labels` (f32 LE), `.groups` (u32 LE, rows per query).
The scores start from one feature (`initFromFeature`, the hand blend), as penchant-rank's do.
Only the training is timed, then the scoring of the validation rows by the model's first
`scoreTrees` trees (one thread; the anchor of penchant-rank's scoring). Prints one JSON line:
seconds, trees, validation NDCG, predictSeconds (one scoring of every validation row, the best
of 5), predictTrees."""

import json
import sys
import time

import lightgbm as lgb
import numpy as np

folder, settings = sys.argv[1], json.loads(sys.argv[2])
width = settings["features"]


def load(name):
    rows = np.fromfile(f"{folder}/{name}.rows", dtype="<f4").reshape(-1, width)
    labels = np.fromfile(f"{folder}/{name}.labels", dtype="<f4")
    groups = np.fromfile(f"{folder}/{name}.groups", dtype="<u4")
    init = rows[:, settings["initFromFeature"]].astype(np.float64)
    return rows, labels, groups, init


train_rows, train_labels, train_groups, train_init = load("train")
valid_rows, valid_labels, valid_groups, valid_init = load("validation")
train = lgb.Dataset(train_rows, train_labels, group=train_groups, init_score=train_init,
                    free_raw_data=False)
valid = lgb.Dataset(valid_rows, valid_labels, group=valid_groups, init_score=valid_init,
                    reference=train)
params = {
    "objective": "lambdarank",
    "metric": "ndcg",
    "eval_at": [settings["ndcgAt"]],
    "learning_rate": settings["learningRate"],
    "num_leaves": settings["leaves"],
    "min_data_in_leaf": settings["minRowsInLeaf"],
    "lambda_l2": settings["l2"],
    "lambdarank_truncation_level": settings["truncation"],
    "label_gain": [0, 1, 3],
    "num_threads": settings["threads"],
    "verbose": -1,
    "deterministic": True,
}
started = time.perf_counter()
booster = lgb.train(params, train, num_boost_round=settings["trees"], valid_sets=[valid],
                    callbacks=[lgb.early_stopping(settings["patience"], verbose=False)])
seconds = time.perf_counter() - started
scores = booster.predict(valid_rows, num_iteration=booster.best_iteration) + valid_init


def ndcg(labels, scores, k):
    order = np.argsort(-scores, kind="stable")
    gains = 2.0 ** labels - 1
    discounts = 1 / np.log2(np.arange(2, k + 2))
    dcg = (gains[order][:k] * discounts[: min(k, len(order))]).sum()
    ideal = (np.sort(gains)[::-1][:k] * discounts[: min(k, len(order))]).sum()
    return dcg / ideal if ideal > 0 else None


k = settings["ndcgAt"]
values, start = [], 0
for size in valid_groups:
    v = ndcg(valid_labels[start:start + size], scores[start:start + size], k)
    if v is not None:
        values.append(v)
    start += size
trees = booster.best_iteration or booster.current_iteration()
predict_trees = min(settings["scoreTrees"], trees)
timings = []
for _ in range(5):
    started = time.perf_counter()
    booster.predict(valid_rows, num_iteration=predict_trees, num_threads=1)
    timings.append(time.perf_counter() - started)
print(json.dumps({"seconds": seconds, "trees": trees, "ndcg": float(np.mean(values)),
                  "predictSeconds": min(timings), "predictTrees": predict_trees}))
