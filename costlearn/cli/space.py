"""``costlearn features`` and ``space``: a candidate pool's feature table at one shape, and the feasible tile
space of a device with its limits and peaks."""
from __future__ import annotations

import sys

from costlearn.cli.common import (SHAPE_SYNTAX, add_device_arg, add_problem_args, device_backend, parse_shapes,
                                  pool_size, positive_int, nonneg_int)
from costlearn.collect.space import enumerate_space
from costlearn.core.device import PRESET_SOURCES, preset
from costlearn.core.problem import Problem
from costlearn.families import CompilerUnavailable, get_family


def cmd_features(args) -> int:
    import pandas as pd

    from costlearn.collect.loop import candidate_pool
    from costlearn.features import get_feature_set
    spec = preset(args.preset) if args.preset is not None else device_backend(args.device).spec
    m, n, k = parse_shapes(args.shape, one=True)[0]
    pool = candidate_pool(spec, args.family, args.dtype, pool_size(spec, args.pool), args.seed)
    rows = pd.DataFrame([dict(m=m, n=n, k=k, dtype=args.dtype, layout="NN", family=args.family,
                              config_id=c.config_id) for c in pool])
    rows["registers_per_thread"] = float("nan")
    fam = get_family(args.family)
    tool = None if args.no_nvcc else fam.registers_tool(spec)
    if tool:
        print(f"compiling the {len(pool)} candidate kernels with {tool} to read their registers per thread (tens of "
              "seconds; --no-nvcc uses the estimate instead)",
              file=sys.stderr, flush=True)
        try:
            regs = fam.compiled_registers(pool, spec)
        except CompilerUnavailable as e:
            raise ValueError(f"{e}; or pass --no-nvcc to use the register estimate") from None
        rows["registers_per_thread"] = rows["config_id"].map(regs).astype(float)
        print(f"registers per thread from {tool}: min {min(regs.values())}, "
              f"max {max(regs.values())}", file=sys.stderr)
    table = pd.concat([rows[["config_id"]], get_feature_set(args.feature_set).transform(rows, spec)], axis=1)
    if args.csv:
        table.to_csv(args.csv, index=False)
        print(f"{len(table)} configs x {table.shape[1] - 1} features -> {args.csv}")
    else:
        # one line per feature, one column per config: the table stays readable however many features there are
        shown = table.head(args.rows)
        for i in range(0, len(shown), FEATURE_COLUMNS):
            part = shown.iloc[i:i + FEATURE_COLUMNS].set_index("config_id").T
            part.columns.name = None
            print(part.to_string(float_format=lambda v: f"{v:.4g}"))
            print()
        if len(table) > args.rows:
            print(f"(the first {args.rows} of {len(table)} configs; --rows N for more, --csv FILE for all)")
    return 0


FEATURE_COLUMNS = 4
"""Configs side by side in `costlearn features`' printed table."""


def cmd_space(args) -> int:
    spec = preset(args.preset) if args.preset is not None else device_backend(args.device).spec
    problem = Problem(*parse_shapes(args.shape, one=True)[0], args.dtype) if args.shape else None
    res = enumerate_space(spec, family=args.family, dtype=args.dtype, problem=problem)
    print(f"{spec.name}: " + res.summary())
    print(describe_spec(spec))
    return 0


def describe_spec(spec) -> str:
    """The limits and peaks the tile space and the features use, with where
    they come from (a preset's sources, or the live device's query)."""
    def kib(b):
        return f"{b / 1024:g} KiB"
    peaks = ", ".join(f"{d} {spec.peak_gflops_for(d) / 1e3:g}" for d in ("float32", "tfloat32", "float16", "bfloat16")
                      if _has_peak(spec, d))
    regs = "no register file limit" if spec.registers_per_mp is None else \
        f"{spec.registers_per_mp} registers/MP, {spec.max_registers_per_thread}/thread"
    return "\n".join([
        f"device: {spec.name} ({spec.api}, compute capability {spec.compute_capability or 'n/a'})",
        f"  {spec.multiprocessors} multiprocessors, warp {spec.warp_size}, {spec.max_threads_per_block} threads/block, "
        f"{spec.max_threads_per_mp} threads/MP, {spec.max_blocks_per_mp} blocks/MP",
        f"  shared memory {kib(spec.smem_per_block_bytes)}/block ({kib(spec.smem_per_block_optin_bytes)} opt-in), "
        f"{kib(spec.smem_per_mp_bytes)}/MP, {kib(spec.smem_reserved_per_block_bytes)} reserved/block; {regs}",
        f"  L2 {spec.l2_bytes / 2**20:g} MiB; DRAM {spec.memory_bandwidth_gbps:g} GB/s; peak TFLOP/s: {peaks}",
        f"  source: {spec.source or 'n/a'}"]
        + [f"    {tag} {doc}" for tag, doc in PRESET_SOURCES.items() if tag in (spec.source or "")])


def _has_peak(spec, dtype: str) -> bool:
    try:
        spec.peak_gflops_for(dtype)
        return True
    except ValueError:
        return False


def add_features(sub) -> None:
    from costlearn.features import FEATURE_SETS

    p = sub.add_parser("features", help="feature table of a device's candidate pool at one shape",
                       description="Build the analytic feature table of a candidate pool on the local "
                       "device or a preset (e.g. h200, with registers per thread read from nvcc "
                       "-Xptxas -v, so no GPU is needed).")
    p.add_argument("--preset", default=None, help="a named device (h200, h100, a100); default: the local one")
    add_device_arg(p, "when no --preset")
    add_problem_args(p)
    p.add_argument("--shape", required=True, nargs="+", metavar="SHAPE", help="the problem shape: " + SHAPE_SYNTAX)
    p.add_argument("--pool", type=positive_int, default=None,
                   help="candidate pool size, as collect draws it (default: 48 on a CPU, 160 on a GPU)")
    p.add_argument("--seed", type=nonneg_int, default=0, help="pool seed (default: 0)")
    p.add_argument("--feature-set", default="analytic", choices=FEATURE_SETS.names(),
                   help="the features to tabulate (default: analytic)")
    p.add_argument("--no-nvcc", action="store_true", help="use the register estimate instead of nvcc")
    p.add_argument("--csv", default=None, help="write the whole table here instead of printing")
    p.add_argument("--rows", type=positive_int, default=10, help="rows to print (default: 10)")
    p.set_defaults(func=cmd_features)


def add_space(sub) -> None:
    p = sub.add_parser("space", help="enumerate the feasible tile space of a device",
                       description="Count the feasible tile configs of the local device or a preset, and "
                       "how many each feasibility rule rejected.")
    add_device_arg(p, "to describe")
    add_problem_args(p)
    p.add_argument("--preset", default=None, help="a named device instead of the local one (h200, h100, a100)")
    p.add_argument("--shape", nargs="+", metavar="SHAPE",
                   help="also reject block tiles larger than this problem: " + SHAPE_SYNTAX)
    p.set_defaults(func=cmd_space)


PARSERS = {"features": add_features, "space": add_space}
"""The commands this module adds, each by its function of the subparsers."""
