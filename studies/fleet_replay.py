"""A fleet that learns, replayed on recorded logs: does what its hosts measure
make the model better where its users compile?

    python -m studies.fleet_replay --train LOG[,LOG] --stream LOG[,LOG] --device PRESET
                                   --top-k K --retrain-every N [--work DIR] [--json FILE]
                                   [--train-share F] [--dtype DTYPE] [--report FILE] [--per-problem CSV]
                                   [--resume]
    python -m studies.fleet_replay --report-from JSON[,JSON] --report FILE

LOG: a PyTorch Inductor AutoHeuristic mm log (a text file), or
``ARCHIVE.zip:MEMBER`` for one inside a zip archive. The fleet starts from a
model trained (``costlearn.learn.train.train``, as ``costlearn train``) on the
``--train`` logs (with ``--train-share F``: the problems whose key hashes
below F, as ``studies.thin_data`` draws its thin splits). It then compiles the
``--stream`` logs' problems in order (each log's problems in the order they
first appear in it, the logs one after another), each answered twice:

- **pure**: ``Predictor.predict`` (``predict_best``'s answer, vendor floor
  included);
- **measured**: :class:`costlearn.serve.tuning.Tuner` with
  ``measure_top_k=K`` on a replay backend of the stream logs: the model's top
  K tile configs plus cuBLAS are timed (their times read from the log; a
  config the log never timed on the problem cannot be measured and is
  counted as ``unmeasurable``), recorded in a SQLite tuning database under
  ``--work``, and the database's verdict is the answer; a problem the
  database already holds measured is answered from it and spends nothing.

Every ``--retrain-every`` N problems the database's measurements are
imported into the training data (``costlearn.interop.import_tuning_db``, as
``costlearn import tuning-db``) and the model is retrained on all of it; the
next problems are answered by the new model.

Regret: the log's time of the answer over the best the log timed on the
problem (cuBLAS included), minus 1, a fraction (0.05 is 5 %); geometric mean
over the problems where it is defined (``pure`` leaves out answers the log
never timed, counted in ``unmeasured``; ``vendor`` leaves out problems
without a cuBLAS time). Printed per window (the problems between two
retrains, split where the stream passes from one log to the next) and over
the stream's second half; ``--json FILE`` writes the same figures:
``windows``, a list of {log, first, last, problems, pure, measured, vendor,
measurements, unmeasured, unmeasurable} (``first``/``last``: 1-based
positions in the stream; ``measurements``: configs timed),
``second_half``, the same fields over the stream's second half, and
``second_half_by_alignment``, the same fields over its problems whose M, N
and K are all multiples of 16 (``aligned``) and over the rest (``ragged``):
Triton specialises its kernels on integer arguments that are multiples of
16 (:func:`costlearn.families.triton_mm.compile.compile_for`, ``aligned``),
and a ragged problem's loads stay element-wise and unpipelined, so the two
kinds of problems differ in which tile wins, and a log says how much of a
figure each carries.

The logs have no licence: rows, models and the database stay under --work
(default ``out/fleet-replay/``; this run's folder there is emptied first).

A replay of the whole A100 random log takes hours. Each answer and each
retrain is appended to the run's journal (``answers.jsonl`` in its folder,
one JSON line each, written through with ``fsync``) as it happens;
``--resume`` goes on from the journal of a replay that was stopped (kill -9
included) instead of starting over, with the model, training data and
tuning database it left. The answers are those an unbroken replay gives:
the model a stopped replay left on disk is the one its next problem needs
(a retrain replaces the model whole before the problem after it is
answered, and the retrain a stop interrupted is redone), and a problem the
database holds that no journalled answer covers was measured by the answer
the stop interrupted, so its measurements count as spent. It goes on only
from a journal of the same flags and logs (by content), damaged at most in
its last line, and one replay runs in a folder at a time (a lock file
beside it in --work).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import time
import zipfile
from io import StringIO
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from costlearn.collect.backends.replay import ReplayBackend
from costlearn.collect.dataset import current_rows, load, valid_rows
from costlearn.core.device import preset
from costlearn.core.files import atomic_write
from costlearn.core.locks import FolderBusy, FolderLock
from costlearn.core.problem import Problem
from costlearn.families import VENDOR_CONFIG_ID
from costlearn.interop import import_file, import_tuning_db
from costlearn.learn.metrics import geomean_regret
from costlearn.learn.train import train
from costlearn.model import artifact_layout
from costlearn.serve.predictor import Predictor
from costlearn.serve.tuning import Tuner
from costlearn.serve.tuning_db import TuningDB

ROOT = Path(__file__).resolve().parents[1]
KEY_COLUMNS = "m k n mat1_dtype mat2_dtype mat1_stride_0 mat1_stride_1 mat2_stride_0 mat2_stride_1 using_tf32".split()
"""A log row's problem key, as ``studies.thin_data`` hashes it to draw a share."""
PROBLEM = ["m", "n", "k", "dtype", "layout", "epilogue"]
FIELDS = ("log", "first", "last", "problems", "pure", "measured", "vendor", "measurements", "unmeasured",
          "unmeasurable")
