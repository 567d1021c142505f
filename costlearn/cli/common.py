"""What several commands share: argument types and groups (the flags that mean one thing in every command),
old flag spellings, the shape syntax, and resolving a backend, a dataset folder or a model device from the flags."""
from __future__ import annotations

import argparse
import math
import os
import re
import sys
from pathlib import Path

from costlearn.collect.backends import get_backend, local_device, local_record, measuring_backends
from costlearn.collect.protocol import Protocol
from costlearn.core.device import DeviceSpec
from costlearn.core.files import check_output
from costlearn.core.dtypes import dtype_names
from costlearn.core.problem import EPILOGUES, LAYOUTS, Problem, extent_of_text
from costlearn.families import FAMILIES, get_family
from costlearn.serve.tuning_db_server import has_password
from costlearn.serve.tuning_rows import is_server_url


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


def old_spelling(p, old: str, new: str, check=None) -> None:
    """Accept ``old`` for one release as a hidden spelling of ``new`` (same
    dest); ``check``: the new flag's type, or its choices."""
    dest = new.lstrip("-").replace("-", "_")
    p.add_argument(old, dest=dest, action=_OldSpelling, new=new, check=check, default=argparse.SUPPRESS)


def typed_flag(args, new: str) -> str:
    """The spelling of ``new`` the user typed (an old one, or ``new``)."""
    return next((old for old, n in getattr(args, "renamed_flags", None) or [] if n == new), new)


def renamed_notes(args) -> list:
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


positive_int = _number(int, 1, False, "an integer")


nonneg_int = _number(int, 0, False, "an integer")


positive_seconds = _number(float, 0, True, "a finite number of seconds")


positive_float = _number(float, 0, True, "a finite number")


_nonneg_float = _number(float, 0, False, "a finite number")


def _rse_target(text: str) -> float:
    """argparse type of --target-rse: a fraction in [0, 1)."""
    v = _nonneg_float(text)
    if v >= 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be a fraction in [0, 1) (0.01 is 1 %; 0: fixed rounds)")
    return v


def device_backend(name: str, family: str | None = None):
    """The backend ``--device`` names (``auto``: the first available that
    measures ``family``, :func:`costlearn.collect.backends.auto_order`)."""
    return get_backend(name, family=family or "gemm")


DATA_HELP = "a dataset root (one folder per device in it) or one device's dataset folder"
"""What --data is in every command (:func:`costlearn.collect.dataset.device_dataset_folder`)."""


def check_family_dtype(args) -> None:
    """Refuse a dtype the chosen family does not support before any device
    is opened or anything measured."""
    get_family(args.family).check_dtype(args.dtype)


def protocol_of(args):
    return Protocol(rounds=args.rounds, target_rse=args.target_rse, max_rounds=max(args.max_rounds, args.rounds),
                    distribution=args.distribution, density=args.density, seed=args.seed)


def _backend_choices() -> list[str]:
    return ["auto", *measuring_backends()]


def add_device_arg(p, what: str):
    p.add_argument("--device", default="auto", choices=_backend_choices(),
                   help=f"backend {what}; auto = CUDA if CuPy sees a GPU, else OpenCL (default: auto)")


def _dtype_support() -> str:
    return "; ".join(f"{n}: {', '.join(get_family(n).dtypes)}" for n in FAMILIES.names())


def add_dtypes_arg(p, default: str) -> None:
    """--dtype of a command that filters by it: one or more, the flag repeatable."""
    p.add_argument("--dtype", nargs="+", action="extend", default=None, choices=dtype_names(), metavar="DTYPE",
                   help=f"element types of A and B, one or more ({', '.join(dtype_names())}; the flag may be "
                   f"repeated) (default: {default})")


def add_problem_args(p, layout: bool = False, epilogue: bool = False):
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


