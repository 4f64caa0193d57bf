"""The thesis sections' reports of benchmarks/bench_dp_learning.py: tables of f - f*, verdicts, plots."""

from __future__ import annotations

import functools
import os

import numpy as np

C, R, LAMBDA, DELTA = 2.0, 2.0, 0.01, 1e-5

LITERAL = (
    "thesis-literal-gdws"  # Alg. 4 written out, L from the data as the thesis does (not private)
)
OURS_DET, OURS_STOCH = ("dp-gdws", "dp-mag"), ("dp-sgdws", "dp-smag")
DETERMINISTIC = ("dp-gdws", "dp-mag", "dp-gd", "dp-hb", "dp-nag", "m-asg", "m-asg*")
STOCHASTIC = ("dp-sgdws", "dp-smag", "dp-gd", "dp-hb", "dp-nag", "m-asg", "m-asg*")
GAUSSIAN = (
    "dp-gdws-gauss",
    "dp-mag-gauss",
    "dp-sgdws-gauss",
    "dp-smag-gauss",
    "dp-onlinegdws-gauss",
    "dp-sgd",
)


SMOOTHING_BETAS = (0.1, 0.3, 1.0)


def mean_over_reps(results, tasks, key="gap"):
    """Return {task without rep: mean of `key` over reps}."""
    groups: dict[tuple, list[float]] = {}
    for t in tasks:
        groups.setdefault((t.data, t.method, t.epsilon, t.beta, t.batch, t.n_iter), []).append(
            results[t][key]
        )
    return {k: float(np.mean(v)) for k, v in groups.items()}


def verdict(holds: bool) -> str:
    return "holds" if holds else "DOES NOT HOLD"


def report_beta(name, results, tasks, a):
    """Figs. 4.2/4.3, 4.8-4.13: mean f - f* per beta; does smoothing beat beta = 1, where is the best beta?"""
    means = mean_over_reps(results, tasks)
    settings = sorted({(k[1], k[4], k[2]) for k in means}, key=lambda k: (k[1] or 0, k[2]))
    betas = sorted({k[3] for k in means})
    print(
        f"{'method':>14} {'m':>5} {'eps':>4} "
        + "".join(f"{'b=' + format(b, 'g'):>10}" for b in betas)
        + "   best beta   smoothing beats beta=1"
    )
    for method, batch, eps in settings:
        row = [means[("synthetic", method, eps, b, batch, a.n_iter)] for b in betas]
        best = betas[int(np.argmin(row))]
        smooth = min(v for b, v in zip(betas, row) if b < 1)
        beats = verdict(1.0 in betas and smooth < row[betas.index(1.0)])
        print(
            f"{method:>14} {batch or 'n':>5} {eps:>4g} "
            + "".join(f"{v:>10.3g}" for v in row)
            + f"   {best:>9g}   {beats}"
        )


def report_smoothing(name, results, tasks, a):
    """Mean f - f* +- standard error over 10 reps per beta, ours and the literal Alg. 4."""
    print(
        f"{'implementation':>28} "
        + "".join(f"{'beta = ' + format(b, 'g'):>18}" for b in SMOOTHING_BETAS)
        + "   beats beta = 1?"
    )
    for method, label in (
        ("dp-gdws", "dp.learning (public L)"),
        (LITERAL, "thesis Alg. 4 literal (data L)"),
    ):
        cells = {}
        for beta in SMOOTHING_BETAS:
            gaps = np.array(
                [results[t]["gap"] for t in tasks if t.method == method and t.beta == beta]
            )
            cells[beta] = (gaps.mean(), gaps.std(ddof=1) / np.sqrt(len(gaps)), len(gaps))
        text = "".join(f"{m:>11.3g} +- {se:<5.2g}" for m, se, _ in cells.values())
        said = []
        for beta in (b for b in SMOOTHING_BETAS if b < 1):
            gap = cells[1.0][0] - cells[beta][0]  # > 0: smoothing is better
            tie = abs(gap) <= 2 * np.hypot(cells[1.0][1], cells[beta][1])
            said.append(f"beta {beta:g}: " + ("tie (2 s.e.)" if tie else verdict(gap > 0)))
        print(f"{label:>28} {text}   {'; '.join(said)} ({cells[1.0][2]} reps)")
    print(
        "why: beta (g + Lap(S T / eps)) is DP-GD's release times beta (post-processing: no less noise), and "
        "the update is heavy ball with momentum 1 - beta, whose effective step grows like "
        "sqrt((2 - beta) / beta) under (4.21)"
    )


