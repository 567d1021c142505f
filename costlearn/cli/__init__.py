"""Command line: ``costlearn collect | train | predict | evaluate | run | dispatch | tuning-db |
compact | features | space | migrate-models``.

Each command parses its arguments and calls the library with explicit
arguments (``run`` calls the same stage functions in turn); choices of
backends, kernel families, dtypes, feature sets and models come from their
registries. Run ``costlearn <command> --help`` for each command's options.

Start-up: the modules that load pandas, scikit-learn or XGBoost (the
dataset, training, prediction, evaluation, ...) are imported inside the
command that runs them, so ``costlearn --help`` and a command's ``--help``
start in about 0.3 s instead of 1-2.5 s; everything else is imported here
(``tests/test_imports.py`` holds the rule).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from costlearn.collect.backends import auto_name, get_backend, local_device, local_record, measuring_backends
from costlearn.core.device import PRESET_SOURCES, PRESETS, DeviceSpec, preset
from costlearn.core.dtypes import dtype_names
from costlearn.core.errors import CostlearnError
from costlearn.families import FAMILIES, CompilerUnavailable, get_family
from costlearn.collect.measure import Protocol
from costlearn.core.problem import EPILOGUES, LAYOUTS, Problem
from costlearn.collect.sampler import ShapeBounds
from costlearn.collect.space import enumerate_space
from costlearn.serve.tuning_db import TuningDB, default_path
from costlearn.core.util import atomic_write
from costlearn.core.version import __version__

__all__ = ["main"]

_EPILOG = """\
typical use, once per device class (out/ keeps yours apart from a source tree's committed data/ and models/):
  costlearn collect --budget 600 --data out/data                # measure random shapes x tiles into out/data/<device>/
  costlearn train --data out/data --models out/models           # fit out/models/<device>/<family>/<dtype>/
  costlearn predict 1 1024 1024 --models out/models             # best tile for M=1, N=1024, K=1024
  costlearn evaluate --data out/data --models out/models        # measure fresh shapes, print regret vs baselines
or all four at once:
  costlearn run --budget 180 --data out/data --models out/models

each flag means one thing in every command: --device the backend that measures (auto, cuda, opencl, triton),
--preset a named device's description (h200, h100, a100), --model a model's device folder in the store,
--models the store's root, --learner the cost model train fits, --data a dataset root or one device's dataset
folder, --out where a command writes what it makes, --dtype an element type (one, or several where a command
filters by it), --shapes shapes given as M N K (--shape: one), --tuning-db the tuning database file.
"""


class _OldSpelling(argparse.Action):
    """A flag's spelling before the flags were made to mean one thing in
    every command, kept for one release: it sets the new flag's value,
    hidden from ``--help``, and :func:`main` prints a note naming the new one.
    Its value is checked here (``check``: a type or a tuple of choices), so
    a value of another meaning is refused naming the new flag."""

    def __init__(self, option_strings, dest, new: str = "", check=None, **kwargs):
        self.new, self.check = new, check
        kwargs["help"] = argparse.SUPPRESS
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        try:
            if isinstance(self.check, tuple) and values not in self.check:
                raise argparse.ArgumentTypeError(f"choose from {', '.join(self.check)}")
            value = self.check(values) if callable(self.check) else values
        except argparse.ArgumentTypeError as e:
            raise argparse.ArgumentError(self, f"{values!r}: here {option_string} is the old spelling of {self.new} "
                                         f"({e})") from None
        setattr(namespace, self.dest, value)
        notes = list(getattr(namespace, "renamed_flags", None) or [])
        notes.append((option_string, self.new))
        namespace.renamed_flags = notes


def _old_spelling(p, old: str, new: str, check=None) -> None:
    """Accept ``old`` for one release as a hidden spelling of ``new`` (same
    dest); ``check``: the new flag's type, or its choices."""
    dest = new.lstrip("-").replace("-", "_")
    p.add_argument(old, dest=dest, action=_OldSpelling, new=new, check=check, default=argparse.SUPPRESS)


def _typed(args, new: str) -> str:
    """The spelling of ``new`` the user typed (an old one, or ``new``)."""
    return next((old for old, n in getattr(args, "renamed_flags", None) or [] if n == new), new)


def _renamed_notes(args) -> list:
    """The notes :func:`main` prints for old flag spellings used."""
    return [f"note: `costlearn {args.command} {old}` is now `{new}`; {old} will stop meaning this in the next "
            "release (the flags mean one thing in every command: `costlearn --help`)"
            for old, new in getattr(args, "renamed_flags", None) or []]


def _number(kind: type, lo: float, strict: bool, what: str):
    """argparse type: a finite ``kind`` (int or float) >= lo (> lo if strict)."""
    def parse(text: str):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not math.isfinite(v) or v < lo or (strict and v == lo):
            raise argparse.ArgumentTypeError(f"{text!r}: must be {what} {'>' if strict else '>='} {lo:g}")
        return v
    return parse


_positive_int = _number(int, 1, False, "an integer")
_nonneg_int = _number(int, 0, False, "an integer")
_positive_seconds = _number(float, 0, True, "a finite number of seconds")
_positive_float = _number(float, 0, True, "a finite number")
_nonneg_float = _number(float, 0, False, "a finite number")


def _rse_target(text: str) -> float:
    """argparse type of --target-rse: a fraction in [0, 1)."""
    v = _nonneg_float(text)
    if v >= 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be a fraction in [0, 1) (0.01 is 1 %; 0: fixed rounds)")
    return v


def _backend(name: str, family: str | None = None):
    """The backend ``--device`` names (``auto``: the first available that
    measures ``family``, :func:`costlearn.collect.backends.auto_order`)."""
    return get_backend(name, family=family or "gemm")


DATA_HELP = "a dataset root (one folder per device in it) or one device's dataset folder"
"""What --data is in every command (:func:`costlearn.collect.dataset.device_dataset_folder`)."""


def _check_family_dtype(args) -> None:
    """Refuse a dtype the chosen family does not support before any device
    is opened or anything measured."""
    get_family(args.family).check_dtype(args.dtype)


def _protocol(args):
    return Protocol(rounds=args.rounds, target_rse=args.target_rse, max_rounds=max(args.max_rounds, args.rounds),
                    distribution=args.distribution, density=args.density, seed=args.seed)


def _backend_choices() -> list[str]:
    return ["auto", *measuring_backends()]


def _add_device_arg(p, what: str):
    p.add_argument("--device", default="auto", choices=_backend_choices(),
                   help=f"backend {what}; auto = CUDA if CuPy sees a GPU, else OpenCL (default: auto)")


def _dtype_support() -> str:
    return "; ".join(f"{n}: {', '.join(get_family(n).dtypes)}" for n in FAMILIES.names())


def _add_dtypes_arg(p, default: str) -> None:
    """--dtype of a command that filters by it: one or more, the flag repeatable."""
    p.add_argument("--dtype", nargs="+", action="extend", default=None, choices=dtype_names(), metavar="DTYPE",
                   help=f"element types of A and B, one or more ({', '.join(dtype_names())}; the flag may be "
                   f"repeated) (default: {default})")


def _add_problem_args(p, layout: bool = False, epilogue: bool = False):
    """--family and --dtype (and --layout, --epilogue), choices from the registries."""
    p.add_argument("--family", default="gemm", choices=FAMILIES.names(), help="kernel family (default: gemm)")
    p.add_argument("--dtype", default="float32", choices=dtype_names(),
                   help=f"element type of A and B; each family supports some ({_dtype_support()}) (default: float32)")
    if layout:
        p.add_argument("--layout", default="NN", choices=LAYOUTS,
                       help="A then B: N row-major, T column-major (default: NN)")
    if epilogue:
        p.add_argument("--epilogue", default="none", choices=EPILOGUES,
                       help="what the fused kernel computes after A @ B: bias adds a length-N vector to every "
                       "row, then ReLU or the tanh GELU (default: none)")


def _add_measure_args(p, data: str | None = "data", data_help: str | None = None):
    _add_device_arg(p, "to measure on")
    p.add_argument("--data", default=data,
                   help=data_help or f"{DATA_HELP}: rows go to this device's folder (default: {data})")
    p.add_argument("--rounds", type=_positive_int, default=5,
                   help="interleaved timing rounds every candidate gets (default: 5)")
    p.add_argument("--target-rse", type=_rse_target, default=0.01,
                   help="a candidate is timed in further rounds until the relative standard error of its median "
                   "is at most this, or --max-rounds is reached; 0: exactly --rounds (default: 0.01)")
    p.add_argument("--max-rounds", type=_positive_int, default=30,
                   help="cap on a candidate's rounds (default: 30)")
    p.add_argument("--distribution", default="normal", choices=["normal", "uniform", "sparse"],
                   help="input value distribution (default: normal)")
    p.add_argument("--density", type=_positive_float, default=1.0,
                   help="non-zero fraction for --distribution sparse (default: 1.0)")
    p.add_argument("--seed", type=_nonneg_int, default=0, help="seed of pool, shapes and inputs (default: 0)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _add_collect_args(p, budget_s: float, epilogues: tuple = EPILOGUES):
    p.add_argument("--budget", type=_positive_seconds, default=budget_s,
                   help=f"seconds of collection, compiling included (default: {budget_s:.0f})")
    p.add_argument("--epilogues", nargs="+", choices=EPILOGUES, default=None, metavar="EPILOGUE",
                   help=f"what the fused kernels compute after A @ B, of {', '.join(EPILOGUES)} (bias: a length-N "
                   "vector added to every row; then ReLU or the tanh GELU): each random shape is measured with one "
                   "drawn from these, each --shapes shape with every one; the pool compiles once per epilogue "
                   f"(default: {' '.join(epilogues)}{'; none with --ray' if len(epilogues) > 1 else ''})")
    p.set_defaults(default_epilogues=list(epilogues))
    p.add_argument("--pool", type=_positive_int, default=None,
                   help="candidate pool size, compiled once (default: 48 on a CPU, 160 on a GPU)")
    p.add_argument("--configs-per-shape", type=_positive_int, default=None,
                   help="pool configs measured per shape (default: all feasible)")
    p.add_argument("--max-extent", type=_positive_int, default=None,
                   help="largest M, N, K drawn (default: 1024 on a CPU, 8192 on a GPU)")
    p.add_argument("--shapes", nargs="+", default=None, metavar="SHAPE",
                   help="measure these shapes (every pool config feasible for each) instead of random ones: "
                   + SHAPE_SYNTAX)
    p.add_argument("--max-flops", type=_positive_float, default=None,
                   help="largest 2*M*N*K drawn (default: 2**26 on a CPU, none on a GPU)")
    p.add_argument("--recheck", type=_nonneg_int, default=6, metavar="SHAPES",
                   help="afterwards, re-time configs of this many shapes in a new process (the across-session "
                   "noise floor, `costlearn recheck`); 0: do not (default: 6)")


SHAPE_SYNTAX = "M N K, MxNxK or M,N,K (e.g. 1 4096 4096, 1x4096x4096 or 1,4096,4096)"
"""How every command takes a shape."""


def parse_shapes(items, *, one: bool = False) -> list:
    """Shapes from command-line tokens, the one syntax of every command: a
    token ``MxNxK`` or ``M,N,K`` is one shape; lone integers are taken three
    at a time (``1 4096 4096``); the forms may be mixed.

    Returns
    -------
    list of (int, int, int)
        Each checked as a :class:`~costlearn.core.problem.Problem`'s extents.

    Raises
    ------
    ValueError
        On a token that is none of these, integers not in threes, or (with
        ``one``) more than one shape; the message shows :data:`SHAPE_SYNTAX`.
    """
    out, loose = [], []
    for item in items:
        text = str(item).strip()
        if re.fullmatch(r"[+-]?\d+", text):
            loose.append(text)
            if len(loose) == 3:
                out.append(tuple(loose))
                loose = []
            continue
        if loose:
            raise ValueError(f"shape {' '.join(loose)} {text}: give {SHAPE_SYNTAX}")
        parts = re.split(r"[x,]", text.lower())
        if len(parts) != 3 or not all(re.fullmatch(r"[+-]?\d+", p.strip()) for p in parts):
            raise ValueError(f"shape {text!r}: give {SHAPE_SYNTAX}")
        out.append(tuple(p.strip() for p in parts))
    if loose:
        given = " ".join(str(i) for i in items)
        raise ValueError(f"shapes {given!r}: {len(loose)} number(s) left over after the shapes in threes "
                         f"({' '.join(loose)}); give {SHAPE_SYNTAX}")
    if not out:
        raise ValueError(f"no shape given; give {SHAPE_SYNTAX}")
    if one and len(out) > 1:
        raise ValueError(f"one shape wanted, got {len(out)}: {out}; give {SHAPE_SYNTAX}")
    shapes = []
    for m, n, k in out:
        try:
            shapes.append(Problem(int(m), int(n), int(k)).shape)
        except (TypeError, ValueError) as e:
            raise type(e)(f"shape {m}x{n}x{k}: {e}") from None
    return shapes


def _is_cpu(spec) -> bool:
    return spec.device_type == "cpu"


def _pool_size(spec, pool: int | None) -> int:
    """``--pool``, else 48 configs on a CPU, 160 on a GPU."""
    return pool if pool is not None else (48 if _is_cpu(spec) else 160)


def _collection_defaults(spec, data_root, pool, max_extent, max_flops):
    """(ShapeBounds, dataset folder, pool size) of a collection on ``spec``:
    the device's shape bounds unless given, its folder of ``data_root``
    (:func:`costlearn.collect.dataset.device_dataset_folder`), and :func:`_pool_size`."""
    from costlearn.collect.dataset import device_dataset_folder
    b = ShapeBounds.for_device(_is_cpu(spec))
    bounds = ShapeBounds(1, b.max_extent if max_extent is None else max_extent,
                         b.max_flops if max_flops is None else max_flops)
    return bounds, device_dataset_folder(data_root, spec.slug), _pool_size(spec, pool)


def collect_stage(backend, data_root, *, family: str, dtype: str, budget_s: float, pool: int | None,
                  configs_per_shape: int | None, max_extent: int | None, max_flops: float | None, shapes,
                  protocol, seed: int, progress: bool, recheck: int = 0, epilogues=("none",)):
    """Collect into ``<data_root>/<device>/`` (each problem with one of
    ``epilogues``, :func:`costlearn.collect.loop.collect`) and print the summary, then
    (``recheck`` > 0) re-time that many shapes in a new process
    (:func:`recheck_in_new_session`); returns (dataset folder, CollectResult)."""
    from costlearn.collect.loop import collect
    spec = backend.spec
    bounds, out, pool = _collection_defaults(spec, data_root, pool, max_extent, max_flops)
    print(f"device: {spec.name} ({backend.name}); dataset: {out}; {family}/{dtype}; pool {pool} configs; "
          f"shapes M,N,K <= {bounds.max_extent}, 2MNK <= {bounds.max_flops:.3g}; epilogues {', '.join(epilogues)}",
          file=sys.stderr)
    res = collect(backend, out, budget_s=budget_s, family=family, dtype=dtype, pool_size=pool,
                  configs_per_shape=pool if configs_per_shape is None else configs_per_shape,
                  bounds=bounds, shapes=shapes, protocol=protocol, seed=seed, progress=progress,
                  epilogues=epilogues)
    print_collect_result(res, out, family, dtype, seed)
    if recheck and res.rows_written:
        recheck_in_new_session(backend.name, out, recheck, protocol)
    return out, res


def recheck_in_new_session(device: str, folder, shapes: int, protocol) -> int:
    """Run ``costlearn recheck`` on ``folder`` in a new Python process (a
    separate measurement session, :mod:`costlearn.collect.noise`); its report goes
    to this process's stdout. Returns its exit status (a failed recheck is
    reported, and costs nothing already collected)."""
    import costlearn
    env = dict(os.environ)
    src = str(Path(costlearn.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "costlearn", "recheck", "--device", device, "--data", str(folder),
           "--random-shapes", str(shapes), "--rounds", str(protocol.rounds), "--target-rse", str(protocol.target_rse),
           "--max-rounds", str(protocol.max_rounds), "--distribution", protocol.distribution,
           "--density", str(protocol.density), "--seed", str(protocol.seed)]
    print(f"re-timing {shapes} shapes in a new session (`costlearn recheck --data {folder}`) for the "
          "across-session noise floor", file=sys.stderr)
    sys.stdout.flush()
    rc = subprocess.run(cmd, env=env).returncode
    if rc:
        print(f"warning: the recheck exited with status {rc}; the collected rows are unaffected "
              f"(run `costlearn recheck --data {folder}` later)", file=sys.stderr)
    return rc


def cmd_recheck(args) -> int:
    from costlearn.collect.noise import recheck
    from costlearn.collect.dataset import device_dataset_folder
    be = _backend(args.device)
    folder = device_dataset_folder(args.data, be.spec.slug)
    if not folder.is_dir():
        raise ValueError(f"--data {args.data}: no dataset of {be.spec.slug} there; collect first")
    res = recheck(be, folder, shapes=args.random_shapes, configs_per_shape=args.configs_per_shape,
                  protocol=_protocol(args))
    print(f"re-timed {res.rows_written} configs over {res.shapes} shapes in a new session into "
          f"{folder / 'recheck'}")
    print(res.noise_floors.describe())
    return 0


def print_collect_result(res, out, family: str, dtype: str, seed: int) -> None:
    """Print what a :func:`costlearn.collect.loop.collect` call into ``out`` did:
    rows, epilogues left out, time past the budget, mixed pools, noise, the
    dataset's summary."""
    from costlearn.collect.loop import EPILOGUE_COMPILE_SHARE, dataset_summary
    for other in res.other_pools:
        print(f"note: {out} also holds {family}/{dtype} rows of another candidate pool (seed {other.get('seed')}, "
              f"{other.get('size')} configs); this run's pool is seed {seed}: the dataset mixes pools, so some "
              "shapes have more candidates measured than others (use one --seed per folder to avoid it)",
              file=sys.stderr)
    secs = ", ".join(f"{k} {v:.1f}s" for k, v in res.seconds.items())
    if res.stopped:
        print(f"warning: {res.stopped}; rerun the same command to resume", file=sys.stderr)
    print(f"collected {res.rows_written} rows ({res.rows_valid} valid) over {res.problems_done} problems "
          f"(shape, epilogue); skipped {res.skipped} already measured; {secs}")
    if res.epilogues_left_out:
        print(f"note: no random shape was measured with {', '.join(res.epilogues_left_out)}: compiling another "
              f"epilogue's pool would have taken over {EPILOGUE_COMPILE_SHARE:.0%} of the budget left (a longer "
              "--budget brings them in; compiled kernels are cached, so a rerun compiles faster)", file=sys.stderr)
    if res.over_budget_s > max(1.0, 0.05 * res.budget_s):
        if "start" in res.seconds:                # a fleet: its workers compile the pool when they start
            why = (f"a problem started inside the budget is measured to the end, and starting the workers (each "
                   f"compiles the whole pool; --pool sets its size) took {res.seconds['start']:.0f} s")
        else:
            why = (f"a shape started inside the budget is measured to the end, and compiling took "
                   f"{res.seconds.get('compile', 0.0):.0f} s (the first shape compiles the whole pool; --pool "
                   "sets its size)")
        print(f"note: took {res.over_budget_s:.0f} s more than --budget {res.budget_s:.0f}: {why}", file=sys.stderr)
    print(f"noise floor: two timings of the same config in one session differ by {res.noise_floor:.1%} "
          f"(median); spread of a row's samples (p80-p20)/median: {res.spread_frac:.1%} (median); "
          f"rows that reached the {res.target_rse:.1%} standard-error target: {res.at_target:.0%}")
    print(f"dataset {out}: {dataset_summary(out)}")


def cmd_collect(args) -> int:
    if args.workers is not None and args.ray is None:
        raise ValueError(f"--workers {args.workers}: --workers needs --ray (the workers are a Ray cluster's)")
    _check_family_dtype(args)
    fam = get_family(args.family)
    asked = args.epilogues or (["none"] if args.ray is not None else args.default_epilogues)
    epilogues = [e for e in asked if e in fam.epilogues]
    if not epilogues or (args.epilogues and len(epilogues) < len(asked)):
        raise ValueError(f"--epilogues {' '.join(asked)}: the {args.family!r} family fuses {list(fam.epilogues)}")
    shapes = parse_shapes(args.shapes) if args.shapes else None
    if args.ray is not None:
        if epilogues != ["none"]:
            raise ValueError(f"--epilogues {' '.join(epilogues)} with --ray: a fleet measures epilogue none only "
                             "(pass --epilogues none, or collect epilogues without --ray)")
        fleet_collect_stage(args.ray or None, args.workers, args.device, args.data, family=args.family,
                            dtype=args.dtype, budget_s=args.budget, pool=args.pool,
                            configs_per_shape=args.configs_per_shape, max_extent=args.max_extent,
                            max_flops=args.max_flops, shapes=shapes, protocol=_protocol(args), seed=args.seed,
                            progress=not args.no_progress)
        return 0
    collect_stage(_backend(args.device, args.family), args.data, family=args.family, dtype=args.dtype,
                  budget_s=args.budget, pool=args.pool, configs_per_shape=args.configs_per_shape,
                  max_extent=args.max_extent, max_flops=args.max_flops, shapes=shapes, protocol=_protocol(args),
                  seed=args.seed, progress=not args.no_progress, recheck=args.recheck, epilogues=epilogues)
    return 0


def fleet_collect_stage(address, workers, device: str, data_root, *, family: str, dtype: str, budget_s: float,
                        pool: int | None, configs_per_shape: int | None, max_extent: int | None,
                        max_flops: float | None, shapes, protocol, seed: int, progress: bool):
    """``collect --ray``: start one worker per device on a Ray cluster
    (:func:`costlearn.collect.fleet.start_fleet`) and collect into
    ``<data_root>/<device>/`` with the defaults :func:`collect_stage` uses
    for that device (:func:`costlearn.collect.fleet.collect_fleet`); print the same
    summary and what the fleet lost. Returns (dataset folder, FleetResult)."""
    from costlearn.collect.fleet import collect_fleet, start_fleet
    backend = auto_name(family) if device == "auto" else device
    with start_fleet(backend, workers=workers, address=address) as fleet:
        spec = fleet.spec
        bounds, out, pool = _collection_defaults(spec, data_root, pool, max_extent, max_flops)
        print(f"fleet: {len(fleet.members)} workers of {spec.name} ({fleet.backend}) on Ray; dataset: {out}; "
              f"{family}/{dtype}; pool {pool} configs; shapes M,N,K <= {bounds.max_extent}, "
              f"2MNK <= {bounds.max_flops:.3g}", file=sys.stderr)
        res = collect_fleet(fleet, out, budget_s=budget_s, family=family, dtype=dtype, pool_size=pool,
                            configs_per_shape=pool if configs_per_shape is None else configs_per_shape,
                            bounds=bounds, shapes=shapes, protocol=protocol, seed=seed, progress=progress)
    for line in res.lost + res.notes:
        print(f"fleet: {line}", file=sys.stderr)
    print(f"fleet: {res.rows_planned} rows planned over {res.problems_planned} problems; {len(res.lost)} losses, "
          f"{len(res.failed)} problems lost twice; {res.replacements} workers started to replace lost ones",
          file=sys.stderr)
    if res.failed:
        print(f"warning: {len(res.failed)} problems were lost twice and recorded as launch_error rows: "
              f"{res.failed}", file=sys.stderr)
    print_collect_result(res, out, family, dtype, seed)
    return out, res


def _dataset_folder(data: str, flag: str = "--data") -> Path:
    """A dataset folder; or, under a data root, its one device folder, else
    this machine's device's folder (error listing them otherwise)."""
    folder = Path(data)
    if not folder.is_dir():
        raise ValueError(f"{flag} {data}: " + ("a file, not a dataset folder" if folder.exists() else "no such folder")
                         + "; collect (`costlearn collect`) or import (`costlearn import`) first")
    if not (folder / "device.json").is_file() and not list(folder.glob("part-*.parquet")):
        subs = sorted(p.parent.name for p in folder.glob("*/device.json"))
        if len(subs) == 1:
            return folder / subs[0]
        local = local_device(probe=True) if subs else None
        if local is not None and local["slug"] in subs:
            print(f"{flag} {data} holds datasets for {subs}; using this machine's, {folder / local['slug']} "
                  f"(pass {flag} {data}/<device> for another)", file=sys.stderr)
            return folder / local["slug"]
        raise ValueError(f"{flag} {data} holds no dataset parts; collect (`costlearn collect`) or import "
                         "(`costlearn import`) into it first" if not subs else
                         f"{flag} {data} holds datasets for {subs}; pass {flag} {data}/<device>")
    return folder


def train_stage(data, models_dir, *, family: str | None, dtypes, learner: str, feature_set: str | None) -> list:
    """Train one model per (family, dtype) pair of a dataset folder (those of
    ``family`` and ``dtypes`` where given) and print each held-out table; a
    pair with too few rows, or whose training fails with a ValueError or
    ArtifactError, is skipped, named with the reason, and the others are
    trained.

    Returns
    -------
    list of TrainResult
        In the order of the pairs, (family, dtype) sorted.

    Raises
    ------
    ValueError
        If the folder holds no rows of the pairs asked for, or no pair could
        be trained (each named with why).
    """
    from costlearn.collect.dataset import load
    from costlearn.model.artifact import ArtifactError, models_root
    from costlearn.learn.train import MIN_PROBLEMS, MIN_ROWS, pair_counts, train
    folder = _dataset_folder(data)
    settings = {} if feature_set is None else dict(feature_set=feature_set)
    counts = pair_counts(load(folder)[0])
    asked = [p for p in sorted(counts) if (family is None or p[0] == family) and (not dtypes or p[1] in dtypes)]
    if not asked:
        which = f"{family or '*'}/{'|'.join(dtypes) if dtypes else '*'}"
        raise ValueError(f"{folder} holds no valid {which} rows; it holds "
                         f"{[f'{f}/{d}' for f, d in sorted(counts)] or 'none'}")
    skipped = {p: f"{counts[p][0]} valid rows over {counts[p][1]} problems; need {MIN_ROWS} over {MIN_PROBLEMS} "
               "(collect longer, or import more measurements)"
               for p in asked if counts[p][0] < MIN_ROWS or counts[p][1] < MIN_PROBLEMS}
    if len(asked) > 1:
        print(f"{folder} holds rows of {len(asked)} (family, dtype) pairs" + (" asked for" if family or dtypes else "")
              + "; training " + ", ".join(f"{f}/{d}" for f, d in asked if (f, d) not in skipped), file=sys.stderr)
    results = []
    for fam, dt in asked:
        if (fam, dt) in skipped:
            print(f"skipping {fam}/{dt}: {skipped[fam, dt]}", file=sys.stderr)
            continue
        t0 = time.perf_counter()
        try:
            res = train(folder, models_root(models_dir or None), family=fam, dtype=dt, model=learner,
                        settings=settings)
        except (ValueError, ArtifactError) as e:
            skipped[fam, dt] = str(e)
            print(f"skipping {fam}/{dt}: {e}", file=sys.stderr)
            continue
        results.append(res)
        print(f"trained {learner} on {res.rows} {res.family}/{res.dtype} rows of {folder} (device {res.device}) over "
              f"{res.shapes} shapes in {time.perf_counter() - t0:.1f}s -> {res.path.parent}"
              + (" (replaced the model that was there)" if res.replaced else ""))
        _print_trained(res)
    if skipped:
        why = "; ".join(f"{f}/{d}: {r}" for (f, d), r in sorted(skipped.items()))
        if not results:
            raise ValueError(f"no (family, dtype) pair of {folder} could be trained: {why}")
        print(f"trained {len(results)} of {len(asked)} (family, dtype) pairs; skipped {why}", file=sys.stderr)
    return results


def _print_trained(res) -> None:
    """What :func:`train_stage` prints of one trained model: its shortlist
    table, held-out table and vendor floor."""
    sl = json.loads((res.path).read_text()).get("shortlist")
    if sl:
        print(f"shortlist table: the {sl['tiles']} best tile configs at {'x'.join(map(str, sl['grid']))} points "
              f"per layout, {sl['trees']} trees at the query (built in {sl['build_s']:.0f}s): a deep model "
              "answers unseen problems in microseconds (scripts/bench_predict.py measures it)")
    if res.holdout:
        print(f"held-out problems ({res.holdout_kind}): top-1 regret mean / geomean, top-5 mean, Kendall tau")
        for name, sm in res.holdout.items():
            print(f"  {name:<11} {sm['top1_mean']:7.1%} {sm['top1_geomean']:7.1%} {sm['top5_mean']:7.1%} "
                  f"{sm['kendall_tau']:6.3f}")
    cal = (res.floor or {}).get("calibration", {})
    if "rule_geomean" in cal:
        f = res.floor
        rho, tau, est = f["unsure_regret"], f["vendor_near_min"], f.get("estimate")
        rule = [f"it is predicted {2 ** f['margin_log2'] - 1:.0%} faster than the vendor library"]
        if tau is not None:
            rule.append(f"the vendor lost more than {tau:.0%} on the nearest held-out problems")
        if est is not None:
            rule.append(f"the vendor model's estimate of its time over the vendor's, {est[1]:g} deviations up, is "
                        f"below {2 ** -est[0]:.2f}")
        flagged = (f"flagged (vendor kept) where the model's held-out top-1 regret there is above {rho:.0%}"
                   if rho is not None else "no problem is flagged for the model's held-out regret")
        outside = "; outside the extent envelope the vendor is kept" if f.get("ood_fallback") else ""
        print(f"vendor floor: a tile config is chosen where {' and '.join(rule)}; {flagged}{outside}. On the "
              f"held-out problems, top-1 vs best of all (geomean): {cal['rule_geomean']:.2%} with the floor, "
              f"{cal['argmin_geomean']:.2%} plain argmin, {cal['vendor_geomean']:.2%} vendor only")


def cmd_train(args) -> int:
    train_stage(args.data, args.models, family=args.family, dtypes=args.dtype, learner=args.learner,
                feature_set=args.feature_set)
    return 0


def cmd_import(args) -> int:
    from costlearn.interop import import_file
    if args.preset is None:
        raise ValueError(f"--preset is required: the named device the file was measured on "
                         f"({', '.join(PRESETS.names())})")
    rep = import_file(args.format, args.file, device=args.preset, data_root=args.data, mapping=args.mapping)
    print(rep.summary())
    if not rep.already_imported:
        print(f"next: costlearn train --data {rep.folder} --models MODELS")
    return 0


def cmd_export(args) -> int:
    if args.format == LUT_FORMAT:
        return _export_lut(args)
    lut_only = [_typed(args, flag) for flag, v in (
        ("--models", args.models), ("--model", args.model), ("--dtype", args.dtype),
        ("--shapes-file", args.shapes_file),
        ("--from-log", args.from_log), ("--from-table", args.from_table), ("--top-k", args.top_k),
        ("--device-name", args.device_name), ("--portable", args.portable or None)) if v is not None]
    if lut_only:
        raise ValueError(f"{' '.join(lut_only)}: {'is' if len(lut_only) == 1 else 'are'} {LUT_FORMAT}'s; export "
                         f"{args.format} writes every valid measurement of --data")
    from costlearn.interop import export_dataset
    paths = export_dataset(args.format, _dataset_folder(args.data), args.out)
    print(f"wrote {len(paths)} {args.format} files into {args.out}")
    return 0


LUT_FORMAT = "inductor-lut"
"""``costlearn export inductor-lut``: a model's choices as PyTorch Inductor's template lookup table."""


def _export_lut(args) -> int:
    from costlearn.interop.inductor.lut import (check_lut_out, export_lut, problems_from_log, read_shapes_file,
                                                read_table)
    from costlearn.model.store import has_model, resolve_model
    check_lut_out(args.out)                      # before a log of 10^5 lines is read
    sources = {"--shapes-file": ("shapes file", args.shapes_file), "--from-log": ("log", args.from_log),
               "--from-table": ("table", args.from_table)}
    given = [k for k, (_, v) in sources.items() if v]
    if len(given) != 1:
        raise ValueError(f"export {LUT_FORMAT} takes one source of shapes: --shapes-file FILE ('M N K dtype layout' "
                         f"per line), --from-log LOG (an Inductor AutoHeuristic mm log) or --from-table JSON (a lookup "
                         f"table Inductor recorded); got {given or 'none'}")
    family = "triton_mm"
    device = args.model or resolve_model(None, family, (args.dtype or ["float16"])[0], args.models,
                                         cli=True).parents[1].name
    served = [d for d in dtype_names() if has_model(device, family, d, args.models)]
    if not served:
        resolve_model(device, family, (args.dtype or ["float16"])[0], args.models, cli=True)  # names what there is
    t0 = time.perf_counter()
    device_name = args.device_name
    what, source = sources[given[0]]
    if args.shapes_file:
        problems = read_shapes_file(args.shapes_file)
    elif args.from_log:
        problems = problems_from_log(args.from_log, device)
    else:
        got = read_table(args.from_table)
        problems = got.problems
        for line, why in got.skipped[:5]:
            print(f"{args.from_table}:{line}: left out: {why}", file=sys.stderr)
        if len(got.skipped) > 5:
            print(f"... {len(got.skipped) - 5} more left out", file=sys.stderr)
        if device_name is None and len(got.devices) == 1:
            device_name = got.devices[0]          # keep the table's own device name: its GPU's torch reports it
        if not problems:
            raise ValueError(f"{args.from_table}: no mm key costlearn reads ({len(got.skipped)} left out, above)")
    have = sorted({lp.problem.dtype for lp in problems})
    problems = [lp for lp in problems if lp.problem.dtype in (args.dtype or have)]
    if not problems:
        raise ValueError(f"--dtype {' '.join(args.dtype)}: the {what} holds only {have}")
    missing = sorted({lp.problem.dtype for lp in problems} - set(served))
    if missing and (args.dtype or not set(have) & set(served)):
        raise ValueError(f"the {what} holds {missing}, but the store has {family} models of {device} for {served} "
                         f"only; pass --dtype {' '.join(sorted(set(have) & set(served))) or '...'} to export those")
    for dt in missing:                         # no --dtype: export what the store serves, name what it leaves out
        print(f"left out the {sum(lp.problem.dtype == dt for lp in problems)} {dt} problems of the {what}: the store "
              f"has no {family}/{dt} model of {device} (train one, or pass --dtype to choose)", file=sys.stderr)
    problems = [lp for lp in problems if lp.problem.dtype in served]
    print(f"read {len(problems)} problems from the {what} {source} in {time.perf_counter() - t0:.1f} s",
          file=sys.stderr)
    rep = export_lut(problems, args.out, device=device, top_k=args.top_k or 3, family=family, models_dir=args.models,
                     device_name=device_name, portable=args.portable)
    print(rep.summary())
    print("use it: torch._inductor.config.lookup_table.table = json.load(open(...)); "
          "torch._inductor.config.inductor_choices_class = torch._inductor.lookup_table.LookupTableChoices; "
          "then torch.compile(..., mode='max-autotune') (README, 'Inside PyTorch Inductor')")
    return 0


def model_device(model, family: str, dtype: str, models_dir, here=None) -> str:
    """The model device folder a command that reads a model uses: ``--model``;
    else the local device's model if the store has one; else the only one (an
    error in CLI words otherwise). Says on stderr when the model is another
    device's than this machine's: ``here``, the DeviceSpec of the device this
    process opened, else the record of it in the user cache
    (:func:`costlearn.collect.backends.local_device`), compared without the backend
    settings of the process that wrote it."""
    from costlearn.model.store import has_model, resolve_model
    local = local_record(here) if here is not None else local_device(probe=True)
    if model is None:
        model = local["slug"] if local is not None and has_model(local["slug"], family, dtype, models_dir) else \
            resolve_model(None, family, dtype, models_dir, cli=True).parents[1].name
    if local is None or not has_model(model, family, dtype, models_dir):
        return model
    if local["slug"] != model:
        print(f"note: the {model} model was trained on another device than this machine's ({local['name']}, "
              f"{local['slug']}); its times are that device's (collect and train here for this one's)",
              file=sys.stderr)
    elif isinstance(local.get("spec"), dict):
        from costlearn.model.artifact import load, model_folder, models_root
        try:
            spec = here if here is not None else DeviceSpec.from_dict(local["spec"])
        except (TypeError, ValueError):
            return model                   # a record of another costlearn version: nothing to compare
        root = models_root(models_dir)
        diff = load(model_folder(root, model, family, dtype)).spec.differences(spec, settings=here is not None)
        if diff:
            print(f"note: the {model} model's device is of this machine's class but not the same device "
                  f"({'; '.join(diff)}: the model's value, then this machine's); its times may not be this "
                  "machine's (collect and train here, into other --data and --models folders, for this one's)",
                  file=sys.stderr)
    return model


def _check_shapes(triples, family: str, dtype: str, layout: str, epilogue: str = "none") -> None:
    """Raise the error of the first (M, N, K) the family cannot serve, naming the shape."""
    fam = get_family(family)
    for t in triples:
        try:
            fam.check_problem(Problem(*t, dtype, layout, epilogue))
        except (TypeError, ValueError) as e:
            raise type(e)(f"shape {'x'.join(map(str, t))}: {e}") from None


def predict_stage(triples, *, device, family: str, dtype: str, layout: str, top_k: int, models_dir,
                  as_json: bool = False, measure_top_k: int = 0, backend=None, tuning_db=None,
                  epilogue: str = "none", here=None) -> None:
    """Predict each (M, N, K) and print it (a JSON object per line with ``as_json``): all in one
    :func:`costlearn.serve.predict.predict_many` call, or one :func:`costlearn.serve.predict.predict_best` call each
    where they measure or read the tuning database. ``here``: the DeviceSpec of the device this process
    opened (:func:`model_device`)."""
    from costlearn.serve.predict import predict_best
    _check_shapes(triples, family, dtype, layout, epilogue)   # every triple is checked before anything is printed
    device = model_device(device, family, dtype, models_dir, here=here if here is not None else
                          (backend.spec if backend is not None else None))
    from costlearn.model.store import resolve_model
    print(f"model: {resolve_model(device, family, dtype, models_dir, cli=True)}", file=sys.stderr)
    from_db = recorded = 0
    if not measure_top_k and tuning_db is None:         # predictions only: every shape in one call
        from costlearn.serve.predict import predict_many
        preds = iter(predict_many([(m, n, k, layout, epilogue) for m, n, k in triples], dtype, device,
                                  family=family, top_k=top_k, models_dir=models_dir))
    else:
        preds = (predict_best(m, n, k, dtype=dtype, device=device, family=family, layout=layout, top_k=top_k,
                              models_dir=models_dir, measure_top_k=measure_top_k, backend=backend,
                              tuning_db=tuning_db, epilogue=epilogue) for m, n, k in triples)
    for p in preds:
        if as_json:
            print(json.dumps(dict(m=p.m, n=p.n, k=p.k, dtype=p.dtype, layout=p.layout, epilogue=p.epilogue,
                                  family=p.family,
                                  device=p.device, config=p.config.to_dict(), config_id=p.config.config_id,
                                  time_us=p.time_us, chosen_by=p.chosen_by, from_tuning_db=p.from_tuning_db,
                                  measured_us=dict(p.measured_us), tied_with=list(p.tied_with),
                                  tuning_db_source=p.tuning_db_source, ood=p.ood,
                                  ood_reasons=list(p.ood_reasons),
                                  top_k=[dict(config_id=c.config_id, time_us=t) for c, t in p.top_k])))
        if tuning_db is not None:
            from_db += p.from_tuning_db
            recorded += not p.from_tuning_db
        if as_json:
            continue
        earlier = ", an earlier answer" + ((" measured then" + (f" by {p.tuning_db_source}" if p.tuning_db_source
                                                                  else "")) if p.chosen_by == "measured" else "")
        how = f"{p.chosen_by} {p.time_us:.1f} us" + (f" (from the tuning database{earlier})" if p.from_tuning_db
                                                     else "")
        fused = "" if p.epilogue == "none" else f" +{p.epilogue}"
        print(f"M={p.m} N={p.n} K={p.k} ({p.dtype} {p.layout}{fused}, {p.family} model {p.device}): "
              f"{p.config.config_id} "
              f"{how}" + (f"  [GUESS, out of distribution: {'; '.join(p.ood_reasons)}]" if p.ood else ""))
        for rank, (c, t) in enumerate(p.top_k, 1):
            print(f"  {rank:2d}. {c.config_id:<34} {t:10.1f} us predicted" + (" (guess)" if p.ood else ""))
        if p.measured_us:
            print("  measured: " + ", ".join(f"{cid} {t:.1f} us" for cid, t in p.measured_us))
        if p.tied_with:
            print(f"  tie: {', '.join(p.tied_with)} could not be separated from {p.config.config_id} within the "
                  "measuring cap (95 % intervals overlap); any of them is as good as the noise lets one tell")
    if tuning_db is not None:
        print(f"tuning database {tuning_db.path}: {recorded} answers recorded, {from_db} read from it "
              "(`costlearn tuning-db` lists it)", file=sys.stderr)


def cmd_predict(args) -> int:
    _check_family_dtype(args)
    triples = parse_shapes(args.shape)
    _check_shapes(triples, args.family, args.dtype, args.layout, args.epilogue)
    backend = _backend(args.device, args.family) if args.measure_top_k else None
    db = None
    if args.tuning_db is not None or args.measure_top_k:
        from costlearn.serve.tuning import open_tuning_db
        db = open_tuning_db(args.tuning_db)
    predict_stage(triples, device=args.model, family=args.family, dtype=args.dtype, layout=args.layout,
                  top_k=args.top_k, models_dir=args.models, as_json=args.json, measure_top_k=args.measure_top_k,
                  backend=backend, tuning_db=db, epilogue=args.epilogue)
    if db is not None and db.set_aside:
        print(f"note: corrupt tuning database set aside as {', '.join(map(str, db.set_aside))}", file=sys.stderr)
    return 0


def cmd_dispatch(args) -> int:
    from costlearn.serve.dispatch import check_name, evaluate_dispatch, fit_dispatch, parse_range
    from costlearn.model.store import resolve_model
    from costlearn.serve.predict import Predictor
    ranges = {d: parse_range(getattr(args, d.lower()), d) for d in "MNK"}
    check_name(args.name)
    folder = resolve_model(model_device(args.model, args.family, args.dtype, args.models), args.family, args.dtype,
                           args.models, cli=True)
    pred = Predictor(folder)
    d = fit_dispatch(pred, ranges, max_configs=args.configs, samples=args.samples, max_depth=args.depth,
                     seed=args.seed, epilogue=args.epilogue)
    paths = d.write(args.out, args.name)
    report = []                # what is printed below, also written as <out>/report.md

    def say(line: str = "") -> None:
        print(line)
        report.append(line)
    q = d.predicted
    span = ", ".join(f"{d_} {lo}..{hi}" for d_, (lo, hi) in ranges.items()) \
        + ("" if args.epilogue == "none" else f", epilogue {args.epilogue}")
    report += [f"# costlearn dispatch: {len(d.configs)} configs for {span}", ""]
    say(f"{len(d.configs)} configs for {span} (model {pred.device}; {q['shapes']} sampled shapes):")
    say()
    for i, c in enumerate(d.configs):
        say(f"  {i}. `{c.config_id}`")
    single = (f"one config for all ({d.single_best.config_id}) {q['single_best_geomean']:.1%}"
              if d.single_best is not None else "no single config fits every shape")
    say()
    say(f"predicted regret vs the per-shape best: selector geomean {q['selector_geomean']:.1%}, mean "
        f"{q['selector_mean']:.1%}, max {q['selector_max']:.1%}; best member per shape {q['subset_geomean']:.1%}; "
        + single)
    print("wrote " + ", ".join(str(p) for p in paths) + f", {Path(args.out) / 'report.md'}")
    eval_dir = Path(args.eval_dir) if args.eval_dir else Path("data") / pred.device / "dispatch-eval"
    if args.measure:
        from costlearn.collect.loop import collect
        from costlearn.serve.dispatch import range_shapes
        backend = _backend(args.device)
        if backend.spec.slug != pred.spec.slug:
            raise ValueError(f"the model is for {pred.spec.name}, this device is {backend.spec.name}; "
                             "measure on the model's device")
        known = {tuple(x) for x in pred.envelope.shapes}
        fresh = [s for s in range_shapes(ranges, 4 * args.measure, args.seed + 1000, corners=False)
                 if tuple(s) not in known and pred.feasible(pred.problem(*s)).any()]
        collect(backend, eval_dir, budget_s=args.budget, family=pred.family, dtype=pred.dtype,
                shapes=fresh[:args.measure], pool=list(pred.configs), configs_per_shape=len(pred.configs),
                seed=args.seed, epilogues=(args.epilogue,))
    if not eval_dir.is_dir():
        say(f"no measurements in {eval_dir} to evaluate the selector on; add --measure N")
    else:
        from costlearn.collect.dataset import current_rows, load, rows_where, valid_rows
        from costlearn.learn.metrics import geomean_regret
        from costlearn.collect.noise import noise_floors
        rows = valid_rows(current_rows(load(eval_dir)[0])[0])
        rows = rows[rows_where(rows, device_slug=pred.spec.slug, family=pred.family, dtype=pred.dtype)]
        noise = noise_floors(eval_dir, rows).tie
        ev = evaluate_dispatch(d, pred, rows, noise_rel=noise)
        if ev.empty:
            fused = "" if args.epilogue == "none" else f" with the epilogue {args.epilogue}"
            say(f"no measured shape{fused} in {eval_dir} lies in the ranges; add --measure N")
        else:
            say()
            when = "" if args.measure else " earlier (--measure N measures fresh shapes now)"
            say(f"measured on {pred.spec.name}{when}: {len(ev)} fresh shapes in range from {eval_dir} (every "
                f"candidate measured; noise floor {noise:.1%}, regrets at or below it count as 0)")
            say()
            say("| choice | shapes | top-1 regret mean | geomean | max |")
            say("|---|---|---|---|---|")
            choices = [("selector", f"selector ({len(d.configs)} configs, chosen at launch)"),
                       ("model", "predict_best per shape (a kernel per shape)")]
            if d.single_best is not None:
                choices.append(("single", f"one config for all ({d.single_best.config_id})"))
            for who, label in choices:
                r = ev[f"{who}_regret"].to_numpy(np.float64)
                r = r[np.isfinite(r)]
                say(f"| {label} | {len(r)} | {r.mean():.1%} | {geomean_regret(r):.1%} | {r.max():.1%} |")
            if args.per_shape:
                print()
                print(ev.to_string(index=False))
    atomic_write(Path(args.out) / "report.md", "\n".join(report) + "\n")
    return 0


def cmd_tuning_db(args) -> int:
    if args.tuning_db is None and not default_path().exists():
        print(f"{default_path()}: no tuning database yet (`costlearn predict ... --measure-top-k K` or "
              "`--tuning-db PATH` records one)")
        return 0
    db = TuningDB(args.tuning_db, read_only=True)     # listing changes no file: nothing created, upgraded or set aside
    entries = db.entries()
    print(f"{db.path}: {len(entries)} entr{'y' if len(entries) == 1 else 'ies'}")
    for e in entries[-args.last:]:
        print(f"  {e.problem} {e.family} {e.device} {e.config.config_id} {e.chosen_by} {e.time_us:.1f} us "
              f"(template {e.template_hash}, costlearn {e.costlearn_version}, {e.updated})")
    return 0


def _default_protocol():
    return Protocol()


def evaluate_stage(backend, folder, eval_dir, *, n_random: int, budget_s: float, protocol, seed: int,
                   progress: bool, report=None, plots=None, recheck: int = 0):
    """Measure fresh problems on ``backend`` into ``eval_dir``, score the model
    in ``folder`` and print (and write) the report; returns the EvalResult."""
    from costlearn.learn.evaluate import evaluate
    eval_dir = Path(eval_dir)
    if eval_dir.is_dir() and any(eval_dir.glob("part-*.parquet")):
        print(f"resuming the evaluation in {eval_dir}: shapes and configs measured there are not "
              "measured again", file=sys.stderr)
    print(f"fresh measurements go to {eval_dir}", file=sys.stderr)
    res = evaluate(backend, folder, eval_dir, n_random=n_random, budget_s=budget_s, protocol=protocol, seed=seed,
                   progress=progress, before_score=(lambda: recheck_in_new_session(
                       backend.name, eval_dir, recheck, protocol or _default_protocol())) if recheck else None)
    print(f"fresh shapes measured on {backend.spec.name}, exhaustive over the model's candidates:")
    _print_eval(res, report, plots)
    return res


def cmd_evaluate(args) -> int:
    from costlearn.model.store import resolve_model
    _check_report_path(args.report)
    if args.no_measure:
        if args.data is not None and args.out:
            raise ValueError(f"--out {args.out}: evaluate --no-measure measures nothing, so it writes no dataset; "
                             "--report FILE writes the report (and its CSV)")
        source, flag = args.data, "--data"
        if source is None and args.out:             # the spelling before --data, kept for one release
            source, flag = args.out, "--out"
            print("note: `costlearn evaluate --no-measure --out DIR` is now `--data DIR` (--out is where fresh "
                  "measurements go); --out will stop meaning this in the next release", file=sys.stderr)
        if source is None:
            raise ValueError("--no-measure scores measurements already made: give --data DIR (and --model DEVICE "
                             "where the store holds several devices' models)")
        out = _dataset_folder(source, flag)
        from costlearn.collect.dataset import current_rows, load, valid_rows
        from costlearn.learn.evaluate import score
        from costlearn.model.artifact import load as load_artifact
        from costlearn.model.store import has_model
        from costlearn.serve.predict import Predictor
        from costlearn.learn.study import FOOTNOTE, by_source, decision_scores, format_by_source
        from costlearn.learn.train import read_device_json
        model = args.model
        if model is None:       # the measurements' device's model, where the store has one
            spec = read_device_json(out)
            if spec is not None and has_model(spec.slug, args.family, args.dtype, args.models):
                model = spec.slug
        art = load_artifact(resolve_model(model, args.family, args.dtype, args.models, cli=True))
        measured = load(out)[0]
        res = score(art, measured, data=out)
        print(f"scored {len(res.rows)} measurements from {out} (nothing measured):")
        training = art.sidecar.get("training", {})
        trained_on = str(training.get("dataset", ""))
        shared = set(res.rows["source_sha256"].dropna().astype(str)) & set(training.get("source_sha256s", [])) - {""}
        if trained_on and Path(trained_on).resolve() == Path(out).resolve():
            print(f"note: {out} is the folder this model was trained on, so these scores are in-sample; the "
                  "held-out table `costlearn train` printed is the honest one (or score measurements the model "
                  "was not trained on, imported into another folder)", file=sys.stderr)
        elif shared:
            print(f"note: {len(shared)} of the logs scored here (by sha256) were in this model's training rows, so "
                  "their scores are in-sample; `costlearn study` leaves each log out", file=sys.stderr)
        _print_eval(res, args.report, args.plots)
        per = decision_scores(Predictor(art.path), valid_rows(current_rows(measured)[0]),
                              best_fixed=art.baseline("best_fixed"))
        table = format_by_source(by_source(per), "What predict_best answers (all candidates, vendor floor and coverage "
                                 "included), by log") + "\n\n" + FOOTNOTE + (
            " The table above ranks the measured configs only; this one scores the answer predict_best gives.")
        print()
        print(table)
        if args.report:
            with open(args.report, "a") as f:
                f.write("\n" + table + "\n")
        return 0
    be = _backend(args.device, args.family)
    # default: this device's model
    folder = resolve_model(args.model or be.spec.slug, args.family, args.dtype, args.models, cli=True)
    if args.out:
        eval_dir = Path(args.out)
    else:
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        from costlearn.collect.dataset import device_dataset_folder
        eval_dir = device_dataset_folder(args.data or "data", folder.parents[1].name) / f"eval-{stamp}"
    evaluate_stage(be, folder, eval_dir, n_random=args.random_shapes, budget_s=args.budget, protocol=_protocol(args),
                   seed=args.seed + 1, progress=not args.no_progress, report=args.report, plots=args.plots,
                   recheck=args.recheck)
    return 0


PER_SHAPE_PRINT_MAX = 100
"""Most problems whose per-problem table ``evaluate`` prints (an imported
log has thousands; the report file holds them all)."""


def _print_eval(res, report=None, plots=None) -> None:
    from costlearn.learn.evaluate import epilogue_subsets, format_per_shape, format_table, header_lines, write_report
    print(header_lines(res)[0])
    n_problems = int((res.per_shape["model"] == res.model).sum())
    if n_problems <= PER_SHAPE_PRINT_MAX:
        print(format_per_shape(res))
    else:
        print(f"{n_problems} problems: the per-problem table is not printed; "
              + (f"it is in {report} and its CSV" if report else "--report FILE writes it, with a CSV"))
    print()
    print(format_table(res, "all"))
    if any("tile_only" in sub for sub in res.summary.values()):
        print("\nwith the vendor candidate left out (regret against the best tile config):")
        print(format_table(res, "tile_only"))
    for subset in epilogue_subsets(res.per_shape):
        print(f"\nproblems with the {subset}:")
        print(format_table(res, subset))
    print(f"ties: a regret at or below {res.noise_floor:.1%} counts as 0; "
          + (res.noise_floors.describe() if res.noise_floors is not None else ""))
    if res.hidden_by_noise:
        from costlearn.learn.evaluate import header_lines
        print(header_lines(res)[-1], file=sys.stderr)
    if report:
        path = write_report(res, report)
        print(f"report: {path} (per-problem metrics: {path.with_suffix('.csv')})")
    if plots:
        from costlearn.learn.evaluate import write_plots
        for path in write_plots(res, plots):
            print(f"plot: {path}")


def _check_report_path(report) -> None:
    """Refuse a ``--report`` path that cannot be written as a file, before any work."""
    if report and Path(report).is_dir():
        raise ValueError(f"--report {report} is a folder; give a file name (e.g. {Path(report) / 'report.md'})")


def cmd_study(args) -> int:
    from costlearn.learn.study import FOOTNOTE, leave_one_log_out
    _check_report_path(args.report)
    folder = _dataset_folder(args.data)
    work = Path(args.out) if args.out else Path("out") / "study" / folder.name
    print(f"leave one log out over {folder}: models go to {work}", file=sys.stderr)
    res = leave_one_log_out(folder, work, family=args.family, dtypes=args.dtype or None,
                            log=lambda line: print(line, file=sys.stderr))
    text = res.format() + "\n\n" + FOOTNOTE + " Scored: the left-out log's problems that no training log measured."
    print(text)
    if args.report:
        path = Path(args.report)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
        res.per_problem.to_csv(path.with_suffix(".csv"), index=False)
        print(f"report: {path} (per-problem scores: {path.with_suffix('.csv')})")
    return 0


def cmd_transfer(args) -> int:
    from costlearn.model.artifact import models_root
    from costlearn.model.transfer import MIN_DESTINATION_PROBLEMS
    from costlearn.learn.transfer import transfer
    from costlearn.collect.dataset import device_dataset_folder
    data = device_dataset_folder(args.data, args.to.lower()) if args.data else None
    results = transfer(models_root(args.models or None), args.source, args.to, data_dir=data,
                       source_data=args.source_data,
                       family=args.family, dtype=args.dtype, destination_share=args.destination_share,
                       replace=args.replace, progress=lambda line: print(line, file=sys.stderr))
    for r in results:
        h = r.holdout.get("xgboost_devices", {})
        held = (f"held-out top-1 {100 * h['top1_geomean']:.2f} % over {h['shapes']} {r.destination} problems"
                if h else "no held-out figures (too few destination problems)")
        kind = (f"zero-shot: every prediction is flagged until {MIN_DESTINATION_PROBLEMS} {r.destination} problems "
                "are measured" if r.zero_shot else "adapted")
        print(f"{r.family}/{r.dtype}: {r.source} -> {r.destination} from {r.source_rows} {r.source} rows and "
              f"{r.destination_rows} {r.destination} rows over {r.destination_problems} problems; {kind}; {held}; "
              f"{r.path.parent}")
    return 0


def cmd_run(args) -> int:
    """collect -> train -> predict -> evaluate on the local device, each stage
    called with explicit arguments."""
    from costlearn.model.artifact import model_folder
    t0 = time.perf_counter()
    _check_family_dtype(args)
    be = _backend(args.device)
    print(f"== costlearn run on {be.spec.name} ({be.name})", flush=True)
    protocol = _protocol(args)
    data, _ = collect_stage(be, args.data, family=args.family, dtype=args.dtype, budget_s=args.budget,
                            pool=args.pool, configs_per_shape=args.configs_per_shape, max_extent=args.max_extent,
                            max_flops=args.max_flops, shapes=parse_shapes(args.shapes) if args.shapes else None,
                            protocol=protocol, seed=args.seed, progress=not args.no_progress,
                            recheck=args.recheck, epilogues=args.epilogues or args.default_epilogues)
    print(f"== train  [t={time.perf_counter() - t0:.0f}s]", flush=True)
    trained = train_stage(data, args.models, family=args.family, dtypes=[args.dtype], learner="xgboost",
                          feature_set="analytic")[-1]
    print(f"== predict  [t={time.perf_counter() - t0:.0f}s]", flush=True)
    triples = [(1, 1024, 1024), (64, 64, 64), (300, 200, 500)] if _is_cpu(be.spec) else \
        [(1, 4096, 4096), (4096, 4096, 4096), (8, 8192, 1024)]
    predict_stage(triples, device=be.spec.slug, family=trained.family, dtype=trained.dtype, layout="NN", top_k=3,
                  models_dir=args.models, here=be.spec)
    print(f"== evaluate  [t={time.perf_counter() - t0:.0f}s]", flush=True)
    evaluate_stage(be, model_folder(args.models, be.spec.slug, trained.family, trained.dtype), data / "eval",
                   n_random=args.eval_random_shapes, budget_s=args.eval_budget, protocol=protocol,
                   seed=args.seed + 1, progress=not args.no_progress, report=args.report,
                   recheck=min(args.recheck, 2))
    print(f"== done in {time.perf_counter() - t0:.0f}s")
    return 0


def cmd_migrate_models(args) -> int:
    from costlearn.learn.train import migrate_models
    done = migrate_models(args.root)
    if not done:
        print(f"{args.root}: no artifact in the layout before kernel families")
    for old, new in done:
        print(f"{old} -> {new}")
    return 0


def cmd_compact(args) -> int:
    from costlearn.collect.dataset import compact
    n_parts, n_rows = compact(args.folder)
    if n_parts == 0:
        print(f"{args.folder}: nothing to merge (fewer than two readable parts)")
    else:
        print(f"{args.folder}: merged {n_parts} parts into one part of {n_rows} rows")
    return 0


def cmd_features(args) -> int:
    import pandas as pd

    from costlearn.collect.loop import candidate_pool
    from costlearn.features import get_feature_set
    spec = preset(args.preset) if args.preset is not None else _backend(args.device).spec
    m, n, k = parse_shapes(args.shape, one=True)[0]
    pool = candidate_pool(spec, args.family, args.dtype, _pool_size(spec, args.pool), args.seed)
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
    spec = preset(args.preset) if args.preset is not None else _backend(args.device).spec
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


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="costlearn", description="Learned cost model for GPU matmul tile "
                                 "selection: measure, learn, predict, evaluate.",
                                 epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", action="version", version=f"costlearn {__version__}")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    from costlearn.features import FEATURE_SETS
    from costlearn.model import MODELS

    p = sub.add_parser("collect", help="measure random shapes x tile configs into a dataset",
                       description="Measure random feasible tile configs on random shapes (batch-1 and "
                       "skinny ones included) under a time budget; resumable.")
    _add_measure_args(p)
    _add_problem_args(p)
    _add_collect_args(p, 240.0)
    p.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="collect on a Ray cluster, one worker per device, into <data>/<device>/ here: ADDRESS of "
                   "its head (host:6379, ray://host:10001); without ADDRESS the cluster `ray start` made on this "
                   "machine, else a new local one; --recheck is not run (pip install 'costlearn[ray]')")
    p.add_argument("--workers", type=_positive_int, default=None, metavar="N",
                   help="with --ray: workers to start (default: one per GPU of the cluster; for a CPU OpenCL "
                   "device, one per machine)")
    p.set_defaults(func=cmd_collect)

    p = sub.add_parser("recheck", help="re-time a sample of a dataset in a new session (across-session noise)",
                       description="Re-time configs of random shapes of a dataset in this new process and print "
                       "the within- and across-session noise floors; re-timings go to <dataset>/recheck/. "
                       "`collect` runs it after collecting (--recheck).")
    _add_measure_args(p, data_help=f"{DATA_HELP}: this device's dataset in it is re-timed, into its recheck/ "
                      "(default: data)")
    p.add_argument("--random-shapes", type=_positive_int, default=6, metavar="N",
                   help="random shapes of the dataset to re-time (default: 6)")
    p.add_argument("--configs-per-shape", type=_positive_int, default=4, help="configs re-timed per shape (default: 4)")
    _old_spelling(p, "--shapes", "--random-shapes", check=_positive_int)
    _old_spelling(p, "--configs", "--configs-per-shape", check=_positive_int)
    p.set_defaults(func=cmd_recheck)

    p = sub.add_parser("train", help="fit the cost model on a dataset",
                       description="Fit a cost model on data/<device>/ and write "
                       "models/<device>/<family>/<dtype>/; prints held-out regret against the baselines.")
    p.add_argument("--data", default="data", help=f"{DATA_HELP}; of a root, the one device's folder in it, else "
                   "this machine's (default: data)")
    p.add_argument("--models", default=None,
                   help="model store root (default: $COSTLEARN_MODELS, else the source tree's models/)")
    p.add_argument("--family", default=None, choices=FAMILIES.names(),
                   help="kernel family of the rows to train on (default: every one in the folder)")
    _add_dtypes_arg(p, "every one in the folder; each (family, dtype) with enough rows gets its model, the others "
                    "are named with why")
    p.add_argument("--learner", default="xgboost", choices=MODELS.names(),
                   help="the cost model to fit (default: xgboost)")
    _old_spelling(p, "--model", "--learner", check=MODELS.names())
    p.add_argument("--feature-set", default=None, choices=FEATURE_SETS.names(),
                   help="features a gradient-boosted model uses (default: analytic; raw and derived are ablations)")
    p.set_defaults(func=cmd_train)

    from costlearn.interop import EXPORT_FORMATS, IMPORT_FORMATS
    p = sub.add_parser("import", help="import measurements another tool made (Inductor logs, Kernel Tuner)",
                       usage="costlearn import [-h] --preset PRESET [--data DATA] [--mapping MAPPING] FORMAT FILE",
                       description="Read a file of measurements made by another tool into DATA/<device>/ as "
                       "dataset rows (source file, format and sha256 recorded; the same file twice adds nothing; "
                       "malformed lines are reported and skipped; a failed import writes nothing).")
    p.add_argument("format", choices=IMPORT_FORMATS, help="inductor: PyTorch Inductor AutoHeuristic mm log; "
                   "inductor-lut: an Inductor lookup table whose entries carry time_us or time_ms; "
                   "kernel-tuner: a Kernel Tuner cache file or T4 results JSON (needs --mapping)")
    p.add_argument("file", help="the file to import")
    p.add_argument("--preset", default=None, help="the named device the file was measured on (h200, h100, a100); "
                   "the file's header or keys, where it has them, must agree (required)")
    _old_spelling(p, "--device", "--preset")
    p.add_argument("--data", default="data", help=f"{DATA_HELP}: rows go to the preset's folder (default: data)")
    p.add_argument("--mapping", default=None, help="kernel-tuner: JSON file mapping the kernel's parameter names "
                   "to a family's (see the README)")
    p.set_defaults(func=cmd_import)

    p = sub.add_parser("export", help="write a dataset as Kernel Tuner cache files or T4 results, or a model's "
                       "choices as Inductor's lookup table",
                       description="Write a device's dataset as one Kernel Tuner cache file per problem "
                       "(kernel-tuner) or T4 results + metadata per problem (t4); or (inductor-lut) a triton_mm "
                       "model's best configs and the vendor call for given shapes as PyTorch Inductor's template "
                       "lookup table, so max-autotune times those instead of its whole list.")
    p.add_argument("format", choices=[*EXPORT_FORMATS, LUT_FORMAT])
    p.add_argument("--data", default="data", help=f"{DATA_HELP}; of a root, the one device's folder in it, else "
                   "this machine's (default: data)")
    p.add_argument("--out", required=True, help="folder to write into (inductor-lut: the JSON file)")
    lut = p.add_argument_group("inductor-lut")
    lut.add_argument("--models", default=None, help="model store root (default: $COSTLEARN_MODELS, else the "
                     "source tree's models/)")
    lut.add_argument("--model", default=None, help="model device folder, e.g. a100 (default: this machine's "
                     "device's model if the store has one, else the only one)")
    _old_spelling(lut, "--device", "--model")
    _add_dtypes_arg(lut, "every one the shapes hold that the store has a model of; the others are named")
    lut.add_argument("--shapes-file", default=None, metavar="FILE", help="file of 'M N K dtype [layout]' lines")
    _old_spelling(lut, "--shapes", "--shapes-file")
    lut.add_argument("--from-log", default=None, help="an Inductor AutoHeuristic mm log: its shapes and strides")
    lut.add_argument("--from-table", default=None, help="a lookup table Inductor recorded (inductor_lut_*.json): "
                     "its mm shapes")
    lut.add_argument("--top-k", type=_positive_int, default=None, help="tile configs per shape, with the vendor call "
                     "added; with 1, a shape the model is sure of lists that config alone (no autotuning) and "
                     "another lists it and the vendor call (default: 3)")
    lut.add_argument("--portable", action="store_true", help="also write device-agnostic keys")
    lut.add_argument("--device-name", default=None, help="the device part of the keys: what "
                     "torch.cuda.get_device_properties(0).gcnArchName prints on the target GPU (on NVIDIA GPUs the "
                     "device name, e.g. 'NVIDIA H100 80GB HBM3'; default: the preset's name)")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("predict", help="best tile config for shapes",
                       description="Predict the fastest tile config for each M N K triple.")
    p.add_argument("shape", nargs="+", metavar="SHAPE", help="one or more shapes: " + SHAPE_SYNTAX)
    p.add_argument("--model", default=None, help="model device folder, e.g. h200 (default: this machine's "
                   "device's model if the store has one, else the only one)")
    p.add_argument("--models", default=None,
                   help="model store root (default: $COSTLEARN_MODELS, else the source tree's models/)")
    _add_problem_args(p, layout=True, epilogue=True)
    p.add_argument("--top-k", type=_positive_int, default=5, help="how many ranked configs to list (default: 5)")
    p.add_argument("--json", action="store_true", help="one JSON object per shape")
    p.add_argument("--measure-top-k", type=_nonneg_int, default=0, metavar="K",
                   help="measure the model's top K on the local device and keep the fastest, recording it in "
                   "the tuning database; the vendor library (cuBLAS) is timed beside them where the family has "
                   "one (default: 0, predict only)")
    _add_device_arg(p, "for --measure-top-k")
    p.add_argument("--tuning-db", default=None, metavar="PATH",
                   help="tuning database to consult and record in, created if missing (default with "
                   "--measure-top-k: $COSTLEARN_TUNING_DB, else tuning.sqlite in the user cache: $COSTLEARN_CACHE, "
                   "$XDG_CACHE_HOME/costlearn or ~/.cache/costlearn)")
    p.set_defaults(func=cmd_predict)

    p = sub.add_parser("dispatch", help="a few configs + a launch-time selector for a range of shapes",
                       description="Choose up to --configs tile configs that together cover the shape "
                       "ranges with the least predicted regret, and write a selector that picks among them "
                       "from the actual extents at launch, as Python (NAME.py) and a C header (NAME.h). "
                       "With measured fresh shapes in range (--measure N, or already in --eval-dir), print "
                       "the selector's measured regret against the per-shape best.")
    p.add_argument("--m", required=True, metavar="LO:HI", help="range of M, inclusive, e.g. 1:1024")
    p.add_argument("--n", required=True, metavar="LO:HI", help="range of N")
    p.add_argument("--k", required=True, metavar="LO:HI", help="range of K")
    p.add_argument("--configs", type=_positive_int, default=3, help="at most this many configs, 1-4 (default: 3)")
    p.add_argument("--samples", type=_positive_int, default=2000, help="shapes sampled to fit (default: 2000)")
    p.add_argument("--depth", type=_positive_int, default=3, help="depth of the selector's tree (default: 3)")
    p.add_argument("--seed", type=_nonneg_int, default=0, help="seed of the sampled and measured shapes (default: 0)")
    p.add_argument("--model", default=None, help="model device folder (default: this machine's device's model if "
                   "the store has one, else the only one)")
    p.add_argument("--models", default=None,
                   help="model store root (default: $COSTLEARN_MODELS, else the source tree's models/)")
    _add_problem_args(p, epilogue=True)
    p.add_argument("--out", default="out/dispatch", help="folder for the selector (default: out/dispatch)")
    p.add_argument("--name", default="select_tile", help="selector function and file name (default: select_tile)")
    p.add_argument("--measure", type=_nonneg_int, default=0, metavar="N",
                   help="measure N fresh shapes in range (every candidate) for the evaluation (default: 0)")
    _add_device_arg(p, "for --measure")
    p.add_argument("--eval-dir", default=None, help="measured fresh shapes; resumed by --measure "
                   "(default: data/<model device>/dispatch-eval)")
    p.add_argument("--budget", type=_positive_seconds, default=900.0, help="seconds of measuring (default: 900)")
    p.add_argument("--per-shape", action="store_true", help="also print the per-shape regrets")
    p.set_defaults(func=cmd_dispatch)

    p = sub.add_parser("tuning-db", help="list the tuning database",
                       description="List the tuning database's entries (shape, device, config, how chosen, "
                       "time). Read-only: a corrupt file is reported and left as it is.")
    p.add_argument("--tuning-db", default=None, metavar="PATH",
                   help="tuning database file to read; it must exist and is opened read-only (default: "
                   "$COSTLEARN_TUNING_DB, else tuning.sqlite in the user cache: $COSTLEARN_CACHE, "
                   "$XDG_CACHE_HOME/costlearn or ~/.cache/costlearn)")
    _old_spelling(p, "--path", "--tuning-db")
    p.add_argument("--last", type=_positive_int, default=50, help="entries to print, newest (default: 50)")
    p.set_defaults(func=cmd_tuning_db)

    p = sub.add_parser("evaluate", help="measure fresh shapes and report regret vs baselines",
                       description="Measure fresh shapes (batch-1, skinny, small, past a tile multiple, "
                       "random) exhaustively over the model's candidates on the local device; print "
                       "per-shape and summary top-k regret and Kendall tau for the model and the "
                       "roofline, best-fixed and random baselines.")
    _add_measure_args(p, data=None, data_help=f"{DATA_HELP}: fresh measurements go to a new eval-<UTC time>/ "
                      "in the model device's folder unless --out names a folder; with --no-measure, the dataset "
                      "whose measurements are scored, which it then needs (default: data)")
    p.add_argument("--model", default=None, help="model device folder (default: the local device's)")
    p.add_argument("--models", default=None,
                   help="model store root (default: $COSTLEARN_MODELS, else the source tree's models/)")
    _add_problem_args(p)
    p.add_argument("--random-shapes", type=_nonneg_int, default=4, metavar="N",
                   help="random fresh shapes besides the fixed set of 8 (default: 4)")
    _old_spelling(p, "--shapes", "--random-shapes", check=_nonneg_int)
    p.add_argument("--budget", type=_positive_seconds, default=600.0,
                   help="seconds of measuring (default: 600)")
    p.add_argument("--out", default=None, help="dataset folder for the fresh measurements; an existing "
                   "one is resumed (default: a new <data>/<device>/eval-<UTC time>/)")
    p.add_argument("--report", default=None, help="write markdown + CSV report here")
    p.add_argument("--plots", default=None, help="write PNG plots into this folder (needs matplotlib)")
    p.add_argument("--recheck", type=_nonneg_int, default=4, metavar="SHAPES",
                   help="after measuring, re-time configs of this many shapes in a new process; ties then use "
                   "the across-session noise floor; 0: do not (default: 4)")
    p.add_argument("--no-measure", action="store_true",
                   help="measure nothing: score the measurements of the dataset folder --data with --model (default "
                   "there: the model of that folder's device, else the store's only one); needs no device")
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("study", help="leave one log out: train on every log of a folder but one, score that one",
                       description="The honest score on logs of the kind users compile: for each log (an "
                       "imported file) of a dataset folder and each dtype, train on the other logs and score what "
                       "predict_best answers (vendor floor and coverage included) on the left-out log's problems, "
                       "one table row per log.")
    p.add_argument("--data", default="data", help=f"{DATA_HELP} holding several logs; of a root, the one device's "
                   "folder in it, else this machine's (default: data)")
    p.add_argument("--family", default="triton_mm", choices=FAMILIES.names(), help="kernel family (default: "
                   "triton_mm)")
    _add_dtypes_arg(p, "every dtype with two logs")
    p.add_argument("--out", default=None, help="folder the folds' models are written to (default: out/study/<device>)")
    _old_spelling(p, "--work", "--out")
    p.add_argument("--report", default=None, help="write the tables (markdown) and per-problem CSV here")
    p.set_defaults(func=cmd_study)

    p = sub.add_parser("transfer", help="carry a device's models to another device (zero-shot or from a few "
                       "measurements)",
                       description="For every (family, dtype) model of the --from device, fit one model on its "
                       "training rows and the --to device's rows in --data (none: zero-shot, from the device "
                       "descriptors alone), with the --to device's feasibility rules, and write it to "
                       "MODELS/<to>/<family>/<dtype>/, served by predict --model <to> like any other. A zero-shot "
                       "model's predictions are flagged OOD, naming the source device.")
    p.add_argument("--from", dest="source", required=True, help="device folder of the models to carry (e.g. a100)")
    p.add_argument("--to", required=True, help="destination device folder (a preset, e.g. h100, or the device of "
                   "--data's device.json)")
    p.add_argument("--models", default=None, help="model store root holding the --from device's models (default: "
                   "$COSTLEARN_MODELS, else the source tree's models/)")
    p.add_argument("--data", default=None, help=f"{DATA_HELP}: the --to device's rows (e.g. data or data/h100); "
                   "omit for zero-shot")
    p.add_argument("--source-data", default=None, help="the source's dataset folder (default: the one its model "
                   "was trained on)")
    p.add_argument("--family", default=None, choices=FAMILIES.names(), help="only this family")
    _add_dtypes_arg(p, "every dtype the --from device has a model of")
    p.add_argument("--destination-share", type=float, default=0.2, help="weight of the destination's rows "
                   "against the source's, in (0, 1] (default: %(default)s)")
    p.add_argument("--replace", action="store_true", help="overwrite a destination model trained on its own rows")
    p.set_defaults(func=cmd_transfer)

    p = sub.add_parser("run", help="collect, train, predict and evaluate on the local device",
                       description="The main job end to end on the local device: collect for --budget "
                       "seconds, train, predict a few shapes (M=1 included), evaluate on fresh shapes.")
    _add_measure_args(p, data="out/data")
    _add_problem_args(p)
    _add_collect_args(p, 180.0, epilogues=("none",))
    p.add_argument("--models", default="out/models", help="model store root (default: out/models)")
    p.add_argument("--eval-random-shapes", type=_nonneg_int, default=2, metavar="N",
                   help="evaluate's --random-shapes: random fresh shapes besides the fixed set of 8 (default: 2)")
    _old_spelling(p, "--eval-shapes", "--eval-random-shapes", check=_nonneg_int)
    p.add_argument("--eval-budget", type=_positive_seconds, default=100.0, help="seconds for evaluation (default: 100)")
    p.add_argument("--report", default=None, help="write the evaluation report here")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("compact", help="merge a dataset folder's parts into one",
                       description="Merge every readable Parquet part of a dataset folder into one part "
                       "(atomic; safe to interrupt). Corrupt parts are left in place.")
    p.add_argument("folder", help="dataset folder, e.g. data/h200")
    p.set_defaults(func=cmd_compact)

    p = sub.add_parser("features", help="feature table of a device's candidate pool at one shape",
                       description="Build the analytic feature table of a candidate pool on the local "
                       "device or a preset (e.g. h200, with registers per thread read from nvcc "
                       "-Xptxas -v, so no GPU is needed).")
    p.add_argument("--preset", default=None, help="a named device (h200, h100, a100); default: the local one")
    _add_device_arg(p, "when no --preset")
    _add_problem_args(p)
    p.add_argument("--shape", required=True, nargs="+", metavar="SHAPE", help="the problem shape: " + SHAPE_SYNTAX)
    p.add_argument("--pool", type=_positive_int, default=None,
                   help="candidate pool size, as collect draws it (default: 48 on a CPU, 160 on a GPU)")
    p.add_argument("--seed", type=_nonneg_int, default=0, help="pool seed (default: 0)")
    p.add_argument("--feature-set", default="analytic", choices=FEATURE_SETS.names(),
                   help="the features to tabulate (default: analytic)")
    p.add_argument("--no-nvcc", action="store_true", help="use the register estimate instead of nvcc")
    p.add_argument("--csv", default=None, help="write the whole table here instead of printing")
    p.add_argument("--rows", type=_positive_int, default=10, help="rows to print (default: 10)")
    p.set_defaults(func=cmd_features)

    p = sub.add_parser("space", help="enumerate the feasible tile space of a device",
                       description="Count the feasible tile configs of the local device or a preset, and "
                       "how many each feasibility rule rejected.")
    _add_device_arg(p, "to describe")
    _add_problem_args(p)
    p.add_argument("--preset", default=None, help="a named device instead of the local one (h200, h100, a100)")
    p.add_argument("--shape", nargs="+", metavar="SHAPE",
                   help="also reject block tiles larger than this problem: " + SHAPE_SYNTAX)
    p.set_defaults(func=cmd_space)

    p = sub.add_parser("migrate-models", help="convert model artifacts of the layout before kernel families",
                       description="Move every artifact ROOT/<device>/<dtype>/ (schema 2) to "
                       "ROOT/<device>/gemm/<dtype>/ (schema 3): the same model file, its compiled scorer and "
                       "cascade, the baselines' states.")
    p.add_argument("root", help="model store root, e.g. models")
    p.set_defaults(func=cmd_migrate_models)
    return ap


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    for token in argv:                  # argparse takes "-1x2x3" for an option and says a shape is missing
        if re.fullmatch(r"-\d+[x,]\S*", str(token)):
            command = next((a for a in argv if not str(a).startswith("-")), "")
            print(f"costlearn {command}: error: shape {token}: extents must be integers >= 1".replace("  ", " "),
                  file=sys.stderr)
            return 2
    args = build_parser().parse_args(argv)
    for note in _renamed_notes(args):
        print(note, file=sys.stderr)
    try:
        return args.func(args)
    except (CostlearnError, ValueError) as e:      # costlearn's own errors and a bad argument: one line
        print(f"costlearn {args.command}: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:                       # e.g. `costlearn predict ... | head`: the reader left
        try:                                      # Python's documented way: stdout to devnull, so exit's flush is quiet
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 0
    except OSError as e:
        print(f"costlearn {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        from costlearn.collect.loop import CollectionInterrupted
        if isinstance(e, CollectionInterrupted):
            print(f"interrupted: {e}; the same command resumes where it stopped", file=sys.stderr)
        else:
            print("interrupted; everything measured so far is saved", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
