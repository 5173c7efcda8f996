"""``qosd demo``: colocation, live, for a newcomer: a latency probe next to a CPU-hungry batch job.

As root on a machine with a writable cgroup hierarchy, the demo creates ``qosd-demo/online`` and
``qosd-demo/batch``, runs the two workloads in them twice (unmanaged, then under ``qosd run`` with the
bundled default policy in standalone mode), and shows what qosd decided and the probe's latency and
the batch throughput in both runs. Anywhere else (not root, no cgroups) it falls back to a simulated
node: a generated day of tidal load replayed through the same engine (``qosd simulate``).

The workloads live here rather than under bench/ because ``pip install .`` ships only the package;
``bench/colocation`` reuses them for the recorded benchmark. Each workload is its own process
(``python -m engine.demo probe|batch``) so the cgroup it starts in is the one it runs in.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.argtypes import integer, number
from engine.cgroups.mounts import CgroupLayout, CgroupUnavailable
from engine.demo_report import report, risk_note

CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory")
GROUPS = ("online", "batch")


# ---------------------------------------------------------------- the workloads


def _work(n: int) -> int:
    """Fixed CPU work; the result is returned so the loop cannot be optimized away."""
    acc = 0
    for i in range(n):
        acc ^= i * 2654435761
    return acc


def percentile(sorted_values: Sequence[int], q: float) -> float:
    """Nearest-rank percentile, as latency reports usually give it."""
    if not sorted_values:
        return 0.0
    rank = max(1, min(len(sorted_values), -(-int(q * 1000) * len(sorted_values) // 1000)))
    return float(sorted_values[rank - 1])


def probe(rate_hz: float, duration_s: float, work_n: int, warmup_s: float) -> dict[str, float]:
    """Fixed small work at a fixed rate; latency from when each request was *due* to when it finished.

    That includes the wake-up delay (how long the scheduler kept the probe waiting) and the run time
    (longer when a CPU is shared): what an online service's tail latency suffers under colocation."""
    period_ns = int(1e9 / rate_hz)
    latencies: list[int] = []
    start = time.perf_counter_ns() + int(warmup_s * 1e9)
    while time.perf_counter_ns() < start:  # page faults and cold caches, not scheduling
        _work(work_n)
        time.sleep(period_ns / 1e9)
    usage0 = resource.getrusage(resource.RUSAGE_SELF)
    end = start + int(duration_s * 1e9)
    due = start
    while due < end:
        now = time.perf_counter_ns()
        if due > now:
            time.sleep((due - now) / 1e9)
        _work(work_n)
        latencies.append(time.perf_counter_ns() - due)
        due += period_ns
    usage1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (usage1.ru_utime - usage0.ru_utime) + (usage1.ru_stime - usage0.ru_stime)
    latencies.sort()
    return {
        "count": len(latencies),
        "p50_us": percentile(latencies, 0.50) / 1e3,
        "p99_us": percentile(latencies, 0.99) / 1e3,
        "p999_us": percentile(latencies, 0.999) / 1e3,
        "cpu_cores": cpu / duration_s,
    }


def _spin(deadline: float, chunk: int) -> int:
    done = 0
    while time.monotonic() < deadline:
        acc = 0
        for i in range(chunk):
            acc += i
        done += 1
    return done


def batch(workers: int, duration_s: float, warmup_s: float, chunk: int = 10000) -> dict[str, float]:
    """One busy worker per CPU counting fixed chunks of work: the batch job's useful throughput.

    It stands in for stress-ng's bogo-ops with no extra package; runs compare it with its own solo rate."""
    start = time.monotonic() + warmup_s
    deadline = start + duration_s
    children = []
    for _ in range(workers):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover (child process)
            os.close(r)
            _spin(start, chunk)
            os.write(w, str(_spin(deadline, chunk)).encode())
            os._exit(0)
        os.close(w)
        children.append((pid, r))
    total = 0
    for pid, r in children:
        with os.fdopen(r) as f:
            total += int(f.read() or 0)
        os.waitpid(pid, 0)
    return {"chunks": total, "rate": total / duration_s, "workers": workers}


# ---------------------------------------------------------------- the cgroups the workloads start in


