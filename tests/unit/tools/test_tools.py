"""The built-in tools: the calculator evaluates arithmetic exactly and nothing else, quickly, whatever a model
writes; a bad call gets an answer, not an exception."""
import json
import time

import pytest

from swiftlike.tools import TOOL_REGISTRY, CalculatorError, call_tool, evaluate


@pytest.mark.parametrize("expression, value", [
    ("347 * 5821", 2019887), ("2019887 + 156", 2020043), ("7 / 2", 3.5), ("6 / 3", 2), ("-(3 - 10) ** 2", -49),
    ("17 // 5", 3), ("17 % 5", 2), ("2 ** -2", 0.25), ("1.5 * 4", 6), ("(1 + 2) * (3 + 4)", 21),
    ("12 × 13", 156), ("144 ÷ 12", 12), ("2^10", 1024), ("9999 * 9999 * 9999", 999700029999),
])
def test_arithmetic(expression, value):
    result = evaluate(expression)
    assert result == value and type(result) is type(value)


@pytest.mark.parametrize("attack, reason", [
    ("__import__('os').system('echo pwned')", "not Call"),
    ("().__class__.__bases__[0].__subclasses__()", "not"),
    ("open('/etc/passwd').read()", "not Call"),
    ("x + 1", "not Name"),
    ("lambda: 1", "not Lambda"),
    ("[1] * 10", "not List"),
    ("'a' * 10", "not Constant"),
    ("True + 1", "not Constant"),
    ("1j * 1j", "not Constant"),
    ("1 if 1 else 2", "not IfExp"),
    ("1 < 2", "not Compare"),
    ("9 ** 9 ** 9", "exponents are limited"),
    ("10 ** 60 * 10 ** 60", "more than 100 digits"),
    ("2 ** 64", ""),
    ("1e999", "not a finite number"), ("1e308 * 10", "more than 100 digits"),
    ("1 / 0", "division by zero"), ("5 % 0", "division by zero"), ("0 ** -1", "division by zero"),
    ("(-8) ** 0.5", "not a real number"),
    ("1 +", "cannot parse"), ("", "empty"),
    ("1+" * 150 + "1", "longer than 200"),
    ("(" * 40 + "1" + ")" * 40, ""),
    ("-" * 60 + "1", "nests deeper"),
])
def test_anything_but_bounded_arithmetic_is_refused(attack, reason):
    start = time.perf_counter()
    try:
        result = evaluate(attack)
    except CalculatorError as error:
        assert reason in str(error)
    else:
        assert not reason and isinstance(result, (int, float)), result
    assert time.perf_counter() - start < 0.1


def test_tool_calls_answer_in_json_and_errors_too():
    assert json.loads(call_tool("calculator", {"expression": "347 * 5821"})) == {"result": 2019887}
    assert json.loads(call_tool("count_letters", {"word": "Strawberry", "letter": "R"})) == {"count": 3}
    answers = [call_tool("calculator", {"expression": "__import__('os')"}), call_tool("calculator", {}),
               call_tool("calculator", {"expression": 3}), call_tool("calculator", {"expression": "1", "x": 2}),
               call_tool("count_letters", {"word": "abc", "letter": "ab"}), call_tool("nope", {}),
               call_tool("calculator", ["1 + 1"])]
    errors = [json.loads(answer)["error"] for answer in answers]
    assert ["not Call" in errors[0], "missing argument 'expression'" in errors[1], "must be a string" in errors[2],
            "unknown argument(s) x" in errors[3], "single character" in errors[4], "unknown tool 'nope'" in errors[5],
            "JSON object" in errors[6]] == [True] * 7


def test_schemas_are_openai_function_schemas():
    for tool in TOOL_REGISTRY.values():
        schema = tool.schema()
        assert schema["type"] == "function" and schema["function"]["name"] == tool.name
        assert set(schema["function"]["parameters"]["required"]) <= set(schema["function"]["parameters"]["properties"])
