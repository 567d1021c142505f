"""CPU-side tests of costlearn's own Triton matmul kernel, the ``triton``
backend seam and ahead-of-time compilation for sm_90. Tests needing Triton
(and PyTorch, for the interpreter) skip cleanly where they are absent."""
import hashlib
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

HAS_TRITON = subprocess.run([sys.executable, "-c", "import triton"], capture_output=True).returncode == 0
HAS_TORCH = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode == 0
needs_triton = pytest.mark.skipif(not HAS_TRITON, reason="Triton not installed (pip install triton)")
needs_torch_triton = pytest.mark.skipif(not (HAS_TRITON and HAS_TORCH), reason="Triton and PyTorch not installed")

_INTERPRET = r"""
import json, sys
import torch
from costlearn.families.triton_mm import TritonMMConfig, TritonMMFamily
out = []
for layout in ("NN", "NT", "TN", "TT"):
    for dtype, tdt in (("float32", torch.float32), ("float16", torch.float16)):
        for (m, n, k), cfg in (((1, 17, 33), TritonMMConfig(16, 16, 16, 1, 1, 1)),
                               ((37, 5, 70), TritonMMConfig(32, 16, 32, 2, 1, 4)),
                               ((50, 40, 16), TritonMMConfig(16, 32, 16, 1, 1, 8))):
            g = torch.Generator().manual_seed(m * n + k)
            a = torch.randn((k, m) if layout[0] == "T" else (m, k), generator=g).to(tdt)
            b = torch.randn((n, k) if layout[1] == "T" else (k, n), generator=g).to(tdt)
            a = a.t() if layout[0] == "T" else a
            b = b.t() if layout[1] == "T" else b
            c = torch.full((m, n), float("nan"), dtype=tdt)
            TritonMMFamily().torch_launcher(cfg, dtype)(a, b, c)     # what the triton backend launches
            ref = a.double() @ b.double()
            tol = 16 * k ** 0.5 * (2 ** -10 if dtype == "float16" else 2 ** -23) * (a.double().abs() @ b.double().abs())
            err = (c.double() - ref).abs()
            out.append(dict(layout=layout, dtype=dtype, shape=[m, n, k], finite=bool(torch.isfinite(c).all()),
                            ok=bool((err <= tol + 1e-30).all()), max_err=float(err.max())))
print(json.dumps(out))
"""


def _interpreter_works() -> bool:
    """Triton 3.6's interpreter fails on NumPy >= 2.3 (int() of a 1-element
    array); probe it once."""
    code = ("import torch, triton, triton.language as tl\n"
            "@triton.jit\ndef k(x, K, B: tl.constexpr):\n    a = 0.0\n    for i in range(0, K, B):\n"
            "        a += 1.0\n    tl.store(x, a)\n"
            "x = torch.zeros(1); k[(1,)](x, 10, B=4); assert float(x[0]) == 3.0\n")
    env = dict(os.environ, TRITON_INTERPRET="1")
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=300).returncode == 0


