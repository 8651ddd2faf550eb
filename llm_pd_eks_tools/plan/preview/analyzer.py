"""Drive the CrossGuard pack in `policies/` through the real analyzer gRPC protocol.

The Pulumi CLI runs a Python policy pack as `python -m pulumi.policy <engine-address> <pack-dir>`;
the pack's `PolicyPack(...)` starts an Analyzer gRPC server on 127.0.0.1:0 and prints the port on
stdout. The engine then calls GetAnalyzerInfo, Configure (the policy config, with each policy's
schema defaults filled in and an enforcement level for every policy), Analyze once per resource and
AnalyzeStack once with every resource. This module makes the same calls, so tests and the offline
preview judge what a `pulumi preview --policy-pack policies` would, with the differences
docs/preview.md lists (inputs not Check-ed, AnalyzeStack given inputs rather than outputs, ...).

The engine address is parsed but never dialled by `pulumi.policy` (see its `__main__`: logging
falls back to stderr without a configured engine), so no fake Engine service is needed.
"""

from __future__ import annotations

import contextlib
import copy
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Iterable, Iterator, Optional, Union

import grpc
from google.protobuf import empty_pb2, json_format, struct_pb2

if TYPE_CHECKING:  # pragma: no cover
    from llm_pd_eks_tools.plan.preview.mockrun import ProgramRun, Registration

from llm_pd_eks.pulumi_sdk import analyzer_pb2, analyzer_pb2_grpc, rpc
from llm_pd_eks_tools.core.cli import ROOT
from llm_pd_eks_tools.core.process_safety import end_process, spawn

POLICY_PACK_DIR = ROOT / "policies"
UNKNOWN = rpc.UNKNOWN  # the engine's unknown-value sentinel
_UNUSED_ENGINE_ADDRESS = "127.0.0.1:1"
# Seconds for all of the pack's answers to one preview (Configure, every Analyze, AnalyzeStack): the
# checked-in pack answers a stack in seconds; a pack that hangs ends the preview with exit 4.
POLICY_ANSWER_TIMEOUT_S = 300.0

_LEVEL_NAMES = {
    analyzer_pb2.ADVISORY: "advisory",
    analyzer_pb2.MANDATORY: "mandatory",
    analyzer_pb2.REMEDIATE: "remediate",
    analyzer_pb2.DISABLED: "disabled",
}
_LEVEL_VALUES = {name: value for value, name in _LEVEL_NAMES.items()}

PolicyConfig = dict[str, Union[str, dict[str, Any]]]  # name -> level, or {"enforcementLevel"?, props...}


@dataclass
class Verdict:
    """One diagnostic of the pack, as the engine would show it."""

    policy: str  # policy name
    enforcement: str  # "mandatory" | "advisory" | "remediate" | "disabled"
    message: str
    urn: str  # "" for a stack-level violation with no resource
    description: str = ""


def _verdicts(response: analyzer_pb2.AnalyzeResponse, default_urn: str = "") -> list[Verdict]:
    return [
        Verdict(
            policy=d.policyName,
            enforcement=_LEVEL_NAMES.get(d.enforcementLevel, str(d.enforcementLevel)),
            message=d.message,
            # Analyze leaves the urn empty; the engine attributes it to the analyzed resource.
            urn=d.urn or default_urn,
            description=d.description,
        )
        for d in response.diagnostics
    ]


def _strip_resource_refs(value: Any, ids: dict[str, str]) -> Any:
    """Resource references become their ID (custom) or URN, as the engine marshals for analyzers."""
    if isinstance(value, list):
        return [_strip_resource_refs(v, ids) for v in value]
    if isinstance(value, dict):
        if value.get(rpc._special_sig_key) == rpc._special_resource_sig:
            return value.get("id") or ids.get(value.get("urn", "")) or value.get("urn", "")
        return {k: _strip_resource_refs(v, ids) for k, v in value.items()}
    return value


def _provider_resource(ref: str, by_urn: dict[str, "Registration"]) -> Optional[analyzer_pb2.AnalyzerProviderResource]:
    """`urn::id` provider reference -> the provider as the engine describes it."""
    if not ref:
        return None
    urn = ref.rsplit("::", 1)[0]
    reg = by_urn.get(urn)
    type_ = reg.type if reg else urn.split("::")[-2].split("$")[-1]
    name = reg.name if reg else urn.split("::")[-1]
    props = struct_pb2.Struct()
    if reg is not None:
        props.CopyFrom(reg.inputs_struct)
    return analyzer_pb2.AnalyzerProviderResource(type=type_, properties=props, urn=urn, name=name)


