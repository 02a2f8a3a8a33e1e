"""A small JSON-schema validator over an OpenAPI 3.1 document's components: the subset
FastAPI and pydantic emit ($ref, type, anyOf/allOf, properties, required,
additionalProperties, items, enum, const, format date-time). An object schema with
properties and no additionalProperties is taken as closed, so an undocumented member counts.
Returns the errors, each with the path where it was found, so a test can say what differs."""

from __future__ import annotations

import re
from typing import Any

_DATE_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")
_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
    "null": (type(None),), "object": (dict,), "array": (list,)}


def errors(doc: dict[str, Any], schema: dict[str, Any], value: Any,
           where: str = "$") -> list[str]:
    if "$ref" in schema:
        name = schema["$ref"].removeprefix("#/components/schemas/")
        return errors(doc, doc["components"]["schemas"][name], value, where)
    found: list[str] = []
    if "anyOf" in schema:
        options = [errors(doc, s, value, where) for s in schema["anyOf"]]
        if all(options):
            found.append(f"{where}: matches none of anyOf: {min(options, key=len)}")
    for sub in schema.get("allOf", []):
        found += errors(doc, sub, value, where)
    kind = schema.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        ok = any(isinstance(value, _TYPES[k]) and not (isinstance(value, bool)
                                                         and k in ("integer", "number"))
                 for k in kinds)
        if not ok:
            return [*found, f"{where}: {value!r} is not of type {kind}"]
    if "enum" in schema and value not in schema["enum"]:
        found.append(f"{where}: {value!r} not in {schema['enum']}")
    if "const" in schema and value != schema["const"]:
        found.append(f"{where}: {value!r} is not {schema['const']!r}")
    if schema.get("format") == "date-time" and isinstance(value, str) \
            and not _DATE_TIME.match(value):
        found.append(f"{where}: {value!r} is not RFC 3339")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        found += [f"{where}: missing {k!r}" for k in schema.get("required", [])
                  if k not in value]
        # A model's object is closed: a member the document does not name is a difference.
        extra = schema.get("additionalProperties", not props)
        for k, v in value.items():
            if k in props:
                found += errors(doc, props[k], v, f"{where}.{k}")
            elif extra is False:
                found.append(f"{where}: undocumented member {k!r}")
            elif isinstance(extra, dict):
                found += errors(doc, extra, v, f"{where}.{k}")
    if isinstance(value, list) and "items" in schema:
        for i, v in enumerate(value):
            found += errors(doc, schema["items"], v, f"{where}[{i}]")
    return found


def response_schema(doc: dict[str, Any], path: str, method: str, status: int
                    ) -> tuple[str, dict[str, Any]]:
    """(media type, schema) the document declares for the answer; KeyError if undeclared."""
    content = doc["paths"][path][method]["responses"][str(status)]["content"]
    (media, body), = content.items()
    return media, body["schema"]
