"""Traces: a node's facts over time, for ``qosd simulate`` (format: schemas/trace.schema.json).

A trace is read once, checked against its schema with located errors, and turned into plain
dataclasses the simulator steps through. Nothing here decides anything: the closed loop (which batch
pods run, which leave) lives in engine.simulate. Sample times are resolved here, quantities are
parsed here and metric trees are flattened here, so the simulator's per-tick work is dictionary
updates only.

The module also generates synthetic tidal traces (``generate_tidal``): online load with a morning
and an evening peak, batch demand that is highest at night, gaussian noise and occasional spikes,
all from one seed, so a platform team can reproduce a run exactly.
"""

from __future__ import annotations

import difflib
import json
import math
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from engine.config.errors import Location, PolicyError, Problem, UsageError
from engine.config.load import JsonPath, decode_utf8, json_loads_bounded, json_path, read_file
from engine.config.schema_check import inline_refs, validation_problems
from engine.config.unitcheck import schema_file, unit_problems
from engine.model.facts import FactMap, Snapshot, Workload, flatten_metrics, snapshot_from_dict
from engine.model.units import parse_duration, parse_quantity
from engine.resources import API_VERSION, data_dir, load_schema
from engine.sources.facts_check import semantic_problems, with_numbers
from engine.sources.named_files import named_file, shown, unusable
from engine.sources.snapshot_file import read_facts

FACTS_SCHEMA_ID = "https://qosd.io/schemas/v1alpha1/facts.schema.json"
GiB = float(1 << 30)

Locate = Callable[[JsonPath, bool], Location]


# ---------------------------------------------------------------- the parsed trace


@dataclass(frozen=True)
class Usage:
    """Cores and bytes; None leaves the previous value in place (samples are deltas)."""

    cpu: float | None = None
    memory: float | None = None


@dataclass(frozen=True)
class OnlinePod:
    """A latency-sensitive pod that carries ``share`` of the trace's online usage."""

    workload: Workload
    share_cpu: float
    share_memory: float


@dataclass(frozen=True)
class BatchTemplate:
    """Pods of one batch job kind: what each requests (cores, bytes) and uses while running."""

    name: str
    index: int
    namespace: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    priority: int | None
    priority_class_name: str
    kube_qos: str
    request_cpu: float
    request_memory: float
    usage_cpu: float
    usage_memory: float
    requeue_after: float


@dataclass(frozen=True)
class MetricPatch:
    """Flat metric values a sample sets (same keys as Snapshot.metrics); they stay until changed."""

    node: FactMap = field(default_factory=dict)
    numa: Mapping[int, FactMap] = field(default_factory=dict)
    pods: Mapping[str, FactMap] = field(default_factory=dict)
    containers: Mapping[str, FactMap] = field(default_factory=dict)
    classes: Mapping[str, FactMap] = field(default_factory=dict)


@dataclass(frozen=True)
class Sample:
    index: int
    offset: float  # seconds since the trace start
    online: Usage | None = None
    system: Usage | None = None
    batch: Mapping[str, int] = field(default_factory=dict)
    metrics: MetricPatch | None = None
    add: tuple[OnlinePod, ...] = ()
    remove: tuple[str, ...] = ()
    snapshot: Snapshot | None = None


@dataclass(frozen=True)
class Trace:
    source: str
    name: str
    description: str
    base: Snapshot
    start: float
    step: float
    system: Usage
    online: tuple[OnlinePod, ...]
    batch: tuple[BatchTemplate, ...]
    samples: tuple[Sample, ...]

    @property
    def duration(self) -> float:
        """Seconds covered: up to the last sample, plus one step for the last sample's tick."""
        return self.samples[-1].offset + self.step if self.samples else 0.0

    @property
    def closed_loop(self) -> bool:
        """True when at least one sample is deltas (the simulator then runs batch pods itself)."""
        return any(s.snapshot is None for s in self.samples)


# ---------------------------------------------------------------- reading


