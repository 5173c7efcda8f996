"""Benchmark of the rule pipeline: load + render + validate + compile (issue 2).

    python -m bench.bench_config [--repeat N] [--write]

Measures, in one run, for

  (a)  the bundled policy (built-in layer only) on REFERENCE_NODE, which selects rules/default.yaml;
  (a') the same files on REFERENCE_NODE labelled qosd.io/profile=koordinator (the profile document);
  (b)  the bundled policy plus every example overlay under rules/examples/, on REFERENCE_NODE (whose
       empty labels select no overlay: this is the cost of carrying them);
  (b') the same documents on REFERENCE_NODE with the label set (among those ``validate`` tries) that
       applies the most overlays, so merge really layers them;
  (c)  a synthetic policy of --rules rules (default 500, bench.synthetic, seed --seed),

the time of each stage, mirroring ``engine.config.pipeline.build_policy``:

  load           load_documents(paths, builtin=...)          YAML -> located documents
  render+schema  prepare(doc, node) for each applicable doc   Jinja2 render + JSON Schema + per-doc checks
  conflicts      merge.conflicts(rendered, False)             equal-priority disagreement check
  merge          merge.merge(rendered)                        layered overlay with origins
  compile        pipeline.compile_merged(merged, node)        semantic checks + immutable Policy
                 (compile.check_and_compile, plus a merged-spec schema check if a document left gaps)

and end to end, ``build_policy(load_documents(...), REFERENCE_NODE)`` including the load. Warm numbers
are median and p95 (nearest rank) over repeats after one untimed warm-up, with a gc.collect() between
samples (untimed). Cold numbers are the first run in a fresh ``python -c`` subprocess, timed in-process
with time.perf_counter: module import is reported separately, the interpreter start is not counted.
Also: peak traced memory (tracemalloc) of one warm end-to-end build, and the median of ``validate()``,
the multi-variant check ``qosd validate`` runs.

Each input is first checked with the real CLI (``python -m engine.cli validate``), so a drifting
synthetic generator fails loudly, and an invalid or missing bundled policy is reported and skipped.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import yaml

from bench.results import write_section
from bench.synthetic import synthetic_policy
from engine.config.errors import PolicyError
from engine.config.load import clear_caches
from engine.config.merge import Merged, Rendered, conflicts, merge
from engine.config.pipeline import (
    PROFILE_LABEL,
    REFERENCE_NODE,
    applies_to,
    build_policy,
    label_variants,
    load_documents,
    prepare,
    validate,
)
from engine.config.policy import Policy
from engine.model.node import NodeInfo
from engine.resources import data_dir

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "RESULTS.md"
SECTION = "## Rule pipeline (issue 2)"
TARGET_MS = 50.0
STAGES = ("load", "render+schema", "conflicts", "merge", "compile")


def _compile_stage() -> Callable[[Merged, NodeInfo], Policy]:
    """What build_policy compiles with: pipeline.compile_merged (check_and_compile, plus a schema check
    of the merged spec when a document left gaps) where it exists, else compile.check_and_compile."""
    try:
        from engine.config.pipeline import compile_merged
    except ImportError:  # an older pipeline compiled directly
        from engine.config.compile import check_and_compile

        return check_and_compile
    return compile_merged


compile_stage = _compile_stage()


# ---------------------------------------------------------------- measured code


def run_stages(paths: list[Path], builtin: bool, node: NodeInfo) -> tuple[dict[str, float], int]:
    """One build split into stages (seconds each); the same steps as build_policy, timed apart.

    The parse cache is cleared first, so every stage does its full work (new file contents)."""
    clear_caches()
    t0 = time.perf_counter()
    docs = load_documents(paths, builtin=builtin)
    t1 = time.perf_counter()
    rendered: list[Rendered] = []
    for doc in docs:
        if not applies_to(doc, node.labels):
            continue
        r, problems = prepare(doc, node)
        if problems:
            raise PolicyError(problems)
        if r is not None:
            rendered.append(r)
    t2 = time.perf_counter()
    problems = conflicts(rendered, check_selectors=False)
    if problems:
        raise PolicyError(problems)
    t3 = time.perf_counter()
    merged = merge(rendered)
    t4 = time.perf_counter()
    policy = compile_stage(merged, node)
    t5 = time.perf_counter()
    times = dict(zip(STAGES, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4), strict=True))
    return times, len(policy.rules)


def run_e2e(paths: list[Path], builtin: bool, node: NodeInfo, fresh: bool = True) -> float:
    """build_policy(load_documents(...)). ``fresh`` clears the parse cache first (new file contents);
    otherwise the files are unchanged since the last build, as on a daemon reload of one edited file
    among many, or a periodic full re-read."""
    if fresh:
        clear_caches()
    t0 = time.perf_counter()
    build_policy(load_documents(paths, builtin=builtin), node)
    return time.perf_counter() - t0


def run_validate(paths: list[Path], builtin: bool) -> tuple[float, int]:
    """validate() without a node, as `qosd validate` runs it; the load is not included."""
    clear_caches()
    docs = load_documents(paths, builtin=builtin)
    t0 = time.perf_counter()
    problems = validate(docs)
    return time.perf_counter() - t0, len(problems)


# Runs in a fresh interpreter: the time to import the pipeline, then its first (cold) run.
_COLD_SCRIPT = """
import json, sys, time
t0 = time.perf_counter()
import engine.config.pipeline, engine.config.merge, engine.config.compile
t_import = time.perf_counter() - t0
from pathlib import Path
from bench.bench_config import node_for, run_e2e, run_stages
mode, builtin, labels, paths = sys.argv[1], sys.argv[2] == "1", sys.argv[3], [Path(p) for p in sys.argv[4:]]
node = node_for(json.loads(labels))
if mode == "stages":
    times, _ = run_stages(paths, builtin, node)
    out = {"import": t_import, **times}
