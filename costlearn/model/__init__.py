"""Cost models (the CostModel seam), their compiled scorer, and the artifact."""
from costlearn.model.base import BASELINES, MODELS, CostModel, NotFittedError, get_model

__all__ = ["CostModel", "NotFittedError", "MODELS", "BASELINES", "get_model"]
