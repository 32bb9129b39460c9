"""A real run as a stranger's agent posts it: what names its set, task or label taken away.

The vendored sets (:mod:`model.data.realdata`) carry set-prefixed ids, task types, labels and their
provenance as metadata; a user sends none of it. Evaluations, benches and tests that ask what a new
user gets strip runs with :func:`stranger`.
"""

from __future__ import annotations

from model.core.schema import Trace


def stranger(trace: Trace, run_id: str) -> Trace:
    """The run as a stranger's agent posts it: the id ``run_id`` (the sets' ids name the set), no task
    type, labels, session or metadata (the sets' metadata is their provenance: task ids, sources). A
    deep copy: changing it leaves the loaded run as it was.

    >>> t = stranger(Trace(id="tau_airline:7:0", task_type="tau_airline", metadata={"task_id": "7"}), "run-3")
    >>> t.id, t.task_type, t.metadata, t.labels
    ('run-3', None, {}, None)
    """
    return trace.model_copy(update={"id": run_id, "task_type": None, "labels": None, "metadata": {},
                                    "session_id": None}, deep=True)


__all__ = ["stranger"]
