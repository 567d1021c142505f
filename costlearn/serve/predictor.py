"""Predictor: rank a model's candidate configs for a problem in microseconds,
and say when the answer is a guess (design.md, "Predictor").

A :class:`Predictor` composes, for one model artifact, its ranker
(:mod:`costlearn.ranker`: the ranking), the OOD verdict
(:mod:`costlearn.serve.ood`: why an answer is a guess) and the vendor policy
(:mod:`costlearn.serve.vendor_policy`: the best tile config or the vendor)
into a :class:`Prediction`. :func:`load_predictor` keeps the process's
predictors (:class:`costlearn.model.store.LoadedModels`, by
:class:`~costlearn.model.store.ModelKey`). Measuring the top candidates and
the tuning database sit above it (:mod:`costlearn.serve.tuning`,
:func:`costlearn.serve.predict.predict_best`): importing this module loads
neither the collection loop nor a backend.
"""
from __future__ import annotations

import warnings

import numpy as np

from costlearn.core.device import DeviceSpec
from costlearn.core.problem import MAX_EXTENT, Problem
from costlearn.core.checks import check_instance, check_int
from costlearn.core.keyed_cache import recorded_local_device
from costlearn.families import family_of
from costlearn.features import CandidateFeatures, ConfigTable, get_feature_set
from costlearn.model import artifact as _artifact
from costlearn.model.store import LoadedModels, ModelKey
from costlearn.ranker import make_ranker
from costlearn.collect.space import tile_fits_problem
from costlearn.serve.answer import Answers
from costlearn.serve.ood import OODVerdict
from costlearn.serve.prediction import Prediction
from costlearn.serve.vendor_policy import VendorPolicy

__all__ = ["Predictor", "PREDICTORS", "load_predictor", "clear_cache"]

