"""The core of agent-triage: the trace schema, the failure kinds, findings, errors, request options,
agent keys, coverage and the execution graph. Everything else in ``model/`` builds on these; they import
nothing else of the project.
"""
