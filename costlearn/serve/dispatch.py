"""Runtime dispatch: a few configs that together cover a range of shapes, and a
small selector that picks among them from the actual extents at launch (for
kernels compiled before the shape is known).

1. Shapes are drawn log-uniformly in the given ranges and every candidate is
   ranked by the model (its ranker, no cascade), among the candidates
   measured near the shape (:meth:`~costlearn.serve.predictor.Predictor.candidate_mask`);
   where the model's vendor floor keeps the vendor library for a shape
   (:mod:`costlearn.learn.holdout`), the library counts as that shape's best.
2. The subset of at most ``max_configs`` candidates with the least predicted
   regret is chosen exhaustively: regret of a shape = (fastest predicted
   time within the subset, among members whose block tile fits the shape) /
   (fastest predicted over all candidates) - 1; the objective is the
   geometric mean of 1 + regret over the shapes (so one bad shape cannot hide
   behind many good ones, nor dominate).
3. The selector is a depth-limited decision tree (scikit-learn) on the raw
   extents (M, N, K), trained to name the subset's best member per shape;
   its integer thresholds are exact for integer extents. At launch, if the
   named member's block tile exceeds the problem (rule
   ``block_tile_exceeds_problem`` of :mod:`costlearn.collect.space`, with the
   family's minimum tile caps) the first member that fits, smallest block tile first,
   runs instead.
4. It is emitted as a Python module and a C header with the same logic;
   members are named by config id, block tile and (in Python) the family's
   parameters.

:func:`evaluate_dispatch` scores a selector on measured rows (fresh shapes):
its measured regret against the per-shape best, next to the model's own
per-shape choice.
"""
from __future__ import annotations

import itertools
import json
import keyword
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from costlearn.families import family_of
from costlearn.collect.space import tile_fits_problem
from costlearn.core.checks import check_int, shown

__all__ = ["Dispatch", "fit_dispatch", "evaluate_dispatch", "parse_range", "range_shapes", "check_name",
           "MAX_CONFIGS"]

MAX_CONFIGS = 4


def parse_range(text: str, name: str) -> tuple[int, int]:
    """``"LO:HI"`` (inclusive, 1 <= LO <= HI < 2**31) or ``"V"`` to (lo, hi).

    Raises
    ------
    ValueError
        If the text is not of that form (the message names ``name``).
    """
    got = re.fullmatch(r"([0-9]{1,10})(?::([0-9]{1,10}))?", str(text))     # ASCII digits: no Unicode ones
    lo, hi = (int(got.group(1)), int(got.group(2) or got.group(1))) if got else (0, -1)
    if not 1 <= lo <= hi < 2**31:
        raise ValueError(f"{name} range {shown(text)}; expected LO:HI with 1 <= LO <= HI < 2**31 (e.g. 1:4096), "
                         "or a single extent")
    return lo, hi


