"""What ships for monitoring agrees with what the daemon really exposes.

A `qosd run` in Kubernetes mode, wired by ``build_kube`` (the API is the in-repo emulator over real
HTTP with the shipped RBAC; cgroups a temporary tree with the cgroup v2 file names, as in
test_kube_daemon.py; node facts, PSI and NUMA memory are this machine's real /proc and /sys), serves
``/metrics`` on a loopback port. Its ticks are run here one by one so each one's result is known.
Then:

- each gauge of the last tick equals what that tick computed (table-driven), and the reclaimed
  resource equals what the emulated Node holds;
- every PromQL expression of the Grafana dashboard and of the PrometheusRule is parsed with
  promql-parser (the Rust parser GreptimeDB uses, Prometheus 2.45 grammar) and every metric name
  it selects is one the scraped exposition declares;
- no ``_created`` series is exposed;
- ``kubectl kustomize`` renders the monitoring component on the base, and the rendered Service,
  ServiceMonitor and NetworkPolicy select the DaemonSet's pods and its metrics port.
"""

from __future__ import annotations

import json
import platform
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from engine import __version__
from engine.adapters.cgroup import CgroupAdapter
from engine.cgroups.mounts import CgroupLayout
from engine.cli import build_parser
from engine.config.crd import qosd_crds
from engine.daemon.loop import Daemon
from engine.daemon.wiring import build_kube
from engine.model.facts import Snapshot
from engine.tick import TickResult
from tests.kubeapi import ApiServer
from tests.realparts import kubectl_missing
from tests.test_kube_daemon import NODE, daemon_args, pod, populate, rbac_rules

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "examples" / "deploy"
COMPONENT = DEPLOY / "components" / "monitoring"
DASHBOARD = ROOT / "examples" / "dashboards" / "qosd.json"
BATCH_CPU = "example.com/batch-cpu"

POLICY = f"""\
apiVersion: qosd.io/v1alpha1
kind: QoSPolicy
metadata: {{name: monitored}}
spec:
  classes:
    - name: be
      match: [{{labels: {{qos: be}}}}]
      cpu: {{policy: reclaimed}}
    - name: ls
      match: [{{labels: {{qos: ls}}}}]
      cpu: {{policy: shared}}
    - name: unused
      match: [{{labels: {{qos: none-has-this}}}}]
      cpu: {{policy: shared}}
  reclaim:
    enabled: true
    degradeAfter: 1h
    cpu: {{policy: request, reclaimThresholdPercent: 100, publishAs: {BATCH_CPU}}}
  rules:
    - name: publish
      then: {{publish: {{resource: cpu}}}}
    - name: numa-watch
      mode: audit
      when: {{numa.memory.below_watermark_count: {{gte: 0}}}}
      then: {{notify: {{reason: NumaWatch, message: counting}}}}
    - name: never
      when: {{node.cpus: {{gte: 100000}}}}
      then: {{notify: {{reason: Never, message: never}}}}
"""


