"""The offline preview: one package around one report model. The stack is read by
`llm_pd_eks_tools.core.stack`, as every tool reads it.

- `mockrun`  runs the program under Pulumi's mock runtime and records every registration;
- `analyzer` serves the policy pack over the real analyzer protocol;
- `harness`  the preview itself: config, mock run and analyzer together, producing a `Report`;
- `report`   the typed report (pydantic) that report.json is written from and preview-diff reads, and
             `PreviewResult`, a finished preview;
- `figures`  GPU placement, node counts, cost and KV-cache transfer, from the recorded plan;
- `fmt`      the one place numbers and text are formatted for people;
- `render`   the terminal report, summary.md, manifests/ and the other artifacts;
- `graph`    the dependency graph: graph.dot and a Mermaid diagram per component;
- `diff`     preview-diff: another revision's preview against the working tree's;
- `bench`    a warm preview against the SDK import floor.

Entry points: `python -m llm_pd_eks_tools.plan.preview` (make preview), `python -m llm_pd_eks_tools.plan.preview.diff`
(make preview-diff), `python -m llm_pd_eks_tools.plan.preview.bench`.
"""