@dataclass
class Dispatch:
    """A fitted selector.

    Attributes
    ----------
    configs : list of configs (one family)
        The members, fallback order (smallest block tile first).
    tree : dict
        The decision tree: ``feature`` (0 M, 1 N, 2 K; -1 at a leaf),
        ``threshold`` (int: go left when extent <= threshold), ``left``,
        ``right``, ``member`` (index into ``configs`` at a leaf), as lists.
    ranges : dict of str to (int, int)
    min_tile_caps : (int, int, int)
        The family's minimum tile caps on the model's device (the problem rule).
    predicted : dict
        Predicted regret over the sampled shapes: ``subset_geomean`` (best
        member per shape), ``selector_geomean``/``selector_mean``/
        ``selector_max`` (the selector's pick with the fallback), ``shapes``.
    source : str
        Model the selector was fitted with.
    single_best : config or None
        The one candidate with the least predicted regret over the sampled
        shapes among those that fit all of them (what a kernel compiled once,
        without dispatch, would use); None if no candidate fits all.
    epilogue : str
        What every member fuses after A @ B (:data:`costlearn.core.problem.EPILOGUES`);
        the selector was fitted on problems with it.
    """

    configs: list
    tree: dict
    ranges: dict
    min_tile_caps: tuple
    predicted: dict = field(default_factory=dict)
    source: str = ""
    single_best: object = None
    epilogue: str = "none"

    def __post_init__(self) -> None:
        self._tiles = [family_of(c).block_tile(c) for c in self.configs]

    def block_tiles(self) -> list[tuple[int, int, int]]:
        """(BM, BN, BK) of each member (the family's tile description)."""
        return list(self._tiles)

    def _fits(self, i: int, m: int, n: int, k: int) -> bool:
        return bool(tile_fits_problem(*self._tiles[i], int(m), int(n), int(k), self.min_tile_caps))

    def select(self, m: int, n: int, k: int):
        """The member the selector launches for extents (m, n, k)."""
        return self.configs[self.select_index(m, n, k)]

    def select_index(self, m: int, n: int, k: int) -> int:
        """Index into :attr:`configs` of the member launched for extents
        (m, n, k): the tree's pick if its block tile fits, else the first
        member that fits, else the tree's pick (what the emitted selectors
        do)."""
        t, node, ext = self.tree, 0, (m, n, k)
        while t["feature"][node] >= 0:
            node = t["left"][node] if ext[t["feature"][node]] <= t["threshold"][node] else t["right"][node]
        i = t["member"][node]
        if self._fits(i, m, n, k):
            return i
        return next((j for j in range(len(self.configs)) if self._fits(j, m, n, k)), i)

    def to_dict(self) -> dict:
        """The JSON-ready selector (``dispatch.json``): family, config ids,
        decision tree, ranges, ``floors`` (the minimum tile caps; the key
        kept for readers of older files), predicted regrets, source model,
        epilogue."""
        return dict(family=family_of(self.configs[0]).name, configs=[c.config_id for c in self.configs],
                    tree=self.tree, ranges=self.ranges, floors=list(self.min_tile_caps), predicted=self.predicted,
                    source=self.source,
                    single_best=self.single_best.config_id if self.single_best is not None else None,
                    epilogue=self.epilogue)

    # -- emitters ------------------------------------------------------------

    def _tree_lines(self, leaf: str, test: str, orelse: str, close: str | None) -> list[str]:
        """The tree as nested if/else lines (indented from one level), from
        format strings for a leaf (``{member}``), a test (``{feature}``,
        ``{threshold}``), the else line and the closing line (None: none)."""
        t, out = self.tree, []

        def emit(node: int, depth: int) -> None:
            pad = "    " * depth
            if t["feature"][node] < 0:
                out.append(pad + leaf.format(member=t["member"][node]))
                return
            out.append(pad + test.format(feature=t["feature"][node], threshold=t["threshold"][node]))
            emit(t["left"][node], depth + 1)
            out.append(pad + orelse.format())
            emit(t["right"][node], depth + 1)
            if close is not None:
                out.append(pad + close.format())

        emit(0, 1)
        return out

    def _fused(self) -> str:
        """The emitters' note of the epilogue ("" for none)."""
        return "" if self.epilogue == "none" else f"; kernels fusing the epilogue {self.epilogue}"

    def python_source(self, name: str = "select_tile") -> str:
        """A self-contained Python module: ``CONFIGS`` and ``{name}(m, n, k)``
        returning the index into ``CONFIGS``."""
        min_cap_m, min_cap_n, min_cap_k = self.min_tile_caps
        lines = [f'"""Tile selector generated by `costlearn dispatch` from {self.source}.',
                 f"Ranges: M {self.ranges['M']}, N {self.ranges['N']}, K {self.ranges['K']}{self._fused()}. "
                 "Predicted regret "
                 f"(geomean) {self.predicted.get('selector_geomean', float('nan')):.1%}.", '"""', "",
                 "CONFIGS = ["]
        for c, (bm, bn, bk) in zip(self.configs, self.block_tiles()):
            params = ", ".join(f"{k}={v!r}" for k, v in c.to_dict().items()
                               if k not in ("block_m", "block_n", "block_k"))
            lines.append(f"    dict(config_id={c.config_id!r}, block_m={bm}, block_n={bn}, block_k={bk}"
                         + (f", {params}" if params else "") + "),")
        lines += ["]", "", "",
                  "def _next_pow2(x):", "    return 1 << (x - 1).bit_length()", "", "",
                  "def _fits(c, m, n, k):",
                  "    # costlearn.collect.space rule block_tile_exceeds_problem",
                  f"    return (c['block_m'] <= max(_next_pow2(m), {min_cap_m}) "
                  f"and c['block_n'] <= max(_next_pow2(n), {min_cap_n})",
                  f"            and c['block_k'] <= max(_next_pow2(k), {min_cap_k}))", "", "",
                  f"def {name}(m, n, k):",
                  '    """Index into CONFIGS of the config to launch for C[m,n] = A[m,k] @ B[k,n]."""',
                  "    ext = (m, n, k)"]
        lines += self._tree_lines("i = {member}", "if ext[{feature}] <= {threshold}:", "else:", None)
        lines += ["    if _fits(CONFIGS[i], m, n, k):", "        return i",
                  "    for j, c in enumerate(CONFIGS):       # smallest block tile first",
                  "        if _fits(c, m, n, k):", "            return j",
                  "    return i    # no member fits (outside the ranges): correct, but slower", ""]
        return "\n".join(lines)

    def c_header(self, name: str = "select_tile") -> str:
        """A self-contained C header: ``{name}_configs[]`` and
        ``static inline int {name}(long long m, long long n, long long k)``."""
        min_cap_m, min_cap_n, min_cap_k = self.min_tile_caps
        guard = f"COSTLEARN_{name.upper()}_H"
        lines = [f"/* Tile selector generated by `costlearn dispatch` from {self.source}.",
                 f" * Ranges: M {self.ranges['M']}, N {self.ranges['N']}, K {self.ranges['K']}{self._fused()}. */",
                 f"#ifndef {guard}", f"#define {guard}", "",
                 f"/* Members by config id (the {family_of(self.configs[0]).name} family's readable id) "
                 "and block tile. */",
                 f"typedef struct {{ int block_m, block_n, block_k; const char *config_id; }} {name}_config;", "",
                 f"static const {name}_config {name}_configs[{len(self.configs)}] = {{"]
        for c, (bm, bn, bk) in zip(self.configs, self.block_tiles()):
            lines.append(f'    {{{bm}, {bn}, {bk}, "{c.config_id}"}},')
        lines += ["};", "",
                  f"static inline long long {name}_next_pow2(long long x) {{ long long p = 1; while (p < x) p <<= 1; "
                  "return p; }", "",
                  "/* costlearn.collect.space rule block_tile_exceeds_problem */",
                  f"static inline int {name}_fits(const {name}_config *c, long long m, long long n, long long k) {{",
                  f"    long long cap_m = {name}_next_pow2(m), cap_n = {name}_next_pow2(n), "
                  f"cap_k = {name}_next_pow2(k);",
                  f"    if (cap_m < {min_cap_m}) cap_m = {min_cap_m};",
                  f"    if (cap_n < {min_cap_n}) cap_n = {min_cap_n};",
                  f"    if (cap_k < {min_cap_k}) cap_k = {min_cap_k};",
                  "    return c->block_m <= cap_m && c->block_n <= cap_n && c->block_k <= cap_k;",
                  "}", "",
                  "/* Index into the configs of the config to launch for C[m,n] = A[m,k] @ B[k,n]. C99. */",
                  f"static inline int {name}(long long m, long long n, long long k) {{",
                  "    const long long ext[3] = {m, n, k};", "    int i;"]
        lines += self._tree_lines("i = {member};", "if (ext[{feature}] <= {threshold}LL) {{", "}} else {{", "}}")
        lines += [f"    if ({name}_fits(&{name}_configs[i], m, n, k)) return i;",
                  f"    for (int j = 0; j < {len(self.configs)}; ++j)  /* smallest block tile first */",
                  f"        if ({name}_fits(&{name}_configs[j], m, n, k)) return j;",
                  "    return i;  /* no member fits (outside the ranges): correct, but slower */", "}", "",
                  f"#endif  /* {guard} */", ""]
        return "\n".join(lines)

    def write(self, folder, name: str = "select_tile") -> list[Path]:
        """Write ``{name}.py``, ``{name}.h`` and ``dispatch.json`` into
        ``folder`` (created).

        Raises
        ------
        ValueError
            If ``name`` is not an identifier valid in both Python and C (and
            no keyword of either).
        """
        check_name(name)
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        out = [folder / f"{name}.py", folder / f"{name}.h", folder / "dispatch.json"]
        out[0].write_text(self.python_source(name))
        out[1].write_text(self.c_header(name))
        out[2].write_text(json.dumps(self.to_dict(), indent=1))
        return out


