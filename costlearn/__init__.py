"""costlearn: a learned cost model for GPU matrix-multiply tile selection.

Importing the package needs neither CuPy nor PyOpenCL; a backend's library is
imported only when that backend is asked for.
"""
from __future__ import annotations

__version__ = "0.1.0"

from .device import DeviceSpec, preset  # noqa: E402
from .space import Shape, TileConfig, enumerate_space  # noqa: E402

__all__ = ["__version__", "DeviceSpec", "preset", "TileConfig", "Shape", "enumerate_space",
           "predict_best", "Prediction"]


def __getattr__(name):
    # The predictor pulls in xgboost; load it on first use only.
    if name in ("predict_best", "Prediction"):
        from . import predict
        value = globals()[name] = getattr(predict, name)   # later lookups skip this hook
        return value
    raise AttributeError(f"module 'costlearn' has no attribute {name!r}")
