"""The service layer: one small service per resource, each calling the store.
"""
