"""CPU pools and cpusets: per-pool demand, topology-aware allocation and the cpuset intents."""
