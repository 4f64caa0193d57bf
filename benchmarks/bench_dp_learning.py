"""Reproduce the computational study of Kuru's thesis ch. 4 (Figs. 4.2-4.24) with dp.learning.

Synthetic L2-regularized logistic regression (d = 10, n = 1e4, lambda = 0.01; covariates N(0, I),
labels from a logistic model with a N(0, I) parameter; the thesis does not say how it drew its
data), clipping C = 2, rows scaled to the public radius R = 2 (the step rules' L is the public
bound R^2 / 4 + 2 lambda; the thesis took L from the data, a leak), T = 1000, x_0 = 0; repetition r uses data set r and its own noise (so the
repetitions are also the "different data sets" of Figs. 4.7 and 4.20). Real data: scikit-learn's
digits ("1" vs the rest, as the thesis does with MNIST; pixels / 16) and breast cancer
(standardized), 70/30 split, accuracy on the 30%. f* comes from a non-private Newton solve to
gradient norm 1e-10. The objective is the mean over records (the thesis writes the sum; this
rescales f - f* by n and leaves every method but DP-GD's 1/sqrt(t) step unchanged).

Every run is a Dask task on a LocalCluster (127.0.0.1, worker processes); the speed-up over a
serial loop (one BLAS thread, as on the workers) is measured on the same runs of Fig. 4.2's beta
sweep side by side, after both sides have imported everything and loaded the data.
Each section prints the thesis' statement, our mean f - f* per setting, and whether the
statement's ordering holds in our runs.

Two further sections: `smoothing` (10 repetitions at eps 1, DP-GDwS at beta 0.1 against
beta 1, ours beside the thesis' Alg. 4 written out literally with its data-derived L), and
`defaults` (PrivateLogisticRegression's defaults against diffprivlib's LogisticRegression(epsilon,
data_norm=1), held-out accuracy on 10 stratified 70/30 splits of breast cancer, a synthetic
logistic set and digits 0-vs-rest, rows projected one by one and rows divided by the largest row
norm; diffprivlib needs scikit-learn < 1.6, so it runs in its own venv through a subprocess,
--diffprivlib-python; make one with python3 -m venv /work/venv-dpl &&
/work/venv-dpl/bin/pip install "scikit-learn<1.6" diffprivlib numpy).

    python benchmarks/bench_dp_learning.py                  # default: 2 reps, eps 0.5 and 1, 4 betas
    python benchmarks/bench_dp_learning.py --full           # 10 reps, eps 0.5/0.8/1, 100 betas, 1e4 iterations
    python benchmarks/bench_dp_learning.py --out figs/      # also draw the figures (PNG)
    python benchmarks/bench_dp_learning.py --sections defaults   # the defaults against diffprivlib
"""

from __future__ import annotations

import argparse
import functools
import os
import time
import zlib
from dataclasses import dataclass

import numpy as np
from dp_learning_defaults import DEFAULTS_SEEDS, report_defaults
from dp_learning_reports import (
    DELTA,
    DETERMINISTIC,
    GAUSSIAN,
    LAMBDA,
    LITERAL,
    REPORTS,
    SMOOTHING_BETAS,
    STOCHASTIC,
    C,
    R,
    plot_section,
    report_table,
)

THESIS = {
    "beta": "Figs. 4.2/4.3: smaller beta gives lower f - f* at every epsilon; best near beta = 0.1; "
    "beta = 1 (DP-GD with the noise-aware step) is beaten by smoothing",
    "mag": "Figs. 4.4/4.5: DP-MAG performs much better than M-ASG and M-ASG* (1e3 and 1e4 iterations)",
    "deterministic": "Figs. 4.6/4.7: DP-GDwS (beta 0.1) and DP-MAG beat DP-GD, DP-NAG, DP-HB, M-ASG, "
    "M-ASG* at every epsilon and on every data set",
    "stochastic-beta": "Figs. 4.8-4.12: for DP-SGDwS, smoothing (beta < 1) beats beta = 1 at sample sizes "
    "1, 10, 100, 1000, especially at small epsilon",
    "online": "Fig. 4.13: DP-onlineGDwS (bucket 10): smoothing helps in the online setting as well",
    "smag": "Figs. 4.14/4.15: DP-SMAG beats stochastic M-ASG and M-ASG* (epsilon = 1, all sample sizes)",
    "stochastic": "Figs. 4.16-4.20: DP-SGDwS and DP-SMAG beat SGD, SNAG, SHB, stocMASG, stocMASG* for "
    "every sample size, epsilon and data set",
    "smoothing": "Figs. 4.2/4.3 (and our README's former 'beta = 0.3 wins narrowly at eps = 1', from 2 reps): "
    "DP-GDwS with beta ~ 0.1 beats beta = 1 (10 repetitions, eps = 1)",
    "real": "Figs. 4.21-4.24 (MNIST; here digits and breast cancer): DP-SMAG is best; DP-SGDwS is "
    "mostly second; smoothing beats SGD, NAG and HB everywhere",
}


