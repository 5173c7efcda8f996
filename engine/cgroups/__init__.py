"""The one home of cgroup knowledge, shared by sources/ (reading) and adapters/ (writing).

- ``mounts``: which hierarchy (v1, hybrid, v2) holds each controller under a root, from the mount
  table: the one v1/v2 detector, and where a cgroup's files are on disk.
- ``files``: the v1 <-> v2 file-name registry, the value formats each file accepts, and the
  translation of values between the two versions (compared by meaning).
- ``paths``: where the kubelet and the runtimes put pod and container cgroups; path validation.
- ``weight``: the kernel's cpu.shares and cpu.weight ranges and the shares <-> weight formulas.

Nothing here holds policy: where a policy choice matters (the weight formula), the caller passes it.
"""
