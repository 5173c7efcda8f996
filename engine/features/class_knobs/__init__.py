"""Per-class cgroup knobs: cpu shares/weight, idle, burst, OOM priority, and the setCgroup action."""
