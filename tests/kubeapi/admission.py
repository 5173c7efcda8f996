"""Validating admission in the emulator: webhooks called over HTTPS as kube-apiserver calls them, and
ValidatingAdmissionPolicies (CEL, tests/kubeapi/admission_policy.py).

Where it runs: after the object is decoded, defaulted, given its system fields and validated
(rest.BeforeCreate / BeforeUpdate), before it is stored, for CREATE and UPDATE (PUT and PATCH, the
no-op and dry-run ones included), which is where the API server's ``createValidation`` /
``updateValidation`` run. ``put``/``delete`` of test set-up bypass it, as they bypass validation.

What is emulated of k8s.io/apiserver/pkg/admission/plugin/webhook, from the API reference:

- The ValidatingWebhookConfiguration objects the emulator stores (admissionregistration.k8s.io/v1,
  served by tests/kubeapi/kinds.py with the strategies installed here), defaulted as the API server defaults them (failurePolicy Fail, matchPolicy Equivalent,
  timeoutSeconds 10, scope ``*``) and validated for the fields that make a configuration unusable.
- Matching: rules (apiGroups, apiVersions, operations, resources with ``/subresource`` and ``*``,
  scope), objectSelector on the object's (or old object's) labels, namespaceSelector on the
  namespace's labels for namespaced objects. matchConditions are refused as not emulated.
- The call: ``POST`` of an admission.k8s.io/v1 AdmissionReview (uid, kind, resource, subResource,
  requestKind, requestResource, name, namespace, operation, userInfo, object, oldObject, dryRun,
  options) to the Service (``https://<name>.<namespace>.svc:<port><path>?timeout=<n>s``) or URL,
  the server certificate verified against ``caBundle`` for that host name, within timeoutSeconds.
  A Service has no cluster network here: ``route(namespace, name, port, address)`` says where it
  listens (the TLS server name stays ``<name>.<namespace>.svc``).
- The answer: a response for another uid, a non-200 status, a body that is not an AdmissionReview,
  a refused connection or a timeout is a call failure, then ``failurePolicy`` decides (Fail: 500
  ``failed calling webhook``; Ignore: admitted). ``allowed: false`` is refused as webhookerrors.ToStatusErr
  does: the webhook's status with a code below 400 raised to 400 and the message prefixed
  ``admission webhook "<name>" denied the request: ``. Response warnings become ``Warning`` headers.
- A dry-run request to a webhook whose sideEffects is not None/NoneOnDryRun is refused (400).

Differences worth knowing: webhooks are called one after another (the API server calls them in
parallel; the first refusal is what the client sees either way), and admission runs while the
emulator's store lock is held (the API server runs it outside etcd and retries conflicts), so a
webhook that calls back into this emulator during a review would wait for its own timeout. qosd's
webhook answers from its watch cache and does not.
"""

from __future__ import annotations

import base64
import contextvars
import http.client
import json
import ssl
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from tests.kubeapi import errors as E
from tests.kubeapi.errors import ApiError, FieldError
from tests.kubeapi.kinds import BuiltinStrategy
from tests.kubeapi.rbac import Identity
from tests.kubeapi.registry import Registry, ResourceType, Strategy
from tests.kubeapi.store import copy_json
from tests.kubeapi.typed import WARNINGS

Json = dict[str, Any]
GROUP = "admissionregistration.k8s.io"
REVIEW_VERSION = "admission.k8s.io/v1"

# The user of the request being handled (server._handle sets it): the review's userInfo.
REQUESTER: contextvars.ContextVar[Identity | None] = contextvars.ContextVar("kubeapi_requester", default=None)


@dataclass(frozen=True)
class Attributes:
    """admission.Attributes of one write."""

    operation: str  # CREATE | UPDATE
    rt: ResourceType
    namespace: str
    name: str
    obj: Json
    old: Json | None
    dry_run: bool
    subresource: str = ""

    def user_info(self) -> Json:
        identity = REQUESTER.get()
        user = identity.user if identity is not None else "system:anonymous"
        groups = ["system:authenticated"]
        if identity is not None and identity.rules is None:
            groups.insert(0, "system:masters")
        return {"username": user, "uid": f"uid-{user}", "groups": groups}


# -------------------------------------------------------------------------------- the stored kinds


