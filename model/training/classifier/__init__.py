"""The step classifier's training pipeline: baseline, fine-tune, distil, export, evaluate, gate
(torch / transformers / scikit-learn imported lazily; the ``train`` extra).
"""
