"""Long-lived worker processes, one input at a time each, with a hang limit, an address-space
limit and a per-input peak RSS; findings deduplicated by signature and minimized.

Peak RSS per input: before each input the worker resets its high-water mark (``5`` written to
/proc/self/clear_refs, Linux >= 4.0) and reads VmHWM after it, so the figure is the process's peak
resident set while that input ran (the worker's own baseline, about 60-100 MB, included). Where
clear_refs is refused, ru_maxrss growth is used and the worker is replaced after any growth, so each
reading again belongs to one input.

A worker is replaced after a MemoryError, a hang (killed), a death by signal, or when its resident
set stays above RECYCLE_RSS_KB; RLIMIT_AS makes a blow-up a MemoryError finding, not an OOM kill.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import hashlib
import logging
import multiprocessing as mp
import os
import random
import re
import resource
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from bench.fuzz.mutate import Mutated
from bench.fuzz.oracle import CLASSES, CRASH, ENGINE_DIR, HANG, LOCATED, OK, Outcome, classify_exception
from bench.fuzz.surfaces import SURFACES, Env, Surface

HANG_SECONDS = 5.0
ADDRESS_SPACE = 1 << 30  # 1 GiB above the worker's size at start
RECYCLE_RSS_KB = 400 * 1024
MINIMIZE_CANDIDATES = 120
MINIMIZE_SECONDS = 20.0  # per finding
MINIMIZE_TOTAL_SECONDS = 300.0  # per run; later findings keep their whole input
GENERATE_SECONDS = 120.0  # generous: generation is the harness's time, not qosd's


def input_rng(seed: int, surface: str, index: int) -> random.Random:
    return random.Random(f"{seed}/{surface}/{index}")


def generate(surface: Surface, seed: int, index: int) -> Mutated:
    return surface.generate(input_rng(seed, surface.name, index))


# ---------------------------------------------------------------- measuring


def _status_kb(field_name: str) -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        m = re.search(rf"^{field_name}:\s+(\d+)", fh.read(), re.M)
    return int(m.group(1)) if m else 0


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


# ---------------------------------------------------------------- the worker


@dataclass
class Result:
    surface: str
    index: int
    outcome: Outcome
    rss_kb: int
    seconds: float
    recycle: bool = False


def execute(env: Env, surface: Surface, m: Mutated) -> tuple[Outcome, float]:
    path = surface.input_path(env, m)
    path.write_bytes(m.data)
    t0 = time.perf_counter()
    try:
        note = surface.run(env, path)
        outcome = Outcome(LOCATED if note else OK, detail=note or "")
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        outcome = classify_exception(exc, surface.name, m.fault_line)
    return outcome, time.perf_counter() - t0


def _die_with_parent() -> None:
    """PR_SET_PDEATHSIG: a forked worker holds the other workers' pipe ends too, so it would never
    see EOF if the parent were killed; the kernel ends it instead."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG


def _worker(conn: Connection, seed: int, hang_seconds: float, dump_path: str) -> None:
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us
    # qosd's warnings (a state file set aside...) are part of the outcome, not the console's.
    logging.getLogger().handlers[:] = [logging.NullHandler()]
    logging.getLogger("engine").propagate = False
    size = _status_kb("VmSize") * 1024
    limit = size + ADDRESS_SPACE
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    env = Env(Path(dump_path).parent)
    surfaces: dict[str, Surface] = {}
    dump = open(dump_path, "w", encoding="utf-8")  # noqa: SIM115 - lives as long as the worker
    can_reset = _reset_peak()
    try:
        while True:
            msg = conn.recv()
            if msg[0] == "stop":
                return
            name = msg[1]
            surface = surfaces.get(name) or surfaces.setdefault(name, SURFACES[name]())
            if msg[0] == "run":
                index = msg[2]
                m = generate(surface, seed, index)
            else:  # ("try", surface, data, fault_line): a minimizer candidate
                m = Mutated(msg[2], "replay", [], msg[3])
                index = -1
            conn.send(("started", index))  # the hang clock starts now, not during generation
            before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            if can_reset:
                _reset_peak()
            dump.seek(0)
            dump.truncate()
            faulthandler.dump_traceback_later(hang_seconds, file=dump)
            try:
                outcome, seconds = execute(env, surface, m)
            finally:
                faulthandler.cancel_dump_traceback_later()
            peak = _status_kb("VmHWM") if can_reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            grew = not can_reset and resource.getrusage(resource.RUSAGE_SELF).ru_maxrss > before
            memory_error = outcome.cls == CRASH and "MemoryError" in outcome.signature
            recycle = memory_error or grew or _status_kb("VmRSS") > RECYCLE_RSS_KB
            conn.send(Result(name, index, outcome, peak, seconds, recycle))
            if recycle:
                return
    finally:
        env.close()
        dump.close()


