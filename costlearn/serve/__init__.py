"""Serving: the :class:`~costlearn.serve.predict.Predictor` and its
:class:`~costlearn.serve.prediction.Prediction`, filter-then-measure
(``tuning``) and its database (``tuning_db``), and the dispatch selectors
(``dispatch``).
"""
