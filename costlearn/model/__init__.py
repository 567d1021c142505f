"""Cost models: the XGBoost product model, the baselines, and the artifact."""
from .base import MODELS, CostModel, NotFittedError, get_model

__all__ = ["CostModel", "NotFittedError", "MODELS", "get_model"]