class WebhookConfigStrategy(BuiltinStrategy):
    """The API server's defaulting and the validation that makes a configuration unusable."""

    def __init__(self) -> None:
        super().__init__("V1ValidatingWebhookConfiguration", generation=True)

    def default(self, obj: Json) -> Json:
        for hook in obj.get("webhooks") or []:
            if not isinstance(hook, dict):
                continue
            hook.setdefault("failurePolicy", "Fail")
            hook.setdefault("matchPolicy", "Equivalent")
            hook.setdefault("timeoutSeconds", 10)
            hook.setdefault("namespaceSelector", {})
            hook.setdefault("objectSelector", {})
            for rule in hook.get("rules") or []:
                if isinstance(rule, dict):
                    rule.setdefault("scope", "*")
            service = (hook.get("clientConfig") or {}).get("service")
            if isinstance(service, dict):
                service.setdefault("port", 443)
        return super().default(obj)

    def validate(self, obj: Json, old: Json | None, api_version: str) -> list[FieldError]:
        errors: list[FieldError] = []
        seen: set[str] = set()
        for i, hook in enumerate(obj.get("webhooks") or []):
            path = f"webhooks[{i}]"
            name = str(hook.get("name") or "")
            if name.count(".") < 2:
                errors.append(
                    E.invalid(
                        f"{path}.name",
                        name,
                        "should be a domain with at least three segments separated by dots",
                    )
                )
            if name in seen:
                errors.append(FieldError("Duplicate", f"{path}.name", "", name))
            seen.add(name)
            if hook.get("sideEffects") not in ("None", "NoneOnDryRun"):
                errors.append(
                    FieldError(
                        "NotSupported",
                        f"{path}.sideEffects",
                        'supported values: "None", "NoneOnDryRun"',
                        hook.get("sideEffects"),
                    )
                )
            versions = hook.get("admissionReviewVersions") or []
            if not versions:
                errors.append(
                    E.required(f"{path}.admissionReviewVersions", "must specify one of v1, v1beta1")
                )
            timeout = hook.get("timeoutSeconds")
            if not isinstance(timeout, int) or not 1 <= timeout <= 30:
                errors.append(
                    E.invalid(
                        f"{path}.timeoutSeconds",
                        timeout,
                        "the timeout value must be between 1 and 30 seconds",
                    )
                )
            config = hook.get("clientConfig") or {}
            if ("url" in config) == ("service" in config):
                errors.append(E.required(f"{path}.clientConfig", "exactly one of url or service is required"))
            if hook.get("failurePolicy") not in ("Fail", "Ignore"):
                errors.append(
                    FieldError(
                        "NotSupported",
                        f"{path}.failurePolicy",
                        'supported values: "Fail", "Ignore"',
                        hook.get("failurePolicy"),
                    )
                )
        return errors


def install_strategies(registry: Registry) -> None:
    """Give the admission kinds tests/kubeapi/kinds.py serves the strategies admission relies on:
    the configurations' defaulting and validation, and the policies' CEL compiled when written."""
    from tests.kubeapi.admission_policy import BindingStrategy, PolicyStrategy

    strategies: dict[str, Strategy] = {
        "validatingwebhookconfigurations": WebhookConfigStrategy(),
        "validatingadmissionpolicies": PolicyStrategy(),
        "validatingadmissionpolicybindings": BindingStrategy(),
    }
    for plural, strategy in strategies.items():
        rt = registry.lookup(GROUP, "v1", plural)
        if rt is None:
            raise KeyError(f"{GROUP}/v1 {plural} is not served (tests/kubeapi/kinds.py registers it)")
        registry.register(replace(rt, strategy=strategy))


# -------------------------------------------------------------------------------- matching


def rule_matches(rule: Json, attrs: Attributes, *, equivalent: bool = False) -> bool:
    """admissionregistration RuleWithOperations against a request (rules.Matcher)."""
    ops = rule.get("operations") or []
    if "*" not in ops and attrs.operation not in ops:
        return False
    if not _has(rule.get("apiGroups"), attrs.rt.group):
        return False
    if not equivalent and not _has(rule.get("apiVersions"), attrs.rt.version):
        return False
    scope = rule.get("scope") or "*"
    if (scope == "Cluster" and attrs.rt.namespaced) or (scope == "Namespaced" and not attrs.rt.namespaced):
        return False
    wanted = attrs.rt.plural + (f"/{attrs.subresource}" if attrs.subresource else "")
    for res in rule.get("resources") or []:
        base, _, sub = res.partition("/")
        if res == wanted or res == "*/*":
            return True
        if res == "*" and not attrs.subresource:
            return True
        if sub and (base in ("*", attrs.rt.plural)) and (sub == "*" or sub == attrs.subresource):
            return True
    return False


def _has(values: Any, wanted: str) -> bool:
    return isinstance(values, list) and ("*" in values or wanted in values)


def selector_matches(selector: Any, labels: Any) -> bool:
    """metav1.LabelSelector against a label map; an empty selector matches everything."""
    labels = labels if isinstance(labels, dict) else {}
    if not isinstance(selector, dict):
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if (op == "Exists" and not present) or (op == "DoesNotExist" and present):
            return False
    return True


