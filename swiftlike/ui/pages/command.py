"""One page per command: a form generated from its argument dataclass, the exact command line, and Start.

Start checks the arguments with the command's own parser (its error message is shown, nothing starts), then runs
the real CLI as a job and switches to the runtime tab, which follows it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ...arguments.deploy_args import DeployArguments
from ...arguments.eval_args import EvalArguments
from ...arguments.export_args import ExportArguments
from ...arguments.rollout_args import RolloutServerArguments
from ...arguments.sample_args import SampleArguments
from ...arguments.train_args import TrainArguments
from ..forms import (FieldSpec, FormError, argv_of, check_arguments, command_line, field_specs, load_args_json,
                     script_text)
from ..jobs import JobStore

PER_ROW = 3


@dataclass
class UIContext:
    """What every page shares: the job store, the labels, and the components pages update across tabs."""

    store: JobStore
    labels: dict[str, str]
    pages: dict[str, "CommandPage"] = field(default_factory=dict)
    tabs: Any = None
    job_picker: Any = None


def served_port(args: Any) -> int | None:
    """The port a serving command (deploy, app, rollout) listens on, for the job's link; None for the others."""
    return args.port if isinstance(args, (DeployArguments, RolloutServerArguments)) else None


def default_output_dir(args: Any) -> str | None:
    """Where a command's results go, as the command itself decides it, so the runtime panel can find them."""
    if isinstance(args, EvalArguments):
        return args.eval_output_dir
    if isinstance(args, TrainArguments):  # training commands: output/<model name> unless --output_dir
        return args.output_dir or str(Path("output") / Path(args.model.rstrip("/")).name)
    if isinstance(args, SampleArguments):
        return args.output_dir
    if isinstance(args, ExportArguments):
        return args.output_dir or f"{next(iter(args.adapter_paths().values()))}-merged"
    return None


def widget(spec: FieldSpec, value: Any, elem_id: str):
    import gradio as gr
    info = f"{spec.help} (default: {spec.default})"
    shown = spec.widget_value(value)
    if spec.unset_bool:
        return gr.Dropdown(["", "true", "false"], value=shown, label=spec.name, info=info, elem_id=elem_id)
    if spec.kind == "bool":
        return gr.Checkbox(value=shown, label=spec.name, info=info, elem_id=elem_id)
    if spec.kind == "choice":
        choices = ([""] if spec.default is None else []) + list(spec.choices)
        return gr.Dropdown(choices, value=shown, label=spec.name, info=info, elem_id=elem_id)
    hint = {"list": "space-separated values", "json": "a JSON object"}.get(spec.kind, "")
    return gr.Textbox(value=shown, label=spec.name, info=info, placeholder=hint, elem_id=elem_id, max_lines=1)


