"""Studies: the questions costlearn's design rests on, each run against the installed package
(``python -m studies.<name>`` from the source tree), each writing a report under ``reports/`` from which
``python -m studies.docs_from_reports`` writes docs/results.md. studies/README.md lists them."""
