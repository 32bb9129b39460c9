"""Data: the seeded trace builder and generator, labelling, the vendored real sets and the splits.
"""