LEASE_HOLDER = "studies.fleet_replay"
"""The name the replay's tuner takes the tuning database's leases in, the same in every process: the database is
the replay's own, so a replay that goes on (``--resume``) takes over the lease its stopped process held on the problem
it was measuring, instead of waiting it out (:data:`costlearn.serve.fleet.LEASE_S`) as a fleet's other host must."""
SETTINGS = ("device", "top_k", "retrain_every", "train_share", "dtype")
"""The flags that make a replay, with its logs (by name and content, :func:`settings`): ``--resume`` goes on only
from a journal of the same."""


def log_text(spec: str) -> tuple[str, str]:
    """(name, text) of a LOG argument: a file, or ``ARCHIVE.zip:MEMBER``."""
    if ".zip:" in spec:
        archive, member = spec.split(".zip:", 1)
        with zipfile.ZipFile(archive + ".zip") as z:
            name = next((n for n in z.namelist() if n == member or n.endswith("/" + member)), None)
            if name is None:
                raise SystemExit(f"{spec}: no member {member!r} in {archive}.zip (it has {z.namelist()})")
            return Path(name).name, z.read(name).decode()
    path = Path(spec)
    if not path.is_file():
        raise SystemExit(f"{spec}: no such log file")
    return path.name, path.read_text()


def share_of(text: str, share: float) -> str:
    """The log's header lines and the rows whose key (:data:`KEY_COLUMNS`
    joined with ``|``) gives ``int(sha256, 16) % 1000 < 1000 * share``."""
    if share >= 1:
        return text
    lines = text.splitlines()
    df = pd.read_csv(StringIO("\n".join(lines[1:])))
    key = df[KEY_COLUMNS].astype(str).agg("|".join, axis=1)
    keep = key.map(lambda s: int(hashlib.sha256(s.encode()).hexdigest(), 16) % 1000 < 1000 * share).to_numpy()
    return "\n".join(lines[:2] + [ln for ln, k in zip(lines[2:], keep) if k]) + "\n"


def imported(folder: Path, logs: list, device: str, share: float = 1.0) -> Path:
    """Import ``logs`` ((name, text) pairs) into ``folder/data``; its device folder."""
    for name, text in logs:
        path = folder / "raw" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(share_of(text, share))
        import_file("inductor", path, device=device, data_root=folder / "data")
    return folder / "data" / preset(device).slug


@dataclass
class Answered:
    """One stream problem's outcome."""

    log: str
    problem: Problem
    pure_config: str
    pure_chosen_by: str
    pure: float                 # regret; NaN: the answer was never timed on it
    measured: float
    vendor: float               # NaN: no cuBLAS time
    measurements: int
    unmeasurable: int

    def record(self, position: int) -> dict:
        """The answer as a journal or per-problem row (``position``: 1-based, in the stream)."""
        p = self.problem
        return dict(position=position, log=self.log, m=p.m, n=p.n, k=p.k, dtype=p.dtype, layout=p.layout,
                    epilogue=p.epilogue, pure_config=self.pure_config, pure_chosen_by=self.pure_chosen_by,
                    pure=self.pure, measured=self.measured, vendor=self.vendor, measurements=self.measurements,
                    unmeasurable=self.unmeasurable)

    @classmethod
    def from_record(cls, r: dict) -> "Answered":
        """The answer of a :meth:`record`."""
        problem = Problem(int(r["m"]), int(r["n"]), int(r["k"]), r["dtype"], r["layout"], r["epilogue"])
        return cls(r["log"], problem, r["pure_config"], r["pure_chosen_by"], float(r["pure"]), float(r["measured"]),
                   float(r["vendor"]), int(r["measurements"]), int(r["unmeasurable"]))


