"""Regenerate the reference tables in docs/ from the registries and argument dataclasses, so the docs cannot drift from the code.

Each table lives between a pair of markers in its page and is replaced whole:

    docs/models.md     <!-- models:start -->    ... <!-- models:end -->
    docs/templates.md  <!-- templates:start --> ... <!-- templates:end -->
    docs/datasets.md   <!-- datasets:start -->  ... <!-- datasets:end -->
    docs/agent.md      <!-- agent-templates:start --> ... (AGENT_TEMPLATE_REGISTRY), <!-- loss-scales:start -->,
                       <!-- tools:start --> ... (TOOL_REGISTRY), <!-- args-multi-turn:start --> ... (MultiTurnArguments)
    docs/rlhf.md       <!-- args-rollout:start --> ... (RolloutPlacementArguments + VllmArguments)
    docs/rlhf.md       <!-- args-preference:start --> ... (PreferenceArguments)
    docs/rlhf.md       <!-- args-gkd:start --> ... (GkdArguments)
    docs/rlhf.md       <!-- args-ppo:start --> ... (PpoArguments)
    docs/rollout.md    <!-- args-rollout-server:start --> ... (RolloutServerArguments + LogprobLimitArguments +
                       MultiTurnServerArguments + VllmArguments)
    docs/app.md        <!-- args-app:start --> ... (AppArguments' own fields + SamplingArguments)
    docs/rewards.md    <!-- args-rewards:start --> ... (RewardArguments: GRPO's reward flags)

    .venv/bin/python scripts/gen_docs_tables.py          # rewrite the tables
    .venv/bin/python scripts/gen_docs_tables.py --check  # exit 1 if a table is out of date
"""
from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from pathlib import Path

from swiftlike.arguments.app_args import AppArguments
from swiftlike.arguments.infer_args import LogprobLimitArguments, SamplingArguments, VllmArguments
from swiftlike.arguments.megatron_args import MegatronArguments
from swiftlike.arguments.rlhf_args import (GkdArguments, MultiTurnArguments, PpoArguments, PreferenceArguments,
                                           RayArguments, RewardArguments, RolloutPlacementArguments, TeacherArguments)
from swiftlike.arguments.rollout_args import MultiTurnServerArguments, RolloutServerArguments

from swiftlike.dataset import DATASET_REGISTRY
from swiftlike.model import MODEL_REGISTRY
from swiftlike.template import AGENT_TEMPLATE_REGISTRY, TEMPLATE_REGISTRY
from swiftlike.template.loss_scale import BASE_STRATEGIES, NOT_BUILT, REFINEMENTS
from swiftlike.tools import TOOL_REGISTRY
from swiftlike.utils.fields import field_default

DOCS = Path(__file__).resolve().parent.parent / "docs"


def cell(text: str) -> str:
    """Make free text safe inside a Markdown table cell."""
    return (text.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
            .replace("\n", " "))


def code(text: str) -> str:
    return "`" + text.replace("|", "\\|") + "`"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def models_table() -> str:
    rows = []
    for meta in MODEL_REGISTRY.values():
        rows.append([
            code(meta.model_type), code(meta.architecture), code(meta.template), code(meta.hf_model_type),
            "<br>".join(code(m) for m in meta.model_ids) or "-",
            ", ".join(code(m) for m in meta.lora_target_modules),
            cell(meta.description),
        ])
    return table(["model_type", "architecture", "template", "HF `model_type`", "known ids",
                  "default LoRA targets", "description"], rows)


def templates_table() -> str:
    used_by: dict[str, list[str]] = {}
    for meta in MODEL_REGISTRY.values():
        used_by.setdefault(meta.template, []).append(meta.model_type)
    rows = []
    for meta in TEMPLATE_REGISTRY.values():
        system = "-" if meta.default_system is None else cell(meta.default_system)
        rows.append([
            code(meta.name),
            ", ".join(code(t) for t in used_by.get(meta.name, [])) or "-",
            system,
            ", ".join(code(w) for w in meta.stop_words) or "-",
            "yes" if meta.thinking else "no",
            code(meta.agent_template) if meta.agent_template else "-",
            cell(meta.description),
        ])
    return table(["template", "model types", "default system prompt", "stop words", "think blocks",
                  "default agent template", "description"], rows)


