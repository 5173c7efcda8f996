"""Request attributes and RBAC rule evaluation (k8s.io/apiserver/pkg/endpoints/request.RequestInfoFactory,
plugin/pkg/auth/authorizer/rbac), so a test can check qosd's ClusterRole against the requests qosd
really makes: a missing verb or subresource (``pods/eviction``, ``nodes/status``) is a 403 here, as it
would be in a cluster, instead of a surprise at deploy time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tests.kubeapi import errors as E
from tests.kubeapi.errors import ApiError

Json = dict[str, Any]

_NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})
_TRUE = frozenset({"1", "t", "T", "true", "TRUE", "True"})


@dataclass(frozen=True)
class RequestInfo:
    """What the authorizer sees. ``namespace`` is the request's namespace attribute (for a Namespace
    object itself, its own name); ``name`` may come from a metadata.name field selector on list/watch."""

    path: str
    resource_request: bool
    verb: str
    group: str = ""
    version: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path_name: str = ""  # the name in the URL (``name`` may instead come from a field selector)

    @property
    def combined_resource(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


def parse_request(method: str, path: str, query: Mapping[str, str]) -> RequestInfo:
    """RequestInfoFactory.NewRequestInfo for the /api and /apis prefixes."""
    parts = [p for p in path.strip("/").split("/") if p] if path.strip("/") else []
    verbs = {
        "POST": "create",
        "GET": "get",
        "HEAD": "get",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete",
    }
    verb = verbs.get(method, "")
    plain = RequestInfo(path, False, method.lower())  # non-resource requests: the verb is the method
    if not parts or parts[0] not in ("api", "apis"):
        return plain
    if parts[0] == "api":
        if len(parts) < 2:
            return plain
        group, version, rest = "", parts[1], parts[2:]
    else:
        if len(parts) < 3:
            return plain
        group, version, rest = parts[1], parts[2], parts[3:]
    if not rest:
        return plain
    if rest[0] == "watch":  # deprecated /watch/ prefix
        verb, rest = "watch", rest[1:]
    namespace = ""
    if rest and rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    resource = rest[0] if rest else ""
    name = path_name = rest[1] if len(rest) >= 2 else ""
    subresource = rest[2] if len(rest) >= 3 else ""
    if not name and verb == "get":
        verb = "watch" if query.get("watch", "") in _TRUE else "list"
        for term in (query.get("fieldSelector") or "").split(","):
            key, sep, value = term.partition("=")
            if sep and key == "metadata.name" and value and not value.startswith("="):
                name = value
    if not name and verb == "delete":
        verb = "deletecollection"
    return RequestInfo(path, True, verb, group, version, resource, subresource, namespace, name, path_name)


@dataclass(frozen=True)
class Identity:
    """A bearer token's user; ``rules`` None means unrestricted (the kubeconfig's admin)."""

    user: str
    rules: tuple[Json, ...] | None = None


def _has(values: Sequence[str] | None, wanted: str) -> bool:
    return bool(values) and ("*" in values or wanted in values)  # type: ignore[operator]


def _resource_matches(rule: Json, info: RequestInfo) -> bool:
    """rbac.ResourceMatches: exact resource, "*", resource/subresource, or "*/subresource"."""
    for resource in rule.get("resources") or []:
        if resource in ("*", info.combined_resource):
            return True
        if info.subresource and resource == f"*/{info.subresource}":
            return True
    return False


def rule_allows(rule: Json, info: RequestInfo) -> bool:
    if not info.resource_request:
        urls = rule.get("nonResourceURLs") or []
        path_ok = any(u == info.path or (u.endswith("*") and info.path.startswith(u[:-1])) for u in urls)
        return path_ok and _has(rule.get("verbs"), info.verb)
    if not _has(rule.get("verbs"), info.verb) or not _has(rule.get("apiGroups"), info.group):
        return False
    if not _resource_matches(rule, info):
        return False
    names = rule.get("resourceNames") or []
    return not names or info.name in names


# What every authenticated user may read (system:discovery, system:public-info-viewer).
_PUBLIC_PATHS = ("/api", "/apis", "/version", "/healthz", "/livez", "/readyz", "/openapi")


def authorize(identity: Identity, info: RequestInfo) -> None:
    """Raise the API server's 403 unless one of the identity's rules allows the request."""
    if identity.rules is None:
        return
    if not info.resource_request and info.verb == "get" and info.path.rstrip("/").startswith(_PUBLIC_PATHS):
        return
    if any(rule_allows(rule, info) for rule in identity.rules):
        return
    raise forbidden(identity.user, info)


def forbidden(user: str, info: RequestInfo) -> ApiError:
    """responsewriters.Forbidden: ``<resource> "<name>" is forbidden: User "<u>" cannot <verb> resource
    "<res[/sub]>" in API group "<g>" in the namespace "<ns>"`` (or ``at the cluster scope``)."""
    if not info.resource_request:
        return ApiError(
            403, "Forbidden", f'forbidden: User "{user}" cannot {info.verb} path "{info.path}"', {}
        )
    scope = f'in the namespace "{info.namespace}"' if info.namespace else "at the cluster scope"
    why = (
        f'User "{user}" cannot {info.verb} resource "{info.combined_resource}" '
        f'in API group "{info.group}" {scope}'
    )
    return E.forbidden_error(info.group, info.resource, info.name, why)