class Journal:
    """A replay's answers and retrains as they happen, one JSON line each in
    ``answers.jsonl``, each written through (``fsync``) before the replay
    goes on; the settings it was made with in ``run.json``."""

    def __init__(self, folder: Path):
        self.path, self.settings_path = folder / "answers.jsonl", folder / "run.json"

    def start(self, settings: dict) -> None:
        """Begin an empty journal of a replay with ``settings`` (the journal
        first: a folder whose settings read has its journal)."""
        self.path.write_text("")
        atomic_write(self.settings_path, json.dumps(settings, sort_keys=True).encode())

    def settings(self):
        """The settings the journal was begun with; None where it has none readable."""
        try:
            return json.loads(self.settings_path.read_text())
        except (OSError, ValueError):
            return None

    def read(self) -> tuple[list, dict]:
        """The journalled answers in stream order and the retrains ({position
        before which it retrained: seconds}); none without a journal. A last line without its newline
        (a write the stop cut short) is cut off the file; any other line that
        does not read is damage no resume can go on from.

        Raises
        ------
        SystemExit
            Naming the first damaged line (the journal is left as it is), or a journal that cannot be read.
        """
        answered, retrains = [], {}
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return answered, retrains
        except OSError as e:
            raise SystemExit(f"--resume: the journal {self.path} cannot be read ({e}); run without --resume to start "
                             "the replay over") from None
        *lines, torn = data.split(b"\n")
        for i, line in enumerate(lines, 1):
            try:
                r = json.loads(line)
                if "retrained_before" in r:
                    retrains[int(r["retrained_before"])] = float(r["s"])
                elif int(r["position"]) == len(answered) + 1:
                    answered.append(Answered.from_record(r))
                else:
                    raise ValueError(f"answer {r['position']} after {len(answered)}")
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                raise SystemExit(f"--resume: {self.path} line {i} is damaged ({type(e).__name__}: {str(e)[:100]}); "
                                 "run without --resume to start the replay over") from None
        if torn:
            with open(self.path, "r+b") as f:
                f.truncate(len(data) - len(torn))
        return answered, retrains

    def add(self, record: dict) -> None:
        """Append ``record`` and write it through."""
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())


@dataclass
class Fleet:
    """The replayed fleet: its training data, model, tuning database and
    replay backend."""

    data: Path
    models: Path
    device: str
    dtype: str
    family: str
    db: TuningDB
    backend: ReplayBackend
    top_k: int
    predictor: Predictor = None
    tuner: Tuner = None
    answered_problems: set = field(default_factory=set)

    def retrain(self) -> float:
        """Import the database's measurements (after the first time) and
        train; the seconds it took."""
        t0 = time.perf_counter()
        if self.predictor is not None:
            import_tuning_db(self.db.path, device_class=preset(self.device).slug, data_root=self.data.parent)
        train(self.data, self.models, family=self.family, dtype=self.dtype)
        self.load()
        return time.perf_counter() - t0

    def load(self) -> None:
        """Answer with the model on disk."""
        self.predictor = Predictor(artifact_layout.model_folder(self.models, preset(self.device).slug, self.family,
                                                                self.dtype))
        self.tuner = Tuner(self.predictor, self.db, self.backend)
        self.tuner.holder = LEASE_HOLDER

    def answer(self, problem: Problem, times: dict, log: str) -> Answered:
        """Both answers for ``problem`` and their regrets against the log's
        ``times`` (config id -> microseconds)."""
        best = min(times.values())
        answer = self.predictor.predict(problem, top_k=1)
        pure = answer.config.config_id
        got = self.tuner.tune(problem, top_k=self.top_k + 1, measure_top_k=self.top_k)
        # Measured for an earlier problem: answered from the database, nothing spent. One the database holds that
        # no answer covered was measured by the answer a stop interrupted (see --resume): those were spent.
        held = got.from_tuning_db and problem in self.answered_problems
        self.answered_problems.add(problem)
        asked = self.top_k + (self.predictor.vendor_index is not None)
        spent = 0 if held else len(got.measured_us)
        vendor = times.get(VENDOR_CONFIG_ID, np.nan)
        return Answered(log, problem, pure, answer.chosen_by, times.get(pure, np.nan) / best - 1,
                        times[got.config.config_id] / best - 1, vendor / best - 1, spent, 0 if held else asked - spent)


