"""Generators of checked-in facts and docs (`make facts`, `make config-doc`) and the policy-pack benchmark."""
