"""The `hamsi` CLI's registry: the sub-command modules and the engines, known by name only.

The CLI is the one place that knows every package, and it knows dp and cluster only through
the names below, imported here by importlib: hamsi imports neither statically (the arrows are
cluster -> hamsi -> partition, and dp's library stands alone; tests/test_import_rules.py).

A command module defines `register(subparsers)`, which adds its parser and sets
`run=callable(args) -> int`. An engine module runs `hamsi factorize` elsewhere than in this
process; the Dask one (cluster.cli) provides `estimator_for(args, params)`,
`is_distributed_source(path)`, `test_split(path, fraction, seed)`, `test_rmse(model)`,
`close_local_clusters()` and `write_top_n(model, ...)`.

One list in code rather than entry points in pyproject.toml: an installed distribution's entry
points change only on reinstall, and a second list beside them would be two places to keep equal.
"""

from __future__ import annotations

import importlib
from types import ModuleType

COMMAND_MODULES = [
    "hamsi.commands.demo",
    "hamsi.commands.data",
    "hamsi.commands.partition",
    "hamsi.commands.factorize",
    "hamsi.commands.recommend",
    "dp.commands.glasso",
    "dp.commands.dp_learn",
    "dp.commands.queries",
]

ENGINES = {"dask": "cluster.cli"}


def command_modules() -> list[ModuleType]:
    """Return the command modules that are installed, in COMMAND_MODULES order.

    A module that is not there (a package left out of the install) is skipped; a missing
    dependency inside a module is a real error and propagates.
    """
    modules = []
    for name in COMMAND_MODULES:
        try:
            modules.append(importlib.import_module(name))
        except ModuleNotFoundError as exc:
            if exc.name is None or not (name == exc.name or name.startswith(exc.name + ".")):
                raise
    return modules


def command(name: str) -> ModuleType:
    """Return the module of the sub-command `name` (as typed: dp-learn for dp_learn)."""
    for module_name in COMMAND_MODULES:
        if module_name.rsplit(".", 1)[1].replace("_", "-") == name:
            return importlib.import_module(module_name)
    raise KeyError(f"no sub-command {name!r}")


def engine(name: str) -> ModuleType:
    """Return the module of the engine `name` (ENGINES)."""
    return importlib.import_module(ENGINES[name])