else:
    out = {"import": t_import, "end-to-end": run_e2e(paths, builtin, node)}
print(json.dumps(out))
"""


def node_for(labels: dict[str, str]) -> NodeInfo:
    return REFERENCE_NODE.with_labels(labels) if labels else REFERENCE_NODE


def cold_run(mode: str, case: Case) -> dict[str, float]:
    cmd = [
        sys.executable,
        "-c",
        _COLD_SCRIPT,
        mode,
        "1" if case.builtin else "0",
        json.dumps(case.labels),
        *map(str, case.paths),
    ]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"cold run ({mode}, {case.key}) failed:\n{proc.stderr[-3000:]}")
    result: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


# ---------------------------------------------------------------- cases


@dataclass
class Case:
    key: str
    title: str
    paths: list[Path]
    builtin: bool
    repeat: int
    validate_repeat: int
    labels: dict[str, str] = field(default_factory=dict)
    validate_as: str = ""
    skip: str = ""
    docs_loaded: int = 0
    docs_applied: int = 0
    rules: int = 0
    yaml_bytes: int = 0
    warm: dict[str, list[float]] = field(default_factory=dict)
    cold: dict[str, list[float]] = field(default_factory=dict)
    gc_off_repeat: int = 5
    cold_runs: int = 1
    gc_off: list[float] = field(default_factory=list)
    reload: list[float] = field(default_factory=list)
    validate_times: list[float] = field(default_factory=list)
    validate_variants: int = 0
    validate_builds: int = 0
    peak_bytes: int = 0

    @property
    def node(self) -> NodeInfo:
        return node_for(self.labels)


def cli_validate(args: list[str]) -> tuple[int, str]:
    """`python -m engine.cli validate ARGS`: the check a user runs, in a subprocess."""
    proc = subprocess.run(
        [sys.executable, "-m", "engine.cli", "validate", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.returncode, (proc.stdout + proc.stderr).strip()


def example_overlays() -> list[Path]:
    root = data_dir("rules") / "examples"
    if not root.is_dir():
        return []
    return sorted(
        p
        for p in root.rglob("*")
        if p.suffix in (".yaml", ".yml")
        and p.is_file()
        and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )


def make_cases(args: argparse.Namespace, synthetic_file: Path) -> list[Case]:
    rep_b = args.repeat or 30
    rep_s = args.repeat or args.synthetic_repeat
    val_b = min(rep_b, args.validate_repeat)
    default = data_dir("rules") / "default.yaml"
    cases = [
        Case("bundled", "(a) bundled, reference node", [], True, rep_b, val_b),
        Case(
            "bundled-koordinator",
            "(a') bundled, reference node + profile=koordinator",
            [],
            True,
            rep_b,
            0,  # validate() does not depend on the node: it is the same run as (a)
            labels={PROFILE_LABEL: "koordinator"},
            validate_as="(a)",
        ),
        Case("bundled+examples", "(b) bundled + rules/examples/*", example_overlays(), True, rep_b, val_b),
        Case(
            "bundled+examples-applied",
            "(b') bundled + rules/examples/*, labels applying the most overlays",
            example_overlays(),
            True,
            rep_b,
            0,  # validate() does not depend on the node: it is the same run as (b)
            validate_as="(b)",
        ),
        Case(
            f"synthetic-{args.rules}",
            f"(c) synthetic {args.rules} rules (seed {args.seed})",
            [synthetic_file],
            False,
            rep_s,
            args.synthetic_validate_repeat,
        ),
    ]
    for case in cases:
        case.gc_off_repeat = max(1, case.repeat // 2)
        case.cold_runs = args.synthetic_cold_runs if case.key.startswith("synthetic") else args.cold_runs
    for case in cases[:4]:
        if not default.is_file():
            shown = default.relative_to(ROOT) if default.is_relative_to(ROOT) else default
            case.skip = f"{shown} is missing (the bundled policy is not written yet)"
    if not (data_dir("rules") / "profiles" / "koordinator.yaml").is_file():
        cases[1].skip = cases[1].skip or "rules/profiles/koordinator.yaml is missing"
    for case in cases[2:4]:
        if not case.paths and not case.skip:
            case.skip = "rules/examples/ holds no overlays yet, so (b) would equal (a)"
    if not cases[3].skip:
        cases[3].labels = _most_overlays(cases[3].paths)
        if not cases[3].labels:
            cases[3].skip = "no label set applies any example overlay"
    return cases


def _most_overlays(paths: list[Path]) -> dict[str, str]:
    """Among the label sets validate() tries, the one under which the most documents apply."""
    try:
        docs = load_documents(paths, builtin=True)
    except PolicyError:
        return {}  # check_inputs reports it
    best: dict[str, str] = {}
    best_count = sum(applies_to(d, {}) for d in docs)
    for labels in label_variants(docs, {}):
        count = sum(applies_to(d, labels) for d in docs)
        if count > best_count:
            best, best_count = labels, count
    return best


def check_inputs(cases: list[Case]) -> None:
    """Every input must pass `qosd validate`; synthetic drift is fatal, a broken bundled policy is skipped."""
    for case in cases:
        if case.skip:
            continue
        args = (["--no-builtin"] if not case.builtin else []) + [str(p) for p in case.paths]
        code, out = cli_validate(args)
        if code == 0:
            continue
        shown = "\n".join(out.splitlines()[:40])
        if case.key.startswith("synthetic"):
            raise SystemExit(
                "bench.synthetic drifted: its output no longer passes "
                f"`qosd validate --no-builtin` (exit {code}).\n"
                f"{shown}\nFix bench/synthetic.py to follow the schema/fact registry."
            )
        case.skip = f"`qosd validate {' '.join(args)}` is not clean (exit {code}): {out.splitlines()[-1]}"
        print(f"[bench] {case.key}: skipped; qosd validate says:\n{shown}", file=sys.stderr)


# ---------------------------------------------------------------- measuring


def describe(case: Case) -> None:
    docs = load_documents(case.paths, builtin=case.builtin)
    case.docs_loaded = len(docs)
    case.docs_applied = sum(applies_to(d, case.node.labels) for d in docs)
    files = {d.path for d in docs if d.path is not None}
    case.yaml_bytes = sum(f.stat().st_size for f in files if f.is_file())
    variants = label_variants(docs, REFERENCE_NODE.labels)
    case.validate_variants = len(variants)
    case.validate_builds = len({tuple(applies_to(d, labels) for d in docs) for labels in variants})


def measure_cold(case: Case, runs: int) -> None:
    """Fresh interpreters, so nothing this process has warmed up (caches, imports) helps them."""
    for _ in range(runs):
        for k, v in cold_run("stages", case).items():
            case.cold.setdefault(k, []).append(v)
        case.cold.setdefault("end-to-end", []).append(cold_run("e2e", case)["end-to-end"])


def measure_warm(cases: list[Case]) -> None:
    """Warm samples in interleaved rounds (every case once per round while it has repeats left), so a
    noisy stretch on this shared machine hits all cases alike and the ratios between them stay fair."""
    for case in cases:  # the untimed warm-up
        _, case.rules = run_stages(case.paths, case.builtin, case.node)
        run_e2e(case.paths, case.builtin, case.node)
    for r in range(max(c.repeat for c in cases)):
        for case in cases:
            if r >= case.repeat:
                continue
            gc.collect()
            times, _ = run_stages(case.paths, case.builtin, case.node)
            for k, v in times.items():
                case.warm.setdefault(k, []).append(v)
            gc.collect()
            case.warm.setdefault("end-to-end", []).append(run_e2e(case.paths, case.builtin, case.node))
            case.reload.append(run_e2e(case.paths, case.builtin, case.node, fresh=False))
            if r < case.gc_off_repeat:
                # The same build with the cyclic GC off: how much of it is collector work.
                gc.collect()
                gc.disable()
                try:
                    case.gc_off.append(run_e2e(case.paths, case.builtin, case.node))
                finally:
                    gc.enable()


def measure_memory(case: Case) -> None:
    """Peak traced memory of one warm end-to-end build, tracing on only for that build."""
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        run_e2e(case.paths, case.builtin, case.node)
        case.peak_bytes = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def measure_validate(cases: list[Case]) -> None:
    """validate(): every node variant the selectors distinguish, as `qosd validate` does; interleaved."""
    for case in cases:
        if case.validate_repeat:
            run_validate(case.paths, case.builtin)
    for r in range(max((c.validate_repeat for c in cases), default=0)):
        for case in cases:
            if r >= case.validate_repeat:
                continue
            gc.collect()
            seconds, problems = run_validate(case.paths, case.builtin)
            if problems:
                raise SystemExit(
                    f"{case.key}: validate() reports {problems} problem(s) though the CLI was clean"
                )
            case.validate_times.append(seconds)


# ---------------------------------------------------------------- report


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def ms(seconds: float) -> str:
    v = seconds * 1000
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 1 else f"{v:.2f}"


def med(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan


def machine() -> dict[str, str]:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        affinity = os.cpu_count() or 0

    def version(pkg: str) -> str:
        try:
            return metadata.version(pkg)
        except metadata.PackageNotFoundError:
            return "?"

    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "engine", "rules", "schemas"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        commit = f"{head}{' + uncommitted changes in engine/rules/schemas' if dirty else ''}" if head else "?"
    except OSError:
        commit = "?"
    return {
        "nproc": str(affinity),
        "cpu": cpu,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "kernel": platform.release(),
        "libs": f"PyYAML {version('pyyaml')} (libyaml: {yaml.__with_libyaml__}), Jinja2 {version('jinja2')}, "
        f"jsonschema {version('jsonschema')}",
        "commit": commit,
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def report(cases: list[Case], args: argparse.Namespace, command: str, wall: float) -> str:
    m = machine()
    done = [c for c in cases if not c.skip]
    lines: list[str] = [
        SECTION,
        "",
        f"Command: `{command}` (from the repository root; whole run {wall:.0f} s)",
        "",
        f"Machine: {m['nproc']} CPUs (nproc), {m['cpu']}; {m['python']}; kernel {m['kernel']} (`uname -r`); "
        f"{m['libs']}. Commit {m['commit']}. Date {m['date']}.",
        "",
        "Stages mirror `build_policy` (see `bench/bench_config.py`); *end-to-end* is "
        "`build_policy(load_documents(...), node)` including the YAML load. "
        "Warm = median / p95 (nearest rank) over the repeats after one warm-up; "
        "cold = first run in a fresh `python -c` process "
        f"(median of {args.cold_runs} processes for bundled cases, "
        f"{args.synthetic_cold_runs} for synthetic), "
        "timed in-process after the imports (import time listed separately). "
        "Every timed build starts with an empty parse cache (`engine.config.load.clear_caches`) except "
        "*rebuild, files unchanged*, which is build_policy over files already parsed, rendered and "
        "schema-checked (what a reload costs for the documents that did not change). "
        "All times in ms. validate() is timed on documents already loaded; it renders and schema-checks "
        "every document, then builds once per distinct set of applicable documents."
        + (
            " Import times include byte-compiling (PYTHONDONTWRITEBYTECODE is set here)."
            if os.environ.get("PYTHONDONTWRITEBYTECODE")
            else ""
        ),
        "",
        "### Inputs",
        "",
        "| case | node labels | docs loaded / applied | rules compiled | YAML bytes | repeats |",
        "|---|---|---|---|---|---|",
    ]
    for c in cases:
        if c.skip:
            lines.append(f"| {c.title} | | | | | **skipped**: {c.skip} |")
            continue
        labels = ", ".join(f"{k}={v}" for k, v in sorted(c.labels.items())) or "(none)"
        lines.append(
            f"| {c.title} | {labels} | {c.docs_loaded} / {c.docs_applied} | {c.rules} | "
            f"{c.yaml_bytes:,} | {c.repeat} (validate {c.validate_repeat or '= ' + c.validate_as}) |"
        )
    lines += [
        "",
        "### Stage times",
        "",
        "| case | stage | warm median | warm p95 | cold (first run) | share of warm e2e |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for c in done:
        e2e = med(c.warm["end-to-end"])
        for stage in (*STAGES, "end-to-end"):
            warm, cold = c.warm[stage], c.cold.get(stage, [])
            share = f"{med(warm) / e2e * 100:.0f}%" if stage != "end-to-end" else "100%"
            name = f"**{stage}**" if stage == "end-to-end" else stage
            lines.append(
                f"| {c.key} | {name} | {ms(med(warm))} | {ms(p95(warm))} | "
                f"{ms(med(cold)) if cold else '-'} | {share} |"
            )
        lines.append(
            f"| {c.key} | (sum of stages) | {ms(sum(med(c.warm[s]) for s in STAGES))} | | "
            f"{ms(sum(med(c.cold[s]) for s in STAGES))} | |"
        )
    lines += [
        "",
        "### Summary",
        "",
        "| case | e2e warm median | e2e warm p95 | e2e cold | import (cold) | e2e warm, GC off "
        "| rebuild, files unchanged (median) "
        "| validate() median (label sets / builds) | peak traced memory, one build |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in done:
        validated = (
            f"{ms(med(c.validate_times))} ({c.validate_variants} / {c.validate_builds})"
            if c.validate_times
            else f"= {c.validate_as}"
        )
        lines.append(
            f"| {c.key} | {ms(med(c.warm['end-to-end']))} | {ms(p95(c.warm['end-to-end']))} | "
            f"{ms(med(c.cold['end-to-end']))} | {ms(med(c.cold['import']))} | {ms(med(c.gc_off))} | "
            f"{ms(med(c.reload))} | {validated} | {c.peak_bytes / 2**20:.1f} MiB |"
        )
    lines += ["", "### Ratios (same run, so machine noise mostly cancels)", ""]
    lines += ratio_lines(cases)
    lines += ["", "### Verdict", "", verdict(cases)]
    return "\n".join(lines) + "\n"


def ratio_lines(cases: list[Case]) -> list[str]:
    by = {c.key: c for c in cases if not c.skip}
    out: list[str] = []
    base = by.get("bundled")
    synth = next((c for k, c in by.items() if k.startswith("synthetic")), None)

    def r(a: list[float], b: list[float]) -> str:
        return f"{med(a) / med(b):.1f}×" if a and b else "n/a"

    if base and synth:
        parts = ", ".join(f"{s} {r(synth.warm[s], base.warm[s])}" for s in STAGES if s != "conflicts")
        out.append(
            f"- {synth.key} / bundled, warm end-to-end: "
            f"**{r(synth.warm['end-to-end'], base.warm['end-to-end'])}** "
            f"for {synth.rules / max(base.rules, 1):.0f}× the rules ({synth.rules} vs {base.rules}); "
            f"per stage: {parts}."
        )
        out.append(f"- {synth.key} / bundled, validate(): {r(synth.validate_times, base.validate_times)}.")
    if synth:
        per_rule = med(synth.warm["end-to-end"]) / max(synth.rules, 1) * 1e6
        out.append(f"- {synth.key}: {per_rule:.0f} µs per rule end to end (warm).")
    for key in ("bundled-koordinator", "bundled+examples", "bundled+examples-applied"):
        if base and key in by:
            out.append(
                f"- {key} / bundled, warm end-to-end: "
                f"{r(by[key].warm['end-to-end'], base.warm['end-to-end'])}."
            )
    for c in by.values():
        gc_share = 1 - med(c.gc_off) / med(c.warm["end-to-end"])
        line = (
            f"- {c.key}: cold / warm end-to-end {r(c.cold['end-to-end'], c.warm['end-to-end'])}; "
            f"cyclic GC ≈ {max(gc_share, 0) * 100:.0f}% of the warm build (GC off / on "
            f"{r(c.gc_off, c.warm['end-to-end'])})"
        )
        if c.validate_times:
            line += f"; validate() / build {r(c.validate_times, c.warm['end-to-end'])}"
        out.append(line + ".")
    if base:
        out.append(
            f"- bundled warm end-to-end is {med(base.warm['end-to-end']) * 1000 / TARGET_MS * 100:.0f}% "
            f"of the {TARGET_MS:.0f} ms target."
        )
    return out or ["- (nothing to compare: cases were skipped)"]


def verdict(cases: list[Case]) -> str:
    base = next((c for c in cases if c.key == "bundled"), None)
    if base is None or base.skip:
        reason = base.skip if base else "no bundled case"
        return (
            f"**Not measured**: the bundled policy could not be benchmarked ({reason}). "
            "Only the synthetic numbers above are valid."
        )
    warm, cold, tail = (
        med(base.warm["end-to-end"]),
        med(base.cold["end-to-end"]),
        p95(base.warm["end-to-end"]),
    )
    ok = warm * 1000 <= TARGET_MS
    words = "**PASS**" if ok else "**FAIL**"
    extra = []
    for c in cases:
        if c.key.startswith("bundled") and c.key != "bundled" and not c.skip:
            extra.append(f"{c.key} {ms(med(c.warm['end-to-end']))} ms")
    return (
        f"Target: the bundled policy loads, renders, validates and compiles in ≤ {TARGET_MS:.0f} ms. "
        f"{words}: warm median end-to-end {ms(warm)} ms (p95 {ms(tail)} ms). "
        f"The cold first build in a fresh process takes {ms(cold)} ms "
        f"({'within' if cold * 1000 <= TARGET_MS else 'over'} the target), "
        f"after {ms(med(base.cold['import']))} ms "
        "of imports." + (f" Other bundled variants (warm median): {', '.join(extra)}." if extra else "")
    )


def write_results(section: str) -> None:
    write_section(SECTION, section, RESULTS)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(
        prog="python -m bench.bench_config", description="Benchmark the rule pipeline."
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=0,
        help="warm repeats for every case (default: 30 bundled, --synthetic-repeat synthetic)",
    )
    ap.add_argument("--synthetic-repeat", type=int, default=10, help="warm repeats for the synthetic policy")
    ap.add_argument(
        "--synthetic-validate-repeat",
        type=int,
        default=3,
        help="validate() repeats for the synthetic policy",
    )
    ap.add_argument(
        "--validate-repeat", type=int, default=10, help="validate() repeats for the bundled policies"
    )
    ap.add_argument(
        "--cold-runs", type=int, default=3, help="fresh-process cold runs per bundled case (median)"
    )
    ap.add_argument(
        "--synthetic-cold-runs", type=int, default=1, help="fresh-process cold runs for the synthetic policy"
    )
    ap.add_argument("--rules", type=int, default=500, help="rules in the synthetic policy")
    ap.add_argument("--seed", type=int, default=1, help="seed of the synthetic policy")
    ap.add_argument(
        "--write", action="store_true", help=f"write/update the section in {RESULTS.relative_to(ROOT)}"
    )
    args = ap.parse_args(argv)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="qosd-bench-") as tmp:
        synthetic_file = Path(tmp) / f"synthetic-{args.rules}-seed{args.seed}.yaml"
        synthetic_file.write_text(synthetic_policy(args.rules, args.seed), encoding="utf-8")
        cases = make_cases(args, synthetic_file)
        check_inputs(cases)
        for case in cases:
            if case.skip:
                print(f"[bench] {case.key}: SKIPPED: {case.skip}", file=sys.stderr)
        todo = [c for c in cases if not c.skip]
        steps: list[tuple[str, Callable[[Case], None] | None, Callable[[list[Case]], None] | None]] = [
            ("inputs", describe, None),
            ("cold runs", lambda c: measure_cold(c, c.cold_runs), None),
            ("warm runs", None, measure_warm),
            ("memory", measure_memory, None),
            ("validate()", None, measure_validate),
        ]
        for what, each, together in steps if todo else []:
            t0 = time.perf_counter()
            if together is not None:
                together(todo)
            if each is not None:
                for case in todo:
                    each(case)
            print(f"[bench] {what}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    command = "python -m bench.bench_config" + ("" if not argv else " " + " ".join(argv))
    section = report(cases, args, command, time.perf_counter() - start)
    print(section)
    if args.write:
        write_results(section)
        print(f"[bench] wrote {RESULTS}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
