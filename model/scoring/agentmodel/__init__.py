"""The agent model at serving time: P(run failed) for one agent, learned from its own labelled runs.
Cross-validation, the learning curve, the review queue and the learned attribution live in
:mod:`model.training.agentmodel`.
"""
