"""The program's side of a `code_exec` case: a fresh interpreter that runs the model-written code and serves the
test runner's calls into it (`verdict.py` is the runner's side, `program.py` starts both).

The runner exec's `python -I -S -c BOOT` inside the sandboxed call and sends it this module, compiled once by the
sandbox server (`program._CODE`), so it imports a few builtin modules only (no json, no re: every case pays for what this
process imports), and the process starts with nothing of the sandbox server's memory: not the test being judged,
not the tests of the calls that run beside it. The runner imports it for the wire format (`encode`, `decode`,
the frames), which both sides speak.

Nothing here is trusted by the runner. The program may patch any of it (this module is in its `sys.modules`,
its functions are on its stack): it then answers whatever it likes, which it could do anyway by returning other
values. What keeps a verdict honest is on the runner's side: it takes only plain values back, checks every one
of them, and compares them itself.

Wire format: frames of an 8-byte big-endian length and that many bytes on two pipes: the runner's requests on
fd 3 in `marshal` (the program's side trusts the runner), the program's replies on fd 4 in JSON (ASCII), which the
runner parses with `json` (`marshal.loads` is not safe on hostile data). A value is null (None), a bool or a str as
itself, else a list whose first item is a tag:
`["i", hex]` int, `["f", float.hex()]` float, `["c", real, imag]` complex, `["b", hex]` bytes, `["l" | "t" |
"s" | "z", [items]]` list / tuple / set / frozenset, `["d", [[key, value], ...]]` dict, `["m", name, handle]` a
module, `["r", module, qualname, handle]` a function or class found under that name in that module, and
`["h", handle]` any other object, which stays in this process: the runner calls into it by its handle. The runner
sends `"m"` and `"r"` for the standard library's modules, functions and classes it passes (`key=len`); the program
sends `"m"` for its modules, which the runner takes as its own only for a standard-library module bound under its
own name (the program's `import math` is the runner's `math`), and as a handle otherwise.
"""
from __future__ import annotations

import importlib
import marshal
import os
import sys
import types
from _json import encode_basestring_ascii

REQUESTS, REPLIES = 3, 4
MAX_FRAME = 16 << 20  # a reply over this is refused by the runner (the JSON of a value, not its size in memory)
ERROR_CHARS = 1000  # an exception's message is cut here: the model's code chooses its length
EXITED = "exited with code 0"
# the modules the runner imports itself when the program's namespace binds them under their own name: the standard
# library, less the few whose import does something (opens a browser, prints)
UNSAFE_IMPORTS = frozenset({"antigravity", "this", "__hello__", "__phello__", "idlelib", "turtle", "turtledemo",
                            "tkinter", "webbrowser"})
_PLAIN_TAGS = {list: "l", tuple: "t", set: "s", frozenset: "z"}
# a subclass instance's own data, read with its plain base's methods (not its overrides): a StrEnum's text, a
# namedtuple's items, a Counter's counts
_BASES = ((str, str.__str__), (int, int.__int__), (float, float.__float__), (complex, complex.__complex__),
          (bytes, bytes.__bytes__), (list, list.copy), (tuple, lambda value: tuple.__getitem__(value, slice(None))),
          (dict, lambda value: dict(dict.items(value))), (set, lambda value: set(set.__iter__(value))),
          (frozenset, lambda value: frozenset(frozenset.__iter__(value))))


def trusted_module(name: object) -> bool:
    """Whether a module named `name` is one the runner may import in its own process (module docstring)."""
    if type(name) is not str:
        return False
    top = name.split(".")[0]
    return top in sys.stdlib_module_names and top not in UNSAFE_IMPORTS or top == "builtins"


# --------------------------------------------------------------------------- frames


# the -c of the program's interpreter: read this module's compiled code (one frame on fd 3), run it as __main__
BOOT = ("import marshal, os\n"
        "def read(size):\n"
        "    data = b''\n"
        "    while len(data) < size:\n"
        "        chunk = os.read(3, size - len(data))\n"
        "        if not chunk:\n"
        "            os._exit(0)\n"
        "        data += chunk\n"
        "    return data\n"
        "exec(marshal.loads(read(int.from_bytes(read(8), 'big'))), {'__name__': '__main__'})\n")


def write_frame(fd: int, data: bytes) -> None:
    data = len(data).to_bytes(8, "big") + data
    while data:
        data = data[os.write(fd, data):]


def read_exactly(fd: int, size: int) -> bytes | None:
    """`size` bytes from `fd`, None at its end (a blocking descriptor: the program's side)."""
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def frame_length(header: bytes) -> int:
    length = int.from_bytes(header, "big")
    if length > MAX_FRAME:
        raise ValueError(f"a message of {length} bytes, over the limit of {MAX_FRAME}")
    return length


