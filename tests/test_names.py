"""One name per thing (docs/glossary.md): every renamed public name still works, warns FutureWarning
naming its successor, and gives what the new name gives."""

import warnings

import numpy as np
import pytest
from sklearn.base import clone

import partition
from hamsi import model_io
from hamsi.cli import main
from hamsi.data import Ratings
from hamsi.estimator import MatrixFactorizer
from hamsi.optimizer import minimize_hamsi, minimize_mbgd
from hamsi.parameters import DEPRECATED
from hamsi.problems import MatrixFactorization
from hamsi.trace import TRACE_COLUMNS, Trace

FIXED = dict(rank=2, reg=0.1, reg_weighting="uniform", threads=1, random_state=0, blocks=2)


@pytest.fixture(scope="module")
def ratings():
    """A 30 x 20 matrix with 240 distinct ratings."""
    rng = np.random.default_rng(3)
    flat = rng.choice(600, size=240, replace=False)
    rows, cols = np.divmod(flat, 20)
    return Ratings(rows, cols, rng.integers(1, 6, size=240).astype(float), (30, 20))


def future_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]


def test_max_epochs_warns_and_fits_what_max_cycles_fits(ratings):
    new = MatrixFactorizer(max_cycles=3, **FIXED).fit(ratings)
    with pytest.warns(FutureWarning, match="max_epochs is deprecated.*use max_cycles"):
        old = MatrixFactorizer(max_epochs=3, **FIXED).fit(ratings)
    assert old.result_.n_cycles == new.result_.n_cycles == 3
    np.testing.assert_array_equal(old.user_factors_, new.user_factors_)
    np.testing.assert_array_equal(old.item_factors_, new.item_factors_)


def test_max_epochs_round_trips_through_get_params_and_clone():
    model = MatrixFactorizer(max_epochs=7)
    assert model.get_params()["max_epochs"] == 7 and model.get_params()["max_cycles"] == 100
    copy = clone(model)
    assert copy.max_epochs == 7 and copy.max_cycles == 100
    assert MatrixFactorizer().max_epochs == DEPRECATED
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # the new name alone never warns
        MatrixFactorizer(max_cycles=4).validate_params()


def test_a_bad_max_epochs_is_refused_under_its_own_name():
    with pytest.raises(Exception, match="max_epochs must be an integer >= 1; got 0"):
        MatrixFactorizer(max_epochs=0).validate_params()