class DemoCgroups:
    """A cgroup v1 subtree (``<name>/online``, ``<name>/batch``) placed before qosd sees it, as a
    kubelet would. Scaffolding for the demo: qosd itself finds and manages these cgroups."""

    def __init__(self, name: str = "qosd-demo", root: Path = Path("/sys/fs/cgroup")):
        self.root = root
        self.name = name

    def dir(self, controller: str, group: str = "") -> Path:
        base = self.root / controller / self.name
        return base / group if group else base

    @staticmethod
    def available(root: Path = Path("/sys/fs/cgroup")) -> str | None:
        """None when the demo can run for real here, else why not."""
        if os.geteuid() != 0:
            return "not running as root"
        try:
            layout = CgroupLayout.detect(root)
        except (CgroupUnavailable, OSError) as exc:
            return str(exc)
        for ctrl in CONTROLLERS:
            if layout.v1.get(ctrl) != os.path.realpath(root / ctrl):
                return f"no cgroup v1 {ctrl} hierarchy at {root / ctrl} ({layout.describe()})"
            if not os.access(root / ctrl, os.W_OK):
                return f"{root / ctrl} is not writable"
        return None

    def create(self, groups: Sequence[str] = GROUPS) -> None:
        for ctrl in CONTROLLERS:
            for d in (self.dir(ctrl), *(self.dir(ctrl, g) for g in groups)):
                d.mkdir(exist_ok=True)
                if ctrl == "cpuset":
                    for f in ("cpuset.cpus", "cpuset.mems"):
                        if not (d / f).read_text().strip():
                            (d / f).write_text((d.parent / f).read_text().strip())

    def reset(self) -> None:
        """Kernel defaults between runs, so the unmanaged run sees nothing qosd wrote."""
        for g in GROUPS:
            cpu = self.dir("cpu", g)
            for f, v in (("cpu.idle", "0"), ("cpu.shares", "1024"), ("cpu.cfs_quota_us", "-1")):
                if (cpu / f).exists():
                    (cpu / f).write_text(v)
            parent = self.dir("cpuset")
            (self.dir("cpuset", g) / "cpuset.cpus").write_text((parent / "cpuset.cpus").read_text().strip())

    def popen(self, group: str, argv: Sequence[str]) -> subprocess.Popen[str]:
        procs = [self.dir(c, group) / "cgroup.procs" for c in CONTROLLERS]

        def enter() -> None:  # in the child before exec: the whole process tree starts inside
            pid = str(os.getpid())
            for p in procs:
                p.write_text(pid)

        return subprocess.Popen(list(argv), stdout=subprocess.PIPE, text=True, preexec_fn=enter)

    def remove(self) -> None:
        """Move stragglers to the root and remove the subtree, children first."""
        for ctrl in CONTROLLERS:
            base = self.dir(ctrl)
            if not base.exists():
                continue
            for d in [*sorted((p for p in base.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)), base]:
                for pid in (d / "cgroup.procs").read_text().split():
                    with contextlib.suppress(OSError):  # exited meanwhile
                        (self.root / ctrl / "cgroup.procs").write_text(pid)
                for _ in range(100):
                    try:
                        d.rmdir()
                        break
                    except OSError:
                        time.sleep(0.05)


# ---------------------------------------------------------------- scenarios


@dataclass
class Run:
    name: str
    probe: dict[str, Any] | None = None
    batch: dict[str, Any] | None = None
    decisions: tuple[str, ...] = ()


@dataclass(frozen=True)
class Load:
    duration: float = 3.0
    rate: float = 200.0
    work: int = 5000
    warmup: float = 1.0


