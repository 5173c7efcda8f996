"""API discovery: which groups, versions and resources the server serves, in both wire forms.

* Legacy discovery (https://kubernetes.io/docs/concepts/overview/kubernetes-api/#discovery-api,
  "Unaggregated discovery"): ``/api`` (APIVersions), ``/apis`` (APIGroupList) and one APIResourceList per
  group/version at ``/api/v1`` and ``/apis/<group>/<version>``.
* Aggregated discovery (KEP-3352, apidiscovery.k8s.io/v2, GA in 1.30): ``/api`` and ``/apis`` answer
  with an APIGroupDiscoveryList holding every version's resources at once, but only when the client
  asks for it in ``Accept`` (``application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList``);
  the response's Content-Type says which form was sent, and a client that gets the legacy form falls
  back to the per-group/version requests.

kubectl (client-go's discovery client) asks for v2, then v2beta1, then plain JSON, in that order; the
server answers the first form in the client's list that it serves. The emulator serves v2 and the
legacy form, not v2beta1. Short names and categories are what make ``kubectl get qosp,qosns`` and
``kubectl get qosd`` resolve, exactly as on a cluster (RESTMapper built from discovery).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tests.kubeapi.registry import ResourceType

Json = dict[str, Any]

AGGREGATED_V2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
JSON = "application/json"

_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


def _media_params(entry: str) -> tuple[str, dict[str, str]]:
    base, *params = [p.strip() for p in entry.split(";")]
    out = {}
    for param in params:
        key, _, value = param.partition("=")
        out[key.strip()] = value.strip()
    return base.lower(), out


def wants_aggregated(accept: str) -> bool:
    """Whether the first media type of ``accept`` this server can produce is aggregated discovery v2
    (content negotiation in the client's order; ``q`` weights are not used by kubectl)."""
    for entry in accept.split(","):
        base, params = _media_params(entry)
        if base == JSON and params.get("as") == "APIGroupDiscoveryList":
            if params.get("g") == "apidiscovery.k8s.io" and params.get("v") == "v2":
                return True
            continue  # v2beta1: not served, try the client's next choice
        if base in (JSON, "application/*", "*/*"):
            return False
    return False


def _verbs(rt: ResourceType) -> list[str]:
    return list(_VERBS)


def _names(rt: ResourceType) -> Json:
    """The short names and categories a RESTMapper resolves (both discovery forms carry them)."""
    out: Json = {}
    if rt.short_names:
        out["shortNames"] = list(rt.short_names)
    if rt.categories:
        out["categories"] = list(rt.categories)
    return out


def _subresources(rt: ResourceType) -> list[tuple[str, str, list[str]]]:
    """(name, response kind, verbs) of each subresource."""
    out = []
    for sub in sorted(rt.subresources):
        if sub == "eviction":
            out.append((sub, "Eviction", ["create"]))
        else:
            out.append((sub, rt.kind, ["get", "patch", "update"]))
    return out


def group_versions(types: Iterable[ResourceType]) -> dict[str, list[str]]:
    """group -> served versions, the preferred (first registered) first; "" is the core group."""
    groups: dict[str, list[str]] = {}
    for rt in types:
        versions = groups.setdefault(rt.group, [])
        if rt.version not in versions:
            versions.append(rt.version)
    return groups


def api_versions(server_address: str) -> Json:
    """``GET /api`` in the legacy form."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def api_group_list(types: Iterable[ResourceType]) -> Json:
    """``GET /apis`` in the legacy form."""
    groups = {g: vs for g, vs in group_versions(types).items() if g}
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [
            {
                "name": g,
                "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
                "preferredVersion": {"groupVersion": f"{g}/{vs[0]}", "version": vs[0]},
            }
            for g, vs in sorted(groups.items())
        ],
    }


def api_resource_list(types: Iterable[ResourceType], group: str, version: str) -> Json | None:
    """``GET /api/v1`` or ``/apis/<group>/<version>``: an APIResourceList, None when not served."""
    served = sorted(
        (rt for rt in types if rt.group == group and rt.version == version), key=lambda r: r.plural
    )
    if not served:
        return None
    resources: list[Json] = []
    for rt in served:
        entry: Json = {
            "name": rt.plural,
            "singularName": rt.singular,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": _verbs(rt),
            **_names(rt),
        }
        resources.append(entry)
        for sub, kind, verbs in _subresources(rt):
            resources.append(
                {
                    "name": f"{rt.plural}/{sub}",
                    "singularName": "",
                    "namespaced": rt.namespaced,
                    "kind": kind,
                    "verbs": verbs,
                }
            )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }


def _discovery_resource(rt: ResourceType) -> Json:
    """An apidiscovery.k8s.io/v2 APIResourceDiscovery."""
    entry: Json = {
        "resource": rt.plural,
        "responseKind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
        "scope": "Namespaced" if rt.namespaced else "Cluster",
        "singularResource": rt.singular,
        "verbs": _verbs(rt),
        **_names(rt),
    }
    subs = []
    for sub, kind, verbs in _subresources(rt):
        group = "policy" if sub == "eviction" else rt.group
        version = "v1" if sub == "eviction" else rt.version
        subs.append(
            {
                "subresource": sub,
                "responseKind": {"group": group, "version": version, "kind": kind},
                "verbs": verbs,
            }
        )
    if subs:
        entry["subresources"] = subs
    return entry


def aggregated(types: Iterable[ResourceType], legacy: bool) -> Json:
    """``GET /api`` (``legacy``: the core group only) or ``GET /apis`` (every named group) as an
    APIGroupDiscoveryList; versions in preference order, resources sorted by name."""
    types = list(types)
    items = []
    for group, versions in sorted(group_versions(types).items()):
        if bool(group) == legacy:
            continue
        items.append(
            {
                "metadata": {"name": group} if group else {},
                "versions": [
                    {
                        "version": v,
                        "resources": [
                            _discovery_resource(rt)
                            for rt in sorted(types, key=lambda r: r.plural)
                            if rt.group == group and rt.version == v
                        ],
                        "freshness": "Current",
                    }
                    for v in versions
                ],
            }
        )
    return {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    }


def serve(path: str, accept: str, types: list[ResourceType], server_address: str) -> tuple[Json, str] | None:
    """The discovery document at ``path`` and its Content-Type, or None when ``path`` is not one."""
    if path in ("/api", "/apis"):
        if wants_aggregated(accept):
            return aggregated(types, legacy=path == "/api"), AGGREGATED_V2
        return (api_versions(server_address) if path == "/api" else api_group_list(types)), JSON
    parts = path.strip("/").split("/")
    if parts[0] == "api" and len(parts) == 2:
        found = api_resource_list(types, "", parts[1])
    elif parts[0] == "apis" and len(parts) == 3:
        found = api_resource_list(types, parts[1], parts[2])
    elif parts[0] == "apis" and len(parts) == 2:
        versions = group_versions(types).get(parts[1])
        if not versions:
            return None
        group = parts[1]
        return {
            "kind": "APIGroup",
            "apiVersion": "v1",
            "name": group,
            "versions": [{"groupVersion": f"{group}/{v}", "version": v} for v in versions],
            "preferredVersion": {"groupVersion": f"{group}/{versions[0]}", "version": versions[0]},
        }, JSON
    else:
        return None
    return (found, JSON) if found is not None else None
