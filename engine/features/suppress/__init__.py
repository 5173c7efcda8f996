"""CPU suppression of batch workloads: Koordinator's CPUSuppress arithmetic, the cpuset picker and the
cfs quota.
"""
