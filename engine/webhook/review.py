"""One AdmissionReview (admission.k8s.io/v1) in, one out: the webhook's decision, without HTTP.

The API server sends ``request`` (uid, kind, resource, operation, object, oldObject, userInfo,
dryRun, ...) and expects ``response`` with the same uid, ``allowed``, and on a denial a
metav1.Status whose ``message`` it prefixes with ``admission webhook "<name>" denied the request:``
before answering the client. Warnings (``response.warnings``) reach kubectl as ``Warning:`` lines.

Only CREATE and UPDATE of qosd.io QoSPolicy objects are checked. Anything else the configuration
happens to send (a DELETE, a CONNECT, another kind through a too-wide rule) is allowed: refusing
what qosd does not understand would turn a configuration slip into a cluster outage.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from engine.config.errors import Problem, summary_line
from engine.kube.client import GROUP, POLICY_KIND
from engine.webhook.check import Verdict

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
CHECKED_OPERATIONS = ("CREATE", "UPDATE")
DENIED_CODE = 422  # Unprocessable Entity, reason Invalid: the object is refused for its content
MAX_PROBLEMS = 25  # in one denial; the rest are counted (qosd validate lists them all)
MAX_WARNINGS = 10
MAX_WARNING_CHARS = 256  # the API server may truncate longer warnings


class BadReview(ValueError):
    """The request is not an AdmissionReview this webhook can answer: HTTP 400 with this message."""


def review(body: Any, check: Callable[[Mapping[str, Any]], Verdict]) -> dict[str, Any]:
    """The AdmissionReview answering ``body`` (decoded JSON). Raises BadReview for a malformed one."""
    request = _request(body)
    uid = request["uid"]
    if not _checked(request):
        return _answer(uid, True)
    obj = request.get("object")
    if not isinstance(obj, Mapping):
        raise BadReview(
            f"request.object must be the {POLICY_KIND} being written (an object) on {request['operation']}"
        )
    verdict = check(obj)
    warnings = [_warning(w) for w in verdict.warnings[:MAX_WARNINGS]]
    if len(verdict.warnings) > MAX_WARNINGS:
        warnings.append(f"... and {len(verdict.warnings) - MAX_WARNINGS} more warnings (run `qosd validate`)")
    if not verdict.errors:
        return _answer(uid, True, warnings=warnings)
    status = {
        "status": "Failure",
        "code": DENIED_CODE,
        "reason": "Invalid",
        "message": denial_message(verdict.errors),
    }
    return _answer(uid, False, status=status, warnings=warnings)


def denial_message(errors: Sequence[Problem]) -> str:
    """Each problem as ``qosd validate`` prints it (QoSPolicy/<name> <JSON path>: error: ..., the
    node variants it was found on, its hint), then one summary line."""
    shown = [p.format() for p in errors[:MAX_PROBLEMS]]
    if len(errors) > MAX_PROBLEMS:
        shown.append(f"... and {len(errors) - MAX_PROBLEMS} more (run `qosd validate` on the policy for all)")
    return "\n".join([*shown, f"{summary_line(errors)}: the QoSPolicy was not stored"])


def _warning(p: Problem) -> str:
    """One line: an HTTP Warning header cannot hold a line break."""
    text = " ".join((f"{p.location}: {p.message}" + (f" (hint: {p.hint})" if p.hint else "")).split())
    return text if len(text) <= MAX_WARNING_CHARS else text[: MAX_WARNING_CHARS - 3] + "..."


def _request(body: Any) -> dict[str, Any]:
    if not isinstance(body, Mapping):
        raise BadReview("the body must be a JSON object: an admission.k8s.io/v1 AdmissionReview")
    if body.get("apiVersion") != API_VERSION or body.get("kind") != KIND:
        raise BadReview(
            f"expected apiVersion {API_VERSION}, kind {KIND}; got apiVersion {body.get('apiVersion')!r}, "
            f"kind {body.get('kind')!r} (list only v1 in the configuration's admissionReviewVersions)"
        )
    request = body.get("request")
    if not isinstance(request, Mapping):
        raise BadReview("request is missing: an AdmissionReview from the API server carries one")
    for key in ("uid", "operation"):
        if not isinstance(request.get(key), str) or not request[key]:
            raise BadReview(f"request.{key} must be a non-empty string")
    kind = request.get("kind")
    if not isinstance(kind, Mapping) or not isinstance(kind.get("kind"), str):
        raise BadReview("request.kind must be an object with group, version and kind")
    return dict(request)


def _checked(request: Mapping[str, Any]) -> bool:
    kind = request["kind"]
    return (
        request["operation"] in CHECKED_OPERATIONS
        and kind.get("group") == GROUP
        and kind.get("kind") == POLICY_KIND
        and not request.get("subResource")
    )


def _answer(
    uid: str, allowed: bool, *, status: dict[str, Any] | None = None, warnings: Sequence[str] = ()
) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if status is not None:
        response["status"] = status
    if warnings:
        response["warnings"] = list(warnings)
    return {"apiVersion": API_VERSION, "kind": KIND, "response": response}
