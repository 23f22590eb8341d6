"""A calculator for model-written expressions: arithmetic on numbers, nothing else.

The expression is parsed with `ast` and only number literals, + - * / // % ** and unary signs are evaluated,
by this module's own walk of the tree; there is no `eval`, no names, calls, attributes or subscripts, so a
model cannot reach Python through it. Sizes are bounded before any work is done (expression length, nesting,
exponents, digits of every intermediate result), so no input can make it run long or take much memory.
"""
from __future__ import annotations

import ast
import math
import operator

from .errors import ToolRefusal

MAX_EXPRESSION_CHARS = 200
MAX_DIGITS = 100  # of any intermediate or final result
MAX_EXPONENT = 64
MAX_NESTING = 30

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
# Spellings models and people use that Python's grammar does not.
_SPELLINGS = {"×": "*", "·": "*", "÷": "/", "^": "**", "−": "-"}

Number = int | float


class CalculatorError(ToolRefusal):
    """The expression is not arithmetic this calculator evaluates; the message says why, for the model to read."""


def _checked(value: Number) -> Number:
    if isinstance(value, float):
        if not math.isfinite(value):
            raise CalculatorError("the result is not a finite number")
        if abs(value) >= 10.0 ** MAX_DIGITS:
            raise CalculatorError(f"the result has more than {MAX_DIGITS} digits")
    elif value and math.log10(abs(value)) >= MAX_DIGITS:
        raise CalculatorError(f"the result has more than {MAX_DIGITS} digits")
    return value


def _power(base: Number, exponent: Number) -> Number:
    if abs(exponent) > MAX_EXPONENT:
        raise CalculatorError(f"exponents are limited to {MAX_EXPONENT}")
    if base and abs(exponent) * math.log10(abs(base)) >= MAX_DIGITS:
        raise CalculatorError(f"the result has more than {MAX_DIGITS} digits")
    if base == 0 and exponent < 0:
        raise CalculatorError("division by zero")
    result = base ** exponent
    if isinstance(result, complex):
        raise CalculatorError("the result is not a real number")
    return result


def _evaluate(node: ast.AST, depth: int) -> Number:
    if depth > MAX_NESTING:
        raise CalculatorError(f"the expression nests deeper than {MAX_NESTING} levels")
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return _checked(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand, depth + 1))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left, depth + 1), _evaluate(node.right, depth + 1)
        if isinstance(node.op, ast.Pow):
            return _checked(_power(left, right))
        if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and right == 0:
            raise CalculatorError("division by zero")
        return _checked(_BINARY[type(node.op)](left, right))
    raise CalculatorError(f"only numbers and + - * / // % ** ( ) are allowed, not {type(node).__name__}")


def evaluate(expression: str) -> Number:
    """The value of an arithmetic expression; a float that is a whole number comes back as an int."""
    if not isinstance(expression, str) or not expression.strip():
        raise CalculatorError("the expression is empty")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    for spelling, python in _SPELLINGS.items():
        expression = expression.replace(spelling, python)
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except (SyntaxError, ValueError):
        raise CalculatorError(f"cannot parse {expression.strip()!r} as arithmetic") from None
    value = _evaluate(tree.body, 0)
    if isinstance(value, float) and value.is_integer() and abs(value) < 2 ** 53:
        return int(value)
    return value
