"""What the tests of ms-swift's data flags share between the unit tier (tests/unit/arguments/test_ms_swift_flags.py:
parsing and what each flag does to data and collators) and the e2e tier (tests/e2e/test_arguments_runs.py: the
2-step sft runs): the rows they write and the parsed arguments. Their fixtures, `fresh_warnings` and
`encode_calls`, are in tests/conftest.py."""
import json

from model_ids import TINY

from swiftlike.arguments import parse_args
from swiftlike.arguments.train_args import TrainArguments


def multi_turn(i):
    return {"messages": [{"role": "user", "content": f"Name colour {i}."}, {"role": "assistant", "content": "Blue."},
                         {"role": "user", "content": "Another?"}, {"role": "assistant", "content": f"Green {i}."}]}


def write_rows(path, rows, bad_line=None):
    lines = [json.dumps(row) for row in rows]
    if bad_line is not None:
        lines[bad_line - 1] = "{not json"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def args_of(*argv, cls=TrainArguments):
    return parse_args(cls, ["--model", TINY, "--dataset", "swiftlike/alpaca-mini#6", *map(str, argv)])