class RecordingSource:
    """The daemon's node source, keeping the last snapshot it handed over (what the tick saw)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.last: Snapshot | None = None

    def collect(self) -> Snapshot:
        self.last = self.inner.collect()
        return self.last

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@dataclass
class Scraped:
    daemon: Daemon
    result: TickResult  # the last tick's
    snap: Snapshot  # what the last tick saw
    text: str  # /metrics after it
    node_allocatable: Mapping[str, str]  # the emulated Node's, after the ticks

    def value(self, name: str, **labels: str) -> float | None:
        return self.daemon.metrics.registry.get_sample_value(name, labels)

    def samples(self, name: str) -> dict[tuple[tuple[str, str], ...], float]:
        """Every sample of ``name`` in the scraped text, by its sorted labels."""
        out = {}
        for family in text_string_to_metric_families(self.text):
            for s in family.samples:
                if s.name == name:
                    out[tuple(sorted(s.labels.items()))] = s.value
        return out


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        body: bytes = r.read()
        return body.decode()


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scraped]:
    tmp = tmp_path_factory.mktemp("monitoring")
    api = ApiServer()
    api.start()
    try:
        for crd in qosd_crds():
            api.install_crd(crd)
        populate(api)  # node-a with the ls pod "web"
        api.put(pod("batch", "be", cpu="250m"))
        token = api.authorize("qosd-sa-token", rbac_rules())
        kubeconfig = api.kubeconfig(tmp / "kubeconfig", token)
        args = build_parser().parse_args(daemon_args(tmp, kubeconfig, NODE, POLICY, ["--listen", ""]))
        daemon = build_kube(args, adapter=CgroupAdapter(CgroupLayout.unified_tree(tmp / "cgroup")))
        source = RecordingSource(daemon.source)
        daemon.source = source
        host, port = daemon.serve("127.0.0.1:0")
        try:
            daemon.start(sync_timeout=10)
            # Tick until the reclaimed resource is on the Node: on a loaded machine the node watch
            # may deliver the Node (its allocatable, the request policy's input) after a few ticks.
            deadline = time.monotonic() + 20
            ticks = 0
            while True:
                last = daemon.tick()
                ticks += 1
                assert last is not None, daemon.last_error
                node = api.get("v1", "Node", NODE) or {}
                allocatable = (node.get("status") or {}).get("allocatable") or {}
                if (ticks >= 3 and BATCH_CPU in allocatable) or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert source.last is not None
            text = get(f"http://{host}:{port}/metrics")
            yield Scraped(daemon, last, source.last, text, allocatable)
        finally:
            daemon.shutdown()
            assert daemon._server is not None
            daemon._server.shutdown()
            daemon._server.server_close()
    finally:
        api.stop()


# ---------------------------------------------------------------- the gauges equal the tick


def expected_gauges(s: Scraped) -> list[tuple[str, dict[str, str], float]]:
    """(metric, labels, value) of every new gauge, computed from what the last tick computed."""
    engine = s.daemon.reloader.engine
    assert engine is not None
    evaluation, state, node = s.result.evaluation, s.daemon.state, s.snap.metrics.node
    members = engine.members(s.snap.workloads)
    rows: list[tuple[str, dict[str, str], float]] = []
    for c in engine.policy.classes:
        rows.append(("qosd_workloads", {"class": c.name}, float(len(members.get(c.name, ())))))
    for r in engine.policy.rules:
        rows.append(("qosd_rule_fired", {"rule": r.name, "mode": r.mode}, float(r.name in evaluation.fired)))
        held = sum(1 for k in state.latched if k.split("|", 1)[0] == r.name)
        rows.append(("qosd_rule_active_items", {"rule": r.name}, float(held)))
        if r.name in state.last_fired:
            rows.append(
                ("qosd_rule_last_fired_timestamp_seconds", {"rule": r.name}, state.last_fired[r.name])
            )
    for key, value in node.items():
        parts = key.split(".")
        if len(parts) == 4 and parts[0] == "psi" and parts[3].startswith("avg") and "@" not in key:
            labels = {"resource": parts[1], "kind": parts[2], "window": parts[3][3:] + "s"}
            rows.append(("qosd_node_psi_ratio", labels, float(value) / 100))
    for numa, counter in state.pressure.numa.items():
        rows.append(("qosd_numa_watermark_count", {"numa": numa}, float(counter.count)))
        level = {"noop": 0.0, "reclaimed_eviction": 1.0, "eviction": 2.0}[counter.action]
        rows.append(("qosd_numa_watermark_pressure", {"numa": numa}, level))
    for spec, scale in ((engine.policy.reclaim.cpu, 1000), (engine.policy.reclaim.memory, 1)):
        history = state.reports.get(spec.publish_as) if spec is not None and spec.publish_as else None
        if spec is not None and spec.publish_as and history is not None and history.reported is not None:
            computed = float(round(history.reported * scale))
            rows.append(("qosd_reclaimed_resource_computed", {"resource": spec.publish_as}, computed))
    age = float(node["reclaim.metrics_age_seconds"])
    rows.append(("qosd_reclaim_metrics_age_seconds", {}, age))
    rows.append(("qosd_reclaim_degraded", {}, float(age > 3600)))
    rows.append(("qosd_policy_generation", {}, float(s.daemon.reloader.generation)))
    return rows


def test_every_new_gauge_equals_what_the_last_tick_computed(scraped: Scraped) -> None:
    rows = expected_gauges(scraped)
    for name, labels, value in rows:
        got = scraped.samples(name).get(tuple(sorted(labels.items())))
        assert got == pytest.approx(value), (name, labels, got, value)
    # and nothing more: every scraped sample of these gauges is one the tick accounts for
    for name in {n for n, _, _ in rows}:
        expected = {tuple(sorted(labels.items())) for n, labels, _ in rows if n == name}
        assert set(scraped.samples(name)) == expected, name


def test_the_gauges_cover_what_this_policy_and_machine_produce(scraped: Scraped) -> None:
    """The table above is not vacuous: this run has classes with and without pods, a rule that acted in
    the last tick, one that acted earlier and still holds, one that never did, PSI from /proc/pressure,
    and a NUMA counter per NUMA node of this machine."""
    rows = expected_gauges(scraped)
    workloads = {labels["class"]: v for n, labels, v in rows if n == "qosd_workloads"}
    assert workloads == {"be": 1.0, "ls": 1.0, "unused": 0.0}
    fired = {labels["rule"]: v for n, labels, v in rows if n == "qosd_rule_fired"}
    assert fired == {"publish": 1.0, "numa-watch": 0.0, "never": 0.0}
    # numa-watch notified once, at its first tick, and still holds on each NUMA node
    active = {labels["rule"]: v for n, labels, v in rows if n == "qosd_rule_active_items"}
    assert active["numa-watch"] >= 1.0 and active["never"] == 0.0
    stamped = {labels["rule"] for n, labels, _ in rows if n == "qosd_rule_last_fired_timestamp_seconds"}
    assert stamped == {"publish", "numa-watch"}
    if Path("/proc/pressure/memory").exists():
        assert any(n == "qosd_node_psi_ratio" for n, _, _ in rows)
    numa_nodes = [p for p in Path("/sys/devices/system/node").glob("node[0-9]*")]
    counted = {labels["numa"] for n, labels, _ in rows if n == "qosd_numa_watermark_count"}
    assert len(counted) == len(numa_nodes) > 0


def test_the_published_reclaimed_resource_is_what_the_node_holds(scraped: Scraped) -> None:
    """request policy, threshold 100%: allocatable 2 cores - the ls pod's 500m request = 1500m,
    the quantity qosd wrote on the emulated Node and the gauge reports."""
    assert scraped.node_allocatable.get(BATCH_CPU) == "1500"
    assert scraped.samples("qosd_reclaimed_resource_published") == {(("resource", BATCH_CPU),): 1500.0}
    assert scraped.samples("qosd_reclaimed_resource_computed") == {(("resource", BATCH_CPU),): 1500.0}


def test_build_info_names_the_version_python_backend_and_mode(scraped: Scraped) -> None:
    labels = {
        "version": __version__,
        "python": platform.python_version(),
        "backend": "python",
        "mode": "kubernetes",
    }
    assert scraped.samples("qosd_build_info") == {tuple(sorted(labels.items())): 1.0}


def test_no_created_series_are_exposed(scraped: Scraped) -> None:
    assert "_created" not in scraped.text
    assert "qosd_ticks_total" in scraped.text  # counters are there, only their _created twin is off


def test_no_per_tick_series_is_labelled_by_pod(scraped: Scraped) -> None:
    """Label cardinality is bounded by the policy and the hardware: no label value is a pod's name."""
    pods = {w.name for w in scraped.snap.workloads} | {w.key for w in scraped.snap.workloads}
    assert pods
    for family in text_string_to_metric_families(scraped.text):
        for s in family.samples:
            assert not set(s.labels.values()) & pods, (s.name, s.labels)