_C_KEYWORDS = frozenset(
    "auto break case char const continue default do double else enum extern float for goto if inline int long "
    "register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while "
    "_Bool _Complex _Imaginary bool true false".split())


def check_name(name) -> str:
    """A selector name: an ASCII identifier valid in Python and C, not a
    keyword of either.

    Raises
    ------
    ValueError
        Naming the value and the rule.
    """
    if not isinstance(name, str) or not name.isascii() or not name.isidentifier() or keyword.iskeyword(name) \
            or name in _C_KEYWORDS:
        raise ValueError(f"name={shown(name)}; must be an ASCII identifier valid in Python and C (letters, digits, _; "
                         "not starting with a digit; not a keyword), e.g. select_tile")
    return name


def range_shapes(ranges: dict, n: int, seed: int, corners: bool = True) -> list[tuple[int, int, int]]:
    """Distinct shapes drawn log-uniformly in ``ranges`` (inclusive, seeded),
    after the 8 corners of the ranges when ``corners``; ``n`` at most."""
    rng = np.random.default_rng([seed, 21])
    lo = np.log([ranges[d][0] for d in "MNK"])
    hi = np.log([ranges[d][1] + 0.499 for d in "MNK"])
    a = np.clip(np.round(np.exp(rng.uniform(lo, hi, size=(n, 3)))).astype(np.int64),
                [ranges[d][0] for d in "MNK"], [ranges[d][1] for d in "MNK"])
    first = list(itertools.product(*(ranges[d] for d in "MNK"))) if corners else []
    return list(dict.fromkeys(first + [tuple(int(v) for v in s) for s in a]))[:n]


