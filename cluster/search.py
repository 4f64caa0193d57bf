"""The hyper-parameter search's trials as Dask tasks: one trial per worker, each in process there.

hamsi.search decides everything (the grid, the rungs, who is kept); this module only runs a
rung's independent trials on the cluster: the fit and validation parts are scattered once to
every worker, then each trial is one task, `hamsi.search.fit_trial` with the in-process
MatrixFactorizer and threads_per_worker threads, so a trial gives what it gives in this process
and the search chooses the same model for the same seed.
"""

from __future__ import annotations

from hamsi import search


class DaskTrialRunner:
    """run_rung for hamsi.search.choose_by_validation: a rung's trials mapped over the workers."""

    def __init__(
        self, client, estimator_class, base_params: dict, fit_part, validation, threads: int
    ):
        self.client, self.estimator_class = client, estimator_class
        self.base_params = dict(base_params, threads=int(threads))
        # broadcast: every worker gets the ratings once; each trial then moves only its parameters
        self.fit_part, self.validation = client.scatter(
            [fit_part, validation], broadcast=True, hash=False
        )

    def __call__(self, trials) -> list[dict]:
        """Return the outcomes of `trials` in their order (hamsi.search.fit_trial on the workers)."""
        futures = [
            self.client.submit(
                search.fit_trial,
                self.estimator_class,
                self.base_params,
                trial,
                self.fit_part,
                self.validation,
                pure=False,
            )
            for trial in trials
        ]
        return self.client.gather(futures)
