"""Diagnosis: the detectors run over a trace, their findings fused, a repair recommended (ladders and
the repair engine's budgets), incremental sessions, failure patterns and the OTel evaluation events.
"""
