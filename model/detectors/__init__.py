"""Detectors: trace detectors (``inspect(trace) -> list[Finding]``): the rules
(:mod:`model.detectors.rules`, one module per family) and the classifier
(:mod:`model.detectors.classifier`). The protocols are in :mod:`model.detectors.base`; the catalog
that names them, and builds them by name, is :mod:`model.detectors.catalog`. The stream detectors
(``update(x) -> Alarm | None``) live in :mod:`model.streams`, with :mod:`model.streams.catalog`.
"""
