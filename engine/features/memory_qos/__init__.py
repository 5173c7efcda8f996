"""Memory QoS (memory.min/low/high from requests and limits) and the memory guard action."""
