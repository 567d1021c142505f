"""The vendor floor as served: the calibrated decision between the best tile
config and the vendor library, and the held-out evidence near a problem
(design.md, "What "good" means for a user": the honest score, the floor, the
coverage).

:class:`VendorFloor` reads the ``floor`` of a model's sidecar, which
:func:`costlearn.learn.holdout.calibrate_floor` wrote at training (that
module's docstring says how the evidence is gathered and the thresholds
calibrated). Here: the rule a query runs (:meth:`VendorFloor.keeps_vendor`),
its OOD reasons, and the evidence near a problem
(:func:`costlearn.model.envelope.nearest_evidence`, shared with the rankers).
"""
from __future__ import annotations

import math

import numpy as np

from costlearn.core.problem import MAX_EXTENT
from costlearn.model.envelope import embed, embed_query, nearest_evidence

__all__ = ["FLOOR_VERSION", "NEIGHBORS", "MAX_NEIGHBORS", "ESTIMATE_RULE", "ESTIMATE_UNSURE_QUANTILE", "estimate_wins",
           "estimate_doubt", "plain_floor", "VendorFloor", "NEAR_LOG2", "MIN_TRANSFER_PROBLEMS"]

FLOOR_VERSION = 1
NEIGHBORS = 5
"""Held-out problems a decision looks at (the nearest of the same layout)."""
MAX_NEIGHBORS = 10_000
"""Most held-out problems a floor may look at (a file asking more is damaged;
the C ranker counts them in an int32)."""
ESTIMATE_UNSURE_QUANTILE = 0.95
"""A problem is flagged (an OOD reason, not a decision) where the vendor
model's deviation over its distance from a tie, ``sd / |mean|``, is above this
quantile of the held-out problems'. It marks doubt about tile against vendor
in distribution, not errors on unfamiliar shapes (docs/results.md, "Triton's
matmul on real A100 measurements", measures both)."""
ESTIMATE_RULE = (0.0, 1.0)
"""(margin log2, z) of the decision where the vendor model's estimate exists:
a tile config is chosen where the cost model ranks it ahead of the vendor and
the estimate one deviation up is below 0 (:func:`estimate_wins`): the tile is
expected to win under the members' spread. Fixed, not calibrated: calibrating
(margin, z, the cost model's margin) on each fold's held-out logs lost more on
the logs left out than this rule (docs/results.md, "Triton's matmul on real
A100 measurements")."""
NEAR_LOG2 = 0.5
"""Distance (doublings in the envelope's log-shape and aspect space,
:func:`costlearn.model.envelope.embed`) from the nearest training shape within
which the vendor model's estimate is taken as it is (:data:`ESTIMATE_RULE`);
beyond it the estimate is the members' extrapolation, and the decision uses
it only as far as such estimates held when whole regions of the training
shapes were left out (the floor's ``transfer``). Half a doubling: the
envelope's least density threshold
(:data:`costlearn.model.envelope.MIN_THRESHOLD`), the spacing below which a
shape lies between measured ones rather than beyond them."""
MIN_TRANSFER_PROBLEMS = 20
"""Fewest held-out problems (with an estimate, a tile and a vendor
measurement) a transfer is fitted on; with fewer, a problem beyond
:data:`NEAR_LOG2` keeps the vendor (no evidence that the estimate reaches it)."""


def estimate_doubt(mean_log2, sd_log2):
    """How unsure the vendor model is of the decision: its members' deviation
    over the estimate's distance from a tie, ``sd / max(|mean|, 0.001)``
    (float or float64 array; a float's in Python arithmetic, the same value,
    a microsecond sooner on the query path)."""
    if type(mean_log2) is float and type(sd_log2) is float:
        return sd_log2 / max(abs(mean_log2), 1e-3)
    return sd_log2 / np.maximum(np.abs(mean_log2), 1e-3)


def estimate_wins(mean_log2, sd_log2, margin_log2: float, z: float):
    """Where the vendor model (:mod:`costlearn.model.vendor`) expects a tile
    config to beat the vendor library: ``mean + z * sd < -margin`` (log2 of
    best tile time / vendor time; NaN: no). Works on floats and float64
    arrays alike."""
    return np.nan_to_num(mean_log2 + z * sd_log2, nan=math.inf) < -margin_log2

def plain_floor() -> dict:
    """The uncalibrated floor (a sidecar's ``floor``, version
    :data:`FLOOR_VERSION`): margin 0, no neighbours' evidence, nothing
    flagged: the plain argmin (:func:`costlearn.learn.holdout.calibrate_floor`
    of no held-out problems)."""
    return dict(version=FLOOR_VERSION, margin_log2=0.0, vendor_near_min=0.0, unsure_regret=None,
                ood_fallback=False, estimate=None, transfer=None, neighbors=NEIGHBORS, layouts=[], problems=[],
                calibration=dict(heldout="", problems=0))