def read_trace(path: Path) -> Trace:
    """The trace in ``path`` (.yaml/.yml/.json: one document; .jsonl: header line + sample lines).

    Raises PolicyError with every problem located (file:line:column and JSON path)."""
    source = str(path)
    why = unusable(path)
    if why:  # a command-line argument: a usage error (exit 2), as for any other file qosd is given
        raise UsageError(f"trace file {shown(source, 200)} {why}")
    if path.suffix == ".jsonl":
        data, locate = _read_jsonl(path)
    else:
        docs = read_file(path)
        if len(docs) != 1 or not isinstance(docs[0].data, dict):
            raise PolicyError(
                [
                    Problem(
                        Location(source, 1, 1),
                        "a trace file holds exactly one YAML or JSON mapping (kind: Trace)",
                        "for one sample per line, use the .jsonl format: the header on line 1, then samples",
                    )
                ]
            )
        data, locate = docs[0].data, docs[0].locate
    return trace_from_dict(data, locate, source, path.parent)


def trace_from_dict(
    data: Any, locate: Locate, source: str = "<trace>", base_dir: Path | None = None
) -> Trace:
    """A Trace from a trace document; ``locate`` turns JSON paths into file positions for errors."""
    problems = trace_problems(data, locate)
    if problems:
        raise PolicyError(problems)
    return _Builder(data, locate, source, base_dir or Path(".")).build()


def trace_problems(data: Any, locate: Locate) -> list[Problem]:
    """Schema problems of a trace document, located and phrased like policy validation's."""
    problems = validation_problems(trace_validator(), data, locate)
    return problems or unit_problems(schema_file("trace.schema.json"), data, locate)


@cache
def trace_validator() -> Draft202012Validator:
    """Built once per process. The trace schema refers to the facts schema by its $id, so a base
    snapshot, a recorded snapshot sample and a pod are checked by the one definition of facts."""
    with (data_dir("schemas") / "trace.schema.json").open(encoding="utf-8") as fh:
        schema: dict[str, Any] = json.load(fh)
    facts = Resource.from_contents(load_schema("facts"), default_specification=DRAFT202012)
    registry: Registry[Any] = Registry().with_resource(FACTS_SCHEMA_ID, facts)
    return Draft202012Validator(inline_refs(schema), registry=registry)


def _read_jsonl(path: Path) -> tuple[dict[str, Any], Locate]:
    """Header on the first non-blank line, one sample per further line; ``#`` lines are comments."""
    source = str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise PolicyError([Problem(Location(source, 1, 1), f"cannot read trace: {exc}")]) from None
    text = decode_utf8(raw, source)
    header: dict[str, Any] | None = None
    header_line = 1
    samples: list[Any] = []
    sample_lines: list[int] = []
    problems: list[Problem] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            value = json_loads_bounded(stripped, parse_constant=_no_constant)
        except ValueError as exc:
            col = getattr(exc, "colno", 1) + (len(line) - len(line.lstrip()))
            msg = getattr(exc, "msg", str(exc))
            problems.append(
                Problem(
                    Location(source, lineno, col),
                    f"invalid JSON: {msg}",
                    "each line of a .jsonl trace is one complete JSON object",
                )
            )
            continue
        if header is None:
            if not isinstance(value, dict):
                problems.append(
                    Problem(Location(source, lineno, 1), "the first line of a .jsonl trace is the header")
                )
                header = {}
            else:
                header = value
            header_line = lineno
            continue
        samples.append(value)
        sample_lines.append(lineno)
    if header is None:
        problems.append(Problem(Location(source, 1, 1), "the trace is empty"))
    if problems:
        raise PolicyError(problems)
    assert header is not None
    inline = header.get("samples")
    inline_samples = inline if isinstance(inline, list) else []
    data = {**header, "samples": [*inline_samples, *samples]}
    lines = [header_line] * len(inline_samples) + sample_lines

    def locate(p: JsonPath, prefer_key: bool = False) -> Location:
        if len(p) >= 2 and p[0] == "samples" and isinstance(p[1], int) and p[1] < len(lines):
            return Location(source, lines[p[1]], 1, json_path(p))
        return Location(source, header_line, 1, json_path(p))

    return data, locate


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number qosd accepts")


