"""Collection: which configs are feasible, which problems to measure, how to
time them, and the dataset they are written to (design.md, "Measurement
protocol" and "Dataset").

``space`` (feasible configs), ``sampler`` (problems), ``strategy`` (which
problems next: random, a real-model prior, or active rounds; the streams in
``shape_streams`` and ``active_shapes``, real models' shapes in
``real_shapes``), ``measure`` (the timing protocol; ``protocol`` its
settings, ``verify`` the inputs and the output check, ``sample_stats`` the
statistics of the samples), ``noise`` (re-timings), ``backends/`` (the
devices that compile and time), ``dataset`` (Parquet parts), ``loop`` (the
collection loop; ``executor`` its interface to what measures, ``local`` the
executor in this process, ``rows`` a problem's timings as dataset rows,
``summary`` what a collection reports) and ``fleet`` (the same loop on a Ray
cluster). Importing this package imports none of them: a predictor that
needs ``space`` does not load the collector.
"""