# -------------------------------------------------------------------------------- admission


@dataclass
class Admission:
    """The validating admission chain of one emulator; ``server.admission``."""

    registry: Registry
    services: dict[tuple[str, str, int], tuple[str, int]] = field(default_factory=dict)
    reviews: list[Json] = field(default_factory=list)  # every AdmissionReview sent, in order
    ignored: list[str] = field(default_factory=list)  # call failures that failurePolicy Ignore let through
    policy_hook: Callable[[Attributes], None] | None = None

    def __post_init__(self) -> None:
        install_strategies(self.registry)
        from tests.kubeapi.admission_policy import evaluate_policies

        self.policy_hook = lambda attrs: evaluate_policies(self.registry, attrs)

    def route(self, namespace: str, name: str, address: tuple[str, int], port: int = 443) -> None:
        """Where the Service ``namespace/name`` port ``port`` is reached from the API server."""
        self.services[(namespace, name, port)] = address

    def admit(
        self,
        operation: str,
        rt: ResourceType,
        namespace: str,
        name: str,
        obj: Json,
        old: Json | None,
        dry_run: bool,
        subresource: str,
    ) -> None:
        """Registry.admit: raise the ApiError the API server answers with when admission refuses the write."""
        served = {
            "apiVersion": rt.api_version,
            "kind": rt.kind,
            **{k: v for k, v in obj.items() if k not in ("apiVersion", "kind")},
        }
        attrs = Attributes(operation, rt, namespace, name, served, old, dry_run, subresource)
        if self.policy_hook is not None:
            self.policy_hook(attrs)
        for config in self._stored("validatingwebhookconfigurations"):
            for hook in config.get("webhooks") or []:
                if self._matches(hook, attrs):
                    self._call(hook, attrs)

    def _stored(self, plural: str) -> list[Json]:
        rt = self.registry.lookup(GROUP, "v1", plural)
        if rt is None:
            return []
        items = self.registry.store.items(rt.bucket)
        return sorted((rt.present(o) for o in items), key=lambda o: o["metadata"]["name"])

    def _matches(self, hook: Json, attrs: Attributes) -> bool:
        equivalent = hook.get("matchPolicy") == "Equivalent"
        if not any(rule_matches(r, attrs, equivalent=equivalent) for r in hook.get("rules") or []):
            return False
        if hook.get("matchConditions"):
            raise ApiError(
                500, "InternalError", "matchConditions are not emulated (tests/kubeapi/admission.py)"
            )
        labels = [((o.get("metadata") or {}).get("labels")) for o in (attrs.obj, attrs.old) if o]
        if not any(selector_matches(hook.get("objectSelector"), lab) for lab in labels or [{}]):
            return False
        if attrs.rt.namespaced and attrs.namespace:
            ns = self.registry.store.get("namespaces", "", attrs.namespace) or {}
            if not selector_matches(hook.get("namespaceSelector"), (ns.get("metadata") or {}).get("labels")):
                return False
        return True

    def review(self, hook: Json, attrs: Attributes) -> Json:
        """The AdmissionReview request the API server sends (admission.k8s.io/v1)."""
        kind = {"group": attrs.rt.group, "version": attrs.rt.version, "kind": attrs.rt.kind}
        resource = {"group": attrs.rt.group, "version": attrs.rt.version, "resource": attrs.rt.plural}
        request: Json = {
            "uid": str(uuid.uuid4()),
            "kind": kind,
            "resource": resource,
            "requestKind": kind,
            "requestResource": resource,
            "name": attrs.name,
            "operation": attrs.operation,
            "userInfo": attrs.user_info(),
            "object": copy_json(attrs.obj),
            "oldObject": copy_json(attrs.old) if attrs.old is not None else None,
            "dryRun": attrs.dry_run,
            "options": {
                "apiVersion": "meta.k8s.io/v1",
                "kind": "CreateOptions" if attrs.operation == "CREATE" else "UpdateOptions",
            },
        }
        if attrs.subresource:
            request["subResource"] = request["requestSubResource"] = attrs.subresource
        if attrs.namespace:
            request["namespace"] = attrs.namespace
        return {"apiVersion": REVIEW_VERSION, "kind": "AdmissionReview", "request": request}

    def _call(self, hook: Json, attrs: Attributes) -> None:
        name = hook["name"]
        if attrs.dry_run and hook.get("sideEffects") not in ("None", "NoneOnDryRun"):
            raise E.bad_request(f'admission webhook "{name}" does not support dry run')
        if "v1" not in (hook.get("admissionReviewVersions") or []):
            return self._failed(hook, "webhook does not accept v1 AdmissionReview")
        body = self.review(hook, attrs)
        self.reviews.append(body)
        try:
            answer = self._post(hook, body)
        except _CallFailed as exc:
            return self._failed(hook, str(exc))
        response = answer.get("response") if isinstance(answer, dict) else None
        if (
            answer.get("apiVersion") != REVIEW_VERSION
            or answer.get("kind") != "AdmissionReview"
            or not isinstance(response, dict)
        ):
            return self._failed(
                hook, "received invalid webhook response: expected an admission.k8s.io/v1 AdmissionReview"
            )
        if response.get("uid") != body["request"]["uid"]:
            return self._failed(
                hook, f"expected response.uid={body['request']['uid']!r}, got {response.get('uid')!r}"
            )
        if response.get("patch") is not None or response.get("patchType") is not None:
            return self._failed(hook, "validating webhook may not return a patch")
        warnings = WARNINGS.get()
        if warnings is not None:
            warnings.extend(str(w) for w in response.get("warnings") or [])
        if response.get("allowed") is True:
            return None
        raise _denial(name, response.get("status"))

    def _post(self, hook: Json, body: Json) -> Any:
        config = hook.get("clientConfig") or {}
        timeout = int(hook.get("timeoutSeconds") or 10)
        if "service" in config:
            svc = config["service"]
            port = int(svc.get("port") or 443)
            server_name = f"{svc['name']}.{svc['namespace']}.svc"
            path = svc.get("path") or "/"
            shown = f"https://{server_name}:{port}{path}"
            address = self.services.get((svc["namespace"], svc["name"], port))
            if address is None:
                raise _CallFailed(
                    f'failed to call webhook: Post "{shown}?timeout={timeout}s": service "{svc["name"]}" not found'
                )
            host, tcp_port = address
        else:
            url = urlsplit(str(config["url"]))
            server_name, host, tcp_port = url.hostname or "", url.hostname or "", url.port or 443
            path = url.path or "/"
            shown = config["url"]
        context = ssl.create_default_context()
        bundle = config.get("caBundle")
        if bundle:
            context = ssl.create_default_context(cadata=base64.b64decode(bundle).decode("ascii"))
        conn = _Connection(host, tcp_port, server_name, context, timeout)
        try:
            data = json.dumps(body).encode()
            conn.request(
                "POST",
                f"{path}?timeout={timeout}s",
                data,
                {"Content-Type": "application/json", "Accept": "application/json"},
            )
            reply = conn.getresponse()
            raw = reply.read()
        except (OSError, http.client.HTTPException) as exc:
            raise _CallFailed(
                f'failed to call webhook: Post "{shown}?timeout={timeout}s": {_why(exc)}'
            ) from None
        finally:
            conn.close()
        if reply.status != 200:
            raise _CallFailed(
                f"received invalid webhook response: the server responded with status {reply.status}: {raw[:200]!r}"
            )
        try:
            return json.loads(raw)
        except ValueError:
            raise _CallFailed("received invalid webhook response: the body is not JSON") from None

    def _failed(self, hook: Json, why: str) -> None:
        message = f'failed calling webhook "{hook["name"]}": {why}'
        if hook.get("failurePolicy") == "Ignore":
            self.ignored.append(message)
            return
        raise ApiError(
            500, "InternalError", f"Internal error occurred: {message}", {"causes": [{"message": message}]}
        )