class CommandPage:
    """The form, preview, script and Start of one command (or of a choice of commands sharing a form)."""

    def __init__(self, ctx: UIContext, key: str, commands: dict[str, type], common: list[str],
                 fixed: dict[str, str] | None = None, initial: dict[str, Any] | None = None,
                 follow: bool = True):
        self.ctx, self.key, self.commands = ctx, key, commands
        self.follow = follow  # Start switches to the runtime tab (servers started beside a page do not)
        self.fixed = fixed or {}
        self.initial = initial or {}
        first = next(iter(commands.values()))
        self.specs = [s for s in field_specs(first) if s.name not in self.fixed]
        names = {s.name for s in self.specs}
        missing = [n for n in common if n not in names]
        if missing:
            raise ValueError(f"page {key}: {missing} are not arguments of {first.__name__}")
        self.common = common
        self.widgets: dict[str, Any] = {}
        ctx.pages[key] = self

    def render(self) -> None:
        import gradio as gr
        labels = self.ctx.labels
        self.mode = gr.Radio(list(self.commands), value=next(iter(self.commands)), label=labels["mode"],
                             visible=len(self.commands) > 1, elem_id=f"{self.key}-mode")
        by_name = {s.name: s for s in self.specs}
        self._grid([by_name[n] for n in self.common])
        with gr.Accordion(labels["advanced"], open=False, elem_id=f"{self.key}-advanced"):
            rest = [s for s in self.specs if s.name not in self.common]
            for group in dict.fromkeys(s.group for s in rest):
                gr.Markdown(f"**{group}**")
                self._grid([s for s in rest if s.group == group])
        with gr.Accordion(labels["load_args"], open=False):
            with gr.Row():
                checkpoint = gr.Textbox(label=labels["checkpoint_path"], elem_id=f"{self.key}-args-path", scale=4)
                load = gr.Button(labels["load"], elem_id=f"{self.key}-load", scale=1)
        self.preview = gr.Code(label=labels["command"], language="shell", lines=2, interactive=False,
                               elem_id=f"{self.key}-preview")
        with gr.Row():
            dry = gr.Button(labels["preview"], elem_id=f"{self.key}-dry-run")
            save = gr.Button(labels["save_script"], elem_id=f"{self.key}-save")
            self.start_button = gr.Button(labels["start"], variant="primary", elem_id=f"{self.key}-start")
        self.status = gr.Markdown(elem_id=f"{self.key}-status")
        self.script = gr.File(label=labels["save_script"], visible=False, elem_id=f"{self.key}-script")
        inputs = [self.mode, *self.widgets.values()]
        dry.click(self.show_command, inputs, [self.preview, self.status])
        save.click(self.save_script, inputs, [self.preview, self.script, self.status])
        load.click(self.load_args, [checkpoint], [*self.widgets.values(), self.status])

    def wire_start(self) -> None:
        """After the runtime tab exists: Start selects the new job there and switches to it."""
        inputs = [self.mode, *self.widgets.values()]
        self.start_button.click(self.start, inputs, [self.preview, self.status, self.ctx.job_picker,
                                                     self.ctx.tabs])

    def _grid(self, specs: list[FieldSpec]) -> None:
        import gradio as gr
        for i in range(0, len(specs), PER_ROW):
            with gr.Row():
                for spec in specs[i:i + PER_ROW]:
                    value = self.initial.get(spec.name, spec.default)
                    self.widgets[spec.name] = widget(spec, value, f"{self.key}-{spec.name}")

    def argv(self, command: str, values: tuple) -> list[str]:
        """The argv of `command`, against that command's own defaults (pt's differ from sft's)."""
        specs = {s.name: s for s in field_specs(self.commands[command])}
        names = list(self.widgets)
        return argv_of([specs[n] for n in names], list(values), self.fixed)

    def checked(self, command: str, values: tuple) -> tuple[list[str] | None, Any, str | None]:
        """(argv, parsed arguments, None), or (argv or None, None, the error): the form's own refusal (a value
        that cannot be passed), else the command's parser and checks."""
        try:
            argv = self.argv(command, values)
        except FormError as e:
            return None, None, f"swiftlike {command}: error: {e}"
        args, error = check_arguments(self.commands[command], command, argv)
        return argv, args, error

    def show_command(self, command: str, *values):
        argv, _, error = self.checked(command, values)
        return command_line(command, argv) if argv is not None else "", error_markdown(self.ctx.labels, error)

    def save_script(self, command: str, *values):
        import gradio as gr
        argv, _, error = self.checked(command, values)
        if argv is None:
            return "", gr.update(), error_markdown(self.ctx.labels, error)
        path = self.ctx.store.root / "scripts" / f"{command.replace(' ', '_')}-{time.strftime('%Y%m%d-%H%M%S')}.sh"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(script_text(command, argv), encoding="utf-8")
        path.chmod(0o755)
        return (command_line(command, argv), gr.update(value=str(path), visible=True),
                f"{self.ctx.labels['saved']}: `{path}`")

    def start(self, command: str, *values):
        import gradio as gr
        argv, args, error = self.checked(command, values)
        if error:
            shown = command_line(command, argv) if argv is not None else ""
            return shown, error_markdown(self.ctx.labels, error), gr.update(), gr.update()
        job = self.ctx.store.start(command, argv, output_dir=default_output_dir(args), port=served_port(args))
        if not self.follow:
            return job.command_line, f"{self.ctx.labels['started']} `{job.id}`", gr.update(), gr.update()
        return (job.command_line, f"{self.ctx.labels['started']} `{job.id}`",
                gr.update(choices=job_choices(self.ctx.store), value=job.id), gr.Tabs(selected="runtime"))

    def load_args(self, path: str):
        import gradio as gr
        try:
            saved = load_args_json(path)
        except (FileNotFoundError, ValueError) as e:
            return [*(gr.update() for _ in self.widgets), f"**{e}**"]
        specs = {s.name: s for s in self.specs}
        updates = [gr.update(value=specs[n].widget_value(saved[n])) if n in saved else gr.update()
                   for n in self.widgets]
        return [*updates, f"{self.ctx.labels['loaded']}: {sum(n in saved for n in self.widgets)} arguments"]

    def set_values(self, values: dict[str, Any]) -> list:
        """Updates for this page's widgets that set `values` (and leave the rest as they are)."""
        import gradio as gr
        specs = {s.name: s for s in self.specs}
        return [gr.update(value=specs[n].widget_value(values[n])) if n in values else gr.update()
                for n in self.widgets]


def error_markdown(labels: dict[str, str], error: str | None) -> str:
    if not error:
        return ""
    return f"**{labels['invalid']}:**\n\n```\n{error}\n```"


def job_choices(store: JobStore, keep: Callable[[Any], bool] = lambda job: True) -> list[tuple[str, str]]:
    return [(f"{job.id} · {job.status}", job.id) for job in store.list() if keep(job)]
