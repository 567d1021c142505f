"""``python -m costlearn``: the command line (:func:`costlearn.cli.main`)."""
import sys

from costlearn.cli import main

sys.exit(main())
