"""ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1) in the emulator: CEL evaluated by
cel-python (``celpy``), so a policy's expressions are really run against the objects written.

Emulated: a binding (``spec.policyName``) makes its policy act; the policy's matchConstraints
(resourceRules, excludeResourceRules, objectSelector, namespaceSelector) and the binding's
matchResources must both match; ``spec.matchConditions`` gate it; ``spec.variables`` are bound in order
as ``variables.<name>``; each validation's ``expression`` must be true, else its ``message`` (or
``messageExpression``, or ``failed expression: <expression>``) is the decision. validationActions
Deny refuses the request as the API server does (``<resource> "<name>" is forbidden:
ValidatingAdmissionPolicy '<policy>' with binding '<binding>' denied request: <message>``, with the
validation's reason, default Invalid: 422), Warn adds a ``Warning`` header, Audit is recorded
only. An expression that fails to compile or evaluate obeys the policy's failurePolicy (default Fail).
The variables are ``object``, ``oldObject`` (null on CREATE), ``request`` and ``variables``.

Not emulated: paramKind/paramRef (refused with an error, not ignored), the ``authorizer`` variable,
the Kubernetes CEL extension libraries (quantity, url, ip, ...: cel-python has the standard
functions and macros only; expressions that need more fail to compile here, loudly), type checking
against the resource's schema, and the cost budget.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tests.kubeapi import errors as E
from tests.kubeapi.errors import ApiError, FieldError
from tests.kubeapi.kinds import BuiltinStrategy
from tests.kubeapi.registry import Registry
from tests.kubeapi.typed import WARNINGS

if TYPE_CHECKING:
    from tests.kubeapi.admission import Attributes

Json = dict[str, Any]
GROUP = "admissionregistration.k8s.io"
REASON_CODES = {"Unauthorized": 401, "Forbidden": 403, "Invalid": 422, "RequestEntityTooLarge": 413}
AUDITED: list[str] = []  # Audit-action decisions, newest last (tests read them)


class PolicyStrategy(BuiltinStrategy):
    def __init__(self) -> None:
        super().__init__("V1ValidatingAdmissionPolicy", generation=True, status={})

    def default(self, obj: Json) -> Json:
        spec = obj.setdefault("spec", {})
        if isinstance(spec, dict):
            spec.setdefault("failurePolicy", "Fail")
            constraints = spec.setdefault("matchConstraints", {})
            if isinstance(constraints, dict):
                constraints.setdefault("matchPolicy", "Equivalent")
                constraints.setdefault("namespaceSelector", {})
                constraints.setdefault("objectSelector", {})
        return super().default(obj)

    def validate(self, obj: Json, old: Json | None, api_version: str) -> list[FieldError]:
        """Each expression must compile: the API server refuses a policy whose CEL does not."""
        spec = obj.get("spec") or {}
        errors: list[FieldError] = []
        if not (spec.get("matchConstraints") or {}).get("resourceRules"):
            errors.append(E.required("spec.matchConstraints.resourceRules", ""))
        if not spec.get("validations"):
            errors.append(
                E.required(
                    "spec.validations", "validations or auditAnnotations must contain at least one item"
                )
            )
        exprs = [
            (f"spec.validations[{i}].expression", v.get("expression"))
            for i, v in enumerate(spec.get("validations") or [])
        ]
        exprs += [
            (f"spec.variables[{i}].expression", v.get("expression"))
            for i, v in enumerate(spec.get("variables") or [])
        ]
        exprs += [
            (f"spec.matchConditions[{i}].expression", v.get("expression"))
            for i, v in enumerate(spec.get("matchConditions") or [])
        ]
        for path, text in exprs:
            try:
                _compile(str(text or ""))
            except ValueError as exc:
                errors.append(E.invalid(path, text, f"compilation failed: {exc}"))
        return errors


class BindingStrategy(BuiltinStrategy):
    def __init__(self) -> None:
        super().__init__("V1ValidatingAdmissionPolicyBinding", generation=True)

    def validate(self, obj: Json, old: Json | None, api_version: str) -> list[FieldError]:
        spec = obj.get("spec") or {}
        errors: list[FieldError] = []
        if not spec.get("policyName"):
            errors.append(E.required("spec.policyName", ""))
        actions = spec.get("validationActions") or []
        if not actions:
            errors.append(E.required("spec.validationActions", ""))
        if "Deny" in actions and "Warn" in actions:
            errors.append(
                E.invalid(
                    "spec.validationActions",
                    actions,
                    "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
                )
            )
        return errors


# -------------------------------------------------------------------------------- CEL


_PROGRAMS: dict[str, Any] = {}


def _compile(text: str) -> Any:
    """A celpy program for ``text`` (cached); ValueError with the parser's message when it does not compile."""
    import celpy

    program = _PROGRAMS.get(text)
    if program is None:
        env = celpy.Environment()
        try:
            program = env.program(env.compile(text))
        except celpy.CELParseError as exc:
            raise ValueError(str(exc).splitlines()[0]) from None
        _PROGRAMS[text] = program
    return program


