"""Training and evaluation (offline only; serving never imports this package): the classifier's
pipeline, the run scorer's fit and evaluation, the agent model's cross-validation and learning curve,
the stream detectors' evaluation and the frozen semantic cases.
"""
