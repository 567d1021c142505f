"""The OOD verdict: why a prediction of one model artifact is a guess
(design.md, "Predictor": the OOD flag and its reasons).

:class:`OODVerdict` gathers the reasons a :class:`~costlearn.serve.predictor.Predictor`
attaches to a :class:`~costlearn.serve.prediction.Prediction`: the model's
identity (another kernel template or costlearn version than at training, a
zero-shot transfer), the problem's place against the training envelope and
the held-out evidence near it (:mod:`costlearn.model.vendor_floor`), the
candidate rule's level, a predicted time beyond the device's peak or memory
bandwidth, and another device than the model's. It says whether the problem
is sent to the vendor (``ood_fallback``); the tile-or-vendor decision itself
is :mod:`costlearn.serve.vendor_policy`'s.
"""
from __future__ import annotations

from costlearn.core.device import DeviceSpec
from costlearn.core.dtypes import get_dtype
from costlearn.core.problem import Problem
from costlearn.core.version import __version__
from costlearn.model.transfer import zero_shot_reason
from costlearn.ranker.base import LEVEL_ALL, LEVEL_FITTING

__all__ = ["OODVerdict", "identity_reasons"]


def identity_reasons(artifact) -> tuple:
    """Why every answer of ``artifact``'s model is a guess here: a device
    folder named for another device than the one its sidecar records
    (the answers are the recorded device's), another kernel template or
    costlearn version than at training, a zero-shot transfer from another
    device (:func:`costlearn.model.transfer.zero_shot_reason`); empty
    otherwise."""
    side = artifact.sidecar
    reasons = []
    folder, spec = artifact.device, artifact.spec
    if folder != spec.slug:
        reasons.append(f"the {folder} model's sidecar records training on {spec.name} ({spec.slug}), not "
                       f"{folder}: its times are that device's")
    if side.get("template_hash") not in artifact.family.template_hashes:
        reasons.append(f"kernel template {side.get('template_hash')} at training, "
                       f"{artifact.family.template_hash} now")
    if side.get("costlearn_version") != __version__:
        reasons.append(f"trained with costlearn {side.get('costlearn_version')}, running {__version__}")
    zero_shot = zero_shot_reason(side.get("transfer"))
    if zero_shot:
        reasons.append(zero_shot)
    return tuple(reasons)