class VendorFloor:
    """A calibrated floor, ready for many queries.

    Parameters
    ----------
    floor : dict
        :func:`costlearn.learn.holdout.calibrate_floor`'s result (a model sidecar's ``floor``).

    Attributes
    ----------
    margin_log2, vendor_near_min : float
    unsure_regret : float
        ``inf`` where the calibration chose never to flag.
    ood_fallback : bool
        A problem outside the extent envelope falls back to the vendor.
    calibrated : bool
        Held-out evidence exists (else every decision is the plain argmin).
    transfer : tuple of float or None
        ``(near_log2, intercept, slope, spread_log2)``: beyond ``near_log2``
        of every training shape the vendor model's estimate ``e`` becomes
        ``intercept + slope * e`` with deviation ``spread_log2`` (the
        held-out-by-region fit, :func:`costlearn.learn.holdout.fit_transfer`);
        None: the estimate is used as it is everywhere (a floor without a
        vendor model, or written before the transfer existed).
    transfer_intercepts : dict
        {layout: intercept} (log2 of the pick's time over the vendor's at an
        estimate of 0) of the layouts the transfer fitted an intercept of
        their own for (:meth:`transfer_line`); empty in a floor written
        before they existed or fitted within one log: every layout takes
        ``intercept``.

    Raises
    ------
    ValueError
        If the dict is not a version-1 floor or a field is malformed (the
        message names it).
    """

    def __init__(self, floor: dict):
        if not isinstance(floor, dict) or floor.get("version") != FLOOR_VERSION:
            got = floor.get("version") if isinstance(floor, dict) else type(floor).__name__
            raise ValueError(f"vendor floor version {got!r}; this code reads version {FLOOR_VERSION} "
                             "(retrain with `costlearn train`)")
        try:
            self.margin_log2 = float(floor["margin_log2"])
            v = floor["vendor_near_min"]
            self.vendor_near_min = -math.inf if v is None else float(v)
            u = floor["unsure_regret"]
            self.unsure_regret = math.inf if u is None else float(u)
            self.neighbors = floor["neighbors"]
            if type(self.neighbors) is not int or not 1 <= self.neighbors <= MAX_NEIGHBORS:
                raise ValueError(f"neighbors={str(self.neighbors)[:40]!s}; need an integer in [1, {MAX_NEIGHBORS}]")
            self.ood_fallback = floor.get("ood_fallback", False)
            if not isinstance(self.ood_fallback, bool):
                raise ValueError(f"ood_fallback={self.ood_fallback!r} is not a bool")
            est = floor.get("estimate")
            self.estimate = None if est is None else tuple(float(x) for x in est)
            tr = floor.get("transfer")
            try:
                self.transfer = None if tr is None else tuple(
                    float(tr[key]) for key in ("near_log2", "intercept", "slope", "spread_log2"))
                ok = self.transfer is None or (all(map(math.isfinite, self.transfer)) and self.transfer[0] >= 0
                                               and self.transfer[2] >= 0 and self.transfer[3] >= 0)
            except (KeyError, TypeError, ValueError, IndexError, OverflowError):
                ok = False
            if not ok:
                raise ValueError(f"transfer={tr!r:.200}; need an object of finite near_log2, slope, spread_log2 "
                                 ">= 0 and a finite intercept, or null")
            by = {} if tr is None else tr.get("intercepts", {})
            if not (isinstance(by, dict) and all(type(k) is str and type(v) in (int, float) and math.isfinite(v)
                                                 for k, v in by.items())):
                raise ValueError(f"transfer intercepts={by!r:.200}; need an object of layout: finite number")
            self.transfer_intercepts = {k: float(v) for k, v in by.items()}
            u = floor.get("estimate_unsure")
            self.estimate_unsure = math.inf if u is None else float(u)
            if self.estimate is not None and (len(self.estimate) != 2 or not all(map(math.isfinite, self.estimate))
                                              or self.estimate[1] < 0):
                raise ValueError(f"estimate={est!r}; need [margin log2, z >= 0] or null")
            self.layouts = [str(x) for x in floor["layouts"]]
            p = np.array([[np.nan if v is None else v for v in row] for row in floor["problems"]], np.float64)
        except (KeyError, TypeError, ValueError, IndexError, OverflowError) as e:   # (10**400 overflows a float)
            raise ValueError(f"malformed vendor floor ({type(e).__name__}: {e})") from None
        if p.size and (p.ndim != 2 or p.shape[1] != 6 or not ((p[:, :3] >= 1) & (p[:, :3] <= MAX_EXTENT)).all()
                       or not (p[:, :3] == np.floor(p[:, :3])).all()):
            raise ValueError(f"malformed vendor floor: problems of shape {p.shape}; need rows of [m, n, k, layout "
                             f"index, vendor_regret, model_regret] with integer extents in [1, {MAX_EXTENT}]")
        if p.size and not np.isin(p[:, 3], np.arange(len(self.layouts))).all():
            raise ValueError(f"malformed vendor floor: a problem's layout index is not one of the "
                             f"{len(self.layouts)} layouts {self.layouts}")
        if not (self.margin_log2 >= 0 and (self.vendor_near_min >= 0 or self.vendor_near_min == -math.inf)
                and self.unsure_regret >= 0 and self.estimate_unsure >= 0):
            raise ValueError(f"malformed vendor floor: margin_log2={self.margin_log2}, vendor_near_min="
                             f"{self.vendor_near_min}, unsure_regret={self.unsure_regret}, estimate_unsure="
                             f"{self.estimate_unsure}; need each >= 0")
        p = p.reshape(-1, 6)
        self.floor = floor
        self.points = embed(p[:, :3].astype(np.int64)) if len(p) else np.zeros((0, 3))
        self.layout_of = np.array([self.layouts[int(i)] for i in p[:, 3]], object)
        self.vendor_regret, self.model_regret = p[:, 4].copy(), p[:, 5].copy()
        self.calibrated = len(p) > 0
        # per layout, once: the evidence a query of that layout looks at (all of it where the layout has too little)
        self._by_layout = {}
        for lay in self.layouts:
            idx = np.flatnonzero(self.layout_of == lay)
            if len(idx) < self.neighbors:
                idx = np.arange(len(p))
            self._by_layout[lay] = (self.points[idx], np.log1p(self.vendor_regret[idx]),
                                    np.log1p(self.model_regret[idx]))
        self._all = (self.points, np.log1p(self.vendor_regret), np.log1p(self.model_regret))
        self._layout_count = {lay: int(np.sum(self.layout_of == lay)) for lay in self.layouts}
        self._transfer_words: dict = {}     # transfer_reason's words of each layout (made at the first use)

    def near(self, m: int, n: int, k: int, layout: str) -> tuple[float, float]:
        """Geometric-mean (vendor, model) held-out regret over the
        :attr:`neighbors` nearest evidence problems of ``layout`` (nearest
        by squared distance in the envelope's embedding, then by index; the
        vendor's over those with a finite regret), NaN, NaN without
        evidence. The rankers compute the same numbers in the same
        arithmetic (:func:`costlearn.model.envelope.nearest_evidence`, and libm's
        :func:`math.expm1`)."""
        if not self.calibrated:
            return math.nan, math.nan
        v, w = nearest_evidence(*self.evidence(layout), self.neighbors, embed_query(m, n, k))
        return math.expm1(v), math.expm1(w)

    def evidence(self, layout: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The evidence a problem of ``layout`` looks at: its embedded
        problems (float64, shape (E, 3)), log1p of the vendor's and of the
        model's held-out regret on each (float64, shape (E,); the vendor's
        NaN where it was not measured). Those of the layout, or all where
        the layout has fewer than :attr:`neighbors`."""
        return self._by_layout.get(layout, self._all)

    def uses_evidence(self, has_vendor: bool) -> bool:
        """Whether the held-out evidence near a problem can change an answer
        of a model with (``has_vendor``) or without a vendor candidate: the
        vendor is a candidate, or the floor flags unsure problems; where not,
        the evidence is not looked up."""
        return bool(has_vendor) or self.unsure_regret != math.inf

    def unsure_reason(self, model_near: float) -> str | None:
        """The OOD reason for a problem whose neighbours' held-out model
        regret is ``model_near``, or None."""
        if model_near > self.unsure_regret and math.isfinite(model_near):
            return (f"the model's held-out top-1 regret on the {self.neighbors} nearest training problems is "
                    f"{model_near:.1%} (above {self.unsure_regret:.1%}, calibrated on held-out logs)")
        return None

    def estimate_reason(self, estimate) -> str | None:
        """The OOD reason for a problem whose vendor-model estimate
        (:class:`~costlearn.model.vendor.VendorEstimate`, or None) is unsure of
        the decision beyond the calibrated ``estimate_unsure``, or None."""
        if estimate is None or not estimate_doubt(estimate.mean_log2, estimate.sd_log2) > self.estimate_unsure:
            return None
        return (f"the vendor model is unsure whether a tile config beats the vendor here: best tile / vendor "
                f"{2 ** estimate.mean_log2:.2f}, its members spread {estimate.sd_log2:.2f} doublings (more doubt "
                f"than {ESTIMATE_UNSURE_QUANTILE:.0%} of the held-out problems)")

    def is_far(self, distance: float) -> bool:
        """Whether a problem whose nearest training shape is ``distance``
        doublings away (:attr:`costlearn.ranker.RankResult.nearest_distance`)
        is decided by the transfer: the floor has one and the distance is
        not within its ``near_log2`` (NaN and inf are far)."""
        return self.transfer is not None and not distance <= self.transfer[0]

    def transfer_line(self, layout: str) -> tuple[float, float]:
        """(intercept, slope) of the transfer for problems of ``layout``:
        the layout's own intercept where the hold-out had enough of its
        problems, else the one of all (:func:`costlearn.learn.holdout.fit_transfer`).
        Needs a transfer."""
        _, a, b, _ = self.transfer
        return self.transfer_intercepts.get(layout, a), b

    def transferred(self, estimate, distance: float, layout: str = ""):
        """The estimate the decision uses for a problem of ``layout``
        ``distance`` doublings from its nearest training shape:
        ``estimate`` (a :class:`~costlearn.model.vendor.VendorEstimate`, or
        None) as it is near the data, and beyond it (:meth:`is_far`)
        :meth:`transfer_line`'s ``intercept + slope * mean`` with the
        transfer's spread as its deviation."""
        if estimate is None or not self.is_far(distance):
            return estimate
        a, b = self.transfer_line(layout)
        return type(estimate)(a + b * estimate.mean_log2, self.transfer[3])

    def keeps_vendor(self, tile_lr: float, vendor_near: float, estimate=None, distance: float = 0.0,
                     layout: str = "") -> bool:
        """True when the vendor stays: the best tile's predicted log2 time
        ratio to the vendor, ``tile_lr``, is not below ``-margin_log2``, the
        vendor was within ``vendor_near_min`` of the best on the neighbours,
        or (where the floor uses the vendor model's estimate) ``estimate``, a
        :class:`~costlearn.model.vendor.VendorEstimate`, does not expect a
        tile to win (a missing estimate keeps it). Near the data
        (``distance``, doublings to the nearest training shape, within the
        transfer's ``near_log2``) a tile must win one deviation up
        (:func:`estimate_wins` with :data:`ESTIMATE_RULE`); beyond it the
        transferred estimate (:meth:`transferred`, by the line of the
        problem's ``layout``) must expect a tile to win:
        its expected log2 ratio below ``-margin`` (the regression's mean
        already carries what the hold-out measured, its spread is the
        residuals', not the estimate's uncertainty)."""
        if not tile_lr < -self.margin_log2:
            return True
        if math.isfinite(vendor_near) and vendor_near <= self.vendor_near_min:
            return True
        if self.estimate is not None:                   # estimate_wins, on floats (NaN keeps the vendor)
            margin, z = self.estimate
            if estimate is None:
                return True
            if self.is_far(distance):
                return not self.transferred(estimate, distance, layout).mean_log2 < -margin
            return not estimate.mean_log2 + z * estimate.sd_log2 < -margin
        return False

    def transfer_reason(self, estimate, distance: float, layout: str, nearest: str, keeps: bool) -> str | None:
        """Why a problem beyond the transfer's reach (:meth:`is_far`) was
        decided as it was, in words (None near the data or without an
        estimate): how far its nearest training shape (``nearest``, its
        text) lies, how many problems of ``layout`` the hold-out had, the
        transferred estimate and the answer (``keeps``: the vendor)."""
        if estimate is None or self.estimate is None or not self.is_far(distance):
            return None
        s = self.transfer[3]
        a, b = self.transfer_line(layout)
        t = a + b * estimate.mean_log2                  # transferred(estimate, distance, layout).mean_log2
        head, middle = self._transfer_words.get(layout) or self._transfer_text(layout)
        return (f"{head}{nearest}, {distance:.2f}{middle}{2.0 ** t:.2f} ({2.0 ** (t - 2 * s):.2f}-"
                f"{2.0 ** (t + 2 * s):.2f}): {'the vendor library is kept' if keeps else 'a tile config is chosen'}")

    def _transfer_text(self, layout: str) -> tuple:
        """The words of :meth:`transfer_reason` that depend on ``layout``
        alone (before the nearest shape's text, and between its distance and
        the expected ratio), made once per layout."""
        near, _, _, s = self.transfer
        a, b = self.transfer_line(layout)
        count = self._layout_count.get(layout, 0)
        words = (f"no training problem within {near:g} doublings (nearest ",
                 f" doublings away in log-shape and aspect space; {count} {layout} problems measured): as held out "
                 f"by region, the vendor model's estimates here held as {a:+.2f} + {b:.2f} x estimate, spread "
                 f"{s:.2f} doublings, so best tile / vendor is expected at ")
        self._transfer_words[layout] = words
        return words

    @staticmethod
    def plain() -> "VendorFloor":
        """The uncalibrated floor: the plain argmin, nothing flagged."""
        return VendorFloor(plain_floor())
