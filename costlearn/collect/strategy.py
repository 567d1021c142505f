"""Strategies: which problems a collection measures next.

A collection's cost is device time, and which problems get measured decides
what the model knows (design.md, "Choose what to measure"). Three strategies
draw the shapes of :func:`costlearn.collect.loop.run_collection`:

``random``
    Log-uniform extents with batch-1 and skinny shapes mixed in
    (:func:`costlearn.collect.sampler.iter_shapes`); the default.
``prior``
    Shapes the way real models have them (:class:`PriorShapes`): the linear
    layers of transformers and convnets, forward and backward, at the token
    counts of batch 1 to 16k, plus the user's own shapes and their token-count
    neighbours, mixed with a share of log-uniform coverage.
``active``
    Rounds (:class:`ActiveShapes`): measure a round, refit a small bootstrap
    ensemble of the cost model on everything measured, and measure next the
    candidate problems where the ensemble's pick is least sure: the expected
    regret of the ensemble's argmin under its own members
    (:class:`costlearn.learn.active.EnsembleDisagreement`), the decision-focused form of ensemble
    disagreement (query by committee: Seung, Opper & Sompolinsky, COLT 1992;
    bootstrap committees: Breiman, Machine Learning 24, 1996).

Where the backend can measure only some problems (a replay of a recorded
log, :class:`costlearn.collect.backends.replay.ReplayBackend`), or the user
gives the problems to choose from, every strategy chooses among those
``candidates`` only, so a strategy is scored on real GPU logs without a GPU:
``random`` in a seeded order, ``prior`` as the candidate nearest to each
prior draw, ``active`` by its score.

Every stream is deterministic for its seed and the rows already measured, so
a resumed collection proposes what an uninterrupted one would have, less
what is on disk.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from costlearn.collect.sampler import STRATEGIES, ShapeBounds, distinct_shapes, iter_shapes
from costlearn.core.checks import check_int, check_real
from costlearn.core.errors import warn

__all__ = ["STRATEGIES", "ACTIVE_COSTS", "PriorShapes", "RandomShapes", "ActiveShapes", "ActiveSettings",
           "check_active", "nearest_unused", "shape_stream", "spread_top", "choose_problems", "REFERENCE_LAYERS"]


# Real models' dimensions (the prior). Sources: the model cards and configs of
# BERT (768/1024, FFN 4h, vocab 30522), GPT-2 (768-1600, vocab 50257), LLaMA 1-3
# (4096-8192; FFN 11008, 14336, 28672; vocab 32000, 128256), Mistral (14336),
# ViT (197 tokens; 768/1024/1280), ResNet / EfficientNet / ConvNeXt (channels,
# 7-112 pixel feature maps, a 1000-class head) as timm builds them.
TRANSFORMER_HIDDEN = (256, 384, 512, 640, 768, 1024, 1280, 1536, 1600, 2048, 2560, 3072, 4096, 5120, 6144,
                      7168, 8192)
"""Hidden sizes of transformer models."""
FFN_MULTIPLIERS = (4.0, 8.0 / 3.0, 3.5, 2.0)
"""Intermediate (MLP) size / hidden size: 4 (BERT, GPT, ViT), 8/3 rounded up
to 256 (LLaMA's SwiGLU), 3.5 (Mistral), 2 (small models)."""
VOCABULARY = (1000, 21843, 30522, 32000, 50257, 50304, 128256)
"""Output head widths: ImageNet-1k and -21k classes, BERT, LLaMA 2, GPT-2
(and padded), LLaMA 3."""
SEQUENCE = (1, 1, 64, 77, 128, 197, 256, 384, 512, 1024, 2048, 4096)
"""Tokens per sample (1: decoding, counted twice; 77: CLIP text; 197: ViT-B/16)."""
BATCH = (1, 2, 4, 8, 16, 32, 64, 128, 256)
"""Samples per batch."""
CHANNELS = (16, 24, 32, 40, 48, 64, 80, 96, 112, 128, 160, 192, 256, 320, 384, 512, 640, 768, 960, 1024, 1280,
            1536, 2048)
"""Convolution channel counts (1x1 convolutions and heads are matmuls)."""
FEATURE_MAP = (7, 14, 28, 56, 112)
"""Side of a convnet's square feature map, pixels."""

REFERENCE_LAYERS = (
    # BERT-base, 8 sequences of 128 tokens (1024 tokens), hidden 768, FFN 3072: forward, and the MLP's backward
    ("BERT-base qkv", 1024, 2304, 768), ("BERT-base attention out", 1024, 768, 768),
    ("BERT-base mlp up", 1024, 3072, 768), ("BERT-base mlp down", 1024, 768, 3072),
    ("BERT-base mlp up, data grad", 1024, 768, 3072), ("BERT-base mlp up, weight grad", 768, 3072, 1024),
    # BERT-large, 1024 tokens, hidden 1024, FFN 4096
    ("BERT-large qkv", 1024, 3072, 1024), ("BERT-large mlp up", 1024, 4096, 1024),
    ("BERT-large mlp down", 1024, 1024, 4096),
    # GPT-2 small decoding one token, hidden 768, vocabulary 50257
    ("GPT-2 decode qkv", 1, 2304, 768), ("GPT-2 decode mlp up", 1, 3072, 768), ("GPT-2 decode mlp down", 1, 768, 3072),
    ("GPT-2 decode lm head", 1, 50257, 768),
    # LLaMA-2-7B: a 2048-token prefill and a batch of 16 decoding, hidden 4096, FFN 11008, vocabulary 32000
    ("LLaMA-7B prefill qkv", 2048, 12288, 4096), ("LLaMA-7B prefill attention out", 2048, 4096, 4096),
    ("LLaMA-7B prefill gate/up", 2048, 11008, 4096), ("LLaMA-7B prefill down", 2048, 4096, 11008),
    ("LLaMA-7B decode qkv", 16, 12288, 4096), ("LLaMA-7B decode down", 16, 4096, 11008),
    ("LLaMA-7B decode lm head", 16, 32000, 4096),
    # ViT-B/16, a batch of 32 images (197 tokens each), hidden 768, FFN 3072, 1000 classes
    ("ViT-B/16 qkv", 6304, 2304, 768), ("ViT-B/16 mlp up", 6304, 3072, 768), ("ViT-B/16 mlp down", 6304, 768, 3072),
    ("ViT-B/16 head", 32, 1000, 768),
    # ResNet-50's 1x1 convolutions at a batch of 32 (feature maps 56, 28, 14, 7), and its classifier
    ("ResNet-50 56x56 1x1 reduce", 100352, 64, 256), ("ResNet-50 56x56 1x1 expand", 100352, 256, 64),
    ("ResNet-50 28x28 1x1 reduce", 25088, 128, 512), ("ResNet-50 28x28 1x1 expand", 25088, 512, 128),
    ("ResNet-50 14x14 1x1 reduce", 6272, 256, 1024), ("ResNet-50 14x14 1x1 expand", 6272, 1024, 256),
    ("ResNet-50 7x7 1x1 reduce", 1568, 512, 2048), ("ResNet-50 7x7 1x1 expand", 1568, 2048, 512),
    ("ResNet-50 classifier", 32, 1000, 2048),
)
"""A fixed set of real models' layer shapes, (name, M, N, K): what ``train``
answers to say how much its data covers (:mod:`costlearn.learn.coverage`).
Forward Y = X W with M tokens, N outputs, K inputs; a data gradient swaps N
and K, a weight gradient reduces over the tokens. Sources: the model cards
and configs named in :data:`TRANSFORMER_HIDDEN`'s comment; the ResNet-50
bottleneck widths of He et al., "Deep Residual Learning for Image
Recognition", CVPR 2016, table 1."""

ACTIVE_COSTS = ("auto", "problem", "second")
"""What the ``active`` strategy chooses per (:class:`ActiveSettings`)."""

PRIOR_COVERAGE_SHARE = 0.25
"""Share of a ``prior`` stream's shapes drawn log-uniformly instead (the
model still needs to know the space between real models' shapes)."""
USER_NEIGHBOUR_SHARE = 0.5
"""Share of a ``prior`` stream's draws, once the user's shapes are all
proposed, taken as a user shape with another token count (its M, or its K
for a weight gradient, times a power of two in 1/16 ... 16)."""


def _round_up(x: float, to: int) -> int:
    return int(math.ceil(x / to) * to)


def _real_model_shape(rng: np.random.Generator) -> tuple[int, int, int]:
    """One (M, N, K) of a real model's linear layer: a transformer's (QKV,
    attention output, MLP up and down, head) or a convnet's (1x1 convolution,
    classifier), forward (M tokens, N out, K in) or backward (data gradient:
    K and N swapped; weight gradient: the tokens are the reduction K)."""
    if rng.random() < 0.6:
        h = int(rng.choice(TRANSFORMER_HIDDEN))
        ffn = _round_up(h * float(rng.choice(FFN_MULTIPLIERS)), 256 if h >= 2048 else 64)
        fan_in, fan_out = [(h, 3 * h), (h, h), (h, ffn), (ffn, h), (h, int(rng.choice(VOCABULARY)))][
            int(rng.choice(5, p=[0.25, 0.2, 0.2, 0.2, 0.15]))]
        tokens = int(rng.choice(BATCH)) * int(rng.choice(SEQUENCE))
    else:
        c_in, c_out = (int(x) for x in rng.choice(CHANNELS, 2))
        if rng.random() < 0.15:                               # the classifier
            c_out, tokens = int(rng.choice(VOCABULARY[:2])), int(rng.choice(BATCH))
        else:
            side = int(rng.choice(FEATURE_MAP))
            tokens = int(rng.choice(BATCH[:6])) * side * side
        fan_in, fan_out = c_in, c_out
    u = rng.random()
    if u < 0.5:
        return tokens, fan_out, fan_in                         # forward: Y = X W
    if u < 0.75:
        return tokens, fan_in, fan_out                         # data gradient: dX = dY W^T
    return fan_in, fan_out, tokens                             # weight gradient: dW = X^T dY


def _fits(shape, bounds: ShapeBounds) -> bool:
    m, n, k = shape
    return (all(bounds.min_extent <= x <= bounds.max_extent for x in shape) and 2.0 * m * n * k <= bounds.max_flops)


def nearest_unused(shape, candidates: np.ndarray, used: np.ndarray) -> int | None:
    """Index of the candidate nearest to ``shape`` in log2 extents (the sum of
    squared differences of log2 M, N, K) among those not ``used``; None when
    every candidate is used.

    Parameters
    ----------
    shape : (int, int, int)
    candidates : ndarray of float64, shape (n, 3)
        log2 of the candidates' M, N, K.
    used : ndarray of bool, shape (n,)
    """
    if used.all():
        return None
    d = ((candidates - np.log2(np.asarray(shape, np.float64))) ** 2).sum(axis=1)
    d[used] = np.inf
    return int(np.argmin(d))


class RandomShapes:
    """The ``random`` strategy: :func:`~costlearn.collect.sampler.iter_shapes`
    (seeded by ``[seed, 2]``, the stream collections have always drawn), or
    the ``candidates`` in a seeded random order.

    Parameters
    ----------
    bounds : ShapeBounds
    seed : int
    candidates : list of (int, int, int), optional
    """

    def __init__(self, bounds: ShapeBounds, seed: int, candidates=None):
        self.bounds, self.seed = bounds, seed
        self.candidates = None if candidates is None else sorted(set(map(tuple, candidates)))

    def __iter__(self):
        rng = np.random.default_rng([self.seed, 2])
        if self.candidates is None:
            return iter_shapes(self.bounds, rng)
        return (self.candidates[i] for i in rng.permutation(len(self.candidates)))


class PriorShapes:
    """The ``prior`` strategy: real models' shapes.

    Yields first the user's shapes (in their order), then an endless stream
    mixing three sources: with probability :data:`PRIOR_COVERAGE_SHARE` a
    log-uniform shape (:func:`~costlearn.collect.sampler.iter_shapes`); else,
    where the user gave shapes, with probability
    :data:`USER_NEIGHBOUR_SHARE` one of them at another token count; else a
    real model's linear layer (:data:`TRANSFORMER_HIDDEN`, :data:`CHANNELS`
    and the other tables of this module). Shapes outside ``bounds`` are
    redrawn, repeats skipped. With ``candidates``, each draw is replaced by
    the nearest candidate not yet proposed (:func:`nearest_unused`), and the
    stream ends when every candidate is proposed.

    Parameters
    ----------
    bounds : ShapeBounds
    seed : int
    user_shapes : list of (int, int, int), optional
        The shapes of the user's own models (``collect --shapes FILE``).
    candidates : list of (int, int, int), optional

    Raises
    ------
    ValueError
        (When iterated) if no new shape within ``bounds`` can be drawn.
    """

    def __init__(self, bounds: ShapeBounds, seed: int, user_shapes=(), candidates=None):
        self.bounds, self.seed = bounds, seed
        given = [tuple(int(x) for x in s) for s in (user_shapes or ())]
        self.candidates = None if candidates is None else sorted(set(map(tuple, candidates)))
        self.given = given
        self.user_shapes = given if self.candidates is not None else [s for s in given if _fits(s, bounds)]
        if len(self.user_shapes) < len(given):
            out = [s for s in given if s not in self.user_shapes]
            warn(f"costlearn: {len(out)} of the {len(given)} shapes given lie outside the collection's bounds "
                 f"(M, N, K <= {bounds.max_extent}, 2MNK <= {bounds.max_flops:.3g}) and are not measured "
                 f"(first: {'x'.join(map(str, out[0]))}); their other token counts inside the bounds are "
                 "(raise --max-extent or --max-flops to measure them)")

    def draws(self):
        """The endless prior stream before bounds, repeats and candidates."""
        rng = np.random.default_rng([self.seed, 6])
        coverage = iter_shapes(ShapeBounds(self.bounds.min_extent, self.bounds.max_extent, self.bounds.max_flops),
                               np.random.default_rng([self.seed, 7]))
        yield from self.user_shapes
        while True:
            u = rng.random()
            if u < PRIOR_COVERAGE_SHARE:
                yield next(coverage)
            elif self.given and rng.random() < USER_NEIGHBOUR_SHARE:
                m, n, k = self.given[int(rng.integers(len(self.given)))]
                scale = 2.0 ** int(rng.integers(-4, 5))
                if k > max(m, n) and rng.random() < 0.5:           # a weight gradient: tokens are K
                    yield m, n, max(1, int(round(k * scale)))
                else:
                    yield max(1, int(round(m * scale))), n, k
            else:
                yield _real_model_shape(rng)

    def __iter__(self):
        if self.candidates is None:
            yield from distinct_shapes(self.draws(), lambda s: _fits(s, self.bounds),
                                       f"real-model shape within {self.bounds}")
            return
        logs = np.log2(np.asarray(self.candidates, np.float64))
        used = np.zeros(len(self.candidates), bool)
        for s in self.draws():
            i = nearest_unused(s, logs, used)
            if i is None:
                return
            used[i] = True
            yield self.candidates[i]


@dataclass(frozen=True)
class ActiveSettings:
    """Settings of the ``active`` strategy.

    Parameters
    ----------
    first_round : int
        Problems measured (by the ``random`` stream) before the first fit
        (at least 2: a member learns from 2 problems at least).
    round_share : float
        A later round measures this share of the problems measured so far
        (at least ``first_round``): rounds grow with the data, so the refits
        stay a small share of the budget.
    candidates : int
        Unmeasured problems scored per round.
    members : int
        Bootstrap members of the ensemble (:class:`~costlearn.learn.active.EnsembleDisagreement`).
    trees, max_depth : int
        Boosting rounds and depth of each member (a small, fast model).
    min_distance : float
        Two problems of one round differ by at least this in some log2
        extent (no round spends itself on one corner).
    n_jobs : int
        XGBoost threads of the refits.
    member_problems : int, optional
        Problems in each member's bootstrap sample (default: as many as
        there are): a cap keeps refits on a large source (a transfer's)
        fast.
    cost : {"auto", "problem", "second"}
        What a round's problems are chosen per. ``"problem"``: the highest
        scores (a budget of problems: ``max_problems``, a replayed log).
        ``"second"``: the highest scores per predicted second of measuring
        the problem (a budget of seconds on a device: without it, a round
        spends the budget on the few largest, least known problems). The
        seconds are ``problem_overhead_s`` plus, per config, the median
        compile of the rows measured and the protocol's launches at the
        ensemble's predicted time (:meth:`costlearn.collect.measure.Protocol.launch_us`,
        at the median rounds of the rows measured). ``"auto"``: ``"problem"``
        where the collection has ``max_problems``, else ``"second"``.
    problem_overhead_s : float
        Seconds a problem costs beyond its compiles and launches (planning,
        buffers, writing its part; the default is what a small problem took
        on PoCL's CPU device: docs/results.md, "Which problems to measure:
        collection strategies").
    ensemble : callable (spec, ActiveSettings, seed) -> ensemble, optional
        Makes the model a round refits: an object with ``fit(rows)``
        (returning itself), ``score(candidates)`` (a Series of expected
        regret indexed by (m, n, k, layout)) and ``time_us(candidates)`` (a
        predicted time per row, microseconds), e.g.
        :class:`costlearn.learn.active.EnsembleDisagreement`, which the command
        line and ``transfer`` pass (a model lives above this layer). Needed
        by ``active``.
    """

    first_round: int = 16
    round_share: float = 0.25
    candidates: int = 256
    members: int = 4
    trees: int = 120
    max_depth: int = 6
    min_distance: float = 0.25
    n_jobs: int = 1
    member_problems: int | None = None
    cost: str = "auto"
    problem_overhead_s: float = 1.0
    ensemble: object = None

    def __post_init__(self) -> None:
        check_int("ActiveSettings.first_round", self.first_round, 2)
        check_int("ActiveSettings.candidates", self.candidates, 1)
        check_int("ActiveSettings.members", self.members, 2)
        check_int("ActiveSettings.trees", self.trees, 1)
        check_int("ActiveSettings.max_depth", self.max_depth, 1, 16)
        check_int("ActiveSettings.n_jobs", self.n_jobs, 1)
        if self.member_problems is not None:
            check_int("ActiveSettings.member_problems", self.member_problems, 1)
        if not 0 < self.round_share <= 1:
            raise ValueError(f"ActiveSettings.round_share={self.round_share!r}; must be in (0, 1]")
        if not self.min_distance >= 0:
            raise ValueError(f"ActiveSettings.min_distance={self.min_distance!r}; must be >= 0")
        if self.cost not in ACTIVE_COSTS:
            raise ValueError(f"ActiveSettings.cost={self.cost!r}; allowed: {list(ACTIVE_COSTS)}")
        check_real("ActiveSettings.problem_overhead_s", self.problem_overhead_s, 0)


class ActiveShapes:
    """The ``active`` strategy: rounds of (fit, score, choose).

    Each round reads the rows measured so far (``measured()``, the folder's
    and this collection's). Below ``settings.first_round`` measured problems
    it proposes the next shapes of the ``random`` stream; after, it fits an
    :class:`~costlearn.learn.active.EnsembleDisagreement`, scores ``settings.candidates`` unmeasured
    problems (the next draws of the random stream, or a seeded sample of the
    unproposed ``candidates``) and proposes the highest-scoring ones (per
    second of measuring them, with ``cost_s``), each at
    least ``settings.min_distance`` (log2) from the others of its round, as
    many as ``settings.round_share`` of the problems measured (at least
    ``first_round``). A candidate not chosen may be scored again in a later
    round.

    Parameters
    ----------
    bounds : ShapeBounds
    seed : int
    measured : callable returning DataFrame
        The valid rows measured so far of this collection's family and dtype
        (with ``time_us``), every layout: the ensemble learns from all of
        them.
    candidate_rows : callable (list of (int, int, int)) -> DataFrame
        The (problem, config) rows a collection would measure on those
        shapes (the columns :meth:`EnsembleDisagreement.score` reads).
    spec : DeviceSpec
    settings : ActiveSettings, optional
    candidates : list of (int, int, int), optional
        The only shapes to choose from.
    layout : str, optional
        This collection's layout: a shape counts as measured (and is not
        proposed) where ``measured()`` holds it in this layout (None: in any).
    cost_s : callable (DataFrame, DataFrame) -> Series, optional
        Given the candidate rows with the ensemble's ``time_us`` and the rows
        measured, the seconds of measuring each candidate problem (indexed by
        (m, n, k, layout)); the scores are divided by it (``cost="second"``).
        None: each problem costs one.
    """

    def __init__(self, bounds: ShapeBounds, seed: int, measured, candidate_rows, spec,
                 settings: ActiveSettings | None = None, candidates=None, layout: str | None = None, cost_s=None):
        self.bounds, self.seed, self.spec, self.layout = bounds, seed, spec, layout
        self.measured, self.candidate_rows, self.cost_s = measured, candidate_rows, cost_s
        self.settings = check_active(settings)
        self.candidates = None if candidates is None else sorted(set(map(tuple, candidates)))

    def __iter__(self):
        s = self.settings
        base = iter(RandomShapes(self.bounds, self.seed, self.candidates))
        proposed: set = set()
        for r in itertools.count():
            rows = self.measured()
            here = rows if self.layout is None else rows[rows["layout"] == self.layout]
            have = set(map(tuple, here[["m", "n", "k"]].drop_duplicates().astype(int).to_numpy().tolist()))
            n_have = len(rows.drop_duplicates([c for c in ("m", "n", "k", "layout") if c in rows.columns]))
            skip = have | proposed
            if n_have < s.first_round:
                batch = list(itertools.islice((x for x in base if x not in skip), s.first_round - n_have))
            else:
                pool = self._candidate_shapes(skip, r)
                if not pool:
                    return
                batch = self._choose(rows, pool, max(s.first_round, int(math.ceil(s.round_share * n_have))), r)
            if not batch:
                return
            for x in batch:
                proposed.add(x)
                yield x

    def _candidate_shapes(self, skip: set, round_index: int) -> list:
        s = self.settings
        if self.candidates is None:
            it = iter_shapes(self.bounds, np.random.default_rng([self.seed, 9, round_index]))
            return list(itertools.islice((x for x in it if x not in skip), s.candidates))
        left = [x for x in self.candidates if x not in skip]
        rng = np.random.default_rng([self.seed, 9, round_index])
        return [left[i] for i in sorted(rng.permutation(len(left))[:s.candidates])]

    def _choose(self, rows: pd.DataFrame, pool: list, n: int, round_index: int) -> list:
        s = self.settings
        cand = self.candidate_rows(pool)
        if cand.empty:
            return pool[:n]
        ensemble = s.ensemble(self.spec, s, self.seed + round_index).fit(rows)
        scores = ensemble.score(cand)
        if self.cost_s is not None:
            scores = scores / self.cost_s(cand.assign(time_us=ensemble.time_us(cand)), rows).reindex(scores.index)
        return [p[:3] for p in spread_top(scores, n, s.min_distance)]


def spread_top(scores: pd.Series, n: int, min_distance: float) -> list:
    """The ``n`` highest-scoring problems of ``scores`` (indexed by (m, n, k,
    layout)), greedily, skipping one within ``min_distance`` in every log2
    extent of one already chosen with its layout; ties in index order.

    Returns
    -------
    list of (int, int, int, str)
    """
    chosen, logs = [], []
    for problem in scores.sort_values(ascending=False, kind="stable").index:
        lg = np.log2(np.asarray(problem[:3], np.float64))
        if all(lay != problem[3] or np.abs(lg - o).max() >= min_distance for o, lay in logs):
            chosen.append((int(problem[0]), int(problem[1]), int(problem[2]), str(problem[3])))
            logs.append((lg, problem[3]))
            if len(chosen) == n:
                break
    return chosen


def choose_problems(pool: pd.DataFrame, k: int, strategy: str, *, seed: int = 0, spec=None, known=None,
                    settings: ActiveSettings | None = None, say=None) -> list:
    """``k`` problems of a measured pool (a destination log a transfer learns
    from), chosen by ``strategy``.

    ``random``: a seeded random ``k``. ``prior``: the pool problem nearest to
    each draw of :class:`PriorShapes` (any layout). ``active``: rounds of
    ``ceil(k * settings.round_share)`` problems: fit an
    :class:`~costlearn.learn.active.EnsembleDisagreement` on ``known`` (rows of what is known
    already, e.g. a source device's) and the pool rows of the problems
    chosen so far, score a seeded sample of ``settings.candidates`` unchosen
    pool problems on the configs measured there, take the top (:func:`spread_top`).
    Without ``known`` rows, the first ``min(settings.first_round, k // 2)``
    problems are random.

    Parameters
    ----------
    pool : DataFrame
        Valid rows (``m, n, k, layout, dtype, family, config_id, time_us``).
    k : int
    strategy : str
    seed : int
    spec : DeviceSpec
        The pool's device (``active``).
    known : DataFrame, optional
    settings : ActiveSettings
        ``active``: its ``ensemble`` is needed.
    say : callable, optional
        Called with a line per round.

    Returns
    -------
    list of (int, int, int, str)
        (M, N, K, layout), in the order chosen; all of the pool's problems
        when it has at most ``k``.

    Raises
    ------
    ValueError
        If ``k`` < 1, ``strategy`` is unknown, or ``active`` has no ``spec``
        or no ``settings`` with an ``ensemble`` (:func:`check_active`).
    """
    k = check_int("k", k, 1)
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy={strategy!r}; allowed: {list(STRATEGIES)}")
    problem = ["m", "n", "k", "layout"]
    problems = [(int(m), int(n), int(kk), str(lay)) for m, n, kk, lay in
                pool[problem].drop_duplicates().sort_values(problem).itertuples(index=False, name=None)]
    if len(problems) <= k:
        return problems
    rng = np.random.default_rng([seed, 10])
    if strategy == "random":
        return [problems[i] for i in rng.permutation(len(problems))[:k]]
    if strategy == "prior":
        logs = np.log2(np.asarray([p[:3] for p in problems], np.float64))
        used = np.zeros(len(problems), bool)
        out = []
        for s in PriorShapes(ShapeBounds(1, 2**31 - 1, math.inf), seed).draws():
            i = nearest_unused(s, logs, used)
            used[i] = True
            out.append(problems[i])
            if len(out) == k:
                return out
    s = check_active(settings)
    if spec is None:
        raise ValueError("the active strategy needs spec= (the pool's device)")
    known = known if known is not None and len(known) else None
    chosen: list = []
    if known is None:
        chosen = [problems[i] for i in rng.permutation(len(problems))[:min(s.first_round, k // 2)]]
    keyed = pool.set_index(problem).sort_index()
    cand_cols = ["m", "n", "k", "dtype", "layout", "family", "config_id"] + (
        ["epilogue"] if "epilogue" in pool else [])
    r = 0
    while len(chosen) < k:
        taken = set(chosen)
        left = [p for p in problems if p not in taken]
        sample = [left[i] for i in sorted(np.random.default_rng([seed, 11, r]).permutation(len(left))[:s.candidates])]
        mine = keyed.loc[chosen].reset_index() if chosen else None
        rows = pd.concat([f for f in (known, mine) if f is not None], ignore_index=True)
        ens = s.ensemble(spec, s, seed + r).fit(rows)
        cand = keyed.loc[sample].reset_index()[cand_cols].drop_duplicates(["m", "n", "k", "layout", "config_id"])
        scores = ens.score(cand)
        want = min(k - len(chosen), max(1, int(math.ceil(k * s.round_share))))
        picked = spread_top(scores, want, s.min_distance)
        if say is not None:
            say(f"active round {r + 1}: {len(chosen)} chosen, {len(sample)} scored, took {len(picked)} "
                f"(expected regret {scores.max():.3f}-{scores.min():.3f} log2)")
        chosen += picked
        r += 1
    return chosen


def shape_stream(strategy: str, bounds: ShapeBounds, seed: int, *, candidates=None, user_shapes=(),
                 measured=None, candidate_rows=None, spec=None, settings: ActiveSettings | None = None,
                 layout: str | None = None, cost_s=None):
    """The shapes a collection measures, in order, by ``strategy``
    (:data:`STRATEGIES`; see the classes of this module).

    Parameters
    ----------
    strategy : str
    bounds : ShapeBounds
    seed : int
    candidates : list of (int, int, int), optional
        The only shapes the backend can measure, or the user offers.
    user_shapes : list of (int, int, int)
        ``prior``: the user's own shapes.
    measured, candidate_rows, spec, settings, layout, cost_s :
        ``active``: see :class:`ActiveShapes`.

    Returns
    -------
    iterable of (int, int, int)

    Raises
    ------
    ValueError
        If ``strategy`` is unknown (the message lists :data:`STRATEGIES`),
        ``user_shapes`` are given to another strategy than ``prior``, or
        ``active`` lacks ``measured``, ``candidate_rows`` or ``spec``.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy={strategy!r}; allowed: {list(STRATEGIES)}")
    if user_shapes and strategy != "prior":
        raise ValueError(f"user shapes are the prior's (strategy='prior'), not the {strategy!r} strategy's")
    if strategy == "random":
        return RandomShapes(bounds, seed, candidates)
    if strategy == "prior":
        return PriorShapes(bounds, seed, user_shapes, candidates)
    if measured is None or candidate_rows is None or spec is None:
        raise ValueError("the active strategy needs measured=, candidate_rows= and spec=")
    return ActiveShapes(bounds, seed, measured, candidate_rows, spec, check_active(settings), candidates, layout,
                        cost_s)


def check_active(settings) -> ActiveSettings:
    """``settings`` of the active strategy, with its ensemble.

    Raises
    ------
    ValueError
        If there are none, or they name no ``ensemble`` (the message says
        which to pass).
    """
    if settings is None or settings.ensemble is None:
        raise ValueError(f"strategy='active' needs active=ActiveSettings(ensemble=...) (got {settings!r}): the model "
                         "each round refits, e.g. costlearn.learn.active.EnsembleDisagreement (the command line "
                         "passes it)")
    return settings
