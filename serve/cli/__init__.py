"""The ``triage`` command line (Typer): one module per command group.
"""
