"""The README's Inductor section run as written, where torch is installed
(``costlearn[test-torch]``, CI; PyTorch 2.13's CPU build is enough):
``costlearn export inductor-lut``, then its Python snippet before
``torch.compile(mode="max-autotune")`` of a ``Linear(64, 80)`` on the CPU,
with Inductor's FX graph cache on (its default)."""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys

import pytest
from conftest import ROOT
from inductor_fixture import DEVICE, build_models, write_log

from costlearn.cli import main

HAS_TORCH = subprocess.run([sys.executable, "-c", "import torch._inductor.lookup_table"],
                           capture_output=True).returncode == 0
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="PyTorch 2.13+ not installed "
                                 "(pip install 'costlearn[test-torch]': PyTorch 2.13.0)")


def readme_inductor_section() -> tuple[list[str], str]:
    """The README's "Inside PyTorch Inductor" section: its export command's arguments and its Python snippet."""
    text = (ROOT / "README.md").read_text()
    section = re.search(r"^## Inside PyTorch Inductor.*?(?=^## )", text, flags=re.M | re.S).group(0)
    bash = re.search(r"```bash\n(.*?)```", section, flags=re.S).group(1)
    command = next(ln for ln in bash.splitlines() if ln.startswith("costlearn export inductor-lut"))
    command = re.sub(r"<[^>]*>", "PLACEHOLDER", command)        # a file the user names: "<your log>"
    snippet = re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)
    return shlex.split(command.split("#")[0])[1:], snippet


# Around the snippet: the model it compiles; after it, the same table compiled again (a cache hit) and another
# table (a miss), and what each compile shows (output, handler, the FX graph cache's counters).
BEFORE = "import torch\ntorch.manual_seed(0)\nmodel = eager = torch.nn.Linear(64, 80)\n"
AFTER = """
import json
from torch._dynamo.utils import counters
from torch._inductor import config
from torch._inductor.virtualized import V
from costlearn.interop.inductor.choices import use_lookup_table
x, runs = torch.randn(8, 64), []
for table in (None, config.lookup_table.table, {}):
    if table is not None:
        torch._dynamo.reset()
        counters.clear()
        use_lookup_table(table)
        model = torch.compile(eager, mode="max-autotune")
    same = torch.allclose(model(x), eager(x), atol=1e-5)
    runs.append({"same": same, "choices": type(V.choices).__name__, "cache": config.fx_graph_cache,
                 "table": len(config.lookup_table.table), "counters": dict(counters["inductor"])})
print(json.dumps(runs))
"""


@needs_torch
def test_the_readmes_inductor_snippet_compiles_with_the_fx_graph_cache_on(tmp_path, monkeypatch):
    """Regression: the README's snippet (``config.inductor_choices_class = LookupTableChoices``) failed in
    PyTorch 2.13's FX graph cache ("... does not implement uuid()"); the table is now turned on with costlearn's
    handler, whose uuid() keys the cache: the same table compiled again is a cache hit, another one a miss."""
    args, snippet = readme_inductor_section()
    models, log = build_models(tmp_path / "store"), tmp_path / "mm_log.txt"
    write_log(log)
    values = {"--models": str(models), "--model": DEVICE, "--from-log": str(log)}
    args = [values.get(prev, a) for prev, a in zip([""] + args, args)]
    monkeypatch.chdir(tmp_path)
    assert main(args) == 0
    out = args[args.index("--out") + 1]
    assert f'"{out}"' in snippet and json.loads((tmp_path / out).read_text())
    (tmp_path / "run.py").write_text(BEFORE + snippet + AFTER)
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor-cache"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "run.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    first, again, other = json.loads(done.stdout.strip().splitlines()[-1])
    assert all(r["same"] and r["choices"] == "CostlearnLookupTableChoices" and r["cache"] is True
               for r in (first, again, other))
    assert first["table"] == again["table"] > 0 and other["table"] == 0
    assert first["counters"].get("fxgraph_cache_miss") == 1 and "fxgraph_cache_hit" not in first["counters"]
    assert again["counters"].get("fxgraph_cache_hit") == 1 and "fxgraph_cache_miss" not in again["counters"]
    assert other["counters"].get("fxgraph_cache_miss") == 1, "another table must not reuse the first's graph"


@needs_torch
def test_costlearns_choices_handler_has_a_stable_uuid_for_the_fx_graph_cache():
    """Regression: ``save_config_portable`` (what the FX graph cache hashes) raised for PyTorch's own
    ``LookupTableChoices``; costlearn's handler gives it a uuid, the same in another process."""
    from torch._inductor import config
    from costlearn.interop.inductor.choices import CostlearnLookupTableChoices
    code = ("from torch._inductor import config\n"
            "from costlearn.interop.inductor.choices import use_lookup_table\n"
            "use_lookup_table({})\n"
            "print(config.save_config_portable()['inductor_choices_class'])\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    there = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    with config.patch(inductor_choices_class=CostlearnLookupTableChoices):
        here = config.save_config_portable()["inductor_choices_class"]
    assert there.stdout.strip() == here and re.fullmatch(r"[0-9a-f]{64}", here)


@needs_torch
def test_use_lookup_table_refuses_what_is_not_a_table(tmp_path):
    from costlearn.interop.inductor.choices import use_lookup_table
    for bad in ([], {"key": {"template_id": "aten::mm"}}):
        f = tmp_path / "bad.json"
        f.write_text(json.dumps(bad))
        with pytest.raises(ValueError, match="JSON object of lists"):
            use_lookup_table(f)
