"""CLI conventions (issue 18) that users bring from kubectl, Kyverno and OPA.

``-o/--output text|json|yaml`` on every command that prints a result; rule files as positional
PATHs everywhere (``--rules`` an alias, ``-`` standard input); help text on every option; ``qosd
schema`` serves every shipped schema; ``--profile`` refuses a name that is not a bundled profile;
``qosd --version`` and ``--help`` import none of the heavy modules.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from engine import cli
from engine.resources import BUNDLED_PROFILES, PROFILE_LABEL, SCHEMAS, bundled_policy_files, schema_file
from tests.qosdcli import qosd, qosd_in_process

ROOT = Path(__file__).resolve().parent.parent


def subcommands(parser: argparse.ArgumentParser, prefix: str = "qosd") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield prefix, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from subcommands(sub, f"{prefix} {name}")


PARSERS = dict(subcommands(cli.build_parser()))


# ---------------------------------------------------------------- help on every option


def test_every_option_and_argument_has_help() -> None:
    missing = [
        f"{name}: {'/'.join(a.option_strings) or a.dest}"
        for name, p in PARSERS.items()
        for a in p._actions
        if not isinstance(a, argparse._HelpAction | argparse._VersionAction | argparse._SubParsersAction)
        and not (a.help or "").strip()
    ]
    assert not missing, "options without help text:\n" + "\n".join(missing)


# ---------------------------------------------------------------- -o/--output


# Every command that prints a result. `qosd run` and `qosd demo` print logs and a report of their
# run; their output options belong to the daemon work (issue 18, "Output that must be true").
RESULT_COMMANDS = [
    "qosd test",
    "qosd validate",
    "qosd render",
    "qosd schema",
    "qosd eval",
    "qosd explain",
    "qosd simulate",
    "qosd crd",
    "qosd trace validate",
]


@pytest.mark.parametrize("name", RESULT_COMMANDS)
def test_result_commands_take_dash_o_text_json_yaml(name: str) -> None:
    (action,) = [a for a in PARSERS[name]._actions if "--output" in a.option_strings]
    assert action.option_strings[:2] == ["-o", "--output"]
    assert {"text", "json", "yaml"} <= set(action.choices or ())
    assert action.default == "text"


def test_trace_generate_takes_dash_o_as_its_format() -> None:
    (action,) = [a for a in PARSERS["qosd trace generate"]._actions if "-o" in a.option_strings]
    assert "--output" in action.option_strings
    assert {"text", "json", "yaml"} <= set(action.choices or ())


OUTPUT_CASES = [
    (["validate", "-o", "json"], json.loads),
    (["validate", "-o", "yaml"], yaml.safe_load),
    (["render", "--node", "examples/snapshots/quiet-node.yaml", "-o", "yaml"], yaml.safe_load),
    (["schema", "trace", "-o", "yaml"], yaml.safe_load),
    (["schema", "facts", "--names", "-o", "json"], json.loads),
    (["crd", "-o", "yaml"], lambda text: list(yaml.safe_load_all(text))),
    (["eval", "--facts", "examples/snapshots/quiet-node.yaml", "-o", "yaml"], yaml.safe_load),
    (["trace", "validate", "examples/traces/tidal-day.yaml", "-o", "json"], json.loads),
]


@pytest.mark.parametrize(("argv", "load"), OUTPUT_CASES, ids=[" ".join(a) for a, _ in OUTPUT_CASES])
def test_each_output_format_is_what_it_says(argv: list[str], load: Callable[[str], Any]) -> None:
    proc = qosd(*argv)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert load(proc.stdout), proc.stdout[:200]


def test_simulate_and_explain_speak_yaml_too(tmp_path: Path) -> None:
    """In this interpreter (tests/qosdcli.qosd_in_process): what is compared is the commands' output."""
    trace = tmp_path / "short.yaml"
    generated = qosd_in_process("trace", "generate", "--hours", "1", "--step", "5m", "--output-file", str(trace))
    assert generated.returncode == 0, generated.stderr
    as_json = qosd_in_process("simulate", "--trace", str(trace), "-o", "json")
    as_yaml = qosd_in_process("simulate", "--trace", str(trace), "-o", "yaml")
    assert as_json.returncode == 0 and as_yaml.returncode == 0, as_yaml.stderr
    from_yaml, from_json = yaml.safe_load(as_yaml.stdout), json.loads(as_json.stdout)
    for run in (from_yaml, from_json):
        run["summary"].pop("runtimeSeconds")  # how long each run took
    assert from_yaml == from_json
    sim = tmp_path / "sim.json"
    sim.write_text(as_json.stdout)
    explained = qosd_in_process("explain", str(sim), "-o", "yaml")
    assert explained.returncode == 0, explained.stderr
    as_json = qosd_in_process("explain", str(sim), "-o", "json")
    assert yaml.safe_load(explained.stdout) == json.loads(as_json.stdout)


