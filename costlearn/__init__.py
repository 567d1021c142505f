"""costlearn: a learned cost model for GPU matrix-multiply tile selection.

Importing the package needs neither CuPy, PyOpenCL, Triton nor XGBoost; a
backend's or a model's library is imported only when it is asked for.
"""
from __future__ import annotations

from costlearn.core.version import __version__  # noqa: E402

from costlearn.core.device import DeviceSpec, preset  # noqa: E402
from costlearn.families import FAMILIES, get_family  # noqa: E402
from costlearn.core.problem import Problem  # noqa: E402
from costlearn.collect.space import enumerate_space  # noqa: E402

__all__ = ["__version__", "DeviceSpec", "preset", "Problem", "FAMILIES", "get_family", "enumerate_space",
           "predict_best", "predict_many", "Prediction"]


def __getattr__(name):
    # The predictor loads compiled code on first use; import it lazily.
    if name in ("predict_best", "predict_many", "Prediction"):
        from costlearn.serve import predict
        value = globals()[name] = getattr(predict, name)   # later lookups skip this hook
        return value
    raise AttributeError(f"module 'costlearn' has no attribute {name!r}")
