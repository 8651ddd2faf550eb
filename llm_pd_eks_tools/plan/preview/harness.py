"""The offline preview of a stack: config, mock run and analyzer together, producing one `Report`.

`preview()` (what `python -m llm_pd_eks_tools.plan.preview` and `make preview` run):
1. reads `Pulumi.<stack>.yaml` as the engine would and validates it (every bad key at once);
2. starts the policy pack's analyzer process (in parallel with step 3: it is the slow start-up);
3. runs `__main__.py` under the mock runtime (`llm_pd_eks_tools.plan.preview.mockrun`), recording every registration;
4. serves the pack over the analyzer protocol on those resources (`llm_pd_eks_tools.plan.preview.analyzer`);
5. works out the figures (`llm_pd_eks_tools.plan.preview.figures`) and writes the artifacts
   (`llm_pd_eks_tools.plan.preview.render`).

Expected failures are `llm_pd_eks_tools.core.cli.ToolError`s carrying the shared exit codes: USAGE (stack or policy
config), PROGRAM (the program raised under the mock runtime), POLICY (the pack failed to run);
a mandatory verdict makes the result's exit code FAILED.
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from google.protobuf import json_format
from pulumi.output import Unknown

from llm_pd_eks import pulumi_sdk
from llm_pd_eks.pulumi_sdk import rpc  # the wire format's marker keys (secrets, unknowns, resource refs)
from llm_pd_eks_tools.core.cli import ROOT, Exit, ToolError, checkout_root, fresh_out_dir
from llm_pd_eks_tools.core.stack import load_stack_config, stack_file
from llm_pd_eks_tools.core.stackfile import existing_stack_file, secure_values
from llm_pd_eks_tools.plan.preview.analyzer import POLICY_ANSWER_TIMEOUT_S, PolicyPackServer, analyze_run
from llm_pd_eks_tools.plan.preview.fmt import mark_mock_values
from llm_pd_eks_tools.plan.preview.mockrun import ProgramRun, run_program
from llm_pd_eks_tools.plan.preview.report import PackInfo, PreviewResult, Report, VerdictRecord

if TYPE_CHECKING:  # pragma: no cover
    from llm_pd_eks.config import StackConfig

SECRET = "[secret]"
UNKNOWN = "[unknown until apply]"


def stderr_progress(message: str) -> None:
    print(f"[preview] {message}", file=sys.stderr, flush=True)


# -- inputs as plain JSON ------------------------------------------------------------------------
def plain(value: Any) -> Any:
    """Wire-format value -> JSON: secrets "[secret]", unknowns marked, resource refs as URNs."""
    if isinstance(value, dict):
        sig = value.get(rpc._special_sig_key)
        if sig == rpc._special_secret_sig:
            return SECRET
        if sig == rpc._special_resource_sig:
            return value.get("urn", "")
        if sig == rpc._special_output_value_sig:
            if value.get("secret"):
                return SECRET
            return plain(value["value"]) if "value" in value else UNKNOWN
        if sig == rpc._special_asset_sig or sig == rpc._special_archive_sig:
            return {k: plain(v) for k, v in value.items() if k != rpc._special_sig_key}
        return {k: plain(value[k]) for k in sorted(value)}  # wire maps are unordered: sort, for stable diffs
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, str) and value == rpc.UNKNOWN:
        return UNKNOWN
    if isinstance(value, Unknown):  # a stack output deserialized with its unknowns kept
        return UNKNOWN
    if isinstance(value, float) and value.is_integer():
        return int(value)  # protobuf carries every number as a double
    return value


def resource_records(run: "ProgramRun") -> list[dict[str, Any]]:
    """Every registration as resources.json holds it, sorted by URN (registration order is async)."""
    records = []
    mock: set[str] = run.mock_values  # ids and outputs the mock runtime made up
    for r in sorted(run.resources, key=lambda r: r.urn):
        records.append(
            {
                "urn": r.urn,
                "type": r.type,
                "name": r.name,
                "parent": r.parent,
                "custom": r.custom,
                "protect": r.protect,
                "delete_before_replace": r.delete_before_replace,
                "retain_on_delete": r.retain_on_delete,
                "ignore_changes": list(r.ignore_changes),
                "custom_timeouts": dict(r.custom_timeouts),
                "aliases": list(r.aliases),
                "provider": r.provider.replace(rpc.UNKNOWN, UNKNOWN),  # `urn::id`, the id unknown before it exists
                "provider_version": r.version,
                "recorded_by": r.recorded_by,
                "dependencies": sorted(r.dependencies),
                "property_dependencies": {k: sorted(v) for k, v in sorted(r.property_dependencies.items())},
                "inputs": mark_mock_values(plain(json_format.MessageToDict(r.inputs_struct)), mock),
            }
        )
    return records


# -- config --------------------------------------------------------------------------------------
def use_root(root: Path) -> None:
    """Make `root`'s `llm_pd_eks` the importable one; refuse to mix two checkouts in one process."""
    library = pulumi_sdk.__name__.split(".")[0]
    loaded = [name for name in sys.modules if name == library or name.startswith(f"{library}.")]
    if set(loaded) <= {library, pulumi_sdk.__name__}:
        # Only the SDK shim, which the tools import first and which holds nothing of a checkout: let
        # `root`'s own library (and its shim) be imported fresh; the objects already taken stay valid.
        for name in loaded:
            del sys.modules[name]
    loaded_from = getattr(sys.modules.get(library), "__file__", None)
    if loaded_from:
        where = Path(loaded_from).resolve().parent.parent
        if where != root.resolve():
            raise ToolError(
                Exit.PROGRAM,
                f"this process already imported components from {where}; preview {root} in a fresh process",
            )
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))


