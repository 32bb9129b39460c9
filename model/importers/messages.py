"""OpenAI chat messages → :class:`~model.core.schema.Trace`, multi-agent logs included.

Accepted shapes: ``{"messages": [...]}``, ``{"history": [...]}`` (other top-level keys, such as a
Who&When log's ``mistake_step``, go to ``Trace.metadata``; a ``response`` holding a chat
completion, as in LiteLLM's logging payload, adds its answer as the last message) and a bare
list of messages; OpenAI
Responses API items and LangChain message dicts are read as the messages they stand for
(:mod:`model.importers.dialects`).

Role resolution, in order, for a message at position ``i`` with ``name`` N:

1. N in the ``speakers`` option → the role given there (``user``, ``assistant``, ``tool``,
   ``system``);
2. N looks like a code executor (contains "terminal" or "executor", any case: AG2's
   ``Computer_terminal``, Magentic-One's ``ComputerTerminal``), or a ``user`` message from a
   named sender starts with AG2's ``exitcode:`` → a ``tool_result`` named N, status from the
   exit code / traceback;
3. ``user`` with a name, not message 0 and not a human-looking name (user, human, admin,
   user_proxy, customer) → that agent's turn (``llm_output``), not the human's;
4. otherwise the message's own role: system/developer → ``system``; user → ``user_input``;
   assistant → ``llm_reasoning`` (``reasoning_content``), ``llm_output`` (text, or empty text
   with no calls) and one ``tool_call`` per call; tool / function → ``tool_result``.

All steps from message ``i`` carry ``source_index=i``. The final-output rule is
:func:`model.importers._common.mark_final_output`.

>>> from model.importers.messages import import_messages
>>> t = import_messages([{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}])
>>> [s.kind.value for s in t.steps]
['user_input', 'final_output']
"""

from __future__ import annotations

import re
from typing import Any

from model.core.errors import TooLargeError
from model.core.schema import StepStatus, ToolDefinition, Trace
from model.importers._common import (
    Call,
    Msg,
    StepSink,
    emit_message,
    expect_dict,
    expect_list,
    fail,
    is_terminal_name,
    join,
    mark_final_output,
    opt_str,
    type_name,
)
from model.importers.dialects import REASONING_ITEM, is_dialect_item, to_chat

VALID_ROLES = ("assistant", "developer", "function", "system", "tool", "user")
SPEAKER_ROLES = ("assistant", "system", "tool", "user")
_HUMAN_NAME = re.compile(r"(user|human|admin|user_?proxy|customer|client)", re.IGNORECASE)
_EXITCODE_PREFIX = re.compile(r"\s*exitcode:\s*-?\d+", re.IGNORECASE)


def validate_speakers(speakers: Any) -> dict[str, str]:
    """Check the ``speakers`` option: a mapping name → one of :data:`SPEAKER_ROLES`."""
    if speakers is None:
        return {}
    if not isinstance(speakers, dict):
        fail("speakers", f"expected an object mapping names to roles, got {type_name(speakers)}")
    for name, role in speakers.items():
        if role not in SPEAKER_ROLES:
            fail(
                join("speakers", str(name)),
                f"unknown role {role!r}; valid roles: {', '.join(SPEAKER_ROLES)}",
            )
    return dict(speakers)


