"""Tools that reach a real account or cluster: preflight, verify, resolve-image, a pull request's review stack."""