def evaluate(text: str, activation: Json) -> Any:
    """The value of CEL ``text`` over JSON ``activation``; ValueError when evaluation fails."""
    import celpy

    try:
        result = _compile(text).evaluate({k: celpy.json_to_cel(v) for k, v in activation.items()})
    except celpy.CELEvalError as exc:
        raise ValueError(str(exc.args[0] if exc.args else exc)) from None
    if isinstance(result, celpy.CELEvalError):
        raise ValueError(str(result.args[0] if result.args else result))
    return result


def _to_json(value: Any) -> Any:
    """A celpy value back to plain JSON (for ``variables``)."""
    from celpy import celtypes

    if isinstance(value, celtypes.BoolType):
        return bool(value)
    if isinstance(value, celtypes.IntType | celtypes.UintType):
        return int(value)
    if isinstance(value, celtypes.DoubleType):
        return float(value)
    if isinstance(value, celtypes.StringType):
        return str(value)
    if isinstance(value, celtypes.MapType):
        return {str(k): _to_json(v) for k, v in value.items()}
    if isinstance(value, celtypes.ListType):
        return [_to_json(v) for v in value]
    return None if value is None else value


# -------------------------------------------------------------------------------- dispatch


def evaluate_policies(registry: Registry, attrs: Attributes) -> None:
    """Run every bound policy that matches ``attrs``; raise the first Deny decision."""
    policies = {p["metadata"]["name"]: p for p in _stored(registry, "validatingadmissionpolicies")}
    for binding in _stored(registry, "validatingadmissionpolicybindings"):
        spec = binding.get("spec") or {}
        policy = policies.get(spec.get("policyName", ""))
        if policy is None:
            continue
        pspec = policy.get("spec") or {}
        if not _matches(pspec.get("matchConstraints") or {}, attrs, rules_required=True):
            continue
        if not _matches(spec.get("matchResources") or {}, attrs, rules_required=False):
            continue
        if pspec.get("paramKind") or spec.get("paramRef"):
            raise ApiError(
                500,
                "InternalError",
                "ValidatingAdmissionPolicy params are not emulated (tests/kubeapi/admission_policy.py)",
            )
        _decide(policy, binding, attrs, attrs_request(attrs))


def _matches(resources: Json, attrs: Attributes, *, rules_required: bool) -> bool:
    """MatchResources: a policy's matchConstraints must name the resource; a binding's
    matchResources narrows only what it states."""
    from tests.kubeapi.admission import rule_matches, selector_matches

    equivalent = resources.get("matchPolicy", "Equivalent") == "Equivalent"

    def named(rule: Json) -> bool:
        names = rule.get("resourceNames") or []
        return rule_matches(rule, attrs, equivalent=equivalent) and (not names or attrs.name in names)

    rules = resources.get("resourceRules") or []
    if (rules or rules_required) and not any(named(r) for r in rules):
        return False
    if any(named(r) for r in resources.get("excludeResourceRules") or []):
        return False
    labels = [(o.get("metadata") or {}).get("labels") for o in (attrs.obj, attrs.old) if o]
    return any(selector_matches(resources.get("objectSelector"), lab) for lab in labels or [{}])


