"""costlearn's version: one definition, imported by the package and by every
module that records it (artifacts, dataset rows, the tuning database), so that
none of them imports the package itself."""
from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