# ---------------------------------------------------------------- the pool


@dataclass
class Slot:
    proc: mp.process.BaseProcess
    conn: Connection
    dump: str
    task: tuple[Any, ...] | None = None
    started: float = 0.0
    deadline: float = 0.0
    running: bool = False


@dataclass
class Finding:
    cls: str
    signature: str
    surface: str
    index: int
    detail: str
    data: bytes
    steps: str
    fault_line: int | None
    count: int = 1
    minimized: bytes | None = None


@dataclass
class Stats:
    inputs: int = 0
    seconds: float = 0.0
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CLASSES, 0))
    worst_rss_kb: int = 0
    worst_index: int = -1


class Pool:
    def __init__(self, workers: int, seed: int, hang_seconds: float, tmp: Path, start_method: str = "fork"):
        # "fork" lets tests register fake surfaces before the workers start; "forkserver" gives workers
        # a fresh interpreter's baseline RSS, not the (possibly large) parent's they would share.
        self.ctx = mp.get_context(start_method)
        self.seed = seed
        self.hang_seconds = hang_seconds
        self.tmp = tmp
        self.slots = [self._spawn(i) for i in range(workers)]

    def _spawn(self, i: int) -> Slot:
        parent, child = self.ctx.Pipe()
        dump = str(self.tmp / f"hang-{i}.txt")
        proc = self.ctx.Process(target=_worker, args=(child, self.seed, self.hang_seconds, dump), daemon=True)
        proc.start()
        child.close()
        return Slot(proc, parent, dump)

    def replace(self, slot: Slot) -> None:
        if slot.proc.is_alive():
            slot.proc.kill()
        slot.proc.join(5)
        slot.conn.close()
        i = self.slots.index(slot)
        self.slots[i] = self._spawn(i)

    def submit(self, slot: Slot, task: tuple[Any, ...]) -> None:
        slot.task = task
        slot.started = time.monotonic()
        slot.deadline = slot.started + GENERATE_SECONDS
        slot.running = False
        slot.conn.send(task)

    def receive(self, slot: Slot, hang_seconds: float) -> Result | None:
        """The slot's next message: None after a "started" (the input now runs, under the hang
        limit), a Result when it is done; EOFError when the worker died."""
        msg = slot.conn.recv()
        if isinstance(msg, tuple) and msg and msg[0] == "started":
            slot.running = True
            slot.deadline = time.monotonic() + hang_seconds + 0.5
            return None
        assert isinstance(msg, Result)
        return msg

    def close(self) -> None:
        for s in self.slots:
            try:
                if s.task is None:
                    s.conn.send(("stop",))
            except OSError:
                pass
        for s in self.slots:
            s.proc.join(2)
            if s.proc.is_alive():
                s.proc.kill()
                s.proc.join(2)


def hang_frame(dump_text: str) -> str:
    """The innermost engine frame of a faulthandler dump (most recent call first)."""
    for line in dump_text.splitlines():
        m = re.match(r'\s*File "([^"]+)", line \d+ in (\S+)', line)
        if m and m.group(1).startswith(ENGINE_DIR):
            return f"{os.path.relpath(m.group(1), os.path.dirname(ENGINE_DIR))}:{m.group(2)}"
    for line in dump_text.splitlines():
        m = re.match(r'\s*File "([^"]+)", line \d+ in (\S+)', line)
        if m:
            return f"{os.path.basename(m.group(1))}:{m.group(2)}"
    return "?"


# ---------------------------------------------------------------- a run


@dataclass
class Report:
    seed: int
    workers: int
    elapsed: float
    stats: dict[str, Stats]
    findings: list[Finding]
    worst: tuple[int, str, int, str]  # rss kB, surface, index, description
    hang_seconds: float = HANG_SECONDS  # the run's limit, for the report's text


