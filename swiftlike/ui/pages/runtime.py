"""The runtime tab: every job of the jobs dir, the selected one's state, log tail and live curves, Stop, and
one-click hand-off of a finished run's checkpoint to the deploy, eval and export pages."""
from __future__ import annotations

import re
import time
from pathlib import Path

from ..jobs import Job, JobStore
from ..metrics import CURVES, curve_rows, read_entries
from .command import UIContext, job_choices

REFRESH_S = 2.0


def jobs_table(store: JobStore) -> list[list]:
    return [[job.id, job.record["command"], job.status, job.record["pid"],
             time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(job.record["started"])),
             job.record.get("output_dir") or ""] for job in store.list()]


def result_of(job: Job) -> str:
    """What the job produced, once it has: eval's report table, or the run and checkpoint a training made."""
    if job.record["command"] == "eval":
        found = re.findall(r"report: (\S+report\.json)", job.tail(400))
        if found:
            report_md = Path(found[-1]).with_name("report.md")
            if not report_md.is_absolute():
                report_md = Path(job.record["cwd"]) / report_md
            if report_md.is_file():
                return report_md.read_text(encoding="utf-8")
        return ""
    run = job.run_dir()
    checkpoint = job.last_checkpoint()
    lines = [f"run directory: `{run}`"] if run else []
    if checkpoint:
        lines.append(f"last checkpoint: `{checkpoint}`")
    return "\n\n".join(lines)


def status_markdown(job: Job) -> str:
    lines = [f"**{job.status}** · pid {job.record['pid']} · `{job.id}`", f"```\n{job.command_line}\n```"]
    error = job.error_line() if job.state != "running" else None
    if error:
        lines.append(f"**error:**\n```\n{error}\n```")
    return "\n\n".join(lines)


def curve_updates(job: Job | None, weight: float) -> list:
    """One update per plot. The axis limits are set from the data each time: the plot keeps the scale of its
    first drawing otherwise, and a curve that grows out of it is drawn off the chart."""
    import gradio as gr
    updates = []
    for frame in curve_frames(job, weight):
        if frame.empty:
            updates.append(gr.update(value=frame))
            continue
        low, high = float(frame["value"].min()), float(frame["value"].max())
        pad = (high - low) * 0.05 or abs(high) * 0.05 or 0.05
        updates.append(gr.update(value=frame, x_lim=[int(frame["step"].min()), max(int(frame["step"].max()), int(frame["step"].min()) + 1)],
                                 y_lim=[low - pad, high + pad]))
    return updates


def curve_frames(job: Job | None, weight: float):
    import pandas as pd
    entries = read_entries(job.run_dir()) if job else []
    frames = []
    for key in CURVES:
        rows = curve_rows(entries, key, weight)
        # Typed columns even when empty: the plot takes an axis' type (quantitative or nominal) from the dtype
        # and keeps it once drawn, so an untyped empty frame would make every later value a category.
        frames.append(pd.DataFrame({"step": pd.Series([r["step"] for r in rows], dtype="int64"),
                                    "value": pd.Series([r["value"] for r in rows], dtype="float64"),
                                    "series": pd.Series([r["series"] for r in rows], dtype="str")}))
    return frames


def build_runtime(ctx: UIContext) -> None:
    """Inside the runtime tab."""
    import gradio as gr
    labels, store = ctx.labels, ctx.store
    with gr.Row():
        picker = gr.Dropdown(job_choices(store), value=None, label=labels["job"], elem_id="runtime-job", scale=4)
        refresh = gr.Button(labels["refresh"], elem_id="runtime-refresh", scale=1)
        stop = gr.Button(labels["stop"], variant="stop", elem_id="runtime-stop", scale=1)
    ctx.job_picker = picker
    status = gr.Markdown(elem_id="runtime-status")
    result = gr.Markdown(elem_id="runtime-result")
    with gr.Row():
        to_deploy = gr.Button(labels["to_deploy"], elem_id="runtime-to-deploy")
        to_eval = gr.Button(labels["to_eval"], elem_id="runtime-to-eval")
        to_export = gr.Button(labels["to_export"], elem_id="runtime-to-export")
    smoothing = gr.Slider(0.0, 0.99, value=0.6, step=0.01, label=labels["smoothing"])
    with gr.Row():
        plots = [gr.LinePlot(x="step", y="value", color="series", title=key, elem_id=f"runtime-curve-{key}",
                             height=260) for key in CURVES]
    log = gr.Textbox(label=labels["log"], lines=18, max_lines=18, autoscroll=True, interactive=False,
                     elem_id="runtime-log")
    with gr.Accordion(labels["jobs"], open=True):
        table = gr.Dataframe(headers=["id", "command", "state", "pid", "started", "output dir"],
                             value=jobs_table(store), interactive=False, elem_id="runtime-jobs")

    def show(job_id: str | None, weight: float):
        job = store.get(job_id) if job_id else None
        frames = curve_updates(job, weight)
        # choices only: a tick computed from the previous selection must not undo a newer one (Start's)
        return (gr.update(choices=job_choices(store)), status_markdown(job) if job else "",
                result_of(job) if job else "", job.tail() if job else "", *frames, jobs_table(store))

    outputs = [picker, status, result, log, *plots, table]
    timer = gr.Timer(REFRESH_S)
    timer.tick(show, [picker, smoothing], outputs, show_progress="hidden")
    refresh.click(show, [picker, smoothing], outputs)
    picker.input(show, [picker, smoothing], outputs)

    def stop_job(job_id: str | None, weight: float):
        if job_id:
            store.stop(job_id)
        return show(job_id, weight)

    stop.click(stop_job, [picker, smoothing], outputs)
    for button, key in ((to_deploy, "infer"), (to_eval, "eval"), (to_export, "export")):
        _wire_send(ctx, button, key, picker)


def checkpoint_values(checkpoint: Path) -> dict:
    """A LoRA checkpoint goes to --adapters (its args.json names the base model); full weights are the --model."""
    if (checkpoint / "adapter_config.json").is_file():
        return {"adapters": [str(checkpoint)], "model": None}
    return {"model": str(checkpoint), "adapters": []}


def _wire_send(ctx: UIContext, button, key: str, picker) -> None:
    import gradio as gr
    page = ctx.pages[key]

    def send(job_id: str | None):
        job = ctx.store.get(job_id) if job_id else None
        checkpoint = job.last_checkpoint() if job else None
        if checkpoint is None:
            gr.Warning(ctx.labels["no_checkpoint"] if job else ctx.labels["no_job"])
            return [*(gr.update() for _ in page.widgets), gr.update()]
        return [*page.set_values(checkpoint_values(checkpoint)), gr.Tabs(selected=key)]

    button.click(send, [picker], [*page.widgets.values(), ctx.tabs])

