"""Offline tools over a tenant's stored history: replay, the history report, the label review queue.
"""
