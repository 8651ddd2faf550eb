"""`make verify STACK=...`: prove, from the stack's kubeconfig, that the deployed system serves over EFA.

Checks (each PASS, FAIL or UNVERIFIED, with the cause named): GPU nodes joined as the stack config
and the GPU catalog say (count, the one AZ, instance type, allocatable GPUs, EFA devices, hugepages);
device plugins ready; the RayService Ready with prefill and decode on different nodes; the GPU-pod
admission policy deployed as the stack says and passing every live GPU pod; one OpenAI
chat completion with a long prompt through the endpoint; NIXL on LIBFABRIC (from NIXL's own log
line); KV bytes moved, no failed transfers and KV throughput above the GPU type's floor (from
Prometheus); last the traffic gate (gate.py): canaries whose answers are known and need the KV
decode pulled for them, judged with decode's NIXL counters around them and, given `--reference`,
against an aggregated deployment's answers. Everything goes through the Kubernetes API server (its
service proxy reaches the endpoint, the Ray dashboard and Prometheus), so the only network need is
the kubeconfig's server.

Exit codes are llm_pd_eks_tools/core/cli.py's: 0 all passed, 1 a check failed, 2 usage, 5 nothing failed but
something could not be checked (an unreachable cluster included), 70 a bug.
"""