def _tree_dict(clf) -> dict:
    """A fitted DecisionTreeClassifier as :attr:`Dispatch.tree`, with integer
    thresholds (``x <= t`` for real t is ``x <= floor(t)`` for integer x)
    and every split whose two sides name the same member collapsed."""
    tr = clf.tree_
    member = [int(clf.classes_[int(np.argmax(v))]) for v in tr.value[:, 0, :]]
    out = dict(feature=[], threshold=[], left=[], right=[], member=[])

    def leaf_member(i):                     # the member if the whole subtree names one, else None
        if tr.children_left[i] < 0:
            return member[i]
        a, b = leaf_member(tr.children_left[i]), leaf_member(tr.children_right[i])
        return a if a is not None and a == b else None

    def add(i) -> int:
        j = len(out["feature"])
        for key in out:
            out[key].append(-1 if key == "feature" else 0)
        same = leaf_member(i)
        if same is not None:
            out["member"][j] = same
            return j
        out["feature"][j] = int(tr.feature[i])
        out["threshold"][j] = int(np.floor(tr.threshold[i]))
        out["left"][j] = add(tr.children_left[i])
        out["right"][j] = add(tr.children_right[i])
        return j

    add(0)
    return out


def fit_dispatch(predictor, ranges: dict, *, max_configs: int = 3, samples: int = 2000, max_depth: int = 3,
                 seed: int = 0, epilogue: str = "none") -> Dispatch:
    """Choose configs and fit the selector (steps 1-3 of the module doc).

    Parameters
    ----------
    predictor : costlearn.serve.predictor.Predictor
    ranges : dict
        ``{"M": (lo, hi), "N": (lo, hi), "K": (lo, hi)}``, inclusive.
    max_configs : int
        Members, 1 to :data:`MAX_CONFIGS`.
    samples : int
        Shapes drawn to fit on (duplicates dropped), 10 to 100,000.
    max_depth : int
        Depth of the selector's tree, 1 to 8.
    seed : int
    epilogue : str
        The epilogue of every problem (one the model was trained on).

    Returns
    -------
    Dispatch

    Raises
    ------
    ValueError
        If a setting is out of range, the epilogue is not the model's, or no
        subset of ``max_configs`` candidates has a member that fits every
        sampled shape.
    """
    from sklearn.tree import DecisionTreeClassifier

    max_configs = check_int("max_configs", max_configs, 1, MAX_CONFIGS)
    samples = check_int("samples", samples, 10, 100_000)
    max_depth = check_int("max_depth", max_depth, 1, 8)
    ranges = {d: tuple(int(x) for x in ranges[d]) for d in "MNK"}
    predictor.problem(1, 1, 1, epilogue=epilogue)        # the epilogue is one the model serves
    shapes = range_shapes(ranges, samples, seed)
    configs = predictor.configs
    C = len(configs)
    P = np.full((len(shapes), C), np.inf)
    vi = predictor.vendor_index
    for s, (m, n, k) in enumerate(shapes):
        problem = predictor.problem(m, n, k, epilogue=epilogue)
        mask = predictor.candidate_mask(problem)
        if mask is None:
            mask = predictor.feasible(problem)
        if not mask.any():
            continue
        res = predictor.ranker.rank(problem, mask, top=C, cascade=False)
        P[s, res.order] = res.scores
        if vi is not None and predictor.predict(problem, 1).config is configs[vi]:
            P[s, vi] = P[s].min()           # the vendor floor kept the library here: it is this shape's best
    best = P.min(axis=1)
    keep = np.isfinite(best)
    if not keep.any():
        raise ValueError(f"no candidate's block tile fits any sampled shape in {ranges}")
    shapes = [s for s, ok in zip(shapes, keep) if ok]
    R = P[keep] - best[keep][:, None]                     # log2 slowdown vs the per-shape best; inf: no fit
    best_set, best_obj = None, np.inf
    for size in range(1, max_configs + 1):
        for combo in itertools.combinations(range(C), size):
            obj = R[:, combo].min(axis=1).mean()
            if obj < best_obj - 1e-12:
                best_set, best_obj = combo, obj
    if best_set is None or not np.isfinite(best_obj):
        raise ValueError(f"no {max_configs} candidates cover every shape in {ranges} (some shape fits none of "
                         "them); narrow the ranges or allow more configs")
    fam = family_of(configs[0])
    members = sorted(best_set, key=lambda i: (int(np.prod(fam.block_tile(configs[i]))), configs[i].config_id))
    sub = R[:, members]
    label = sub.argmin(axis=1)
    X = np.asarray(shapes, np.int64)
    # Weight a shape by what a wrong pick costs there (log2 spread of its
    # fitting members), so the tree spends its few splits where it matters.
    spread = np.where(np.isfinite(sub), sub, -np.inf).max(axis=1) - sub.min(axis=1)
    clf = DecisionTreeClassifier(max_depth=max_depth, random_state=seed)
    clf.fit(X, label, sample_weight=1.0 + spread)
    d = Dispatch(configs=[configs[i] for i in members], tree=_tree_dict(clf), ranges=ranges,
                 min_tile_caps=predictor.ranker.min_tile_caps, source=predictor.source, epilogue=epilogue)
    single = int(np.argmin(R.mean(axis=0)))
    d.single_best = configs[single] if np.isfinite(R[:, single]).all() else None
    picked = np.array([d.select_index(*s) for s in shapes])
    sel = sub[np.arange(len(shapes)), picked]
    slow = np.exp2(sel) - 1.0
    d.predicted = dict(shapes=len(shapes), subset_geomean=float(np.exp2(sub.min(axis=1).mean()) - 1.0),
                       selector_geomean=float(np.exp2(sel.mean()) - 1.0), selector_mean=float(slow.mean()),
                       selector_max=float(slow.max()),
                       single_best_geomean=float(np.exp2(R.mean(axis=0).min()) - 1.0))
    return d


