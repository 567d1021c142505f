"""Kernel Tuner's files, in and out: its cache files and T4 results JSON
(Kernel Tuner 1.x, https://github.com/KernelTuner/kernel_tuner; the readers
and writers are ``kernel_tuner/util.py`` (``process_cache``, ``read_cache``,
``store_cache``) and ``kernel_tuner/file_utils.py`` (``get_t4_results``,
``get_t4_metadata``), the T4 schemas ``kernel_tuner/schema/T4/1.0.0/``).

A Kernel Tuner kernel has parameters of its own names, so an import needs a
mapping file (:func:`load_mapping`) from them to a costlearn family's config
fields, and the problem (M, N, K, dtype, layout) the tuning ran.

Cache file: one JSON object, ``device_name``, ``kernel_name``,
``problem_size``, ``tune_params_keys``, ``tune_params``, ``objective`` and,
last, ``cache``: ``"v1,v2,..."`` (each tune parameter's value, ``str()``,
joined by commas in ``tune_params_keys`` order) -> the parameters and what
was measured: ``time`` (ms, the mean of ``times``), ``times`` (ms, one per
iteration), ``compile_time``, ``verification_time``, ``benchmark_time``
(ms), ``timestamp``. A failed config carries ``"__error__":
"CompilationFailedConfig"`` (or ``InvalidConfig``, ``RuntimeFailedConfig``)
and no time; older caches put that string in ``time`` itself. While tuning,
Kernel Tuner leaves the file open: the last entry ends in ``,`` and the two
closing braces are missing (its reader closes it before parsing).

T4 results: ``{"schema_version": "1.0.0", "results": [...], "metadata":
{"timeunit": "milliseconds"}}``; each result has ``configuration`` (the
parameters), ``times`` (``compilation`` as Kernel Tuner writes it,
``compilation_time`` as the schema names it, ``runtimes`` ...),
``invalidity`` (``"correct"`` or why not: ``compile``, ``runtime``,
``constraints``, ``correctness``, ``timeout``), ``correctness`` and
``measurements`` (``{"name": "time", "value": ..., "unit": "ms"}``). It
records no problem size.

The package: :mod:`.mapping` (the mapping file, :func:`load_mapping`),
:mod:`.importer` (both formats in: :func:`parse`, :class:`KernelTunerImporter`)
and :mod:`.export` (both formats out: :func:`export_cache`, :func:`export_t4`).
"""
from __future__ import annotations

from costlearn.interop.kernel_tuner.export import T4_SCHEMA_VERSION, cache_key, export_cache, export_t4
from costlearn.interop.kernel_tuner.importer import ERROR_NAMES, TIME_UNITS, KernelTunerImporter, parse
from costlearn.interop.kernel_tuner.mapping import Mapping, load_mapping

__all__ = ["KernelTunerImporter", "Mapping", "load_mapping", "parse",
           "export_cache", "export_t4", "ERROR_NAMES", "TIME_UNITS",
           "T4_SCHEMA_VERSION", "cache_key"]
