"""metav1.Status errors, shaped exactly as the API server writes them.

Why exact: qosd (and the official client under it) branch on ``code`` and ``reason``, and the tests read
``message`` and ``details.causes`` to check that an operator at 3 a.m. would see what a real cluster says.
The texts are those of k8s.io/apimachinery/pkg/api/errors (``NewNotFound``, ``NewConflict``,
``NewInvalid``, ...) and k8s.io/apimachinery/pkg/util/validation/field (``Error.ErrorBody``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

Json = dict[str, Any]

# field.ErrorType -> (StatusCause.reason, the text ErrorBody starts with)
_FIELD_ERROR_TYPES: dict[str, tuple[str, str]] = {
    "NotFound": ("FieldValueNotFound", "Not found"),
    "Required": ("FieldValueRequired", "Required value"),
    "Duplicate": ("FieldValueDuplicate", "Duplicate value"),
    "Invalid": ("FieldValueInvalid", "Invalid value"),
    "NotSupported": ("FieldValueNotSupported", "Unsupported value"),
    "Forbidden": ("FieldValueForbidden", "Forbidden"),
    "TooLong": ("FieldValueTooLong", "Too long"),
    "TooMany": ("FieldValueTooMany", "Too many"),
    "Internal": ("InternalError", "Internal error"),
    "TypeInvalid": ("FieldValueTypeInvalid", "Invalid value"),
}
# ErrorBody prints no value for these (field.Error.ErrorBody).
_NO_VALUE = frozenset({"Required", "Forbidden", "TooLong", "Internal"})
_OMIT = object()


def _go_value(value: Any) -> str:
    """The value as Go's %v/%q would print it in a field error: strings quoted, the rest as JSON."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return json.dumps(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class FieldError:
    """One field.Error: ``kind`` is the field.ErrorType name (Required, Invalid, NotSupported, ...)."""

    kind: str
    field: str
    detail: str = ""
    value: Any = _OMIT

    def body(self) -> str:
        """field.Error.ErrorBody: the type, the bad value unless omitted, then the detail."""
        text = _FIELD_ERROR_TYPES[self.kind][1]
        if self.kind not in _NO_VALUE and self.value is not _OMIT:
            text = f"{text}: {_go_value(self.value)}"
        if self.detail:
            text = f"{text}: {self.detail}"
        return text

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}" if self.field else self.body()

    def cause(self) -> Json:
        return {"reason": _FIELD_ERROR_TYPES[self.kind][0], "message": self.body(), "field": self.field}


def required(path: str, detail: str = "") -> FieldError:
    return FieldError("Required", path, detail)


def invalid(path: str, value: Any, detail: str) -> FieldError:
    return FieldError("Invalid", path, detail, value)


def forbidden(path: str, detail: str) -> FieldError:
    return FieldError("Forbidden", path, detail)


@dataclass
class ApiError(Exception):
    """An error response: raised anywhere below the HTTP layer, written as a metav1.Status."""

    code: int
    reason: str
    message: str
    details: Json | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def status(self) -> Json:
        out: Json = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
        }
        if self.reason:
            out["reason"] = self.reason
        if self.details is not None:
            out["details"] = self.details
        out["code"] = self.code
        return out


def _details(group: str, resource: str, name: str, **extra: Any) -> Json:
    """StatusDetails as NewNotFound & co. fill them: ``kind`` holds the *resource* (plural) name."""
    out: Json = {}
    if name:
        out["name"] = name
    if group:
        out["group"] = group
    out["kind"] = resource
    out.update({k: v for k, v in extra.items() if v})
    return out


def qualified(group: str, resource: str) -> str:
    """schema.GroupResource.String(): ``pods`` or ``qospolicies.qosd.io``."""
    return f"{resource}.{group}" if group else resource


def not_found(group: str, resource: str, name: str) -> ApiError:
    return ApiError(
        404, "NotFound", f'{qualified(group, resource)} "{name}" not found', _details(group, resource, name)
    )


def already_exists(group: str, resource: str, name: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{qualified(group, resource)} "{name}" already exists',
        _details(group, resource, name),
    )


def conflict(group: str, resource: str, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified(group, resource)} "{name}": {why}',
        _details(group, resource, name),
    )


OPTIMISTIC_LOCK_MESSAGE = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


def stale(group: str, resource: str, name: str) -> ApiError:
    """409 for an update carrying a resourceVersion that is no longer current (storage.ErrConflict)."""
    return conflict(group, resource, name, OPTIMISTIC_LOCK_MESSAGE)


def invalid_object(group: str, kind: str, name: str, errors: list[FieldError]) -> ApiError:
    """NewInvalid: 422 with one cause per field error; the message aggregates them as Go does."""
    qualified_kind = f"{kind}.{group}" if group else kind
    joined = str(errors[0]) if len(errors) == 1 else "[" + ", ".join(str(e) for e in errors) + "]"
    details: Json = {"name": name} if name else {}
    if group:
        details["group"] = group
    details["kind"] = kind
    details["causes"] = [e.cause() for e in errors]
    return ApiError(422, "Invalid", f'{qualified_kind} "{name}" is invalid: {joined}', details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def expired(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def too_many_requests(message: str, causes: list[Json], retry_after: int = 0) -> ApiError:
    details: Json = {"causes": causes}
    headers: dict[str, str] = {}
    if retry_after:
        details["retryAfterSeconds"] = retry_after
        headers["Retry-After"] = str(retry_after)
    return ApiError(429, "TooManyRequests", message, details, headers)


def forbidden_error(group: str, resource: str, name: str, why: str) -> ApiError:
    """NewForbidden: ``<resource> "<name>" is forbidden: <why>`` (no name: ``<resource> is forbidden``)."""
    target = qualified(group, resource)
    message = f'{target} "{name}" is forbidden: {why}' if name else f"{target} is forbidden: {why}"
    return ApiError(403, "Forbidden", message, _details(group, resource, name))


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


def method_not_allowed(method: str) -> ApiError:
    return ApiError(
        405, "MethodNotAllowed", f"the server does not allow this method on the requested resource ({method})"
    )


def page_not_found() -> ApiError:
    return ApiError(
        404,
        "NotFound",
        "the server could not find the requested resource",
        {"causes": [{"reason": "UnexpectedServerResponse", "message": "404 page not found"}]},
    )


# Reasons for codes injected by fail_next (metav1.StatusReason for each code, as NewGenericServerResponse).
REASON_FOR_CODE: dict[int, str] = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}
