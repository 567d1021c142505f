"""``costlearn collect``, ``recheck`` and ``compact``: measuring into a dataset (here or on a Ray fleet), re-timing
a sample in a new session, merging a folder's parts; and what a collection prints."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from costlearn.cli.common import (DATA_HELP, SHAPE_SYNTAX, add_measure_args, add_problem_args, check_family_dtype,
                                  device_backend, device_folders, is_cpu, is_device_folder, nonneg_int, old_spelling,
                                  parse_shapes, pool_size, positive_float, positive_int, positive_seconds, protocol_of,
                                  tuning_db_target)
from costlearn.collect.backends import auto_name
from costlearn.collect.sampler import ShapeBounds
from costlearn.collect.sampler import STRATEGIES
from costlearn.collect.space import enumerate_space
from costlearn.core.files import check_output
from costlearn.core.progress import ProgressLog
from costlearn.core.problem import EPILOGUES
from costlearn.families import get_family


def add_collect_args(p, budget_s: float, epilogues: tuple = EPILOGUES):
    p.add_argument("--budget", type=positive_seconds, default=budget_s,
                   help=f"seconds of collection, compiling included (default: {budget_s:.0f})")
    p.add_argument("--epilogues", nargs="+", choices=EPILOGUES, default=None, metavar="EPILOGUE",
                   help=f"what the fused kernels compute after A @ B, of {', '.join(EPILOGUES)} (bias: a length-N "
                   "vector added to every row; then ReLU or the tanh GELU): each random shape is measured with one "
                   "drawn from these, each --shapes shape with every one; the pool compiles once per epilogue "
                   f"(default: {' '.join(epilogues)})")
    p.set_defaults(default_epilogues=list(epilogues))
    p.add_argument("--pool", type=positive_int, default=None,
                   help="candidate pool size, compiled once (default: 48 on a CPU, 160 on a GPU)")
    p.add_argument("--configs-per-shape", type=positive_int, default=None,
                   help="pool configs measured per shape (default: all feasible, at most the default pool size)")
    p.add_argument("--max-extent", type=positive_int, default=None,
                   help="largest M, N, K drawn (default: 1024 on a CPU, 8192 on a GPU)")
    p.add_argument("--shapes", nargs="+", default=None, metavar="SHAPE",
                   help="measure these shapes (every pool config feasible for each) instead of random ones: "
                   + SHAPE_SYNTAX + ", or a shapes file ('M N K dtype [layout]' a line, as `export inductor-lut "
                   "--shapes-file` reads; every line of --dtype and of the layout measured: --layout where the command "
                   "has it, else NN); "
                   "with --strategy prior, the shapes the prior starts from; with active, the "
                   "only shapes it chooses among")
    p.add_argument("--strategy", choices=STRATEGIES, default=None,
                   help="which shapes to measure: prior (real models' linear layers, forward and backward, your "
                   "--shapes and their other token counts, a quarter log-uniform: where compilers ask), random "
                   "(log-uniform, batch-1 and skinny mixed in), active (rounds: refit a small ensemble on what is "
                   "measured, measure where its pick is least sure per second of measuring) (default: prior; with "
                   "--shapes, those shapes as given)")
    p.add_argument("--max-flops", type=positive_float, default=None,
                   help="largest 2*M*N*K drawn (default: 2**26 on a CPU, none on a GPU)")
    p.add_argument("--recheck", type=nonneg_int, default=6, metavar="SHAPES",
                   help="afterwards, re-time configs of this many shapes in a new process (the across-session "
                   "noise floor, `costlearn recheck`); 0: do not (default: 6)")


def resolve_strategy(strategy: str | None, shapes) -> str:
    """The strategy a command collects with: ``strategy`` where given; by
    default ``prior`` (real models' shapes mixed with log-uniform ones:
    the shapes compilers ask, which a random-shape log teaches little about),
    or ``random`` where the user gave ``shapes`` (the library's reading of
    given shapes with it: those shapes, as given)."""
    if strategy is not None:
        return strategy
    return "random" if shapes else "prior"


def _collection_defaults(spec, data_root, family: str, dtype: str, pool, configs_per_shape, max_extent, max_flops):
    """(ShapeBounds, dataset folder, pool size, configs per shape) of a
    collection on ``spec``: the device's shape bounds unless given, its
    folder of ``data_root`` (:func:`costlearn.collect.dataset.device_dataset_folder`),
    :func:`pool_size` at most the feasible configs (a larger ``--pool`` is
    said and cut to them), and ``--configs-per-shape``, else the pool, at
    most the default pool size (so a large pool spreads over shapes instead
    of spending the budget on one)."""
    from costlearn.collect.dataset import device_dataset_folder
    b = ShapeBounds.for_device(is_cpu(spec))
    bounds = ShapeBounds(1, b.max_extent if max_extent is None else max_extent,
                         b.max_flops if max_flops is None else max_flops)
    size, feasible = pool_size(spec, pool), len(enumerate_space(spec, family=family, dtype=dtype).configs)
    if size > feasible:
        print(f"--pool {size}: {spec.name} runs {feasible} {family}/{dtype} configs; the pool is all of them",
              file=sys.stderr)
        size = feasible
    per_shape = min(size, pool_size(spec, None)) if configs_per_shape is None else configs_per_shape
    return bounds, device_dataset_folder(data_root, spec.slug), size, per_shape


def asked_shapes(target, device: str, family: str, dtype: str, epilogues, data, shapes, models_dir=None,
                 layout: str = "NN") -> list:
    """``--shapes-from-db``: the problems compilers asked of ``device`` in ``layout`` (the tuning database
    ``target``, None: the default; :func:`costlearn.serve.asked.asked_problems`), least certain first by the
    model of ``models_dir`` (the store root; None: the default store), then the user's ``shapes``; says on
    stderr how many, how ordered and what was left out.

    Raises
    ------
    ValueError, OSError
        As :func:`costlearn.serve.asked.asked_problems`.
    """
    from costlearn.serve.asked import asked_problems
    got = asked_problems(target, device, family, dtype, layout=layout, epilogues=epilogues, data_dir=data,
                         models_dir=models_dir)
    d = got.distances_log2
    how = (f", least certain first (farthest from {got.model}'s training shapes: {d[0]:.2f} to {d[-1]:.2f} "
           "doublings)" if d else f", oldest first (the {family}/{dtype} model of {device} does not load: "
           f"{got.unordered})" if got.unordered else f", oldest first (no {family}/{dtype} model of {device} to rank "
           "them)" if got.problems else "")
    left = ([f"{got.measured} measured in {data} already"] if got.measured else []) + \
        [f"{n} of {why}" for why, n in sorted(got.left_out.items())]
    if not got.asked:
        print(f"tuning database {got.target}: every {family} problem compilers asked of {device} is measured "
              f"there ({got.answered}); the collection measures its strategy's shapes", file=sys.stderr)
        return list(shapes or ())
    print(f"tuning database {got.target}: {got.asked} {family} problems compilers asked of {device}; measuring "
          f"{len(got.problems)} of them first{how}" + (f"; left out {', '.join(left)}" if left else "")
          + (f" (a collection measures {dtype} {layout}, epilogues {' '.join(epilogues)})"
             if got.left_out else ""), file=sys.stderr)
    return got.problems + list(shapes or ())


def collect_stage(backend, data_root, *, family: str, dtype: str, budget_s: float, pool: int | None,
                  configs_per_shape: int | None, max_extent: int | None, max_flops: float | None, shapes,
                  protocol, seed: int, progress: bool, recheck: int = 0, epilogues=("none",),
                  strategy: str = "random", shapes_from_db=False, models_dir=None, layout: str = "NN"):
    """Collect into ``<data_root>/<device>/`` (problems of ``layout``, each with one of
    ``epilogues``, the shapes chosen by ``strategy``, :func:`costlearn.collect.loop.collect`) and print the
    summary, then
    (``recheck`` > 0) re-time that many shapes in a new process
    (:func:`recheck_in_new_session`); returns (dataset folder, CollectResult). ``shapes_from_db``: False, or the
    tuning database (None: the default) whose asked problems go before ``shapes`` (:func:`asked_shapes`)."""
    from costlearn.collect.loop import collect
    spec = backend.spec
    bounds, out, pool, per_shape = _collection_defaults(spec, data_root, family, dtype, pool, configs_per_shape,
                                                        max_extent, max_flops)
    if shapes_from_db is not False:
        shapes = asked_shapes(shapes_from_db, spec.slug, family, dtype, epilogues, out, shapes, models_dir, layout)
    print(f"device: {spec.name} ({backend.name}); dataset: {out}; {family}/{dtype} {layout}; pool {pool} configs, "
          f"up to {per_shape} a shape; "
          f"shapes M,N,K <= {bounds.max_extent}, 2MNK <= {bounds.max_flops:.3g}; epilogues {', '.join(epilogues)}; "
          f"strategy {strategy}", file=sys.stderr)
    res = collect(backend, out, budget_s=budget_s, family=family, dtype=dtype, layout=layout, pool_size=pool,
                  configs_per_shape=per_shape,
                  bounds=bounds, shapes=shapes, protocol=protocol, seed=seed, progress=progress,
                  epilogues=epilogues, strategy=strategy, active=_active(strategy))
    print_collect_result(res, out, family, dtype, seed)
    if recheck and res.rows_written:
        recheck_in_new_session(backend.name, out, recheck, protocol)
    return out, res


def _active(strategy: str):
    """The active strategy's settings the command line uses (its ensemble:
    :class:`costlearn.learn.active.EnsembleDisagreement`), None for another strategy."""
    if strategy != "active":
        return None
    from costlearn.learn.active import active_settings
    return active_settings()


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
    be = device_backend(args.device)
    folder = device_dataset_folder(args.data, be.spec.slug)
    if not folder.is_dir():
        raise ValueError(f"--data {args.data}: no dataset of {be.spec.slug} there; collect first")
    with ProgressLog() as progress:
        res = recheck(be, folder, shapes=args.random_shapes, configs_per_shape=args.configs_per_shape,
                      protocol=protocol_of(args), progress=None if args.no_progress else progress)
    print(f"re-timed {res.rows_written} configs over {res.shapes} shapes in a new session into "
          f"{folder / 'recheck'}")
    print(res.noise_floors.describe())
    return 0


def print_collect_result(res, out, family: str, dtype: str, seed: int) -> None:
    """Print what a :func:`costlearn.collect.loop.collect` call into ``out`` did:
    rows, epilogues left out, time past the budget, mixed pools, noise, the
    dataset's summary."""
    from costlearn.collect.loop import EPILOGUE_COMPILE_SHARE
    from costlearn.collect.summary import dataset_summary
    for other in res.other_pools:
        print(f"note: {out} also holds {family}/{dtype} rows of another candidate pool (seed {other.get('seed')}, "
              f"{other.get('size')} configs); this run's pool (seed {seed}) differs in its size or seed: the dataset "
              "mixes pools, so some shapes have more candidates measured than others (use one --seed and one "
              "--pool per folder to avoid it)",
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
    check_family_dtype(args)
    fam = get_family(args.family)
    fam.check_dtype(args.dtype, args.layout)
    check_output(args.data, "--data", folder=True)
    asked = args.epilogues or args.default_epilogues
    epilogues = [e for e in asked if e in fam.epilogues]
    if not epilogues or (args.epilogues and len(epilogues) < len(asked)):
        raise ValueError(f"--epilogues {' '.join(asked)}: the {args.family!r} family fuses {list(fam.epilogues)}")
    shapes = parse_shapes(args.shapes, files=True, dtype=args.dtype, layout=args.layout) if args.shapes else None
    from_db = False if args.shapes_from_db is None else args.shapes_from_db or None    # None: the default target
    if from_db is not False and args.strategy not in (None, "prior"):
        raise ValueError(f"--shapes-from-db: the problems compilers asked are the prior's (--strategy prior), not "
                         f"the {args.strategy} strategy's")
    strategy = "prior" if from_db is not False else resolve_strategy(args.strategy, shapes)
    if args.ray is not None:
        fleet_collect_stage(args.ray or None, args.workers, args.device, args.data, family=args.family,
                            dtype=args.dtype, budget_s=args.budget, pool=args.pool,
                            configs_per_shape=args.configs_per_shape, max_extent=args.max_extent,
                            max_flops=args.max_flops, shapes=shapes, protocol=protocol_of(args), seed=args.seed,
                            progress=not args.no_progress, epilogues=epilogues, strategy=strategy,
                            shapes_from_db=from_db, models_dir=args.models, layout=args.layout)
        return 0
    collect_stage(device_backend(args.device, args.family), args.data, family=args.family, dtype=args.dtype,
                  budget_s=args.budget, pool=args.pool, configs_per_shape=args.configs_per_shape,
                  max_extent=args.max_extent, max_flops=args.max_flops, shapes=shapes, protocol=protocol_of(args),
                  seed=args.seed, progress=not args.no_progress, recheck=args.recheck, epilogues=epilogues,
                  strategy=strategy, shapes_from_db=from_db, models_dir=args.models, layout=args.layout)
    return 0


def fleet_collect_stage(address, workers, device: str, data_root, *, family: str, dtype: str, budget_s: float,
                        pool: int | None, configs_per_shape: int | None, max_extent: int | None,
                        max_flops: float | None, shapes, protocol, seed: int, progress: bool, epilogues=("none",),
                        strategy: str = "random", shapes_from_db=False, models_dir=None, layout: str = "NN"):
    """``collect --ray``: start one worker per device on a Ray cluster
    (:func:`costlearn.collect.fleet.start_fleet`) and collect into
    ``<data_root>/<device>/`` with the defaults :func:`collect_stage` uses
    for that device (:func:`costlearn.collect.fleet.collect_fleet`); print the same
    summary and what the fleet lost (``shapes_from_db``: as :func:`collect_stage`). Returns (dataset folder,
    FleetResult)."""
    from costlearn.collect.fleet import collect_fleet, start_fleet
    backend = auto_name(family) if device == "auto" else device
    with start_fleet(backend, workers=workers, address=address) as fleet:
        spec = fleet.spec
        bounds, out, pool, per_shape = _collection_defaults(spec, data_root, family, dtype, pool, configs_per_shape,
                                                            max_extent, max_flops)
        if shapes_from_db is not False:
            shapes = asked_shapes(shapes_from_db, spec.slug, family, dtype, epilogues, out, shapes, models_dir,
                                  layout)
        print(f"fleet: {len(fleet.members)} workers of {spec.name} ({fleet.backend}) on Ray; dataset: {out}; "
              f"{family}/{dtype} {layout}; pool {pool} configs, up to {per_shape} a shape; shapes M,N,K <= "
              f"{bounds.max_extent}, 2MNK <= {bounds.max_flops:.3g}; epilogues {', '.join(epilogues)}; "
              f"strategy {strategy}", file=sys.stderr)
        res = collect_fleet(fleet, out, budget_s=budget_s, family=family, dtype=dtype, layout=layout,
                            pool_size=pool, configs_per_shape=per_shape,
                            bounds=bounds, shapes=shapes, protocol=protocol, seed=seed, progress=progress,
                            epilogues=epilogues, strategy=strategy, active=_active(strategy))
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


def cmd_compact(args) -> int:
    from costlearn.collect.dataset import compact
    folders = [Path(args.folder)]
    if folders[0].is_dir() and not is_device_folder(folders[0]):
        folders = device_folders(folders[0])
        if not folders:
            raise ValueError(f"{args.folder}: no dataset parts, and no device folder (<device>/device.json) in it; "
                             "give a device's dataset folder (e.g. data/<device>) or a dataset root")
        print(f"{args.folder} is a dataset root: compacting each device folder in it "
              f"({', '.join(f.name for f in folders)})", file=sys.stderr)
    for folder in folders:
        n_parts, n_rows = compact(folder)
        if n_parts == 0:
            print(f"{folder}: nothing to merge (fewer than two readable parts)")
        else:
            print(f"{folder}: merged {n_parts} parts into one part of {n_rows} rows")
    return 0


def add_collect(sub) -> None:
    p = sub.add_parser("collect", help="measure shapes x tile configs into a dataset",
                       description="Measure random feasible tile configs on shapes chosen by --strategy (real "
                       "models' layers mixed with log-uniform shapes by default) under a time budget; resumable.")
    add_measure_args(p)
    add_problem_args(p, layout=True)
    add_collect_args(p, 240.0)
    p.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="collect on a Ray cluster, one worker per device, into <data>/<device>/ here: ADDRESS of "
                   "its head (host:6379, ray://host:10001); without ADDRESS the cluster `ray start` made on this "
                   "machine, else a new local one; --recheck is not run (pip install 'costlearn[ray]')")
    p.add_argument("--shapes-from-db", nargs="?", const="", default=None, type=tuning_db_target, metavar="PATH|URL",
                   help="the prior starts from the problems compilers asked of this device class (the tuning "
                   "database's predicted entries, read-only; those measured there or in --data left out), of "
                   "--dtype, --layout and --epilogues, least certain first: farthest from the training shapes of "
                   "this device's model in --models, else oldest first; then --shapes (default database: "
                   "$COSTLEARN_TUNING_DB, else tuning.sqlite in the user cache)")
    p.add_argument("--models", default=None, help="with --shapes-from-db: the model store whose model orders the "
                   "asked problems (default: $COSTLEARN_MODELS, else the source tree's models/)")
    p.add_argument("--workers", type=positive_int, default=None, metavar="N",
                   help="with --ray: workers to start (default: one per GPU of the cluster; for a CPU OpenCL "
                   "device, one per machine)")
    p.set_defaults(func=cmd_collect)


