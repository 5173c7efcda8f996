"""Usage errors exit 2 with one readable line, never a traceback (issue 14, defect 5).

Each case runs the real ``qosd`` command in a subprocess, as an operator would, and checks: exit code
2, exactly one line on stderr, that line names the flag or file and says what is wrong, and nothing
was started or replaced. The last-resort handler (a bug: one line, exit 70; --debug or QOSD_DEBUG
for the traceback) is tested in-process.
"""

from __future__ import annotations

import os
import socket
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine import cli
from engine.config import command as config_command
from tests.qosdcli import qosd
from tests.realcgroup import Subtree, real_subtree

ROOT = Path(__file__).resolve().parent.parent


def assert_one_line_usage_error(proc: subprocess.CompletedProcess[str], *needles: str, code: int = 2) -> None:
    assert proc.returncode == code, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert "Traceback" not in proc.stderr
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.fixture(scope="module")
def busy_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


# (case id, argv after `qosd run --once --dry-run --listen ''`, what the one line must say)
RUN_FLAGS: list[tuple[str, list[str], list[str]]] = [
    ("interval-without-unit", ["--interval", "1"], ["--interval", "'1' has no unit", "write 1s"]),
    ("interval-zero", ["--interval", "0s"], ["--interval", "out of range"]),
    ("interval-infinite", ["--interval", "1e999s"], ["--interval"]),
    ("interval-too-long", ["--interval", "9999999999h"], ["--interval", "at most 8760h"]),
    ("root-dotdot", ["--root", "../*"], ["--root", "'..'"]),
    ("root-outside", ["--root", "/srv/*"], ["--root", "'/srv/*'", "outside the cgroup root"]),
    ("root-empty", ["--root", ""], ["--root", "names no cgroup"]),
    ("listen-no-port", ["--listen", "abc"], ["--listen", "host:port"]),
    ("listen-port-range", ["--listen", ":99999"], ["--listen", "0 to 65535"]),
    ("listen-unknown-host", ["--listen", "no-such-host.invalid:80"], ["--listen no-such-host.invalid:80"]),
    ("eviction-burst-negative", ["--eviction-burst", "-1"], ["--eviction-burst", "out of range"]),
    ("eviction-burst-word", ["--eviction-burst", "three"], ["--eviction-burst", "not a whole number"]),
    ("sync-timeout", ["--sync-timeout", "soon"], ["--sync-timeout", "not a duration"]),
    ("reload-debounce", ["--reload-debounce", "-5ms"], ["--reload-debounce"]),
    (
        "cgroup-root-missing",
        ["--cgroup-root", "/definitely/not/here"],
        ["--cgroup-root /definitely/not/here"],
    ),
    ("label", ["--label", "novalue"], ["--label", "key=value"]),
    ("backend", ["--backend", "java"], ["--backend", "invalid choice"]),
]


@pytest.mark.parametrize(("name", "flags", "needles"), RUN_FLAGS, ids=[c[0] for c in RUN_FLAGS])
def test_qosd_run_flag_errors_are_one_line_and_exit_2(
    name: str, flags: list[str], needles: list[str]
) -> None:
    proc = qosd("run", "--once", "--dry-run", "--standalone", "--listen", "", *flags)
    assert_one_line_usage_error(proc, *needles)


def test_a_listen_port_in_use_is_a_usage_error(busy_port: int, tmp_path: Path) -> None:
    proc = qosd("run", "--once", "--dry-run", "--standalone", "--listen", f"127.0.0.1:{busy_port}")
    assert_one_line_usage_error(proc, f"--listen 127.0.0.1:{busy_port}", "Address already in use")


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_state_file_that_is_not_a_regular_file_is_refused_not_replaced(tmp_path: Path, kind: str) -> None:
    """qosd replaces its state file atomically; before this check ``--state-file /dev/null`` replaced
    the machine's /dev/null with a regular file. A FIFO stands in for the device here."""
    target = tmp_path / "special"
    if kind == "fifo":
        os.mkfifo(target)
    else:
        target.mkdir()
    proc = qosd("run", "--once", "--dry-run", "--standalone", "--listen", "", "--state-file", str(target))
    assert_one_line_usage_error(proc, f"--state-file {target}", "not a regular file")
    mode = target.lstat().st_mode
    assert stat.S_ISFIFO(mode) if kind == "fifo" else stat.S_ISDIR(mode)


