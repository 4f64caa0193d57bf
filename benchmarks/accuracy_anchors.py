"""The anchors of bench_accuracy.py: scikit-surprise SVD and Spark MLlib ALS on one saved split.

Run by bench_accuracy.py in a separate interpreter (scikit-surprise and pyspark need not build in
hamsi's environment): ``python accuracy_anchors.py DIR`` reads DIR/train.npy and DIR/test.npy
((n, 3) float64 arrays of user, item, rating; loaded with allow_pickle=False) and prints one JSON
object: {name: {"rmse": float, "seconds": float} or {"skipped": reason}}. Imports no hamsi code.

- Surprise SVD with its defaults, and at the best point of a 72-point grid on the real file (100 factors,
  reg 0.1, lr 0.01, 60 epochs); with a third argument "grid", also the best of a 72-point grid
  (SVD_GRID) chosen on the test split itself, as the real file's figure was: an optimistic anchor;
- Spark ALS at the best point of a 26-point grid on the real file (rank 50, reg 0.1, 20 iterations),
  local[2]; pairs whose user or item ALS has not seen get the training mean (coldStartStrategy
  "nan", then filled), so every anchor scores every test pair.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time

import numpy as np

SVD_BEST = dict(n_factors=100, reg_all=0.1, lr_all=0.01, n_epochs=60)
ALS_BEST = dict(rank=50, regParam=0.1, maxIter=20)
# 3 x 3 x 2 x 4 = 72 points around the real file's best one (its grid's values were not given)
SVD_GRID = [
    dict(n_factors=f, reg_all=r, lr_all=lr, n_epochs=e)
    for f in (10, 50, 100)
    for r in (0.02, 0.05, 0.1)
    for lr in (0.005, 0.01)
    for e in (20, 40, 60, 80)
]


def rmse(predictions, values) -> float:
    return float(np.sqrt(np.mean((np.asarray(predictions) - values) ** 2)))


def surprise_svd(train, test, seed: int, **params) -> dict:
    """Return the test RMSE and fit seconds of surprise.SVD(**params) (its predictions are clipped)."""
    import pandas as pd
    from surprise import SVD, Dataset, Reader

    low, high = float(train[:, 2].min()), float(train[:, 2].max())
    frame = pd.DataFrame(
        {"u": train[:, 0].astype(np.int64), "i": train[:, 1].astype(np.int64), "r": train[:, 2]}
    )
    trainset = Dataset.load_from_df(frame, Reader(rating_scale=(low, high))).build_full_trainset()
    started = time.perf_counter()
    algorithm = SVD(random_state=seed, **params).fit(trainset)
    seconds = time.perf_counter() - started
    predictions = [algorithm.predict(int(u), int(i)).est for u, i in test[:, :2]]
    return {"rmse": rmse(predictions, test[:, 2]), "seconds": seconds}


def spark_als(train, test, seed: int) -> dict:
    """Return the test RMSE (clipped to the training range) and fit seconds of Spark ALS at ALS_BEST."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return {"skipped": "no Java"}
    import tempfile

    from pyspark.ml.recommendation import ALS
    from pyspark.sql import SparkSession

    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # loopback only, whatever the host's interfaces
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "4g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    checkpoints = tempfile.mkdtemp(prefix="als-checkpoints-")
    # ALS's lineage over 20 iterations overflows the JVM stack unless it is cut by checkpoints
    spark.sparkContext.setCheckpointDir(checkpoints)
    try:

        def frame(rows):
            return spark.createDataFrame(
                [(int(u), int(i), float(r)) for u, i, r in rows], ["u", "i", "r"]
            )

        train_frame, test_frame = frame(train), frame(test)
        started = time.perf_counter()
        model = ALS(
            userCol="u", itemCol="i", ratingCol="r", coldStartStrategy="nan", seed=seed, **ALS_BEST
        ).fit(train_frame)
        seconds = time.perf_counter() - started
        scored = model.transform(test_frame).select("u", "i", "r", "prediction").toPandas()
    finally:
        spark.stop()
        shutil.rmtree(checkpoints, ignore_errors=True)
    predicted = scored["prediction"].to_numpy(dtype=np.float64)
    predicted = np.where(np.isfinite(predicted), predicted, train[:, 2].mean())
    low, high = float(train[:, 2].min()), float(train[:, 2].max())
    return {"rmse": rmse(np.clip(predicted, low, high), scored["r"].to_numpy()), "seconds": seconds}


def main(directory: str, seed: int, grid: bool = False, svd_only: bool = False) -> None:
    train = np.load(os.path.join(directory, "train.npy"), allow_pickle=False)
    test = np.load(os.path.join(directory, "test.npy"), allow_pickle=False)
    out = {}
    if svd_only:  # bench_search.py: the one fit a user would compare a default fit with
        try:
            out["Surprise SVD defaults"] = surprise_svd(train, test, seed)
        except ImportError as exc:
            out["Surprise SVD defaults"] = {"skipped": f"scikit-surprise not importable ({exc})"}
        print(json.dumps(out))
        return
    try:
        out["Surprise SVD defaults"] = surprise_svd(train, test, seed)
        out["Surprise SVD best grid point"] = surprise_svd(train, test, seed, **SVD_BEST)
        if grid:
            points = [surprise_svd(train, test, seed, **params) for params in SVD_GRID]
            best = min(range(len(points)), key=lambda k: points[k]["rmse"])
            out["Surprise SVD best of 72 on test"] = dict(
                points[best], params=SVD_GRID[best], seconds=sum(p["seconds"] for p in points)
            )
    except ImportError as exc:
        out["Surprise SVD"] = {"skipped": f"scikit-surprise not importable ({exc})"}
    try:
        out["Spark ALS best grid point"] = spark_als(train, test, seed)
    except ImportError as exc:
        out["Spark ALS best grid point"] = {"skipped": f"pyspark not importable ({exc})"}
    print(json.dumps(out))


if __name__ == "__main__":
    main(
        sys.argv[1],
        int(sys.argv[2]) if len(sys.argv) > 2 else 0,
        grid="grid" in sys.argv[3:],
        svd_only="svd" in sys.argv[3:],
    )
