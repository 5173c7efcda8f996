"""The resctrl adapter against a fake resctrl tree with the kernel's layout.

Why fake: this machine has no RDT/PQoS hardware, so /sys/fs/resctrl cannot be mounted. The tree has
the kernel's files (``info/L3/{cbm_mask,min_cbm_bits,num_closids,shareable_bits,sparse_masks}``,
``info/MB/{bandwidth_gran,min_bandwidth,delay_linear,num_closids}``, ``info/L3_MON/num_rmids``,
``info/last_cmd_status``, per group ``schemata``, ``tasks``, ``mon_groups``; kernel
``Documentation/filesystems/resctrl.rst``, ecosystem.md §5.1), and :class:`FakeKernel` stands in for
what a plain file cannot do, following the kernel's resctrl code (``fs/resctrl``):

- a schemata write is validated per domain and *merged* (domains not named keep their value), must end
  in a newline, and the file reads back zero-padded as the kernel prints it; a rejected line leaves
  the file untouched, returns EINVAL and says why in ``info/last_cmd_status`` with the kernel's wording
  ("The mask f0f has non-consecutive 1-bits", "MB value 5 out of range [10,100]");
- ``tasks`` takes one id per write; an id with no live task is ESRCH ("No task 123"); a moved task
  leaves its previous group;
- ``mkdir`` fails with ENOSPC ("Out of CLOSIDs" / "Out of RMIDs") when either runs out, and a new
  group starts with the full default schemata; ``rmdir`` gives the group's tasks back to the default
  group.
"""

from __future__ import annotations

import errno
import logging
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from engine.adapters.cgroup import CgroupAdapter
from engine.adapters.executor import NodeExecutor
from engine.adapters.fsio import FileIO
from engine.adapters.resctrl import ResctrlAdapter
from engine.cgroups.mounts import CgroupLayout
from engine.features.resctrl.strategy import Capabilities, changed_lines, l3_cbm, mba_value, schemata_for
from engine.model.intents import Provenance, ResctrlIntent
from engine.model.operations import AssignTasks, CreateResctrlGroup, RemoveResctrlGroup, WriteSchemata
from engine.plan.planner import Guards, plan
from tests.builders import policy


