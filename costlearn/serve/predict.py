"""Predictor: rank a model's candidate configs for a problem in microseconds,
and say when the answer is a guess (design.md, "Predictor").

A :class:`Predictor` combines a model artifact's ranker
(:mod:`costlearn.ranker`) and training envelope (:mod:`costlearn.model.envelope`)
into a :class:`Prediction`. Measuring the top candidates and the tuning
database are composed on top of it by :mod:`costlearn.serve.tuning`.
"""
from __future__ import annotations

import numpy as np

from costlearn.core.device import DeviceSpec
from costlearn.core.dtypes import get_dtype
from costlearn.families import family_of, get_family
from costlearn.features import CandidateFeatures, ConfigTable, get_feature_set
from costlearn.model import artifact as _artifact
from costlearn.model.store import LoadedModels, default_store, resolve_model, store_key
from costlearn.model.transfer import zero_shot_reason
from costlearn.model.vendor import VendorEstimate, problem_features_rows
from costlearn.serve.prediction import Prediction
from costlearn.core.problem import Problem
from costlearn.ranker import make_ranker
from costlearn.ranker.base import LEVEL_ALL, LEVEL_FITTING
from costlearn.collect.space import tile_fits_problem
from costlearn.serve.tuning import tune
from costlearn.core.util import check_instance, check_int
from costlearn.core.version import __version__

__all__ = ["Prediction", "Predictor", "predict_best", "predict_many", "clear_cache", "default_store",
           "resolve_model", "load_predictor"]