def read_frame(fd: int) -> bytes | None:
    header = read_exactly(fd, 8)
    return None if header is None else read_exactly(fd, frame_length(header))


def to_json(value) -> str:
    """JSON of a message of the wire format (dicts with str keys, lists, str, small ints, bool, None)."""
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    kind = type(value)
    if kind is str:
        return encode_basestring_ascii(value)
    if kind is int:
        return str(value)
    if kind is list or kind is tuple:
        return "[" + ",".join(map(to_json, value)) + "]"
    if kind is dict:
        return "{" + ",".join(f"{encode_basestring_ascii(key)}:{to_json(item)}" for key, item in value.items()) + "}"
    raise TypeError(f"not part of a message: {kind.__name__}")


def _reply(message: dict) -> None:
    write_frame(REPLIES, to_json(message).encode("ascii"))


def _request() -> dict | None:
    data = read_frame(REQUESTS)
    return None if data is None else marshal.loads(data)


# --------------------------------------------------------------------------- values


def encode(value, opaque):
    """`value` in the wire format; `opaque(value)` encodes what is not exactly a plain type (`type(x) is`)."""
    kind = type(value)
    if value is None or kind is bool or kind is str:
        return value
    if kind is int:
        return ["i", hex(value)]
    if kind is float:
        return ["f", value.hex()]
    if kind is complex:
        return ["c", value.real.hex(), value.imag.hex()]
    if kind is bytes:
        return ["b", value.hex()]
    if kind in _PLAIN_TAGS:
        return [_PLAIN_TAGS[kind], [encode(item, opaque) for item in value]]
    if kind is dict:
        return ["d", [[encode(key, opaque), encode(item, opaque)] for key, item in value.items()]]
    return opaque(value)


def as_plain(value):
    """A subclass of a plain type (a Counter, a namedtuple, an IntEnum) or an integer of another type (numpy's,
    anything with `__index__`) as the plain value it stands for, None when it is neither. Runs the object's own
    methods, so only where the object is trusted or where its answer is its own business (the program's side)."""
    for base, data in _BASES:
        if isinstance(value, base):
            plain = data(value)
            return plain if type(plain) is base else None
    index = getattr(type(value), "__index__", None)
    if index is not None:
        plain = index(value)
        return plain if type(plain) is int else None
    return None


def find_object(module: str, qualname: str):
    found = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


def decode(data, handle, reference):
    """The value `data` encodes; `handle(number)` and `reference(tag, name, qualname, number)` make the objects
    of the other side. Raises ValueError on anything that is not the wire format."""
    if data is None or type(data) is bool or type(data) is str:
        return data
    if type(data) is not list or not data or type(data[0]) is not str:
        raise ValueError(f"not a value: {str(data)[:80]}")
    tag, rest = data[0], data[1:]
    if tag in ("i", "f", "b") and len(rest) == 1 and type(rest[0]) is str:
        return int(rest[0], 16) if tag == "i" else float.fromhex(rest[0]) if tag == "f" else bytes.fromhex(rest[0])
    if tag == "c" and len(rest) == 2 and all(type(part) is str for part in rest):
        return complex(float.fromhex(rest[0]), float.fromhex(rest[1]))
    if tag in ("l", "t", "s", "z") and len(rest) == 1 and type(rest[0]) is list:
        items = [decode(item, handle, reference) for item in rest[0]]
        return {"l": list, "t": tuple, "s": set, "z": frozenset}[tag](items)
    if tag == "d" and len(rest) == 1 and type(rest[0]) is list:
        pairs = rest[0]
        if not all(type(pair) is list and len(pair) == 2 for pair in pairs):
            raise ValueError("a dict that is not a list of pairs")
        return {decode(key, handle, reference): decode(item, handle, reference) for key, item in pairs}
    if tag == "h" and len(rest) == 1 and type(rest[0]) is int:
        return handle(rest[0])
    if tag == "m" and len(rest) == 2 and type(rest[0]) is str and type(rest[1]) is int:
        return reference(tag, rest[0], "", rest[1])
    if tag == "r" and len(rest) == 3 and type(rest[0]) is str and type(rest[1]) is str and type(rest[2]) is int:
        return reference(tag, rest[0], rest[1], rest[2])
    raise ValueError(f"not a value: {str(data)[:80]}")


# --------------------------------------------------------------------------- running the program


def describe(raised: BaseException) -> str:
    try:
        message = str(raised)  # the program's own __str__, which may raise in turn
    except BaseException:  # noqa: BLE001 - the type alone then
        message = ""
    return f"{type(raised).__name__}: {message}"[:ERROR_CHARS] if message else type(raised).__name__


def exit_message(stop: SystemExit) -> str:
    code = stop.code  # an object of the program's: only plain values are compared or shown
    if code is None or (type(code) in (int, bool) and code == 0):
        return EXITED
    return f"exited with code {repr(code) if type(code) in (int, bool, str) else type(code).__name__}"[:ERROR_CHARS]


