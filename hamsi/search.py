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
from dataclasses import dataclass, field

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
# The first rung runs 10 cycles. From the small random start the validation RMSE stayed flat or
# rose for 10-20 cycles while the factors grew out of the saddle at zero, and a first rung of 10
# or 20 cycles cut the eventual winner; from the spectral start (hamsi.spectral_start) the curves
# fall from the first cycle, and 10 cycles (with patience 10) kept the choice on 5 of 6 preset
# splits, the sixth 0.0004 behind on validation (docs/accuracy.md).
MIN_CYCLES = 10
# Half the candidates go on: of eight, two per rank (keeping a third cut the rank-10 trial that wins
# at 100 cycles, docs/accuracy.md).
HALVING_FACTOR = 2
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
    """Return [(candidates kept, cycles)] of each rung: 1/factor of them go on, factor times longer.

    Promoted trials continue their runs (hamsi.trials), so a rung costs only its extra cycles.
    Halving stops at `factor` candidates, which all run max_cycles: a late starter among the
    finalists is not cut at an intermediate rung (on the demo's sample the candidate ahead at
    60 cycles was behind at 100). The winner's best cycle, up to max_cycles, is the refit's.
    """
    kept, cycles = n_candidates, max(1, min(min_cycles, max_cycles))
    rungs = [(kept, cycles)]
    while cycles < max_cycles:
        if kept > factor:
            kept = math.ceil(kept / factor)
            cycles = max_cycles if kept == 1 else min(max_cycles, cycles * factor)
        else:  # the last `factor` candidates all run the whole budget: none is cut on the way
            cycles = max_cycles
        rungs.append((kept, cycles))
    return rungs


