"""The run scorer at serving time: ``failure_probability`` and ``attribution`` from domain-general evidence.
Fitting on the real sets and the leave-one-source-out evaluation live in :mod:`model.training.runscore`.
"""
