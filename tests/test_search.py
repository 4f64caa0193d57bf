"""hamsi.search and MatrixFactorizer's `auto` hyper-parameters: chosen by validation cut from train."""

import re
import time
import warnings

import numpy as np
import pytest

from hamsi import MatrixFactorizer, search
from hamsi.cli import main
from hamsi.data import Ratings
from hamsi.data.synth import make_ratings
from hamsi.data.writers import write_ratings
from hamsi.errors import InputError

FAST = dict(blocks=2, threads=1, max_cycles=9, random_state=0)


@pytest.fixture(scope="module")
def ratings():
    return make_ratings(users=60, items=80, ratings=1500, rank=3, seed=3)


def without_seconds(results):
    return {key: value for key, value in results.items() if key != "seconds"}


def test_the_search_is_deterministic_under_random_state(ratings):
    first = MatrixFactorizer(**FAST).fit(ratings)
    second = MatrixFactorizer(**FAST).fit(ratings)
    assert without_seconds(first.search_results_) == without_seconds(second.search_results_)
    np.testing.assert_array_equal(first.user_factors_, second.user_factors_)
    assert (first.rank_, first.reg_, first.reg_weighting_) == (
        second.rank_,
        second.reg_,
        second.reg_weighting_,
    )


def test_trials_side_by_side_on_threads_give_the_table_of_one_at_a_time(ratings, monkeypatch):
    import hamsi.trials

    side_by_side = MatrixFactorizer(**dict(FAST, threads=2)).fit(ratings)
    assert (
        len(side_by_side.search_results_["rank"]) > 2
    )  # rungs with several trials ran on the pool
    calls = []
    original = hamsi.trials.ThreadPoolExecutor

    def counting(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(hamsi.trials, "ThreadPoolExecutor", counting)
    side_by_side_again = MatrixFactorizer(**dict(FAST, threads=2)).fit(ratings)
    one_at_a_time = MatrixFactorizer(**FAST).fit(ratings)
    assert calls and calls[0][0] == 2
    assert without_seconds(side_by_side.search_results_) == without_seconds(
        one_at_a_time.search_results_
    )
    assert without_seconds(side_by_side_again.search_results_) == without_seconds(
        one_at_a_time.search_results_
    )


def test_a_trial_that_changes_threads_between_cycles_runs_the_cycles_of_one_thread(
    ratings, monkeypatch
):
    """A rung's last trial takes the freed threads from its next cycle on (LocalTrials): same bits."""
    from hamsi import kernels
    from hamsi.trials import TrialRun

    monkeypatch.setattr(
        kernels, "PARALLEL_VECTOR_MIN", 0
    )  # the parallel kernels, on this small set
    fit_part, validation = search.validation_split(ratings, seed=0)
    base = dict(FAST, threads=1, verbose=0)
    params = dict(rank=3, reg_weighting="count", reg=0.1, reg_damping=20.0)
    one = TrialRun(MatrixFactorizer, base, params, fit_part, validation)
    changing = TrialRun(MatrixFactorizer, base, params, fit_part, validation)
    counts = iter([1, 2, 2, 1, 2, 1, 1, 2, 2])
    used = []

    def threads():
        used.append(next(counts))
        return used[-1]

    expected = without_seconds(one.advance(9))
    assert without_seconds(changing.advance(9, threads=threads)) == expected
    assert len(used) == changing.run.epoch == 9 and changing.run.threads == 2
    assert changing.run.exchange.k is kernels._PARALLEL
    np.testing.assert_array_equal(changing.run.exchange.x, one.run.exchange.x)
    np.testing.assert_array_equal(changing.fitted().user_factors_, one.fitted().user_factors_)


def test_the_last_trials_of_a_rung_share_the_free_threads():
    from hamsi.trials import LocalTrials

    trials = LocalTrials(MatrixFactorizer, {}, None, None, workers=4)
    for unfinished, threads in ((6, 1), (4, 1), (3, 1), (2, 2), (1, 4), (0, 4)):
        trials._unfinished = unfinished
        assert trials._threads() == threads


def test_an_explicit_hyper_parameter_is_never_searched(ratings):
    model = MatrixFactorizer(rank=3, **FAST).fit(ratings)
    assert set(model.search_results_["rank"]) == {3} and model.rank_ == 3
    assert set(model.search_results_["reg_weighting"]) == {"uniform", "count"}
    model = MatrixFactorizer(reg=0.3, reg_weighting="count", **FAST).fit(ratings)
    assert set(model.search_results_["reg"]) == {0.3} and set(
        model.search_results_["reg_weighting"]
    ) == {"count"}
    assert model.reg_ == 0.3 and model.reg_weighting_ == "count"
    # a number for reg reads as the uniform penalty's: the weighting is not searched across it
    model = MatrixFactorizer(reg=2.0, **FAST).fit(ratings)
    assert set(model.search_results_["reg_weighting"]) == {"uniform"}
    model = MatrixFactorizer(rank=3, reg=2.0, reg_weighting="uniform", **FAST).fit(ratings)
    assert model.search_results_ is None and model.n_iter_ > 0 and model.result_.n_cycles == 9


def test_the_damping_is_searched_with_the_count_weighted_penalty_only():
    auto = dict.fromkeys(search.SEARCHED, "auto")
    grid = search.candidate_grid(auto, 1.0)
    assert {row["reg_damping"] for row in grid if row["reg_weighting"] == "uniform"} == {0.0}
    damped = {(row["reg"], row["reg_damping"]) for row in grid if row["reg_weighting"] == "count"}
    assert damped == set(search.COUNT_PENALTIES) and any(d > 0 for _, d in damped)
    assert len(grid) == len(search.RANKS) * (
        len(search.UNIFORM_REG_PER_SD) + len(search.COUNT_PENALTIES)
    )
    # one of reg and damping given: the other is searched; both given: one penalty per rank
    only_reg = search.candidate_grid(dict(auto, reg_weighting="count", reg=0.3), 1.0)
    assert {(r["reg"], r["reg_damping"]) for r in only_reg} == {(0.3, d) for d in search.DAMPINGS}
    only_damping = search.candidate_grid(dict(auto, reg_weighting="count", reg_damping=7.0), 1.0)
    assert {(r["reg"], r["reg_damping"]) for r in only_damping} == {
        (r, 7.0) for r in search.COUNT_REGS
    }


def test_a_damping_implies_the_count_weighted_penalty_and_refuses_the_uniform_one(ratings):
    model = MatrixFactorizer(rank=3, reg_damping=5.0, **FAST).fit(ratings)
    assert set(model.search_results_["reg_weighting"]) == {"count"} and set(
        model.search_results_["reg_damping"]
    ) == {5.0}
    assert model.reg_weighting_ == "count" and model.reg_damping_ == 5.0
    with pytest.raises(InputError, match="reg_damping=5.0 applies to the count-weighted penalty"):
        MatrixFactorizer(reg_weighting="uniform", reg_damping=5.0, **FAST).fit(ratings)
    with pytest.raises(InputError, match="reg_damping must be a finite number >= 0"):
        MatrixFactorizer(reg_damping=-1, **FAST).fit(ratings)


def test_search_false_takes_the_unsearched_values_in_one_run(ratings):
    model = MatrixFactorizer(search=False, **FAST).fit(ratings)
    assert model.search_results_ is None and model.result_.n_cycles == 9
    assert (model.rank_, model.reg_weighting_) == (
        search.UNSEARCHED["rank"],
        search.UNSEARCHED["reg_weighting"],
    )
    explicit = MatrixFactorizer(
        rank=10, reg_weighting="uniform", reg=model.reg_, search=False, **FAST
    ).fit(ratings)
    np.testing.assert_array_equal(
        model.user_factors_, explicit.user_factors_
    )  # auto reg is the data's default


def test_search_results_list_every_trial(ratings):
    model = MatrixFactorizer(**dict(FAST, max_cycles=40)).fit(ratings)
    results = model.search_results_
    grid = search.candidate_grid(
        dict.fromkeys(search.SEARCHED, "auto"), float(ratings.values.std())
    )
    first = [
        (results["rank"][k], results["reg_weighting"][k], results["reg"][k])
        for k in range(len(results["rung"]))
        if results["rung"][k] == 0
    ]
    # rung 0 screens: every penalty at rank 10, then rank 50 for the best half of them
    small = [(c["rank"], c["reg_weighting"], c["reg"]) for c in grid if c["rank"] == 10]
    assert first[: len(small)] == small and len(first) == len(small) + len(small) // 2
    assert {rank for rank, _, _ in first[len(small) :]} == {50}
    # then the halving of the whole grid: 4 of them (two per rank) to 20 cycles, 2 to 40
    assert [c for r, c in zip(results["rung"], results["cycles"]) if r] == [20] * 4 + [40] * 2
    assert results["rung"].count(1) == 4 and set(results["rung"]) == {0, 1, 2}
    assert sum(results["chosen"]) == 1
    chosen = results["chosen"].index(True)
    assert (results["rank"][chosen], results["reg"][chosen]) == (model.rank_, model.reg_)
    last = [k for k in range(len(results["rung"])) if results["rung"][k] == results["rung"][-1]]
    assert results["validation_rmse"][chosen] == min(results["validation_rmse"][k] for k in last)
    assert (
        model.result_.n_cycles == results["best_epoch"][chosen]
    )  # the refit runs the chosen cycles


def test_the_validation_split_leaves_every_user_with_training_ratings():
    rows = np.repeat(np.arange(5), [1, 2, 3, 10, 40])
    cols = np.concatenate([np.arange(n) for n in (1, 2, 3, 10, 40)])
    ratings = Ratings(rows, cols, np.ones(rows.size), (5, 40))
    fit_part, validation = search.validation_split(ratings, share=0.5, seed=0)
    assert np.all(np.bincount(fit_part.rows, minlength=5) >= 1)
    assert fit_part.nnz + validation.nnz == ratings.nnz
    keys = lambda r: set(zip(r.rows.tolist(), r.cols.tolist()))  # noqa: E731
    assert keys(fit_part) | keys(validation) == keys(ratings) and not keys(fit_part) & keys(
        validation
    )
    np.testing.assert_array_equal(np.bincount(validation.rows, minlength=5), [0, 1, 1, 5, 20])


def test_the_search_reads_only_training_ratings_and_the_refit_all_of_them(ratings, monkeypatch):
    train, test = ratings.split(0.2, seed=1)
    import hamsi.trials

    seen = []
    original = hamsi.trials.TrialRun.__init__

    def recording(self, cls, base, params, fit_part, validation):
        seen.append((fit_part.nnz, validation.nnz, fit_part.rows.copy(), fit_part.cols.copy()))
        original(self, cls, base, params, fit_part, validation)

    monkeypatch.setattr(hamsi.trials.TrialRun, "__init__", recording)
    with_test = MatrixFactorizer(**FAST).fit(train, validation=test)
    without_test = MatrixFactorizer(**FAST).fit(train)
    # the test ratings passed as validation= change nothing the search decides
    assert without_seconds(with_test.search_results_) == without_seconds(
        without_test.search_results_
    )
    train_keys = set(zip(train.rows.tolist(), train.cols.tolist()))
    for fit_n, validation_n, rows, cols in seen:
        assert (
            fit_n + validation_n == train.nnz
            and set(zip(rows.tolist(), cols.tolist())) <= train_keys
        )
    # the refit saw every training rating: its seen lists are train's
    assert with_test._seen_items.size == train.nnz


def test_the_cli_prints_the_search_and_the_chosen_values(ratings, tmp_path, capsys):
    path = write_ratings(ratings, tmp_path / "r.csv")
    assert (
        main(
            [
                "factorize",
                str(path),
                "--workers",
                "0",
                "--threads",
                "1",
                "--blocks",
                "2",
                "--max-cycles",
                "9",
                "--test-fraction",
                "0.2",
                "-q",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "hyper-parameter search" in out and "<- chosen" in out
    chosen = next(line for line in out.splitlines() if line.endswith("<- chosen")).split()
    damping = f", damping {float(chosen[5]):g}" if float(chosen[5]) else ""
    assert f"rank {chosen[2]}, reg {float(chosen[4]):.4g} ({chosen[3]}{damping})" in out
    assert "; test RMSE " in out


def test_the_cli_takes_a_damping_and_names_the_flag_when_it_conflicts(ratings, tmp_path, capsys):
    path = write_ratings(ratings, tmp_path / "r.csv")
    common = [
        "factorize",
        str(path),
        "--workers",
        "0",
        "--threads",
        "1",
        "--rank",
        "3",
        "--max-cycles",
        "4",
        "-q",
    ]
    assert main(common + ["--reg-damping", "5", "--reg", "0.1"]) == 0
    assert "reg 0.1 (count, damping 5)" in capsys.readouterr().out
    assert main(common + ["--reg-damping", "5", "--reg-weighting", "uniform"]) == 2
    assert "--reg-damping=5.0 applies to the count-weighted penalty" in capsys.readouterr().err


@pytest.mark.cluster
@pytest.mark.slow
def test_on_dask_the_trials_run_as_tasks_and_choose_the_in_process_model(ratings, client):
    from distributed import get_task_stream

    from cluster import DaskMatrixFactorizer

    in_process = MatrixFactorizer(**FAST).fit(ratings)
    with get_task_stream(client) as stream:
        on_dask = DaskMatrixFactorizer(**FAST, client=client).fit(ratings)
    trials = [event for event in stream.data if "advance_trial" in str(event["key"])]
    assert len(trials) == len(on_dask.search_results_["rung"])  # one task per trial and rung
    assert len({event["worker"] for event in trials}) == 2  # spread over both workers
    assert without_seconds(on_dask.search_results_) == without_seconds(in_process.search_results_)
    assert (on_dask.rank_, on_dask.reg_, on_dask.reg_weighting_) == (
        in_process.rank_,
        in_process.reg_,
        in_process.reg_weighting_,
    )
    np.testing.assert_allclose(
        on_dask.user_factors_, in_process.user_factors_, rtol=1e-10, atol=1e-12
    )


@pytest.mark.cluster
@pytest.mark.slow
def test_dask_estimator_reuses_one_local_cluster_and_warns_on_workers(ratings):
    from cluster import DaskMatrixFactorizer
    from cluster import estimator as dask_estimator

    options = dict(rank=2, reg=1.0, reg_weighting="uniform", blocks=2, max_cycles=2, random_state=0)
    try:
        DaskMatrixFactorizer(**options, n_workers=1).fit(ratings)
        first = dask_estimator._LOCAL_CLUSTERS[(1, 1)][0]
        with pytest.warns(FutureWarning, match="n_workers"):
            DaskMatrixFactorizer(**options, workers=1).fit(ratings)
        assert dask_estimator._LOCAL_CLUSTERS[(1, 1)][0] is first
    finally:
        dask_estimator.close_local_clusters()
    assert not dask_estimator._LOCAL_CLUSTERS and first.status == "closed"


@pytest.mark.cluster
def test_the_cli_closes_the_local_cluster_it_opened(ratings, tmp_path):
    from cluster import estimator as dask_estimator

    path = write_ratings(ratings, tmp_path / "r.csv")
    assert (
        main(
            [
                "factorize",
                str(path),
                "--workers",
                "1",
                "--rank",
                "2",
                "--reg",
                "1",
                "--max-cycles",
                "2",
                "-q",
            ]
        )
        == 0
    )
    assert not dask_estimator._LOCAL_CLUSTERS


def test_a_promoted_trial_continues_its_run_bit_for_bit(ratings):
    from hamsi.trials import TrialRun

    fit_part, validation = search.validation_split(ratings, seed=0)
    base = dict(MatrixFactorizer(**FAST).get_params(), on_divergence="warn")
    params = {"rank": 3, "reg_weighting": "count", "reg": 0.1, "reg_damping": 20.0}
    paused = TrialRun(MatrixFactorizer, base, params, fit_part, validation)
    first = paused.advance(4)
    assert first["cycles"] == 4 and first["complete"]
    paused.advance(9)
    straight = TrialRun(MatrixFactorizer, base, params, fit_part, validation)
    straight.advance(9)
    np.testing.assert_array_equal(paused.run.exchange.x, straight.run.exchange.x)
    untimed = lambda run: [row._replace(time_s=0.0) for row in run.trace.rows]  # noqa: E731
    assert len(paused.run.trace.rows) == 10 and untimed(paused.run) == untimed(straight.run)


def test_the_search_reports_every_trial_as_it_ends(ratings, capsys, caplog):
    import logging

    with caplog.at_level(logging.INFO, logger="hamsi"):
        model = MatrixFactorizer(**FAST, verbose=1).fit(ratings)
    err = capsys.readouterr().err.splitlines()
    trial_lines = [line for line in err if line.startswith("search rung ")]
    assert len(trial_lines) == len(model.search_results_["rung"])
    assert err[0].startswith("search: 8 candidates on ") and "search: chose rank" in err[-1]
    assert [r.getMessage() for r in caplog.records if r.name == "hamsi"] == err
    MatrixFactorizer(**FAST).fit(ratings)  # verbose=0: nothing on stderr
    assert capsys.readouterr().err == ""


def test_a_budget_too_small_to_search_says_so_and_keeps_a_validated_model(ratings):
    from hamsi.errors import AdvisedWarning

    with pytest.warns(AdvisedWarning, match="ended the search before any candidate finished"):
        model = MatrixFactorizer(**dict(FAST, max_cycles=100), max_time=1e-3).fit(ratings)
    assert not any(model.search_results_["chosen"])
    assert not any(model.search_results_["complete"])
    # the model is a trial's best cycle: never worse on validation than its start (the biases)
    fit_part, validation = search.validation_split(ratings, seed=0)
    assert model.best_cycle_ is not None and np.isfinite(model.rmse(validation))
    assert (
        model.rank_
        == search.candidate_grid(dict.fromkeys(search.SEARCHED, "auto"), search.spread_of(ratings))[
            0
        ]["rank"]
    )


def test_compiling_the_trials_kernels_does_not_eat_max_time(ratings, monkeypatch, capsys):
    """A new install's first search compiles its kernels (on Dask, in every worker) before any trial."""
    from hamsi import kernels

    compile_now, calls = kernels.warm_up, []

    def cold_first_compile(*args, **kwargs):
        compile_now(*args, **kwargs)
        if not calls:
            time.sleep(3.0)  # longer than the search's share of max_time
        calls.append(args)

    monkeypatch.setattr(kernels, "warm_up", cold_first_compile)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "ended the search before any candidate finished"
        model = MatrixFactorizer(**FAST, max_time=2.0, verbose=1).fit(ratings)
    assert any(model.search_results_["chosen"]) and all(model.search_results_["complete"])
    first = capsys.readouterr().err.splitlines()[0]
    assert first.startswith("search: 8 candidates") and re.search(
        r"its kernels took 3\.\d s to compile \(not counted in max_time\)$", first
    )


def test_max_time_bounds_the_whole_fit(ratings):
    big = make_ratings("ml-100k-like", seed=1)
    MatrixFactorizer(threads=2, max_cycles=2, search=False, random_state=0).fit(big)  # warm-up
    for budget in (1.0, 3.0):
        started = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = MatrixFactorizer(threads=2, random_state=0, max_time=budget).fit(big)
        wall = time.perf_counter() - started
        assert wall <= budget + 1.0, (budget, wall)
        assert model.result_.reason != "diverged"


def test_a_wide_rating_scale_is_fitted_as_stars_and_scaled_back(ratings, tmp_path):
    import dataclasses

    from hamsi.estimator import rating_unit

    stars = MatrixFactorizer(**FAST).fit(ratings)
    # the same ratings on a -10..+10 scale (x 5 - 15): the same model, in those units
    wide = dataclasses.replace(ratings, values=ratings.values * 5.0 - 15.0)
    assert rating_unit(wide.values) == pytest.approx(5.0 * np.ptp(ratings.values) / 4.0)
    model = MatrixFactorizer(**FAST).fit(wide)
    assert (model.rank_, model.reg_weighting_, model.reg_) == (
        stars.rank_,
        stars.reg_weighting_,
        stars.reg_,
    )
    np.testing.assert_allclose(
        model.rmse(wide) / rating_unit(wide.values) * rating_unit(ratings.values),
        stars.rmse(ratings),
        rtol=1e-6,
    )
    assert model.rating_min_ == -10.0 and model.rating_max_ == 10.0
    row = model.trace_.rows[-1]  # the trace in rating units (of the predictions before clipping)
    unclipped = np.sqrt(np.mean((model.predict(wide, clip=False) - wide.values) ** 2))
    assert row.train_rmse == pytest.approx(unclipped, rel=1e-6)
    model.save(tmp_path / "wide.npz")
    loaded = MatrixFactorizer.load(tmp_path / "wide.npz")
    np.testing.assert_array_equal(loaded.predict(wide), model.predict(wide))
    assert rating_unit(ratings.values) == 1.0 and rating_unit(np.array([0.5, 5.0])) == 1.0


def test_every_trial_run_is_started_once_and_continued(ratings, monkeypatch):
    import hamsi.trials

    started = []
    original = hamsi.trials.TrialRun.__init__

    def counting(self, cls, base, params, fit_part, validation):
        started.append(tuple(sorted(params.items())))
        original(self, cls, base, params, fit_part, validation)

    monkeypatch.setattr(hamsi.trials.TrialRun, "__init__", counting)
    model = MatrixFactorizer(**dict(FAST, max_cycles=40)).fit(ratings)
    assert len(started) == len(set(started)) == model.search_results_["rung"].count(0)
    assert model.search_results_["rung"].count(1) > 0  # the promoted ones were continued
