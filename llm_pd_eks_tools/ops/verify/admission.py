"""The GPU-pod admission policy, read back from the cluster and evaluated again, for `make verify`.

The API server records an Audit-mode failure only in its audit log (EKS ships that to CloudWatch Logs
where the cluster's `audit` log type is on) and a Warn-mode one only in the client's reply, so verify
does not depend on either: it reads the live ValidatingAdmissionPolicy and its binding, and evaluates
the policy's own CEL (its match conditions, variables and validations, as the cluster holds them) against
every live pod with cel-python, the evaluator the offline tests use. It reports

- the policy missing, or its binding's actions not those `admissionPolicy.mode` asks for;
- the API server's own type-checking warnings (`status.typeChecking.expressionWarnings`: an expression
  the server cannot type against the Pod schema; informational, as the server still evaluates it on the
  pod's values), named in the detail;
- every live pod the policy would fail, with the rule, in every mode: in audit these are the pods a move
  to deny would refuse.

cel-python implements CEL's standard definitions only (docs/policies.md lists what of Kubernetes' CEL
libraries it lacks); the policy's CEL is kept within them (llm_pd_eks/admission_cel.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

import celpy

from llm_pd_eks_tools.core.errors import one_line

from .kube import HttpError, KubeClient
from .results import Check, Context, Expected, Status

if TYPE_CHECKING:
    from llm_pd_eks.admission_cel import PolicyCel

API = "/apis/admissionregistration.k8s.io/v1"


@dataclass
class Judgement:
    """What the policy says of one pod: whether it applies, and the rules it fails or cannot evaluate."""

    matched: bool
    failed: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)


class CelPolicy:
    """A ValidatingAdmissionPolicy's CEL, compiled once, evaluated on pods as the API server does: the
    match conditions first (all must hold), then each validation with `variables` bound."""

    def __init__(
        self,
        match_conditions: list[tuple[str, str]],
        variables: list[tuple[str, str]],
        validations: list[tuple[str, str]],
    ):
        env = celpy.Environment()
        self._conditions = [(name, env.program(env.compile(text))) for name, text in match_conditions]
        self._variables = [(name, env.program(env.compile(text))) for name, text in variables]
        self._validations = [(name, env.program(env.compile(text))) for name, text in validations]

    @classmethod
    def from_cel(cls, cel: PolicyCel) -> "CelPolicy":
        return cls(
            [(r.name, r.expression) for r in cel.match_conditions],
            [(v.name, v.expression) for v in cel.variables],
            [(r.name, r.expression) for r in cel.validations],
        )

    @classmethod
    def from_spec(cls, spec: dict[str, Any], names: Optional[dict[str, str]] = None) -> "CelPolicy":
        """The CEL of a live policy's `spec`; a validation is named from `names` (expression -> rule name),
        else by its index, as the API server's audit annotation counts them."""
        names = names or {}
        validations = [
            (names.get(v["expression"], f"validation {i}"), v["expression"])
            for i, v in enumerate(spec.get("validations", []))
        ]
        return cls(
            [(c["name"], c["expression"]) for c in spec.get("matchConditions", [])],
            [(v["name"], v["expression"]) for v in spec.get("variables", [])],
            validations,
        )

    def judge(self, pod: dict[str, Any], operation: str = "CREATE", old: Optional[dict[str, Any]] = None) -> Judgement:
        activation: dict[str, Any] = {
            "object": celpy.json_to_cel(pod),
            "oldObject": celpy.json_to_cel(old),
            "request": celpy.json_to_cel({"operation": operation}),
        }
        verdict = Judgement(matched=True)
        for name, program in self._conditions:
            result = _run(program, activation)
            if isinstance(result, EvalError):  # failurePolicy Fail: an error is judged, as a failure
                verdict.errors[f"match condition {name}"] = result.why
                return verdict
            if not _true(result):
                return Judgement(matched=False)
        bound: dict[Any, Any] = {}
        for name, program in self._variables:
            activation["variables"] = celpy.celtypes.MapType(bound)
            value = _run(program, activation)
            if not isinstance(value, EvalError):  # an unbound variable makes each validation reading it an error
                bound[celpy.celtypes.StringType(name)] = value
        activation["variables"] = celpy.celtypes.MapType(bound)
        for name, program in self._validations:
            result = _run(program, activation)
            if isinstance(result, EvalError):
                verdict.errors[name] = result.why
            elif not _true(result):
                verdict.failed.append(name)
        return verdict


@dataclass(frozen=True)
class EvalError:
    why: str  # one short line


