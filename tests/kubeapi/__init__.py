"""An in-repo Kubernetes API-server emulator, reached by the unmodified official client over HTTP.

No kube-apiserver can run on the build machines (../shared/DESIGN.md, "Real parts"), so qosd's
Kubernetes integration is tested against this emulator. It serves the paths qosd uses with the
documented semantics; where it and the Kubernetes API documentation disagree, the documentation wins.

Interface (shared with the other test modules)::

    server = ApiServer(); url = server.start(); ...; server.stop()     # or: with ApiServer() as server
    ApiServer(tls=True)                        # HTTPS with a throwaway CA: what the real kubectl needs
                                               # to send its token (tests/kubectl.py runs kubectl on it)
    server.kubeconfig(path) -> Path            # bearer-token kubeconfig for http://127.0.0.1:<port>
    server.api_client() -> kubernetes.client.ApiClient
    server.put(obj) / get(api_version, kind, name, namespace) / list(api_version, kind, namespace)
    server.delete(api_version, kind, name, namespace)
    server.install_crd(crd)                    # serve a CRD's resources (validation + pruning)
    server.compact()                           # older resourceVersions now get 410 Expired
    server.drop_watches()                      # cut every watch stream abruptly
    server.fail_next(count, status, method=None, path=None, verb=None, retry_after=None)
    server.stall(method=None, path=None, verb=None, count=1) -> Stall   # hold requests (hit, release)
    server.revoke(token)                       # 401 for that token from now on
    server.restart(reset_resource_versions=False)  # cut every connection; optionally a new RV counter
    server.too_large_wait                      # seconds a watch from a future resourceVersion waits
    server.requests                            # LoggedRequest(method, path, query, status, body (text), json, verb)
    server.bookmark_interval                   # seconds between BOOKMARKs (allowWatchBookmarks=true)
    server.pod_termination_delay               # seconds a deleted/evicted bound pod stays terminating
    server.authorize(token, rules, user=...)   # a token limited to these ClusterRole rules (403 otherwise)

Served: core/v1 pods (+status, +eviction), nodes (+status), namespaces, events; events.k8s.io/v1
events (same storage as core/v1 events); policy/v1 poddisruptionbudgets; coordination.k8s.io/v1 leases;
apiextensions.k8s.io/v1 customresourcedefinitions and the custom resources of installed CRDs; the kinds
an install applies (kinds.py: ServiceAccount, ConfigMap, Secret, Service, DaemonSet, Deployment, RBAC,
NetworkPolicy, PriorityClass, admission configuration). Also what kubectl needs: legacy and aggregated
discovery (discovery.py), OpenAPI v3 (openapi.py), Table output with printer columns (table.py),
server-side apply with field managers (apply.py) and ``fieldValidation`` (Ignore, Warn: the default,
Strict).

Differences from a real cluster worth knowing: there are no controllers (a pod deleted with a grace
period is removed by a timer after ``pod_termination_delay``, PDB budgets are computed at eviction
time, a deleted namespace takes its objects with it at once), ``put``/``delete`` bypass admission and
validation (test set-up), CEL validation rules are not implemented, managed fields are recorded only
for objects server-side apply has touched (apply.py), and creating an object over HTTP in a namespace
that does not exist is a 404 (NamespaceLifecycle), while ``put`` creates the namespace.
"""

from tests.kubeapi.errors import ApiError
from tests.kubeapi.server import ApiServer, LoggedRequest, RequestLog, Stall

__all__ = ["ApiError", "ApiServer", "LoggedRequest", "RequestLog", "Stall"]
