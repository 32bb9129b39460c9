"""OpenTelemetry GenAI semantic conventions: one span → steps.

Read per span (``gen_ai.operation.name`` decides; when it is missing, tool attributes mean
``execute_tool``, message attributes or a request / response model mean ``chat``):

- ``chat`` / ``text_completion`` / ``generate_content`` (and a leaf ``invoke_agent`` carrying
  messages): ``gen_ai.system_instructions``, ``gen_ai.input.messages`` (JSON string, or a list)
  or the older flattened ``gen_ai.prompt.{i}.role/content/tool_call_id``; output from
  ``gen_ai.output.messages`` or ``gen_ai.completion.{i}.role/content/tool_calls.{k}.*``. Messages
  hold ``parts``: ``text`` (``content``), ``tool_call`` (``id``, ``name``, ``arguments``),
  ``tool_call_response`` (``id``, ``response``), ``reasoning``. A failed chat span (error status,
  ``error.type`` or an exception event) without output → one ``error`` step (provider error).
- ``execute_tool``: ``gen_ai.tool.name``, ``gen_ai.tool.call.id``, ``gen_ai.tool.call.arguments``,
  ``gen_ai.tool.call.result`` → ``tool_call`` (unless the chat span's output already made it) and
  ``tool_result`` whose status is the span's.
- ``invoke_agent`` / ``create_agent`` with children, ``embeddings``: no steps; the agent's
  ``gen_ai.agent.name`` becomes the ``speaker`` of the steps below it.

The tools a chat span offered (``gen_ai.tool.definitions``; OpenLLMetry's
``llm.request.functions.{i}.*``) become ``Trace.tools``.

Model (``gen_ai.response.model`` else ``gen_ai.request.model``), ``gen_ai.request.temperature``,
usage (``gen_ai.usage.input_tokens``/``output_tokens``, older ``prompt_tokens``/
``completion_tokens``) and the span's duration go on the first output step.
"""

from __future__ import annotations

import json
import re
from typing import Any

from model.core.schema import ToolDefinition
from model.importers._common import Call, Msg, fail, join, type_name
from model.importers._spanbase import Conversation, Span, SpanBuilder, indexed_rows

LLM_OPERATIONS = {"chat", "text_completion", "generate_content", "completion"}
AGENT_OPERATIONS = {"invoke_agent", "create_agent"}
_PROMPT_KEY = re.compile(r"gen_ai\.(prompt|completion)\.(\d+)\.(.+)")


def operation(span: Span) -> str | None:
    op = span.attrs.get("gen_ai.operation.name")
    if isinstance(op, str):
        return op
    a = span.attrs
    if "gen_ai.tool.name" in a or "gen_ai.tool.call.id" in a:
        return "execute_tool"
    if has_messages(span):
        return "chat"
    if "gen_ai.agent.name" in a:
        return "invoke_agent"
    if "gen_ai.request.model" in a or "gen_ai.response.model" in a:
        return "chat"  # an LLM call without the operation name or its content (LiteLLM, content off)
    return None


def has_messages(span: Span) -> bool:
    a = span.attrs
    return (
        "gen_ai.input.messages" in a
        or "gen_ai.output.messages" in a
        or any(k.startswith(("gen_ai.prompt.", "gen_ai.completion.")) for k in a)
    )


def is_genai(span: Span) -> bool:
    return any(k.startswith("gen_ai.") for k in span.attrs)


def agent_name(span: Span) -> str | None:
    name = span.attrs.get("gen_ai.agent.name")
    return str(name) if name is not None else None


def _json_attr(span: Span, key: str) -> Any:
    value = span.attrs.get(key)
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError as exc:
            fail(span.attr_path(key), f"not valid JSON ({exc})")
    return value


