"""Successive halving on scripted trial outcomes (hamsi.search): screening, promotion, deadlines, cut rungs."""

import math
import time

import numpy as np

from hamsi import search


def test_the_screen_runs_the_larger_rank_for_the_best_half_of_the_penalties():
    grid = [{"rank": r, "reg": float(g)} for g in range(4) for r in (10, 50)]
    waves = []

    def run_rung(trials, report):
        waves.append([t.candidate for t in trials])
        # rank 10's order of the penalties: 3, 1, 0, 2
        return [outcome({3: 1.0, 1: 1.1, 0: 1.2, 2: 1.3}[t.params["reg"]], t) for t in trials]

    search.choose_by_validation(grid, run_rung, min_cycles=5, max_cycles=5)
    assert waves == [[0, 2, 4, 6], [3, 7]]  # rank 50 of penalties 1 and 3
    waves.clear()
    search.choose_by_validation(grid, run_rung, min_cycles=5, max_cycles=5, screen_by=None)
    assert waves == [list(range(8))]


def outcome(rmse, trial, best=None):
    """An outcome of a trial that ran its rung's cycles (hamsi.trials.TrialRun.outcome)."""
    best = trial.cycles if best is None else best
    return dict(
        validation_rmse=rmse, best_epoch=best, cycles=trial.cycles, complete=True, seconds=0.0
    )


def test_successive_halving_keeps_the_best_third_against_brute_force():
    grid = [
        {"rank": r, "reg_weighting": "uniform", "reg": float(g)}
        for r in (1, 2, 3)
        for g in range(6)
    ]
    rng = np.random.default_rng(0)
    quality = dict(enumerate(rng.permutation(len(grid)).astype(float)))

    def run_rung(trials, report):
        # validation RMSE falls with the cycles; its order among candidates is `quality`
        return [outcome(1.0 + quality[t.candidate] / (1 + t.cycles), t) for t in trials]

    found = search.choose_by_validation(
        grid, run_rung, min_cycles=2, max_cycles=40, factor=3, group_by=None, screen_by=None
    )
    results = found.results
    assert found.params == grid[min(quality, key=quality.get)] and found.cycles == 40
    rung1 = [
        (results["rank"][k], results["reg"][k])
        for k in range(len(results["rung"]))
        if results["rung"][k] == 1
    ]
    best6 = sorted(quality, key=quality.get)[:6]
    assert sorted(rung1) == sorted((grid[i]["rank"], grid[i]["reg"]) for i in best6)
    # promoted trials continue, so every rung is a factor longer; the last one runs the budget
    assert search.rung_cycles(2, 40, 3, 18) == [(18, 2), (6, 6), (2, 18), (2, 40)]
    assert search.rung_cycles(10, 100, 3, 3) == [(3, 10), (3, 100)]
    assert search.rung_cycles(30, 100, 2, 4) == [(4, 30), (2, 60), (2, 100)]
    assert search.rung_cycles(30, 100, 2, 8) == [(8, 30), (4, 60), (2, 100)]


def test_a_rung_promotes_the_best_of_every_rank():
    ranks = [10, 50, 10, 50, 10, 50, 10, 50, 10, 50]
    # every rank-50 candidate ahead after the short rung: the rank-10 ones still keep two places
    scores = {i: ((0.90 if ranks[i] == 50 else 0.93) + 0.001 * i, i) for i in range(10)}
    assert search.survivors(list(range(10)), scores, 4, ranks) == [1, 3, 0, 2]
    assert search.survivors(list(range(10)), scores, 4, [None] * 10) == [
        1,
        3,
        5,
        7,
    ]  # one group: the best 4
    # three groups, four places: the best of each, then the best of the rest
    assert search.survivors(list(range(10)), scores, 4, [1] * 8 + [2, 3]) == [1, 3, 9, 8]

    def run_rung(trials, report):  # rank 10 slower to start, better in the end
        return [
            outcome((0.93 - 0.0003 * t.cycles) if t.params["rank"] == 10 else 0.91, t)
            for t in trials
        ]

    grid = [{"rank": r, "reg": float(g)} for g in range(5) for r in (10, 50)]
    found = search.choose_by_validation(grid, run_rung, min_cycles=30, max_cycles=100)
    assert found.params["rank"] == 10
    found = search.choose_by_validation(
        grid, run_rung, min_cycles=30, max_cycles=100, group_by=None
    )
    assert found.params["rank"] == 50  # what comparing across ranks after 30 cycles chose


