"""A synthetic Inductor AutoHeuristic mm log and the small triton_mm model
trained from it, for tests of the triton_mm path (import, train, predict,
the Triton hook).

The log is a test fixture, not a measurement: its times follow
``time_us = (5 + M*N*K / 25e6) * LAYOUT_FACTOR[layout] * (1 + 0.3 * j)`` for
the j-th config of FIXTURE_CONFIGS (so config 0 is the fastest everywhere and
the order is the list's order), and the vendor call ``extern_mm`` takes 1.15x
the base time (between configs 0 and 1).
"""
from __future__ import annotations

import json

DEVICE = "a100"
# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages), fastest first by the fixture formula.
FIXTURE_CONFIGS = [(64, 64, 32, 4, 3), (128, 64, 32, 4, 4), (64, 128, 32, 4, 4), (128, 128, 32, 8, 3),
                   (32, 32, 32, 2, 2), (128, 128, 64, 8, 3), (64, 32, 64, 4, 5), (16, 32, 16, 1, 1)]
SHAPES = [(256, 256, 256), (512, 1024, 256), (1024, 512, 2048), (2048, 2048, 512), (768, 1536, 1024),
          (4096, 1024, 1024), (384, 640, 896), (1024, 1024, 1024), (2048, 512, 768), (512, 512, 4096),
          (1536, 768, 384), (3072, 2048, 256)]
SHAPE_LAYOUTS = ["NN"] * 6 + ["NT"] * 3 + ["TN"] * 3          # no TT: the model does not serve it
LAYOUT_FACTOR = {"NN": 1.0, "NT": 1.25, "TN": 1.5}
VENDOR_FACTOR = 1.15
HEADER = {"shared_memory": 166912, "device_capa": [8, 0], "name": "mm", "numerical_features": [],
          "categorical_features": []}
COLUMNS = ("m,k,n,mat1_dtype,mat2_dtype,mat1_stride_0,mat1_stride_1,mat2_stride_0,mat2_stride_1,mat1_iscontig,"
           "mat2_iscontig,using_tf32,choice,feedback")


def strides(layout: str, m: int, n: int, k: int):
    """(A strides, B strides) of A [M, K] and B [K, N] in ``layout``."""
    a = (k, 1) if layout[0] == "N" else (1, m)
    b = (n, 1) if layout[1] == "N" else (1, k)
    return a, b


def write_log(path, shapes=SHAPES, layouts=SHAPE_LAYOUTS, configs=FIXTURE_CONFIGS, only=None) -> None:
    """Write the fixture log for ``shapes`` (with ``layouts``) and ``configs``;
    ``only`` maps a config index to a predicate (M, N, K) -> bool saying on
    which shapes that config is logged (every shape by default)."""
    lines = [json.dumps(HEADER), COLUMNS]
    for (m, n, k), lay in zip(shapes, layouts):
        (a0, a1), (b0, b1) = strides(lay, m, n, k)
        lead = f"{m},{k},{n},torch.float16,torch.float16,{a0},{a1},{b0},{b1},{lay[0] == 'N'},{lay[1] == 'N'}," \
               "not_float_32"
        base_us = (5 + m * n * k / 25e6) * LAYOUT_FACTOR[lay]
        for j, (bm, bn, bk, w, s) in enumerate(configs):
            if only and j in only and not only[j](m, n, k):
                continue
            choice = f"type=triton_BLOCK-M={bm}_BLOCK-K={bk}_BLOCK-N={bn}_numstages={s}_numwarps={w}"
            lines.append(f"{lead},{choice},{base_us * (1 + 0.3 * j) / 1e3:.6g}")       # feedback is ms
        lines.append(f"{lead},extern_mm,{base_us * VENDOR_FACTOR / 1e3:.6g}")
    path.write_text("\n".join(lines) + "\n")


def build_models(tmp, shrunk_variants: bool = True):
    """A model store with an a100/triton_mm/float16 model (108 rows, 12 problems, layouts NN, NT, TN); its
    candidates are the fixture's configs, the vendor and (``shrunk_variants``) Inductor's shrunk variants of
    the configs (without them, no tile config fits a problem of N <= 16: the candidate rule's last level)."""
    from unittest import mock
    from costlearn.families.triton_mm import TritonMMFamily
    from costlearn.interop import import_file
    from costlearn.model.xgb import XGBParams
    from costlearn.learn.train import train
    tmp.mkdir(parents=True, exist_ok=True)
    log = tmp / "mm_log.txt"
    write_log(log)
    report = import_file("inductor", log, device=DEVICE, data_root=tmp / "data")
    assert report.rows_added == len(SHAPES) * (len(FIXTURE_CONFIGS) + 1)
    # Few, shallow trees: the fixture formula is simple and training stays a few seconds.
    with mock.patch.object(TritonMMFamily, "shrunk_variants", TritonMMFamily.shrunk_variants if shrunk_variants
                           else lambda self, config: []):
        train(tmp / "data" / DEVICE, tmp / "models", family="triton_mm", dtype="float16", holdout=False,
              settings=dict(params=XGBParams(n_estimators=60, learning_rate=0.3, max_depth=4,
                                             early_stopping_rounds=20)))
    return tmp / "models"