def add_recheck(sub) -> None:
    p = sub.add_parser("recheck", help="re-time a sample of a dataset in a new session (across-session noise)",
                       description="Re-time configs of random shapes of a dataset in this new process and print "
                       "the within- and across-session noise floors; re-timings go to <dataset>/recheck/. "
                       "`collect` runs it after collecting (--recheck).")
    add_measure_args(p, data_help=f"{DATA_HELP}: this device's dataset in it is re-timed, into its recheck/ "
                      "(default: data)")
    p.add_argument("--random-shapes", type=positive_int, default=6, metavar="N",
                   help="random shapes of the dataset to re-time (default: 6)")
    p.add_argument("--configs-per-shape", type=positive_int, default=4, help="configs re-timed per shape (default: 4)")
    old_spelling(p, "--shapes", "--random-shapes", check=positive_int)
    old_spelling(p, "--configs", "--configs-per-shape", check=positive_int)
    p.set_defaults(func=cmd_recheck)


def add_compact(sub) -> None:
    p = sub.add_parser("compact", help="merge a dataset folder's parts into one",
                       description="Merge every readable Parquet part of a dataset folder into one part "
                       "(atomic; safe to interrupt); of a dataset root, each device folder's. Corrupt parts are "
                       "left in place.")
    p.add_argument("folder", help="a device's dataset folder, e.g. data/h200, or a dataset root (each device "
                   "folder in it)")
    p.set_defaults(func=cmd_compact)


PARSERS = {"collect": add_collect, "recheck": add_recheck, "compact": add_compact}
"""The commands this module adds, each by its function of the subparsers."""
