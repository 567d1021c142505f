"""The values every stage passes on, and the few helpers they share.

``problem`` (:class:`~costlearn.core.problem.Problem`), ``dtypes``
(:class:`~costlearn.core.dtypes.DType`), ``device``
(:class:`~costlearn.core.device.DeviceSpec` and its presets), ``errors``
(:class:`~costlearn.core.errors.CostlearnError`), ``registry`` (the seams'
name-to-implementation maps), ``util`` (argument checks, atomic writes, the
keyed cache) and ``version``. Nothing here imports another part of costlearn.
"""
