"""A JSON Schema subset validator for tool arguments (:func:`schema_problems`).

Both the ``malformed_call`` rule and the classifier's step representation read a call's arguments
against the tool's declared schema; this is the one place that knows how.
"""

from __future__ import annotations

from typing import Any

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}


def _type_ok(value: Any, expected: str) -> bool:
    types = _JSON_TYPES.get(expected)
    if types is None:
        return True  # a type we don't know: don't guess
    if isinstance(value, bool) and expected in ("integer", "number"):
        return False
    if expected == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, types)


def schema_problems(value: Any, schema: dict[str, Any], path: str = "", depth: int = 0) -> list[str]:
    """What is wrong with ``value`` under a JSON Schema subset (``type``, ``properties``, ``required``,
    ``additionalProperties: false``, ``enum``, ``items``); ``[]`` when nothing is.

    A small validator on purpose: tool schemas use this subset, and it costs microseconds.

    >>> for p in schema_problems({"city": 3, "x": 1}, {"type": "object", "required": ["city", "units"],
    ...         "properties": {"city": {"type": "string"}}, "additionalProperties": False}):
    ...     print(p)
    missing required property 'units'
    city: expected string, got int
    unknown property 'x'
    """
    if depth > 8 or not isinstance(schema, dict):
        return []
    where = f"{path}: " if path else ""
    expected = schema.get("type")
    if isinstance(expected, str) and not _type_ok(value, expected):
        return [f"{where}expected {expected}, got {type(value).__name__}"]
    if isinstance(expected, list) and expected and not any(_type_ok(value, t) for t in expected):
        return [f"{where}expected one of {expected}, got {type(value).__name__}"]
    problems: list[str] = []
    enum = schema.get("enum")
    if isinstance(enum, list) and value not in enum:
        problems.append(f"{where}{value!r} is not one of {enum}")
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for req in schema.get("required") or []:
            if req not in value:
                problems.append(f"{where}missing required property {req!r}")
        for key, sub in value.items():
            if isinstance(props, dict) and key in props:
                problems += schema_problems(sub, props[key], f"{path}.{key}" if path else key, depth + 1)
            elif schema.get("additionalProperties") is False:
                problems.append(f"{where}unknown property {key!r}")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for k, item in enumerate(value[:100]):
            problems += schema_problems(item, schema["items"], f"{path}[{k}]", depth + 1)
    return problems


__all__ = ["schema_problems"]