@pytest.mark.parametrize(
    ("flag", "value", "needle"),
    [
        ("--audit-log", "{tmp}", "is a directory"),
        ("--audit-log", "{tmp}/no/such/dir/audit.jsonl", "does not exist"),
        ("--state-file", "/proc/1/no/state.json", "cannot create"),
        ("--workloads", "{tmp}/missing.yaml", "no such file"),
    ],
)
def test_files_named_by_flags_are_checked_at_start(
    tmp_path: Path, flag: str, value: str, needle: str
) -> None:
    path = value.format(tmp=tmp_path)
    proc = qosd("run", "--once", "--dry-run", "--standalone", "--listen", "", flag, path)
    assert_one_line_usage_error(proc, flag, needle)


def test_an_unusable_kubeconfig_is_a_usage_error(tmp_path: Path) -> None:
    """A file that is not a mapping made the client's loader raise TypeError."""
    bad = tmp_path / "kubeconfig"
    bad.write_text("just a string\n")
    env = {**os.environ, "NODE_NAME": "n1"}
    proc = qosd("run", "--once", "--kubeconfig", str(bad), "--listen", "", env=env)
    assert_one_line_usage_error(proc, f"--kubeconfig {bad}")


@pytest.fixture
def tree() -> Iterator[Subtree]:
    with real_subtree(children=("web",), sleeper="web") as t:
        yield t


def test_a_workloads_entry_outside_the_cgroup_root_is_located(tree: Subtree, tmp_path: Path) -> None:
    """The file's entry is invalid input: exit 1 (as `qosd validate`), its line and column, one line
    plus the count, no traceback."""
    workloads = tmp_path / "workloads.yaml"
    workloads.write_text(
        "apiVersion: qosd.io/v1alpha1\nkind: StandaloneWorkloads\nworkloads:\n"
        f'  - path: {tree.name}/*\n  - path: "/srv/x/*"\n'
    )
    proc = qosd("run", "--once", "--dry-run", "--standalone", "--listen", "", "--workloads", str(workloads))
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    first = proc.stderr.splitlines()[0]
    assert first.startswith(f"{workloads}:5:11: error: cgroup pattern '/srv/x/*' is outside the cgroup root")
    assert "$.workloads[1].path" in first


@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        (["trace", "generate", "--hours", "-1"], ["--hours", "out of range"]),
        (["trace", "generate", "--hours", "1e999"], ["--hours", "out of range"]),
        (["trace", "generate", "--numa", "0"], ["--numa", "out of range"]),
        (["trace", "generate", "--cpus", "4", "--numa", "8"], ["--cpus 4 --numa 8"]),
        (["trace", "generate", "--cpus", "3", "--numa", "2"], ["--cpus 3 --numa 2"]),
        (
            ["trace", "generate", "--output-file", "/definitely/not/here/t.yaml"],
            ["/definitely/not/here/t.yaml"],
        ),
        (["eval", "--facts", "x.yaml", "--eviction-burst", "-2"], ["--eviction-burst"]),
        (["simulate", "--trace", "x.yaml", "--eviction-burst", "x"], ["--eviction-burst"]),
        (["validate", "--output", "xml"], ["--output", "invalid choice"]),
    ],
)
def test_other_commands_flag_errors_are_one_line_and_exit_2(argv: list[str], needles: list[str]) -> None:
    assert_one_line_usage_error(qosd(*argv), *needles)


@pytest.mark.parametrize(
    ("text", "where", "needle"),
    [
        ('{"state":{"heldSince":[1]}}', ":1:23:", "$.state.heldSince"),
        ('{"state":\n  {"heldSince": {"r": "x"}}}', ":2:23:", "$.state.heldSince.r"),
        ("[]", ":1:1:", "$: expected a mapping, got an empty list"),
        ('{"state": {"heldSince": {\n  "r": 1,,', ":2:10:", "not JSON"),
        ('{"state": "\xff"}', ":1:12:", "not JSON"),
        # no position from the decoder: found by the fuzz harness
        ("null", ":1:1:", "$: expected a mapping, got nothing (null)"),
        ('{"state": {"heldSince": {"r": NaN}}}', ":1:31:", "NaN"),
        ("[" * 2000 + "]" * 2000, ":1:65:", "nested too deeply"),
    ],
    ids=["schema", "schema-line-2", "root", "broken-json", "not-utf8", "null", "nan", "too-deep"],
)
def test_eval_with_a_state_that_is_not_one_is_a_located_error(
    tmp_path: Path, text: str, where: str, needle: str
) -> None:
    """Invalid input (exit 1), located at the broken JSON or the value the schema refuses."""
    state = tmp_path / "state.json"
    state.write_bytes(text.encode("latin-1"))
    facts = ROOT / "examples" / "snapshots" / "be-cpu-evict.yaml"
    proc = qosd("eval", "--facts", str(facts), "--state", str(state))
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    first = proc.stderr.splitlines()[0]
    assert first.startswith(f"{state}{where} error: not an engine state"), first
    assert needle in first, first


# ---------------------------------------------------------------- the last resort