class Predictor:
    """Ranks the candidate configs of one model artifact: it loads the
    model, checks the arguments, and leaves what a ranking means to its
    :attr:`answers`.

    A cold call (a problem not seen) is one ranker call (``costlearn_rank``
    in C: the candidate rule, the features, the cascaded trees or the
    shortlist table, the sort, the nearest training shape, the held-out
    evidence near the problem and the floor's decision) plus building the
    :class:`Prediction` (the words of any reason); a repeated problem is a
    dictionary lookup.

    Parameters
    ----------
    folder : path
        ``models/<device>/<family>/<dtype>/``.
    ranker : {"native", "numpy"}, optional
        Force a ranker (default: native where C builds).
    cascade : bool
        Use the artifact's calibrated cascade (default); False scores every
        candidate with every tree.
    shortlist : bool
        With ``cascade``, rank with the artifact's shortlist table where it
        has one (:mod:`costlearn.model.shortlist`; default); False: the
        cascade alone.

    Attributes
    ----------
    artifact : costlearn.model.artifact.Artifact
    configs : tuple
        The candidates, in the ranker's order.
    family, dtype, device : str
    layouts : tuple of str
    epilogues : tuple of str
        The epilogues it was trained on (:data:`costlearn.core.problem.EPILOGUES`).
    spec : DeviceSpec
        The device of the training data.
    envelope : costlearn.model.envelope.Envelope
    ranker : costlearn.ranker.Ranker
    identity_reasons : tuple of str
        Why every answer of this model is a guess here (another kernel
        template or costlearn version than at training, a zero-shot
        transfer from another device: :func:`costlearn.serve.ood.identity_reasons`),
        else empty.
    source : str
        The model's name in answers and errors: ``"<device>/<family>/<dtype>
        model <the first 12 hex digits of its scorer file's sha256>"``, each
        Prediction's :attr:`~costlearn.serve.prediction.Prediction.model`.
    ood : costlearn.serve.ood.OODVerdict
        Why a problem's answer is a guess (rebuilt with :attr:`floor`).
    vendor_policy : costlearn.serve.vendor_policy.VendorPolicy
        The best tile config or the vendor (rebuilt with :attr:`floor`).
    answers : costlearn.serve.answer.Answers
        What a ranking means under :attr:`floor` (the deciding piece), and
        the one cache of the answers given (rebuilt with :attr:`floor`).
    cached : callable
        ``cached((M, N, K, layout, top_k, epilogue))``: the Prediction given
        earlier for that key, or None (what :meth:`predict_shape` and
        :meth:`predict` answer a repeated problem with): :attr:`answers`'
        ``cached``.
    fresh : callable
        ``fresh(m, n, k, layout, epilogue, top_k)``: the Prediction of a
        problem not cached, of arguments checked as :meth:`predict_shape`
        checks them, then cached: :attr:`answers`' ``fresh``.

    Raises
    ------
    costlearn.model.artifact_layout.ArtifactError
        If the artifact is missing or does not match this code.
    """

    def __init__(self, folder, *, ranker: str | None = None, cascade: bool = True, shortlist: bool = True):
        art = _artifact.load(folder)
        self.artifact = art
        self.spec: DeviceSpec = art.spec
        self.family, self.dtype, self.layouts = art.family.name, art.dtype, art.layouts
        self.epilogues = art.epilogues
        self.device = art.device
        self.configs = tuple(art.configs)
        self.envelope = art.envelope
        self.cascade = bool(cascade)
        self.coverage = art.coverage
        vid = art.family.vendor_config_id
        ids = [c.config_id for c in self.configs]
        self.vendor_index = ids.index(vid) if vid is not None and vid in ids else None
        self._ranker_args = (ranker, shortlist)
        self.source = f"{self.device}/{self.family}/{self.dtype} model {art.model_sha256[:12]}"
        self.floor = art.floor                      # makes the ranker and the Answers (see the setter)
        self.identity_reasons = self.ood.identity_reasons

    @property
    def floor(self):
        """The vendor floor and held-out evidence (:class:`costlearn.model.vendor_floor.VendorFloor`)
        its predictions use; setting another (a study of floors) rebuilds
        :attr:`ranker`, which reports the evidence, and forgets the answers cached."""
        return self._floor

    @floor.setter
    def floor(self, floor) -> None:
        art, (name, shortlist) = self.artifact, self._ranker_args
        self._floor = floor
        # the floor's evidence is looked up only where it can change an answer
        self.ood = ood = OODVerdict(art, floor, floor.uses_evidence(self.vendor_index is not None))
        self.ranker = ranker = make_ranker(art.candidate_features(), art.scorer, art.envelope,
                                           art.family.min_tile_caps(art.spec), name, coverage=art.coverage,
                                           vendor=self.vendor_index, evidence=floor,
                                           shortlist=art.shortlist if shortlist else None,
                                           vendor_model=art.vendor_model, time_limits=ood.time_limits)
        self.vendor_policy = VendorPolicy(art, ranker, self.vendor_index, floor)
        # new Answers, not a cleared cache: a copy of this Predictor given another floor must not empty (or fill)
        # the cache of the one it was copied from, nor an answer made under the old floor land in the new cache
        self.use_answers(Answers(self, ranker, ood, self.vendor_policy, floor.margin_log2))

    def use_answers(self, answers: Answers) -> None:
        """Answer with ``answers`` from now on (what a new :attr:`floor`
        does; a test gives Answers of its own)."""
        self.answers = answers
        self.cached, self.fresh = answers.cached, answers.fresh

    def vendor_estimate(self, problem: Problem):
        """The vendor model's estimate for ``problem``
        (:class:`~costlearn.model.vendor.VendorEstimate`: log2 of the best tile
        config's time over the vendor's, and its members' deviation), None
        where the artifact has no vendor model (or no vendor candidate):
        :meth:`costlearn.serve.vendor_policy.VendorPolicy.vendor_estimate`."""
        return self.vendor_policy.vendor_estimate(problem)

    def clear_results(self) -> None:
        """Forget the answers cached for repeated problems (the next call of
        each problem ranks afresh; benchmarks of cold calls use this)."""
        self.answers.results.clear()

    # -- public ranking ----------------------------------------------------

    def problem(self, m, n, k, layout: str | None = None, epilogue: str = "none") -> Problem:
        """The Problem (M, N, K) of this model's dtype, checked against the
        layouts and epilogues it was trained on.

        Raises
        ------
        TypeError, ValueError
            As :class:`~costlearn.core.problem.Problem`; ValueError if the layout
            is not one of :attr:`layouts` or the epilogue not one of
            :attr:`epilogues`.
        """
        p = Problem(m, n, k, self.dtype, self.layouts[0] if layout is None else layout, epilogue)
        if p.layout not in self.layouts:
            raise ValueError(f"layout={p.layout!r}: the {self.source} was trained on layouts {list(self.layouts)}")
        if p.epilogue not in self.epilogues:
            raise ValueError(f"epilogue={p.epilogue!r}: the {self.source} was trained on epilogues "
                             f"{list(self.epilogues)}; collect rows with it (`costlearn collect --epilogues "
                             f"{p.epilogue}`) and retrain")
        return p

    def check_served(self, problem: Problem, where: str = "problem") -> None:
        """Check that this model serves ``problem``.

        Raises
        ------
        ValueError
            Naming ``where`` and what the model serves, if ``problem`` is not
            of this model's dtype, or of a layout or epilogue it was trained
            on (for an epilogue, also what to collect).
        """
        if problem.dtype != self.dtype or problem.layout not in self.layouts \
                or problem.epilogue not in self.epilogues:
            fix = "" if problem.epilogue in self.epilogues else \
                f"; collect rows with it (`costlearn collect --epilogues {problem.epilogue}`) and retrain"
            raise ValueError(f"{where} {problem}: the {self.source} serves dtype {self.dtype!r}, layouts "
                             f"{list(self.layouts)}, epilogues {list(self.epilogues)}{fix}")

    def feasible(self, problem: Problem) -> np.ndarray:
        """Candidates whose block tile fits ``problem`` (the problem rule of
        :mod:`costlearn.collect.space`), bool of shape (len(configs),)."""
        bm, bn, bk = self.ranker.features.block
        caps = self.ranker.min_tile_caps
        return np.asarray(tile_fits_problem(bm, bn, bk, problem.m, problem.n, problem.k, caps), bool)

    def candidate_mask(self, problem: Problem) -> np.ndarray | None:
        """The candidates a prediction ranks for ``problem``: block tile within
        the problem (:meth:`feasible`) and measured near it (the artifact's
        :class:`~costlearn.model.envelope.Coverage`); the vendor candidate always.
        Where no tile config is left, every fitting one, else every one (the
        ranking is then flagged by :meth:`predict`). None for an artifact
        without recorded coverage (the ranker's own fit rule, in C).

        Returns
        -------
        ndarray of bool, shape (len(configs),), or None
        """
        if not self.coverage.recorded:
            return None
        return self.ranker.candidate_rule(problem)[0]

    def level_symptom(self, problem: Problem, level: int) -> str | None:
        """The sentence a prediction carries when the candidate rule chose
        at ``level`` (:attr:`costlearn.ranker.RankResult.level`); None at
        level 0 (:meth:`costlearn.serve.ood.OODVerdict.level_symptom`)."""
        return self.ood.level_symptom(problem.m, problem.n, problem.k, level)

    def rank(self, problem: Problem, mask: np.ndarray | None = None) -> tuple[list, np.ndarray]:
        """Every candidate of ``mask`` (default: those that fit; all when none
        fits) ranked by the full model (no cascade).

        Returns
        -------
        configs : list
            Fastest predicted first.
        time_us : ndarray of float64, shape (len(configs),)
            Predicted times, microseconds (a relative score for models that
            predict no time).

        Raises
        ------
        TypeError
            If ``problem`` is not a Problem.
        ValueError
            If ``mask`` is not a bool array of shape (len(configs),) or
            selects nothing.
        """
        check_instance("problem", problem, Problem, "a costlearn.Problem (Predictor.problem(M, N, K))")
        res = self.ranker.rank(problem, mask, top=len(self.configs), cascade=False)
        return [self.configs[i] for i in res.order], np.exp2(res.scores)

    def score_configs(self, problem: Problem, configs) -> np.ndarray:
        """Predicted times of any configs of this model's family for
        ``problem`` (the full model, no cascade), for configs that need not be
        among the model's candidates (a user's own config list).

        Parameters
        ----------
        problem : Problem
            Of this model's dtype and one of its layouts.
        configs : sequence of configs of this model's family, length C

        Returns
        -------
        ndarray of float64, shape (C,)
            Predicted time, microseconds (a relative score for models that
            predict no time); ``inf`` for a config the model's device cannot
            run (a rule of :mod:`costlearn.collect.space` rejects it).

        Raises
        ------
        TypeError
            If a config is not of this model's family.
        ValueError
            If the problem is not this model's dtype or layouts, ``configs`` is
            empty, or the model scores per candidate (``best_fixed``) and
            cannot score other configs.
        """
        check_instance("problem", problem, Problem, "a costlearn.Problem (Predictor.problem(M, N, K))")
        self.check_served(problem)
        configs = list(configs)
        if not configs:
            raise ValueError("configs is empty; give at least one config to score")
        fam = self.artifact.family
        for c in configs:
            if family_of(c) is not fam:
                raise TypeError(f"config {c!r} is not a {fam.name!r} config (this model's family)")
        scorer = self.artifact.scorer
        if scorer.offsets is not None:
            raise ValueError(f"the {self.source} scores its own candidates only; it cannot score other configs")
        feats = CandidateFeatures(get_feature_set(self.artifact.feature_set),
                                  ConfigTable(fam, configs, self.dtype, self.spec))
        X = feats.numpy(problem.m, problem.n, problem.k, None, problem.layout, problem.epilogue)
        out = np.exp2(scorer.full_numpy(X, np.arange(len(configs))))
        out[[fam.check_device(c, self.spec, self.dtype) is not None for c in configs]] = np.inf
        return out

    def problem_reasons(self, problem: Problem, nearest: tuple | None = None,
                        evidence: tuple | None = None) -> tuple[list, bool, float]:
        """Why ``problem`` is out of distribution for this model, whether
        that sends it to the vendor, and the vendor's measured held-out
        regret on its neighbours: :meth:`costlearn.serve.ood.OODVerdict.problem_reasons`
        (its parameters, returns and units)."""
        return self.ood.problem_reasons(problem, nearest, evidence)

    def choose_among(self, problem: Problem, configs, times_us: np.ndarray | None = None) -> tuple[int, str, tuple]:
        """The prune path: pick one of a given list of configs (a Triton
        autotuner's list, the configs measured on a problem) with the same
        floor as :meth:`predict`.

        With the vendor candidate in ``configs``, a tile config is chosen
        only where the problem is not sent to the vendor
        (:meth:`problem_reasons`) and it is predicted faster than the vendor
        by the calibrated margin where the vendor is beatable; else the
        vendor. Without it, the config listed first is kept where the model
        is unsure (the problem is out of distribution, whether or not the
        floor sends it to the vendor, or no config is predicted faster than
        the first by the margin) and the device can run it.

        Parameters
        ----------
        problem : Problem
        configs : sequence of configs of this model's family, length C >= 1
        times_us : ndarray of float64, shape (C,), optional
            :meth:`score_configs` of these configs, where the caller has them.

        Returns
        -------
        index : int
            Into ``configs``.
        chosen_by : {"predicted", "vendor_floor", "ood_fallback", "first_listed"}
        reasons : tuple of str
            The problem's OOD reasons (empty when in distribution).

        Raises
        ------
        As :meth:`score_configs`.
        """
        configs = list(configs)
        times = self.score_configs(problem, configs) if times_us is None else np.asarray(times_us, np.float64)
        answers = self.answers                  # one floor's verdict and policy, whatever another thread sets
        reasons, fallback, vendor_near = answers.ood.problem_reasons(problem)
        return answers.vendor_policy.choose_among(problem, configs, times, reasons, fallback, vendor_near)

    def predict(self, problem: Problem, top_k: int = 5, running_on: DeviceSpec | None = None) -> Prediction:
        """The best candidate for ``problem``, its predicted time, the top k
        and the OOD flag with reasons.

        Parameters
        ----------
        problem : Problem
            Of this model's dtype and one of its layouts
            (:meth:`problem` builds one).
        top_k : int
            Length of :attr:`Prediction.top_k`, >= 1.
        running_on : DeviceSpec, optional
            The device the kernel will run on; a different device name than
            the model's is an OOD reason.

        Raises
        ------
        TypeError, ValueError
            On a bad argument (the message names it).
        """
        key = None
        if type(problem) is Problem and type(top_k) is int and running_on is None:
            key = (problem.m, problem.n, problem.k, problem.layout, top_k, problem.epilogue)
            hit = self.cached(key)
            if hit is not None and hit.dtype == problem.dtype:
                return hit
        if key is None:                         # (with a key: a Problem and an int top_k, checked above)
            check_instance("problem", problem, Problem, "a costlearn.Problem (Predictor.problem(M, N, K))")
        self.check_served(problem)
        if key is None or top_k < 1:
            top_k = check_int("top_k", top_k, 1)
        if running_on is not None:
            check_instance("running_on", running_on, DeviceSpec,
                           "a DeviceSpec (e.g. costlearn.preset('h200')) or None")
        m, n, k, layout, epilogue = problem.m, problem.n, problem.k, problem.layout, problem.epilogue
        if key is not None:
            return self.fresh(m, n, k, layout, epilogue, top_k, problem)
        answers = self.answers                  # one floor's parts for the whole answer
        res = answers.ranker.rank_served(m, n, k, layout, epilogue, top_k + answers.ranked_more, self.cascade)
        return answers.answer(m, n, k, layout, epilogue, top_k, res, running_on, problem)

    def predict_shape(self, m: int, n: int, k: int, layout: str, epilogue: str = "none",
                      top_k: int = 5) -> Prediction:
        """:meth:`predict` of the problem (m, n, k, layout, epilogue) of this
        model's dtype, without building a Problem where the answer needs
        none (the path of :func:`costlearn.predict_best`: a problem not seen
        before skips building and checking one). A repeated problem is answered
        from the cache.

        Parameters
        ----------
        m, n, k : int
            Extents.
        layout, epilogue : str
            One the model serves (:attr:`layouts`, :attr:`epilogues`).
        top_k : int
            Length of :attr:`Prediction.top_k`, >= 1.

        Returns
        -------
        Prediction

        Raises
        ------
        TypeError, ValueError
            As :meth:`predict` of ``Problem(m, n, k, dtype, layout,
            epilogue)``: the same checks, the same messages.
        """
        if type(m) is int and type(n) is int and type(k) is int and type(top_k) is int \
                and 0 < m <= MAX_EXTENT and 0 < n <= MAX_EXTENT and 0 < k <= MAX_EXTENT and top_k >= 1 \
                and type(layout) is str and type(epilogue) is str and layout in self.layouts \
                and epilogue in self.epilogues:
            return self.cached((m, n, k, layout, top_k, epilogue)) \
                or self.fresh(m, n, k, layout, epilogue, top_k)
        return self.predict(Problem(m, n, k, self.dtype, layout, epilogue), top_k)

    def predict_many(self, problems, top_k: int = 5, running_on: DeviceSpec | None = None) -> list:
        """:meth:`predict` of each of ``problems`` (a sequence of Problem of
        this model's dtype and layouts), in order; those not answered before
        are ranked together (:meth:`costlearn.ranker.Ranker.rank_many_served`:
        one C call per layout).

        Raises
        ------
        TypeError, ValueError
            As :meth:`predict`, naming the first bad problem's position.
        """
        top_k = check_int("top_k", top_k, 1)
        if running_on is not None:
            check_instance("running_on", running_on, DeviceSpec,
                           "a DeviceSpec (e.g. costlearn.preset('h200')) or None")
        for i, q in enumerate(problems):
            if type(q) is not Problem:
                raise TypeError(f"problems[{i}]={q!r}; must be a costlearn.Problem (Predictor.problem(M, N, K))")
            self.check_served(q, f"problems[{i}]")
        return self.answers.many([(q.m, q.n, q.k, q.layout, q.epilogue) for q in problems], top_k, running_on, problems)

    def predict_shapes(self, shapes, top_k: int = 5) -> list:
        """:meth:`predict_many` of ``shapes``, each an ``(m, n, k, layout,
        epilogue)`` tuple of this model's dtype, without building a Problem
        where an answer needs none (the path of :func:`costlearn.predict_many`).

        Parameters
        ----------
        shapes : iterable of (int, int, int, str, str)
        top_k : int
            Length of each :attr:`Prediction.top_k`, >= 1.

        Returns
        -------
        list of Prediction
            In the order of ``shapes``.

        Raises
        ------
        TypeError, ValueError
            As :meth:`predict_many` of the Problems of ``shapes``, naming the
            first bad one's position; TypeError where one is not a 5-tuple.
        """
        if isinstance(shapes, (str, bytes, dict)) or not hasattr(shapes, "__iter__"):
            raise TypeError(f"shapes={shapes!r:.100}; must be a sequence of (m, n, k, layout, epilogue) tuples")
        shapes = list(shapes)
        layouts, epilogues = self.layouts, self.epilogues
        if type(top_k) is int and top_k >= 1 and all(
                type(s) is tuple and len(s) == 5 and type(s[0]) is int and type(s[1]) is int and type(s[2]) is int
                and 0 < s[0] <= MAX_EXTENT and 0 < s[1] <= MAX_EXTENT and 0 < s[2] <= MAX_EXTENT
                and type(s[3]) is str and type(s[4]) is str and s[3] in layouts and s[4] in epilogues
                for s in shapes):
            return self.answers.many(shapes, top_k, None, None)
        problems = []
        for i, s in enumerate(shapes):
            if not isinstance(s, (tuple, list)) or len(s) != 5:
                raise TypeError(f"shapes[{i}]={s!r}; must be an (m, n, k, layout, epilogue) tuple")
            try:
                problems.append(Problem(s[0], s[1], s[2], self.dtype, s[3], s[4]))
            except (TypeError, ValueError) as e:
                raise type(e)(f"shapes[{i}]: {e}") from None
            self.check_served(problems[-1], f"shapes[{i}]")
        return self.predict_many(problems, top_k)

    def predict_best(self, m, n, k, *, layout: str | None = None, top_k: int = 5,
                     running_on: DeviceSpec | None = None, epilogue: str = "none") -> Prediction:
        """:meth:`predict` of :meth:`problem` (M, N, K); a repeated problem
        is answered from a cache."""
        if type(m) is int and type(n) is int and type(k) is int and type(top_k) is int and running_on is None \
                and type(epilogue) is str and (layout is None or type(layout) is str):
            hit = self.cached((m, n, k, layout or self.layouts[0], top_k, epilogue))
            if hit is not None:
                return hit
        return self.predict(self.problem(m, n, k, layout, epilogue), top_k, running_on)



