"""``costlearn import`` and ``export``: other tools' files in and out (Inductor logs and lookup tables, Kernel
Tuner, T4)."""
from __future__ import annotations

import argparse
import sys
import time

from costlearn.cli.common import (DATA_HELP, add_dtypes_arg, dataset_folder, old_spelling, positive_int,
                                  tuning_db_target, typed_flag)
from costlearn.core.device import PRESETS
from costlearn.core.files import check_output
from costlearn.core.progress import ProgressLog


LUT_FORMAT = "inductor-lut"
"""``costlearn export inductor-lut``: a model's choices as PyTorch Inductor's template lookup table."""
DB_FORMAT = "tuning-db"
"""``costlearn import tuning-db``: a tuning database's measurements of one device class (not a file format)."""


def cmd_import(args) -> int:
    from costlearn.interop import import_file
    from costlearn.interop.common import ImportInterrupted
    if args.format == DB_FORMAT:
        return _import_tuning_db(args)
    if args.device_class is not None:
        raise ValueError(f"--device-class is {DB_FORMAT}'s; an {args.format} file names its device with --preset")
    if args.file is None:
        raise ValueError(f"`costlearn import {args.format} FILE`: give the file to import")
    if args.preset is None:
        raise ValueError(f"--preset is required: the named device the file was measured on "
                         f"({', '.join(PRESETS.names())})")
    check_output(args.data, "--data", folder=True)
    try:
        rep = import_file(args.format, args.file, device=args.preset, data_root=args.data, mapping=args.mapping)
    except KeyboardInterrupt as e:                 # before the writing began (the file's hash): nothing written
        raise e if isinstance(e, ImportInterrupted) else ImportInterrupted(args.file, None) from None
    print(rep.summary())
    if not rep.already_imported:
        print(f"next: costlearn train --data {rep.folder} --models MODELS")
    return 0


def _import_tuning_db(args) -> int:
    from costlearn.interop import import_tuning_db
    from costlearn.interop.common import ImportInterrupted
    if args.device_class is None:
        raise ValueError(f"--device-class is required: the device slug of the measurements to import (a tuning "
                         f"database key's device, e.g. {', '.join(PRESETS.names())})")
    if args.mapping is not None:
        raise ValueError(f"--mapping is kernel-tuner's; {DB_FORMAT} needs none")
    try:
        target = tuning_db_target(args.file) if args.file is not None else None
    except argparse.ArgumentTypeError as e:
        raise ValueError(f"TARGET: {e}") from None
    check_output(args.data, "--data", folder=True)
    try:
        with ProgressLog() as progress:
            rep = import_tuning_db(target, device_class=args.device_class, data_root=args.data, preset=args.preset,
                                   progress=progress)
    except KeyboardInterrupt as e:                 # while reading the database: nothing written
        raise e if isinstance(e, ImportInterrupted) else ImportInterrupted(args.file or "the tuning database",
                                                                           None) from None
    print(rep.summary())
    if not rep.already_imported:
        print(f"next: costlearn train --data {rep.folder} --models MODELS")
    return 0


def cmd_export(args) -> int:
    if args.format == LUT_FORMAT:
        return _export_lut(args)
    lut_only = [typed_flag(args, flag) for flag, v in (
        ("--models", args.models), ("--model", args.model), ("--dtype", args.dtype),
        ("--shapes-file", args.shapes_file),
        ("--from-log", args.from_log), ("--from-table", args.from_table), ("--from-db", args.from_db),
        ("--top-k", args.top_k),
        ("--device-name", args.device_name), ("--portable", args.portable or None)) if v is not None]
    if lut_only:
        raise ValueError(f"{' '.join(lut_only)}: {'is' if len(lut_only) == 1 else 'are'} {LUT_FORMAT}'s; export "
                         f"{args.format} writes every valid measurement of --data")
    from costlearn.interop import export_dataset
    check_output(args.out, "--out", folder=True)
    folder = dataset_folder(args.data)
    paths = export_dataset(args.format, folder, args.out)
    print(f"wrote {len(paths)} {args.format} files of the dataset {folder} into {args.out}")
    return 0


def _export_lut(args) -> int:
    from costlearn.interop.inductor.lut import check_device_name, check_lut_out, export_lut
    from costlearn.interop.inductor.lut_sources import table_problems
    check_lut_out(args.out)                      # before a log of 10^5 lines is read
    if args.device_name is not None:
        check_device_name(args.device_name)
    t0 = time.perf_counter()
    got = table_problems(shapes_file=args.shapes_file, from_log=args.from_log, from_table=args.from_table,
                         from_db=args.from_db, dtypes=args.dtype, device=args.model, device_name=args.device_name,
                         models_dir=args.models)
    for note in got.notes:
        print(note, file=sys.stderr)
    source = args.shapes_file or args.from_log or args.from_table or args.from_db
    print(f"read {len(got.problems)} problems from the {got.what} {source} in {time.perf_counter() - t0:.1f} s",
          file=sys.stderr)
    rep = export_lut(got.problems, args.out, device=got.device, top_k=args.top_k or 3, models_dir=args.models,
                     device_name=got.device_name, portable=args.portable, measured=got.winners)
    print(rep.summary())
    print(f"use it: costlearn.interop.inductor.choices.use_lookup_table({str(args.out)!r}), "
          "then torch.compile(..., mode='max-autotune') (README, 'Inside PyTorch Inductor')")
    return 0