def stream_problems(folder: Path, logs: list, device: str, dtype: str) -> tuple[list, pd.DataFrame]:
    """The stream's problems in order, ``[(log name, Problem, {config id:
    time_us})]``, and every valid row of its logs (the replay's recording)."""
    out, frames = [], []
    for i, (name, text) in enumerate(logs):
        dev = imported(folder / f"log{i}", [(name, text)], device)
        rows = valid_rows(current_rows(load(dev)[0])[0])
        rows = rows[rows["dtype"].astype(str) == dtype]
        frames.append(rows)
        first = rows.groupby(PROBLEM, observed=True, sort=False)["source_line"].min().sort_values()
        med = rows.groupby(PROBLEM + ["config_id"], observed=True)["time_us"].median()
        times: dict = {}
        for (m, n, k, dt, lay, epi, cid), t in med.items():
            times.setdefault((int(m), int(n), int(k), str(dt), str(lay), str(epi)), {})[str(cid)] = float(t)
        for key in first.index:
            key = (int(key[0]), int(key[1]), int(key[2]), str(key[3]), str(key[4]), str(key[5]))
            out.append((name, Problem(*key), times[key]))
    return out, pd.concat(frames, ignore_index=True)


def summary(rows: list, log: str, first: int, last: int) -> dict:
    """The figures of the answered problems ``rows`` (positions first..last)."""
    def g(xs):
        v = geomean_regret([x for x in xs if np.isfinite(x)])
        return None if np.isnan(v) else round(v, 6)
    return dict(log=log, first=first, last=last, problems=len(rows), pure=g(r.pure for r in rows),
                measured=g(r.measured for r in rows), vendor=g(r.vendor for r in rows),
                measurements=sum(r.measurements for r in rows),
                unmeasured=sum(not np.isfinite(r.pure) for r in rows),
                unmeasurable=sum(r.unmeasurable for r in rows))


def aligned(problem: Problem) -> bool:
    """Whether M, N and K are all multiples of 16: what Triton's launch-time
    specialisation needs to vectorise and pipeline a matmul's loads
    (:func:`costlearn.families.triton_mm.compile.compile_for`)."""
    return problem.m % 16 == 0 and problem.n % 16 == 0 and problem.k % 16 == 0


def by_alignment(rows: list, log: str, first: int, last: int) -> dict:
    """:func:`summary` of the ``aligned`` and the ``ragged`` problems of ``rows`` (:func:`aligned`)."""
    return {kind: summary([r for r in rows if aligned(r.problem) == want], log, first, last)
            for kind, want in (("aligned", True), ("ragged", False))}


def windows(answered: list, every: int) -> list:
    """:func:`summary` per retrain window, split where the log changes."""
    out, start = [], 0
    for i in range(1, len(answered) + 1):
        if i == len(answered) or i % every == 0 or answered[i].log != answered[start].log:
            out.append(summary(answered[start:i], answered[start].log, start + 1, i))
            start = i
    return out


def settings(args, train_logs: list, stream_logs: list) -> dict:
    """What makes a replay: the flags of :data:`SETTINGS` and each log's name
    and the sha256 of its text (a log changed under the same path is another
    replay; the same log by another path is not)."""
    def logs(pairs):
        return [[name, hashlib.sha256(text.encode()).hexdigest()] for name, text in pairs]
    return dict({f: getattr(args, f) for f in SETTINGS}, train=logs(train_logs), stream=logs(stream_logs))


def run(args) -> dict:
    """Replay the fleet of ``args`` (from its journal with ``args.resume``),
    one process at a time in its folder; the figures."""
    work = args.work / "-".join([args.dtype, f"share{args.train_share:g}", f"k{args.top_k}",
                                 f"n{args.retrain_every}"])
    try:
        lock = FolderLock(args.work, "a fleet replay", name=f".{work.name}.lock")
    except FolderBusy as e:
        raise SystemExit(f"{work}: {e}") from None
    with lock:
        return replay(args, work)


