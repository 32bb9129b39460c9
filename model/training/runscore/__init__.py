"""The run scorer's fit on the vendored real sets and the real-run evaluation that decides.
"""