def survivors(alive: list, scores: dict, kept: int, groups: list) -> list:
    """Return the `kept` candidates of `alive` to promote: the best kept // G of each of the G groups, then the best.

    groups[index] is candidate index's group (its rank): a rank-10 model is still improving at 30
    cycles where a rank-50 one has peaked, so comparing across ranks after a short rung cuts the
    slow starters, which win at full length. Within a rank, the best keep their places.
    """
    ranked = sorted(alive, key=lambda index: (scores[index], index))
    by_group = {}
    for index in ranked:
        by_group.setdefault(groups[index], []).append(index)
    share = max(1, kept // len(by_group))
    promoted = [index for members in by_group.values() for index in members[:share]]
    promoted += [index for index in ranked if index not in promoted][: max(0, kept - len(promoted))]
    return sorted(promoted, key=lambda index: (scores[index], index))


def can_still_win(rows: list[dict], candidate: int, scores: dict, max_cycles: int) -> bool:
    """True unless `candidate`'s validation curve, continued at its last rung's slope, stays behind the leader.

    rows: the results table so far; scores: {candidate: score} of the rung just finished (equal
    cycles). The candidate's best validation RMSE fell by d over its last rung's c cycles; at
    that rate it reaches v - d (max_cycles - cycles) / c by max_cycles. A curve that flattens
    (every one recorded from the spectral start does) falls less than that, so a candidate whose
    reach is no better than the leader's score now, which can only fall, would not win: it is
    not promoted. The leader, and a candidate with a single finished rung, always are. On 17
    preset splits this never cut a winner, and cut joke-like's running rank-50 finalists at 40
    cycles (docs/accuracy.md).
    """
    leader = min(scores, key=lambda c: (scores[c], c))
    history = [r for r in rows if r["candidate"] == candidate and r["complete"]]
    if candidate == leader or len(history) < 2:
        return True
    before, last = history[-2], history[-1]
    fall = before["validation_rmse"] - last["validation_rmse"]
    if not math.isfinite(fall) or last["cycles"] <= before["cycles"]:
        return True
    reach = last["validation_rmse"] - fall * (max_cycles - last["cycles"]) / (
        last["cycles"] - before["cycles"]
    )
    return (reach,) < scores[leader]


@dataclass(frozen=True)
class SearchResult:
    """What the search chose: the winner's parameters and candidate index, the refit's cycles.

    searched: False when no rung finished (the time budget was too short to compare
    candidates at equal cycles); `params` and `candidate` are then the fallback's (the first
    candidate), not a winner's. results: search_results_ (one entry per trial).
    """

    params: dict
    candidate: int
    cycles: int
    results: dict
    searched: bool
    validation_rmse: float


def choose_by_validation(
    grid: list[dict],
    run_rung,
    *,
    min_cycles: int = MIN_CYCLES,
    max_cycles: int = 100,
    factor: int = HALVING_FACTOR,
    deadline: float | None = None,
    group_by: str = "rank",
    screen_by: str | None = "rank",
    report=None,
) -> SearchResult:
    """Return the SearchResult of successive halving over `grid` (ASHA-style promotion).

    run_rung(trials: list[Trial], report) -> list of outcome dicts in the order of `trials`
    (hamsi.trials.TrialRun.outcome: validation_rmse of the best cycle, NaN when diverged;
    best_epoch; cycles run; complete; seconds), calling report(trial, outcome) as each ends.
    Rung 0 screens (`first_rung`): the candidates with the smallest grid[i][screen_by] first,
    the others only for the best 1/factor of their settings. Trials are compared only at equal
    cycles: a rung that the `deadline` (time.time()) cut short is left out, and the winner
    comes from the last rung all of whose trials finished (of rung 0: from its finished trials;
    none: no winner, searched=False). A rung promotes the best of every value of
    grid[i][group_by] (`survivors`).
    """
    if not grid:
        raise InputError("the search has no candidates")
    rungs = _Rungs(grid, run_rung, _reporter(report), deadline)
    outcomes = first_rung(rungs, max(1, min(min_cycles, max_cycles)), screen_by, factor)
    finished = _finished(outcomes)
    decided = _decide(finished, 0, rungs.rows) if finished else None
    cut = len(finished) < len(outcomes)
    if not cut:
        # the halving counts the whole grid: a screened-out candidate counts as cut at rung 0
        schedule = rung_cycles(min_cycles, max_cycles, factor, len(grid))[1:]
        groups = [row.get(group_by) for row in grid]
        decided, cut = _later_rungs(rungs, finished, decided, groups, schedule, max_cycles)
    return _result(grid, decided, rungs.rows, max_cycles, cut)


@dataclass
class _Rungs:
    """The search's trials so far (rows of the results table) and how to run more."""

    grid: list
    run_rung: object
    report: object
    deadline: float | None
    rows: list = field(default_factory=list)

    def past(self) -> bool:
        return past(self.deadline)

    def has_time_for(self, seconds: float) -> bool:
        """True when `seconds` from now end before the deadline (always without one)."""
        return self.deadline is None or time.time() + seconds <= self.deadline

    def run(self, candidates: list, cycles: int, rung: int) -> dict:
        """Run `candidates` to `cycles` as rung `rung`; return {candidate: outcome}."""
        trials = [Trial(c, self.grid[c], cycles, rung, self.deadline) for c in candidates]
        results = self.run_rung(trials, self.report)
        self.rows.extend(_rows(trials, results))
        return {t.candidate: o for t, o in zip(trials, results)}


def first_rung(rungs: _Rungs, cycles: int, screen_by: str | None, factor: int) -> dict:
    """Return {candidate: outcome} of rung 0, run in two waves when screening.

    The candidates with the smallest grid[i][screen_by] (the cheapest rank) run first; a
    candidate with another value runs only when its other settings (its penalty) are among the
    best 1/factor of the first wave's and their first-wave trial improved on its start. On six
    preset splits the screen chose the winner of the full rung with 36 % fewer trial cycles
    (docs/accuracy.md): the penalties rank alike at every rank, and a rank-50 cycle costs 2.7
    rank-10 ones. Under a penalty that keeps every rank-10 cycle from beating the start the
    factors do not help: of 17 recorded preset splits this happened on book-like seeds 0 and 1
    (the uniform penalty), whose rank-50 trial never left cycle 0 either.

    A first wave cut by the deadline ends the rung, and so does a deadline too near for the
    second wave to finish (`_second_wave_seconds`): a trial that cannot finish its rung is never
    compared, and its start alone (a rank-50 spectral start on 96k items: 2-3 s) would run past
    the deadline.
    """
    grid = rungs.grid
    values = [row.get(screen_by) for row in grid] if screen_by else [None] * len(grid)
    smallest = min((v for v in values if v is not None), default=None)
    first = [c for c in range(len(grid)) if values[c] in (smallest, None)]
    outcomes = rungs.run(first, cycles, 0)
    rest = [c for c in range(len(grid)) if c not in first]
    if not rest or len(_finished(outcomes)) < len(first) or rungs.past():
        return outcomes
    ranked = sorted(first, key=lambda c: (_score(outcomes[c]), c))
    best = {
        _setting(grid[c], screen_by)
        for c in ranked[: math.ceil(len(first) / factor)]
        if outcomes[c]["best_epoch"] > 0
    }
    second = [c for c in rest if _setting(grid[c], screen_by) in best]
    if not second or not rungs.has_time_for(
        _second_wave_seconds([outcomes[c] for c in first], [values[c] for c in second], smallest)
    ):
        return outcomes
    outcomes.update(rungs.run(second, cycles, 0))
    return outcomes


def _second_wave_seconds(first: list[dict], values: list, smallest) -> float:
    """Return the expected wall of a second-wave trial's rung 0: the first wave's longest trial
    (its start and cycles), times the ratio of the widths, max(values) + 1 over smallest + 1
    (a trial's start and cycles cost about its width: rank 50 against 10 took 4.4-4.7x the
    wall on book-like and long-tail-like, 2.0-2.6x on ml-100k-like and joke-like)."""
    longest = max(float(o["seconds"]) for o in first)
    return longest * (max(values) + 1) / (smallest + 1)


def _later_rungs(
    rungs: _Rungs, finished: dict, decided, groups: list, schedule: list, max_cycles: int
):
    """Run the rungs after the first; return (decided winner and row, cut by the deadline).

    A rung promotes `survivors`, less those whose curve cannot reach the leader (can_still_win).
    """
    alive, scores = list(finished), {c: _score(o) for c, o in finished.items()}
    for rung, (kept, cycles) in enumerate(schedule, start=1):
        if len(alive) == 1:
            break
        if rungs.past():
            return decided, True
        promoted = survivors(alive, scores, min(kept, len(alive)), groups)
        promoted = [c for c in promoted if can_still_win(rungs.rows, c, scores, max_cycles)]
        _discard(rungs.run_rung, [c for c in alive if c not in promoted])
        alive = promoted
        if len(alive) == 1:  # the winner: its best cycle up to max_cycles is the refit's
            cycles = max_cycles
        outcomes = rungs.run(alive, cycles, rung)
        finished = _finished(outcomes)
        if len(finished) < len(outcomes):  # cut: the rung is not compared
            return decided, True
        scores = {c: _score(o) for c, o in finished.items()}
        decided = _decide(finished, rung, rungs.rows)
    return decided, False


def _finished(outcomes: dict) -> dict:
    """Return the outcomes of the trials that ran their rung's cycles (or were stopped by a rule)."""
    return {c: o for c, o in outcomes.items() if o["complete"]}


def _setting(candidate: dict, leave_out: str) -> tuple:
    """Return a candidate's settings other than `leave_out`, as a hashable key."""
    return tuple(sorted((k, v) for k, v in candidate.items() if k != leave_out))


def past(deadline: float | None) -> bool:
    """True when time.time() `deadline` has passed (None: never)."""
    return deadline is not None and time.time() >= deadline


def _discard(run_rung, candidates) -> None:
    """Tell run_rung the candidates the search cut, when it keeps their runs (hamsi.trials)."""
    discard = getattr(run_rung, "discard", None)
    if discard is not None and candidates:
        discard(candidates)


def _reporter(report):
    return (lambda trial, outcome: None) if report is None else report


def _score(outcome: dict) -> tuple:
    rmse = float(outcome["validation_rmse"])
    return (rmse if math.isfinite(rmse) else math.inf,)


def _decide(finished: dict, rung: int, rows: list[dict]) -> tuple[int, dict]:
    """Return (best candidate of `finished`, its row of `rung`): lowest score, then lowest index."""
    best = min(finished, key=lambda c: (_score(finished[c]), c))
    row = next(r for r in rows if r["candidate"] == best and r["rung"] == rung)
    return best, row


def _rows(trials: list, outcomes: list) -> list[dict]:
    """Return the results table's rows of a rung's trials."""
    return [
        {
            **trial.params,
            "candidate": trial.candidate,
            "rung": trial.rung,
            "cycles": trial.cycles,
            "cycles_run": int(outcome["cycles"]),
            "complete": bool(outcome["complete"]),
            "validation_rmse": float(outcome["validation_rmse"]),
            "best_epoch": int(outcome["best_epoch"]),
            "seconds": float(outcome["seconds"]),
        }
        for trial, outcome in zip(trials, outcomes)
    ]


def _result(
    grid: list[dict], decided, rows: list[dict], max_cycles: int, cut: bool
) -> SearchResult:
    """Return the SearchResult: the decided winner's, or the first candidate's when none was decided."""
    if decided is None:
        winner, row, searched = 0, None, False
    else:
        (winner, row), searched = decided, True
    results = {key: [r[key] for r in rows] for key in rows[0]} if rows else {}
    results["chosen"] = [r is row for r in rows]
    results["finished"] = not cut
    cycles = _refit_cycles(row, max_cycles) if row is not None else 0
    rmse = float(row["validation_rmse"]) if row is not None else math.nan
    return SearchResult(dict(grid[winner]), winner, cycles, results, searched, rmse)


def _refit_cycles(row: dict, max_cycles: int) -> int:
    """Return the cycles the refit runs, from the winner's row.

    Its best cycle: 0 when no cycle beat the start (the biases fit), so the refit is that start
    too. When every cycle diverged, the trial's cycles (the refit diverges too and says so). A
    winner still improving at the last cycle of a rung shorter than max_cycles (the budget ended
    the search) has shown no stopping point: max_cycles.
    """
    if not math.isfinite(row["validation_rmse"]):
        return row["cycles"]
    still_falling = row["best_epoch"] >= row["cycles"] and row["cycles"] < max_cycles
    return max_cycles if still_falling else row["best_epoch"]


def format_results(results: dict) -> str:
    """Return search_results_ as an aligned table, one line per trial (the CLI prints it)."""
    lines = [
        f"{'rung':>4} {'cycles':>6} {'rank':>4} {'weighting':>9} {'reg':>8} {'damping':>7} {'val RMSE':>9} "
        f"{'best':>5} {'s':>6}"
    ]
    for k in range(len(results["rung"])):
        mark = "  <- chosen" if results["chosen"][k] else ""
        if not results["complete"][k]:
            mark += f"  (cut at cycle {results['cycles_run'][k]}: not compared)"
        lines.append(
            f"{results['rung'][k]:>4} {results['cycles'][k]:>6} {results['rank'][k]:>4} "
            f"{results['reg_weighting'][k]:>9} {results['reg'][k]:>8.4g} {results['reg_damping'][k]:>7.4g} "
            f"{results['validation_rmse'][k]:>9.4f} {results['best_epoch'][k]:>5} "
            f"{results['seconds'][k]:>6.2f}{mark}"
        )
    if not results["finished"]:
        lines.append("(the time budget ended the search before its last rung)")
    return "\n".join(lines)


def describe(params: dict) -> str:
    """Return a candidate as the CLI and the progress lines name it: rank 10, count reg 0.1 damping 20."""
    text = f"rank {params['rank']}, {params['reg_weighting']} reg {params['reg']:.4g}"
    if params.get("reg_damping"):
        text += f" damping {params['reg_damping']:.4g}"
    return text


def trial_line(trial: Trial, outcome: dict, n_trials: int) -> str:
    """Return the one progress line of a trial that ended (hamsi.estimator's verbose output)."""
    state = "" if outcome["complete"] else f" (cut by the time budget at cycle {outcome['cycles']})"
    return (
        f"search rung {trial.rung} ({n_trials} trials, {trial.cycles} cycles): "
        f"{describe(trial.params)}: validation RMSE {outcome['validation_rmse']:.4f} "
        f"at cycle {outcome['best_epoch']}, {outcome['seconds']:.1f} s{state}"
    )


def spread_of(train) -> float:
    """Return the standard deviation of the training ratings."""
    return float(np.asarray(train.values, dtype=np.float64).std())
