"""The hyper-parameter search's trials as Dask tasks: each trial's run lives on a worker.

hamsi.search decides everything (the grid, the rungs, who is kept); this module only runs a
rung's trials on the cluster. The fit and validation parts are scattered once to every worker
(ratings kept on the workers give futures of them there already: cluster.search_sample); a
trial's run (hamsi.trials.TrialRun) is started by one task and stays on that worker as a
future; promoting it submits a task that continues that run there (no state moves), and a
small task reads its outcome. Each trial runs the in-process engine on threads_per_worker
threads, so it gives what it gives in this process and the search chooses the same model for
the same seed.
"""

from __future__ import annotations

from distributed import Future, as_completed

from hamsi import trials as trial_runs


class DaskTrialRunner:
    """run_rung for hamsi.search.choose_by_validation: a rung's trials over the workers."""

    def __init__(
        self, client, estimator_class, base_params: dict, fit_part, validation, threads: int
    ):
        self.client, self.estimator_class = client, estimator_class
        self.base_params = dict(base_params, threads=int(threads))
        # ratings kept on the workers (cluster.search_sample): the client never takes a rating,
        # so a fitted trial comes back without its lists of seen items (O(ratings))
        self.kept = isinstance(fit_part, Future)
        if self.kept:
            self.fit_part, self.validation = fit_part, validation
        else:  # broadcast: every worker gets the ratings once; a trial then moves only its parameters
            self.fit_part, self.validation = client.scatter(
                [fit_part, validation], broadcast=True, hash=False
            )
        self.runs: dict = {}  # candidate -> future of its TrialRun, on the worker that runs it
        self.homes: dict = {}  # candidate -> that worker's address
        self.workers = sorted(client.scheduler_info()["workers"])

    def _run(self, trial):
        """Return the future of candidate's run advanced to trial.cycles (started if new)."""
        run = self.runs.get(trial.candidate)
        # a run stays where it started: its state is a live engine, never moved between workers
        home = self.homes.setdefault(
            trial.candidate, self.workers[len(self.homes) % len(self.workers)]
        )
        place = dict(workers=[home], allow_other_workers=False, pure=False)
        if run is None:
            run = self.client.submit(
                trial_runs.start_trial,
                self.estimator_class,
                self.base_params,
                trial.params,
                self.fit_part,
                self.validation,
                **place,
            )
        run = self.client.submit(
            trial_runs.advance_trial, run, trial.cycles, trial.deadline, **place
        )
        self.runs[trial.candidate] = run
        return run

    def __call__(self, trials, report) -> list[dict]:
        """Return the outcomes of `trials` in their order, calling report(trial, outcome) as each ends."""
        outcomes = {
            self.client.submit(
                trial_runs.trial_outcome,
                self._run(trial),
                trial.cycles,
                workers=[self.homes[trial.candidate]],
                pure=False,
            ): trial
            for trial in trials
        }
        # the client is not the default one (a LocalCluster of the fit), so name its loop
        for future in as_completed(list(outcomes), loop=self.client.loop):
            report(outcomes[future], future.result())
        return [future.result() for future in outcomes]

    def discard(self, candidates) -> None:
        """Release the runs of candidates the search cut (their futures, so their workers' memory)."""
        for candidate in candidates:
            self.runs.pop(candidate, None)

    def fitted(self, candidate: int):
        """Return the estimator fitted by candidate's trial (its best-validation iterate)."""
        return self.client.submit(
            trial_runs.fitted_trial,
            self.runs[candidate],
            keep_seen=not self.kept,
            workers=[self.homes[candidate]],
            pure=False,
        ).result()
