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


def _corrupt_dataset(folder):
    """A dataset folder holding one row and one part that is not Parquet."""
    from conftest import dataset_row
    from costlearn.collect.dataset import write_part
    write_part([dataset_row()], folder)
    (folder / "part-20990101T000000-broken.parquet").write_bytes(b"PAR1 not parquet")
    return folder


def _corrupt_tuning_db(path):
    """A tuning database whose pages were overwritten (a corruption SQLite finds in a query)."""
    from costlearn.core.problem import Problem
    from costlearn.core.version import __version__
    from costlearn.families.gemm import GemmConfig
    from costlearn.serve.tuning_db import TuningDB, TuningEntry
    db, config = TuningDB(path, create=True), GemmConfig(4, 8, 4, 1, 1)
    for i in range(300):
        db.put(TuningEntry(problem=Problem(i + 1, 64, 64), family="gemm", device="dev", template_hash="abc",
                           costlearn_version=__version__, config=config, chosen_by="predicted", time_us=10.0,
                           times_us={config.config_id: 10.0}, source="x" * 200))
    db.close()
    raw = path.read_bytes()
    path.write_bytes(raw[:4096] + b"garbage!" * 1024 + raw[4096 + 8192:])


def test_a_diagnostic_warning_points_at_the_callers_line_not_inside_costlearn(tmp_path, monkeypatch):
    """A corrupt dataset part, a set-aside tuning database, the numpy ranker standing in for the C one and
    dropped prior shapes warn a library user at their own call, however deep inside costlearn they were found."""
    from costlearn.collect.dataset import load
    from costlearn.collect.sampler import ShapeBounds
    from costlearn.collect.strategy import PriorShapes
    from costlearn.core.problem import Problem
    from costlearn.ranker import native_library
    from costlearn.serve.tuning_db import TuningDB
    folder = _corrupt_dataset(tmp_path / "data")
    with pytest.warns(UserWarning, match="skipping corrupt dataset part") as got:
        load(folder)
    with pytest.warns(UserWarning, match="lie outside the collection's bounds") as got2:
        PriorShapes(ShapeBounds(1, 64, 1e6), 0, [(5000, 5000, 5000), (8, 8, 8)])
    _corrupt_tuning_db(tmp_path / "t.sqlite")
    with pytest.warns(RuntimeWarning, match="corrupt .*set aside") as got3:
        TuningDB(tmp_path / "t.sqlite").get(Problem(5, 64, 64), "gemm", "dev", "abc")
    for name, value in (("_LIB", None), ("_LIB_TRIED", False), ("_LIB_WHY", ""), ("_built", lambda name: None)):
        monkeypatch.setattr(native_library, name, value)
    monkeypatch.delenv("COSTLEARN_NO_C", raising=False)
    with pytest.warns(RuntimeWarning, match="C ranker is unavailable") as got4:
        assert native_library.library() is None
    for rec in (got, got2, got3, got4):
        assert [w.filename for w in rec] == [__file__], [(w.filename, w.lineno) for w in rec]


def test_the_command_lines_warning_is_one_line_of_its_words():
    """No file name, no echoed source line, no Python category for costlearn's diagnostics; a line break in the
    message does not start a second line."""
    line = cli.one_line_warning(UserWarning("costlearn: skipping corrupt dataset part p: ArrowInvalid:\n bad"),
                                UserWarning, "/x/costlearn/collect/dataset.py", 366, "warn(...)")
    assert line == "warning: skipping corrupt dataset part p: ArrowInvalid: bad\n"
    assert cli.one_line_warning("old", DeprecationWarning, "f.py", 1) == "warning: DeprecationWarning: old\n"


def test_diagnostics_on_the_command_line_are_one_line_each_with_no_source_location(tmp_path):
    """A corrupt dataset part and the C ranker's fallback, printed by the real command line in a fresh
    process (as a user sees them): one ``warning:`` line each."""
    import subprocess
    import sys
    folder = _corrupt_dataset(tmp_path / "data")
    code = ("import sys\nfrom costlearn.ranker import native_library\nnative_library._built = lambda name: None\n"
            "from costlearn.cli import main\n"
            f"main(['train', '--data', {str(folder)!r}, '--models', {str(tmp_path / 'm')!r}])\n"
            f"sys.exit(main(['predict', '1', '64', '64', '--models', {str(ROOT / 'models')!r}]))\n")
    env = {k: v for k, v in __import__("os").environ.items() if k != "COSTLEARN_NO_C"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    warned = [ln for ln in out.stderr.splitlines() if ln.startswith("warning:")]
    assert any(ln.startswith("warning: skipping corrupt dataset part ") for ln in warned), out.stderr
    assert any(ln.startswith("warning: costlearn's C ranker is unavailable") for ln in warned), out.stderr
    assert "Warning:" not in out.stderr and ".py:" not in out.stderr and "warn(" not in out.stderr, out.stderr
