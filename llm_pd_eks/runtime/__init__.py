"""Python that runs inside the serving image, not in the Pulumi program: shipped to the Ray pods as a
ConfigMap (llm_pd_eks/serve_routing.py), read here only as text."""