def test_render_json_has_origins_only_with_show_origin() -> None:
    node = "examples/snapshots/quiet-node.yaml"
    plain = json.loads(qosd_in_process("render", "--node", node, "-o", "json").stdout)
    shown = json.loads(qosd_in_process("render", "--node", node, "-o", "json", "--show-origin").stdout)
    assert "origins" not in plain
    assert shown["origins"]["$.spec.defaultClass"].startswith("builtin:rules/default.yaml:")


# ---------------------------------------------------------------- rule files as PATH


@pytest.mark.parametrize("name", ["qosd validate", "qosd render", "qosd eval", "qosd run"])
def test_rule_files_are_positional_paths_with_rules_as_alias(name: str) -> None:
    p = PARSERS[name]
    positional = [a for a in p._actions if not a.option_strings and a.dest == "rules"]
    alias = [a for a in p._actions if "--rules" in a.option_strings]
    assert len(positional) == 1 and positional[0].metavar == "PATH" and positional[0].nargs == "*"
    assert len(alias) == 1 and alias[0].dest == "rules"
    extra = {"qosd eval": ["--facts", "f"]}.get(name, [])
    args = p.parse_args([*extra, "a.yaml", "b.yaml", "--rules", "c.yaml"])
    assert [str(x) for x in args.rules] == ["a.yaml", "b.yaml", "c.yaml"]
    assert [str(x) for x in p.parse_args(extra).rules] == []


def test_simulate_takes_its_trace_positionally_and_rule_files_with_rules() -> None:
    """The one exception, in issue 18's own form `qosd simulate --baseline OLD... --rules NEW... TRACE`:
    simulate's positional argument is the trace (or --trace), and its rule files are --rules."""
    p = PARSERS["qosd simulate"]
    args = p.parse_args(["--rules", "a.yaml", "--rules", "b.yaml", "--baseline", "old.yaml", "--", "day.yaml"])
    assert [str(x) for x in args.rules] == ["a.yaml", "b.yaml"]
    assert [str(x) for x in args.baseline] == ["old.yaml"] and str(args.trace_file) == "day.yaml"
    assert str(p.parse_args(["--trace", "day.yaml"]).trace) == "day.yaml"


def test_positional_and_alias_collect_in_order() -> None:
    args = cli.build_parser().parse_args(["validate", "--rules", "x.yaml", "a.yaml", "b.yaml"])
    assert [str(x) for x in args.rules] == ["x.yaml", "a.yaml", "b.yaml"]
    args = cli.build_parser().parse_args(["eval", "--facts", "f.yaml", "--rules", "x.yaml"])
    assert [str(x) for x in args.rules] == ["x.yaml"]


