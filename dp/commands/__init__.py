"""dp's `hamsi` sub-commands: glasso, dp-learn and queries (the CLI registry, hamsi.registry, names them).

The one part of dp that imports hamsi, and only its CLI helpers (hamsi.cli_io, hamsi.errors,
hamsi.limits): dp's library stands alone.
"""

from hamsi.errors import Advice, AdvisedWarning, flag_name, for_cli


def warning_for_cli(message) -> str:
    """Return what the command line prints for a warning: its advice in flags, not keywords.

    dp's integer-seed warning advises random_state=None; on the command line that is omitting
    --seed (hamsi.errors.Advice holds both wordings; other warnings print as for_cli says).
    """
    # why lazy: dp loads numpy's random machinery, only when a warning is printed
    from dp._random import SEED_ADVICE, SEED_RISK, SEED_WARNING

    if str(message) == SEED_WARNING:
        flag = flag_name("random_state")
        cli = f"omit {flag} (fresh OS entropy for every release) for a real release"
        message = AdvisedWarning(f"{flag} given: {SEED_RISK}", Advice(SEED_ADVICE, cli))
    return for_cli(message)