class _Builder:
    """Schema-valid trace document -> Trace, with the semantic checks a schema cannot express."""

    def __init__(self, data: dict[str, Any], locate: Locate, source: str, base_dir: Path):
        self.data = data
        self.locate = locate
        self.source = source
        self.base_dir = base_dir
        self.problems: list[Problem] = []

    def problem(self, path: JsonPath, message: str, hint: str = "", key: bool = False) -> None:
        self.problems.append(Problem(self.locate(path, key), message, hint))

    def _facts(self, doc: Mapping[str, Any], prefix: JsonPath) -> bool:
        """Record the semantic problems of an inline facts document (the trace schema checked its
        shape); True when there were any, so the caller builds nothing from it."""

        def locate(p: JsonPath, key: bool = False) -> Location:
            return self.locate((*prefix, *p), key)

        found = semantic_problems(doc, locate)
        self.problems.extend(found)
        return bool(found)

    def build(self) -> Trace:
        data = self.data
        base_raw = data["base"]
        if isinstance(base_raw, str):
            base_path, message = named_file(self.base_dir, base_raw, "base snapshot")
            if base_path is None:
                self.problem(
                    ("base",), message, "a relative base path is resolved against the trace file's directory"
                )
                raise PolicyError(self.problems)
            base_doc = read_facts(base_path)
        else:
            base_doc = base_raw
            self._facts(base_doc, ("base",))
            if self.problems:
                raise PolicyError(self.problems)
        base = snapshot_from_dict(with_numbers(base_doc))
        start = float(data.get("start", base_doc.get("time", 0.0)))
        step = parse_duration(data["step"])
        if step <= 0:
            self.problem(("step",), "step must be longer than 0", "write e.g. 1m or 30s")
        meta = data.get("metadata") or {}
        uids: dict[str, JsonPath] = {w.uid: ("base", "workloads", i) for i, w in enumerate(base.workloads)}
        workloads = data.get("workloads") or {}
        online = tuple(
            self._online(item, ("workloads", "online", i), uids)
            for i, item in enumerate(workloads.get("online") or [])
        )
        templates = tuple(
            self._template(item, i, ("workloads", "batch", i))
            for i, item in enumerate(workloads.get("batch") or [])
        )
        names: dict[str, int] = {}
        for t in templates:
            if t.name in names:
                self.problem(
                    ("workloads", "batch", t.index, "name"),
                    f"batch template {t.name!r} is defined twice",
                    f"the first is workloads.batch[{names[t.name]}]; template names must be unique",
                )
            names.setdefault(t.name, t.index)
        samples = self._samples(data["samples"], start, set(names), uids)
        if self.problems:
            raise PolicyError(self.problems)
        return Trace(
            source=self.source,
            name=str(meta.get("name") or Path(self.source).stem),
            description=str(meta.get("description", "")),
            base=base,
            start=start,
            step=step,
            system=_usage(data.get("system")) or Usage(0.0, 0.0),
            online=online,
            batch=templates,
            samples=samples,
        )

    def _online(self, item: Mapping[str, Any], path: JsonPath, uids: dict[str, JsonPath]) -> OnlinePod:
        w = snapshot_from_dict(with_numbers({"node": {}, "workloads": [item["pod"]]})).workloads[0]
        if w.uid in uids:
            self.problem(
                (*path, "pod", "uid"),
                f"pod uid {w.uid!r} is used twice",
                f"it is already used at {json_path(uids[w.uid])}; every pod needs its own uid",
            )
        uids[w.uid] = (*path, "pod", "uid")
        share = item.get("share") or {}
        cpu = share.get("cpu", w.request("cpu") or 1.0)
        memory = share.get("memory", w.request("memory") or 1.0)
        return OnlinePod(w, float(cpu), float(memory))

    def _template(self, item: Mapping[str, Any], index: int, path: JsonPath) -> BatchTemplate:
        pod = item.get("pod") or {}
        req = item["requests"]
        use = item["usage"]
        requests = (parse_quantity(req["cpu"]), parse_quantity(req["memory"]))
        if requests[0] <= 0 and requests[1] <= 0:
            self.problem(
                (*path, "requests"),
                "a batch pod that requests nothing is never bounded by the published capacity",
                "give requests.cpu and requests.memory as the pod's reclaimed-resource requests",
            )
        return BatchTemplate(
            name=str(item["name"]),
            index=index,
            namespace=str(pod.get("namespace", "batch")),
            labels=MappingProxyType(dict(pod.get("labels") or {})),
            annotations=MappingProxyType(dict(pod.get("annotations") or {})),
            priority=pod.get("priority"),
            priority_class_name=str(pod.get("priorityClassName", "")),
            kube_qos=str(pod.get("kubeQoS", "BestEffort")),
            request_cpu=requests[0],
            request_memory=requests[1],
            usage_cpu=parse_quantity(use.get("cpu", 0)),
            usage_memory=parse_quantity(use.get("memory", 0)),
            requeue_after=parse_duration(item.get("requeueAfter", "0")),
        )

    def _samples(
        self, raw: Sequence[Any], start: float, templates: set[str], uids: dict[str, JsonPath]
    ) -> tuple[Sample, ...]:
        step = parse_duration(self.data["step"])
        out: list[Sample] = []
        previous: float | None = None
        present = set(uids)
        for i, s in enumerate(raw):
            path: JsonPath = ("samples", i)
            at = s.get("at")
            if at is None:
                offset = 0.0 if previous is None else previous + step
            else:
                offset = float(at) if isinstance(at, int | float) else parse_duration(at)
                if previous is not None and offset <= previous:
                    self.problem(
                        (*path, "at"),
                        f"sample time {clock_text(offset)} is not after the previous sample's "
                        f"{clock_text(previous)}",
                        "samples must be in time order; leave `at` out to advance by `step`",
                    )
            previous = offset
            if "snapshot" in s:
                extra = sorted(set(s) - {"at", "snapshot"})
                if extra:
                    self.problem(
                        (*path, extra[0]),
                        f"a snapshot sample cannot also carry deltas ({', '.join(extra)})",
                        "a recorded snapshot is replayed as is; put deltas in a sample of their own",
                        key=True,
                    )
                if self._facts(s["snapshot"], (*path, "snapshot")):
                    continue
                snap = snapshot_from_dict({**with_numbers(s["snapshot"]), "time": start + offset})
                out.append(Sample(i, offset, snapshot=snap))
                continue
            for name in s.get("batch") or {}:
                if name not in templates:
                    close = [t for t in templates if _similar(name, t)]
                    self.problem(
                        (*path, "batch", name),
                        f"batch demand for {name!r}, which workloads.batch does not define",
                        f"did you mean {close[0]!r}?"
                        if close
                        else "declared templates: " + (", ".join(sorted(templates)) or "none"),
                        key=True,
                    )
            add = tuple(
                self._online(item, (*path, "add", j), uids) for j, item in enumerate(s.get("add") or [])
            )
            present.update(p.workload.uid for p in add)
            remove = tuple(str(u) for u in s.get("remove") or [])
            for j, uid in enumerate(remove):
                if uid not in present:
                    self.problem(
                        (*path, "remove", j),
                        f"remove names pod {uid!r}, which is not on the node at this point of the trace",
                        "only pods from base.workloads, workloads.online or an earlier `add` can leave",
                    )
                present.discard(uid)
            out.append(
                Sample(
                    i,
                    offset,
                    online=_usage(s.get("online")),
                    system=_usage(s.get("system")),
                    batch=MappingProxyType({str(k): int(v) for k, v in (s.get("batch") or {}).items()}),
                    metrics=_patch(s["metrics"]) if "metrics" in s else None,
                    add=add,
                    remove=remove,
                )
            )
        return tuple(out)


