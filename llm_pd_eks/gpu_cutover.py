"""A node change as a planned cut-over: the Ray pods select THEIR node groups by name.

EKS labels every node of a managed node group with the group's name, `eks.amazonaws.com/nodegroup`
(https://docs.aws.amazon.com/eks/latest/userguide/managed-node-groups.html: EKS adds labels prefixed
`eks.amazonaws.com` to managed node group instances). The workers select the GPU group by that label,
with the name the node group resource outputs (the head selects the system nodes by role only:
llm_pd_eks/ray_head_pod.py says why). A GPU node change renames its group
(llm_pd_eks/node_common.py `keyed_node_group_name`), so during one `pulumi up`:

1. Pulumi creates the new group next to the old one (its default create-before-delete);
2. the RayService, which depends on both groups, is updated: its pods' nodeSelector names the new
   group, a field inside KubeRay's cluster hash, so KubeRay's `NewCluster` upgrade builds a pending
   RayCluster there, switches the serve Service's selector to it once its Serve applications are
   healthy, and deletes the old RayCluster `rayClusterDeletionDelaySeconds` later (60 s by default:
   ray-project/kuberay v1.7.0 ray-operator/controllers/ray/rayservice_controller.go
   `RayClusterDeletionDelayDuration`, `reconcileServicesToReadyCluster`, `shouldPrepareNewCluster`);
3. `up` waits on the RayService until the new cluster serves: its `pulumi.com/waitFor` annotation
   (llm_pd_eks/ray_service.py `wait_annotations`) asks for `Ready` and `UpgradeInProgress=False`;
   pulumi-kubernetes checks a condition only once `status.observedGeneration` has reached
   `metadata.generation` (pulumi/pulumi-kubernetes v4.32.0 provider/pkg/await/condition/kubectl.go;
   the annotation since v4.18.0, the pin is 4.34.2), and KubeRay writes that generation in the same
   status update that sets `UpgradeInProgress=True` for the pending cluster (`calculateStatus`);
4. Pulumi deletes the old group last, when nothing of the serving cluster runs there any more.

With `serving.upgradeStrategy: Recreate` step 2 is a replacement of the RayService instead
(downtime while the new cluster loads the model, no second cluster); with `gpuNodes.templateChange:
recreate` the old GPU group is deleted before the new one exists. The preview says which
(llm_pd_eks_tools/plan/cutover.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

NODE_GROUP_LABEL = "eks.amazonaws.com/nodegroup"


@dataclass(frozen=True)
class RayNodeGroupNames:
    """The EKS names of the node groups the Ray pods select by name (node group outputs)."""

    workers: pulumi.Input[str]
    """The GPU group: the prefill and decode workers."""


def ray_node_group_names(gpu: aws.eks.NodeGroup) -> RayNodeGroupNames:
    return RayNodeGroupNames(workers=gpu.node_group_name)


def node_group_selector(name: pulumi.Input[str] | None) -> dict[str, pulumi.Input[str]]:
    """The nodeSelector term that pins a pod to one managed node group (none when no name is given)."""
    return {} if name is None else {NODE_GROUP_LABEL: name}
