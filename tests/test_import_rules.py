"""The package arrows (cluster -> hamsi -> partition; dp alone), checked on every import statement.

Walks the syntax tree of every module, so imports inside functions (the lazy ones) count too.
The CLI (hamsi/cli.py, hamsi/commands/*) is the composition root and may import every package.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# package -> packages its library modules must not import
FORBIDDEN = {"partition": {"hamsi", "cluster", "dp"}, "hamsi": {"cluster", "dp"}, "cluster": {"dp"}}
COMPOSITION_ROOT = ("hamsi/cli.py", "hamsi/commands/")


def imported_packages(path: Path) -> set[tuple[str, int]]:
    """Return {(top-level package, line)} of every absolute import in the module at `path`."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update((alias.name.split(".")[0], node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add((node.module.split(".")[0], node.lineno))
    return found


def library_modules():
    for package in FORBIDDEN:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if not relative.startswith(COMPOSITION_ROOT):
                yield package, relative


@pytest.mark.parametrize("package,relative", list(library_modules()))
def test_library_module_respects_the_package_arrows(package, relative):
    bad = sorted(
        (name, line)
        for name, line in imported_packages(ROOT / relative)
        if name in FORBIDDEN[package]
    )
    assert not bad, (
        f"{relative} imports {', '.join(f'{n} (line {l})' for n, l in bad)}: not allowed in {package}"
    )


def test_the_checker_sees_lazy_imports(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "def f():\n    from cluster.driver import fit_distributed\n    import dp.budget\n"
    )
    assert imported_packages(module) == {("cluster", 2), ("dp", 3)}