class OODVerdict:
    """The reasons a problem is out of distribution for one model artifact.

    Parameters
    ----------
    artifact : costlearn.model.artifact.Artifact
    floor : costlearn.model.vendor_floor.VendorFloor
        The floor whose held-out evidence and calibration the verdict uses.
    uses_evidence : bool
        Whether the floor's evidence can change an answer (the model has a
        vendor candidate, or the floor flags unsure problems); where not, the
        evidence is not looked up.

    Attributes
    ----------
    identity_reasons : tuple of str
        :func:`identity_reasons` of the artifact.
    level_parts : dict
        The words of :meth:`level_symptom` around the problem's ``MxNxK``,
        by level: ``{level: (head, tail)}``.
    """

    def __init__(self, artifact, floor, uses_evidence: bool):
        self.envelope, self.coverage, self.spec = artifact.envelope, artifact.coverage, artifact.spec
        self.floor = floor
        self.uses_evidence = bool(uses_evidence)
        self.n_candidates = len(artifact.configs)
        self.identity_reasons = identity_reasons(artifact)
        # the words of level_symptom around the problem's MxNxK, by level
        self.level_parts = {LEVEL_ALL: ("no candidate's block tile fits ",
                                        f"; ranked all {self.n_candidates} candidates anyway")}
        if self.coverage is not None:
            self.level_parts[LEVEL_FITTING] = (f"no candidate tile config was measured within "
                                               f"{self.coverage.margin_log2:g} doubling(s) of ",
                                               "; ranked every fitting one")
        predicts_time = artifact.sidecar.get("predicts_time")
        # Scores in microseconds can be checked against the device's peak (a guess beyond it is flagged).
        self._peak_flop_per_us = self.spec.peak_gflops_for(artifact.dtype) * 1e3 if predicts_time else None
        # ... and against the DRAM bandwidth, where A, B and C (read once, written once) exceed the L2
        self._element_bytes = get_dtype(artifact.dtype).element_bytes
        self._bytes_per_us = self.spec.memory_bandwidth_gbps * 1e3 if predicts_time else None
        self._l2_bytes = self.spec.l2_bytes

    @property
    def time_limits(self) -> tuple:
        """What :meth:`time_reasons` checks a predicted time against: (peak
        flop per microsecond, DRAM bytes per microsecond, L2 bytes, element
        bytes), a rate 0.0 where it is not checked (a model that predicts no
        time); the native ranker's ``tr_*`` (its DECISION_TIME bit)."""
        return (self._peak_flop_per_us or 0.0, self._bytes_per_us or 0.0, float(self._l2_bytes),
                float(self._element_bytes))

    def problem_reasons(self, problem: Problem, nearest: tuple | None = None,
                        evidence: tuple | None = None) -> tuple[list, bool, float]:
        """Why ``problem`` is out of distribution (the extent envelope and the
        held-out evidence near it, :mod:`costlearn.learn.holdout`), whether
        that sends it to the vendor, and the vendor's measured held-out
        regret on its neighbours.

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
        if not self.uses_evidence:
            return reasons, fallback, float("nan")     # nothing the evidence could change: skip the lookup
        vendor_near, model_near = evidence if evidence is not None else \
            self.floor.near(problem.m, problem.n, problem.k, problem.layout)
        unsure = self.floor.unsure_reason(model_near)
        if unsure:
            reasons.append(unsure)
            fallback = True
        return reasons, fallback, vendor_near

    def decided_reasons(self, m: int, n: int, k: int, nearest: tuple, model_near: float, outside: bool,
                        unsure: bool) -> list:
        """:meth:`problem_reasons`' reasons for the problem of extents ``m,
        n, k`` where the native ranker made the decision
        (:attr:`costlearn.ranker.RankResult.decision`): the words of those it
        found, ``outside`` the envelope (``nearest``: the nearest training
        shape's index and distance) and ``unsure`` by the held-out evidence
        (``model_near``: the model's regret there)."""
        reasons = self.envelope.reasons(m, n, k, nearest) if outside else []
        if unsure:
            reasons.append(self.floor.unsure_reason(model_near))
        return reasons

    def level_symptom(self, m: int, n: int, k: int, level: int) -> str | None:
        """The sentence a prediction for the problem of extents ``m, n, k``
        carries when the candidate rule chose at ``level``
        (:attr:`costlearn.ranker.RankResult.level`); None at level 0."""
        parts = self.level_parts.get(level)
        return None if parts is None else f"{parts[0]}{m}x{n}x{k}{parts[1]}"

    def time_reasons(self, m: int, n: int, k: int, best_us: float) -> list:
        """Why a predicted ``best_us`` (microseconds) for the problem of
        extents ``m, n, k`` cannot be right: faster than the device's peak
        allows, or than its memory bandwidth allows where A, B and C exceed
        the L2; empty for a model that predicts no time."""
        reasons = []
        if self._peak_flop_per_us is not None:
            flops = 2 * m * n * k
            if best_us * self._peak_flop_per_us < flops:
                reasons.append(f"the predicted {best_us:.4g} us is faster than the device's peak allows "
                               f"({flops / best_us / 1e6:.4g} TFLOP/s > its {self._peak_flop_per_us / 1e6:.4g} "
                               "TFLOP/s)")
        if self._bytes_per_us is not None:
            traffic_bytes = float(m * k + k * n + m * n) * self._element_bytes
            if traffic_bytes > self._l2_bytes and best_us * self._bytes_per_us < traffic_bytes:
                reasons.append(f"the predicted {best_us:.4g} us is faster than the memory bandwidth allows (A, B "
                               f"and C once: {traffic_bytes / 1e9:.4g} GB at {self.spec.memory_bandwidth_gbps:.4g} "
                               f"GB/s take {traffic_bytes / self._bytes_per_us:.4g} us)")
        return reasons

    def served_reasons(self, running_on: DeviceSpec | None) -> list:
        """The reasons every answer carries where it runs on ``running_on``:
        :attr:`identity_reasons`, and another device than the model's."""
        reasons = list(self.identity_reasons)
        if running_on is not None and running_on.name != self.spec.name:
            reasons.append(f"trained on {self.spec.name}, running on {running_on.name}")
        return reasons
