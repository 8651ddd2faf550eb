"""Which changes of a preview diff change CRDs, named in one line each.

Helm installs a chart's `crds/` only on first install, so a chart bump that changes CRDs must say
how its CRDs move (llm_pd_eks/kuberay.py, llm_pd_eks/observability.py):
- a `yaml/v2` ConfigFile whose file is a chart's CRD manifest (KubeRay: the chart's `crds/` at the
  chart's git tag): the URL names the version, so a bump changes `inputs.file`;
- a Helm Release whose values turn on the chart's own CRD upgrade job (`crds.upgradeJob.enabled`,
  kube-prometheus-stack): a chart version change re-applies the chart's CRDs in a pre-upgrade hook.
"""

from __future__ import annotations

from typing import Any

CONFIG_FILE_TYPE = "kubernetes:yaml/v2:ConfigFile"
RELEASE_TYPE = "kubernetes:helm.sh/v3:Release"


def _is_crd_file(record: dict[str, Any]) -> bool:
    return record.get("type") == CONFIG_FILE_TYPE and "/crds/" in str(record.get("inputs", {}).get("file", ""))


def _upgrades_crds(record: dict[str, Any]) -> bool:
    values = record.get("inputs", {}).get("values") or {}
    job = (values.get("crds") or {}).get("upgradeJob") or {} if isinstance(values, dict) else {}
    return record.get("type") == RELEASE_TYPE and job.get("enabled") is True


def crd_changes(
    added: list[dict[str, Any]],
    removed: list[dict[str, Any]],
    changed: list[tuple[dict[str, Any], list[tuple[str, Any, Any]]]],
) -> list[str]:
    """One line per CRD change, in the order the diff lists resources."""
    lines = [f"`{r['name']}` adds CRDs from {r['inputs']['file']}" for r in added if _is_crd_file(r)]
    lines += [f"`{r['name']}` stops managing CRDs from {r['inputs']['file']}" for r in removed if _is_crd_file(r)]
    for record, paths in changed:
        for path, old, new in paths:
            if path == "inputs.file" and _is_crd_file(record):
                lines.append(f"`{record['name']}` CRDs {old} → {new} (server-side apply, before the operator)")
            elif path == "inputs.version" and _upgrades_crds(record):
                chart = record["inputs"].get("chart", record["name"])
                lines.append(
                    f"`{chart}` {old} → {new}: its CRD upgrade job re-applies the chart's CRDs before the operator"
                )
    return lines