PREDICTORS = LoadedModels()
"""The process's Predictors (:class:`costlearn.model.store.LoadedModels`,
keyed by (:class:`~costlearn.model.store.ModelKey`, store key)): what
:func:`load_predictor` loads, and the hot path of a repeated
:func:`costlearn.serve.predict.predict_best` looks up. A predictor whose
model a retrain replaced is dropped by
its staleness rule (:meth:`~costlearn.model.store.LoadedModels.watch`): its
answers (the one answer cache, :attr:`Predictor.cached`) go with it."""


def clear_cache() -> None:
    """Forget loaded predictors (and so their answers) and the default model store
    (:func:`costlearn.model.store.default_store`), so ``$COSTLEARN_MODELS``
    is read again."""
    PREDICTORS.clear()


def load_predictor(device=None, family: str = "gemm", dtype: str = "float32", models_dir=None) -> Predictor:
    """The process's Predictor for (device, family, dtype, models_dir),
    loaded once: names that resolve to the same artifact folder share one
    (:meth:`costlearn.model.store.LoadedModels.load`).

    With no ``device`` named, the store's only model of the family and
    dtype answers; where that is another device's than this machine's (as
    the user cache last recorded it: :func:`costlearn.core.keyed_cache.recorded_local_device`,
    never probed here), a RuntimeWarning says so, once per model folder in
    the process (the command line prints the same as a note).

    Raises
    ------
    As :func:`costlearn.model.store.resolve_model` and :class:`Predictor`.
    """
    pred = PREDICTORS.load(ModelKey.of(device, family, dtype), models_dir, Predictor)
    if device is None and pred.artifact.path not in _SAID_ANOTHER_DEVICE:
        _SAID_ANOTHER_DEVICE.add(pred.artifact.path)
        here = recorded_local_device()
        if here is not None and here.get("slug") != pred.spec.slug:
            warnings.warn(f"costlearn: no device named, so the store's only {pred.family}/{pred.dtype} model "
                          f"answers, {pred.device}'s (trained on {pred.spec.name}); this machine's device is "
                          f"{here.get('name')} ({here['slug']}, as the user cache last recorded it): its times "
                          "are the other device's (name device= to choose a model, or collect and train here)",
                          RuntimeWarning, stacklevel=3)
    return pred


_SAID_ANOTHER_DEVICE: set = set()
"""The model folders :func:`load_predictor` warned of as another device's (once each per process)."""