def _usage(raw: Mapping[str, Any] | None) -> Usage | None:
    if raw is None:
        return None
    cpu, memory = raw.get("cpu"), raw.get("memory")
    return Usage(
        None if cpu is None else parse_quantity(cpu),
        None if memory is None else parse_quantity(memory),
    )


def _patch(tree: Mapping[str, Any]) -> MetricPatch:
    return MetricPatch(
        node=flatten_metrics(tree.get("node")),
        numa={int(k): flatten_metrics(v) for k, v in (tree.get("numa") or {}).items()},
        pods={str(k): flatten_metrics(v) for k, v in (tree.get("pods") or {}).items()},
        containers={str(k): flatten_metrics(v) for k, v in (tree.get("containers") or {}).items()},
        classes={str(k): flatten_metrics(v) for k, v in (tree.get("classes") or {}).items()},
    )


def _similar(a: str, b: str) -> bool:
    return difflib.SequenceMatcher(None, a, b).ratio() >= 0.6


def clock_text(seconds: float) -> str:
    """Offsets as a platform engineer reads them: 13:20, 1d 02:05, 00:00:30."""
    days, rest = divmod(round(seconds), 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    text = f"{h:02d}:{m:02d}" + (f":{s:02d}" if s else "")
    return f"{days}d {text}" if days else text


# ---------------------------------------------------------------- the tidal generator


def _bump(hour: float, center: float, width: float) -> float:
    """A gaussian bump on the 24-hour circle (23:00 and 01:00 are two hours apart)."""
    d = (hour - center + 12.0) % 24.0 - 12.0
    return math.exp(-0.5 * (d / width) ** 2)


def _online_level(hour: float) -> float:
    """Diurnal online load, 0 at the small-hours trough to about 1 at the evening peak."""
    return (
        0.50 * _bump(hour, 10.5, 2.0)  # morning peak
        + 0.30 * _bump(hour, 15.0, 2.5)  # afternoon plateau
        + 1.00 * _bump(hour, 20.5, 1.8)  # evening peak
    )


def _memory_level(hour: float) -> float:
    """Diurnal online memory: sessions and caches build up through the day and peak with the evening
    traffic; the morning peak is mostly CPU."""
    return 0.30 * _bump(hour, 10.5, 2.0) + 0.35 * _bump(hour, 15.0, 2.5) + 1.00 * _bump(hour, 20.5, 2.2)


def _night_level(hour: float) -> float:
    """Batch appetite: nightly jobs are submitted from the evening on, peak at 01:00 and are done by
    the late morning (0.6 at 21:00, 0.14 at 09:00, ~0 in the afternoon)."""
    return _bump(hour, 1.0, 4.0)


ONLINE_PODS: tuple[tuple[str, str, str, float, float, float], ...] = (
    # name, Koordinator class, kube QoS, cpu request (cores), memory request (GiB), memory limit factor
    ("frontend", "LS", "Burstable", 4.0, 8.0, 2.0),
    ("checkout", "LSR", "Guaranteed", 4.0, 16.0, 1.0),
    ("search", "LS", "Burstable", 6.0, 16.0, 1.5),
    ("session-cache", "LSR", "Guaranteed", 2.0, 24.0, 1.0),
    ("api-gateway", "LS", "Burstable", 2.0, 4.0, 2.0),
)

BATCH_TEMPLATES: tuple[tuple[str, int, float, float, float, float, int, int], ...] = (
    # name, priority, request cores, request GiB, usage cores, usage GiB, demand by day, demand at night
    ("spark-executor", 5500, 4.0, 14.0, 3.6, 12.5, 2, 6),
    ("etl", 5200, 2.0, 6.0, 1.7, 5.2, 2, 6),
    ("log-compaction", 5000, 1.0, 3.0, 0.8, 2.6, 1, 3),
)


def generate_tidal(
    hours: float = 24.0,
    step: float = 60.0,
    seed: int = 7,
    *,
    cpus: int = 32,
    numa: int = 2,
    memory: float = 128 * GiB,
    profile: str | None = "koordinator",
    online_cpu: tuple[float, float] = (3.5, 18.5),
    online_memory: tuple[float, float] = (0.28, 0.58),
    noise: float = 0.04,
    spikes_per_day: float = 8.0,
    name: str | None = None,
) -> dict[str, Any]:
    """A synthetic day (or more) of tidal colocation as a trace document.

    Online CPU moves between ``online_cpu`` cores (trough, evening peak) on a diurnal curve with a
    morning and an evening peak; online memory (fractions of node memory) follows it with a lag, as
    heaps and caches grow with traffic and shrink slowly. AR(1) gaussian noise (``noise`` of the
    peak) and Poisson spikes (more likely when busy) make it look like a real node. Batch demand per
    template is highest at night and held in 10-minute blocks, as job submissions are. Everything is
    drawn from ``random.Random(seed)``, so the same arguments give the same trace.
    """
    if hours <= 0 or step <= 0:
        raise ValueError("hours and step must be positive")
    rng = random.Random(seed)
    steps = round(hours * 3600.0 / step)
    cpu_low, cpu_high = online_cpu
    mem_low, mem_high = online_memory[0] * memory, online_memory[1] * memory
    peak = max(_online_level(h / 60.0) for h in range(0, 24 * 60, 5))
    mem_peak = max(_memory_level(h / 60.0) for h in range(0, 24 * 60, 5))
    phi = math.exp(-step / 600.0)  # noise correlation time: 10 minutes
    innovation = math.sqrt(1.0 - phi * phi)
    lag = 1.0 - math.exp(-step / 1800.0)  # memory follows load with a 30-minute lag
    spike_rate = spikes_per_day / 86400.0 * step
    block = max(1, round(600.0 / step))
    cpu_noise = 0.0
    mem_noise = 0.0
    mem_level = _memory_level(0.0) / mem_peak
    spikes: list[tuple[int, int, float]] = []  # (start step, length in steps, amplitude 0..1)
    demand: dict[str, int] = {}
    samples: list[dict[str, Any]] = []
    for i in range(steps):
        offset = i * step
        hour = (offset / 3600.0) % 24.0
        level = _online_level(hour) / peak
        mem_level += lag * (_memory_level(hour) / mem_peak - mem_level)
        cpu_noise = phi * cpu_noise + innovation * rng.gauss(0.0, noise)
        mem_noise = phi * mem_noise + innovation * rng.gauss(0.0, noise / 3.0)
        if rng.random() < spike_rate * (0.3 + level):
            length = max(1, round(rng.uniform(180.0, 900.0) / step))
            spikes.append((i, length, rng.uniform(0.15, 0.35)))
        spikes = [s for s in spikes if i < s[0] + 3 * s[1]]
        spike = sum(a * math.exp(-(i - s0) / length) for s0, length, a in spikes)
        cpu = cpu_low + (cpu_high - cpu_low) * (level + cpu_noise) + cpu_high * spike
        mem = mem_low + (mem_high - mem_low) * (mem_level + mem_noise) + 0.4 * (mem_high - mem_low) * spike
        cpu = max(cpu, 0.2)
        mem = max(mem, 0.05 * memory)
        sample: dict[str, Any] = {
            "at": duration_text(offset),
            "online": {"cpu": round(cpu, 2), "memory": f"{mem / GiB:.2f}Gi"},
        }
        if i % block == 0:
            night = _night_level(hour)
            changed: dict[str, int] = {}
            for tname, _, _, _, _, _, by_day, at_night in BATCH_TEMPLATES:
                want = by_day + (at_night - by_day) * night + rng.gauss(0.0, 0.6)
                value = max(0, round(want))
                if demand.get(tname) != value:
                    changed[tname] = value
                    demand[tname] = value
            if changed:
                sample["batch"] = changed
        samples.append(sample)
    generator = {
        "hours": hours,
        "step": duration_text(step),
        "seed": seed,
        "cpus": cpus,
        "numa": numa,
        "memory": f"{memory / GiB:g}Gi",
        "profile": profile or "default",
    }
    return {
        "apiVersion": API_VERSION,
        "kind": "Trace",
        "metadata": {
            "name": name or f"tidal-{hours:g}h-seed{seed}",
            "description": (
                f"Synthetic tidal colocation on a {cpus}-CPU, {numa}-NUMA, {memory / GiB:g} GiB node: "
                "online load peaks in the morning and the evening, batch demand peaks at night."
            ),
            "generator": generator,
        },
        "base": _tidal_base(cpus, numa, memory, profile),
        "start": 1699920000,  # 2023-11-14 00:00 UTC: offsets read as the time of day
        "step": duration_text(step),
        "system": {"cpu": 0.8, "memory": "4.5Gi"},
        "workloads": {
            "online": [_online_pod(*spec) for spec in ONLINE_PODS],
            "batch": [_batch_template(*spec) for spec in BATCH_TEMPLATES],
        },
        "samples": samples,
    }


def _tidal_base(cpus: int, numa: int, memory: float, profile: str | None) -> dict[str, Any]:
    per_numa = cpus // numa
    cores = per_numa // 2  # two hyper-threads per core
    topology = [
        {"id": cid, "core": (cid % per_numa) % cores, "socket": cid // per_numa, "numa": cid // per_numa}
        for cid in range(cpus)
    ]
    labels = {"kubernetes.io/hostname": "node-tidal"}
    if profile and profile != "default":
        labels["qosd.io/profile"] = profile
    return {
        "apiVersion": API_VERSION,
        "kind": "FactsSnapshot",
        "node": {
            "name": "node-tidal",
            "labels": labels,
            "capacity": {"cpu": cpus, "memory": memory},
            "allocatable": {"cpu": cpus - 1, "memory": memory - 4 * GiB},
            "topology": {
                "cpus": topology,
                "numa": [{"id": n, "memoryBytes": memory / numa} for n in range(numa)],
            },
        },
    }


def _online_pod(
    name: str, koord: str, kube_qos: str, cpu: float, memory_gib: float, limit_factor: float
) -> dict[str, Any]:
    requests = {"cpu": cpu, "memory": memory_gib * GiB}
    limits = {"cpu": cpu * limit_factor, "memory": memory_gib * limit_factor * GiB}
    return {
        "pod": {
            "uid": f"online-{name}",
            "namespace": "shop",
            "name": name,
            # Both dialects: the Koordinator profile reads the label, the default (Katalyst) the annotation.
            "labels": {"koordinator.sh/qosClass": koord, "app": name},
            "annotations": {"katalyst.kubewharf.io/qos_level": "shared_cores"},
            "priority": 9500,
            "kubeQoS": kube_qos,
            "containers": [{"name": "app", "requests": requests, "limits": limits}],
        }
    }


def _batch_template(
    name: str, priority: int, cpu: float, mem: float, use_cpu: float, use_mem: float, *_: int
) -> dict[str, Any]:
    return {
        "name": name,
        "pod": {
            "namespace": "batch",
            "labels": {"koordinator.sh/qosClass": "BE", "app": name},
            "annotations": {"katalyst.kubewharf.io/qos_level": "reclaimed_cores"},
            "priority": priority,
            "kubeQoS": "BestEffort",
        },
        "requests": {"cpu": cpu, "memory": f"{mem:g}Gi"},
        "usage": {"cpu": use_cpu, "memory": f"{use_mem:g}Gi"},
        "requeueAfter": "5m",
    }


def duration_text(seconds: float) -> str:
    """Seconds as a duration the trace schema accepts: 0, 45s, 13h20m, 1h0m30s."""
    if seconds == 0:
        return "0"
    whole = int(seconds)
    if whole != seconds:
        return f"{seconds:g}s"
    h, rest = divmod(whole, 3600)
    m, s = divmod(rest, 60)
    text = (f"{h}h" if h else "") + (f"{m}m" if m or (h and s) else "") + (f"{s}s" if s else "")
    return text


# ---------------------------------------------------------------- writing


_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]*$")
_RESERVED = frozenset({"true", "false", "null", "yes", "no", "on", "off", "y", "n", "~"})


def _flow(value: Any) -> str:
    """One YAML flow value: compact, and quoted only where YAML would misread it."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_flow(str(k))}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e18 else repr(value)
    text = str(value)
    if (_PLAIN.match(text) and text.lower() not in _RESERVED) or _UNIT_TEXT.match(text):
        return text
    return json.dumps(text)


# Durations (13h20m) and binary quantities (45.5Gi) are strings to YAML as written: no quotes needed.
_UNIT_TEXT = re.compile(r"^(([0-9]+(ms|s|m|h))+|[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi))$")


def dump_trace(doc: Mapping[str, Any], fmt: str = "yaml", comment: str = "") -> str:
    """A trace document as text: ``yaml`` (block header, one flow sample per line), ``json`` or
    ``jsonl`` (header line, then one sample per line). ``comment`` lines head the YAML/JSONL text."""
    samples = list(doc.get("samples") or [])
    header = {k: v for k, v in doc.items() if k != "samples"}
    lead = "".join(f"# {line}".rstrip() + "\n" for line in comment.splitlines())
    if fmt == "json":
        return json.dumps(doc, indent=1) + "\n"
    if fmt == "jsonl":
        lines = [json.dumps(header, separators=(",", ":"))]
        lines += [json.dumps(s, separators=(",", ":")) for s in samples]
        return lead + "\n".join(lines) + "\n"
    if fmt != "yaml":
        raise ValueError(f"unknown trace format {fmt!r}; use yaml, json or jsonl")
    out = ["# yaml-language-server: $schema=../../schemas/trace.schema.json\n", lead]
    out.append(_block(header, 0))
    out.append("samples:\n")
    out.extend(f"  - {_flow(s)}\n" for s in samples)
    return "".join(out)


def _block(value: Mapping[str, Any], indent: int) -> str:
    """Block-style YAML for the header; small leaves (<= 100 characters) go on one flow line."""
    pad = " " * indent
    out: list[str] = []
    for key, v in value.items():
        k = _flow(str(key))
        flat = _flow(v)
        if not isinstance(v, dict | list) or len(pad) + len(k) + len(flat) + 2 <= 100:
            out.append(f"{pad}{k}: {flat}\n")
        elif isinstance(v, dict):
            out.append(f"{pad}{k}:\n{_block(v, indent + 2)}")
        else:
            out.append(f"{pad}{k}:\n")
            for item in v:
                text = _flow(item)
                if isinstance(item, dict) and len(pad) + len(text) + 4 > 100:
                    inner = _block(item, indent + 4)
                    out.append(f"{pad}  - {inner[indent + 4 :]}")
                else:
                    out.append(f"{pad}  - {text}\n")
    return "".join(out)


def write_trace(doc: Mapping[str, Any], path: Path, comment: str = "") -> None:
    """Write ``doc`` in the format its suffix names (.yaml/.yml, .json, .jsonl)."""
    fmt = {".json": "json", ".jsonl": "jsonl"}.get(path.suffix, "yaml")
    path.write_text(dump_trace(doc, fmt, comment), encoding="utf-8")


def describe(trace: Trace) -> str:
    """One line about a trace, for `qosd trace validate` and the simulation header."""
    kinds = "closed loop" if trace.closed_loop else "recorded snapshots (open loop)"
    return (
        f"{trace.name}: {len(trace.samples)} samples over {clock_text(trace.duration)} "
        f"(step {duration_text(trace.step)}), {kinds}, node {trace.base.node.name} "
        f"{trace.base.node.cpus} CPUs / {trace.base.node.memory / GiB:g} GiB, "
        f"{len(trace.online)} online pod(s), {len(trace.batch)} batch template(s)"
    )


__all__ = [
    "BatchTemplate",
    "MetricPatch",
    "OnlinePod",
    "Sample",
    "Trace",
    "Usage",
    "clock_text",
    "describe",
    "dump_trace",
    "duration_text",
    "generate_tidal",
    "read_trace",
    "trace_from_dict",
    "trace_problems",
    "write_trace",
]
