"""The program: the stack's config -> one `LlmPdEks` component (llm_pd_eks/deployment.py) -> outputs.

Every decision lives in `llm_pd_eks/`; the wiring is `llm_pd_eks/deployment.py`, which
`provider/` also serves to other Pulumi programs as a component package.
"""

import pulumi

from llm_pd_eks.api_access import deploy_path_problems
from llm_pd_eks.config import ConfigError, load_stack_config
from llm_pd_eks.deployment import INSTANCE_NAME, LlmPdEks, engine_values, stack_args

try:
    config = load_stack_config()
    unreachable = deploy_path_problems(config)  # `up` must reach the Kubernetes API
    if unreachable:
        raise ConfigError(unreachable)
except ConfigError as error:  # every problem at once, before any resource registers
    raise pulumi.RunError(str(error)) from None

secrets = pulumi.Config()
deployment = LlmPdEks(
    INSTANCE_NAME,
    stack_args(
        engine_values(),
        hf_token=secrets.get_secret("hfToken"),
        grafana_admin_password=secrets.get_secret("grafanaAdminPassword"),
        alert_webhook_url=secrets.get_secret("alertWebhookUrl"),
    ),
)

if config.serving is not None:
    pulumi.export("endpoint", deployment.endpoint)
    pulumi.export("modelId", deployment.model_id)
pulumi.export("vpcId", deployment.vpc_id)
pulumi.export("privateSubnetIds", deployment.private_subnet_ids)
pulumi.export("clusterName", deployment.cluster_name)
pulumi.export("kubeconfig", deployment.kubeconfig)
pulumi.export("kubeconfigJson", deployment.kubeconfig_json)
pulumi.export("gpuAvailabilityZone", deployment.gpu_availability_zone)
pulumi.export("gpuInstanceType", deployment.gpu_instance_type)
pulumi.export("nodeGroupNames", deployment.node_group_names)