def _content_text(content: Any, path: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            if isinstance(part, str):
                texts.append(part)
                continue
            part = expect_dict(part, join(path, j))
            text = part.get("text")
            if text is None and part.get("type") in ("text", "input_text", "output_text"):
                text = part.get("content")
            if text is not None:
                if not isinstance(text, str):
                    fail(join(join(path, j), "text"), f"expected a string, got {type_name(text)}")
                texts.append(text)
            # image / audio / file parts carry no text the detectors could read
        return "\n".join(texts)
    fail(path, f"expected a string, a list of parts or null, got {type_name(content)}")


def _calls(msg: dict[str, Any], path: str) -> list[Call]:
    calls: list[Call] = []
    raw_calls = msg.get("tool_calls")
    if raw_calls is not None:
        tc_path = join(path, "tool_calls")
        for k, tc in enumerate(expect_list(raw_calls, tc_path)):
            kp = join(tc_path, k)
            tc = expect_dict(tc, kp)
            fn = expect_dict(tc.get("function"), join(kp, "function"))
            name = fn.get("name")
            if not isinstance(name, str) or not name:
                fail(join(join(kp, "function"), "name"), f"expected a tool name, got {type_name(name)}")
            call_id = opt_str(tc.get("id"), join(kp, "id"))
            calls.append(Call(name, fn.get("arguments"), call_id, join(join(kp, "function"), "arguments")))
    fc = msg.get("function_call")
    if fc is not None:
        fp = join(path, "function_call")
        fc = expect_dict(fc, fp)
        name = fc.get("name")
        if not isinstance(name, str) or not name:
            fail(join(fp, "name"), f"expected a function name, got {type_name(name)}")
        calls.append(Call(name, fc.get("arguments"), None, join(fp, "arguments")))
    return calls


def _to_msg(i: int, m: Any, path: str, speakers: dict[str, str]) -> Msg:
    m = expect_dict(m, path)
    if "role" not in m:
        fail(join(path, "role"), f"missing; valid roles: {', '.join(VALID_ROLES)}")
    role = m["role"]
    if not isinstance(role, str):
        fail(join(path, "role"), f"expected a string, got {type_name(role)}")
    role = role.lower()
    if role not in VALID_ROLES:
        fail(join(path, "role"), f"unknown role {m['role']!r}; valid roles: {', '.join(VALID_ROLES)}")
    name = opt_str(m.get("name"), join(path, "name"))
    text = _content_text(m.get("content"), join(path, "content"))
    refusal = m.get("refusal")
    if not text and isinstance(refusal, str):
        text = refusal

    if name is not None and name in speakers:
        role = speakers[name]
    elif role in ("user", "assistant") and (
        is_terminal_name(name) or (role == "user" and name and i > 0 and _EXITCODE_PREFIX.match(text))
    ):
        return Msg("tool", text, tool_name=name, speaker=name, terminal=True)
    elif role == "user" and name and i > 0 and not _HUMAN_NAME.fullmatch(name):
        role = "assistant"  # an agent's turn relayed as a user message (AG2 group chats)

    if role in ("system", "developer"):
        return Msg("system", text, speaker=name)
    if role == "user":
        return Msg("user", text, speaker=name)
    if role in ("tool", "function"):
        call_id = opt_str(m.get("tool_call_id"), join(path, "tool_call_id"))
        # a sender mapped to "tool" by the speakers option is an executor: read its exit code
        mapped = name is not None and name in speakers
        failed = StepStatus.ERROR if m.get("status") == "error" else None  # LangChain's ToolMessage.status
        return Msg("tool", text, tool_call_id=call_id, tool_name=name, speaker=name if mapped else None,
                   terminal=mapped, status=failed)
    reasoning = m.get("reasoning_content", m.get("reasoning"))
    return Msg(
        "assistant",
        text,
        calls=_calls(m, path),
        speaker=name,
        reasoning=reasoning if isinstance(reasoning, str) and reasoning else None,
        reasoning_only=m.get(REASONING_ITEM) is True,
    )


def _tools(value: Any, path: str) -> list[ToolDefinition]:
    """OpenAI ``tools`` ([{type: function, function: {...}}]) or legacy ``functions``."""
    out: list[ToolDefinition] = []
    for k, t in enumerate(expect_list(value, path)):
        tp = join(path, k)
        t = expect_dict(t, tp)
        fn = expect_dict(t["function"], join(tp, "function")) if "function" in t else t
        name = fn.get("name")
        if not isinstance(name, str):
            fail(join(tp, "name"), f"expected a tool name, got {type_name(name)}")
        params = fn.get("parameters")
        out.append(
            ToolDefinition(
                name=name,
                description=fn.get("description") if isinstance(fn.get("description"), str) else "",
                parameters=params if isinstance(params, dict) else None,
            )
        )
    return out


def _response_message(value: Any) -> dict[str, Any] | None:
    """The assistant message of an OpenAI chat completion response (``choices[0].message``)."""
    if not isinstance(value, dict) or not isinstance(value.get("choices"), list) or not value["choices"]:
        return None
    first = value["choices"][0]
    msg = first.get("message") if isinstance(first, dict) else None
    return dict(msg) if isinstance(msg, dict) and msg.get("role") == "assistant" else None


def import_messages(
    data: Any, *, speakers: dict[str, str] | None = None, max_steps: int | None = None
) -> Trace:
    """Build a Trace from chat messages (see the module docstring for the rules)."""
    metadata: dict[str, Any] = {}
    trace_fields: dict[str, Any] = {}
    tools: list[ToolDefinition] = []
    if isinstance(data, list):
        messages, prefix = data, ""
    elif isinstance(data, dict):
        key = "messages" if "messages" in data else "history" if "history" in data else None
        if key is None:
            fail("", f"expected a 'messages' or 'history' list; got an object with keys {sorted(data)[:10]}")
        messages = expect_list(data[key], key)
        prefix = key
        answer = _response_message(data.get("response"))
        if answer is not None:  # a logging payload (LiteLLM): the request's messages + the response
            messages = [*messages, answer]
        for k, v in data.items():
            if k == key or (k == "response" and answer is not None):
                continue
            if k in ("tools", "functions"):
                tools.extend(_tools(v, k))
            elif k in ("id", "trace_id") and isinstance(v, str | int):
                if str(v):  # an empty id (LiteLLM's logging payload) names none
                    trace_fields["id"] = str(v)
            elif k in ("session_id", "conversation_id") and isinstance(v, str | int):
                if str(v):
                    trace_fields["session_id"] = str(v)
            else:
                metadata[k] = v
    else:
        fail("", f"expected a list of messages or an object with 'messages'; got {type_name(data)}")
    if not messages:
        fail(prefix, "no messages: the trace is empty")
    if any(is_dialect_item(m) for m in messages):  # Responses API items, LangChain message dicts
        messages = to_chat(messages)
    if max_steps is not None and len(messages) > max_steps:
        # every message makes at least one step, so this is decided before any work
        raise TooLargeError(
            f"the trace has {len(messages)} messages, more than the limit of {max_steps} steps; "
            "raise max_steps to import it"
        )
    spk = validate_speakers(speakers)
    sink = StepSink(max_steps)
    for i, m in enumerate(messages):
        if m is None:  # an item that carries nothing the detectors read (e.g. a web search call)
            continue
        path = join(prefix, i)
        emit_message(_to_msg(i, m, path, spk), sink, source_index=i, path=path)
    mark_final_output(sink.steps)
    return Trace(steps=sink.steps, tools=tools, metadata=metadata, **trace_fields)


__all__ = ["SPEAKER_ROLES", "VALID_ROLES", "import_messages", "validate_speakers"]