def execute(source: str, filename: str, namespace: dict) -> str | None:
    """None when `source` ran to its end; else what stopped it (`EXITED` for sys.exit(0)). The runner runs the
    test with it too."""
    try:
        exec(compile(source, filename, "exec"), namespace)
    except SystemExit as stop:
        return exit_message(stop)
    except BaseException as raised:  # noqa: BLE001 - whatever the code does is its outcome
        return describe(raised)
    return None


class _Objects:
    """The program's objects the runner holds handles to (kept alive, so a handle always means one object)."""

    def __init__(self):
        self.by_handle: dict[int, object] = {}
        self.handles: dict[int, int] = {}  # id(object) -> handle

    def handle(self, value) -> int:
        number = self.handles.get(id(value))
        if number is None:
            number = self.handles[id(value)] = len(self.by_handle)
            self.by_handle[number] = value
        return number

    def opaque(self, value):
        plain = as_plain(value)
        if plain is not None:
            return encode(plain, self.opaque)
        number = self.handle(value)
        if type(value) is types.ModuleType and type(value.__name__) is str:
            return ["m", value.__name__, number]
        return ["h", number]

    def send(self, value):
        try:
            return encode(value, self.opaque)
        except Exception:  # noqa: BLE001 - a cycle, a conversion that raised: the whole value as a handle
            return ["h", self.handle(value)]

    def receive(self, data):
        return decode(data, self.by_handle.__getitem__, lambda tag, name, qualname, number: find_object(name, qualname)
                      if tag == "r" else importlib.import_module(name))


def _flush() -> None:
    for stream in {id(s): s for s in (sys.stdout, sys.__stdout__)}.values():
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - a stream the program replaced or closed; its output is what it is
            pass


def _perform(request: dict, objects: _Objects) -> dict:
    """One call of the runner into the program's objects, and its outcome."""
    op, target = request["op"], objects.by_handle[request["target"]]
    args = [objects.receive(item) for item in request.get("args", [])]
    if op != "call":
        operations = {"getattr": getattr, "setattr": setattr, "delattr": delattr, "getitem": lambda o, k: o[k],
                      "setitem": _setitem, "delitem": _delitem, "len": len, "bool": bool, "str": str, "repr": repr,
                      "iter": iter, "next": next}
        return {"value": objects.send(operations[op](target, *args))}
    kwargs = {name: objects.receive(item) for name, item in request.get("kwargs", {}).items()}
    value = target(*args, **kwargs)
    changed = {}  # the runner's lists, dicts and sets changed in place, which it writes back
    for key, sent, now in [*zip(map(str, range(len(args))), request["args"], args),
                           *((name, request["kwargs"][name], kwargs[name]) for name in kwargs)]:
        if type(now) in (list, dict, set):
            again = objects.send(now)
            if again != sent:
                changed[key] = again
    return {"value": objects.send(value), "changed": changed}


def _setitem(target, key, value):
    target[key] = value


def _delitem(target, key):
    del target[key]


def _serve(objects: _Objects) -> None:
    while True:
        request = _request()
        if request is None:  # the runner is done
            os._exit(0)
        try:
            reply = _perform(request, objects)
        except SystemExit as stop:
            reply = {"exit": exit_message(stop)}
        except BaseException as raised:  # noqa: BLE001 - the runner raises it in the test, by its builtin name
            reply = {"raised": [klass.__name__ for klass in type(raised).__mro__], "message": describe(raised),
                     "args": objects.send(raised.args if type(raised.args) is tuple else ())}
        _flush()
        _reply(reply)


def main() -> None:
    """Run the program the runner sends, then (as a module under test) serve the runner's calls into it."""
    _reply({"ready": True})
    start = _request()
    if start is None:
        os._exit(0)
    sys.path[:] = start["path"]
    sys.argv[:] = ["program.py"]
    sys.set_int_max_str_digits(start["int_max_str_digits"])
    import site  # -S: the builtins site adds (exit, quit, help), without the paths it would add
    site.setquit()
    site.setcopyright()
    site.sethelper()
    sys.stdin = open(0, encoding="utf-8", closefd=False)
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
    module = types.ModuleType(start["module"])  # a real module in sys.modules: dataclasses and pickle look it up
    sys.modules[module.__name__] = module
    stopped = execute(start["code"], "<program>", module.__dict__)
    _flush()
    if start["module"] == "__main__":
        _reply({"done": None if stopped == EXITED else stopped})
        os._exit(0)
    objects = _Objects()
    names = [[name, objects.send(value)] for name, value in list(module.__dict__.items())
             if not (name.startswith("__") and name.endswith("__"))] if stopped is None else []
    _reply({"done": stopped, "names": names})
    _serve(objects)


if __name__ == "__main__":
    main()