class Fuzzer:
    def __init__(
        self,
        surfaces: Sequence[str],
        *,
        seed: int = 1,
        workers: int = 0,
        hang_seconds: float = HANG_SECONDS,
        minimize: bool = True,
        tmp: Path,
        progress: bool = False,
        start_method: str = "fork",
    ):
        self.start_method = start_method
        self.names = list(surfaces)
        self.surfaces = {n: SURFACES[n]() for n in self.names}
        for s in self.surfaces.values():
            s.seeds()  # loaded before the fork: workers inherit them
        self.seed = seed
        self.workers = workers or os.cpu_count() or 1
        self.hang_seconds = hang_seconds
        self.minimize_enabled = minimize
        self.tmp = tmp
        self.progress = progress
        self.stats = {n: Stats() for n in self.names}
        self.findings: dict[str, Finding] = {}
        self.next_index = dict.fromkeys(self.names, 0)

    # -- scheduling: equal worker time per surface, optional cap of inputs per surface

    def _next(self, cap: int | None) -> str | None:
        open_ = [n for n in self.names if cap is None or self.next_index[n] < cap]
        if not open_:
            return None
        return min(open_, key=lambda n: (self.stats[n].seconds + 0.05 * self.next_index[n], n))

    def run(self, minutes: float | None = None, inputs_per_surface: int | None = None) -> Report:
        start = time.monotonic()
        stop_at = start + minutes * 60 if minutes is not None else None
        pool = Pool(self.workers, self.seed, self.hang_seconds, self.tmp, self.start_method)
        last_print = start
        try:
            while True:
                now = time.monotonic()
                accepting = stop_at is None or now < stop_at
                for slot in pool.slots:
                    if slot.task is None and accepting:
                        name = self._next(inputs_per_surface)
                        if name is None:
                            break
                        index = self.next_index[name]
                        self.next_index[name] += 1
                        pool.submit(slot, ("run", name, index))
                busy = [s for s in pool.slots if s.task is not None]
                if not busy:
                    break
                timeout = max(0.0, min(s.deadline for s in busy) - time.monotonic())
                ready = wait([s.conn for s in busy], timeout=min(timeout, 1.0))
                for slot in list(busy):
                    if slot.conn in ready:
                        self._receive(pool, slot)
                    elif time.monotonic() > slot.deadline:
                        self._hang(pool, slot)
                if self.progress and time.monotonic() - last_print > 30:
                    last_print = time.monotonic()
                    total = sum(s.inputs for s in self.stats.values())
                    print(
                        f"[fuzz] {time.monotonic() - start:6.0f}s {total} inputs, "
                        f"{len(self.findings)} distinct findings",
                        flush=True,
                    )
            elapsed = time.monotonic() - start  # fuzzing only: minimization comes after
            if self.minimize_enabled:
                self._minimize_all(pool)
        finally:
            pool.close()
        worst = max(((s.worst_rss_kb, n, s.worst_index) for n, s in self.stats.items()), default=(0, "", -1))
        desc = ""
        if worst[2] >= 0:  # regenerated: the input is a function of (seed, surface, index)
            desc = generate(self.surfaces[worst[1]], self.seed, worst[2]).describe()
        return Report(
            self.seed,
            self.workers,
            elapsed,
            self.stats,
            sorted(self.findings.values(), key=lambda f: (f.surface, f.cls, f.signature)),
            (worst[0], worst[1], worst[2], desc),
            self.hang_seconds,
        )

    def _receive(self, pool: Pool, slot: Slot) -> None:
        task = slot.task
        assert task is not None
        try:
            got = pool.receive(slot, self.hang_seconds)
        except (EOFError, OSError):
            slot.proc.join(1)
            code = slot.proc.exitcode
            how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
            self._record(
                task[1],
                task[2],
                Outcome(CRASH, f"{task[1]} | worker died | {how}", f"the worker process died ({how})"),
                0,
                0.0,
            )
            slot.task = None
            pool.replace(slot)
            return
        if got is None:
            return
        res = got
        slot.task = None
        self._record(res.surface, res.index, res.outcome, res.rss_kb, res.seconds)
        if res.recycle:
            pool.replace(slot)

    def _hang(self, pool: Pool, slot: Slot) -> None:
        task = slot.task
        assert task is not None
        if not slot.running:  # still generating: the harness's fault, not qosd's; not counted
            print(f"[fuzz] generating {task[1]} #{task[2]} took over {GENERATE_SECONDS:.0f}s; skipped")
            slot.task = None
            pool.replace(slot)
            return
        try:
            text = Path(slot.dump).read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = ""
        outcome = Outcome(
            HANG,
            f"{task[1]} | HANG | {hang_frame(text)}",
            f"no answer after {self.hang_seconds:.0f} s; stack at the limit:\n{text}",
        )
        slot.task = None
        pool.replace(slot)
        self._record(task[1], task[2], outcome, 0, self.hang_seconds)

    def _record(self, surface: str, index: int, outcome: Outcome, rss_kb: int, seconds: float) -> None:
        st = self.stats[surface]
        st.inputs += 1
        st.seconds += seconds
        st.counts[outcome.cls] += 1
        if rss_kb > st.worst_rss_kb:
            st.worst_rss_kb, st.worst_index = rss_kb, index
        if outcome.cls in (OK, LOCATED):
            return
        f = self.findings.get(outcome.signature)
        if f is not None:
            f.count += 1
            return
        m = generate(self.surfaces[surface], self.seed, index)
        if self.progress:  # at once: a long run can be diagnosed (and replayed) while it goes on
            print(f"[fuzz] new finding: {surface} #{index} {outcome.signature}", flush=True)
        self.findings[outcome.signature] = Finding(
            outcome.cls, outcome.signature, surface, index, outcome.detail, m.data, m.describe(), m.fault_line
        )

    # -- minimization: line-level delta debugging, each candidate run in a worker

    def _minimize_all(self, pool: Pool) -> None:
        started = time.monotonic()
        for f in self.findings.values():
            if f.cls == HANG or "worker died" in f.signature:
                continue
            if time.monotonic() - started > MINIMIZE_TOTAL_SECONDS:
                break
            f.minimized = self._minimize(pool, f)

    def _check(self, pool: Pool, surface: str, data: bytes, fault_line: int | None) -> str | None:
        slot = pool.slots[0]
        pool.submit(slot, ("try", surface, data, fault_line))
        res: Result | None = None
        try:
            while res is None:
                if not wait([slot.conn], timeout=max(0.0, slot.deadline - time.monotonic())):
                    break
                res = pool.receive(slot, self.hang_seconds)
        except (EOFError, OSError):
            res = None
        slot.task = None
        if res is None or res.recycle:
            pool.replace(slot)
        return res.outcome.signature if res is not None else None

    def _minimize(self, pool: Pool, f: Finding) -> bytes:
        lines = f.data.split(b"\n")
        if self._check(pool, f.surface, f.data, f.fault_line) != f.signature:
            return f.data  # not reproducible alone (depends on worker history): keep it whole
        tries, started = 0, time.monotonic()
        chunk = max(1, len(lines) // 2)
        while chunk >= 1 and tries < MINIMIZE_CANDIDATES and time.monotonic() - started < MINIMIZE_SECONDS:
            i, progressed = 0, False
            while i < len(lines) and tries < MINIMIZE_CANDIDATES:
                candidate = lines[:i] + lines[i + chunk :]
                tries += 1
                if candidate and self._check(pool, f.surface, b"\n".join(candidate), None) == f.signature:
                    lines, progressed = candidate, True
                else:
                    i += chunk
            if not progressed:
                chunk //= 2
        return b"\n".join(lines)


# ---------------------------------------------------------------- output


def write_findings(report: Report, out: Path, surfaces: dict[str, Surface]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for f in report.findings:
        h = hashlib.sha256(f.signature.encode()).hexdigest()[:8]
        d = out / f"{f.surface}-{f.cls.lower()}-{h}"
        d.mkdir(exist_ok=True)
        suffix = surfaces[f.surface].suffix
        (d / f"input{suffix}").write_bytes(f.data)
        name = f"input{suffix}"
        if f.minimized is not None and f.minimized != f.data:
            (d / f"minimal{suffix}").write_bytes(f.minimized)
            name = f"minimal{suffix}"
        (d / "finding.txt").write_text(
            f"class: {f.cls}\nsignature: {f.signature}\nseen: {f.count} input(s)\n"
            f"first input: seed {report.seed}, surface {f.surface}, index {f.index}\n"
            f"mutations: {f.steps}\nreproduce: {surfaces[f.surface].command(str(d / name))}\n\n{f.detail}\n",
            encoding="utf-8",
        )
    _, w_surface, w_index, _ = report.worst
    if w_index >= 0:
        m = generate(surfaces[w_surface], report.seed, w_index)
        (out / f"worst-rss-{w_surface}{surfaces[w_surface].suffix}").write_bytes(m.data)


def summary_table(report: Report) -> str:
    head = (
        "| surface | inputs | inputs/s | ms/input | OK | LOCATED | UNLOCATED | CRASH | HANG "
        "| worst peak RSS |"
    )
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    total = Stats()
    for name, st in report.stats.items():
        rate = st.inputs / report.elapsed if report.elapsed else 0.0
        lines.append(
            f"| {name} | {st.inputs} | {rate:.1f} | {1000 * st.seconds / max(st.inputs, 1):.0f} | "
            + " | ".join(str(st.counts[c]) for c in CLASSES)
            + f" | {st.worst_rss_kb / 1024:.0f} MB |"
        )
        total.inputs += st.inputs
        total.seconds += st.seconds
        for c in CLASSES:
            total.counts[c] += st.counts[c]
        total.worst_rss_kb = max(total.worst_rss_kb, st.worst_rss_kb)
    rate = total.inputs / report.elapsed if report.elapsed else 0.0
    lines.append(
        f"| **all** | {total.inputs} | {rate:.1f} | {1000 * total.seconds / max(total.inputs, 1):.0f} | "
        + " | ".join(str(total.counts[c]) for c in CLASSES)
        + f" | {total.worst_rss_kb / 1024:.0f} MB |"
    )
    return "\n".join(lines)
