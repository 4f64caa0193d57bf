"""Hyper-parameters chosen by validation: successive halving over the `auto` ones.

`validation_split(train)` cuts a seeded per-user validation split from the training ratings
(every user keeps training ratings), `candidate_grid(fixed, sd)` builds the grid of the
parameters left `auto` (an explicit value is never searched) and `choose_by_validation(grid,
run_rung)` runs successive halving (Jamieson & Talwalkar 2016; Li et al. 2018, Hyperband's
inner loop): every candidate gets `min_cycles` cycles, the best 1/`factor` (by the clipped
validation RMSE of its best cycle: the engine keeps the best-validation iterate) get `factor`
times more, until at most `factor` are left, which run `max_cycles`. The winner's best cycle is
the number of cycles the refit on all training ratings runs.

Each trial starts from scratch: no warm start, because the engine's step 1/(eta t)^gamma and its
L-BFGS memory restart with the run, so a resumed trial would take the first, large steps again
from a fitted point. A rung's trials are independent, so `run_rung` may run them anywhere (one
after the other in this process, or as Dask tasks: cluster.search). Every trial is seeded by
random_state, and the table is sorted only by (rung, candidate), so the search is deterministic
under random_state unless the wall-clock budget cuts it short (then the rungs it did not reach
are missing from the table and the result says so).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from hamsi.errors import InputError

AUTO = "auto"
SEARCHED = ("rank", "reg_weighting", "reg", "reg_damping")
# Ranks 10 and 50: rank 25 was never the best of its weighting and reg on the presets, and each
# candidate costs a third of the search (docs/accuracy.md).
RANKS = (10, 50)
# reg per weighting. uniform: multiples of the ratings' sd (hamsi.defaults.REG_PER_SD = 7; 14 never
# came near the best on ml-100k-like or long-tail-like, 3.5 was last of its rank in every table
# after the damped penalty came, a fifth of the search); count (ALS-WR): absolute, because every
# rating carries the penalty itself and the best value barely moves with the scale of the data
# (0.05-0.24 on the presets, 0.12-0.15 by hand on real MovieLens files; 0.3-1.0 only worse
# on long-tail-like).
UNIFORM_REG_PER_SD = (7.0,)
COUNT_REGS = (0.05, 0.1, 0.2)
# count-weighted penalties searched as (reg, reg_damping) pairs: reg (n_a + d) |U_a|^2 blends the
# uniform penalty's shrinkage of rare rows (reg d) with ALS-WR's of popular ones; 0.05 / 80 was the
# best pair measured on long-tail-like and ml-100k-like, ahead of the undamped and the uniform
# penalty (docs/accuracy.md). Given one of the two, the other is searched over COUNT_REGS or DAMPINGS.
COUNT_PENALTIES = ((0.1, 0.0), (0.1, 20.0), (0.05, 80.0))
DAMPINGS = (0.0, 20.0, 80.0)
# What `auto` means where no search runs (ratings kept on the Dask workers: a trial needs its
# ratings in one process): the candidates every search starts from; reg then comes from the data
# (hamsi.defaults.choose_hyperparameters).
UNSEARCHED = {"rank": RANKS[0], "reg_weighting": "uniform", "reg_damping": 0.0}
VALIDATION_SHARE = 0.1
# The first rung runs 30 cycles: HAMSI's validation RMSE is not monotone early (it rises while the
# factors grow out of the small start), so a shorter first rung ranks the eventual winner in the
# bottom half and cuts it (docs/accuracy.md).
MIN_CYCLES = 30
# Half the candidates go on: of eight, two per rank (keeping a third cut the rank-10 trial that wins
# at 100 cycles, docs/accuracy.md).
HALVING_FACTOR = 2
TRIAL_PATIENCE = (
    60  # hamsi.defaults.PATIENCE_DEFAULT: validation can rise for a while before it falls
)
SEARCH_TIME_SHARE = 0.7  # of max_time; the refit gets the rest


@dataclass(frozen=True)
class Trial:
    """One run of the search: candidate index, its parameters, the cycles it may run, its rung.

    deadline: the search's end in time.time() seconds (None: no time budget); a trial still
    running then stops at the end of its cycle, so a max_time bounds the whole fit.
    """

    candidate: int
    params: dict
    cycles: int
    rung: int
    deadline: float | None = None


def validation_split(train, share: float = VALIDATION_SHARE, seed=None):
    """Return (fit part, validation part) of `train`: a seeded `share` of each user's ratings held out.

    Ratings.holdout_per_user: every user keeps at least one training rating, so no user of the
    validation part is unknown to the model fitted on the rest.
    """
    return train.holdout_per_user(float(share), seed=seed)


def candidate_grid(fixed: dict, spread: float) -> list[dict]:
    """Return the candidates: every combination of the `auto` values of SEARCHED, explicit ones fixed.

    `fixed` maps each of SEARCHED to a value or AUTO; `spread` is the training ratings' standard
    deviation (the unit of the uniform penalty's reg).
    """
    ranks = RANKS if fixed["rank"] == AUTO else (fixed["rank"],)
    weightings = (
        ("uniform", "count") if fixed["reg_weighting"] == AUTO else (fixed["reg_weighting"],)
    )
    reg, damping = fixed["reg"], fixed["reg_damping"]
    penalties = []
    for weighting in weightings:
        if weighting == "uniform":  # no damping (check_penalty refuses one > 0)
            penalties.extend((weighting, r, 0.0) for r in _uniform_regs(reg, spread))
        else:
            pairs = _count_penalties(reg, damping)
            penalties.extend((weighting, float(r), float(d)) for r, d in pairs)
    return [
        {"rank": int(rank), "reg_weighting": weighting, "reg": reg, "reg_damping": damping}
        for weighting, reg, damping in penalties
        for rank in ranks
    ]


def _uniform_regs(reg, spread: float) -> tuple:
    """Return the uniform penalty's regs: the given one, or UNIFORM_REG_PER_SD times the spread."""
    if reg != AUTO:
        return (float(reg),)
    return tuple(multiple * (spread if spread > 0 else 1.0) for multiple in UNIFORM_REG_PER_SD)


def _count_penalties(reg, damping) -> tuple:
    """Return the count-weighted (reg, reg_damping) pairs: each `auto` one searched, given ones kept."""
    if reg == AUTO and damping == AUTO:
        return COUNT_PENALTIES
    if reg == AUTO:
        return tuple((r, damping) for r in COUNT_REGS)
    if damping == AUTO:
        return tuple((reg, d) for d in DAMPINGS)
    return ((reg, damping),)


def rung_cycles(
    min_cycles: int, max_cycles: int, factor: int, n_candidates: int
) -> list[tuple[int, int]]:
    """Return [(candidates kept, cycles)] of each rung of successive halving; the last runs max_cycles."""
    rungs, kept, cycles = [], n_candidates, max(1, min(min_cycles, max_cycles))
    while kept > factor and cycles < max_cycles:
        rungs.append((kept, cycles))
        kept, cycles = math.ceil(kept / factor), cycles * factor
        if (
            cycles * factor > max_cycles
        ):  # a rung within a factor of the budget: run the budget at once
            break
    # the last candidates run the whole budget: the winner's best cycle is then the refit's. A rung
    # of 90 cycles followed by one of 100 would rerun its best from scratch for 10 more cycles.
    return rungs + [(kept, max_cycles)]


def survivors(alive: list, scores: dict, kept: int, groups: list) -> list:
    """Return the `kept` candidates of `alive` to promote: the best kept // G of each of the G groups, then the best.

    groups[index] is candidate index's group (its rank): a rank-10 model is still improving at 30
    cycles where a rank-50 one has peaked, so comparing across ranks after a short rung cuts the
    slow starters, which win at full length. Within a rank, the best keep their places.
    """
    ranked = sorted(alive, key=lambda index: scores[index])
    by_group = {}
    for index in ranked:
        by_group.setdefault(groups[index], []).append(index)
    share = max(1, kept // len(by_group))
    promoted = [index for members in by_group.values() for index in members[:share]]
    promoted += [index for index in ranked if index not in promoted][: max(0, kept - len(promoted))]
    return sorted(promoted, key=lambda index: scores[index])


def choose_by_validation(
    grid: list[dict],
    run_rung,
    *,
    min_cycles: int = MIN_CYCLES,
    max_cycles: int = 100,
    factor: int = HALVING_FACTOR,
    time_budget: float | None = None,
    group_by: str = "rank",
):
    """Return (winner's parameters, cycles for the refit, search_results dict) by successive halving.

    The refit's cycles are the winner's best cycle (at least 1, also when no cycle beat the bias
    start); max_cycles when its validation RMSE was still falling at the end of a trial shorter
    than max_cycles (the time budget ended the search early); the trial's when every one diverged.

    run_rung(trials: list[Trial]) -> list of dicts with validation_rmse (the clipped RMSE of the
    trial's best cycle; NaN when it diverged), best_epoch and seconds, in the order of `trials`.
    The search stops launching rungs once time_budget seconds (wall) have passed. A rung promotes
    the best of every value of grid[i][group_by] (`survivors`).
    """
    if not grid:
        raise InputError("the search has no candidates")
    started = time.perf_counter()
    deadline = None if time_budget is None else time.time() + time_budget
    rows, alive, finished = [], list(range(len(grid))), True
    scores: dict = {}
    groups = [grid[index].get(group_by) for index in range(len(grid))]
    for rung, (kept, cycles) in enumerate(rung_cycles(min_cycles, max_cycles, factor, len(grid))):
        if rung and _past(started, time_budget):
            finished = False
            break
        if rung:
            alive = survivors(alive, scores, kept, groups)
        trials = [Trial(index, grid[index], cycles, rung, deadline) for index in alive]
        rows.extend(_score_rung(trials, run_rung(trials), scores))
        if len(alive) == 1:
            break
    best = min(alive, key=lambda index: scores[index])
    last, results = _results_table(rows, grid[best], finished)
    return dict(grid[best]), _refit_cycles(last, scores[best][0], max_cycles), results


def _results_table(rows: list[dict], winner: dict, finished: bool) -> tuple[dict, dict]:
    """Return (the winner's last row, the table as columns with `chosen` marking that row and `finished`)."""
    last = next(row for row in reversed(rows) if _same(row, winner))
    results = {key: [row[key] for row in rows] for key in rows[0]}
    results["chosen"] = [_same(row, winner) and row is last for row in rows]
    results["finished"] = finished
    return last, results


def _past(started: float, time_budget: float | None) -> bool:
    """True when time_budget seconds (wall, from perf_counter() `started`) have passed."""
    return time_budget is not None and time.perf_counter() - started > time_budget


def _score_rung(trials: list, outcomes: list, scores: dict) -> list[dict]:
    """Record each trial's score (inf when it diverged) in `scores`; return its rows of the results table."""
    rows = []
    for trial, outcome in zip(trials, outcomes):
        rmse = float(outcome["validation_rmse"])
        scores[trial.candidate] = (rmse if math.isfinite(rmse) else math.inf, trial.candidate)
        rows.append(
            {
                **trial.params,
                "rung": trial.rung,
                "cycles": trial.cycles,
                "validation_rmse": rmse,
                "best_epoch": int(outcome["best_epoch"]),
                "seconds": float(outcome["seconds"]),
            }
        )
    return rows


def _refit_cycles(last: dict, best_score: float, max_cycles: int) -> int:
    """Return the cycles the refit runs, from the winner's last trial row.

    When every trial diverged the refit runs that trial's cycles, so it diverges too and says so;
    otherwise at least one cycle: the Dask driver's trace has no row for a run of 0 cycles. A winner
    whose validation RMSE was still falling at its trial's last cycle (a rung the budget cut short)
    has shown no stopping point: the refit takes the whole budget, max_cycles.
    """
    if not math.isfinite(best_score):
        return last["cycles"]
    still_falling = last["best_epoch"] >= last["cycles"] and last["cycles"] < max_cycles
    return max_cycles if still_falling else max(1, last["best_epoch"])


def _same(row: dict, params: dict) -> bool:
    return all(row[key] == value for key, value in params.items())


def trial_outcome(model, validation, seconds: float) -> dict:
    """Return the outcome of a fitted trial model: clipped validation RMSE of its kept cycle."""
    rmse = model.rmse(validation) if model.result_.reason != "diverged" else math.nan
    best = model.best_epoch_ if model.best_epoch_ is not None else model.result_.n_cycles
    return {"validation_rmse": rmse, "best_epoch": int(best), "seconds": seconds}


def format_results(results: dict) -> str:
    """Return search_results_ as an aligned table, one line per trial (the CLI prints it)."""
    lines = [
        f"{'rung':>4} {'cycles':>6} {'rank':>4} {'weighting':>9} {'reg':>8} {'damping':>7} {'val RMSE':>9} "
        f"{'best':>5} {'s':>6}"
    ]
    for k in range(len(results["rung"])):
        mark = "  <- chosen" if results["chosen"][k] else ""
        lines.append(
            f"{results['rung'][k]:>4} {results['cycles'][k]:>6} {results['rank'][k]:>4} "
            f"{results['reg_weighting'][k]:>9} {results['reg'][k]:>8.4g} {results['reg_damping'][k]:>7.4g} "
            f"{results['validation_rmse'][k]:>9.4f} {results['best_epoch'][k]:>5} "
            f"{results['seconds'][k]:>6.2f}{mark}"
        )
    if not results["finished"]:
        lines.append("(the time budget ended the search before its last rung)")
    return "\n".join(lines)


def spread_of(train) -> float:
    """Return the standard deviation of the training ratings."""
    return float(np.asarray(train.values, dtype=np.float64).std())


def fit_trial(estimator_class, base_params: dict, trial: Trial, fit_part, validation) -> dict:
    """Return the outcome of one trial: estimator_class(**base_params, **trial.params) fitted for trial.cycles.

    The trial keeps its best-validation cycle (patience TRIAL_PATIENCE on `validation`); the
    outcome's validation_rmse is that cycle's clipped RMSE (MatrixFactorizer.rmse). Runs in this
    process (on a Dask worker too: cluster.search).
    """
    import warnings

    started = time.perf_counter()
    max_time = None if trial.deadline is None else max(trial.deadline - time.time(), 1e-3)
    model = estimator_class(
        **dict(base_params, **trial.params, max_epochs=trial.cycles, max_time=max_time)
    )
    with warnings.catch_warnings():
        warnings.simplefilter(
            "ignore"
        )  # a trial's overfitting or divergence is its score, not news
        model.fit(fit_part, validation=validation)
    return trial_outcome(model, validation, time.perf_counter() - started)
