"""Record what pulumi-eks's own implementation registers for each stack's `eks:index:Cluster`.

`eks:index:Cluster` is a remote component: the engine asks the eks plugin to `construct` it, and the
plugin's TypeScript registers the children (the service role, the inner `aws:eks/cluster:Cluster`,
the OIDC provider, a Kubernetes provider). Under Python mocks none of that happens, so the offline
preview would never show them to the policy pack. This generator runs that TypeScript for real:

1. `scripts/eks-children/build.sh` compiles pulumi-eks's `nodejs/eks` at a commit, with its own
   tsconfig and its locked dependencies, into a work directory outside the repository;
2. for every stack, and for a preview of existing resources and a first preview, the program runs
   under this project's mocks and the component's inputs are taken as the engine would send them;
3. `scripts/eks-children/record.js` calls the plugin's own `construct` with them under the Node SDK's
   mocks and prints every registration (type, name, parent, inputs, options, provider version).

The result, `llm_pd_eks_tools/plan/preview/eks_children.json`, is generated facts: rerun
`make eks-children PULUMI_EKS=<git dir of github.com/pulumi/pulumi-eks>` when pulumi-eks or the
program's arguments to it change (a test says when they did). Needs git, node and npm.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import subprocess
from pathlib import Path
from typing import Any, Optional

from google.protobuf import json_format

from llm_pd_eks_tools.core.cli import ROOT, ArgumentParser, Exit, ToolError, exit_with
from llm_pd_eks_tools.core.io_safety import atomic_write
from llm_pd_eks_tools.core.stack import stack_config, stacks
from llm_pd_eks_tools.plan.preview.mockrun import run_program

PROG = "gen-eks-children"
FACTS = ROOT / "llm_pd_eks_tools" / "preview" / "eks_children.json"
PACK_COMPONENTS = ROOT / "policies" / "data" / "eks_component_types.txt"
SCHEMA = "provider/cmd/pulumi-resource-eks/schema.json"
SCRIPTS = ROOT / "scripts" / "eks-children"
COMPONENT = "eks:index:Cluster"
MODES = ("known", "first-preview")
NODE_TIMEOUT_S = 300  # one construct under mocks takes seconds
BUILD_TIMEOUT_S = 1800  # npm install of the locked SDKs and tsc
# The wire form's resource reference (pulumi/sdk rpc: the signature key and the resource signature).
SIG_KEY, RESOURCE_SIG = "4dabf18193072939515e22adb298388d", "5cf8f73096256a8f31e491e813e4eb8e"
REGENERATE = "make eks-children PULUMI_EKS=<git dir of github.com/pulumi/pulumi-eks> [PULUMI_EKS_COMMIT=<rev>]"


def inputs_digest(wire_inputs: dict[str, Any]) -> str:
    """sha256 of the component's inputs in the engine's wire form, keys sorted: what the children
    were recorded for (the preview compares it with the program's current inputs)."""
    return hashlib.sha256(json.dumps(wire_inputs, sort_keys=True).encode()).hexdigest()


def component_request(run: Any, stack: str, mode: str, region: str) -> dict[str, Any]:
    """What record.js needs to construct the stack's `eks:index:Cluster` as the plugin would."""
    (cluster,) = run.of_type(COMPONENT)
    return {
        "project": cluster.urn.split("::")[1],
        "stack": stack,
        "name": cluster.name,
        "type": cluster.type,
        "parent": cluster.parent,
        "protect": cluster.protect,
        "inputs": json_format.MessageToDict(cluster.inputs_struct),
        "mode": mode,
        "region": region,
    }


def _children(recorded: list[dict[str, Any]], locked: dict[str, str]) -> list[dict[str, Any]]:
    """The registrations below the component, URNs replaced by positions (-1: the component itself),
    each SDK version as the plugin's own build locks it."""
    (own,) = [r for r in recorded if r["type"] == COMPONENT and not r["custom"]]
    urns = {_mock_urn(own): -1}
    children = [r for r in recorded if r is not own]
    for index, r in enumerate(children):
        urns[_mock_urn(r)] = index

    def ref(urn: str) -> Any:
        return urns.get(urn, urn)

    def inputs(value: Any) -> Any:
        """Resource references keep their shape; their URN becomes the position it names."""
        if isinstance(value, list):
            return [inputs(v) for v in value]
        if isinstance(value, dict):
            if value.get(SIG_KEY) == RESOURCE_SIG:
                return {**value, "urn": ref(value["urn"])}
            return {k: inputs(v) for k, v in value.items()}
        return value

    out = []
    for r in children:
        specs = [a for a in r["aliasSpecs"] if not a.get("urn")]
        if specs:  # none at the recorded commit; resolving a spec needs the engine's rules, not guessed here
            raise ToolError(Exit.FAILED, f"{r['type']} {r['name']}: alias specs {specs} are not resolved to URNs")
        out.append(
            {
                "type": r["type"],
                "name": r["name"],
                "parent": ref(r["parent"]),
                "custom": r["custom"],
                "protect": r["protect"],
                "version": locked.get(_package(r["type"]), r["version"]),
                "id": r.get("id", ""),
                "inputs": inputs(r["object"]),
                "dependencies": [ref(u) for u in r["dependencies"]],
                "propertyDependencies": {k: [ref(u) for u in v] for k, v in sorted(r["propertyDependencies"].items())},
                "ignoreChanges": r["ignoreChanges"],
                "replaceOnChanges": r["replaceOnChanges"],
                "deleteBeforeReplace": r["deleteBeforeReplace"],
                "deleteBeforeReplaceDefined": r["deleteBeforeReplaceDefined"],
                "additionalSecretOutputs": r["additionalSecretOutputs"],
                "aliases": [a["urn"] for a in r["aliasSpecs"]] + list(r.get("aliasURNs", [])),
                "customTimeouts": r["customTimeouts"],
                "retainOnDelete": r["retainOnDelete"],
            }
        )
    return out


def _package(type_: str) -> str:
    """`aws:iam/role:Role` -> `@pulumi/aws`; `pulumi:providers:kubernetes` -> `@pulumi/kubernetes`."""
    parts = type_.split(":")
    return f"@pulumi/{parts[2] if parts[0] == 'pulumi' and parts[1] == 'providers' else parts[0]}"


def _mock_urn(r: dict[str, Any]) -> str:
    """The URN the Node SDK's mock monitor gave `r`: its parent's last type, then its own."""
    stack, project, parent_types = r["parent"].split("::")[:3]
    return f"{stack}::{project}::{parent_types.split('$')[-1]}${r['type']}::{r['name']}"


def record(impl_dir: Path, request: dict[str, Any], work: Path) -> dict[str, Any]:
    """One construct of the component by pulumi-eks's code, its registrations as record.js prints them."""
    path = work / f"request-{request['stack']}-{request['mode']}.json"
    path.write_text(json.dumps(request, indent=1))
    done = subprocess.run(
        ["node", str(SCRIPTS / "record.js"), str(impl_dir), str(path)],
        capture_output=True,
        text=True,
        timeout=NODE_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        raise ToolError(
            Exit.FAILED, f"record.js failed for {request['stack']} ({request['mode']}): {done.stderr[-600:]}"
        )
    return json.loads(done.stdout)


def _git(git_dir: Path, *args: str) -> str:
    done = subprocess.run(["git", f"--git-dir={git_dir}", *args], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise ToolError(
            Exit.USAGE,
            f"git {' '.join(args)} in {git_dir}: {done.stderr.strip()[:200]} (--pulumi-eks takes the git dir of a "
            "clone of github.com/pulumi/pulumi-eks, e.g. its .git folder)",
        )
    return done.stdout.strip()


def generate(git_dir: Path, commit: str, work: Path, build: bool = True, root: Path = ROOT) -> dict[str, Any]:
    """Build pulumi-eks at `commit` (unless `build` is False and `work` holds the build) and record
    every stack in both modes."""
    sha = _git(git_dir, "rev-parse", f"{commit}^{{commit}}")
    described = _git(git_dir, "describe", "--tags", sha)
    work.mkdir(parents=True, exist_ok=True)
    if build:
        try:
            subprocess.run(
                ["bash", str(SCRIPTS / "build.sh"), str(git_dir), sha, str(work / "src")],
                check=True,
                timeout=BUILD_TIMEOUT_S,
            )
        except subprocess.CalledProcessError as error:
            raise ToolError(
                Exit.FAILED, f"building pulumi-eks {described} failed (exit {error.returncode}): needs node and npm"
            ) from None
    impl = work / "src" / "nodejs" / "eks"
    package = json.loads((impl / "package.json").read_text())
    substitutions = json.loads((impl / "substitutions.json").read_text())
    locked = dict(package["dependencies"])
    locked.update({name: s["locked"] for name, s in substitutions.items()})
    facts: dict[str, Any] = {
        "regenerate": REGENERATE.replace("[PULUMI_EKS_COMMIT=<rev>]", f"PULUMI_EKS_COMMIT={sha}"),
        "pulumi_eks": {
            "repository": "https://github.com/pulumi/pulumi-eks",
            "commit": sha,
            "describe": described,
            "python_sdk": importlib.metadata.version("pulumi-eks"),
            "implementation": "nodejs/eks, compiled with its own tsconfig.json; the plugin's construct "
            "(bin/cmd/provider/cluster.js) called under the Node SDK's mocks",
        },
        "sdk_versions": {"locked": locked, "substituted": substitutions},
        "offline_replacements": ["the OIDC issuer's CA thumbprint (fetched over TLS by the plugin) is 40 zeros"],
        "stacks": {},
    }
    for stack in stacks(root):
        region = stack_config(stack, root).region
        facts["stacks"][stack] = {}
        for mode in MODES:
            program = run_program(stack, root=root, first_preview=mode == "first-preview")
            request = component_request(program, stack, mode, region)
            recorded = record(impl, request, work)
            (component,) = program.of_type(COMPONENT)
            facts["stacks"][stack][mode] = {
                "component": component.name,
                "inputs_sha256": inputs_digest(request["inputs"]),
                "invokes": recorded["invokes"],
                "children": _children(recorded["registrations"], locked),
            }
    return facts


def component_types(git_dir: Path, facts: dict[str, Any]) -> str:
    """The pack's list of pulumi-eks component types (policies/data/eks_component_types.txt): the
    schema's components at the recorded commit, and the components its plugin registers inside them."""
    sha = facts["pulumi_eks"]["commit"]
    schema = json.loads(_git(git_dir, "show", f"{sha}:{SCHEMA}"))
    reasons = {
        token: "a component of pulumi-eks's schema"
        for token, spec in schema["resources"].items()
        if spec.get("isComponent")
    }
    for stack in facts["stacks"].values():
        for recorded in stack.values():
            for child in recorded["children"]:
                if not child["custom"]:
                    reasons.setdefault(child["type"], "a component pulumi-eks's plugin registers inside its own")
    header = (
        f"# pulumi-eks's component types ({facts['pulumi_eks']['describe']}, {sha}): registered by its plugin, "
        "each judged by its children.\n"
        f"# Generated by llm_pd_eks_tools/maint/gen_eks_children.py ({facts['regenerate']}); do not edit.\n"
    )
    return header + "".join(f"{token}\t{reason}\n" for token, reason in sorted(reasons.items()))


def main(argv: Optional[list[str]] = None) -> int:
    parser = ArgumentParser(
        prog="python -m llm_pd_eks_tools.maint.gen_eks_children", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--pulumi-eks", type=Path, required=True, help="git dir of github.com/pulumi/pulumi-eks")
    parser.add_argument("--commit", default="HEAD", help="the revision to build (default HEAD)")
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "eks-children", help="build directory")
    parser.add_argument("--no-build", action="store_true", help="reuse the build in --work")
    args = parser.parse_args(argv)
    facts = generate(args.pulumi_eks, args.commit, args.work, build=not args.no_build)
    atomic_write(FACTS, json.dumps(facts, indent=1, sort_keys=True) + "\n")
    atomic_write(PACK_COMPONENTS, component_types(args.pulumi_eks, facts))
    print(
        f"wrote {FACTS.relative_to(ROOT)} ({', '.join(facts['stacks'])}; pulumi-eks {facts['pulumi_eks']['describe']})"
    )
    return Exit.OK


if __name__ == "__main__":
    exit_with(PROG, main)