def report_compare(name, results, tasks, a, ours):
    """Figs. 4.4-4.6, 4.14-4.19, 4.21-4.24: mean f - f* per method; are `ours` the best len(ours)?"""
    means = mean_over_reps(results, tasks)
    methods = list(dict.fromkeys(t.method for t in tasks))
    settings = list(dict.fromkeys((t.data, t.epsilon, t.batch, t.n_iter) for t in tasks))
    print(
        f"{'data':>9} {'eps':>4} {'m':>5} {'T':>6} "
        + "".join(f"{m:>10}" for m in methods)
        + "   ours best"
    )
    held = 0
    for data, eps, batch, T in settings:
        row = {m: means[(data, m, eps, 0.1, batch, T)] for m in methods}
        top = sorted(row, key=row.get)[: len(ours)]
        ok = set(top) == set(ours)
        held += ok
        print(
            f"{data:>9} {eps:>4g} {batch or 'n':>5} {T:>6} "
            + "".join(f"{row[m]:>10.3g}" for m in methods)
            + f"   {verdict(ok)}"
        )
    print(f"ordering holds in {held} of {len(settings)} settings")
    report_per_dataset(results, tasks, ours, methods)


def report_per_dataset(results, tasks, ours, methods):
    """Figs. 4.7/4.20: at epsilon = 0.5, on how many data sets (repetitions) are ours the best?"""
    picked = [t for t in tasks if t.epsilon == 0.5 and t.data == "synthetic"]
    if not picked:
        return
    by_setting: dict[tuple, dict[int, dict[str, float]]] = {}
    for t in picked:
        by_setting.setdefault((t.batch, t.n_iter), {}).setdefault(t.rep, {})[t.method] = results[t][
            "gap"
        ]
    for (batch, T), reps in by_setting.items():
        wins = sum(set(sorted(g, key=g.get)[: len(ours)]) == set(ours) for g in reps.values())
        print(
            f"  eps 0.5, m={batch or 'n'}, T={T}: ours best on {wins} of {len(reps)} data sets (Figs. 4.7/4.20)"
        )


def report_table(results, tasks, a):
    """The table: held-out accuracy and f - f* of every method at eps 0.5 and 1 (Gaussian ones at delta 1e-5)."""
    gaps, accs = mean_over_reps(results, tasks), mean_over_reps(results, tasks, "accuracy")
    keys = list(dict.fromkeys((t.method, t.batch) for t in tasks))
    print(
        f"{'method':>20} {'batch':>6} {'noise / accounting':>26} | {'acc 0.5':>8} {'f-f* 0.5':>9} | "
        f"{'acc 1':>7} {'f-f* 1':>9}"
    )
    for method, batch in keys:
        how = (
            "Gaussian, " + ("zCDP" if batch in (None, 10) and method != "dp-sgd" else "RDP")
            if method in GAUSSIAN
            else "Laplace, pure eps"
        )
        cells = [
            (
                accs[("synthetic", method, e, 0.1, batch, a.n_iter)],
                gaps[("synthetic", method, e, 0.1, batch, a.n_iter)],
            )
            for e in (0.5, 1.0)
        ]
        print(
            f"{method:>20} {batch or 'full':>6} {how:>26} | {cells[0][0]:>8.3f} {cells[0][1]:>9.3g} | "
            f"{cells[1][0]:>7.3f} {cells[1][1]:>9.3g}"
        )
    print(
        f"(delta = {DELTA:g} for the Gaussian variants and dp-sgd; held-out accuracy on 5000 fresh records)"
    )


def plot_section(name, results, tasks, out_dir):
    """Draw mean f - f* curves, one PNG per (data, eps, batch, T) setting of the section."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = list(dict.fromkeys((t.data, t.epsilon, t.batch, t.n_iter) for t in tasks))
    for data, eps, batch, T in settings:
        fig, ax = plt.subplots(figsize=(6, 4))
        lines = list(
            dict.fromkeys(
                (t.method, t.beta)
                for t in tasks
                if (t.data, t.epsilon, t.batch, t.n_iter) == (data, eps, batch, T)
            )
        )
        for method, beta in lines:
            runs = [
                results[t]
                for t in tasks
                if (t.data, t.method, t.epsilon, t.beta, t.batch, t.n_iter)
                == (data, method, eps, beta, batch, T)
                and t in results
            ]
            finite = [r["curve"] for r in runs if r["status"] == "completed"]
            if not finite:
                continue
            curve = np.mean(finite, axis=0)
            x = np.minimum(np.arange(len(curve)) * runs[0]["every"], T)
            ax.semilogy(
                x,
                np.maximum(curve, 1e-12),
                label=f"{method} b={beta:g}" if "gdws" in method else method,
            )
        ax.set(
            xlabel="iteration",
            ylabel="f - f*",
            title=f"{name}: {data}, eps={eps:g}, m={batch or 'n'}",
        )
        ax.legend(fontsize=7)
        fig.savefig(
            os.path.join(out_dir, f"{name}_{data}_eps{eps:g}_m{batch or 'n'}_T{T}.png"), dpi=100
        )
        plt.close(fig)


REPORTS = {
    "beta": report_beta,
    "stochastic-beta": report_beta,
    "online": report_beta,
    "smoothing": report_smoothing,
    "mag": functools.partial(report_compare, ours=("dp-mag",)),
    "deterministic": functools.partial(report_compare, ours=OURS_DET),
    "smag": functools.partial(report_compare, ours=("dp-smag",)),
    "stochastic": functools.partial(report_compare, ours=OURS_STOCH),
    "real": functools.partial(report_compare, ours=OURS_STOCH),
}