def add_import(sub) -> None:
    from costlearn.interop import IMPORT_FORMATS

    p = sub.add_parser("import", help="import measurements another tool made (Inductor logs, Kernel Tuner) or a "
                       "tuning database holds",
                       usage="costlearn import [-h] --preset PRESET [--data DATA] [--mapping MAPPING] FORMAT FILE\n"
                       "       costlearn import tuning-db [TARGET] --device-class SLUG [--preset PRESET] "
                       "[--data DATA]",
                       description="Read a file of measurements made by another tool into DATA/<device>/ as "
                       "dataset rows (source file, format and sha256 recorded; the same file twice adds nothing; "
                       "malformed lines are reported and skipped; a failed import writes nothing). tuning-db reads "
                       "every measurement a tuning database (a file or a postgresql:// URL, opened read-only) holds "
                       "of one device class, each with its host, clocks and tuning; run again, it adds only new "
                       "measurements.")
    p.add_argument("format", choices=[*IMPORT_FORMATS, DB_FORMAT], metavar="FORMAT",
                   help="inductor: PyTorch Inductor AutoHeuristic mm log; "
                   "inductor-lut: an Inductor lookup table whose entries carry time_us or time_ms; "
                   "kernel-tuner: a Kernel Tuner cache file or T4 results JSON (needs --mapping); "
                   "tuning-db: a tuning database's measurements (needs --device-class)")
    p.add_argument("file", metavar="FILE", nargs="?", default=None,
                   help="the file to import (tuning-db: the database, a file or a postgresql:// URL without a "
                   "password; default: $COSTLEARN_TUNING_DB, else the user cache's)")
    p.add_argument("--preset", default=None, help="the named device the file was measured on (h200, h100, a100); "
                   "the file's header or keys, where it has them, must agree (required; tuning-db: only where "
                   "--device-class is not a preset and --data holds no device.json of it, and then also a "
                   "device.json file)")
    old_spelling(p, "--device", "--preset")
    p.add_argument("--device-class", default=None, metavar="SLUG", help="tuning-db: the device slug of the "
                   "measurements to import, as the database's keys hold it (e.g. a100)")
    p.add_argument("--data", default="data", help=f"{DATA_HELP}: rows go to the preset's folder (default: data)")
    p.add_argument("--mapping", default=None, help="kernel-tuner: JSON file mapping the kernel's parameter names "
                   "to a family's (see the README)")
    p.set_defaults(func=cmd_import)


def add_export(sub) -> None:
    from costlearn.interop import EXPORT_FORMATS

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
    old_spelling(lut, "--device", "--model")
    add_dtypes_arg(lut, "every one the shapes hold that the store has a model of; the others are named")
    lut.add_argument("--shapes-file", default=None, metavar="FILE", help="file of 'M N K dtype [layout]' lines")
    old_spelling(lut, "--shapes", "--shapes-file")
    lut.add_argument("--from-log", default=None, help="an Inductor AutoHeuristic mm log: its shapes and strides")
    lut.add_argument("--from-table", default=None, help="a lookup table Inductor recorded (inductor_lut_*.json): "
                     "its mm shapes")
    lut.add_argument("--from-db", default=None, type=tuning_db_target, metavar="PATH|URL",
                     help="a tuning database (a file or a postgresql:// URL shared by a fleet): its measured winners "
                     "are listed alone (no autotuning); alone, its problems of the model's device class are the "
                     "shapes (those not measured get the model's top k and the vendor call)")
    lut.add_argument("--top-k", type=positive_int, default=None, help="tile configs per shape, with the vendor call "
                     "added; with 1, a shape the model is sure of lists that config alone (no autotuning) and "
                     "another lists it and the vendor call (default: 3)")
    lut.add_argument("--portable", action="store_true", help="also write device-agnostic keys")
    lut.add_argument("--device-name", default=None, help="the device part of the keys: what "
                     "torch.cuda.get_device_properties(0).gcnArchName prints on the target GPU (on NVIDIA GPUs the "
                     "device name, e.g. 'NVIDIA H100 80GB HBM3'; default: the preset's name)")
    p.set_defaults(func=cmd_export)


PARSERS = {"import": add_import, "export": add_export}
"""The commands this module adds, each by its function of the subparsers."""
