"""The H200 run of issue 15: measure costlearn's Triton matmul and cuBLAS on
an H200, time-boxed, into files under ``$OUT``.

    python scripts/h200_triton_collect.py --out "$OUT" [--budget 480] [--dry-run]

Plan (fixed by ``--seed``): an Inductor-like list of :data:`CONFIGS` (46
Triton configs) plus the vendor call, on problems of batch 1 to 8192 per
side: LLM projection shapes (M in {1, 16, 128, 2048} x (N, K) of 4096-,
11008- and 14336-wide layers), skinny, small and square ones, and
log-uniform random ones; bfloat16 and float16 (NN, and NT for every third
problem) and tfloat32 (NN). Problems are measured round-robin over the
dtypes, each with the collection protocol (every feasible config and the
vendor call interleaved), until ``--budget`` seconds are spent; whatever was
measured is in ``$OUT/data/h200/`` (Parquet parts, one per problem), with
the clocks and throttle state on every row. ``--dry-run`` prints the plan
and exits (runs anywhere, no GPU).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


CONFIGS = [
    # (block_m, block_n, block_k, num_warps, num_stages): the block sizes, warp
    # and stage counts Inductor's mm lists span, chosen here.
    (16, 32, 64, 2, 3), (16, 64, 64, 4, 3), (16, 64, 128, 4, 4), (16, 128, 64, 4, 3), (16, 128, 128, 4, 4),
    (16, 256, 64, 4, 3), (16, 256, 128, 8, 3), (32, 32, 64, 4, 4), (32, 64, 64, 4, 4), (32, 128, 64, 4, 4),
    (32, 256, 64, 8, 3), (64, 32, 64, 4, 4), (64, 64, 32, 4, 3), (64, 64, 64, 4, 4), (64, 64, 128, 4, 3),
    (64, 128, 32, 4, 4), (64, 128, 64, 4, 3), (64, 128, 64, 8, 4), (64, 256, 32, 4, 3), (64, 256, 64, 8, 3),
    (128, 32, 64, 4, 4), (128, 64, 32, 4, 4), (128, 64, 64, 4, 3), (128, 64, 64, 8, 4), (128, 128, 32, 4, 3),
    (128, 128, 32, 8, 4), (128, 128, 64, 4, 3), (128, 128, 64, 8, 3), (128, 256, 32, 8, 3),
    (128, 256, 64, 8, 3), (256, 64, 32, 4, 3), (256, 64, 64, 8, 3), (256, 128, 32, 8, 3),
    (256, 128, 64, 8, 3), (64, 64, 64, 2, 5),
    # BLOCK_N = 16 and BLOCK_K = 16: the only tiles the family ranks for N < 16 or K < 16.
    (16, 16, 64, 1, 3), (16, 16, 128, 2, 3), (32, 16, 64, 2, 3), (64, 16, 64, 4, 3), (128, 16, 64, 4, 3),
    (256, 16, 64, 8, 3), (16, 16, 16, 1, 2), (64, 64, 16, 4, 2), (128, 128, 16, 4, 2), (16, 128, 16, 2, 2),
    (128, 16, 16, 4, 2),
]
"""The Triton configs measured (GROUP_M 8, as Inductor). Seven have
BLOCK_M = 16, the only block tile the family ranks for M < 16 (a tile is
ranked up to the extent's next power of two, at least 16); eleven more have
BLOCK_N or BLOCK_K = 16 for N < 16 or K < 16."""

LLM_NK = [(4096, 4096), (11008, 4096), (4096, 11008), (14336, 4096), (4096, 14336)]


def plan(seed: int = 0) -> list:
    """(m, n, k, dtype, layout) problems in measuring order."""
    import numpy as np
    rng = np.random.default_rng([seed, 15])
    shapes = [(m, n, k) for m in (1, 16, 128, 2048) for n, k in LLM_NK]
    shapes += [(s, s, s) for s in (128, 256, 512, 1024, 2048, 4096, 8192)]                       # square
    shapes += [(m, 4096, 4096) for m in (2, 4, 8, 32, 64)] + [(4096, n, 4096) for n in (8, 16, 64)]  # skinny
    shapes += [(64, 64, 64), (96, 128, 64), (128, 128, 128), (200, 300, 100)]                   # small
    while len(shapes) < 160:
        m, n, k = (int(round(2 ** rng.uniform(0, 13))) for _ in range(3))
        if 2 * m * n * k <= 2 * 8192 ** 3 and (m, n, k) not in shapes:
            shapes.append((m, n, k))
    out = []
    for i, (m, n, k) in enumerate(shapes):
        out.append((m, n, k, "bfloat16", "NT" if i % 3 == 2 else "NN"))
        out.append((m, n, k, "float16", "NT" if i % 3 == 2 else "NN"))
        if i % 2 == 0:
            out.append((m, n, k, "tfloat32", "NN"))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output folder ($OUT on the device machine)")
    ap.add_argument("--budget", type=float, default=480.0, help="seconds of measuring (default: 480)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    args = ap.parse_args(argv)
    from costlearn.families.triton_mm import VENDOR, TritonMMConfig
    configs = [TritonMMConfig(*c, group_m=8) for c in CONFIGS] + [VENDOR]
    problems = plan(args.seed)
    if args.dry_run:
        from collections import Counter
        from costlearn.core.device import preset
        from costlearn.core.problem import Problem
        from costlearn.collect.space import check_config
        spec = preset("h200")
        feas = [sum(check_config(c, spec, problem=Problem(*p)) is None for c in configs) for p in problems]
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "plan.json").write_text(json.dumps([dict(m=p[0], n=p[1], k=p[2], dtype=p[3], layout=p[4],
                                                        feasible=f) for p, f in zip(problems, feas)], indent=0))
        print(json.dumps(dict(problems=len(problems), shapes=len({p[:3] for p in problems}),
                              by_dtype_layout=Counter(f"{p[3]}/{p[4]}" for p in problems),
                              triton_configs=len(configs) - 1, plus="the vendor call (torch.mm)",
                              feasible_per_problem=dict(min=min(feas), median=sorted(feas)[len(feas) // 2],
                                                        max=max(feas)),
                              problems_with_only_the_vendor_call=sum(f <= 1 for f in feas),
                              problems_with_fewer_than_4_triton_configs=sum(f - 1 < 4 for f in feas),
                              plan=str(out / "plan.json")), indent=1, default=str))
        return 0
    from costlearn.collect.backends import get_backend
    from costlearn.collect.loop import collect
    be = get_backend("triton")
    out = Path(args.out) / "data" / be.spec.slug
    t0 = time.monotonic()
    done = 0
    for m, n, k, dtype, layout in problems:
        left = args.budget - (time.monotonic() - t0)
        if left <= 0:
            break
        collect(be, out, family="triton_mm", dtype=dtype, layout=layout, shapes=[(m, n, k)], pool=configs,
                configs_per_shape=len(configs), budget_s=left, progress=False)
        done += 1
    (Path(args.out) / "run.json").write_text(json.dumps(dict(problems_done=done, problems_planned=len(problems),
                                                             seconds=time.monotonic() - t0,
                                                             provenance=be.provenance()), indent=1))
    print(f"measured {done} of {len(problems)} problems in {time.monotonic() - t0:.0f} s into {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
