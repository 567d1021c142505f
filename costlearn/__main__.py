"""``python -m costlearn``: the command line (:func:`costlearn.cli.main`)."""
import sys

from .cli import main

sys.exit(main())