def read_config(stack: str, root: Path) -> tuple[dict[str, str], list[str], "StackConfig"]:
    """(engine config, secret keys, validated StackConfig) for the stack; ToolError(USAGE) if bad."""
    try:
        engine_config, secret_keys = load_stack_config(stack, root)
    except ToolError:  # llm_pd_eks_tools.core.stackfile: the message names the file and line already
        raise
    except FileNotFoundError as error:
        raise ToolError(Exit.USAGE, str(error)) from None
    except Exception as error:  # unreadable YAML
        raise ToolError(Exit.USAGE, f"{stack_file(stack, root).name}: {error}") from None
    try:
        from llm_pd_eks import config as model
    except ImportError as error:
        raise ToolError(Exit.PROGRAM, f"{root} has no usable llm_pd_eks.config: {error}") from None
    try:
        config = model.validate_engine_config(engine_config, secret_keys, stack=stack)  # checks the name too
    except model.ConfigError as error:
        problems = "\n".join(f"  - {p}" for p in error.problems)
        raise ToolError(
            Exit.USAGE,
            f"{stack_file(stack, root).name}: {len(error.problems)} problem(s) in the stack config:\n{problems}",
        ) from None
    return engine_config, secret_keys, config


def pack_version(pack_dir: Path) -> Optional[str]:
    """The pack's version as the Pulumi CLI reports it: PulumiPolicy.yaml's `version`.

    pulumi_policy's analyzer always answers GetAnalyzerInfo with "0.0.1" for Python packs and
    leaves the real version to the CLI, which reads PulumiPolicy.yaml (pulumi_policy/policy.py).
    """
    import yaml

    try:
        data = yaml.safe_load((pack_dir / "PulumiPolicy.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return None
    version = data.get("version") if isinstance(data, dict) else None
    return str(version) if version is not None else None


def _placeholder_warnings(config: "StackConfig", stack: str, root: Path) -> list[str]:
    """Example values the stack still carries (llm_pd_eks_tools/gates/placeholders.py), its secure ciphertexts included,
    and a serving image pinned by tag alone."""
    # imported once the checkout is chosen (use_root): the placeholder rules read the library's config model
    from llm_pd_eks_tools.gates.placeholders import digest_warning, warning_lines

    return warning_lines(config, secure_values(stack, root), stack) + digest_warning(config, stack)


# -- policy pack ---------------------------------------------------------------------------------
class _PackStarter:
    """Starts the analyzer process on a thread, so its start-up overlaps running the program."""

    def __init__(self, pack_dir: Path, answer_timeout: Optional[float] = None):
        self.server = PolicyPackServer(pack_dir=pack_dir, answer_timeout=answer_timeout or POLICY_ANSWER_TIMEOUT_S)
        self.error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._start, name="policy-pack-start", daemon=True)
        self._thread.start()

    def _start(self) -> None:
        try:
            self.server.start()
        except BaseException as error:  # reported by ready()
            self.error = error

    def ready(self) -> "PolicyPackServer":
        self._thread.join()
        if self.error is not None:
            raise ToolError(Exit.POLICY, f"policy pack did not start: {self.error}")
        return self.server

    def close(self) -> None:
        self._thread.join()
        self.server.close()


def _program_error(error: BaseException, root: Path) -> ToolError:
    """The program's exception as a message; frames inside the checkout (not the SDK) as context."""
    import pulumi

    if isinstance(error, pulumi.RunError):
        return ToolError(Exit.PROGRAM, f"the program failed: {error}")
    frames = [
        f
        for f in traceback.extract_tb(error.__traceback__)
        if f.filename.startswith(str(root)) and "/.venv/" not in f.filename
    ]
    where = "".join(f"\n    {Path(f.filename).relative_to(root)}:{f.lineno} in {f.name}: {f.line}" for f in frames[-4:])
    return ToolError(Exit.PROGRAM, f"the program failed: {type(error).__name__}: {error}{where}")


def pack_failure(error: BaseException, server: "PolicyPackServer") -> str:
    """What went wrong with the pack, in one line: no answer in time, or its error and the last
    line it wrote to stderr (a policy's exception)."""
    import grpc

    if isinstance(error, grpc.RpcError) and error.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
        return f"no answer within {server.answer_timeout:g} s (--policy-timeout)"
    if isinstance(error, TimeoutError):
        return str(error)
    detail = error.details() if isinstance(error, grpc.RpcError) else str(error)
    last = [line for line in server.stderr.splitlines() if line.strip()][-1:]
    return f"{type(error).__name__}: {detail}" + (f"; its last stderr line: {last[0].strip()}" if last else "")


# -- the artifact directory ----------------------------------------------------------------------
# What a preview writes; graph.svg is what earlier versions also wrote (so an old build/ is cleared too).
ARTIFACTS = ("resources.json", "report.json", "manifests", "graph.dot", "graphs", "summary.md", "graph.svg")


def clear_out_dir(out: Path) -> None:
    """Empty the artifact directory before anything runs, so a failed preview leaves no stale summary.md
    claiming the previous run's success. Refuses a path that is a file, a directory holding anything but
    preview artifacts (a mistyped `--out` must not delete someone's files) or one that cannot be written."""
    fresh_out_dir(out, ARTIFACTS)  # checked, emptied (or created, which proves it can be)
    out.rmdir()  # the artifacts are written once the preview ran; until then there is no directory


def holds_only_artifacts(out: Path) -> bool:
    """True when `out` does not exist or is a directory of nothing but preview artifacts."""
    if not out.exists():
        return True
    try:
        return out.is_dir() and not out.is_symlink() and all(p.name in ARTIFACTS for p in out.iterdir())
    except OSError:
        return False


def checked_paths(stack: str, root: Path, out: Optional[Path]) -> tuple[Path, Path]:
    """(root, out) after every check that must hold before anything is cleared or written: the stack is
    a name the Pulumi CLI accepts (so `build/preview/<stack>` cannot escape `build/`), the root is a checkout."""
    root = checkout_root(root)
    existing_stack_file(stack, root)  # raises on `/some/dir`, `../x`, `a b` and on a stack with no file
    return root, (Path(out) if out is not None else root / "build" / "preview" / stack)


# -- the preview ---------------------------------------------------------------------------------
def _run_program(
    stack: str, engine_config: dict[str, str], secret_keys: list[str], root: Path, first_preview: bool
) -> "ProgramRun":
    """The program under the mock runtime; its failure (an exception, its own sys.exit) as a ToolError."""
    try:
        return run_program(stack, engine_config, secret_keys, root=root, first_preview=first_preview)
    except SystemExit as error:  # the program's own sys.exit: its failure, not the preview's verdict
        raise ToolError(Exit.PROGRAM, f"the program failed: it called sys.exit({error.code!r})") from None
    except Exception as error:
        raise _program_error(error, root) from None


def _judge(
    server: "PolicyPackServer", run: "ProgramRun", policy_config: Optional[dict[str, Any]], pack_dir: Path
) -> tuple[list[VerdictRecord], PackInfo]:
    """The pack's verdicts on the run, and what the report says of the pack."""
    try:
        verdicts = [VerdictRecord(**asdict(v)) for v in analyze_run(run, policy_config, server=server)]
    except ValueError as error:  # a policy config the pack refuses
        raise ToolError(Exit.USAGE, f"policy config: {error}") from None
    except Exception as error:
        raise ToolError(Exit.POLICY, f"policy pack failed: {pack_failure(error, server)}") from None
    info = server.info()
    version = pack_version(pack_dir) or info.version
    return verdicts, PackInfo(status="ran", name=info.name, version=version, policies=len(info.policies))


def preview(
    stack: str,
    root: Path = ROOT,
    out: Optional[Path] = None,
    policy_config: Optional[dict[str, Any]] = None,
    run: Optional["ProgramRun"] = None,
    progress: Callable[[str], None] = stderr_progress,
    policy_timeout: Optional[float] = None,
    first_preview: bool = False,
) -> PreviewResult:
    """Run the whole preview and write its artifacts. Raises ToolError on expected failures.

    `run` reuses an existing ProgramRun of the same stack and root (tests share one per stack).
    `first_preview`: as the first `pulumi preview` of a new stack, every id and computed output unknown.
    The children pulumi-eks's plugin registers are put back under its component from the recorded
    facts (llm_pd_eks_tools/plan/preview/remote_children.py).
    """
    root, out = checked_paths(stack, root, out)
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    clear_out_dir(out)
    use_root(root)
    progress(f"reading {stack} config (Pulumi.{stack}.yaml)…")
    engine_config, secret_keys, config = read_config(stack, root)
    timings["config"] = time.perf_counter() - t0

    pack_dir = root / "policies"
    starter = None
    if (pack_dir / "PulumiPolicy.yaml").exists():
        progress("starting the policy pack (analyzer plugin) in the background…")
        starter = _PackStarter(pack_dir, policy_timeout)
    try:
        if run is None:
            progress("running the program under the mock runtime…")
            t = time.perf_counter()
            run = _run_program(stack, engine_config, secret_keys, root, first_preview)
            timings["program"] = time.perf_counter() - t
        from llm_pd_eks_tools.plan.preview.remote_children import facts_of, splice

        run, remote_warnings = splice(run, first_preview=first_preview, facts=facts_of(root))
        progress(f"recorded {len(run.resources)} registrations")
        verdicts: list[VerdictRecord] = []
        pack = PackInfo(status="absent")
        if starter is not None:
            progress("serving the policy pack over the analyzer protocol…")
            t = time.perf_counter()
            verdicts, pack = _judge(starter.ready(), run, policy_config, pack_dir)
            timings["policies"] = time.perf_counter() - t
    finally:
        if starter is not None:
            starter.close()

    progress("computing figures and writing artifacts…")
    # imported once the checkout is chosen (use_root): the figures read the library's prices and facts
    from llm_pd_eks_tools.plan.preview.figures import key_figures
    from llm_pd_eks_tools.plan.preview.render import write_artifacts

    t = time.perf_counter()
    records = resource_records(run)
    report = Report(
        stack=stack,
        region=config.region,
        pack=pack,
        verdicts=verdicts,
        figures=key_figures(run, config, config.region),
        resource_count=len(records),
        stack_outputs=plain(run.stack_outputs),
    )
    result = PreviewResult(
        out,
        run,
        report,
        records,
        timings,
        warnings=[f"WARNING: {w}" for w in remote_warnings] + _placeholder_warnings(config, stack, root),
    )
    write_artifacts(result)
    timings["artifacts"] = time.perf_counter() - t
    timings["total"] = time.perf_counter() - t0
    return result