@dataclass(frozen=True)
class Task:
    """One private run."""

    data: str  # "synthetic", "digits" or "cancer"
    method: str
    epsilon: float
    beta: float
    batch: int | None
    n_iter: int
    rep: int

    @property
    def delta(self) -> float:
        return DELTA if self.method in GAUSSIAN else 0.0


@functools.lru_cache(maxsize=64)
def load(data: str, rep: int, n: int, d: int):
    """Return (X, y, X_test, y_test, f*) of a data set (cached per worker process)."""
    from sklearn.datasets import load_breast_cancer, load_digits
    from sklearn.model_selection import train_test_split

    from dp.learning import make_problem

    if data == "synthetic":
        rng = np.random.default_rng(rep)
        w = rng.standard_normal(d)
        X = rng.standard_normal((n + 5000, d))
        y = np.where(rng.random(n + 5000) < 1 / (1 + np.exp(-X @ w)), 1.0, -1.0)
        X, X_test, y, y_test = X[:n], X[n:], y[:n], y[n:]
    else:
        if data == "digits":
            raw = load_digits()
            features, labels = raw.data / 16.0, np.where(raw.target == 1, 1.0, -1.0)
        else:
            raw = load_breast_cancer()
            features = (raw.data - raw.data.mean(0)) / raw.data.std(0)
            labels = np.where(raw.target == 1, 1.0, -1.0)
        X, X_test, y, y_test = train_test_split(
            features, labels, test_size=0.3, random_state=0, stratify=labels
        )
    _, f_star = make_problem("logistic", X, y, LAMBDA, C, 2, data_norm=R).solve()
    return X, y, X_test, y_test, f_star