def resource_options(reg: "Registration") -> analyzer_pb2.AnalyzerResourceOptions:
    """The options the engine hands an analyzer with a resource: protect, parent, ignoreChanges,
    deleteBeforeReplace (and whether it was given), additionalSecretOutputs, alias URNs and
    customTimeouts in seconds."""
    options = analyzer_pb2.AnalyzerResourceOptions(
        protect=reg.protect,
        parent=reg.parent,
        ignoreChanges=list(reg.ignore_changes),
        deleteBeforeReplace=reg.delete_before_replace,
        deleteBeforeReplaceDefined=reg.delete_before_replace_defined,
        additionalSecretOutputs=list(reg.additional_secret_outputs),
        aliases=list(reg.aliases),
    )
    if reg.custom_timeouts:
        options.customTimeouts.CopyFrom(analyzer_pb2.AnalyzerResourceOptions.CustomTimeouts(**reg.custom_timeouts))
    return options


def to_analyzer_resource(
    reg: "Registration", by_urn: Optional[dict[str, "Registration"]] = None
) -> analyzer_pb2.AnalyzerResource:
    """A recorded registration as the engine hands it to an analyzer (inputs, unknowns kept)."""
    by_urn = by_urn or {}
    ids = {u: r.id for u, r in by_urn.items() if r.custom and r.id}
    props = struct_pb2.Struct()
    props.update(_strip_resource_refs(json_format.MessageToDict(reg.inputs_struct), ids))
    resource = analyzer_pb2.AnalyzerResource(
        type=reg.type,
        properties=props,
        urn=reg.urn,
        name=reg.name,
        parent=reg.parent,
        options=resource_options(reg),
        dependencies=list(reg.dependencies),
        propertyDependencies={
            key: analyzer_pb2.AnalyzerPropertyDependencies(urns=list(urns))
            for key, urns in reg.property_dependencies.items()
        },
    )
    provider = _provider_resource(reg.provider, by_urn)
    if provider is not None:
        resource.provider.CopyFrom(provider)
    return resource


def analyze_request(resource: analyzer_pb2.AnalyzerResource) -> analyzer_pb2.AnalyzeRequest:
    """The per-resource request: the same view minus parent/dependencies (the proto has none)."""
    request = analyzer_pb2.AnalyzeRequest(
        type=resource.type,
        properties=resource.properties,
        urn=resource.urn,
        name=resource.name,
        options=resource.options,
    )
    if resource.HasField("provider"):
        request.provider.CopyFrom(resource.provider)
    return request


