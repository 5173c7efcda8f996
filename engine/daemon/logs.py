"""The daemon's logs: one JSON object per line on stderr, on the ``qosd`` logger."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from typing import Any

log = logging.getLogger("qosd")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, message and the record's structured fields."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": round(record.created, 3),
            "level": record.levelname.lower(),
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, Mapping):
            out.update(fields)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def configure_logging(level: str = "info", stream: Any = None) -> None:
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    log.handlers[:] = [handler]
    log.setLevel(level.upper())
    log.propagate = False
