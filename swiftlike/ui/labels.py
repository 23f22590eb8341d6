"""The pages' own words in English and Chinese. Form fields are labelled with their flag names and described by
their help text, which come from the argument dataclasses and are not translated here."""
from __future__ import annotations

LABELS = {
    "en": {
        "title": "swiftlike web-ui", "sft": "Train (sft / pt)", "rlhf": "RLHF", "grpo": "GRPO", "infer": "Deploy & chat",
        "sample": "Sample", "eval": "Eval", "export": "Export", "runtime": "Runtime", "chat": "Chat",
        "advanced": "Advanced (every other argument)", "preview": "Show command (dry run)", "start": "Start",
        "save_script": "Save as script", "command": "Command line", "status": "Status",
        "load_args": "Load a checkpoint's args.json", "load": "Load", "checkpoint_path": "Checkpoint or run directory",
        "jobs": "Jobs", "job": "Job", "stop": "Stop job", "log": "Log (tail)", "result": "Result",
        "refresh": "Refresh", "smoothing": "Smoothing", "to_deploy": "Deploy its checkpoint",
        "to_eval": "Evaluate its checkpoint", "to_export": "Export its checkpoint",
        "rollout_servers": "Rollout servers (`swiftlike rollout`)", "start_server": "Start rollout server",
        "health": "Check health", "stop_server": "Stop server", "servers": "Servers",
        "deployment": "Deployment", "message": "Type a message and press Enter", "send": "Send", "tools": "Tools",
        "tools_info": "Built-in tools the model may call; each call runs here and its result goes back to it",
        "tool_choice": "Tool choice",
        "started": "Started job", "invalid": "Not started: the command refused these arguments",
        "no_checkpoint": "This job has no checkpoint yet.", "no_job": "Select a job first.",
        "not_ready": "The deployment is not answering yet; wait until its log says it is ready.",
        "loaded": "Loaded", "saved": "Saved", "mode": "Command",
    },
    "zh": {
        "title": "swiftlike 网页界面", "sft": "训练 (sft / pt)", "rlhf": "人类对齐", "grpo": "GRPO", "infer": "部署与对话",
        "sample": "采样", "eval": "评测", "export": "导出", "runtime": "运行状态", "chat": "对话",
        "advanced": "高级参数 (其余全部参数)", "preview": "显示命令 (不运行)", "start": "开始",
        "save_script": "保存为脚本", "command": "命令行", "status": "状态",
        "load_args": "加载检查点的 args.json", "load": "加载", "checkpoint_path": "检查点或运行目录",
        "jobs": "任务", "job": "任务", "stop": "停止任务", "log": "日志 (末尾)", "result": "结果",
        "refresh": "刷新", "smoothing": "平滑", "to_deploy": "部署其检查点",
        "to_eval": "评测其检查点", "to_export": "导出其检查点",
        "rollout_servers": "采样服务 (`swiftlike rollout`)", "start_server": "启动采样服务",
        "health": "检查状态", "stop_server": "停止服务", "servers": "服务",
        "deployment": "部署", "message": "输入消息后按回车", "send": "发送", "tools": "工具",
        "tools_info": "模型可调用的内置工具；调用在此运行，结果返回给模型", "tool_choice": "工具选择",
        "started": "已启动任务", "invalid": "未启动: 命令拒绝了这些参数",
        "no_checkpoint": "该任务还没有检查点。", "no_job": "请先选择一个任务。",
        "not_ready": "部署尚未就绪; 请等待日志显示已就绪。",
        "loaded": "已加载", "saved": "已保存", "mode": "命令",
    },
}