class PolicyPackServer:
    """The pack as a running analyzer plugin. Use as a context manager; the process dies on exit."""

    def __init__(
        self,
        pack_dir: Path = POLICY_PACK_DIR,
        python: Optional[str] = None,
        startup_timeout: float = 60.0,
        env: Optional[dict[str, str]] = None,
        answer_timeout: float = POLICY_ANSWER_TIMEOUT_S,
    ) -> None:
        self.pack_dir = Path(pack_dir)
        # The CLI would use the pack's own virtualenv (policies/.venv); the project's venv carries
        # the same pinned pulumi-policy, so it is the default here. POLICY_PYTHON overrides.
        self.python = os.path.abspath(python or os.environ.get("POLICY_PYTHON") or sys.executable)
        self.startup_timeout = startup_timeout
        # One deadline for the answers of one exchange (`exchange`; a call outside one is its own): a pack
        # that never answers ends the preview, and a server kept for many exchanges gives each its own.
        self.answer_timeout = answer_timeout
        self._answers_end: Optional[float] = None
        self.env = env
        self._proc: Optional[subprocess.Popen] = None
        self._stderr: Optional[IO[bytes]] = None
        self._channel: Optional[grpc.Channel] = None
        self._stub: Optional[analyzer_pb2_grpc.AnalyzerStub] = None
        self._info: Optional[analyzer_pb2.AnalyzerInfo] = None
        self.port: Optional[int] = None

    # -- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> "PolicyPackServer":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **(self.env or {})}
        # Engine-style settings must not leak in from a surrounding `pulumi` run.
        for key in ("PULUMI_CONFIG", "PULUMI_CONFIG_SECRET_KEYS"):
            env.pop(key, None)
        self._stderr = tempfile.TemporaryFile()
        # Its own process group (process_safety.spawn): Ctrl-C, SIGTERM or the tool's exit end it and its children.
        proc = self._proc = spawn(
            [self.python, "-u", "-m", "pulumi.policy", _UNUSED_ENGINE_ADDRESS, str(self.pack_dir)],
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            stdin=subprocess.DEVNULL,
            cwd=str(self.pack_dir),
            env=env,
        )
        line: list[bytes] = []
        stdout = proc.stdout
        assert stdout is not None
        reader = threading.Thread(target=lambda: line.append(stdout.readline()), daemon=True)
        reader.start()
        reader.join(self.startup_timeout)
        text = line[0].decode().strip() if line else ""
        if not text.isdigit():
            problem = "timed out waiting for its port" if not line else f"printed {text!r} instead of a port"
            stderr = self._read_stderr()
            self.close()
            raise RuntimeError(f"policy pack {self.pack_dir} did not start ({problem}):\n{stderr}")
        self.port = int(text)
        self._channel = grpc.insecure_channel(
            f"127.0.0.1:{self.port}", options=[("grpc.max_receive_message_length", 400 * 1024 * 1024)]
        )
        grpc.channel_ready_future(self._channel).result(timeout=self.startup_timeout)
        self._stub = analyzer_pb2_grpc.AnalyzerStub(self._channel)

    def _read_stderr(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")

    @property
    def pid(self) -> int:
        """The analyzer process's id (a benchmark reads its CPU time)."""
        if self._proc is None:
            raise RuntimeError("the policy pack is not running")
        return self._proc.pid

    @property
    def stderr(self) -> str:
        """What the pack wrote to stderr so far (tracebacks of failing policies land here)."""
        return self._read_stderr()

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        if self._proc is not None:
            end_process(self._proc, grace=10)
            if self._proc.stdout:
                self._proc.stdout.close()
            self._proc = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def _left(self) -> float:
        """Seconds left of the current exchange's answer deadline (a call outside one gets all of it)."""
        end = self._answers_end if self._answers_end is not None else time.monotonic() + self.answer_timeout
        left = end - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"the policy pack gave no answer within {self.answer_timeout:g} s")
        return left

    @contextlib.contextmanager
    def exchange(self) -> Iterator[None]:
        """One judging exchange (Configure, every Analyze, AnalyzeStack): its answers share one deadline of
        `answer_timeout`, which starts here and ends with it. Nested, the outer exchange's deadline holds."""
        outer = self._answers_end
        if outer is None:
            self._answers_end = time.monotonic() + self.answer_timeout
        try:
            yield
        finally:
            self._answers_end = outer

    @property
    def stub(self) -> analyzer_pb2_grpc.AnalyzerStub:
        if self._stub is None:
            raise RuntimeError("PolicyPackServer is not running; use it as a context manager")
        return self._stub

    # -- protocol ----------------------------------------------------------------------------
    def info(self) -> analyzer_pb2.AnalyzerInfo:
        if self._info is None:
            self._info = self.stub.GetAnalyzerInfo(empty_pb2.Empty(), timeout=self._left())
        return self._info

    def effective_config(self, policy_config: Optional[PolicyConfig] = None) -> dict[str, dict[str, Any]]:
        """Per policy: enforcement level and properties, schema defaults filled in, as the engine does.

        Unknown policy names and properties that break a policy's schema are refused by name.
        """
        import jsonschema

        policy_config = dict(policy_config or {})
        infos = {p.name: p for p in self.info().policies}
        unknown = sorted(set(policy_config) - set(infos) - {"all"})
        if unknown:
            raise ValueError(f"policy config names unknown policies {unknown}; the pack has {sorted(infos)}")
        pack_level = policy_config.pop("all", None)
        if isinstance(pack_level, dict) and set(pack_level) <= {"enforcementLevel"}:
            pack_level = pack_level.get("enforcementLevel")  # `"all": {"enforcementLevel": ...}` spelt out
        if pack_level is not None and (not isinstance(pack_level, str) or pack_level not in _LEVEL_VALUES):
            raise ValueError(
                f"`all`: {str(pack_level)[:60]!r} is not an enforcement level, one of {sorted(_LEVEL_VALUES)}"
            )
        result: dict[str, dict[str, Any]] = {}
        for name, info in infos.items():
            given = policy_config.get(name, {})
            if isinstance(given, str):
                given = {"enforcementLevel": given}
            given = dict(given)
            level = given.pop("enforcementLevel", None) or pack_level or _LEVEL_NAMES[info.enforcementLevel]
            if not isinstance(level, str) or level not in _LEVEL_VALUES:
                raise ValueError(f"policy {name}: enforcementLevel {level!r} is not one of {sorted(_LEVEL_VALUES)}")
            schema = json_format.MessageToDict(info.configSchema) if info.HasField("configSchema") else {}
            properties = {
                key: copy.deepcopy(spec["default"])
                for key, spec in (schema.get("properties") or {}).items()
                if "default" in spec
            }
            properties.update(given)
            if schema.get("properties"):
                full = {"type": "object", "additionalProperties": False, **schema}
                try:
                    jsonschema.validate(properties, full)
                except jsonschema.ValidationError as error:
                    where = "/".join(str(p) for p in error.absolute_path) or "(config)"
                    raise ValueError(f"policy {name}: config {where}: {error.message}") from None
            elif given:
                raise ValueError(f"policy {name} takes no config, got {sorted(given)}")
            result[name] = {"enforcementLevel": level, "properties": properties}
        return result

    def configure(self, policy_config: Optional[PolicyConfig] = None) -> dict[str, dict[str, Any]]:
        """Send Configure with every policy's effective config; returns what was sent."""
        effective = self.effective_config(policy_config)
        request = analyzer_pb2.ConfigureAnalyzerRequest()
        for name, cfg in effective.items():
            entry = request.policyConfig[name]
            entry.enforcementLevel = _LEVEL_VALUES[cfg["enforcementLevel"]]
            entry.properties.update(cfg["properties"])
        self.stub.Configure(request, timeout=self._left())
        return effective

    def analyze(self, resource: analyzer_pb2.AnalyzerResource) -> list[Verdict]:
        response = self.stub.Analyze(analyze_request(resource), timeout=self._left())
        return _verdicts(response, default_urn=resource.urn)

    def analyze_stack(self, resources: Iterable[analyzer_pb2.AnalyzerResource]) -> list[Verdict]:
        response = self.stub.AnalyzeStack(
            analyzer_pb2.AnalyzeStackRequest(resources=list(resources)), timeout=self._left()
        )
        return _verdicts(response)

    def analyze_all(
        self, resources: Iterable[analyzer_pb2.AnalyzerResource], policy_config: Optional[PolicyConfig] = None
    ) -> list[Verdict]:
        """Configure, then every resource through Analyze and the set through AnalyzeStack."""
        resources = list(resources)
        with self.exchange():
            self.configure(policy_config)
            verdicts: list[Verdict] = []
            for resource in resources:
                verdicts.extend(self.analyze(resource))
            verdicts.extend(self.analyze_stack(resources))
        return verdicts


def run_resources(run: "ProgramRun") -> list[analyzer_pb2.AnalyzerResource]:
    by_urn = {r.urn: r for r in run.resources}
    return [to_analyzer_resource(r, by_urn) for r in run.resources]


def analyze_run(
    run: "ProgramRun",
    policy_config: Optional[PolicyConfig] = None,
    server: Optional[PolicyPackServer] = None,
) -> list[Verdict]:
    """Judge a recorded program run as the engine would: every resource, then the whole stack.

    Pass a running `server` to reuse one pack process; otherwise one is started and stopped.
    """
    resources = run_resources(run)
    if server is not None:
        return server.analyze_all(resources, policy_config)
    with PolicyPackServer() as own:
        return own.analyze_all(resources, policy_config)


def mandatory(verdicts: Iterable[Verdict]) -> list[Verdict]:
    return [v for v in verdicts if v.enforcement == "mandatory"]


__all__ = [
    "UNKNOWN",
    "PolicyPackServer",
    "Verdict",
    "analyze_request",
    "analyze_run",
    "mandatory",
    "resource_options",
    "run_resources",
    "to_analyzer_resource",
]
