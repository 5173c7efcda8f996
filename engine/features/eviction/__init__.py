"""Eviction: every trigger (NUMA watermark, system pressure, BE satisfaction, RSS overuse, load, memory
usage), victim ranking and release accounting.
"""