def test_a_deadline_reaches_every_trial_and_no_rung_starts_after_it(monkeypatch):
    grid = [{"rank": 1, "reg_weighting": "uniform", "reg": float(g)} for g in range(4)]
    seen = []

    def run_rung(trials, report):  # every curve still falling: none is cut as unable to win
        seen.extend(t.deadline for t in trials)
        return [outcome(1.0 + t.candidate / t.cycles, t) for t in trials]

    found = search.choose_by_validation(
        grid, run_rung, min_cycles=1, max_cycles=4, deadline=time.time() + 60
    )
    assert len(seen) == 4 + 2 + 2 and all(d is not None for d in seen) and found.searched
    seen.clear()
    found = search.choose_by_validation(
        grid, run_rung, min_cycles=1, max_cycles=4, deadline=time.time() - 1
    )
    assert len(seen) == 4 and found.results["finished"] is False  # rung 0 only
    assert found.params == grid[0] and found.cycles == 4  # still improving: the whole budget


def test_a_penalty_that_never_beat_its_start_at_rank_10_is_not_tried_at_rank_50():
    grid = [{"rank": r, "reg": float(g)} for g in range(4) for r in (10, 50)]
    waves = []

    def run_rung(trials, report):
        waves.append([t.candidate for t in trials])
        # rank 10's order of the penalties: 3, 1, 0, 2; penalty 1 never left its start
        rmse = {3: 1.0, 1: 1.1, 0: 1.2, 2: 1.3}
        return [
            outcome(rmse[t.params["reg"]], t, best=0 if t.params["reg"] == 1 else None)
            for t in trials
        ]

    search.choose_by_validation(grid, run_rung, min_cycles=5, max_cycles=5)
    assert waves == [[0, 2, 4, 6], [7]]  # rank 50 of penalty 3 only


def test_the_second_wave_starts_only_when_it_can_finish_before_the_deadline():
    """A rank-50 trial's start alone can outlast the budget: the wave runs only if it fits."""
    grid = [{"rank": r, "reg": float(g)} for g in range(4) for r in (10, 50)]
    waves = []

    def run_rung(trials, report):
        waves.append([t.candidate for t in trials])
        results = [outcome(1.0 + 0.1 * t.params["reg"], t) for t in trials]
        for result in results:
            result["seconds"] = 1.0  # each first-wave trial: 1 s; a rank-50 one: 51 / 11 s
        return results

    for left, wave_runs in ((3.0, False), (6.0, True)):
        waves.clear()
        found = search.choose_by_validation(
            grid, run_rung, min_cycles=5, max_cycles=5, deadline=time.time() + left
        )
        assert waves[0] == [0, 2, 4, 6] and ([1, 3] in waves) == wave_runs, (left, waves)
        assert found.searched and (wave_runs or found.params["rank"] == 10)


