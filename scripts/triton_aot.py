"""Compile the ``triton_mm`` space for a GPU ahead of time, no GPU needed:
does every config the family calls feasible compile, and with what
registers, spills and shared memory.

    python scripts/triton_aot.py [--preset h200] [--dtype bfloat16] [--layout NN]
                                 [--sample 60] [--jobs 2] [--out out/triton_aot.json]

Needs Triton (``pip install triton``). ``--sample N`` compiles a seeded
random N of the feasible configs (0: all of them; about 10,000 per dtype on
the h200 preset, hours on two cores). Prints a table (compiled, failed,
spilling, registers and shared memory ranges, the family's shared-memory
rule against Triton's figure) and writes every config's facts to ``--out``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path



def _one(args):
    config_id, dtype, layout, arch = args
    from costlearn.families.triton_mm import TritonMMConfig
    from costlearn.families.triton_mm.compile import compile_for
    f = compile_for(TritonMMConfig.from_id(config_id), dtype, layout, arch=arch)
    return config_id, f.ok, f.error[:300], f.registers_per_thread, f.spill_bytes_per_thread, f.smem_bytes


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="h200")
    ap.add_argument("--dtype", default="bfloat16", choices=["float16", "bfloat16", "float32", "tfloat32"])
    ap.add_argument("--layout", default="NN", choices=["NN", "NT", "TN", "TT"])
    ap.add_argument("--sample", type=int, default=60, help="configs to compile, 0 = all feasible (default: 60)")
    ap.add_argument("--jobs", type=int, default=2, help="compiler processes (default: 2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="out/triton_aot.json")
    args = ap.parse_args(argv)
    import numpy as np

    from costlearn.core.device import preset
    from costlearn.families.triton_mm import TritonMMConfig, TritonMMFamily
    from costlearn.families.triton_mm.compile import triton_version
    if triton_version() is None:
        raise SystemExit("Triton is not installed: pip install triton")
    spec = preset(args.preset)
    fam = TritonMMFamily()
    feasible = [c for c in fam.all_configs() if isinstance(c, TritonMMConfig)
                and fam.check_device(c, spec, args.dtype) is None]
    rng = np.random.default_rng(args.seed)
    pick = feasible if args.sample <= 0 else [feasible[i] for i in sorted(rng.permutation(len(feasible))[:args.sample])]
    arch = int(spec.compute_capability.replace(".", ""))
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.jobs) as ex:
        res = list(ex.map(_one, [(c.config_id, args.dtype, args.layout, arch) for c in pick]))
    secs = time.perf_counter() - t0
    ok = [r for r in res if r[1]]
    spill = [r for r in ok if (r[4] or 0) > 0]
    rule = [r for r in ok if r[5] == fam.smem_bytes(TritonMMConfig.from_id(r[0]), args.dtype, spec.compute_capability)]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(dict(preset=args.preset, dtype=args.dtype, layout=args.layout, arch=arch,
                                   triton=triton_version(), feasible=len(feasible),
                                   configs=[dict(config_id=r[0], ok=r[1], error=r[2], registers_per_thread=r[3],
                                                 spill_bytes_per_thread=r[4], smem_bytes=r[5]) for r in res]),
                              indent=1))
    regs = [r[3] for r in ok if r[3] is not None]
    print(f"Triton {triton_version()}, sm_{arch} ({args.preset}), {args.dtype} {args.layout}: "
          f"{len(pick)} of {len(feasible)} feasible configs compiled in {secs:.0f} s ({args.jobs} processes)\n")
    print("| compiled | failed | spilling | registers min-max | smem KiB min-max | smem = the family's rule |")
    print("|---|---|---|---|---|---|")
    smem = [r[5] for r in ok if r[5] is not None]
    print(f"| {len(ok)} | {len(res) - len(ok)} | {len(spill)} | {min(regs, default=0)}-{max(regs, default=0)} | "
          f"{min(smem, default=0) / 1024:.0f}-{max(smem, default=0) / 1024:.0f} | {len(rule)}/{len(ok)} |")
    for r in res:
        if not r[1]:
            print(f"failed: {r[0]}: {r[2][:200]}")
    print(f"\nfacts per config: {out}")
    return 0 if len(ok) == len(res) else 1


if __name__ == "__main__":
    sys.exit(main())