class _CallFailed(Exception):
    pass


class _Connection(http.client.HTTPSConnection):
    """HTTPS to ``host:port`` with the certificate checked for ``server_name`` (a Service's DNS name
    while the socket goes to wherever ``route`` put it)."""

    def __init__(
        self, host: str, port: int, server_name: str, context: ssl.SSLContext, timeout: float
    ) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self.server_name = server_name
        self._ctx = context

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)
        self.sock = self._ctx.wrap_socket(self.sock, server_hostname=self.server_name)


def _why(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
    if isinstance(exc, ConnectionRefusedError):
        return "dial tcp: connect: connection refused"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"tls: failed to verify certificate: {exc.verify_message}"
    return str(exc) or type(exc).__name__


def _denial(name: str, result: Any) -> ApiError:
    """webhookerrors.ToStatusErr."""
    result = result if isinstance(result, dict) else {}
    code = int(result.get("code") or 0)
    code = code if code >= 400 else 400
    denied = f'admission webhook "{name}" denied the request'
    if result.get("message"):
        message = f"{denied}: {result['message']}"
    elif result.get("reason"):
        message = f"{denied}: {result['reason']}"
    else:
        message = f"{denied} without explanation"
    return ApiError(code, str(result.get("reason") or ""), message, result.get("details"))
