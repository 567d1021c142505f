import subprocess
import sys

import pytest

from costlearn.cli import main


def test_help_lists_every_command(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for cmd in ("collect", "train", "predict", "evaluate", "run"):
        assert cmd in out


def test_predict_command(capsys, model_dir):
    assert main(["predict", "1", "256", "256", "--model", model_dir.parent.name, "--top-k", "2"]) == 0
    out = capsys.readouterr().out
    assert "M=1 N=256 K=256" in out and " 2. " in out


def test_predict_command_bad_shape_is_an_error_not_a_traceback(capsys, model_dir):
    assert main(["predict", "0", "1", "1", "--model", model_dir.parent.name]) == 2
    assert "M=0" in capsys.readouterr().err


def test_import_without_cupy_or_pyopencl():
    code = ("import sys; sys.modules['cupy'] = None; sys.modules['pyopencl'] = None\n"
            "import costlearn, costlearn.predict, costlearn.collect, costlearn.evaluate\n"
            "from costlearn.backends import get_backend, BackendUnavailable\n"
            "try:\n    get_backend('cuda')\nexcept BackendUnavailable as e:\n    print('HINT', e)\n"
            "try:\n    get_backend('quantum')\nexcept ValueError as e:\n    print('UNKNOWN', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "HINT" in out.stdout and "pip install" in out.stdout
    assert "UNKNOWN" in out.stdout and "opencl" in out.stdout
