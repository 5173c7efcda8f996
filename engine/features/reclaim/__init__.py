"""Reclaimed resources: batch resource reports, headroom estimates and the publish gate."""
