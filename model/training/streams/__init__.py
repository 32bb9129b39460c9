"""Evaluating the stream detectors on seeded synthetic streams, and their figures.
"""
