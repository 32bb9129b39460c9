"""OpenInference semantic conventions (Arize Phoenix and its instrumentors): one span → steps.

``openinference.span.kind`` decides:

- ``LLM``: ``llm.input_messages.{i}.message.*`` (``role``, ``content``, ``contents.{j}.
  message_content.text``, ``tool_call_id``, ``name``) and ``llm.output_messages.{i}.message.*``
  with ``tool_calls.{k}.tool_call.function.name`` / ``.arguments`` / ``tool_call.id``; without
  output messages, ``output.value`` is the text. ``llm.model_name``, ``llm.invocation_parameters``
  (JSON: its ``temperature``), ``llm.token_count.prompt`` / ``.completion``, and the offered
  tools ``llm.tools.{i}.tool.json_schema`` (→ ``Trace.tools``). A failed LLM span without output
  → an ``error`` step.
- ``TOOL``: ``tool.name`` (else the span name), arguments from ``input.value`` (else
  ``tool.parameters``), ``tool_call.id``, result ``output.value``, status from the span status and
  ``exception.*`` events.
- ``RETRIEVER``: a tool call named after the span with ``{"query": input.value}``; the result is
  the retrieved ``retrieval.documents.{i}.document.content`` (else ``output.value``).
- ``AGENT``, ``CHAIN`` and the rest: no steps; an AGENT span's name (``agent.name`` or the span
  name) becomes the ``speaker`` of the steps below it.
"""

from __future__ import annotations

import json
import re
from typing import Any

from model.core.schema import ToolDefinition
from model.importers._common import Call, Msg, as_text, fail
from model.importers._spanbase import Span, SpanBuilder, indexed_rows

KIND = "openinference.span.kind"
_MSG_KEY = re.compile(r"llm\.(input|output)_messages\.(\d+)\.message\.(.+)")
_CALL_KEY = re.compile(r"tool_calls\.(\d+)\.tool_call\.(.+)")
_CONTENT_KEY = re.compile(r"contents\.(\d+)\.message_content\.(.+)")
_TOOL_SCHEMA_KEY = re.compile(r"llm\.tools\.(\d+)\.tool\.json_schema")
_DOC_KEY = re.compile(r"retrieval\.documents\.(\d+)\.document\.content")


def kind(span: Span) -> str | None:
    k = span.attrs.get(KIND)
    return k.upper() if isinstance(k, str) else None


def agent_name(span: Span) -> str | None:
    if kind(span) != "AGENT":
        return None
    name = span.attrs.get("agent.name")
    return str(name) if name is not None else span.name


def _messages(span: Span, which: str) -> list[Msg]:
    out: list[Msg] = []
    for i, r in indexed_rows(span.attrs, _MSG_KEY, which):
        role = str(r.get("role", "assistant" if which == "output" else "user")).lower()
        text = r.get("content")
        if text is None:
            parts = {}
            for key, v in r.items():
                cm = _CONTENT_KEY.fullmatch(key)
                if cm and cm.group(2) == "text":
                    parts[int(cm.group(1))] = str(v)
            text = "\n".join(parts[j] for j in sorted(parts))
        text = text if isinstance(text, str) else as_text(text)
        name = r.get("name") if isinstance(r.get("name"), str) else None
        if role in ("system", "developer"):
            out.append(Msg("system", text))
        elif role == "user":
            out.append(Msg("user", text, speaker=name))
        elif role in ("tool", "function"):
            cid = r.get("tool_call_id")
            out.append(Msg("tool", text, tool_call_id=str(cid) if cid else None, tool_name=name))
        else:
            calls: dict[int, dict[str, Any]] = {}
            for key, v in r.items():
                cm = _CALL_KEY.fullmatch(key)
                if cm:
                    calls.setdefault(int(cm.group(1)), {})[cm.group(2)] = v
            msg_calls = []
            for k in sorted(calls):
                c = calls[k]
                fname = c.get("function.name")
                if not isinstance(fname, str):
                    where = f"llm.{which}_messages.{i}.message.tool_calls.{k}.tool_call.function.name"
                    fail(span.attr_path(where), f"expected a tool name, got {fname!r}")
                args = c.get("function.arguments")
                if args is not None and not isinstance(args, dict | str):
                    args = json.dumps(args, default=str)
                cid = c.get("id")
                msg_calls.append(Call(fname, args, str(cid) if cid else None))
            out.append(Msg("assistant", text, calls=msg_calls, speaker=name))
    return out


