"""Write the policy pack's copy of KubeRay's resource-name rules (`make facts`) from the program's.

The one source is `OPERATOR_FLAGS` in `llm_pd_eks/ray_resources.py` (what KubeRay's operator turns a
group's resource name into). The pack must not import the program it judges, so it reads the rules
from `policies/data/kuberay_resource_flags.json`, written here; tests/integration/test_policies_facts.py keeps that
file equal to what this script produces. `--check` exits 1 when it is stale.
"""

from __future__ import annotations

import argparse
import json
from typing import Optional

from llm_pd_eks.ray_resources import OPERATOR_FLAGS
from llm_pd_eks.versions import KUBERAY_VERSION
from llm_pd_eks_tools.core.cli import ROOT, exit_with
from llm_pd_eks_tools.maint.facts import sync

OUTPUT = ROOT / "policies" / "data" / "kuberay_resource_flags.json"


def generate() -> str:
    """The rules as JSON text (one trailing newline: byte-stable for the equality test)."""
    table = {
        "source": {
            "what": "the `ray start` flag KubeRay's operator turns a group resource name into "
            f"(kuberay v{KUBERAY_VERSION}, "
            "ray-operator/controllers/ray/common/pod.go updateRayStartParamsResources); each pattern is "
            "searched in the lower-cased name (Python re), the first match wins",
            "from": "llm_pd_eks/ray_resources.py OPERATOR_FLAGS",
            "generator": "llm_pd_eks_tools/maint/gen_ray_resources.py (make facts)",
        },
        "rules": {rule: {"pattern": pattern, "flag": flag} for rule, (pattern, flag) in OPERATOR_FLAGS.items()},
    }
    return json.dumps(table, indent=1) + "\n"


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="gen_ray_resources", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the pack's copy differs")
    return sync(generate(), (OUTPUT,), ROOT, parser.parse_args(argv).check)


if __name__ == "__main__":
    exit_with("gen_ray_resources", main)
