"""The cost audit, `make cost-audit` (cli.py): spend and use against what was sized.

One window for every source (window.py): `--since 7d` is seven whole UTC days on both sides, `--since
36h` the hours up to now with Cost Explorer's days prorated, and the report says which.

Sources, each optional (a missing one is named in the report and on stderr, never fatal):
- AWS Cost Explorer (cost_explorer.py), net amortized cost filtered by the tags the program puts on
  everything (`project`, `stack`, root and CSI volumes included; activated as cost-allocation tags,
  docs/operations.md "Cost audit"): spend by service, EC2 instance type and EC2 - Other usage type
  (-> component), and GPU hours by purchase type (-> reservation coverage).
- The cluster's Prometheus (prometheus.py; `--prometheus URL`, e.g. a `kubectl port-forward` of
  kube-prometheus-stack-prometheus): GPU utilisation and idle GPU-hours from DCGM, tokens generated
  per phase, engine replicas per phase against GPU nodes.
- Service Quotas: the GPU family's on-demand vCPU quota against `gpuNodes.maxSize` plus the managed
  node group's update surge.
- `llm_pd_eks_sizing.model.size` (what `make size` predicts) for the workload file: the $/Mtok to compare with.

Advice (advice.py) knows what already covers the GPUs: a Capacity Block needs nothing, a capacity
reservation only a Savings Plan. Writes (report.py) report.md, report.json and spend.png under
--out (default build/cost-audit/<stack>/).
Exit codes (llm_pd_eks_tools/core/cli.py): 0 every source answered; 5 the report was written but a source was
unavailable; 2 bad arguments or stack config. Bounded time: botocore timeouts of 5 s/10 s with one
retry, at most 20 Cost Explorer pages per query, 10 s and 4 MiB per Prometheus query (headers and body).
"""

from llm_pd_eks_tools.core.cli import ROOT

from .cli import PROG, main
from .cost_explorer import COST_METRIC, EC2_COMPUTE, EC2_OTHER, ON_DEMAND, USAGE_METRIC
from .window import Window, parse_since

__all__ = [
    "COST_METRIC",
    "EC2_COMPUTE",
    "EC2_OTHER",
    "ON_DEMAND",
    "PROG",
    "ROOT",
    "USAGE_METRIC",
    "Window",
    "main",
    "parse_since",
]