def add_measure_args(p, data: str | None = "data", data_help: str | None = None):
    add_device_arg(p, "to measure on")
    p.add_argument("--data", default=data,
                   help=data_help or f"{DATA_HELP}: rows go to this device's folder (default: {data})")
    p.add_argument("--rounds", type=positive_int, default=5,
                   help="interleaved timing rounds every candidate gets (default: 5)")
    p.add_argument("--target-rse", type=_rse_target, default=0.01,
                   help="a candidate is timed in further rounds until the relative standard error of its median "
                   "is at most this, or --max-rounds is reached; 0: exactly --rounds (default: 0.01)")
    p.add_argument("--max-rounds", type=positive_int, default=30,
                   help="cap on a candidate's rounds (default: 30)")
    p.add_argument("--distribution", default="normal", choices=["normal", "uniform", "sparse"],
                   help="input value distribution (default: normal)")
    p.add_argument("--density", type=positive_float, default=1.0,
                   help="non-zero fraction for --distribution sparse (default: 1.0)")
    p.add_argument("--seed", type=nonneg_int, default=0, help="seed of pool, shapes and inputs (default: 0)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


SHAPE_SYNTAX = "M N K, MxNxK or M,N,K (e.g. 1 4096 4096, 1x4096x4096 or 1,4096,4096)"
"""How every command takes a shape."""


_INT = re.compile(r"[+-]?\d+")


_SHAPE = re.compile(r"[+-]?\d+[x,][+-]?\d+[x,][+-]?\d+")
"""A shape in one token, ``MxNxK`` or ``M,N,K`` (lower case)."""


def _shape_words(text: str) -> list:
    """The shape words of one token: a quoted ``"1 4096 4096"`` is three,
    ``1, 4096, 4096`` or ``1 x 4096 x 4096`` one (spaces around x or a comma
    dropped)."""
    return re.sub(r"\s*([xX,])\s*", r"\1", text).split() or [text]


def _shapes_file(text: str, only, why: str) -> list | None:
    """The shapes of the shapes file ``text`` names, None where ``text`` is
    a shape (or a try at one: digits, signs, x and commas only); a token
    that is neither names both."""
    if _INT.fullmatch(text) or _SHAPE.fullmatch(text.lower()):
        return None                              # a shape, whatever files the folder holds
    path = Path(text)
    if path.is_file():
        from costlearn.interop.inductor.lut_sources import read_shapes_file
        return [tuple(str(x) for x in lp.problem.shape) for lp in read_shapes_file(path, only=only, why=why)]
    if re.fullmatch(r"[\s\d+,xX-]*", text):
        return None                              # a malformed shape: the shape syntax says what is wrong
    what = "a folder, not a file" if path.is_dir() else "not a regular file" if path.exists() else "no such file"
    raise ValueError(f"shapes file {_shown(text)!r}: {what}"
                     + f"; give a shapes file ('M N K dtype [layout]' a line) or shapes: {SHAPE_SYNTAX}")


def parse_shapes(items, *, one: bool = False, files: bool = False, dtype: str | None = None,
                 layout: str = "NN") -> list:
    """Shapes from command-line tokens, the one syntax of every command: a
    token ``MxNxK`` or ``M,N,K`` is one shape; lone integers are taken three
    at a time (``1 4096 4096``, in one token or three); the forms may be mixed.

    With ``files``, a token that is not a shape and names an existing file
    is a shapes file (:func:`costlearn.interop.inductor.lut_sources.read_shapes_file`:
    ``M N K dtype [layout]`` a line, the format of ``export inductor-lut
    --shapes-file``): its shapes, in file order; with ``dtype``, every line
    must be of it and of ``layout`` (a collection measures one of each).

    Returns
    -------
    list of (int, int, int)
        Each checked as a :class:`~costlearn.core.problem.Problem`'s extents.

    Raises
    ------
    ValueError
        On a token that is none of these (with ``files``: no such file),
        integers not in threes, or (with ``one``) more than one shape; the
        message shows :data:`SHAPE_SYNTAX`.
    costlearn.interop.common.InteropError
        On a shapes file that cannot be read, or (``dtype``) a line of
        another dtype or layout, naming its line.
    """
    out, loose = [], []
    only = (dtype, layout) if dtype is not None else None
    why = f" (one collection measures one dtype, --dtype {dtype}, and layout {layout})"
    for item in items:
        text = str(item).strip()
        listed = _shapes_file(text, only, why) if files and not loose else None
        if listed is not None:
            out.extend(listed)
            continue
        for word in _shape_words(text):
            if _INT.fullmatch(word):
                loose.append(word)
                if len(loose) == 3:
                    out.append(tuple(loose))
                    loose = []
                continue
            if loose:
                raise ValueError(f"shape {' '.join(loose)} {_shown(word)}: give {SHAPE_SYNTAX}")
            parts = re.split(r"[x,]", word.lower())
            if len(parts) != 3 or not all(_INT.fullmatch(p) for p in parts):
                raise ValueError(f"shape {_shown(text)!r}: give {SHAPE_SYNTAX}")
            out.append(tuple(parts))
    if loose:
        given = " ".join(_shown(str(i)) for i in items)
        raise ValueError(f"shapes {given!r}: {len(loose)} number(s) left over after the shapes in threes "
                         f"({' '.join(map(_shown, loose))}); give {SHAPE_SYNTAX}")
    if not out:
        raise ValueError(f"no shape given; give {SHAPE_SYNTAX}")
    if one and len(out) > 1:
        raise ValueError(f"one shape wanted, got {len(out)}: {out}; give {SHAPE_SYNTAX}")
    return [_checked_shape(t) for t in (dict.fromkeys(out) if files else out)]


def _shown(text: str) -> str:
    """``text`` as a message shows it: a token of thousands of digits cut."""
    return text if len(text) <= 40 else f"{text[:20]}... ({len(text)} characters)"


def _checked_shape(t) -> tuple:
    """(M, N, K) of three integer texts, checked as a Problem's extents."""
    shown = "x".join(map(_shown, t))
    try:
        return Problem(*(extent_of_text(name, v) for name, v in zip("MNK", t))).shape
    except (TypeError, ValueError) as e:
        raise type(e)(f"shape {shown}: {e}") from None


def is_cpu(spec) -> bool:
    return spec.device_type == "cpu"


def pool_size(spec, pool: int | None) -> int:
    """``--pool``, else 48 configs on a CPU, 160 on a GPU."""
    return pool if pool is not None else (48 if is_cpu(spec) else 160)


def is_device_folder(folder) -> bool:
    """Whether ``folder`` is one device's dataset folder, not a root of them.

    Parameters
    ----------
    folder : path

    Returns
    -------
    bool
        True where it holds a ``device.json`` or dataset parts.
    """
    folder = Path(folder)
    return (folder / "device.json").is_file() or any(folder.glob("part-*.parquet"))


def device_folders(root) -> list:
    """The device dataset folders of a dataset root.

    Parameters
    ----------
    root : path

    Returns
    -------
    list of Path
        Its folders holding a ``device.json``, by name.
    """
    return sorted(p.parent for p in Path(root).glob("*/device.json"))


def dataset_folder(data: str, flag: str = "--data") -> Path:
    """A dataset folder; or, under a data root, its one device folder, else
    this machine's device's folder (error listing them otherwise)."""
    folder = Path(data)
    if not folder.is_dir():
        raise ValueError(f"{flag} {data}: " + ("a file, not a dataset folder" if folder.exists() else "no such folder")
                         + "; collect (`costlearn collect`) or import (`costlearn import`) first")
    if not is_device_folder(folder):
        subs = [p.name for p in device_folders(folder)]
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
    from costlearn.model.artifact import load
    from costlearn.model.artifact_layout import model_folder, models_root
    trained = load(model_folder(models_root(models_dir), model, family, dtype)).spec   # its sidecar's, not its folder's
    if local["slug"] != trained.slug:
        print(f"note: the {model} model was trained on another device than this machine's ({local['name']}, "
              f"{local['slug']}): its sidecar records {trained.name} ({trained.slug}); its times are that device's "
              "(collect and train here for this one's)", file=sys.stderr)
    elif isinstance(local.get("spec"), dict):
        try:
            spec = here if here is not None else DeviceSpec.from_dict(local["spec"])
        except (TypeError, ValueError):
            return model                   # a record of another costlearn version: nothing to compare
        diff = trained.differences(spec, settings=here is not None)
        if diff:
            print(f"note: the {model} model's device is of this machine's class but not the same device "
                  f"({'; '.join(diff)}: the model's value, then this machine's); its times may not be this "
                  "machine's (collect and train here, into other --data and --models folders, for this one's)",
                  file=sys.stderr)
    return model


def check_report_path(report) -> None:
    """Refuse a ``--report`` path that cannot be written as a file, before any work (:func:`check_output`)."""
    if report:
        check_output(report, "--report", example="report.md")


def models_out(models) -> Path:
    """The model store a command writes into (``--models``, else the default,
    :func:`costlearn.model.artifact.models_root`), refused before any work
    where it cannot be written (:func:`check_output`, naming ``--models`` or
    ``COSTLEARN_MODELS``)."""
    from costlearn.model.artifact import models_root
    given = "--models" if models else "COSTLEARN_MODELS=" if os.environ.get("COSTLEARN_MODELS") else "the model store"
    return check_output(models_root(models or None), given, folder=True)


def tuning_db_target(text: str) -> str:
    """argparse type of a tuning database on the command line: a path, or a
    ``postgresql://`` URL without a password (one there would be visible to
    every user of the machine in ``ps``)."""
    if is_server_url(text) and has_password(text):
        raise argparse.ArgumentTypeError(
            "the URL carries a password, which every user of this machine could read in `ps`: leave it out and "
            "give it in ~/.pgpass (or $PGPASSFILE), $PGPASSWORD, or the whole URL in $COSTLEARN_TUNING_DB")
    return text
