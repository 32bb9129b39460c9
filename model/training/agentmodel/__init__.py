"""The agent model offline: grouped cross-validation beside the cheap learners, the learning curve,
the review queue's order and the learned attribution.
"""