def attrs_request(attrs: Attributes) -> Json:
    return {
        "operation": attrs.operation,
        "name": attrs.name,
        "namespace": attrs.namespace,
        "kind": {"group": attrs.rt.group, "version": attrs.rt.version, "kind": attrs.rt.kind},
        "resource": {"group": attrs.rt.group, "version": attrs.rt.version, "resource": attrs.rt.plural},
        "subResource": attrs.subresource,
        "userInfo": attrs.user_info(),
        "dryRun": attrs.dry_run,
    }


def _decide(policy: Json, binding: Json, attrs: Attributes, request: Json) -> None:
    pspec = policy["spec"]
    pname, bname = policy["metadata"]["name"], binding["metadata"]["name"]
    fail_closed = pspec.get("failurePolicy", "Fail") == "Fail"
    activation: Json = {"object": attrs.obj, "oldObject": attrs.old, "request": request, "variables": {}}
    try:
        for cond in pspec.get("matchConditions") or []:
            if not bool(evaluate(cond["expression"], activation)):
                return
        for var in pspec.get("variables") or []:
            try:
                activation["variables"][var["name"]] = _to_json(evaluate(var["expression"], activation))
            except ValueError:
                continue  # an expression that reads it fails in its turn
        for check in pspec.get("validations") or []:
            expression = check["expression"]
            try:
                ok = evaluate(expression, activation)
            except ValueError as exc:
                if not fail_closed:
                    continue
                message = f"expression '{expression}' resulted in error: {exc}"
            else:
                if _is_true(ok):
                    continue
                message = (
                    _message(check, activation)
                    if _is_bool(ok)
                    else (f"expression '{expression}' resulted in error: must evaluate to bool, got {ok!r}")
                )
            _act(pname, bname, binding, attrs, message, check.get("reason") or "Invalid")
    except ValueError as exc:  # a matchCondition that cannot be evaluated
        if fail_closed:
            _act(pname, bname, binding, attrs, f"failed to evaluate matchConditions: {exc}", "Invalid")


def _is_bool(value: Any) -> bool:
    from celpy import celtypes

    return isinstance(value, bool | celtypes.BoolType)


def _is_true(value: Any) -> bool:
    return _is_bool(value) and bool(value)


def _message(check: Json, activation: Json) -> str:
    if check.get("messageExpression"):
        try:
            text = evaluate(check["messageExpression"], activation)
            if isinstance(text, str) and text.strip() and "\n" not in text:
                return str(text)
        except ValueError:
            pass
    return str(check.get("message") or f"failed expression: {check['expression']}")


def _act(pname: str, bname: str, binding: Json, attrs: Attributes, message: str, reason: str) -> None:
    actions = (binding.get("spec") or {}).get("validationActions") or []
    if "Warn" in actions:
        warnings = WARNINGS.get()
        if warnings is not None:
            warnings.append(
                f"Validation failed for ValidatingAdmissionPolicy '{pname}' with binding '{bname}': {message}"
            )
    if "Audit" in actions:
        AUDITED.append(f"{pname}/{bname}: {message}")
    if "Deny" in actions:
        denied = f"ValidatingAdmissionPolicy '{pname}' with binding '{bname}' denied request: {message}"
        target = E.qualified(attrs.rt.group, attrs.rt.plural)
        raise ApiError(
            REASON_CODES.get(reason, 422),
            reason,
            f'{target} "{attrs.name}" is forbidden: {denied}',
            {
                "name": attrs.name,
                "group": attrs.rt.group,
                "kind": attrs.rt.plural,
                "causes": [{"message": denied}],
            },
        )


def _stored(registry: Registry, plural: str) -> list[Json]:
    rt = registry.lookup(GROUP, "v1", plural)
    if rt is None:
        return []
    return sorted(
        (rt.present(o) for o in registry.store.items(rt.bucket)), key=lambda o: o["metadata"]["name"]
    )