def replay(args, work: Path) -> dict:
    """:func:`run`'s replay, its lock held."""
    device = preset(args.device)
    train_logs = [log_text(s) for s in args.train.split(",") if s]
    stream_logs = [log_text(s) for s in args.stream.split(",") if s]
    journal, made_of = Journal(work), settings(args, train_logs, stream_logs)
    answered, retrains = [], {}
    if args.resume and journal.settings() is not None:
        if journal.settings() != made_of:
            raise SystemExit(f"--resume: {work} holds a replay of other settings ({journal.settings()}); this one is "
                             f"{made_of}. Run without --resume to start this one over there.")
        answered, retrains = journal.read()
    if not answered:                                # nothing to go on from: start over
        if args.resume:
            print(f"--resume: {work} holds no answer of this replay; starting it", file=sys.stderr)
        if work.exists():
            shutil.rmtree(work)
        work.mkdir(parents=True)
        journal.start(made_of)
    data = (imported(work / "train", train_logs, args.device, args.train_share) if not answered
            else work / "train" / "data" / device.slug)
    problems, recording = stream_problems(work / "stream", stream_logs, args.device, args.dtype)
    if not problems:
        raise SystemExit(f"the stream holds no {args.dtype} problem")
    if [(a.log, a.problem) for a in answered] != [(log, p) for log, p, _ in problems[:len(answered)]]:
        raise SystemExit(f"--resume: the journal's answers in {work} are not the stream's first {len(answered)} "
                         f"problems; run without --resume to start over")
    family = str(recording["family"].iloc[0])
    fleet = Fleet(data, work / "models", args.device, args.dtype, family,
                  TuningDB(work / "tuning.db", create=True), ReplayBackend(recording, device), args.top_k,
                  answered_problems={a.problem for a in answered})
    if answered:
        fleet.load()            # the model the last answer was given with: a retrain is journalled after it
        print(f"--resume: {len(answered)} of {len(problems)} problems answered before", file=sys.stderr)
    else:
        retrains[0] = fleet.retrain()
        journal.add(dict(retrained_before=0, s=retrains[0]))
    t0 = time.perf_counter()
    for i in range(len(answered), len(problems)):
        log, problem, times = problems[i]
        if i and i % args.retrain_every == 0 and i not in retrains:
            retrains[i] = fleet.retrain()
            journal.add(dict(retrained_before=i, s=retrains[i]))
        answered.append(fleet.answer(problem, times, log))
        journal.add(answered[-1].record(i + 1))
        if (i + 1) % 100 == 0:
            print(f"{i + 1}/{len(problems)} problems, {time.perf_counter() - t0:.0f} s", file=sys.stderr,
                  flush=True)
    if args.per_problem is not None:
        args.per_problem.parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame([a.record(i + 1) for i, a in enumerate(answered)]).drop(
            columns=["dtype", "epilogue"]).to_csv(args.per_problem, index=False)
    half = len(answered) // 2
    second = answered[half:]
    return dict(train=[n for n, _ in train_logs], train_share=args.train_share, stream=[n for n, _ in stream_logs],
                device=device.slug, dtype=args.dtype, top_k=args.top_k, retrain_every=args.retrain_every,
                retrains=len(retrains) - 1, train_s=[round(retrains[i], 1) for i in sorted(retrains)],
                windows=windows(answered, args.retrain_every),
                second_half=summary(second, ",".join(dict.fromkeys(r.log for r in second)), half + 1,
                                    len(answered)),
                second_half_by_alignment=by_alignment(second, ",".join(dict.fromkeys(r.log for r in second)),
                                                      half + 1, len(answered)),
                whole=summary(answered, ",".join(n for n, _ in stream_logs), 1, len(answered)))


def pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.2f}%"


def table(res: dict) -> str:
    """The figures as Markdown."""
    head = ("| log | problems | first-last | pure prediction | measured top-k + cuBLAS | cuBLAS alone | measurements "
            "| pure never timed | unmeasurable |\n|---|---|---|---|---|---|---|---|---|")
    lines = [f"#### Train {'+'.join(res['train'])} at {res['train_share']:g}, stream {' then '.join(res['stream'])}, "
             f"{res['dtype']}, K = {res['top_k']}, retrain every {res['retrain_every']} ({res['retrains']} retrains)",
             "", head]
    split = res.get("second_half_by_alignment", {})        # (a replay's figures from before the split: none)
    parts = [dict(split[kind], log=f"second half, {words}") for kind, words in
             (("aligned", "M, N, K multiples of 16"), ("ragged", "the rest")) if kind in split]
    for w in res["windows"] + [dict(res["second_half"], log="second half"), *parts,
                               dict(res["whole"], log="whole stream")]:
        lines.append(f"| {w['log']} | {w['problems']} | {w['first']}-{w['last']} | {pct(w['pure'])} | "
                     f"{pct(w['measured'])} | {pct(w['vendor'])} | {w['measurements']} | {w['unmeasured']} | "
                     f"{w['unmeasurable']} |")
    return "\n".join(lines)


