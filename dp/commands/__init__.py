"""dp's `hamsi` sub-commands: glasso, dp-learn and queries (the CLI registry, hamsi.registry, names them).

The one part of dp that imports hamsi, and only its CLI helpers (hamsi.cli_io, hamsi.errors,
hamsi.limits): dp's library stands alone.
"""
