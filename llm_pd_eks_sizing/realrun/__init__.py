"""The real run: the serve config this program renders, started by the image's own Ray and vLLM on one GPU.

`render` turns the dev stack's rendered RayService into what one machine runs (the P/D Serve
application, an aggregated one to compare with, and the raylets KubeRay would start), changed only by
`overrides.yaml`; `gpu_main` runs on the GPU machine with nothing but the release's wheels and the
standard library; `evidence` reads what a run saved (`data/`) so tests can replay it offline.
docs/real-run.md says how to reproduce it.
"""