def evaluate_dispatch(d: Dispatch, predictor, rows: pd.DataFrame, noise_rel: float = 0.0) -> pd.DataFrame:
    """Measured regret of a selector on fresh measurements.

    Parameters
    ----------
    d : Dispatch
    predictor : costlearn.serve.predictor.Predictor
        The model the selector came from (its per-shape choice is scored
        alongside).
    rows : DataFrame
        Valid measured rows (``costlearn.collect.dataset``), every candidate of a
        shape measured. Shapes outside ``d.ranges``, and rows of another
        epilogue than the selector's, are skipped.
    noise_rel : float
        Relative noise floor; a regret at or below it counts as 0.

    Returns
    -------
    DataFrame
        One row per shape in range: ``m, n, k, best_us``, and for
        ``selector``, ``model`` (the model's per-shape choice) and
        ``single`` (:attr:`Dispatch.single_best`): ``*_config`` and
        ``*_regret`` (measured time of the pick / measured best - 1; NaN
        where the pick was not measured).
    """
    out = []
    if "epilogue" in rows.columns:
        rows = rows[rows["epilogue"].astype(str).eq(d.epilogue).to_numpy(bool)]
    for (m, n, k), g in rows.groupby(["m", "n", "k"]):
        m, n, k = int(m), int(n), int(k)
        if not all(d.ranges[dim][0] <= v <= d.ranges[dim][1] for dim, v in zip("MNK", (m, n, k))):
            continue
        times = g.groupby("config_id")["time_us"].median()
        best = float(times.min())
        rec = dict(m=m, n=n, k=k, best_us=best, configs_measured=len(times))
        picks = [("selector", d.select(m, n, k)),
                 ("model", predictor.predict(predictor.problem(m, n, k, epilogue=d.epilogue)).config)]
        if d.single_best is not None:
            picks.append(("single", d.single_best))
        for who, cfg in picks:
            t = times.get(cfg.config_id, np.nan)
            r = t / best - 1.0
            rec[f"{who}_config"] = cfg.config_id
            rec[f"{who}_regret"] = 0.0 if r <= noise_rel else r
        out.append(rec)
    return pd.DataFrame(out)