def _run(program: Any, activation: dict[str, Any]) -> Any:
    """The program's value, or an EvalError saying why it could not be evaluated: cel-python returns
    some errors and raises others."""
    try:
        result = program.evaluate(activation)
    except celpy.evaluation.CELEvalError as exc:
        result = exc
    if isinstance(result, celpy.evaluation.CELEvalError):
        return EvalError(one_line(str(result.args[0] if result.args else result), 160))
    return result


def _true(result: Any) -> bool:
    """A CEL result as the API server takes it: only `true` passes; an error is not true."""
    return isinstance(result, celpy.celtypes.BoolType) and bool(result)


def exempt_namespaces(spec: dict[str, Any]) -> set[str]:
    """Namespaces the policy's namespace selector leaves out (`kubernetes.io/metadata.name NotIn`)."""
    selector = (spec.get("matchConstraints") or {}).get("namespaceSelector") or {}
    out: set[str] = set()
    for expr in selector.get("matchExpressions", []):
        if expr.get("key") == "kubernetes.io/metadata.name" and expr.get("operator") == "NotIn":
            out |= set(expr.get("values", []))
    return out


def check_admission_policy(client: KubeClient, exp: Expected, ctx: Context) -> Check:
    """The policy and its binding as the stack deploys them, and every live pod judged by its CEL."""
    from llm_pd_eks.admission_cel import POLICY_NAME, VALIDATION_ACTIONS, policy_cel

    name = "admission-policy"
    try:
        policy = client.get_object(f"{API}/validatingadmissionpolicies/{POLICY_NAME}")
        binding = client.get_object(f"{API}/validatingadmissionpolicybindings/{POLICY_NAME}")
    except HttpError as exc:
        if exc.status != 404:
            raise
        return Check(
            name,
            Status.FAIL,
            f"the GPU-pod admission policy or its binding {POLICY_NAME} is not in the cluster; run `pulumi up`",
        )
    spec = policy.get("spec") or {}
    actions = tuple(sorted((binding.get("spec") or {}).get("validationActions") or []))
    wanted = tuple(sorted(VALIDATION_ACTIONS[exp.admission_mode]))
    data: dict[str, Any] = {"mode": exp.admission_mode, "actions": list(actions)}
    if actions != wanted:
        return Check(
            name,
            Status.FAIL,
            f"binding {POLICY_NAME} acts {list(actions)}, but admissionPolicy.mode {exp.admission_mode} "
            f"wants {list(wanted)}; run `pulumi up`",
            data,
        )
    # The server's type check against the Pod schema is informational: it still evaluates every expression
    # on the pod as dynamic values (as cel-python does below), so a warning is named, not failed on.
    warnings = ((policy.get("status") or {}).get("typeChecking") or {}).get("expressionWarnings") or []
    noted = ""
    if warnings:
        data["typeWarnings"] = warnings
        noted = "; the API server's type check warns: " + "; ".join(
            f"{w.get('fieldRef')}: {w.get('warning')}" for w in warnings
        )
    rendered = {r.expression: r.name for r in policy_cel(exp.instance.name).validations}
    stale = sorted(set(rendered) - {v.get("expression") for v in spec.get("validations", [])})
    if stale:
        data["notDeployed"] = [rendered[e] for e in stale]
        return Check(
            name,
            Status.FAIL,
            f"the cluster's policy lacks the stack's rule(s) {', '.join(data['notDeployed'])}; run `pulumi up`",
            data,
        )
    cel = CelPolicy.from_spec(spec, rendered)
    exempt = exempt_namespaces(spec)
    judged, failures = 0, []
    for pod in client.get_items("/api/v1/pods"):
        meta = pod.get("metadata") or {}
        if meta.get("namespace") in exempt:
            continue
        verdict = cel.judge(pod)
        if not verdict.matched:
            continue
        judged += 1
        where = f"{meta.get('namespace')}/{meta.get('name')}"
        failures += [f"{where}: {rule}" for rule in verdict.failed]
        failures += [f"{where}: {rule} could not be evaluated ({why})" for rule, why in verdict.errors.items()]
    data.update(judged=judged, failures=failures)
    if failures:
        consequence = "refused at their next creation" if exp.admission_mode == "deny" else "refused under deny"
        return Check(
            name,
            Status.FAIL,
            f"{len(failures)} failure(s) on live GPU pods, {consequence}: " + "; ".join(failures) + noted,
            data,
        )
    if judged == 0:
        return Check(
            name, Status.UNVERIFIED, "no live pod asks for GPUs: nothing for the policy to judge" + noted, data
        )
    return Check(
        name,
        Status.PASS,
        f"{judged} GPU pod(s) pass every rule; binding acts {list(actions)} ({exp.admission_mode})" + noted,
        data,
    )
