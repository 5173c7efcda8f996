"""``qosd validate`` refuses the setCgroup inputs of issue 14 that used to validate and then fail at
every write (defect 3: a value the file cannot take; defect 6: a target that is not a plain relative
path): exit 1, the file's line and column and the JSON path, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_unit_bounds import cli

POLICY = """\
apiVersion: qosd.io/v1alpha1
kind: QoSPolicy
metadata: {name: set-cgroup}
spec:
  rules:
    - name: r
      then:
        setCgroup:
          target: {path: TARGET}
          values: {VALUES}
"""


@pytest.mark.parametrize(
    ("target", "values", "where", "message"),
    [
        (
            '"kubepods/besteffort"',
            '{cpuset.cpus: "0-1é", memory.limit_in_bytes: 1073741824}',
            "10:33",
            "ASCII digits",
        ),
        ('"../etc"', "{cpu.shares: 2}", "9:26", "'..'"),
        ('"a\\0b"', "{cpu.shares: 2}", "9:26", "NUL byte"),
        ('"/sys/fs/cgroup/cpu/x"', "{cpu.shares: 2}", "9:26", "the path is absolute"),
    ],
)
def test_validate_refuses_what_would_fail_at_every_write(
    tmp_path: Path, target: str, values: str, where: str, message: str
) -> None:
    f = tmp_path / "rules.yaml"
    f.write_text(POLICY.replace("TARGET", target).replace("VALUES", values[1:-1]), encoding="utf-8")
    proc = cli("validate", "--no-builtin", str(f))
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output
    assert "Traceback" not in output
    line = next(ln for ln in output.splitlines() if message in ln)
    assert line.startswith(f"{f}:{where}: error: "), line
    assert "(at $.spec.rules[0].then.setCgroup." in line