def _llm_fields(span: Span) -> dict[str, Any]:
    a = span.attrs
    temperature = None
    params = a.get("llm.invocation_parameters")
    if isinstance(params, str):
        try:
            params = json.loads(params)
        except ValueError:
            params = None
    if isinstance(params, dict) and isinstance(params.get("temperature"), int | float):
        temperature = float(params["temperature"])

    def tokens(key: str) -> int | None:
        v = a.get(key)
        if v is None:
            return None
        try:
            n = int(v)
        except (TypeError, ValueError):
            fail(span.attr_path(key), f"expected a whole number of tokens, got {v!r}")
        if n < 0:
            fail(span.attr_path(key), f"expected a non-negative token count, got {n}")
        return n

    meta = {k: a[k] for k in ("llm.provider", "llm.system") if isinstance(a.get(k), str)}
    model = a.get("llm.model_name")
    return {
        "model": str(model) if model is not None else None,
        "temperature": temperature,
        "tokens_in": tokens("llm.token_count.prompt"),
        "tokens_out": tokens("llm.token_count.completion"),
        "metadata": meta,
    }


def _offered_tools(span: Span, builder: SpanBuilder) -> None:
    for key, value in span.attrs.items():
        if not _TOOL_SCHEMA_KEY.fullmatch(key) or not isinstance(value, str | dict):
            continue
        try:
            schema = json.loads(value) if isinstance(value, str) else value
        except ValueError:
            continue  # a tool description we cannot read does not stop the import
        fn = schema.get("function", schema) if isinstance(schema, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str) and fn["name"] not in builder.tools:
            params = fn.get("parameters")
            desc = fn.get("description")
            builder.tools[fn["name"]] = ToolDefinition(
                name=fn["name"],
                description=desc if isinstance(desc, str) else "",
                parameters=params if isinstance(params, dict) else None,
            )


def _tool_arguments(span: Span) -> tuple[Any, bool]:
    a = span.attrs
    value = a.get("input.value")
    if value is None:
        value = a.get("tool.parameters")
        if value is None:
            return None, False
    if isinstance(value, str) and a.get("input.mime_type") == "text/plain":
        try:
            json.loads(value)
        except ValueError:
            return {"input": value}, True  # a plain-text tool input is its single argument
    return value, True


def _tool_envelope(result: Any) -> tuple[Any, bool]:
    """LangChain's tool output as OpenInference records it, a serialised ``ToolMessage``
    (``{"type": "tool", "data": {"content", "status", "tool_call_id", …}}``) → ``(content,
    failed)``; anything else is returned as it is.

    >>> _tool_envelope('{"type": "tool", "data": {"content": "503", "status": "error"}}')
    ('503', True)
    """
    if not isinstance(result, str) or not result.startswith("{"):
        return result, False
    try:
        doc = json.loads(result)
    except ValueError:
        return result, False
    data = doc.get("data") if isinstance(doc, dict) and doc.get("type") == "tool" else None
    if not isinstance(data, dict) or "content" not in data:
        return result, False
    content = data["content"]
    if isinstance(content, list):
        content = "\n".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    elif not isinstance(content, str):
        content = json.dumps(content, ensure_ascii=False, default=str)
    return content, data.get("status") == "error"


def handle(span: Span, source_index: int, builder: SpanBuilder, speaker: str | None, is_leaf: bool) -> None:
    """Add the steps of one OpenInference span to ``builder``."""
    k = kind(span)
    a = span.attrs
    if k == "LLM":
        _offered_tools(span, builder)
        llm = _llm_fields(span)
        inputs = _messages(span, "input")
        outputs = _messages(span, "output")
        if not outputs and isinstance(a.get("output.value"), str):
            outputs = [Msg("assistant", a["output.value"])]
        for msg in outputs:
            if msg.role == "assistant" and msg.speaker is None:
                msg.speaker = speaker
        builder.inputs(span, source_index, inputs, span.path)
        status, error_type, _ = span.failure()
        if not outputs:
            if status is not None:
                builder.error(span, source_index, span.path, llm, speaker)
                return
            # no output messages and no output.value: the text was not recorded, it is not empty
            outputs = [Msg("assistant", "", speaker=speaker)]
            llm = {**llm, "metadata": {**llm["metadata"], "content_recorded": False}}
        made = builder.outputs(span, source_index, outputs, span.path, llm)
        if made and status is not None:
            made[0].status = status
            made[0].error_type = error_type
    elif k in ("TOOL", "RETRIEVER"):
        name = a.get("tool.name") if k == "TOOL" else None
        cid = a.get("tool_call.id", a.get("tool.id"))
        failed = False
        if k == "TOOL":
            args, given = _tool_arguments(span)
            result: Any = a.get("output.value")
            result, failed = _tool_envelope(result)
        else:
            query = a.get("input.value")
            args, given = ({"query": query} if query is not None else {}), query is not None
            docs = {}
            for key, value in a.items():
                m = _DOC_KEY.fullmatch(key)
                if m:
                    docs[int(m.group(1))] = as_text(value)
            result = json.dumps([docs[i] for i in sorted(docs)]) if docs else a.get("output.value")
        builder.tool(
            span,
            source_index,
            span.path,
            name=str(name) if name is not None else span.name,
            call_id=str(cid) if cid is not None else None,
            arguments=args,
            arguments_given=given,
            result=result,
            speaker=speaker,
            result_recorded=result is not None,
            failed=failed,
        )


__all__ = ["KIND", "agent_name", "handle", "kind"]