def _result(proc: subprocess.Popen[str], what: str) -> dict[str, Any]:
    out, _ = proc.communicate(timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"the {what} workload exited with {proc.returncode}")
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def run(cg: DemoCgroups, name: str, load: Load, *, with_probe: bool, with_batch: bool, managed: bool) -> Run:
    """One scenario; ``managed`` runs ``qosd run`` (bundled default policy, standalone) alongside."""
    cg.reset()
    out = Run(name)
    daemon = None
    audit = Path(tempfile.mkstemp(prefix="qosd-demo-", suffix=".jsonl")[1])
    if managed:
        daemon = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "engine.cli",
                "run",
                "--interval",
                "1s",
                "--listen",
                "",
                "--root",
                f"{cg.name}/*",
                "--audit-log",
                str(audit),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        _wait_for_first_tick(daemon, audit)  # the batch cgroup is handled before the work starts
    timing = ["--duration", str(load.duration), "--warmup", str(load.warmup)]
    procs = {}
    try:
        if with_batch:
            procs["batch"] = cg.popen("batch", [sys.executable, "-m", "engine.demo", "batch", *timing])
        if with_probe:
            rate = ["--rate", str(load.rate), "--work", str(load.work)]
            procs["probe"] = cg.popen(
                "online", [sys.executable, "-m", "engine.demo", "probe", *timing, *rate]
            )
        if "probe" in procs:
            out.probe = _result(procs["probe"], "probe")
        if "batch" in procs:
            out.batch = _result(procs["batch"], "batch")
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
        if daemon is not None:
            daemon.terminate()
            daemon.communicate(timeout=30)
            out.decisions = decisions(audit)
        audit.unlink(missing_ok=True)
    return out


