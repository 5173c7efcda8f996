"""Koordinator's CFS quota burst: a container's CFS quota grows while it is throttled and the shared
CPUs have room, within a token bucket over its CPU usage (koordlet qosmanager CPUBurst)."""
