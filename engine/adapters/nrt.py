"""Zone values of a published resource into this node's NodeResourceTopology (topology.node.k8s.io/
v1alpha1, cluster-scoped, named after the node): where Koordinator's slo-controller puts NUMA-level
batch resources for its NUMA-aware scheduling (batchresource plugin prepareForNodeResourceTopology,
plugins/util UpdateNRTZoneListIfNeeded).

The object is the node agent's (koordlet creates it and reports each zone's cpu and memory); like
Koordinator, qosd only updates it, and only once it exists with cpu and memory in its zones. For a
zone with a value, the resource's entry gets that value as capacity, allocatable and available (added
when missing, the list kept sorted by name); an entry in a zone without a value is set to 0, as
Koordinator resets it. Written only when something differs (quantities compared by value), as a
read-modify-write with the resourceVersion as precondition: a 409 (the agent updated the object
meanwhile) re-reads and retries, as RetryOnConflict does.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from engine.kube.apicall import consume, describe_error, read_json
from engine.kube.client import REQUEST_TIMEOUT
from engine.model.units import parse_quantity

GROUP, VERSION, PLURAL = "topology.node.k8s.io", "v1alpha1", "noderesourcetopologies"
CONFLICT_RETRIES = 3  # after the first write
REQUIRED = ("cpu", "memory")  # Koordinator's isNRTResourcesCreated


def _value(q: object) -> float | None:
    if not isinstance(q, str | int | float) or isinstance(q, bool):
        return None
    try:
        return parse_quantity(q)
    except ValueError:
        return None


def updated_zones(
    zones: list[dict[str, Any]], resource: str, values: Mapping[str, str]
) -> tuple[list[dict[str, Any]], list[str]]:
    """``zones`` with ``resource`` set per zone from ``values`` (zone name -> quantity) and reset to 0
    in the zones ``values`` does not name; and what changed, one line per zone."""
    out = copy.deepcopy(zones)
    changes: list[str] = []
    for zone in out:
        name = str(zone.get("name", ""))
        resources: list[dict[str, Any]] = zone.setdefault("resources", [])
        entry = next((r for r in resources if r.get("name") == resource), None)
        want = values.get(name)
        if want is None:
            fields = ("capacity", "allocatable", "available")
            if entry is not None and any(_value(entry.get(f)) != 0 for f in fields):
                entry.update({f: "0" for f in fields})
                changes.append(f"{name} reset")
            continue
        target = _value(want)
        if entry is None:
            resources.append({"name": resource, "capacity": want, "allocatable": want, "available": want})
            resources.sort(key=lambda r: str(r.get("name", "")))
            changes.append(f"{name} {want}")
            continue
        stale = [f for f in ("capacity", "allocatable", "available") if _value(entry.get(f)) != target]
        if stale:
            before = entry.get(stale[0])
            entry.update({f: want for f in stale})
            changes.append(f"{name} {before} -> {want}")
    return out, changes


def has_resources(zones: list[dict[str, Any]]) -> bool:
    """Koordinator updates an object only once its agent reported cpu and memory in a zone."""
    names = {r.get("name") for z in zones for r in z.get("resources") or () if isinstance(r, Mapping)}
    return all(n in names for n in REQUIRED)


class TopologyZones:
    """Writes zone values into the NodeResourceTopology named ``node_name``.

    Unlike the Node, the object is not watched: the same values (or a missing object) are checked
    again only after ``recheck`` seconds, so a daemon re-planning every round does not read it every
    round (the agent, or someone else, changing it meanwhile is put right at the next check)."""

    def __init__(
        self,
        api_client: client.ApiClient,
        node_name: str,
        clock: Callable[[], float] = time.monotonic,
        recheck: float = 60.0,
    ) -> None:
        self.custom = client.CustomObjectsApi(api_client)
        self.node_name = node_name
        self.clock = clock
        self.recheck = recheck
        # resource -> (values, status, detail, when): the last outcome that was not a failure
        self._last: dict[str, tuple[dict[str, str], str, str, float]] = {}

    def publish(self, resource: str, values: Mapping[str, str]) -> tuple[str, str, int]:
        """(status, what happened or why it failed, API requests made); status is applied,
        unchanged, skipped (no object or no cpu/memory in it yet) or failed."""
        wanted = dict(values)
        now = self.clock()
        last = self._last.get(resource)
        if last is not None and last[0] == wanted and now - last[3] < self.recheck:
            status = "unchanged" if last[1] == "applied" else last[1]
            return status, last[2], 0
        status, detail, calls = self._publish(resource, wanted)
        if status == "failed":
            self._last.pop(resource, None)
        else:
            self._last[resource] = (wanted, status, detail, now)
        return status, detail, calls

    def _publish(self, resource: str, values: Mapping[str, str]) -> tuple[str, str, int]:
        calls = 0
        where = f"NodeResourceTopology {self.node_name}"
        for _attempt in range(1 + CONFLICT_RETRIES):
            calls += 1
            try:
                obj = read_json(
                    self.custom.get_cluster_custom_object(
                        GROUP,
                        VERSION,
                        PLURAL,
                        self.node_name,
                        _preload_content=False,
                        _request_timeout=REQUEST_TIMEOUT,
                    )
                )
            except ApiException as exc:
                if exc.status == 404:
                    return "skipped", f"{where} does not exist: zones of {resource} not published", calls
                return "failed", f"reading {where} failed: {describe_error(exc)}", calls
            except Exception as exc:
                return "failed", f"reading {where} failed: {describe_error(exc)}", calls
            if not isinstance(obj, dict):
                return "failed", f"reading {where}: the API server returned {obj!r}", calls
            zones = obj.get("zones")
            if not isinstance(zones, list) or not has_resources(zones):
                return (
                    "skipped",
                    f"{where} has no zone with cpu and memory yet: zones of {resource} not published",
                    calls,
                )
            new, changes = updated_zones(zones, resource, values)
            if not changes:
                return "unchanged", f"{where} zones hold {resource}", calls
            obj["zones"] = new
            calls += 1
            try:
                consume(
                    self.custom.replace_cluster_custom_object(
                        GROUP,
                        VERSION,
                        PLURAL,
                        self.node_name,
                        obj,
                        _preload_content=False,
                        _request_timeout=REQUEST_TIMEOUT,
                    )
                )
            except ApiException as exc:
                if exc.status == 409:
                    continue  # the agent wrote it meanwhile: read again
                return "failed", f"updating {where} failed: {describe_error(exc)}", calls
            except Exception as exc:
                return "failed", f"updating {where} failed: {describe_error(exc)}", calls
            return "applied", f"{where} {resource}: {', '.join(changes)}", calls
        return "failed", f"updating {where} kept conflicting ({1 + CONFLICT_RETRIES} tries)", calls
