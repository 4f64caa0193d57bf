"""The one HAMSI / mb-GD loop: cycles of inner iterations, a trace row per cycle, the stop rules.

Both engines run this code: `hamsi.optimizer` with a LocalExchange, each Dask worker with a
MailboxExchange (cluster.exchange) on its share of the cycles. Decisions come from the Stepper
and StopRules; the exchange only moves and reduces numbers.
"""

from __future__ import annotations

import warnings

from hamsi.stop_rules import divergence_message


def __getattr__(name: str):
    if name == "ROW_NAMES":  # the trace's columns have one name: hamsi.trace.TRACE_COLUMNS
        # why lazy: hamsi.trace is needed only by this deprecated alias
        from hamsi.trace import TRACE_COLUMNS

        warnings.warn(
            "hamsi.loop.ROW_NAMES is deprecated; use hamsi.trace.TRACE_COLUMNS",
            FutureWarning,
            stacklevel=2,
        )
        return TRACE_COLUMNS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def record(trace, callback, epoch: int, inner: int, evaluation) -> None:
    """Append one trace row (and call callback(row dict))."""
    trace.append(
        epoch, inner, evaluation.time_s, evaluation.train, evaluation.heldout, evaluation.objective
    )
    if callback is not None:
        callback(trace.rows[-1].record())


def start(stepper, exchange, stop, trace, callback) -> None:
    """Evaluate the starting point (trace row 0) and hand it to the stepper and the stop rules."""
    evaluation = exchange.evaluate()
    record(trace, callback, 0, stepper.inner, evaluation)
    stop.start(evaluation.objective, evaluation.heldout)
    stepper.begin(evaluation, exchange)
    if stop.keeps_best and stop.new_best:
        exchange.save("best")


def run_cycle(stepper, exchange, stop, epoch: int) -> None:
    """Run the inner iterations of cycle `epoch`; end it early once a process's clock reached max_time."""
    order = stepper.cycle(epoch)
    last = len(order) - 1
    vote = False
    for position, subset in enumerate(order):
        following = int(order[position + 1]) if position < last else -1
        if not stepper.inner_iteration(exchange, position, last, int(subset), vote, following):
            return
        vote = stop.out_of_time(exchange.clock())


def close_cycle(stepper, exchange, stop, trace, callback, epoch: int):
    """Evaluate, let the safeguard judge, record, and return (reason, message) or None."""
    evaluation, repeated = stepper.end_cycle(exchange.evaluate(), exchange)
    record(trace, callback, epoch, stepper.inner, evaluation)
    verdict = stop.check(
        epoch,
        stepper.inner,
        evaluation.time_s,
        evaluation.train,
        evaluation.heldout,
        evaluation.objective,
        repeated=repeated,
    )
    if stop.keeps_best and stop.new_best:
        exchange.save("best")
    if verdict is None and stepper.gave_up:
        verdict = (
            "diverged",
            divergence_message(evaluation.objective, epoch, stepper.inner, stepper.eta, True)
            + (f" (the safeguard went back to the last good iterate {stepper.fallbacks} times)"),
        )
    return verdict


def run_cycles(stepper, exchange, stop, trace, callback, epochs):
    """Run the cycles in `epochs` until a stop rule fires; return (reason, message, last epoch run)."""
    epoch = None
    for epoch in epochs:
        run_cycle(stepper, exchange, stop, epoch)
        verdict = close_cycle(stepper, exchange, stop, trace, callback, epoch)
        if verdict is not None:
            return verdict[0], verdict[1], epoch
    return None, "", epoch