def _int(span: Span, *keys: str) -> int | None:
    for key in keys:
        v = span.attrs.get(key)
        if v is None:
            continue
        try:
            n = int(v)
        except (TypeError, ValueError):
            fail(span.attr_path(key), f"expected a whole number of tokens, got {v!r}")
        if n < 0:
            fail(span.attr_path(key), f"expected a non-negative token count, got {n}")
        return n
    return None


def llm_fields(span: Span) -> dict[str, Any]:
    a = span.attrs
    temp = a.get("gen_ai.request.temperature")
    model = a.get("gen_ai.response.model") or a.get("gen_ai.request.model")
    meta = {
        k: a[k]
        for k in ("gen_ai.provider.name", "gen_ai.system", "gen_ai.operation.name")
        if isinstance(a.get(k), str)
    }
    finish = a.get("gen_ai.response.finish_reasons")
    if finish is not None:
        meta["finish_reasons"] = finish
    return {
        "model": str(model) if model is not None else None,
        "temperature": float(temp) if isinstance(temp, int | float) and not isinstance(temp, bool) else None,
        "tokens_in": _int(span, "gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens"),
        "tokens_out": _int(span, "gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens"),
        "metadata": meta,
    }


def _parts_messages(value: Any, path: str, start: int = 0) -> list[Msg]:
    """``[{role, parts: [...], name?}]`` → messages (a tool_call_response part is its own message);
    ``start``: the index of ``value``'s first message in its list (for error paths)."""
    if not isinstance(value, list):
        fail(path, f"expected a list of messages, got {type_name(value)}")
    out: list[Msg] = []
    for i, m in enumerate(value, start):
        mp = join(path, i)
        if not isinstance(m, dict):
            fail(mp, f"expected a message object, got {type_name(m)}")
        role = m.get("role")
        if not isinstance(role, str):
            fail(join(mp, "role"), f"expected a string, got {type_name(role)}")
        parts = m.get("parts")
        if parts is None and "parts" not in m or parts is None and "tool_calls" in m:
            content = m.get("content")  # tolerate OpenAI chat messages: {role, content, tool_calls}
            if isinstance(content, str):
                parts = [{"type": "text", "content": content}] if content else []
            elif content is None:
                parts = []
        if not isinstance(parts, list):
            fail(join(mp, "parts"), f"expected a list of parts, got {type_name(parts)}")
        name = m.get("name") if isinstance(m.get("name"), str) else None
        texts: list[str] = []
        reasoning: list[str] = []
        calls: list[Call] = []
        responses: list[Msg] = []
        for j, p in enumerate(parts):
            pp = join(join(mp, "parts"), j)
            if not isinstance(p, dict):
                fail(pp, f"expected a part object, got {type_name(p)}")
            ptype = p.get("type")
            if ptype == "text":
                texts.append(str(p.get("content", "")))
            elif ptype == "reasoning":
                reasoning.append(str(p.get("content", "")))
            elif ptype == "tool_call":
                tname = p.get("name")
                if not isinstance(tname, str):
                    fail(join(pp, "name"), f"expected a tool name, got {type_name(tname)}")
                cid = p.get("id")
                calls.append(Call(tname, _loose_args(p.get("arguments")), str(cid) if cid else None, pp))
            elif ptype == "tool_call_response":
                cid = p.get("id")
                resp = p.get("response", p.get("result"))
                responses.append(
                    Msg("tool", resp if isinstance(resp, str) else json.dumps(resp, default=str),
                        tool_call_id=str(cid) if cid else None, tool_name=name)
                )
            # blob / file / uri parts carry nothing the detectors read
        # OpenAI-shaped fields beside the parts (LiteLLM writes tool calls and call ids there)
        for k, tc in enumerate(m.get("tool_calls") or [] if isinstance(m.get("tool_calls"), list) else []):
            fn = tc.get("function") if isinstance(tc, dict) else None
            if isinstance(fn, dict) and isinstance(fn.get("name"), str):
                cid = tc.get("id")
                calls.append(Call(fn["name"], _loose_args(fn.get("arguments")), str(cid) if cid else None,
                                  join(join(mp, "tool_calls"), k)))
        role = role.lower()
        if role in ("tool", "function") and not responses and m.get("tool_call_id"):
            responses.append(Msg("tool", "\n".join(texts), tool_call_id=str(m["tool_call_id"]), tool_name=name))
        if role in ("system", "developer"):
            out.append(Msg("system", "\n".join(texts)))
        elif role in ("tool", "function") or responses:
            out.extend(responses or [Msg("tool", "\n".join(texts), tool_name=name)])
        elif role == "user":
            out.append(Msg("user", "\n".join(texts), speaker=name))
        else:
            out.append(Msg("assistant", "\n".join(texts), calls=calls, speaker=name,
                           reasoning="\n".join(reasoning) or None))
    return out


