"""qosd: a node QoS engine for Kubernetes colocation, driven by declarative YAML rules."""

__version__ = "0.1.0"
