"""The step classifier at serving time: the versioned step → text representation and the ONNX runtime.
Training, export and evaluation live in :mod:`model.training.classifier`.
"""
