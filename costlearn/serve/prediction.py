"""The answer of :func:`costlearn.predict_best`, a value type of its own so
that what composes on a prediction (:mod:`costlearn.serve.tuning`) does not import
the predictor."""
from __future__ import annotations

from typing import NamedTuple

from costlearn.core.problem import Problem

__all__ = ["Prediction"]


class Prediction(NamedTuple):
    """Answer of :func:`predict_best`: an immutable named tuple (cheaper to
    build on the hot path than a frozen dataclass of these fields;
    ``p._replace(...)`` makes a changed copy).

    Attributes
    ----------
    config : a family's config
        The chosen config: the lowest predicted time, or the fastest
        measured (``chosen_by == "measured"``).
    time_us : float
        Its time, microseconds: predicted, or the measured median (a relative
        score for models that predict no time).
    top_k : tuple of (config, float)
        The model's k best configs with predicted times in microseconds,
        best first.
    ood : bool
        True when the problem or the device is outside what the model was
        trained on; ``ood_reasons`` says why.
    ood_reasons : tuple of str
    m, n, k : int
    dtype, layout, family : str
    device : str
        Device the model was trained on (its folder name).
    chosen_by : {"predicted", "vendor_floor", "ood_fallback", "measured"}
        ``predicted``: the lowest predicted time; ``vendor_floor``: the
        vendor library, kept because no tile config was predicted faster by
        the calibrated margin where the vendor is beatable
        (:mod:`costlearn.learn.holdout`); ``ood_fallback``: the vendor library,
        because the held-out evidence near the problem flags it, or it is
        outside the envelope and the floor's calibration sends such problems
        to the vendor (other OOD reasons, e.g. no tile config measured near
        the problem or a time beyond the device's peak, are flagged only:
        on the A100's logs they did not predict the model's error);
        ``measured``: the fastest measured.
    tile_vendor_ratio : float
        Predicted time of the best tile config / predicted time of the
        vendor library (NaN without a vendor candidate); below
        ``2 ** -margin_log2`` a tile config may be chosen.
    margin_log2 : float
        The artifact's calibrated margin, log2 of the time ratio a tile
        config must be predicted to win by.
    measured_us : tuple of (str, float)
        Measured median times by config id, fastest first (empty unless
        measured, now or in an earlier run found in the tuning database).
    from_tuning_db : bool
        The answer came from the tuning database.
    tied_with : tuple of str
        Config ids within the measurement noise of the fastest by the
        measurements of every host (:func:`costlearn.serve.fleet.decide`:
        a tie, decided the same way on every host), whether measured in
        this call or read from the tuning database. Empty when the winner
        was separated or not measured, or when the database cannot say (no
        measurements kept beside the entry: a store of an older costlearn).
    tuning_db_source : str
        With ``from_tuning_db``: what chose the database's answer (the model
        folder and its sha256 prefix, and for a measured answer the top k it
        measured), which may be another model than this one; else empty.
    epilogue : str
        What the fused kernel computes after A @ B
        (:data:`costlearn.core.problem.EPILOGUES`).
    tile_vendor_estimate : tuple of float
        The vendor model's estimate (:mod:`costlearn.model.vendor`) of the
        best tile config's time / the vendor library's on this problem, and
        the interval its members span at two deviations: ``(ratio, low,
        high)``; below 1 a tile config wins. Beyond the vendor floor's reach
        of every training shape, the estimate as the hold-out by region
        found it to carry, and that fit's residual spread
        (:meth:`costlearn.model.vendor_floor.VendorFloor.transferred`).
        Empty where the model has no vendor model or the vendor is the only
        candidate.
    tuning_db_note : str
        Why a call given a tuning database answered from the model: the
        database could not be read (a server away: the answer then comes
        within the store's bounded wait), another host is measuring the
        problem (its lease), or the measurements were spooled on this host
        for delivery later. Empty otherwise.
    model : str
        The model that answered: its device, family and dtype and the
        first 12 hex digits of its scorer file's sha256
        (:attr:`costlearn.serve.predictor.Predictor.source`). A running
        process that starts serving a retrained model answers with its
        name from then on. With ``from_tuning_db``, the model this process
        holds; ``tuning_db_source`` names what chose the database's
        answer. Empty in a Prediction built by hand.
    """

    config: object
    time_us: float
    top_k: tuple
    ood: bool
    ood_reasons: tuple
    m: int
    n: int
    k: int
    dtype: str
    layout: str
    family: str
    device: str
    chosen_by: str = "predicted"
    tile_vendor_ratio: float = float("nan")
    margin_log2: float = 0.0
    measured_us: tuple = ()
    from_tuning_db: bool = False
    tied_with: tuple = ()
    tuning_db_source: str = ""
    epilogue: str = "none"
    tile_vendor_estimate: tuple = ()
    tuning_db_note: str = ""
    model: str = ""

    @property
    def sure(self) -> bool:
        """Whether the answer is sure: inside what the model was trained on
        (not ``ood``), the model's or its vendor floor's choice, and, where
        the model has a vendor model, the whole interval of
        ``tile_vendor_estimate`` on the answer's side of 1 (a tile config:
        its upper end below 1; the vendor: its lower end above 1). Without an
        estimate (no vendor model, no vendor candidate): a tile config the
        model chose, not flagged. It judges tile against vendor, not which
        tile: the lookup-table export (:mod:`costlearn.interop.inductor.lut`)
        lists a sure tile config alone when asked for one config."""
        if self.ood or self.chosen_by not in ("predicted", "vendor_floor"):
            return False
        est = self.tile_vendor_estimate
        if not est:
            return self.chosen_by == "predicted"
        return est[2] < 1.0 if self.chosen_by == "predicted" else est[1] > 1.0

    @property
    def problem(self) -> Problem:
        """The Problem this answers (M, N, K, dtype, layout, epilogue)."""
        return Problem(self.m, self.n, self.k, self.dtype, self.layout, self.epilogue)