def boom(_args: object) -> int:
    raise RuntimeError("an unexpected failure\nover two lines")


def test_an_unexpected_exception_is_one_line_and_exit_70(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(config_command, "cmd_crd", boom)
    monkeypatch.delenv(cli.DEBUG_ENV, raising=False)
    assert cli.main(["crd"]) == cli.EXIT_INTERNAL
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("qosd: internal error: RuntimeError: an unexpected failure over two lines")
    assert "--debug" in err and "QOSD_DEBUG=1" in err


@pytest.mark.parametrize("how", ["flag", "env"])
def test_debug_lets_the_traceback_through(monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    monkeypatch.setattr(config_command, "cmd_crd", boom)
    monkeypatch.delenv(cli.DEBUG_ENV, raising=False)
    if how == "env":
        monkeypatch.setenv(cli.DEBUG_ENV, "1")
    with pytest.raises(RuntimeError, match="unexpected failure"):
        cli.main(["--debug", "crd"] if how == "flag" else ["crd"])


# (case id, argv, what the one line must say): every command's flags bounded where argparse reads
# them; each of these used to run and exit 0 with meaningless output (a negative demo run, a zero
# probe rate, a trace of NaN memory or of zero samples, a profile label no node can carry), hang
# (explain reading /dev/zero) or say the wrong thing (a device "does not exist").
OTHER_FLAGS: list[tuple[str, list[str], list[str]]] = [
    ("demo-duration-negative", ["demo", "--duration", "-1"], ["--duration", "out of range"]),
    ("demo-duration-nan", ["demo", "--duration", "nan"], ["--duration", "out of range"]),
    ("demo-rate-zero", ["demo", "--rate", "0"], ["--rate", "out of range"]),
    ("demo-rate-infinite", ["demo", "--rate", "inf"], ["--rate", "out of range"]),
    ("demo-work-zero", ["demo", "--work", "0"], ["--work", "out of range"]),
    ("demo-work-word", ["demo", "--work", "lots"], ["--work", "not a whole number"]),
    ("generate-memory-infinite", ["trace", "generate", "--memory", "1e400"], ["--memory", "too large"]),
    (
        "generate-memory-overflow",
        ["trace", "generate", "--memory", "1e9999999"],
        ["--memory", "too large"],
    ),
    ("generate-memory-zero", ["trace", "generate", "--memory", "0"], ["--memory", "between 64Mi and 1Pi"]),
    ("generate-step-zero", ["trace", "generate", "--step", "0s"], ["--step", "out of range"]),
    ("generate-step-no-unit", ["trace", "generate", "--step", "60"], ["--step", "has no unit"]),
    ("generate-no-samples", ["trace", "generate", "--hours", "0.001", "--step", "1h"], ["0 samples"]),
    (
        "generate-too-many-samples",
        ["trace", "generate", "--hours", "8000", "--step", "1s"],
        ["28,800,000 samples"],
    ),
    ("simulate-risk-zero", ["simulate", "--trace", "t.yaml", "--risk-cpu", "0"], ["--risk-cpu", "above 0"]),
    ("simulate-risk-over", ["simulate", "--trace", "t.yaml", "--risk-memory", "101"], ["--risk-memory"]),
    ("simulate-burst", ["simulate", "--trace", "t.yaml", "--eviction-burst", "-1"], ["--eviction-burst"]),
    ("render-profile-path", ["render", "--profile", "../../etc"], ["--profile", "not a bundled profile"]),
    ("validate-profile-space", ["validate", "--profile", "a b"], ["--profile", "not a bundled profile"]),
    ("eval-profile-empty", ["eval", "--facts", "f.yaml", "--profile", ""], ["--profile"]),
    ("run-profile-long", ["run", "--profile", "x" * 64], ["--profile"]),
    ("explain-device", ["explain", "/dev/zero"], ["/dev/zero is not a regular file"]),
    ("eval-facts-device", ["eval", "--facts", "/dev/zero"], ["facts file /dev/zero is not a regular file"]),
    ("validate-node-directory", ["validate", "--node", "/"], ["node file / is a directory"]),
    ("crd-kind", ["crd", "--kind", "x"], ["--kind", "invalid choice"]),
    ("schema-kind", ["schema", "x"], ["invalid choice"]),
    ("test-run-regex", ["test", ".", "--run", "("], ["--run", "not a regular expression"]),
]


@pytest.mark.parametrize(("name", "argv", "needles"), OTHER_FLAGS, ids=[c[0] for c in OTHER_FLAGS])
def test_every_command_refuses_a_meaningless_flag_value_in_one_line(
    name: str, argv: list[str], needles: list[str]
) -> None:
    assert_one_line_usage_error(qosd(*argv), *needles)
