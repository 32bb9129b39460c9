"""Serving-time scorers: the step classifier's ONNX runtime, the run scorer and the per-agent model
(NumPy / SciPy / onnxruntime only), and the registry of agent models on disk.
"""