def run_task(task: Task, n: int, d: int, points: int) -> dict:
    """Return final f - f*, held-out accuracy and the f - f* curve of one run."""
    from dp.learning import minimize_private

    X, y, X_test, y_test, f_star = load(task.data, task.rep, n, d)
    import warnings

    # every run is seeded on purpose (reproducible figures): not a release, so the seed warning is noise
    warnings.filterwarnings("ignore", "random_state is an integer seed", UserWarning)
    cpu = time.process_time()
    seed = zlib.crc32(repr(task).encode())  # stable across processes (unlike hash())
    every = max(1, task.n_iter // points)
    if task.method == LITERAL:
        res = thesis_literal_gdws(X, y, task.epsilon, task.beta, task.n_iter, seed, every)
    else:
        res = minimize_private(
            X,
            y,
            task.method,
            epsilon=task.epsilon,
            delta=task.delta,
            n_iter=task.n_iter,
            beta=task.beta,
            batch_size=task.batch,
            clip=C,
            data_norm=R,
            reg=LAMBDA,
            random_state=seed,
            history_every=every,
        )
    accuracy = float(np.mean(np.where(X_test @ res.x > 0, 1.0, -1.0) == y_test))
    gap = res.nonprivate_history - f_star
    return {
        "gap": float(gap[-1]) if res.success else float("inf"),
        "accuracy": accuracy,
        "curve": gap,
        "every": every,
        "status": res.status,
        "cpu": time.process_time() - cpu,
    }


def thesis_literal_gdws(X, y, epsilon, beta, T, seed, every):
    """Return DP-GDwS as the thesis' text has it (Alg. 4, (4.15), (4.17), (4.21)), on the same rows.

    g~_t = (1 - beta) g~_{t-1} + beta g(x_t) + eta_t, x_{t+1} = x_t - alpha g~_t, eta_t Laplace at
    beta S1 T / epsilon per coordinate, alpha of (4.21) capped at 1 / (beta L) with L from
    lambda_max of the data (what the thesis does, and a leak dp.learning no longer has):
    the independent reference our implementation is compared with, not a private method.
    """
    from types import SimpleNamespace

    from dp._random import as_random_bits
    from dp.learning import make_problem
    from dp.learning.noise import laplace_stream

    n, d = X.shape
    problem = make_problem("logistic", X, y, LAMBDA, C, 1, data_norm=R)
    l1_sensitivity = beta * 2 * C / n
    stream = laplace_stream(l1_sensitivity, epsilon / T, d, T, as_random_bits(seed))
    lipschitz = 0.25 * np.linalg.eigvalsh(problem.X.T @ problem.X / n)[-1] + 2 * LAMBDA
    spread = ((2 * C / n) ** 2 / (4 * d) + stream.variance / beta**2) * beta / (2 - beta)
    alpha = min(0.25 / np.sqrt(spread * (T + 1)), 1 / (beta * lipschitz))
    x, smoothed, history = np.zeros(d), np.zeros(d), [problem.objective(np.zeros(d))]
    for t in range(T):
        smoothed = (1 - beta) * smoothed + stream.release(
            t, beta * problem.clipped_gradient(x, slice(None))
        )
        x = x - alpha * smoothed
        if (t + 1) % every == 0 or t + 1 == T:
            history.append(problem.objective(x))
    return SimpleNamespace(
        x=x, nonprivate_history=np.array(history), status="completed", success=True
    )


# --- the sections: which runs, and what to print ------------------------------------------------


def sections(a) -> dict[str, list[Task]]:
    """Return the tasks of every chosen section for the settings `a`."""
    return {name: SECTION_TASKS[name](a) for name in SECTION_TASKS if name in a.sections}


def _beta_tasks(a):
    return [
        Task("synthetic", "dp-gdws", e, b, None, a.n_iter, r)
        for e in a.eps
        for b in a.betas
        for r in range(a.reps)
    ]


def _mag_tasks(a):
    return [
        Task("synthetic", m, e, 0.1, None, t, r)
        for m in ("dp-mag", "m-asg", "m-asg*")
        for e in a.eps
        for t in a.long
        for r in range(a.reps)
    ]


def _deterministic_tasks(a):
    return [
        Task("synthetic", m, e, 0.1, None, a.n_iter, r)
        for m in DETERMINISTIC
        for e in a.eps
        for r in range(a.reps)
    ]


def _stochastic_beta_tasks(a):
    return [
        Task("synthetic", "dp-sgdws", e, b, m, a.n_iter, r)
        for m in a.sizes
        for e in a.eps
        for b in a.stoch_betas
        for r in range(a.reps)
    ]


def _online_tasks(a):
    return [
        Task("synthetic", "dp-onlinegdws", e, b, 10, a.n_iter, r)
        for e in a.eps
        for b in a.stoch_betas
        for r in range(a.reps)
    ]


def _smag_tasks(a):
    return [
        Task("synthetic", m, 1.0, 0.1, size, t, r)
        for m in ("dp-smag", "m-asg", "m-asg*")
        for size in a.sizes
        for t in a.long
        for r in range(a.reps)
    ]


def _stochastic_tasks(a):
    return [
        Task("synthetic", m, e, 0.1, size, a.n_iter, r)
        for m in STOCHASTIC
        for size in a.sizes
        for e in a.eps
        for r in range(a.reps)
    ]


def _real_tasks(a):
    return [
        Task(data, m, e, 0.1, size, a.n_iter, r)
        for data in ("digits", "cancer")
        for m in STOCHASTIC
        for size in a.real_sizes
        if size < len(load(data, 0, a.n, a.d)[1])
        for e in (0.5, 1.0)
        for r in range(a.reps)
    ]


def _table_tasks(a):
    T, reps, syn = a.n_iter, range(a.reps), "synthetic"
    return (
        [Task(syn, m, e, 0.1, None, T, r) for m in DETERMINISTIC for e in (0.5, 1.0) for r in reps]
        + [Task(syn, m, e, 0.1, 100, T, r) for m in STOCHASTIC for e in (0.5, 1.0) for r in reps]
        + [Task(syn, "dp-onlinegdws", e, 0.1, 10, T, r) for e in (0.5, 1.0) for r in reps]
        + [
            Task(syn, m, e, 0.1, _gauss_batch(m), T, r)
            for m in GAUSSIAN
            for e in (0.5, 1.0)
            for r in reps
        ]
    )


def _smoothing_tasks(a):
    return [
        Task("synthetic", m, 1.0, b, None, a.n_iter, r)
        for m in ("dp-gdws", LITERAL)
        for b in SMOOTHING_BETAS
        for r in range(10)
    ]


SECTION_TASKS = {
    "beta": _beta_tasks,
    "mag": _mag_tasks,
    "deterministic": _deterministic_tasks,
    "stochastic-beta": _stochastic_beta_tasks,
    "online": _online_tasks,
    "smag": _smag_tasks,
    "stochastic": _stochastic_tasks,
    "real": _real_tasks,
    "table": _table_tasks,
    "smoothing": _smoothing_tasks,
}


def _gauss_batch(method: str):
    return {
        "dp-sgdws-gauss": 100,
        "dp-smag-gauss": 100,
        "dp-sgd": 100,
        "dp-onlinegdws-gauss": 10,
    }.get(method)


# --- defaults against diffprivlib (not Dask: a few dozen fits of a few milliseconds) -----------------


def parse_args():
    ap = argparse.ArgumentParser(
        description="Reproduce Kuru's thesis ch. 4 (private gradient methods)"
    )
    ap.add_argument(
        "--full",
        action="store_true",
        help="the thesis' sizes: 10 reps, 100 betas, 1e4-iteration figures",
    )
    ap.add_argument("--reps", type=int, default=None, help="repetitions (default 2; --full: 10)")
    ap.add_argument("--n", type=int, default=10_000, help="synthetic records (thesis 1e4)")
    ap.add_argument("--d", type=int, default=10, help="synthetic dimension (thesis 10)")
    ap.add_argument("--n-iter", type=int, default=1000, help="iterations T (thesis 1e3)")
    ap.add_argument(
        "--eps", type=float, nargs="+", default=None, help="default 0.5 1 (--full: 0.5 0.8 1)"
    )
    ap.add_argument(
        "--sizes", type=int, nargs="+", default=[1, 10, 100, 1000], help="sample sizes m"
    )
    ap.add_argument(
        "--real-sizes",
        type=int,
        nargs="+",
        default=None,
        help="sample sizes on the real data (default 100; --full: 1 10 100 1000 where < n)",
    )
    ap.add_argument(
        "--sections",
        nargs="+",
        default=list(THESIS) + ["table", "defaults"],
        choices=list(THESIS) + ["table", "defaults"],
    )
    ap.add_argument(
        "--diffprivlib-python",
        default="/work/venv-dpl/bin/python",
        help="a Python with diffprivlib (it needs scikit-learn < 1.6) for the defaults section",
    )
    ap.add_argument(
        "--splits", type=int, default=DEFAULTS_SEEDS, help="defaults: 70/30 splits (seed = split)"
    )
    ap.add_argument(
        "--noise-seed",
        type=int,
        default=0,
        help="defaults: split k's noise seed is this + k (other noise on the same splits)",
    )
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument(
        "--points", type=int, default=25, help="f evaluations per run (curve resolution)"
    )
    ap.add_argument(
        "--probe", type=int, default=12, help="runs timed serially and on Dask for the speed-up"
    )
    ap.add_argument(
        "--out", default=None, help="directory for the PNG figures (not written otherwise)"
    )
    a = ap.parse_args()
    a.reps = a.reps or (10 if a.full else 2)
    a.eps = a.eps or ([0.5, 0.8, 1.0] if a.full else [0.5, 1.0])
    a.real_sizes = a.real_sizes or ([1, 10, 100, 1000] if a.full else [100])
    a.betas = [round(0.01 * k, 2) for k in range(1, 101)] if a.full else [0.01, 0.1, 0.3, 1.0]
    a.stoch_betas = [0.01, 0.1, 0.3, 0.6, 1.0] if a.full else [0.1, 1.0]
    a.long = [a.n_iter, 10 * a.n_iter] if a.full else [a.n_iter]
    return a


def warm_up(tasks, n, d):
    """Import everything and load every data set a run needs, so the timings below compare runs only."""
    for data, rep in dict.fromkeys((t.data, t.rep) for t in tasks):
        load(data, rep, n, d)
    run_task(Task("synthetic", "dp-gd", 1.0, 1.0, None, 2, 0), n, d, 1)


def main():
    a = parse_args()
    start = time.perf_counter()
    work = sections(a)
    if work:
        run_thesis_sections(a, work)
    if "defaults" in a.sections:
        print(f"\n=== defaults === (load average {os.getloadavg()[0]:.1f})")
        report_defaults(a)
    print(f"\nwall time {time.perf_counter() - start:.0f} s; load average {os.getloadavg()[0]:.1f}")


def run_thesis_sections(a, work):
    """Run every task of the thesis sections on a LocalCluster and print each section's report."""
    from distributed import Client, LocalCluster
    from threadpoolctl import threadpool_limits

    every_task = list(dict.fromkeys(t for ts in work.values() for t in ts))
    probe = work.get("beta", every_task)[: a.probe]
    cluster = LocalCluster(
        n_workers=a.workers,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
    )
    client = Client(cluster)
    try:
        client.run(warm_up, probe, a.n, a.d)
        with threadpool_limits(
            1
        ):  # as on the workers: one BLAS thread, so the iterates are identical
            warm_up(probe, a.n, a.d)
            t0 = time.perf_counter()
            serial = [run_task(t, a.n, a.d, a.points) for t in probe]
            t_serial = time.perf_counter() - t0
        t1 = time.perf_counter()
        parallel = client.gather(
            client.map(run_task, probe, n=a.n, d=a.d, points=a.points, pure=False)
        )
        t_dask = time.perf_counter() - t1
        same = all(s["gap"] == p["gap"] for s, p in zip(serial, parallel))
        rest = [t for t in every_task if t not in set(probe)]
        futures = client.map(run_task, rest, n=a.n, d=a.d, points=a.points, pure=False)
        results = dict(zip(probe, parallel)) | dict(zip(rest, client.gather(futures)))
    finally:
        client.close()
        cluster.close()
    print(
        f"Kuru thesis ch. 4 reproduction: n={a.n}, d={a.d}, lambda={LAMBDA}, C={C}, T={a.n_iter}, "
        f"reps={a.reps}, {len(every_task)} runs; load average {os.getloadavg()[0]:.1f}"
    )
    print(
        f"Dask ({a.workers} worker processes on 127.0.0.1) vs a serial loop on the same {len(probe)} runs: "
        f"serial {t_serial:.1f} s, Dask {t_dask:.1f} s, speed-up {t_serial / t_dask:.2f}x "
        f"(identical results: {same})"
    )
    cpu_serial, cpu_dask = sum(r["cpu"] for r in serial), sum(r["cpu"] for r in parallel)
    print(
        f"  CPU seconds per wall second: serial {cpu_serial / t_serial:.2f}, Dask {cpu_dask / t_dask:.2f} "
        f"(on a machine saturated by other jobs extra workers get no extra CPU, and the speed-up is the ratio "
        f"of these)"
    )
    for name, tasks in work.items():
        print(f"\n=== {name} ===")
        if name in THESIS:
            print(f"thesis: {THESIS[name]}")
            REPORTS[name](name, results, tasks, a)
        else:
            report_table(results, tasks, a)
        if a.out:
            os.makedirs(a.out, exist_ok=True)
            plot_section(name, results, tasks, a.out)
    diverged = sum(r["status"] != "completed" for r in results.values())
    print(f"\n{diverged} of {len(results)} runs diverged (their f - f* counts as inf)")


if __name__ == "__main__":
    main()