def _wait_for_first_tick(daemon: subprocess.Popen[str], audit: Path, limit: float = 120.0) -> None:
    """Until the daemon's first tick is in its audit log (its writes are applied by then), it exits,
    or ``limit`` seconds pass: a fixed sleep is too short on a loaded machine, where starting
    Python and loading the policy alone can take seconds."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and daemon.poll() is None:
        with contextlib.suppress(OSError):
            if b"\n" in audit.read_bytes():
                return
        time.sleep(0.05)


def decisions(audit: Path) -> tuple[str, ...]:
    """What qosd changed, in words, from its audit log."""
    lines = []
    for line in audit.read_text().splitlines() if audit.exists() else ():
        record = json.loads(line)
        why = {
            (i.get("path"), i.get("file")): i["provenance"]
            for i in record["intents"]
            if i["kind"] == "cgroup"
        }
        for res in record.get("results", ()):
            op = res["operation"]
            if op["kind"] != "writeCgroup" or res["status"] != "applied":
                continue
            prov = why.get((op["path"], op["file"]), {})
            cls = (prov.get("inputs") or {}).get("class") or (prov.get("inputs") or {}).get("pool", "")
            lines.append(
                f"{op['path']}/{op['file']} = {op['value']}  ({res.get('detail', '')}; "
                f"rule {prov.get('rule', op['rule'])}{', ' + str(cls) if cls else ''})"
            )
    return tuple(lines)


SCENARIOS = (
    ("probe alone", True, False, False),
    ("probe + batch, no qosd", True, True, False),
    ("probe + batch, qosd run", True, True, True),
)


def live(load: Load, out: Any = None, repeats: int = 3) -> int:
    """Each scenario ``repeats`` times, interleaved (round r starts at scenario r, so a load that
    drifts over the minutes falls on every scenario alike); the medians, the spread, and a verdict
    that says so when the machine is too noisy to conclude."""
    out = out if out is not None else sys.stdout  # looked up now: a caller may have replaced it
    cg = DemoCgroups()
    cg.remove()
    cg.create()
    print(
        f"qosd demo: a latency probe ({load.rate:g} requests/s) next to a CPU-hungry batch job, "
        f"{load.duration:g}s per run, {repeats} round(s) of the three runs interleaved, on this "
        f"machine's real cgroups ({cg.root}/*/{cg.name}).",
        file=out,
    )
    runs: dict[str, list[Run]] = {name: [] for name, *_ in SCENARIOS}
    try:
        for r in range(repeats):
            shift = r % len(SCENARIOS)
            for name, probe_on, batch_on, managed in SCENARIOS[shift:] + SCENARIOS[:shift]:
                print(f"  round {r + 1}/{repeats}: {name} ...", file=out, flush=True)
                runs[name].append(
                    run(cg, name, load, with_probe=probe_on, with_batch=batch_on, managed=managed)
                )
    finally:
        cg.remove()
    report(runs, [name for name, *_ in SCENARIOS], out)
    return 0


def simulated(reason: str, out: Any = None) -> int:
    """No cgroups to manage here: a generated day on a simulated 32-CPU node, through the same engine."""
    out = out if out is not None else sys.stdout  # looked up now: a caller may have replaced it
    from engine.config.errors import Location
    from engine.config.pipeline import build_policy, load_documents
    from engine.evaluate.engine import Engine
    from engine.simulate.report import format_text
    from engine.simulate.result import Options
    from engine.simulate.run import simulate
    from engine.sources.trace import generate_tidal, trace_from_dict

    print(
        f"qosd demo: {reason}, so this is a simulated node instead: a generated day of tidal online "
        "load with batch work, replayed through the bundled default policy (as `qosd simulate`). "
        "Run as root on Linux with cgroup v1 to see the live colocation.\n",
        file=out,
    )
    doc = generate_tidal(hours=24, step=300, seed=7, profile=None, name="demo-node")

    def nowhere(_path: Any, _key: bool = False) -> Location:
        return Location("<generated>")

    trace = trace_from_dict(doc, nowhere, "<generated tidal day>")
    engine = Engine(build_policy(load_documents([]), trace.base.node))
    try:
        sim = simulate(trace, engine, Options())
    finally:
        engine.backend.close()
    text = format_text(sim, timeline=False)
    out.write(text if text.endswith("\n") else text + "\n")
    note = risk_note(sim)
    if note:
        out.write("\n" + note + "\n")
    return 0


# ---------------------------------------------------------------- command line


def cmd_demo(args: argparse.Namespace) -> int:
    load = Load(duration=args.duration, rate=args.rate, work=args.work)
    reason = "--simulate was given" if args.simulate else DemoCgroups.available()
    if reason is not None:
        return simulated(reason)
    return live(load, repeats=args.repeat)


# Bounds of the workload flags: a run long enough to measure and short enough to wait for; a probe
# rate whose period the scheduler can keep (the probe sleeps between requests) and that one CPU can
# serve with the largest work.
DURATION = number(0.1, 3600)
WARMUP = number(0, 600)
RATE = number(1, 10_000)
WORK = integer(1, 10_000_000)
WORKERS = integer(1, 4096)
REPEAT = integer(1, 20)


def add_load_flags(parser: argparse.ArgumentParser, batch: bool = False) -> None:
    """The workload flags of ``qosd demo`` and of its probe and batch processes, each bounded: a
    negative duration or a zero rate would run and report nonsense with exit 0."""
    parser.add_argument(
        "--duration", type=DURATION, default=3.0, help="measured seconds per run, 0.1-3600 (default 3)"
    )
    if not batch:
        parser.add_argument(
            "--rate", type=RATE, default=200.0, help="probe requests per second, 1-10000 (default 200)"
        )
        parser.add_argument(
            "--work", type=WORK, default=5000, help="loop iterations per probe request (default 5000)"
        )


def add_parser(sub: Any) -> None:
    d = sub.add_parser(
        "demo",
        help="colocation live on this machine's cgroups (root), else on a simulated node",
        description=__doc__.split("\n\n")[0],
    )
    add_load_flags(d)
    d.add_argument(
        "--repeat",
        type=REPEAT,
        default=3,
        help="rounds of the three runs, interleaved, 1-20 (default 3): the spread says whether the "
        "machine is quiet enough to conclude",
    )
    d.add_argument("--simulate", action="store_true", help="use the simulated node even as root")
    d.set_defaults(func=cmd_demo)


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m engine.demo probe|batch ...``: the workloads, one process each."""
    parser = argparse.ArgumentParser(prog="python -m engine.demo")
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("probe")
    add_load_flags(p)
    b = sub.add_parser("batch")
    add_load_flags(b, batch=True)
    b.add_argument("--workers", type=WORKERS, default=os.cpu_count() or 1)
    for s in (p, b):
        s.add_argument("--warmup", type=WARMUP, default=1.0)
    args = parser.parse_args(argv)
    if args.what == "probe":
        result = probe(args.rate, args.duration, args.work, args.warmup)
    else:
        result = batch(args.workers, args.duration, args.warmup)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