def _loose_args(value: Any) -> Any:
    """Span tool-call arguments may be an object, a JSON string or anything else; anything but an
    object or a string is kept as JSON text (so the malformed_call rule sees it)."""
    if value is None or isinstance(value, dict | str):
        return value
    return json.dumps(value, default=str)


def _flat_messages(span: Span, which: str) -> list[Msg]:
    """The older ``gen_ai.prompt.{i}.*`` / ``gen_ai.completion.{i}.*`` attributes."""
    out: list[Msg] = []
    for _, r in indexed_rows(span.attrs, _PROMPT_KEY, which):
        role = str(r.get("role", "assistant" if which == "completion" else "user")).lower()
        text = r.get("content")
        text = "" if text is None else text if isinstance(text, str) else json.dumps(text, default=str)
        if role in ("system", "developer"):
            out.append(Msg("system", text))
        elif role == "user":
            out.append(Msg("user", text))
        elif role in ("tool", "function"):
            cid = r.get("tool_call_id")
            out.append(Msg("tool", text, tool_call_id=str(cid) if cid else None))
        else:
            calls = []
            if "function_call.name" in r:
                calls.append(Call(str(r["function_call.name"]), _loose_args(r.get("function_call.arguments")), None))
            k = 0
            while f"tool_calls.{k}.name" in r:
                cid = r.get(f"tool_calls.{k}.id")
                calls.append(Call(str(r[f"tool_calls.{k}.name"]), _loose_args(r.get(f"tool_calls.{k}.arguments")),
                                  str(cid) if cid else None))
                k += 1
            out.append(Msg("assistant", text, calls=calls))
    return out


def _system_instructions(span: Span) -> list[Msg]:
    key = "gen_ai.system_instructions"
    if key not in span.attrs:
        return []
    raw = span.attrs[key]
    value: Any = raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except ValueError:
            return [Msg("system", raw)]  # plain text instructions
    if isinstance(value, str):
        return [Msg("system", value)]
    if not isinstance(value, list):
        fail(span.attr_path(key), f"expected a list of parts, got {type_name(value)}")
    texts = [str(p.get("content", "")) for p in value if isinstance(p, dict) and p.get("type") == "text"]
    return [Msg("system", "\n".join(texts))]


_FUNCTION_KEY = re.compile(r"llm\.request\.functions\.(\d+)\.(name|description|parameters)")


def offered_tools(span: Span, builder: SpanBuilder) -> None:
    """The tools a chat span offered the model: ``gen_ai.tool.definitions`` (a JSON list of
    ``{"type": "function", "name", "description", "parameters"}``, or the OpenAI shape with
    ``function``) and OpenLLMetry's ``llm.request.functions.{i}.*``. Unreadable ones are skipped:
    a tool description does not stop the import."""
    found: list[dict[str, Any]] = []
    raw = span.attrs.get("gen_ai.tool.definitions")
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            raw = None
    if isinstance(raw, list):
        found.extend(t.get("function", t) for t in raw if isinstance(t, dict))
    rows: dict[int, dict[str, Any]] = {}
    for key, value in span.attrs.items():
        m = _FUNCTION_KEY.fullmatch(key)
        if m:
            rows.setdefault(int(m.group(1)), {})[m.group(2)] = value
    found.extend(rows[i] for i in sorted(rows))
    for fn in found:
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str) or name in builder.tools:
            continue
        params = fn.get("parameters")
        if isinstance(params, str):
            try:
                params = json.loads(params)
            except ValueError:
                params = None
        desc = fn.get("description")
        builder.tools[name] = ToolDefinition(name=name, description=desc if isinstance(desc, str) else "",
                                             parameters=params if isinstance(params, dict) else None)