def split_words(res: dict) -> str:
    """The second half's pure regret of the aligned and the ragged problems, with their counts ("-" for a
    replay's figures from before the split)."""
    split = res.get("second_half_by_alignment")
    if not split:
        return "-"
    return " / ".join(f"{pct(split[kind]['pure'])} ({split[kind]['problems']})" for kind in ("aligned", "ragged"))


def report(results: list) -> str:
    """The report of several replays (their JSON figures): a summary of each one's second half, then its table."""
    lines = ["# A fleet that learns, replayed on recorded logs", "",
             "Written by `python -m studies.fleet_replay --report-from JSON,... --report FILE` from the replays' "
             "`--json` figures. Regret: the log's time of the answer over the best it timed on the problem "
             "(cuBLAS included) - 1, geometric mean; pure: `predict_best`'s answer; measured: the tuning "
             "database's verdict on the model's top K tile configs and cuBLAS, timed from the log. The last column "
             "splits the second half's pure prediction by whether M, N and K are all multiples of 16 (Triton "
             "specialises its kernels on that), with the problems of each; '-': figures written before the split.",
             "",
             "| train | K | retrain every | retrains | second half: pure prediction | measured top-k + cuBLAS | "
             "cuBLAS alone | measurements per problem | windows where measured > cuBLAS | pure prediction: M, N, K "
             "multiples of 16 / the rest |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        h = r["second_half"]
        worse = sum(w["measured"] is not None and w["vendor"] is not None and w["measured"] > w["vendor"]
                    for w in r["windows"])
        lines.append(f"| {'+'.join(r['train'])} at {r['train_share']:g} | {r['top_k']} | "
                     f"{r['retrain_every'] if r['retrains'] else 'never'} | "
                     f"{r['retrains']} | {pct(h['pure'])} | {pct(h['measured'])} | {pct(h['vendor'])} | "
                     f"{h['measurements'] / max(h['problems'], 1):.2f} | {worse} of {len(r['windows'])} | "
                     f"{split_words(r)} |")
    for r in results:
        lines += ["", table(r)]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {__spec__.name}", description=__doc__.split("\n\n")[0])
    ap.add_argument("--train", metavar="LOG[,LOG]", help="the logs the fleet's first model learns")
    ap.add_argument("--stream", metavar="LOG[,LOG]", help="the logs whose problems it compiles")
    ap.add_argument("--device", metavar="PRESET", help="the logs' device (a costlearn preset)")
    ap.add_argument("--top-k", type=int, metavar="K", help="tile configs measured per problem")
    ap.add_argument("--retrain-every", type=int, metavar="N", help="problems between retrains")
    ap.add_argument("--work", type=Path, default=ROOT / "out" / "fleet-replay")
    ap.add_argument("--json", type=Path, default=None, metavar="FILE")
    ap.add_argument("--train-share", type=float, default=1.0, metavar="F",
                    help="train on this share of the --train logs' problems (default 1)")
    ap.add_argument("--dtype", default="float16", help="the dtype replayed (default float16)")
    ap.add_argument("--report", type=Path, default=None, metavar="FILE",
                    help="append the replay's table to FILE (with --report-from: write the report there)")
    ap.add_argument("--report-from", default=None, metavar="JSON[,JSON]",
                    help="replay nothing: write --report from these replays' --json figures")
    ap.add_argument("--per-problem", type=Path, default=None, metavar="CSV",
                    help="write each stream problem's answers and regrets")
    ap.add_argument("--resume", action="store_true",
                    help="go on from the journal a stopped replay of the same flags left in --work")
    args = ap.parse_args(argv)
    if args.report_from is not None:
        if args.report is None:
            ap.error("--report-from needs --report FILE")
        args.report.write_text(report([json.loads(Path(f).read_text()) for f in args.report_from.split(",") if f]))
        return 0
    missing = [f for f in ("train", "stream", "device", "top_k", "retrain_every") if getattr(args, f) is None]
    if missing:
        ap.error("the replay needs " + ", ".join("--" + f.replace("_", "-") for f in missing))
    if args.top_k < 1 or args.retrain_every < 1 or not 0 < args.train_share <= 1:
        ap.error("--top-k and --retrain-every must be >= 1, --train-share in (0, 1]")
    res = run(args)
    text = table(res)
    print(text)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(res, indent=1))
    if args.report is not None:
        with open(args.report, "a") as f:
            f.write(text + "\n\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
