"""What `pulumi destroy` leaves in the account, read from the plan, so nobody is surprised by the bill.

- A resource registered with `retainOnDelete` is removed from the stack's state and left in the cloud
  (https://www.pulumi.com/docs/iac/concepts/options/retainondelete/).
- A StorageClass with `reclaimPolicy: Retain` keeps each EBS volume its claims provisioned after the
  claim (and the cluster) is gone (Kubernetes "Persistent Volumes", Retain reclaim policy); the
  aws-ebs-csi-driver tags those volumes from the class's `tagSpecification_<n>` parameters.
- A protected resource (`protect`) stops `destroy` until it is unprotected.
Each is listed with the tags it carries, so the cost audit (Cost Explorer by `project` and `stack`)
still finds it; a retained resource without both tags is marked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

STORAGE_CLASS = "kubernetes:storage.k8s.io/v1:StorageClass"
COST_TAGS = ("project", "stack")  # what the cost audit filters by (llm_pd_eks/deployment.py `tags`)


@dataclass(frozen=True)
class LeftBehind:
    what: str
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def tagged(self) -> bool:
        return all(self.tags.get(k) for k in COST_TAGS)

    def line(self) -> str:
        tags = ", ".join(f"{k}={v}" for k, v in sorted(self.tags.items())) or "no tags"
        return f"{self.what} ({tags})" + ("" if self.tagged else ": UNTAGGED, invisible to the cost audit")


def _storage_class_tags(parameters: dict[str, Any]) -> dict[str, str]:
    out = {}
    for key, value in parameters.items():
        name, sep, tag_value = str(value).partition("=")
        if key.startswith("tagSpecification_") and sep:
            out[name] = tag_value
    return out


def left_behind(records: list[dict[str, Any]]) -> list[LeftBehind]:
    """What survives `destroy`, from resources.json records."""
    out = []
    for r in records:
        inputs = r.get("inputs") or {}
        if r.get("retain_on_delete"):
            out.append(LeftBehind(f"`{r['type']}` {r['name']} (retainOnDelete)", dict(inputs.get("tags") or {})))
        if r["type"] == STORAGE_CLASS and inputs.get("reclaimPolicy") == "Retain":
            name = (inputs.get("metadata") or {}).get("name", r["name"])
            out.append(
                LeftBehind(
                    f"the EBS volumes of every claim on StorageClass `{name}` (reclaimPolicy Retain)",
                    _storage_class_tags(inputs.get("parameters") or {}),
                )
            )
    return out


def protected(records: list[dict[str, Any]]) -> list[str]:
    """Names of the resources `destroy` stops at until they are unprotected."""
    return sorted(r["name"] for r in records if r.get("protect"))


def lines(records: list[dict[str, Any]]) -> list[str]:
    """The preview's section: what `destroy` leaves behind, and what it stops at."""
    kept = left_behind(records)
    out = ["What `destroy` leaves behind"]
    out += [f"  {item.line()}" for item in kept] or ["  nothing"]
    stops = protected(records)
    if stops:
        out.append(f"  and it stops at the protected {', '.join(stops)} until they are unprotected")
    return out
