"""Human output for effective policies: YAML, optionally annotated with where each value came from."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

import yaml

from engine.config.errors import Location, PolicyError
from engine.config.load import json_path
from engine.config.policy import Policy


def _scalar(value: Any) -> str:
    text: str = yaml.safe_dump(value, default_flow_style=True, width=1 << 16).strip()
    if text.endswith("\n..."):
        text = text[: -len("\n...")]
    return text.removesuffix("...").strip()


def _origin_text(loc: Location | None) -> str:
    if loc is None:
        return ""
    return f"  # {loc}" if loc.line else f"  # {loc.source} {loc.path}"


def yaml_with_origins(policy: Policy) -> str:
    """The effective policy as YAML where each line ends with the document position that set it."""
    doc = policy.to_document()
    lines: list[str] = []
    header = {k: v for k, v in doc.items() if k != "spec"}
    lines.append(yaml.safe_dump(header, sort_keys=False).rstrip())
    lines.append("spec:")

    def origin(path: tuple[str | int, ...]) -> str:
        return _origin_text(policy.origins.get(json_path(("spec", *path))))

    def emit(value: Any, path: tuple[str | int, ...], indent: int) -> None:
        pad = "  " * indent
        if isinstance(value, Mapping):
            for key, sub in value.items():
                sub_path = (*path, key)
                label = _scalar(key)
                if (isinstance(sub, Mapping) and sub) or (isinstance(sub, list) and sub and _complex(sub)):
                    lines.append(f"{pad}{label}:{origin(sub_path)}")
                    emit(sub, sub_path, indent + 1)
                else:
                    lines.append(f"{pad}{label}: {_scalar(sub)}{origin(sub_path)}")
        elif isinstance(value, list):
            for i, item in enumerate(value):
                sub_path = (*path, i)
                if isinstance(item, Mapping) and item:
                    first = True
                    for key, sub in item.items():
                        prefix = f"{pad}- " if first else f"{pad}  "
                        first = False
                        kp = (*sub_path, key)
                        if (isinstance(sub, Mapping) and sub) or (
                            isinstance(sub, list) and sub and _complex(sub)
                        ):
                            lines.append(f"{prefix}{_scalar(key)}:{origin(kp)}")
                            emit(sub, kp, indent + 2)
                        else:
                            lines.append(f"{prefix}{_scalar(key)}: {_scalar(sub)}{origin(kp)}")
                else:
                    lines.append(f"{pad}- {_scalar(item)}{origin(sub_path)}")

    emit(doc["spec"], (), 1)
    return "\n".join(lines) + "\n"


def _complex(items: list[Any]) -> bool:
    return any(isinstance(i, Mapping | list) for i in items)


def emit(data: Any, output: str) -> None:
    """A command's machine-readable result on stdout: ``json`` (indented) or ``yaml``."""
    if output == "yaml":
        sys.stdout.write(dump_yaml(data))
    else:
        sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def print_policy_error(exc: PolicyError, output: str) -> None:
    """Problems that stopped a command: with ``-o json|yaml`` a report on stdout (the result a
    pipeline reads), else diagnostics on stderr."""
    if output in ("json", "yaml"):
        emit(exc.to_dict(), output)
    else:
        print(exc.format(), file=sys.stderr)


def dump_yaml(data: Any) -> str:
    text: str = yaml.safe_dump(data, sort_keys=False, width=120)
    return text