@needs_torch_triton
def test_the_kernel_is_correct_for_every_layout_and_ragged_edges_in_the_interpreter():
    """Triton's interpreter runs the kernel on the CPU (numpy semantics of
    every tl op): every layout, float32 and float16, extents that are no
    multiple of any block (masked loads and stores)."""
    if not _interpreter_works():
        pytest.skip("Triton's interpreter does not run with this NumPy (Triton 3.6 needs NumPy < 2.3 for it)")
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT))
    run = subprocess.run([sys.executable, "-c", _INTERPRET], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    res = json.loads(run.stdout.strip().splitlines()[-1])
    assert len(res) == 4 * 2 * 3
    bad = [r for r in res if not (r["finite"] and r["ok"])]
    assert not bad, bad


_INTERPRET_EPILOGUES = r"""
import json, math
import torch
from costlearn.families.triton_mm import VENDOR, TritonMMConfig, TritonMMFamily
fam = TritonMMFamily()
out = []
for epilogue in ("bias", "bias_relu", "bias_gelu"):
    for layout in ("NN", "TN"):
        for dtype, tdt in (("float32", torch.float32), ("float16", torch.float16)):
            for (m, n, k), cfg in (((1, 17, 33), TritonMMConfig(16, 16, 16, 1, 1, 1)),
                                   ((37, 5, 70), TritonMMConfig(32, 16, 32, 2, 1, 4))):
                g = torch.Generator().manual_seed(m * n + k)
                a = torch.randn((k, m) if layout[0] == "T" else (m, k), generator=g).to(tdt)
                b = torch.randn((k, n), generator=g).to(tdt)
                a = a.t() if layout[0] == "T" else a
                bias = torch.randn(n, generator=g).to(tdt)
                c = torch.full((m, n), float("nan"), dtype=tdt)
                fam.torch_launcher(cfg, dtype, epilogue)(a, b, c, bias)      # what the triton backend launches
                cv = torch.full((m, n), float("nan"), dtype=tdt)
                fam.torch_launcher(VENDOR, dtype, epilogue)(a, b, cv, bias)  # the vendor call, unfused
                v = a.double() @ b.double() + bias.double()
                if epilogue == "bias_relu":
                    v = v.clamp(min=0)
                if epilogue == "bias_gelu":
                    v = 0.5 * v * (1 + torch.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))
                eps = 2 ** -10 if dtype == "float16" else 2 ** -23
                tol = 1.2 * 16 * k ** 0.5 * eps * (a.double().abs() @ b.double().abs() + bias.double().abs()) \
                    + eps * (1 + v.abs())
                err = (c.double() - v).abs()
                out.append(dict(epilogue=epilogue, layout=layout, dtype=dtype, shape=[m, n, k],
                                finite=bool(torch.isfinite(c).all()), ok=bool((err <= tol).all()),
                                max_err=float(err.max()), vendor_ok=bool(((cv.double() - v).abs() <= tol).all())))
print(json.dumps(out))
"""


@needs_torch_triton
def test_the_kernels_epilogues_are_correct_in_the_interpreter():
    """Bias, bias + ReLU and bias + GELU (tanh form) in costlearn's
    Triton kernel, launched as the triton backend does (the family's
    ``torch_launcher`` with the bias last), against a float64 reference, on
    ragged shapes, C poisoned; and the vendor call with the same epilogue
    (``torch.addmm`` then the activation)."""
    if not _interpreter_works():
        pytest.skip("Triton's interpreter does not run with this NumPy (Triton 3.6 needs NumPy < 2.3 for it)")
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT))
    run = subprocess.run([sys.executable, "-c", _INTERPRET_EPILOGUES], env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    res = json.loads(run.stdout.strip().splitlines()[-1])
    assert len(res) == 3 * 2 * 2 * 2
    bad = [r for r in res if not (r["finite"] and r["ok"] and r["vendor_ok"])]
    assert not bad, bad


@needs_triton
def test_configs_compile_ahead_of_time_for_sm90_with_their_registers_and_shared_memory():
    from costlearn.families.triton_mm import TritonMMConfig
    from costlearn.families.triton_mm.compile import compile_for
    small = compile_for(TritonMMConfig(64, 64, 32, 4, 3, 8), "bfloat16", "NN")
    assert small.ok, small.error
    assert 16 <= small.registers_per_thread <= 255 and small.smem_bytes > 0
    big = compile_for(TritonMMConfig(128, 256, 64, 8, 3, 8), "float16", "NT")
    assert big.ok, big.error
    assert big.smem_bytes > small.smem_bytes                  # more stages of bigger panels
    tf32 = compile_for(TritonMMConfig(64, 64, 32, 4, 2, 8), "tfloat32", "TN")
    assert tf32.ok, tf32.error
    gelu = compile_for(TritonMMConfig(64, 64, 32, 4, 3, 8), "bfloat16", "NN", epilogue="bias_gelu")
    assert gelu.ok and 16 <= gelu.registers_per_thread <= 255, gelu.error


@needs_triton
def test_the_families_smem_rule_is_what_triton_allocates_on_sm80_and_sm90():
    """Regression: the family counted num_stages - 1 panel copies (right on
    sm_80, the A100 logs) for every GPU; Triton's Hopper pipeliner keeps
    num_stages, so on an H200 configs near the limit passed the rule and
    failed to launch."""
    from costlearn.families.triton_mm import TritonMMConfig, TritonMMFamily
    from costlearn.families.triton_mm.compile import compile_for
    for cfg in (TritonMMConfig(64, 64, 32, 4, 1, 8), TritonMMConfig(64, 64, 32, 4, 2, 8),
                TritonMMConfig(128, 128, 32, 4, 3, 8), TritonMMConfig(64, 128, 64, 4, 4, 8),
                TritonMMConfig(128, 64, 32, 4, 5, 8)):
        for arch, cc in ((80, "8.0"), (90, "9.0")):
            facts = compile_for(cfg, "float16", "NN", arch=arch)
            assert facts.ok, facts.error
            assert facts.smem_bytes == TritonMMFamily.smem_bytes(cfg, "float16", cc), (cfg.config_id, arch)


@needs_triton
def test_a_ragged_k_is_compiled_without_the_pipeline():
    """Without the multiple-of-16 specialisation the K-edge mask is
    element-wise: Triton does not pipeline, one panel copy."""
    from costlearn.families.triton_mm import TritonMMConfig
    from costlearn.families.triton_mm.compile import compile_for
    cfg = TritonMMConfig(128, 128, 32, 4, 3, 8)
    assert compile_for(cfg, "float16", "NN", arch=80, aligned=False).smem_bytes == (128 * 32 + 32 * 128) * 2


def test_the_triton_backend_is_an_optional_extra():
    """Importing costlearn and its backend registry never needs torch or
    triton; asking for the backend without a GPU says what to install."""
    code = ("import sys, costlearn, costlearn.collect.backends, costlearn.families.triton_mm as t\n"
            "assert 'torch' not in sys.modules and 'triton' not in sys.modules, sorted(sys.modules)\n"
            "from costlearn.collect.backends import BACKENDS, BackendUnavailable, available\n"
            "print(available('triton'))\n")
    run = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=str(ROOT)),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    if run.stdout.strip() == "False":
        from costlearn.collect.backends import BackendUnavailable, get_backend
        with pytest.raises(BackendUnavailable, match=r"costlearn\[triton\]"):
            get_backend("triton")