def test_eval_takes_a_rule_file_as_a_path(tmp_path: Path) -> None:
    f = tmp_path / "off.yaml"
    f.write_text(
        "apiVersion: qosd.io/v1alpha1\nkind: QoSPolicy\nmetadata: {name: off}\n"
        "spec: {priority: 10, rules: [{name: publish-reclaimed-resources, enabled: false}]}\n"
    )
    facts = "examples/snapshots/quiet-node.yaml"
    with_path = qosd_in_process("eval", "--facts", facts, str(f), "-o", "json")
    with_alias = qosd_in_process("eval", "--facts", facts, "--rules", str(f), "-o", "json")
    without = qosd_in_process("eval", "--facts", facts, "-o", "json")
    assert with_path.returncode == 0, with_path.stderr
    a, b, c = (json.loads(p.stdout) for p in (with_path, with_alias, without))
    assert a["policy"] == b["policy"] != c["policy"]
    assert "publish-reclaimed-resources" in c["fired"] and "publish-reclaimed-resources" not in a["fired"]


# ---------------------------------------------------------------- qosd schema


def test_schema_serves_every_shipped_schema() -> None:
    shipped = sorted(p.name for p in (ROOT / "schemas").glob("*.schema.json"))
    assert sorted(schema_file(k).name for k in SCHEMAS) == shipped
    for kind in SCHEMAS:
        proc = qosd_in_process("schema", kind)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout) == json.loads(schema_file(kind).read_text()), kind


# ---------------------------------------------------------------- --profile


def test_bundled_profiles_are_the_profiles_the_bundled_policies_name() -> None:
    named = set()
    for f in bundled_policy_files():
        for doc in yaml.safe_load_all(f.read_text()):
            named.add(doc["metadata"]["labels"][PROFILE_LABEL])
    assert named == set(BUNDLED_PROFILES)


PROFILE_CASES = [
    (["validate", "--profile", "koordiantor"], "did you mean 'koordinator'?"),
    (["render", "--profile", "katalist"], "did you mean 'katalyst'?"),
    (["eval", "--facts", "f.yaml", "--profile", "kordinator"], "did you mean 'koordinator'?"),
    (["simulate", "--trace", "t.yaml", "--profile", "defualt"], "did you mean 'katalyst'?"),
    (["run", "--profile", "zzz"], "the bundled profiles are katalyst, koordinator"),
    (["trace", "generate", "--profile", "koordinatr"], "did you mean 'koordinator'?"),
]


@pytest.mark.parametrize(("argv", "hint"), PROFILE_CASES, ids=[a[0] + " " + a[-1] for a, _ in PROFILE_CASES])
def test_an_unknown_profile_is_refused_with_a_hint(argv: list[str], hint: str) -> None:
    proc = qosd(*argv)
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert "--profile" in line and "is not a bundled profile" in line and hint in line, line


def test_default_is_kept_as_an_alias_of_katalyst() -> None:
    for name in ("qosd validate", "qosd render", "qosd eval", "qosd simulate", "qosd run", "qosd trace generate"):
        action = next(a for a in PARSERS[name]._actions if "--profile" in a.option_strings)
        assert action.type("default") == "katalyst" and action.type("katalyst") == "katalyst"
    proc = qosd_in_process("validate", "--profile", "default")
    assert proc.returncode == 0, proc.stderr


# ---------------------------------------------------------------- --version without the heavy imports

HEAVY = (
    "jinja2",
    "jsonschema",
    "yaml",
    "kubernetes",
    "prometheus_client",
    "engine.config.pipeline",
    "engine.config.compile",
    "engine.daemon.wiring",
    "engine.evaluate.engine",
    "engine.simulate.command",
    "engine.explain.command",
    "engine.ruletest.command",
)


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["validate", "--help"]])
def test_version_and_help_import_no_heavy_module(argv: list[str]) -> None:
    code = (
        "import sys\n"
        "from engine.cli import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print('\\nLOADED', sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r} or m in {HEAVY!r}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    loaded = proc.stdout.rsplit("LOADED", 1)[1].strip()
    assert loaded == "[]", f"{argv} imported {loaded}"
    if argv == ["--version"]:
        assert proc.stdout.startswith("qosd ")
