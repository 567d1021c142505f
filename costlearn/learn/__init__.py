"""Learning and scoring: training a family's models from the dataset
(``train``) and when to again (``retrain``), the held-out evidence and the vendor floor's calibration
(``holdout``), the regret metrics (``metrics``), fresh-measurement
evaluation (``evaluate``), the leave-one-log-out study (``study``) and
carrying a model to another device (``transfer``).
"""