def test_own_kernel_rows_and_imported_inductor_rows_are_both_current_but_never_trained_together(tmp_path):
    import pandas as pd

    from costlearn.collect.dataset import _conform, current_rows
    from costlearn.families.triton_mm import INDUCTOR_TEMPLATE_HASH, KERNEL_HASH, TritonMMFamily
    from conftest import dataset_row as _row
    src = (ROOT / "costlearn" / "families" / "triton_mm" / "kernel.py").read_bytes()
    assert KERNEL_HASH == hashlib.sha256(src).hexdigest()[:12] != INDUCTOR_TEMPLATE_HASH
    assert TritonMMFamily().template_hashes == (KERNEL_HASH, INDUCTOR_TEMPLATE_HASH)
    from costlearn.collect.protocol import PROTOCOL_VERSION
    rows = [_row(family="triton_mm", dtype="float16", config_id="m64n64k32_w4_s3_g8", template_hash=h,
                 protocol_version=PROTOCOL_VERSION, source_format="")
            for h in (KERNEL_HASH, INDUCTOR_TEMPLATE_HASH, "0123456789ab")]
    kept, dropped = current_rows(_conform(pd.DataFrame(rows), upgrade=True))
    assert sorted(kept["template_hash"]) == sorted([KERNEL_HASH, INDUCTOR_TEMPLATE_HASH]) and dropped == 1


def test_auto_picks_the_backend_that_measures_the_family(monkeypatch):
    """Regression: `auto` always meant CUDA-else-OpenCL, so measuring a
    triton_mm model's top-k (`predict --measure-top-k` with `--family
    triton_mm`) opened a backend that cannot run it."""
    import costlearn.collect.backends as b
    assert b.auto_order("triton_mm") == ("triton",) and b.auto_name("triton_mm") == "triton"
    assert b.auto_name("gemm") == "auto"
    seen = []
    monkeypatch.setattr(b, "available", lambda name: seen.append(name) or False)
    with pytest.raises(b.BackendUnavailable, match=r"costlearn\[triton\]"):
        b.get_backend("auto", family="triton_mm")          # its own hint, not "no CUDA or OpenCL"
    assert seen == ["triton"]