def test_the_search_warns_once_for_max_epochs(ratings):
    """The trials take the value under its new name: one warning per fit, not one per trial."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = MatrixFactorizer(
            rank=2, max_epochs=2, threads=1, random_state=0, blocks=2, search=True
        ).fit(ratings)
    assert len(future_warnings(caught)) == 1
    assert model.search_results_ is not None and max(model.search_results_["cycles_run"]) <= 2


def test_a_model_saved_with_max_epochs_loads_as_max_cycles(ratings, tmp_path):
    model = MatrixFactorizer(max_cycles=3, **FIXED).fit(ratings, validation=ratings)
    path = tmp_path / "model.npz"
    model.save(path)
    params, fitted, arrays = model_io.read_model(path)
    params.pop("max_cycles")
    params.pop("max_epochs")
    params["max_epochs"] = 3  # a file written before the rename
    fitted["best_epoch_"] = fitted.pop("best_cycle_")
    old = tmp_path / "old.npz"
    model_io.write_model(old, params, fitted, arrays)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # a saved file is not the caller's code
        loaded = MatrixFactorizer.load(old)
    assert loaded.max_cycles == 3 and loaded.max_epochs == DEPRECATED
    assert loaded.best_cycle_ == model.best_cycle_ == 3
    np.testing.assert_array_equal(loaded.predict([0, 1], [0, 1]), model.predict([0, 1], [0, 1]))
    assert MatrixFactorizer.load(path).max_cycles == 3


@pytest.mark.parametrize("minimize", [minimize_hamsi, minimize_mbgd])
def test_minimize_keywords_max_epochs_and_heldout(ratings, minimize):
    problem = MatrixFactorization(ratings, 2, reg=0.1)
    cover = partition.make("strata-b", ratings, blocks=2)
    held = ratings  # any ratings of the problem's shape
    new = minimize(problem, cover, random_state=0, threads=1, max_cycles=3, validation=held)
    with pytest.warns(FutureWarning) as caught:
        old = minimize(problem, cover, random_state=0, threads=1, max_epochs=3, heldout=held)
    messages = future_warnings(caught)
    assert any("max_epochs=...) is deprecated" in m and "max_cycles=" in m for m in messages)
    assert any("heldout=...) is deprecated" in m and "validation=" in m for m in messages)
    np.testing.assert_array_equal(old.x, new.x)
    assert old.trace.column("validation_rmse")[-1] == new.trace.column("validation_rmse")[-1]


def test_trace_columns_have_new_names_and_the_old_ones_warn(ratings):
    rows = []
    model = MatrixFactorizer(max_cycles=2, **FIXED).fit(
        ratings, validation=ratings, callback=rows.append
    )
    assert TRACE_COLUMNS == (
        "cycle",
        "inner",
        "time_s",
        "train_rmse",
        "validation_rmse",
        "objective",
    )
    last = model.trace_.rows[-1]
    with pytest.warns(FutureWarning, match="'epoch' is deprecated; use 'cycle'"):
        assert last.epoch == last.cycle == 2
    with pytest.warns(FutureWarning, match="'test_rmse' is deprecated; use 'validation_rmse'"):
        assert last.test_rmse == last.validation_rmse
    with pytest.warns(FutureWarning, match="use 'cycle'"):
        np.testing.assert_array_equal(model.trace_.column("epoch"), [0, 1, 2])
    assert [row["cycle"] for row in rows] == [0, 1, 2]
    with pytest.warns(FutureWarning, match="use 'validation_rmse'"):
        assert rows[-1]["test_rmse"] == rows[-1]["validation_rmse"]
    with pytest.raises(KeyError):
        rows[-1]["nothing"]


def test_trace_csv_header_is_the_new_columns(tmp_path):
    trace = Trace()
    trace.append(0, 0, 0.0, 1.0, 1.5, 2.0)
    trace.write_csv(tmp_path / "t.csv")
    assert (tmp_path / "t.csv").read_text().splitlines()[0] == ",".join(TRACE_COLUMNS)


def test_cli_max_epochs_still_works_with_a_warning(ratings, tmp_path, capsys):
    data = tmp_path / "r.csv"
    users, items, values = ratings.rows, ratings.cols, ratings.values
    data.write_text("".join(f"{u},{i},{v}\n" for u, i, v in zip(users, items, values)))
    common = ["factorize", str(data), "--rank", "2", "--reg", "0.1", "--reg-weighting", "uniform"]
    common += ["--workers", "0", "--threads", "1", "--blocks", "2", "--quiet"]
    traces = {}
    for flag in ("--max-cycles", "--max-epochs"):
        traces[flag] = tmp_path / f"{flag}.csv"
        assert main([*common, flag, "3", "--trace", str(traces[flag])]) == 0
        err = capsys.readouterr().err
        deprecated = (
            "--max-epochs is deprecated and will be removed in a future release; use --max-cycles"
        )
        assert (deprecated in err) == (flag == "--max-epochs")
    new, old = (traces[f].read_text().splitlines() for f in ("--max-cycles", "--max-epochs"))
    assert len(old) == len(new) == 1 + 4  # the start and 3 cycles
    assert [line.split(",")[0] for line in old] == [line.split(",")[0] for line in new]


def test_dask_estimator_chunk_epochs_and_max_epochs_are_deprecated_names():
    from cluster.estimator import DaskMatrixFactorizer

    model = DaskMatrixFactorizer(chunk_epochs=5, max_epochs=7, n_workers=2)
    with pytest.warns(FutureWarning) as caught:
        model.validate_params()
    messages = future_warnings(caught)
    assert len(messages) == 2 and any("use chunk_cycles" in m for m in messages)
    assert model._engine_options()["chunk_cycles"] == 5 and model._param("max_cycles") == 7
    assert clone(model).get_params()["chunk_epochs"] == 5
    assert DaskMatrixFactorizer()._engine_options()["chunk_cycles"] == 10


def test_best_epoch_is_a_deprecated_name_of_best_cycle(ratings):
    model = MatrixFactorizer(max_cycles=3, **FIXED).fit(ratings, validation=ratings)
    assert model.best_cycle_ == model.result_.best_cycle == 3
    with pytest.warns(FutureWarning, match="use best_cycle_"):
        assert model.best_epoch_ == 3
    with pytest.warns(FutureWarning, match="use result.best_cycle"):
        assert model.result_.best_epoch == 3
    with pytest.warns(FutureWarning, match="use result.best_cycle"):
        assert model.result_["best_epoch"] == 3
    with pytest.raises(AttributeError):
        assert model.result_.no_such_field is None


def test_algorithms_is_a_deprecated_name_of_methods():
    import hamsi.estimator
    from hamsi.options import METHODS

    with pytest.warns(FutureWarning, match="use hamsi.options.METHODS"):
        assert hamsi.estimator.ALGORITHMS == METHODS
    with pytest.raises(AttributeError):
        hamsi.estimator.NO_SUCH_NAME  # noqa: B018