def agent_templates_table() -> str:
    rows = []
    for agent in AGENT_TEMPLATE_REGISTRY.values():
        begin, end = agent.call_markup("NAME")
        rows.append([code(agent.name), code(agent.call_start), code((begin + "{...}" + end).replace("\n", "\\n")),
                     "own turn" if agent.results_turn else "inside the assistant turn",
                     ", ".join(code(w) for w in agent.stop_words) or "-", cell(agent.description)])
    return table(["agent template", "call starts with", "one call", "results", "extra stop words", "description"],
                 rows)


def loss_scales_table() -> str:
    rows = [[code(name), "base strategy", cell(meaning), "yes"] for name, meaning in BASE_STRATEGIES.items()]
    rows += [[code(name), "refinement", cell(meaning), "yes"] for name, (_, meaning) in REFINEMENTS.items()]
    rows += [[code(name), "refinement", cell(meaning), "no (exits 3)"] for name, meaning in NOT_BUILT.items()]
    return table(["value", "kind", "meaning", "built"], rows)


def tools_table() -> str:
    rows = [[code(tool.name), cell(tool.description),
             ", ".join(code(name) for name in tool.parameters["properties"])] for tool in TOOL_REGISTRY.values()]
    return table(["tool", "what it does", "arguments"], rows)


def _row_count(path: Path) -> int:
    return sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip())


def datasets_table() -> str:
    rows = []
    for meta in DATASET_REGISTRY.values():
        rows.append([
            code(meta.name), str(_row_count(meta.file)), ", ".join(code(c) for c in meta.columns),
            ", ".join(meta.tags), cell(meta.description),
        ])
    return table(["name", "rows", "columns", "tags", "description"], rows)


def args_table(*classes: type) -> str:
    """The fields each class declares itself (not inherited), in declaration order."""
    rows = []
    for cls in classes:
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for name in cls.__annotations__:
            f = fields.get(name)
            if f is None:
                continue
            default = field_default(f)
            names = " / ".join(code(n) for n in (f"--{name}", *f.metadata.get("aliases", ())))
            rows.append([names, code(" ".join(map(str, default)) if isinstance(default, list)
                                                 else str(default)), cell(f.metadata.get("help", ""))])
    return table(["Argument", "Default", "Meaning"], rows)


TABLES = {
    "models.md": [("models", models_table)],
    "templates.md": [("templates", templates_table)],
    "datasets.md": [("datasets", datasets_table)],
    "agent.md": [("agent-templates", agent_templates_table), ("loss-scales", loss_scales_table),
                 ("tools", tools_table), ("args-multi-turn", lambda: args_table(MultiTurnArguments))],
    "rlhf.md": [("args-rollout", lambda: args_table(RolloutPlacementArguments, VllmArguments)),
                ("args-preference", lambda: args_table(PreferenceArguments)),
                ("args-gkd", lambda: args_table(TeacherArguments, GkdArguments)),
                ("args-ppo", lambda: args_table(PpoArguments))],
    "rollout.md": [("args-rollout-server", lambda: args_table(RolloutServerArguments, LogprobLimitArguments,
                                                              MultiTurnServerArguments, VllmArguments))],
    "app.md": [("args-app", lambda: args_table(AppArguments, SamplingArguments))],
    "ray.md": [("args-ray", lambda: args_table(RayArguments))],
    "rewards.md": [("args-rewards", lambda: args_table(RewardArguments))],
    "megatron.md": [("args-megatron", lambda: args_table(MegatronArguments))],
}


def replace_between(text: str, key: str, body: str, page: str) -> str:
    start, end = f"<!-- {key}:start -->", f"<!-- {key}:end -->"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.DOTALL)
    if len(pattern.findall(text)) != 1:
        raise SystemExit(f"{page}: expected exactly one {start} ... {end} pair")
    note = "<!-- generated by scripts/gen_docs_tables.py; edit the registry or arguments, not this table -->"
    return pattern.sub(lambda _: f"{start}\n{note}\n\n{body}\n\n{end}", text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="report stale tables instead of rewriting them")
    args = parser.parse_args()
    stale = []
    for page, tables in TABLES.items():
        path = DOCS / page
        old = new = path.read_text(encoding="utf-8")
        for key, build in tables:
            new = replace_between(new, key, build(), str(path))
        if new == old:
            continue
        stale.append(page)
        if not args.check:
            path.write_text(new, encoding="utf-8")
            print(f"updated {path}")
    if args.check and stale:
        print(f"out of date: {', '.join(stale)}; run scripts/gen_docs_tables.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