def test_a_cut_trial_never_wins_and_a_cut_rung_is_not_compared():
    grid = [{"rank": 1, "reg_weighting": "uniform", "reg": float(g)} for g in range(6)]

    def cut_in(rung_cut, cut_candidates):
        def run_rung(trials, report):
            results = []
            for t in trials:
                # the later the candidate, the better it looks - but the cut ones only so far
                result = outcome(2.0 - 0.1 * t.candidate, t)
                if t.rung == rung_cut and t.candidate in cut_candidates:
                    result.update(complete=False, cycles=t.cycles // 2, validation_rmse=0.5)
                results.append(result)
                report(t, result)
            return results

        return run_rung

    # rung 0 cut for candidates 4 and 5: the winner is the best of the finished ones (3)
    found = search.choose_by_validation(
        grid, cut_in(0, {4, 5}), min_cycles=2, max_cycles=8, factor=2, group_by=None
    )
    assert found.searched and found.candidate == 3 and found.results["finished"] is False
    # rung 1 cut: it is left out; the winner is rung 0's best, with rung 0's best cycle
    found = search.choose_by_validation(
        grid, cut_in(1, {5}), min_cycles=2, max_cycles=8, factor=2, group_by=None
    )
    chosen = found.results["chosen"].index(True)
    assert found.candidate == 5 and found.results["rung"][chosen] == 0 and found.cycles == 8
    # every trial of rung 0 cut: no winner, searched=False (the estimator says so)
    found = search.choose_by_validation(
        grid, cut_in(0, set(range(6))), min_cycles=2, max_cycles=8, factor=2, group_by=None
    )
    assert not found.searched and not any(found.results["chosen"])


def test_a_diverging_candidate_is_never_chosen():
    grid = [{"rank": 1, "reg_weighting": "uniform", "reg": float(g)} for g in range(4)]

    def run_rung(trials, report):
        return [outcome(math.nan if t.candidate == 0 else 1.0 + t.candidate, t, 1) for t in trials]

    found = search.choose_by_validation(grid, run_rung, min_cycles=1, max_cycles=3, factor=2)
    assert found.params == grid[1]


def test_a_candidate_whose_curve_cannot_reach_the_leader_is_not_promoted():
    # four penalties x ranks 10 and 50 (candidate 2 g + 1 is rank 50); rungs of 10, 20, 40, 100
    grid = [{"rank": r, "reg": float(g)} for g in range(4) for r in (10, 50)]
    # rank 10's first penalty keeps falling; rank 50's has flattened behind it at 40 cycles:
    # 0.95 -> 0.94 over its last 20 cycles reaches 0.94 - 0.01 * 60 / 20 = 0.91 at 100, behind 0.90
    curves = {0: {10: 0.97, 20: 0.93, 40: 0.90, 100: 0.88}, 1: {10: 0.96, 20: 0.95, 40: 0.94}}
    ran = []

    def run_rung(trials, report):
        ran.append([(t.candidate, t.cycles) for t in trials])
        flat = {c: 1.0 + 0.01 * c for c in (10, 20, 40, 100)}
        return [outcome(curves.get(t.candidate, flat)[t.cycles], t) for t in trials]

    found = search.choose_by_validation(grid, run_rung, min_cycles=10, max_cycles=100)
    assert (1, 40) in ran[-2] and ran[-1] == [(0, 100)]
    assert found.candidate == 0 and found.cycles == 100
    # still falling at 0.04 per 20 cycles it could win (0.92 - 0.04 * 3 = 0.80): it goes on, and wins
    curves[1] = {10: 0.98, 20: 0.96, 40: 0.92, 100: 0.87}
    ran.clear()
    found = search.choose_by_validation(grid, run_rung, min_cycles=10, max_cycles=100)
    assert sorted(ran[-1]) == [(0, 100), (1, 100)] and found.candidate == 1
    # flat already at 20 cycles: the leader, left alone, runs the whole budget at once
    curves[1] = {10: 0.96, 20: 0.959}
    ran.clear()
    found = search.choose_by_validation(grid, run_rung, min_cycles=10, max_cycles=100)
    assert ran[-1] == [(0, 100)] and (0, 40) not in ran[-2] and found.cycles == 100


def test_can_still_win_keeps_the_leader_and_a_single_rung():
    rows = [
        {"candidate": 0, "rung": 0, "cycles": 10, "complete": True, "validation_rmse": 0.95},
        {"candidate": 1, "rung": 0, "cycles": 10, "complete": True, "validation_rmse": 0.99},
    ]
    scores = {0: (0.95,), 1: (0.99,)}
    assert search.can_still_win(rows, 0, scores, 100)
    assert search.can_still_win(rows, 1, scores, 100)  # one rung: no slope to continue
    rows.append(
        {"candidate": 1, "rung": 1, "cycles": 20, "complete": True, "validation_rmse": 0.99}
    )
    rows.append(
        {"candidate": 0, "rung": 1, "cycles": 20, "complete": True, "validation_rmse": 0.95}
    )
    assert not search.can_still_win(rows, 1, scores, 100)  # flat behind the leader
    assert search.can_still_win(rows, 0, scores, 100)  # the leader, flat too