class FakeKernel(FileIO):
    """Kernel-side behaviour of resctrl over a temp tree; plain file IO everywhere else."""

    def __init__(self, root: Path, alive: Callable[[int], bool] | None = None):
        self.root = root
        self.alive = alive or (lambda pid: os.path.exists(f"/proc/{pid}"))
        self.writes: list[tuple[str, str]] = []

    def _info(self, *parts: str) -> str:
        return (self.root / "info" / Path(*parts)).read_text().strip()

    def _status(self, text: str) -> None:
        (self.root / "info" / "last_cmd_status").write_text(text + "\n")

    def _fail(self, code: int, status: str) -> OSError:
        self._status(status)
        return OSError(code, os.strerror(code))

    def _groups(self) -> list[Path]:
        return [
            p for p in self.root.iterdir() if p.is_dir() and p.name not in ("info", "mon_groups", "mon_data")
        ]

    def write(self, path: str, text: str, *, append: bool = False) -> None:
        p = Path(path)
        self.writes.append((path, text))
        if p.name == "schemata":
            self._schemata(p, text)
        elif p.name == "tasks":
            self._task(p, text)
        else:
            super().write(path, text, append=append)

    def _schemata(self, p: Path, text: str) -> None:
        if not text.endswith("\n"):
            raise self._fail(errno.EINVAL, "schemata write must end with a newline")
        current = parse(p.read_text())
        for line in text.splitlines():
            name, _, domains = line.strip().partition(":")
            if name not in current:
                raise self._fail(errno.EINVAL, f"Unknown or unsupported resource name '{name}'")
            for part in domains.split(";"):
                dom_text, _, value = part.partition("=")
                dom = int(dom_text)
                if dom not in current[name]:
                    raise self._fail(errno.EINVAL, f"Missing '=' or non-numeric domain id {dom}")
                current[name][dom] = self._validate(name, value.strip())
        self._render(p, current)
        self._status("ok")

    def _validate(self, resource: str, value: str) -> int:
        if resource == "L3":
            mask = int(value, 16)
            full = int(self._info("L3", "cbm_mask"), 16)
            if mask > full:
                raise self._fail(errno.EINVAL, "Mask out of range")
            bits = bin(mask).count("1")
            low = mask & -mask
            if self._info("L3", "sparse_masks") != "1" and mask and (mask // low) & (mask // low + 1):
                raise self._fail(errno.EINVAL, f"The mask {mask:x} has non-consecutive 1-bits")
            if bits < int(self._info("L3", "min_cbm_bits")):
                raise self._fail(
                    errno.EINVAL, f"Need at least {self._info('L3', 'min_cbm_bits')} bits in the mask"
                )
            return mask
        bw = int(value)
        lo, gran = int(self._info("MB", "min_bandwidth")), int(self._info("MB", "bandwidth_gran"))
        if not lo <= bw <= 100:
            raise self._fail(errno.EINVAL, f"MB value {bw} out of range [{lo},100]")
        return -(-bw // gran) * gran

    def _render(self, p: Path, schemata: dict[str, dict[int, int]]) -> None:
        width = len(self._info("L3", "cbm_mask"))
        lines = []
        for name, domains in schemata.items():
            if name == "L3":
                lines.append("L3:" + ";".join(f"{d}={v:0{width}x}" for d, v in sorted(domains.items())))
            else:
                lines.append(f"{name}:" + ";".join(f"{d}={v:>3}" for d, v in sorted(domains.items())))
        p.write_text("\n".join(f"    {line}" for line in lines) + "\n")

    def _task(self, p: Path, text: str) -> None:
        pid = int(text.strip())
        if not self.alive(pid):
            raise self._fail(errno.ESRCH, f"No task {pid}")
        for group in [self.root, *self._groups()]:
            tasks = group / "tasks"
            if tasks != p and str(pid) in tasks.read_text().split():
                tasks.write_text("".join(f"{t}\n" for t in tasks.read_text().split() if t != str(pid)))
        with p.open("a") as fh:
            fh.write(f"{pid}\n")
        self._status("ok")

    def mkdir(self, path: str) -> None:
        p = Path(path)
        closids = min(int(self._info(r, "num_closids")) for r in ("L3", "MB"))
        groups = self._groups()
        if 1 + len(groups) >= closids:
            raise self._fail(errno.ENOSPC, "Out of CLOSIDs")
        if 1 + len(groups) >= int(self._info("L3_MON", "num_rmids")):
            raise self._fail(errno.ENOSPC, "Out of RMIDs")
        p.mkdir()
        defaults = parse((self.root / "schemata").read_text())
        full = int(self._info("L3", "cbm_mask"), 16)
        self._render(
            p / "schemata", {r: dict.fromkeys(d, full if r == "L3" else 100) for r, d in defaults.items()}
        )
        for name in ("tasks", "cpus", "cpus_list"):
            (p / name).write_text("")
        (p / "mon_groups").mkdir()
        self._status("ok")

    def rmdir(self, path: str) -> None:
        p = Path(path)
        with (self.root / "tasks").open("a") as fh:
            fh.write((p / "tasks").read_text())
        for child in p.iterdir():
            child.rmdir() if child.is_dir() else child.unlink()
        p.rmdir()


def parse(text: str) -> dict[str, dict[int, int]]:
    out: dict[str, dict[int, int]] = {}
    for line in text.splitlines():
        name, _, domains = line.strip().partition(":")
        if name:
            out[name] = {
                int(d): int(v.strip(), 16 if name == "L3" else 10)
                for d, _, v in (p.partition("=") for p in domains.split(";"))
            }
    return out


def make_tree(
    root: Path, *, l3_closids: int = 16, mb_closids: int = 8, rmids: int = 64, cdp: bool = False
) -> Path:
    info = root / "info"
    l3 = "L3DATA" if cdp else "L3"
    files = {
        "last_cmd_status": "ok\n",
        f"{l3}/cbm_mask": "fff\n",
        f"{l3}/min_cbm_bits": "2\n",
        f"{l3}/num_closids": f"{l3_closids}\n",
        f"{l3}/shareable_bits": "c00\n",
        f"{l3}/sparse_masks": "0\n",
        f"{l3}/bit_usage": "0=SSSSSSSSSSSS;1=SSSSSSSSSSSS\n",
        "MB/bandwidth_gran": "10\n",
        "MB/min_bandwidth": "10\n",
        "MB/delay_linear": "1\n",
        "MB/num_closids": f"{mb_closids}\n",
        "MB/thread_throttle_mode": "max\n",
        "L3_MON/num_rmids": f"{rmids}\n",
        "L3_MON/mon_features": "llc_occupancy\nmbm_total_bytes\nmbm_local_bytes\n",
    }
    if cdp:
        files["L3CODE/cbm_mask"] = "fff\n"
        files["L3CODE/num_closids"] = f"{l3_closids}\n"
    for name, text in files.items():
        (info / name).parent.mkdir(parents=True, exist_ok=True)
        (info / name).write_text(text)
    l3_line = "L3DATA:0=fff;1=fff\n    L3CODE:0=fff;1=fff" if cdp else "L3:0=fff;1=fff"
    (root / "schemata").write_text(f"    {l3_line}\n    MB:0=100;1=100\n")
    for name in ("tasks", "cpus", "cpus_list", "mode", "size"):
        (root / name).write_text("")
    (root / "mon_groups").mkdir()
    (root / "mon_data").mkdir()
    return root


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return make_tree(tmp_path / "resctrl")


@pytest.fixture
def kernel(tree: Path) -> FakeKernel:
    return FakeKernel(tree)


@pytest.fixture
def cpuinfo(tmp_path: Path) -> Path:
    p = tmp_path / "cpuinfo"
    p.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\n")
    return p


def adapter_for(tree: Path, kernel: FakeKernel, cpuinfo: Path, **kw: object) -> ResctrlAdapter:
    return ResctrlAdapter(tree, cpuinfo=cpuinfo, io=kernel, **kw)  # type: ignore[arg-type]


@pytest.fixture
def live_pid() -> Iterator[int]:
    proc = subprocess.Popen(["sleep", "300"])
    yield proc.pid
    proc.kill()
    proc.wait()


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


# ---------------------------------------------------------------- capabilities


def test_capabilities_from_info(tree: Path, kernel: FakeKernel, cpuinfo: Path) -> None:
    info = adapter_for(tree, kernel, cpuinfo).info()
    assert info.mounted
    assert (info.cbm_mask, info.min_cbm_bits, info.shareable_bits, info.sparse_masks) == (
        "fff",
        2,
        "c00",
        False,
    )
    assert info.num_closids == 8  # the smallest over L3 (16) and MB (8), as the kernel counts
    assert (info.mb_granularity, info.mb_min, info.delay_linear) == (10, 10, True)
    assert (info.cache_ids, info.mb_domains) == ((0, 1), (0, 1))
    assert info.vendor == "intel"
    assert dict(info.groups) == {"/": "    L3:0=fff;1=fff\n    MB:0=100;1=100\n"}
    caps = Capabilities.from_info(info)  # what the strategies plan with
    assert caps.has_l3 and caps.has_mb and caps.num_closids == 8


def test_vendor_and_sparse_masks(tmp_path: Path, cpuinfo: Path) -> None:
    tree = make_tree(tmp_path / "r")
    (tree / "info/L3/sparse_masks").write_text("1\n")
    cpuinfo.write_text("vendor_id\t: AuthenticAMD\n")
    info = ResctrlAdapter(tree, cpuinfo=cpuinfo).info()
    assert (info.vendor, info.sparse_masks) == ("amd", True)


def test_cdp_offers_no_plain_l3(tmp_path: Path, cpuinfo: Path) -> None:
    """With CDP the kernel offers L3CODE/L3DATA, not L3; the strategies write L3 lines, so no L3
    capability is reported (MB still is)."""
    info = ResctrlAdapter(make_tree(tmp_path / "r", cdp=True), cpuinfo=cpuinfo).info()
    assert (info.cbm_mask, info.cache_ids, info.mb_domains) == ("", (), (0, 1))
    assert not Capabilities.from_info(info).has_l3


# ---------------------------------------------------------------- groups


def test_create_within_num_closids(tmp_path: Path, cpuinfo: Path) -> None:
    tree = make_tree(tmp_path / "r", l3_closids=4)
    kernel = FakeKernel(tree)
    adapter = adapter_for(tree, kernel, cpuinfo)
    results = adapter.apply([CreateResctrlGroup(g, "r") for g in ("LSR", "LS", "BE", "extra", "LS")])
    assert [r.status for r in results] == ["applied", "applied", "applied", "failed", "unchanged"]
    refused = results[3]
    assert refused.attempts == 0  # not even tried: the kernel would say "Out of CLOSIDs"
    assert "no CLOSID left for resctrl group extra: 4 in use" in (refused.error or "")
    assert "BE, LS, LSR" in (refused.error or "")
    assert sorted(p.name for p in tree.iterdir() if p.is_dir()) == [
        "BE",
        "LS",
        "LSR",
        "info",
        "mon_data",
        "mon_groups",
    ]
    assert set(adapter.info().groups) == {"/", "LSR", "LS", "BE"}


def test_kernel_enospc_is_reported_with_last_cmd_status(tmp_path: Path, cpuinfo: Path) -> None:
    tree = make_tree(tmp_path / "r", rmids=2)
    adapter = adapter_for(tree, FakeKernel(tree), cpuinfo)
    results = adapter.apply([CreateResctrlGroup("a", "r"), CreateResctrlGroup("b", "r")])
    assert [r.status for r in results] == ["applied", "failed"]
    assert "ENOSPC" in (results[1].error or "") and "kernel says: Out of RMIDs" in (results[1].error or "")


def test_remove_gives_tasks_back_and_the_closid_free(
    tree: Path, kernel: FakeKernel, cpuinfo: Path, live_pid: int
) -> None:
    adapter = adapter_for(tree, kernel, cpuinfo, tasks_of=lambda _c: [live_pid])
    adapter.apply([CreateResctrlGroup("BE", "r"), AssignTasks("BE", ("x",), "r")])
    results = adapter.apply(
        [RemoveResctrlGroup("BE", "r"), RemoveResctrlGroup("BE", "r"), RemoveResctrlGroup("/", "r")]
    )
    assert [r.status for r in results] == ["applied", "unchanged", "failed"]
    assert str(live_pid) in (tree / "tasks").read_text().split()
    assert "BE" not in adapter.info().groups


@pytest.mark.parametrize("name", ["../escape", "a/b", "..", "info", "mon_groups", "schemata"])
def test_group_names_are_confined(tree: Path, kernel: FakeKernel, cpuinfo: Path, name: str) -> None:
    [result] = adapter_for(tree, kernel, cpuinfo).apply([CreateResctrlGroup(name, "r")])
    assert result.status == "failed" and "refused" in (result.error or "")
    assert not (tree.parent / "escape").exists()


def test_symlinked_group_is_refused(tree: Path, kernel: FakeKernel, cpuinfo: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "schemata").write_text("L3:0=fff;1=fff\n")
    (tree / "BE").symlink_to(outside)
    [result] = adapter_for(tree, kernel, cpuinfo).apply([WriteSchemata("BE", "L3:0=00f;1=00f", "r")])
    assert result.status == "failed" and "outside" in (result.error or "")
    assert (outside / "schemata").read_text() == "L3:0=fff;1=fff\n"


# ---------------------------------------------------------------- schemata


def test_only_changed_domains_are_written(tree: Path, kernel: FakeKernel, cpuinfo: Path) -> None:
    adapter = adapter_for(tree, kernel, cpuinfo)
    adapter.apply([CreateResctrlGroup("BE", "r")])
    kernel.writes.clear()
    results = adapter.apply(
        [WriteSchemata("BE", "L3:0=fff;1=03f", "r"), WriteSchemata("BE", "MB:0=100;1=50", "r")]
    )
    assert [r.status for r in results] == ["applied", "applied"]
    assert [text for _, text in kernel.writes] == ["L3:1=03f\n", "MB:1=50\n"]
    assert (tree / "BE" / "schemata").read_text() == "    L3:0=fff;1=03f\n    MB:0=100;1= 50\n"
    # the kernel's zero- and space-padding reads back as the same values: nothing more to write
    kernel.writes.clear()
    again = adapter.apply(
        [WriteSchemata("BE", "L3:0=fff;1=3f", "r"), WriteSchemata("BE", "MB:0=100;1=50", "r")]
    )
    assert [r.status for r in again] == ["unchanged", "unchanged"]
    assert kernel.writes == []


def test_rejected_mask_reports_last_cmd_status(tree: Path, kernel: FakeKernel, cpuinfo: Path) -> None:
    adapter = adapter_for(tree, kernel, cpuinfo)
    adapter.apply([CreateResctrlGroup("BE", "r")])
    before = (tree / "BE" / "schemata").read_text()
    results = adapter.apply([WriteSchemata("BE", "L3:0=f0f", "r"), WriteSchemata("BE", "MB:0=5", "r")])
    assert [r.status for r in results] == ["failed", "failed"]
    assert "kernel rejected 'L3:0=f0f'" in (results[0].error or "")
    assert "kernel says: The mask f0f has non-consecutive 1-bits" in (results[0].error or "")
    assert "kernel says: MB value 5 out of range [10,100]" in (results[1].error or "")
    assert (tree / "BE" / "schemata").read_text() == before


def test_group_removed_before_the_schemata_write_is_vanished(
    tree: Path, kernel: FakeKernel, cpuinfo: Path
) -> None:
    adapter = adapter_for(tree, kernel, cpuinfo)
    adapter.apply([CreateResctrlGroup("BE", "r")])
    kernel.rmdir(str(tree / "BE"))
    [result] = adapter.apply([WriteSchemata("BE", "L3:0=3", "r")])
    assert result.status == "vanished"


def test_malformed_line_is_refused(tree: Path, kernel: FakeKernel, cpuinfo: Path) -> None:
    [result] = adapter_for(tree, kernel, cpuinfo).apply([WriteSchemata("/", "L3 0=3", "r")])
    assert result.status == "failed" and "not a schemata line" in (result.error or "")


# ---------------------------------------------------------------- tasks


def test_pid_churn_is_tolerated_one_pid_per_write(
    tree: Path, kernel: FakeKernel, cpuinfo: Path, live_pid: int
) -> None:
    gone = dead_pid()
    other = subprocess.Popen(["sleep", "300"])
    try:
        members = {"kubepods/pod-a/c1": [live_pid, gone], "kubepods/pod-a/c2": [other.pid]}
        adapter = adapter_for(tree, kernel, cpuinfo, tasks_of=lambda c: members.get(c, []))
        adapter.apply([CreateResctrlGroup("BE", "r")])
        (tree / "BE" / "tasks").write_text(f"{other.pid}\n")  # already there: not rewritten
        kernel.writes.clear()
        [result] = adapter.apply(
            [AssignTasks("BE", ("kubepods/pod-a/c1", "kubepods/pod-a/c2", "gone/c3"), "r")]
        )
        assert result.status == "applied"
        assert result.detail == "moved 1 task, 1 exited before the move"
        assert sorted(text for _, text in kernel.writes) == sorted(
            [str(live_pid), str(gone)]
        )  # one id per write
        assert sorted(int(t) for t in (tree / "BE" / "tasks").read_text().split()) == sorted(
            [live_pid, other.pid]
        )
        members["kubepods/pod-a/c1"] = [live_pid]
        kernel.writes.clear()
        [again] = adapter.apply([AssignTasks("BE", ("kubepods/pod-a/c1", "kubepods/pod-a/c2"), "r")])
        assert (again.status, again.attempts, kernel.writes) == ("unchanged", 0, [])
    finally:
        other.kill()
        other.wait()


def test_tasks_without_a_cgroup_reader_fail_clearly(tree: Path, kernel: FakeKernel, cpuinfo: Path) -> None:
    [result] = adapter_for(tree, kernel, cpuinfo).apply([AssignTasks("/", ("x",), "r")])
    assert result.status == "failed" and "no cgroup reader" in (result.error or "")


def test_planner_and_adapters_converge_to_no_writes(
    tree: Path, kernel: FakeKernel, cpuinfo: Path, tmp_path: Path, live_pid: int
) -> None:
    """Plan from observed state, execute through the node executor (tasks read by the cgroup
    adapter from a v2 tree), observe again: the second plan has nothing but the task check, and it
    writes nothing."""
    cg = tmp_path / "cgroup"
    (cg / "kubepods/besteffort/pod1/c1").mkdir(parents=True)
    (cg / "kubepods/besteffort/pod1/c1/cgroup.threads").write_text(f"{live_pid}\n")
    cgroups = CgroupAdapter(CgroupLayout.unified_tree(cg, controllers=["cpu"]))
    resctrl = adapter_for(tree, kernel, cpuinfo, tasks_of=cgroups.tasks)
    executor = NodeExecutor(cgroup=cgroups, resctrl=resctrl)
    caps = Capabilities.from_info(resctrl.info())
    schemata = schemata_for(
        caps, l3_cbm(caps.cbm_mask, 0, 30, min_cbm_bits=caps.min_cbm_bits), mba_value(60, caps)
    )
    prov = Provenance("be-resctrl", "h", 1, "test.yaml", "enforce")
    intent = ResctrlIntent("BE", schemata, ("ns/p1",), ("kubepods/besteffort/pod1",), prov)
    pol = policy("classes: []")

    first = plan((intent,), pol, Guards(), {}, resctrl.info().groups)
    kinds = [o.kind for o in first.operations]
    assert kinds == ["createResctrlGroup", "writeSchemata", "writeSchemata", "assignTasks"]
    assert [r.status for r in executor.apply(first.operations)] == ["applied"] * 4
    kernel.writes.clear()
    second = plan((intent,), pol, Guards(), {}, resctrl.info().groups)
    assert [o.kind for o in second.operations] == ["assignTasks"]  # tasks churn: checked every tick
    assert [r.status for r in executor.apply(second.operations)] == ["unchanged"]
    assert kernel.writes == []
    assert changed_lines((tree / "BE" / "schemata").read_text(), schemata) == []
    assert str(live_pid) in (tree / "BE" / "tasks").read_text().split()


# ---------------------------------------------------------------- not mounted


def test_not_mounted_degrades_once_and_recovers(
    tmp_path: Path, cpuinfo: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "resctrl"
    adapter = ResctrlAdapter(root, cpuinfo=cpuinfo)
    caplog.set_level(logging.INFO, logger="qosd.adapters.resctrl")
    for _ in range(3):
        info = adapter.info()
        assert not info.mounted
        [result] = adapter.apply([WriteSchemata("BE", "L3:0=3", "r")])
        assert result.status == "skipped"
        assert result.error == adapter.degraded
    assert f"resctrl is not mounted at {root}" in (adapter.degraded or "")
    assert [r.levelname for r in caplog.records] == ["WARNING"]  # once, not per call
    root.mkdir()
    make_tree(root)
    assert adapter.info().mounted
    assert adapter.degraded is None
    assert [r.levelname for r in caplog.records] == ["WARNING", "INFO"]


def test_symlinked_schemata_file_is_refused(
    tree: Path, kernel: FakeKernel, cpuinfo: Path, tmp_path: Path
) -> None:
    adapter = adapter_for(tree, kernel, cpuinfo)
    adapter.apply([CreateResctrlGroup("BE", "r")])
    target = tmp_path / "not-schemata"
    target.write_text("L3:0=fff;1=fff\n")
    (tree / "BE" / "schemata").unlink()
    (tree / "BE" / "schemata").symlink_to(target)
    [result] = adapter.apply([WriteSchemata("BE", "L3:0=00f;1=00f", "r")])
    assert result.status == "failed" and "symlink" in (result.error or "")
    assert target.read_text() == "L3:0=fff;1=fff\n"