def handle(span: Span, source_index: int, builder: SpanBuilder, speaker: str | None, is_leaf: bool) -> None:
    """Add the steps of one GenAI span to ``builder``."""
    op = operation(span)
    path = span.path
    if op == "execute_tool":
        name = span.attrs.get("gen_ai.tool.name")
        if name is None:
            name = span.name.removeprefix("execute_tool").strip() or span.name
        cid = span.attrs.get("gen_ai.tool.call.id")
        args_key = "gen_ai.tool.call.arguments"
        builder.tool(
            span,
            source_index,
            path,
            name=str(name),
            call_id=str(cid) if cid is not None else None,
            arguments=_loose_args(span.attrs.get(args_key)),
            arguments_given=args_key in span.attrs,
            result=span.attrs.get("gen_ai.tool.call.result"),
            speaker=speaker,
            result_recorded="gen_ai.tool.call.result" in span.attrs,
        )
        return
    if op in AGENT_OPERATIONS and not (is_leaf and has_messages(span)):
        return
    if op not in LLM_OPERATIONS and not has_messages(span):
        return  # embeddings, unknown operations without messages
    offered_tools(span, builder)
    llm = llm_fields(span)
    inputs = _system_instructions(span)
    conversation = None
    if "gen_ai.input.messages" in span.attrs:
        key = "gen_ai.input.messages"
        value = _json_attr(span, key)
        repeat, records = builder.repeated(value)
        if builder.remember and isinstance(value, list):  # read in builder.inputs, the repeat maybe not
            conversation = Conversation(value, repeat, records,
                                        lambda part, first: _parts_messages(part, span.attr_path(key), first))
        else:
            inputs += _parts_messages(value, span.attr_path(key))
    else:
        inputs += _flat_messages(span, "prompt")
    recorded = True
    if "gen_ai.output.messages" in span.attrs:
        outputs = _parts_messages(_json_attr(span, "gen_ai.output.messages"),
                                  span.attr_path("gen_ai.output.messages"))
        flat = _flat_messages(span, "completion")
        if flat and not any(m.text or m.calls for m in outputs):
            outputs = flat  # LiteLLM: the calls only in gen_ai.completion.{i}.function_call.*
    else:
        outputs = _flat_messages(span, "completion")
        # message content is opt-in in OTel; without it the call's text is unknown, not empty
        recorded = any(k.startswith("gen_ai.completion.") for k in span.attrs)
    for msg in outputs:
        if msg.role == "assistant" and msg.speaker is None:
            msg.speaker = speaker
    builder.inputs(span, source_index, inputs, path, conversation=conversation)
    status, error_type, _ = span.failure()
    if not outputs:
        if status is not None:
            builder.error(span, source_index, path, llm, speaker)
        elif op in LLM_OPERATIONS:
            # a call that returned nothing is an empty response, which the rules must see; when
            # the content was not recorded the step says so (metadata content_recorded=False)
            outputs = [Msg("assistant", "", speaker=speaker)]
            if not recorded:
                llm = {**llm, "metadata": {**llm["metadata"], "content_recorded": False}}
    made = builder.outputs(span, source_index, outputs, path, llm)
    if made and status is not None:
        made[0].status = status
        made[0].error_type = error_type


__all__ = ["handle", "is_genai", "agent_name", "operation"]