class Predictor:
    """Ranks the candidate configs of one model artifact.

    A cold call (a problem not seen) is one ranker call (``costlearn_rank``
    in C: the candidate rule, the features, the cascaded trees or the
    shortlist table, the sort, the nearest training shape and the held-out
    evidence near the problem) plus building the :class:`Prediction`; a
    repeated problem is a dictionary lookup.

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
        transfer from another device: :func:`costlearn.model.transfer.zero_shot_reason`),
        else empty.

    Raises
    ------
    costlearn.model.artifact.ArtifactError
        If the artifact is missing or does not match this code.
    """

    RESULT_CACHE_SIZE = 1 << 16

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
        self.floor = art.floor                      # makes the ranker (see the setter)
        side = art.sidecar
        reasons = []
        if side.get("template_hash") not in art.family.template_hashes:
            reasons.append(f"kernel template {side.get('template_hash')} at training, "
                           f"{art.family.template_hash} now")
        if side.get("costlearn_version") != __version__:
            reasons.append(f"trained with costlearn {side.get('costlearn_version')}, running {__version__}")
        zero_shot = zero_shot_reason(side.get("transfer"))
        if zero_shot:
            reasons.append(zero_shot)
        self.identity_reasons = tuple(reasons)
        # Scores in microseconds can be checked against the device's peak (a guess beyond it is flagged).
        self._peak_flop_per_us = self.spec.peak_gflops_for(self.dtype) * 1e3 if side.get("predicts_time") \
            else None
        # ... and against the DRAM bandwidth, where A, B and C (read once, written once) exceed the L2
        self._element_bytes = get_dtype(self.dtype).element_bytes
        self._bytes_per_us = self.spec.memory_bandwidth_gbps * 1e3 if side.get("predicts_time") else None
        self.source = f"{self.device}/{self.family}/{self.dtype} model {art.model_sha256[:12]}"

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
        self.ranker = make_ranker(art.candidate_features(), art.scorer, art.envelope, art.family.fit_floors(art.spec),
                                  name, coverage=art.coverage, vendor=self.vendor_index, evidence=floor,
                                  shortlist=art.shortlist if shortlist else None)
        # the floor's evidence is looked up only where it can change an answer
        self._uses_evidence = self.vendor_index is not None or floor.unsure_regret != float("inf")
        vm = art.vendor_model
        self._vendor_sums = self.ranker.forest_sums(vm.forest, vm.bounds) \
            if vm is not None and self.vendor_index is not None else None
        self._results = {}

    def vendor_estimate(self, problem: Problem):
        """The vendor model's estimate for ``problem``
        (:class:`~costlearn.model.vendor.VendorEstimate`: log2 of the best tile
        config's time over the vendor's, and its members' deviation), None
        where the artifact has no vendor model (or no vendor candidate)."""
        if self._vendor_sums is None:
            return None
        return self.artifact.vendor_model.estimate_problem(problem.m, problem.n, problem.k, problem.layout,
                                                           problem.epilogue, self._vendor_sums)

    def vendor_estimates(self, problems) -> list:
        """:meth:`vendor_estimate` of each of ``problems`` in one evaluation
        (the batch path of :meth:`predict_many`): a list of VendorEstimate,
        or of None without a vendor model."""
        problems = list(problems)
        if self._vendor_sums is None or not problems:
            return [None] * len(problems)
        mean, sd = self.artifact.vendor_model.estimate(problem_features_rows(problems), self._vendor_sums)
        return [VendorEstimate(a, b) for a, b in zip(mean.tolist(), sd.tolist())]

    def cached(self, m: int, n: int, k: int, layout: str, top_k: int, epilogue: str = "none"):
        """The Prediction given earlier for (M, N, K, layout, top_k,
        epilogue), or None: the repeated-problem path of :func:`predict_best`."""
        return self._results.get((m, n, k, layout, top_k, epilogue))

    def clear_results(self) -> None:
        """Forget the answers cached for repeated problems (the next call of
        each problem ranks afresh; benchmarks of cold calls use this)."""
        self._results.clear()

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
        return np.asarray(tile_fits_problem(bm, bn, bk, problem.m, problem.n, problem.k, self.ranker.tile_floors), bool)

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
        level 0."""
        m, n, k = problem.m, problem.n, problem.k
        if level == LEVEL_FITTING:
            return (f"no candidate tile config was measured within {self.coverage.margin_log2:g} doubling(s) "
                    f"of {m}x{n}x{k}; ranked every fitting one")
        if level == LEVEL_ALL:
            return f"no candidate's block tile fits {m}x{n}x{k}; ranked all {len(self.configs)} candidates anyway"
        return None

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
        return [self.configs[i] for i in res.order.tolist()], np.exp2(res.scores)

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
        """Why ``problem`` is out of distribution for this model (the extent
        envelope and the held-out evidence near it, :mod:`costlearn.learn.holdout`),
        whether that sends it to the vendor, and the vendor's measured
        held-out regret on its neighbours.

        Parameters
        ----------
        problem : Problem
        nearest : (int, float), optional
            The nearest training shape's index and distance, where the ranker
            computed them.
        evidence : (float, float), optional
            :meth:`costlearn.model.vendor_floor.VendorFloor.near` of the problem (vendor,
            model), where the ranker computed it.

        Returns
        -------
        reasons : list of str
            Empty when in distribution.
        fallback : bool
            The held-out evidence flags it, or it is outside the envelope and
            the floor's calibration sends such problems to the vendor
            (``ood_fallback``).
        vendor_near : float
            NaN without evidence.
        """
        reasons = self.envelope.reasons(problem.m, problem.n, problem.k, nearest)
        fallback = bool(reasons) and self.floor.ood_fallback
        if not self._uses_evidence:
            return reasons, fallback, float("nan")     # nothing the evidence could change: skip the lookup
        vendor_near, model_near = evidence if evidence is not None else \
            self.floor.near(problem.m, problem.n, problem.k, problem.layout)
        unsure = self.floor.unsure_reason(model_near)
        if unsure:
            reasons.append(unsure)
            fallback = True
        return reasons, fallback, vendor_near

    def choose_among(self, problem: Problem, configs, times_us: np.ndarray | None = None) -> tuple[int, str, tuple]:
        """The prune path: pick one of a given list of configs (a Triton
        autotuner's list, the configs measured on a problem) with the same
        floor as :meth:`predict`.

        With the vendor candidate in ``configs``, a tile config is chosen
        only where the problem is not sent to the vendor
        (:meth:`problem_reasons`) and it is predicted faster than the vendor
        by the calibrated margin where the vendor is beatable; else the
        vendor. Without it, the config listed first is
        kept where the model is unsure (the problem is out of distribution,
        or no config is predicted faster than the first by the margin).

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
        reasons, fallback, vendor_near = self.problem_reasons(problem)
        lt = np.log2(times)
        best = int(np.argmin(lt))
        vid = self.artifact.family.vendor_config_id
        ven = [i for i, c in enumerate(configs) if vid is not None and c.config_id == vid]
        if ven:
            v = ven[0]
            tiles = [i for i in range(len(configs)) if i != v]
            if not tiles:
                return v, "vendor_floor", tuple(reasons)
            t = min(tiles, key=lambda i: (lt[i], i))
            if fallback:
                return v, "ood_fallback", tuple(reasons)
            if self.floor.keeps_vendor(float(lt[t] - lt[v]), vendor_near, self.vendor_estimate(problem)):
                return v, "vendor_floor", tuple(reasons)
            return t, "predicted", ()
        if best != 0 and np.isfinite(lt[0]) and (fallback or not lt[best] - lt[0] < -self.floor.margin_log2):
            return 0, "first_listed", tuple(reasons)
        return best, "predicted", tuple(reasons)

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
            hit = self._results.get(key)
            if hit is not None and hit.dtype == problem.dtype:
                return hit
        check_instance("problem", problem, Problem, "a costlearn.Problem (Predictor.problem(M, N, K))")
        self.check_served(problem)
        top_k = check_int("top_k", top_k, 1)
        if running_on is not None:
            check_instance("running_on", running_on, DeviceSpec,
                           "a DeviceSpec (e.g. costlearn.preset('h200')) or None")
        res = self.ranker.rank(problem, None, top=top_k + (self.vendor_index is not None), cascade=self.cascade)
        pred = self._prediction(problem, top_k, running_on, res)
        if key is not None:
            if len(self._results) >= self.RESULT_CACHE_SIZE:
                self._results.clear()
            self._results[key] = pred
        return pred

    def _prediction(self, problem: Problem, top_k: int, running_on, res, estimate=False) -> Prediction:
        """The Prediction of ``problem`` from its ranking ``res`` (a
        :class:`~costlearn.ranker.RankResult` of the candidate rule): the
        reasons, the vendor floor, the top k; ``estimate``: its
        :meth:`vendor_estimate` where the caller has it."""
        m, n, k = problem.m, problem.n, problem.k
        vi = self.vendor_index
        reasons, fallback, vendor_near = self.problem_reasons(problem, (res.nearest, res.nearest_distance),
                                                              (res.vendor_near, res.model_near))
        # symptoms: flagged; they send the problem to the vendor only through the calibration (on the A100's
        # logs the model's own pick lost 7.8 % where they fired, cuBLAS 25 %)
        if res.level:
            reasons.append(self.level_symptom(problem, res.level))
        order, scores = res.order.tolist(), res.scores.tolist()
        best_us = 2.0 ** scores[0]
        if self._peak_flop_per_us is not None:
            flops = 2 * m * n * k
            if best_us * self._peak_flop_per_us < flops:
                reasons.append(f"the predicted {best_us:.4g} us is faster than the device's peak allows "
                               f"({flops / best_us / 1e6:.4g} TFLOP/s > {self._peak_flop_per_us / 1e6:.4g})")
        if self._bytes_per_us is not None:
            traffic_bytes = float(m * k + k * n + m * n) * self._element_bytes
            if traffic_bytes > self.spec.l2_bytes and best_us * self._bytes_per_us < traffic_bytes:
                reasons.append(f"the predicted {best_us:.4g} us is faster than the memory bandwidth allows (A, B "
                               f"and C once: {traffic_bytes / 1e9:.4g} GB at {self.spec.memory_bandwidth_gbps:.4g} "
                               f"GB/s take {traffic_bytes / self._bytes_per_us:.4g} us)")
        chosen_by, ratio, est = "predicted", float("nan"), None
        if vi is not None:
            if vi in order:
                v_score = scores[order.index(vi)]
            else:
                only = np.zeros(len(self.configs), bool)
                only[vi] = True
                v_score = float(self.ranker.rank(problem, only, top=1, cascade=False).scores[0])
            tile = 0 if order[0] != vi else (1 if len(order) > 1 else None)
            if tile is None:
                chosen_by = "ood_fallback" if fallback else "vendor_floor"
            else:
                ratio = 2.0 ** (scores[tile] - v_score)
                est = self.vendor_estimate(problem) if estimate is False else estimate
                doubt = self.floor.estimate_reason(est)
                if doubt:
                    reasons.append(doubt)
                if fallback:
                    chosen_by = "ood_fallback"
                elif self.floor.keeps_vendor(scores[tile] - v_score, vendor_near, est):
                    chosen_by = "vendor_floor"
                if chosen_by == "predicted":            # the best tile first, the rest in order
                    if tile:
                        order = [order[1], order[0]] + order[2:]
                        scores = [scores[1], scores[0]] + scores[2:]
                elif order[0] != vi:                    # the vendor first, the rest in order
                    j = order.index(vi) if vi in order else None
                    if j is None:
                        order, scores = [vi] + order, [v_score] + scores
                    else:
                        order = [vi] + order[:j] + order[j + 1:]
                        scores = [v_score] + scores[:j] + scores[j + 1:]
        reasons += self.identity_reasons
        if running_on is not None and running_on.name != self.spec.name:
            reasons.append(f"trained on {self.spec.name}, running on {running_on.name}")
        configs = self.configs
        top = tuple([(configs[i], 2.0 ** s_) for i, s_ in zip(order[:top_k], scores[:top_k])])
        return Prediction(top[0][0], top[0][1], top, bool(reasons), tuple(reasons), m, n, k, self.dtype,
                          problem.layout, self.family, self.device, chosen_by, ratio, self.floor.margin_log2,
                          epilogue=problem.epilogue,
                          tile_vendor_estimate=() if est is None else (2.0 ** est.mean_log2,
                                                                       2.0 ** (est.mean_log2 - 2 * est.sd_log2),
                                                                       2.0 ** (est.mean_log2 + 2 * est.sd_log2)))

    def predict_many(self, problems, top_k: int = 5, running_on: DeviceSpec | None = None) -> list:
        """:meth:`predict` of each of ``problems`` (a sequence of Problem of
        this model's dtype and layouts), in order; those not answered before
        are ranked together (:meth:`costlearn.ranker.Ranker.rank_many`: one
        C call per layout).

        Raises
        ------
        TypeError, ValueError
            As :meth:`predict`, naming the first bad problem's position.
        """
        top_k = check_int("top_k", top_k, 1)
        if running_on is not None:
            check_instance("running_on", running_on, DeviceSpec,
                           "a DeviceSpec (e.g. costlearn.preset('h200')) or None")
        out: list = [None] * len(problems)
        todo: dict = {}                                 # problem key -> positions; a repeat is ranked once
        for i, q in enumerate(problems):
            if type(q) is not Problem:
                raise TypeError(f"problems[{i}]={q!r}; must be a costlearn.Problem (Predictor.problem(M, N, K))")
            self.check_served(q, f"problems[{i}]")
            key = (q.m, q.n, q.k, q.layout, top_k, q.epilogue)
            hit = self._results.get(key) if running_on is None else None
            if hit is not None:
                out[i] = hit
            else:
                todo.setdefault(key, []).append(i)
        if todo:
            first = [problems[at[0]] for at in todo.values()]
            ranked = self.ranker.rank_many(first, top=top_k + (self.vendor_index is not None), cascade=self.cascade)
            for (key, at), q, res, est in zip(todo.items(), first, ranked, self.vendor_estimates(first)):
                pred = self._prediction(q, top_k, running_on, res, est)
                for i in at:
                    out[i] = pred
                if running_on is None:
                    if len(self._results) >= self.RESULT_CACHE_SIZE:
                        self._results.clear()
                    self._results[key] = pred
        return out

    def predict_best(self, m, n, k, *, layout: str | None = None, top_k: int = 5,
                     running_on: DeviceSpec | None = None, epilogue: str = "none") -> Prediction:
        """:meth:`predict` of :meth:`problem` (M, N, K); a repeated problem
        is answered from a cache."""
        if type(m) is int and type(n) is int and type(k) is int and type(top_k) is int and running_on is None \
                and type(epilogue) is str and (layout is None or type(layout) is str):
            hit = self._results.get((m, n, k, layout or self.layouts[0], top_k, epilogue))
            if hit is not None:
                return hit
        return self.predict(self.problem(m, n, k, layout, epilogue), top_k, running_on)


_LOADED = LoadedModels()
"""The process's Predictors (:class:`costlearn.model.store.LoadedModels`)."""


def clear_cache() -> None:
    """Forget loaded predictors (after retraining in the same process) and
    the default model store (:func:`default_store`), so ``$COSTLEARN_MODELS``
    is read again."""
    _LOADED.clear()


def load_predictor(device=None, family: str = "gemm", dtype: str = "float32", models_dir=None) -> Predictor:
    """The process's Predictor for (device, family, dtype, models_dir),
    loaded once: names that resolve to the same artifact folder share one
    (:meth:`costlearn.model.store.LoadedModels.load`).

    Raises
    ------
    As :func:`resolve_model` and :class:`Predictor`.
    """
    return _LOADED.load(device, family, dtype, models_dir, Predictor)


def predict_best(M, N, K, dtype: str = "float32", device=None, *, family: str = "gemm", layout: str = "NN",
                 top_k: int = 5, models_dir=None, running_on: DeviceSpec | None = None, measure_top_k: int = 0,
                 backend=None, tuning_db=None, epilogue: str = "none") -> Prediction:
    """Predict the fastest config for C[M,N] = op(A)[M,K] @ op(B)[K,N].

    A problem seen before in the process is answered from a cache (about a
    microsecond); an unseen one costs tens of microseconds, a deep model's
    through its shortlist table (:mod:`costlearn.model.shortlist`);
    ``scripts/bench_predict.py`` measures both. :func:`predict_many` answers
    many problems in one call.

    Parameters
    ----------
    M, N, K : int
        Problem extents, each >= 1 (Python or numpy integers; not bool or
        float).
    dtype : str
        Element type (:data:`costlearn.core.dtypes.DTYPES`), one the model exists for.
    device : str or DeviceSpec, optional
        Model to use: a device folder name under the models directory (e.g.
        ``"h200"``), or a DeviceSpec whose slug names it. Default: the only
        device with a model of this family and dtype.
    family : str
        Kernel family (:data:`costlearn.families.FAMILIES`).
    layout : str
        ``NN``, ``NT``, ``TN`` or ``TT`` (A then B: N row-major, T
        column-major); one the model was trained on.
    epilogue : str
        What the fused kernel computes after A @ B: ``none``, ``bias`` (a
        length-N vector added to every row), ``bias_relu`` or ``bias_gelu``
        (tanh form) (:data:`costlearn.core.problem.EPILOGUES`); one the model was
        trained on.
    top_k : int
        Length of :attr:`Prediction.top_k`.
    models_dir : path, optional
        Model store; default :func:`default_store` (``$COSTLEARN_MODELS``,
        read at the first call, or the source tree's ``models/``).
    running_on : DeviceSpec, optional
        The device the kernel will run on; a different device name than the
        model's is an OOD reason.
    measure_top_k : int
        0 (default): predict only. k >= 1: *filter, then measure* the model's
        top k on ``backend`` (the local device by default) and return the
        fastest, recorded in the tuning database (:mod:`costlearn.serve.tuning`):
        the top k tile configs, and the vendor library beside them where the
        family has one.
    backend : costlearn.collect.backends.Backend, optional
        Where to measure; ``get_backend("auto")`` by default. Its device is
        ``running_on`` when that is None.
    tuning_db : path or costlearn.serve.tuning_db.TuningDB, optional
        Tuning database to consult first and write to (with
        ``measure_top_k`` the default database is used when None).

    Returns
    -------
    Prediction

    Raises
    ------
    TypeError
        If an extent is not an integer (bool and float included), or an
        argument has the wrong type.
    ValueError
        If an extent is < 1 or >= 2**31, the dtype, layout, epilogue or family
        is unknown or not served, ``top_k`` < 1, ``measure_top_k`` < 0, or there
        is no model for ``device`` (the message lists the models present).
    RuntimeError
        If ``measure_top_k`` is set and none of the configs measured correctly.
    costlearn.model.artifact.ArtifactError
        If the model does not match this code.

    Examples
    --------
    >>> import costlearn
    >>> p = costlearn.predict_best(1, 4096, 4096, device="h200")  # doctest: +SKIP
    >>> p.config.config_id, p.time_us, p.ood                      # doctest: +SKIP
    """
    # Hot path: a problem this process has answered, plain ints, no options.
    if type(M) is int and type(N) is int and type(K) is int and type(top_k) is int and type(measure_top_k) is int \
            and not measure_top_k and running_on is None and backend is None and tuning_db is None \
            and type(layout) is str and type(epilogue) is str:
        pred = _LOADED.get((device, family, dtype, store_key(models_dir))) \
            if (device is None or type(device) is str) and (models_dir is None or type(models_dir) is str) else None
        if pred is not None:
            hit = pred.cached(M, N, K, layout, top_k, epilogue)
            if hit is not None:
                return hit
    problem = Problem(M, N, K, dtype, layout, epilogue)
    top_k = check_int("top_k", top_k, 1)
    measure_top_k = check_int("measure_top_k", measure_top_k, 0)
    if running_on is not None:
        check_instance("running_on", running_on, DeviceSpec, "a DeviceSpec (e.g. costlearn.preset('h200')) or None")
    if backend is not None and not hasattr(backend, "spec"):
        raise TypeError(f"backend={backend!r}; must be a costlearn Backend "
                        "(costlearn.collect.backends.get_backend) or None")
    get_family(family).check_problem(problem)
    pred = load_predictor(device, family, dtype, models_dir)
    if measure_top_k or tuning_db is not None:
        return tune(pred, problem, top_k=top_k, measure_top_k=measure_top_k, running_on=running_on,
                    backend=backend, tuning_db=tuning_db)
    return pred.predict(problem, top_k, running_on)


def predict_many(problems, dtype: str = "float32", device=None, *, family: str = "gemm", top_k: int = 5,
                 models_dir=None, running_on: DeviceSpec | None = None) -> list:
    """:func:`predict_best` for many problems in one call, for a compiler
    that knows all its shapes at once (a graph's fused groups).

    The problems not answered before in the process are ranked together:
    one C call per layout among them (:meth:`Predictor.predict_many`);
    ``scripts/bench_predict.py`` measures a 30-problem batch.

    Parameters
    ----------
    problems : sequence of tuple, or ndarray of int, shape (n, 3)
        ``(M, N, K)``, ``(M, N, K, layout)`` or ``(M, N, K, layout,
        epilogue)`` per problem (the layout is ``"NN"`` and the epilogue
        ``"none"`` where not given), or :class:`~costlearn.core.problem.Problem`
        objects of ``dtype``.
    dtype, device, family, top_k, models_dir, running_on
        As :func:`predict_best`, for every problem.

    Returns
    -------
    list of Prediction
        In the order of ``problems``.

    Raises
    ------
    TypeError
        If ``problems`` is not a sequence of tuples (a string, a mapping, a
        generator) or an integer array of shape (n, 3), or an extent is not
        an integer (the message names the problem's position).
    ValueError
        As :func:`predict_best`, naming the problem's position.

    Examples
    --------
    >>> import costlearn
    >>> preds = costlearn.predict_many([(8, 4096, 4096), (8, 4096, 11008, "NT")], device="h200")  # doctest: +SKIP
    >>> [p.config.config_id for p in preds]                                                        # doctest: +SKIP
    """
    if isinstance(problems, np.ndarray):
        if problems.ndim != 2 or problems.shape[1] not in (3, 4) or not np.issubdtype(problems.dtype, np.integer):
            raise TypeError(f"problems: an array of shape {problems.shape} dtype {problems.dtype}; an array must be "
                            "integers of shape (n, 3): M, N, K per row")
        problems = problems.tolist()
    if isinstance(problems, (str, bytes, dict)) or not hasattr(problems, "__len__") \
            or not hasattr(problems, "__getitem__"):
        raise TypeError(f"problems={problems!r}; must be a list of (M, N, K) or (M, N, K, layout) tuples "
                        "(or an integer array of shape (n, 3))")
    fam = get_family(family)
    built = []
    for i, t in enumerate(problems):
        if isinstance(t, Problem):
            if t.dtype != dtype:
                raise ValueError(f"problems[{i}] {t}: dtype {t.dtype!r}, the call's is {dtype!r}")
            q = t
        elif not isinstance(t, (tuple, list)) or len(t) not in (3, 4, 5):
            raise TypeError(f"problems[{i}]={t!r}; must be an (M, N, K), (M, N, K, layout) or (M, N, K, layout, "
                            "epilogue) tuple")
        else:
            q = None
        try:
            if q is None:
                q = Problem(t[0], t[1], t[2], dtype, t[3] if len(t) >= 4 else "NN", t[4] if len(t) == 5 else "none")
            fam.check_problem(q)
        except (TypeError, ValueError) as e:
            raise type(e)(f"problems[{i}]: {e}") from None
        built.append(q)
    return load_predictor(device, family, dtype, models_dir).predict_many(built, top_k, running_on)

