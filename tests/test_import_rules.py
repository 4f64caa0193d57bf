"""The package arrows (cluster -> hamsi -> partition; dp's library alone), checked on every import statement.

Walks the syntax tree of every module, so imports inside functions (the lazy ones) count too.
No module is exempt: the CLI reaches dp and cluster through hamsi.registry, which names their
command and engine modules and imports them with importlib (the one place that does so across
packages). dp's sub-commands (dp/commands) sit above hamsi's CLI helpers, as hamsi's own do.
An import inside a function is there to keep a heavy dependency off a light import, and its
`# why lazy:` comment says which.
"""

import ast
from pathlib import Path

import pytest

from hamsi import registry

ROOT = Path(__file__).resolve().parents[1]
# unit (a package, or a sub-package with its own place in the arrows) -> packages it must not import
FORBIDDEN = {
    "partition": {"hamsi", "cluster", "dp"},
    "hamsi": {"cluster", "dp"},
    "cluster": {"dp"},
    "dp": {"hamsi", "cluster"},
    "dp/commands": {"cluster"},
}
# what dp's sub-commands may use of hamsi: the CLI's shared input/output and its error types
DP_COMMANDS_USE = {"hamsi.cli_io", "hamsi.errors", "hamsi.limits", "hamsi.atomic"}
# the modules that call importlib: the registry, and packages whose names load on first use
DYNAMIC_IMPORTERS = {
    "hamsi/registry.py",
    "hamsi/__init__.py",
    "cluster/__init__.py",
    "dp/__init__.py",
}


def imported_modules(path: Path) -> set[tuple[str, int]]:
    """Return {(module, line)} of every absolute import in the module at `path`."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add((node.module, node.lineno))
    return found


def imported_packages(path: Path) -> set[tuple[str, int]]:
    """Return {(top-level package, line)} of every absolute import in the module at `path`."""
    return {(name.split(".")[0], line) for name, line in imported_modules(path)}


def unit_of(relative: str) -> str:
    """Return the most specific FORBIDDEN unit holding the module at `relative`."""
    return max((u for u in FORBIDDEN if relative.startswith(u + "/")), key=len)


def modules():
    for package in ("partition", "hamsi", "cluster", "dp"):
        for path in sorted((ROOT / package).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix()


def module_path(name: str) -> Path:
    """Return the file of the dotted module `name` (a module file or a package's __init__)."""
    base = ROOT / name.replace(".", "/")
    return base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"


CLI_MODULES = sorted(
    {module_path(name).relative_to(ROOT).as_posix() for name in registry.COMMAND_MODULES}
    | {module_path(name).relative_to(ROOT).as_posix() for name in registry.ENGINES.values()}
    | {"hamsi/cli.py", "hamsi/cli_io.py", "hamsi/registry.py"}
)


@pytest.mark.parametrize("relative", list(modules()))
def test_module_respects_the_package_arrows(relative):
    unit = unit_of(relative)
    bad = sorted(
        (name, line) for name, line in imported_packages(ROOT / relative) if name in FORBIDDEN[unit]
    )
    assert not bad, (
        f"{relative} imports {', '.join(f'{n} (line {l})' for n, l in bad)}: not allowed in {unit}"
    )


def test_dp_commands_use_only_the_cli_helpers_of_hamsi():
    used = {
        (relative, name, line)
        for relative in modules()
        if relative.startswith("dp/commands/")
        for name, line in imported_modules(ROOT / relative)
        if name.split(".")[0] == "hamsi" and name not in DP_COMMANDS_USE
    }
    assert not used, f"dp's commands reach into hamsi beyond its CLI helpers: {sorted(used)}"


def dynamic_imports(path: Path) -> list[int]:
    """Return the lines of importlib.import_module(...) and __import__(...) calls in `path`."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
            if name in ("import_module", "__import__"):
                lines.append(node.lineno)
    return lines


@pytest.mark.parametrize("relative", list(modules()))
def test_dynamic_imports_only_in_the_registry_and_lazy_packages(relative):
    lines = dynamic_imports(ROOT / relative)
    assert relative in DYNAMIC_IMPORTERS or not lines, (
        f"{relative} imports by name on line(s) {lines}: only hamsi/registry.py may (a static "
        "import shows the arrow)"
    )


@pytest.mark.parametrize("package", ["hamsi", "cluster", "dp"])
def test_lazy_package_names_stay_in_their_package(package):
    import importlib

    lazy = importlib.import_module(package)._LAZY
    outside = {
        name: target for name, target in lazy.items() if not target.startswith(package + ".")
    }
    assert not outside, f"{package} loads {outside} by name from another package"


def test_the_registry_names_existing_modules_of_the_cli():
    names = [*registry.COMMAND_MODULES, *registry.ENGINES.values()]
    missing = [name for name in names if not module_path(name).exists()]
    assert not missing
    assert {name.split(".")[0] for name in names} == {"hamsi", "dp", "cluster"}


@pytest.mark.parametrize("relative", CLI_MODULES)
def test_commands_do_not_import_each_other(relative):
    commands = {*registry.COMMAND_MODULES, *registry.ENGINES.values()}
    own = {name for name in commands if module_path(name) == ROOT / relative}
    tree = ast.parse((ROOT / relative).read_text())
    named = {  # `from hamsi.commands import factorize` names the module hamsi.commands.factorize
        (f"{node.module}.{alias.name}", node.lineno)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
        for alias in node.names
    }
    bad = sorted(
        (name, line)
        for name, line in imported_modules(ROOT / relative) | named
        if name in commands - own
    )
    assert not bad, f"{relative} imports another command module: {bad} (share through hamsi.cli_io)"


def lazy_imports_without_reason(path: Path) -> list[int]:
    """Return the lines of functions' first imports that carry no `# why lazy:` comment.

    The comment is on the import's line or on the line above it; it covers the imports of
    that function (a deferred import is there to save start-up time, and says how much).
    """
    source = path.read_text()
    lines = source.splitlines()
    missing = []
    for node in ast.walk(ast.parse(source, filename=str(path))):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        first = min(
            (
                inner.lineno
                for inner in ast.walk(node)
                if isinstance(inner, (ast.Import, ast.ImportFrom))
            ),
            default=None,
        )
        if first is not None and not any(
            "# why lazy:" in lines[i] for i in (first - 2, first - 1) if i >= 0
        ):
            missing.append(first)
    return sorted(missing)


@pytest.mark.parametrize("relative", list(modules()))
def test_imports_are_deferred_only_to_save_start_up_time(relative):
    missing = lazy_imports_without_reason(ROOT / relative)
    assert not missing, f"{relative}: imports inside functions without '# why lazy:' at {missing}"


def test_the_checker_sees_lazy_imports(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "def f():\n    from cluster.driver import fit_distributed\n    import dp.budget\n"
    )
    assert imported_packages(module) == {("cluster", 2), ("dp", 3)}
    assert lazy_imports_without_reason(module) == [2]
    module.write_text("def f():\n    import dp  # why lazy: loads SciPy\n")
    assert lazy_imports_without_reason(module) == []


def test_the_checker_sees_imports_by_name(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import importlib\n\nm = importlib.import_module('cluster.cli')\n")
    assert dynamic_imports(module) == [3]
