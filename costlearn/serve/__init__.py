"""Serving: the :class:`~costlearn.serve.predictor.Predictor` (with its OOD
verdict, ``ood``, and vendor policy, ``vendor_policy``) and its
:class:`~costlearn.serve.prediction.Prediction`, the ``predict_best`` API
(``predict``), filter-then-measure (``tuning``) and its database
(``tuning_db``) and what compilers asked of it (``asked``: a collection's
prior), and the dispatch selectors (``dispatch``).
"""