# ---------------------------------------------------------------- PromQL names against /metrics


def exposed_names(text: str) -> set[str]:
    """Every series name a query can select from this exposition: the samples, and for each declared
    family (one without samples yet, e.g. a counter no eviction has incremented, included) the
    names its type gives it."""
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            suffixes = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("", "_sum", "_count")}
            names.update(name + s for s in suffixes.get(kind, ("",)))
        elif line and not line.startswith("#"):
            names.add(line.split("{", 1)[0].split(" ", 1)[0])
    return names


GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h", "$node": "node-a"}


def promql_metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects, from promql-parser's syntax tree. Grafana's
    variables are replaced by values of their kind first (a range, a label value)."""
    for var, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(var, value)
    tree = promql_parser.parse(expr)
    names: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.MatrixSelector):
            node = node.vector_selector
        if isinstance(node, promql_parser.VectorSelector):
            assert node.name, f"{expr!r}: a selector without a metric name matches every series"
            names.add(node.name)

    promql_parser.walk(tree, visit)
    return names


def dashboard_queries() -> list[tuple[str, str]]:
    """(where, PromQL) of every query of the dashboard: panel targets (rows' nested panels too),
    annotations, and the metric of each label_values() variable."""
    dash = json.loads(DASHBOARD.read_text())
    out: list[tuple[str, str]] = []
    stack = list(dash["panels"])
    while stack:
        panel = stack.pop()
        stack.extend(panel.get("panels", []))
        for t in panel.get("targets", []):
            out.append((f"panel {panel['title']!r} {t['refId']}", t["expr"]))
    for a in dash.get("annotations", {}).get("list", []):
        if "expr" in a:
            out.append((f"annotation {a['name']!r}", a["expr"]))
    for v in dash.get("templating", {}).get("list", []):
        query = v.get("query")
        text = query.get("query") if isinstance(query, dict) else None
        if text and text.startswith("label_values("):
            metric = text[len("label_values(") :].split(",", 1)[0].strip()
            out.append((f"variable {v['name']!r}", metric))
    return out


def alert_queries() -> list[tuple[str, str]]:
    (rule,) = yaml.safe_load_all((COMPONENT / "prometheusrule.yaml").read_text())
    return [(f"alert {r['alert']}", r["expr"]) for g in rule["spec"]["groups"] for r in g["rules"]]


@pytest.mark.parametrize(("where", "expr"), dashboard_queries() + alert_queries())
def test_each_query_selects_only_metrics_the_daemon_exposes(scraped: Scraped, where: str, expr: str) -> None:
    names = promql_metric_names(expr)
    assert names, f"{where}: {expr!r} selects no metric"
    missing = names - exposed_names(scraped.text)
    assert not missing, f"{where}: {expr!r} uses {sorted(missing)}, which /metrics does not expose"


def test_the_query_check_catches_a_name_the_daemon_does_not_expose(scraped: Scraped) -> None:
    """The check above can fail: a misspelt name, a counter without _total, a histogram without
    _bucket are each reported."""
    exposed = exposed_names(scraped.text)
    for expr in (
        "rate(qosd_tick_total[5m])",
        "rate(qosd_evictions[5m])",
        "histogram_quantile(0.9, rate(qosd_tick_duration_seconds[5m]))",
    ):
        assert promql_metric_names(expr) - exposed, expr
    assert "qosd_evictions_total" in exposed  # declared before any eviction incremented it


def test_every_alert_has_a_duration_a_severity_and_a_runbook() -> None:
    (rule,) = yaml.safe_load_all((COMPONENT / "prometheusrule.yaml").read_text())
    alerts = [r for g in rule["spec"]["groups"] for r in g["rules"]]
    assert {a["alert"] for a in alerts} >= {
        "QosdPolicyReloadFailed",
        "QosdTickErrors",
        "QosdEvictionBurst",
        "QosdReclaimDegraded",
    }
    for a in alerts:
        assert a["for"], a["alert"]
        assert a["labels"]["severity"] in ("warning", "critical"), a["alert"]
        assert {"summary", "description", "runbook"} <= set(a["annotations"]), a["alert"]


# ---------------------------------------------------------------- the listen address


def test_the_default_listen_address_is_this_host_only() -> None:
    args = build_parser().parse_args(["run"])
    assert args.listen == "127.0.0.1:9464"


def ipv6_loopback() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not ipv6_loopback(), reason="this machine has no IPv6 loopback to bind")
def test_an_ipv6_listen_address_is_served(tmp_path: Path) -> None:
    """A pod's IP in an IPv6 cluster: --listen=[$(POD_IP)]:9464."""
    from engine.daemon.endpoints import serve

    server = serve("[::1]:0", _registry(), lambda: (True, "ok"), lambda: (True, "ok"))
    try:
        port = server.server_address[1]
        assert get(f"http://[::1]:{port}/healthz") == "ok: ok\n"
    finally:
        server.shutdown()
        server.server_close()


def _registry() -> Any:
    from engine.daemon.metrics import Metrics

    return Metrics().registry


# ---------------------------------------------------------------- the kustomize component


def kustomize(tmp_path: Path) -> list[dict[str, Any]]:
    """`kubectl kustomize` of an overlay: the base with the monitoring component."""
    missing = kubectl_missing()
    if missing is not None:
        pytest.skip(f"the real kubectl cannot run here: {missing}")
    kubectl = shutil.which("kubectl")
    assert kubectl is not None
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    rel = Path("../" * len(overlay.relative_to("/").parts))
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [str(rel / DEPLOY.relative_to("/"))],
                "components": [str(rel / COMPONENT.relative_to("/"))],
            }
        )
    )
    proc = subprocess.run([kubectl, "kustomize", str(overlay)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def _one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind]
    return found


def _selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


@pytest.mark.kubectl  # tests/realparts.py: a skip fails CI where kubectl exists
def test_the_monitoring_component_renders_on_the_base_and_selects_the_daemonset(tmp_path: Path) -> None:
    docs = kustomize(tmp_path)
    ds = _one(docs, "DaemonSet")
    pod_labels = ds["spec"]["template"]["metadata"]["labels"]
    (container,) = [c for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == "qosd"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    listen = next(a.split("=", 1)[1] for a in container["args"] if a.startswith("--listen="))
    assert ports["metrics"] == int(listen.rpartition(":")[2])

    service = _one(docs, "Service")
    monitor = _one(docs, "ServiceMonitor")
    policy = _one(docs, "NetworkPolicy")
    rule = _one(docs, "PrometheusRule")
    for d in (service, monitor, policy, rule):
        assert d["metadata"]["namespace"] == ds["metadata"]["namespace"], d["kind"]
    assert service["spec"]["clusterIP"] == "None"
    assert _selects(service["spec"]["selector"], pod_labels)
    (sport,) = service["spec"]["ports"]
    assert sport["targetPort"] == "metrics" and sport["port"] == ports["metrics"]
    assert _selects(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == [sport["name"]]
    assert _selects(policy["spec"]["podSelector"]["matchLabels"], pod_labels)
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (ingress,) = policy["spec"]["ingress"]
    assert [p["port"] for p in ingress["ports"]] == ["metrics"]
    (peer,) = ingress["from"]
    assert set(peer) == {"namespaceSelector", "podSelector"}  # both in one peer: the scraper's pods only


def test_the_component_is_a_kustomize_component_listing_its_files() -> None:
    (k,) = yaml.safe_load_all((COMPONENT / "kustomization.yaml").read_text())
    assert k["kind"] == "Component"
    assert sorted(k["resources"]) == sorted(
        p.name for p in COMPONENT.glob("*.yaml") if p.name != "kustomization.yaml"
    )


def test_the_dashboard_is_importable_grafana_json() -> None:
    """Unique panel ids and refIds, every query panel on the dashboard's data source variable, and
    panels laid on the 24-column grid without overlap."""
    dash = json.loads(DASHBOARD.read_text())
    panels = dash["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert (
        variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    )
    cells: set[tuple[int, int]] = set()
    for p in panels:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, p["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, f"panel {p['title']!r} overlaps another"
        cells |= mine
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${datasource}", p["title"]
            refs = [t["refId"] for t in p["targets"]]
            assert refs and len(set(refs)) == len(refs), p["title"]
