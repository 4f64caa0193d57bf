import pytest

from hamsi.cli import build_parser, main
from hamsi.registry import COMMAND_MODULES


def test_every_command_module_registers():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    registered = set(sub.choices)
    expected = {
        m.rsplit(".", 1)[1].replace("_", "-") for m in COMMAND_MODULES
    }  # dp_learn -> dp-learn
    assert expected <= registered


def test_no_command_prints_help_and_fails(capsys):
    assert main([]) == 2
    assert "usage" in capsys.readouterr().out


def test_version(capsys):
    import hamsi

    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out.strip() == f"hamsi {hamsi.__version__}"
