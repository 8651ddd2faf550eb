"""Tools that reach a real account or cluster: preflight (AWS), verify (the deployed stack), resolve-image (ECR)."""
