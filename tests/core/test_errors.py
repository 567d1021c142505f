"""costlearn/core/errors.py: every exception class the library defines derives from CostlearnError (beside the builtin
it always was), and the command line prints those as one line while a bug shows its traceback."""
from __future__ import annotations

import ast
import importlib

import pytest

from costlearn import cli
from costlearn.cli import space as cli_space
from costlearn.collect.backends import BackendUnavailable
from costlearn.core.errors import CostlearnError
from costlearn.interop.common import InteropError
from costlearn.serve.tuning_db import TuningDBError

from conftest import ROOT


def _exception_classes() -> list:
    """(module, class) of every class in costlearn/ whose name ends in Error or Unavailable or that derives from a
    builtin exception by name, found in the source (not only those imported somewhere)."""
    out = []
    for path in sorted((ROOT / "costlearn").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                if node.name.endswith(("Error", "Unavailable", "Lost")) or bases & {
                        "Exception", "ValueError", "RuntimeError", "OSError", "TypeError", "KeyError"}:
                    out.append((module, node.name))
    return out


def test_every_exception_class_costlearn_defines_derives_from_costlearn_error():
    found = _exception_classes()
    assert len(found) >= 14                                       # the classes there were when the base came in
    for module, name in found:
        cls = getattr(importlib.import_module(module), name)
        assert issubclass(cls, CostlearnError), f"{module}.{name} does not derive from CostlearnError"


def test_the_interrupt_stays_an_interrupt():
    from costlearn.collect.summary import CollectionInterrupted
    from costlearn.interop.common import ImportInterrupted
    for interrupt in (CollectionInterrupted, ImportInterrupted):
        assert issubclass(interrupt, KeyboardInterrupt) and not issubclass(interrupt, Exception)


@pytest.mark.parametrize("error", [CostlearnError("a damaged file"), ValueError("a bad argument"),
                                   InteropError("log.txt: not an Inductor log"), TuningDBError("locked"),
                                   BackendUnavailable("no OpenCL device")])
def test_the_cli_prints_costlearn_errors_and_bad_arguments_as_one_line(monkeypatch, capsys, error):
    def cmd(args):
        raise error
    monkeypatch.setattr(cli_space, "cmd_space", cmd)
    assert cli.main(["space", "--family", "gemm"]) == 2
    err = capsys.readouterr().err
    assert err == f"costlearn space: error: {error}\n"


def test_a_bug_in_a_command_shows_its_traceback_not_an_error_line(monkeypatch, capsys):
    """Regression: cli.main caught every TypeError, so a real bug became exit 2 and one line."""
    def cmd(args):
        return len(None)                                           # a bug: TypeError
    monkeypatch.setattr(cli_space, "cmd_space", cmd)
    with pytest.raises(TypeError):
        cli.main(["space", "--family", "gemm"])
