"""Benchmarks: speed and memory goals, each printing a table (medians and ratios measured in one run), run against
the installed package (``python -m benchmarks.<name>`` from the source tree). benchmarks/README.md lists them."""
