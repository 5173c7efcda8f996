"""The generic rule machinery: conditions, the compiler (sustain/hysteresis/cooldown), the durable
backend and node signals.
"""
