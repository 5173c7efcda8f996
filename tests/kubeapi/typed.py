"""Typed decoding of built-in resources: fields the Go types do not have are dropped, with a warning.

Why: the API server decodes a built-in object (or a patched one) into its Go struct, so an unknown or
misspelled field (``allocatible``, a taint's ``valu``) silently disappears and the response carries a
``Warning: 299 - "unknown field ..."`` header (fieldValidation=Warn, the default). A node agent that
relies on such a field would pass against a lenient fake and fail on a cluster. The field sets come
from the official client's generated models (``openapi_types`` / ``attribute_map``), which are
generated from the same OpenAPI document the server publishes.
"""

from __future__ import annotations

import contextvars
from functools import cache
from typing import Any

from kubernetes.client import models

from tests.kubeapi.errors import bad_request

# Unknown-field warnings of the request being handled (None outside a request).
WARNINGS: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("kubeapi_warnings", default=None)
# The request's ``fieldValidation`` (Ignore, Warn, Strict), set by the server for each request.
FIELD_VALIDATION: contextvars.ContextVar[str] = contextvars.ContextVar("kubeapi_field_validation", default="Warn")
FIELD_VALIDATION_MODES = ("Ignore", "Warn", "Strict")


def field_validation(mark: int) -> None:
    """Apply the request's fieldValidation to the unknown fields found since ``mark`` (the length of
    WARNINGS before the body was decoded): Warn keeps them as Warning headers, Ignore drops them,
    Strict refuses the request with 400 BadRequest, in the API server's wording ("strict decoding
    error: unknown field ..."; https://kubernetes.io/docs/reference/using-api/api-concepts/#field-validation)."""
    warnings = WARNINGS.get()
    if warnings is None or len(warnings) <= mark:
        return
    found = warnings[mark:]
    mode = FIELD_VALIDATION.get()
    if mode == "Warn":
        return
    del warnings[mark:]
    if mode == "Strict":
        raise bad_request("strict decoding error: " + ", ".join(found))


@cache
def _fields(model_name: str) -> dict[str, str] | None:
    """JSON field name -> openapi type of a generated model, or None when ``model_name`` is not one."""
    model = getattr(models, model_name, None)
    attribute_map = getattr(model, "attribute_map", None)
    openapi_types = getattr(model, "openapi_types", None)
    if not isinstance(attribute_map, dict) or not isinstance(openapi_types, dict):
        return None
    return {json_name: openapi_types[attr] for attr, json_name in attribute_map.items()}


def prune_typed(value: Any, type_name: str, path: str = "") -> Any:
    """``value`` with every field unknown to ``type_name`` (a model name, ``List[...]``, ``Dict[str,
    ...]`` or a scalar type) removed; each removal is recorded in WARNINGS."""
    if value is None:
        return None
    if type_name.startswith("List[") and isinstance(value, list):
        inner = type_name[5:-1]
        return [prune_typed(v, inner, f"{path}[{i}]") for i, v in enumerate(value)]
    if type_name.startswith("Dict[") and isinstance(value, dict):
        inner = type_name[type_name.index(",") + 1 : -1].strip()
        return {k: prune_typed(v, inner, f"{path}.{k}" if path else k) for k, v in value.items()}
    fields = _fields(type_name)
    if fields is None or not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        child = f"{path}.{key}" if path else key
        if key not in fields:
            warnings = WARNINGS.get()
            if warnings is not None:
                warnings.append(f'unknown field "{child}"')
            continue
        out[key] = prune_typed(item, fields[key], child)
    return out
