"""The reference side of `penchant-bench als`: fit the `implicit` library's CPU ALS on the
split the Rust side wrote, score it with `implicit.evaluation.ranking_metrics_at_k`, and print
one JSON object on stdout.

Inputs are raw little-endian records written by the suite, so both sides train and test on the
same matrix (no text parsing, no re-splitting):

- `train.bin`: (user u32, item u32, weight f32) per distinct pair, weights already summed;
- `test.bin`: (user u32, item u32, weight f32) per held-out pair (never in the user's train).

Confidence: Penchant uses `1 + alpha * weight`; implicit >= 0.5 uses its matrix values as the
confidence (`alpha * value`, `value - 1` in the left-hand side), so the matrix handed to
implicit holds `1 + alpha * weight` and implicit's own `alpha` is 1: the two solve the same
normal equations.

With `--out`, implicit's factors are written there as raw f32 (`user_factors.f32`,
`item_factors.f32`, row-major) for the suite to score with Penchant's metrics; with
`--penchant-factors DIR`, Penchant's factors (same layout) are scored with implicit's metrics.
Both directions check that the two metric implementations agree.
"""

import argparse
import json
import os
import sys
import time

RECORD = [("user", "<u4"), ("item", "<u4"), ("weight", "<f4")]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", required=True)
    parser.add_argument("--test", required=True)
    parser.add_argument("--users", type=int, required=True)
    parser.add_argument("--items", type=int, required=True)
    parser.add_argument("--factors", type=int, default=64)
    parser.add_argument("--regularization", type=float, default=0.01)
    parser.add_argument("--alpha", type=float, default=10.0, help="Penchant's alpha")
    parser.add_argument("--iterations", type=int, default=15)
    parser.add_argument("--cg-steps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=1, help="fits timed; the best counts")
    parser.add_argument("--out", help="folder for implicit's factors as raw f32")
    parser.add_argument("--penchant-factors", help="folder with Penchant's factors as raw f32")
    args = parser.parse_args()

    if os.environ.get("OPENBLAS_NUM_THREADS") != "1":
        print("als_implicit: OPENBLAS_NUM_THREADS is not 1", file=sys.stderr)

    import numpy as np
    import scipy.sparse as sp
    import implicit
    from implicit.cpu.als import AlternatingLeastSquares
    from implicit.evaluation import ranking_metrics_at_k

    def matrix(path, confidence):
        records = np.fromfile(path, dtype=np.dtype(RECORD))
        values = records["weight"].astype(np.float32)
        if confidence:
            values = (1.0 + np.float32(args.alpha) * values).astype(np.float32)
        m = sp.csr_matrix(
            (values, (records["user"], records["item"])),
            shape=(args.users, args.items),
            dtype=np.float32,
        )
        m.sort_indices()
        return m

    train = matrix(args.train, confidence=True)
    test = matrix(args.test, confidence=False)

    def new_model():
        return AlternatingLeastSquares(
            factors=args.factors,
            regularization=args.regularization,
            alpha=1.0,
            iterations=args.iterations,
            use_cg=True,
            use_native=True,
            num_threads=args.threads,
            random_state=args.seed,
            calculate_training_loss=False,
        )

    best, model, per_iteration = None, None, []
    for _ in range(max(1, args.repeats)):
        candidate = new_model()
        candidate.cg_steps = args.cg_steps
        times = []
        start = time.perf_counter()
        candidate.fit(train, show_progress=False, callback=lambda _i, elapsed, _loss: times.append(elapsed))
        seconds = time.perf_counter() - start
        if best is None or seconds < best:
            best, model, per_iteration = seconds, candidate, times

    def metrics(m):
        result = ranking_metrics_at_k(
            m, train, test, K=args.k, show_progress=False, num_threads=args.threads
        )
        return {key: float(value) for key, value in result.items()}

    out = {
        "implicit_version": implicit.__version__,
        "numpy_version": np.__version__,
        "fit_seconds": best,
        "iteration_seconds": per_iteration,
        "nnz": int(train.nnz),
        "test_users": int((np.diff(test.indptr) > 0).sum()),
        "metrics": metrics(model),
    }
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        np.ascontiguousarray(model.user_factors, dtype="<f4").tofile(
            os.path.join(args.out, "user_factors.f32")
        )
        np.ascontiguousarray(model.item_factors, dtype="<f4").tofile(
            os.path.join(args.out, "item_factors.f32")
        )
    if args.penchant_factors:
        theirs = new_model()
        load = lambda name, rows: np.fromfile(
            os.path.join(args.penchant_factors, name), dtype="<f4"
        ).reshape(rows, args.factors)
        theirs.user_factors = load("user_factors.f32", args.users)
        theirs.item_factors = load("item_factors.f32", args.items)
        out["penchant_metrics"] = metrics(theirs)
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main()
