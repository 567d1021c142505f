"""Collection never loses data: kill -9 mid-run, concurrent writers."""
import os
import signal
import subprocess
import sys
import time


from conftest import ROOT, needs_opencl
from costlearn.dataset import KEY_COLUMNS, load

_WRITER = r"""
import sys
sys.path.insert(0, {root!r})
from costlearn.dataset import write_part
from test_dataset import _row
w = int(sys.argv[1])
for p in range(10):
    write_part([_row(m=1000 * w + 25 * p + i) for i in range(25)], sys.argv[2])
"""


def test_four_concurrent_writers_lose_nothing(tmp_path):
    code = _WRITER.format(root=str(ROOT))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    procs = [subprocess.Popen([sys.executable, "-c", code, str(w), str(tmp_path)], env=env) for w in range(4)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    df, rep = load(tmp_path)
    assert len(df) == 1000 and df["m"].nunique() == 1000 and rep.parts == 40 and not rep.corrupt


@needs_opencl
def test_kill_9_mid_collection_leaves_a_loadable_dataset_and_a_rerun_measures_nothing_twice(tmp_path):
    data = tmp_path / "data"
    cmd = [sys.executable, "-m", "costlearn", "collect", "--device", "opencl", "--data", str(data),
           "--pool", "6", "--max-extent", "48", "--rounds", "2", "--budget", "300", "--no-progress"]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    parts = []
    while time.monotonic() < deadline:
        parts = list(data.glob("*/part-*.parquet"))
        if len(parts) >= 3:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert len(parts) >= 3, "collector wrote nothing within 240 s"
    folder = parts[0].parent
    first, rep = load(folder, strict=True)
    assert not rep.corrupt and len(first) > 0
    # A rerun resumes: every key is measured once over both runs.
    subprocess.run(cmd[:-3] + ["--budget", "8", "--no-progress"], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    both, rep = load(folder, strict=True)
    assert len(both) > len(first)
    assert not both.duplicated(subset=list(KEY_COLUMNS)).any()
