"""Each private or patched third-party member swiftlike relies on (utils/contact_points.py) still exists in the
installed version, with the parameters we pass or receive: an upgrade that renames one fails here, by name."""
import importlib
import importlib.util
import inspect
import re
import warnings

import pytest

from swiftlike.utils.contact_points import CONTACT_POINTS
from paths import REPO

ROOT = REPO / "swiftlike"
MODULE_OF = {"transformers": "transformers", "trl": "trl", "peft": "peft", "megatron-core": "megatron.core",
             "vllm": "vllm", "ray": "ray"}


def resolve(path: str):
    """The object at `module:Qual.name`, and for an attribute entry the class and the attribute's name."""
    module_name, _, qualname = path.partition(":")
    with warnings.catch_warnings():  # TRL's "experimental" and megatron's "no Transformer Engine" notices
        warnings.simplefilter("ignore")
        obj = importlib.import_module(module_name)
    parts = qualname.split(".")
    for part in parts[:-1]:
        obj = getattr(obj, part)
    return obj, parts[-1]


def assigned_in_source(cls, name: str) -> bool:
    """`self.<name> =` (or `+=`, or an annotated assignment) somewhere in the class or the classes it derives from."""
    pattern = re.compile(rf"self\.{re.escape(name)}\s*(:[^=\n]*)?[+\-*/]?=(?!=)")
    for klass in inspect.getmro(cls):
        try:
            if pattern.search(inspect.getsource(klass)):
                return True
        except (OSError, TypeError):
            continue
    return False


@pytest.mark.parametrize("point", CONTACT_POINTS, ids=lambda p: p.path)
def test_contact_point_still_exists(point):
    if importlib.util.find_spec(MODULE_OF[point.library]) is None:
        pytest.skip(f"{point.library} is not installed")
    owner, name = resolve(point.path)
    if point.kind == "attribute":
        assert hasattr(owner, name) or assigned_in_source(owner, name), \
            f"{point.library}: {point.path} is gone; {point.where} relies on it ({point.why})"
        return
    assert hasattr(owner, name), f"{point.library}: {point.path} is gone; {point.where} relies on it ({point.why})"
    target = getattr(owner, name)
    if point.params:
        parameters = inspect.signature(target).parameters
        missing = [p for p in point.params if p not in parameters]
        assert not missing, (f"{point.library}: {point.path} lost parameter(s) {missing} "
                             f"(has {list(parameters)}); {point.where} passes or receives them")


@pytest.mark.parametrize("point", CONTACT_POINTS, ids=lambda p: p.path)
def test_contact_point_names_files_of_ours(point):
    for where in point.where.split(", "):
        assert (ROOT / where).is_file(), f"{point.path}: {where} is not a file under swiftlike/"
        member = point.path.rpartition(".")[2].rpartition(":")[2]
        assert member in (ROOT / where).read_text(encoding="utf-8"), \
            f"{where} no longer mentions {member}: update or drop the contact point {point.path}"


def test_every_override_of_a_private_trainer_member_is_listed():
    """A new `def _name` in a class of ours that derives from a library's Trainer must be listed (or be ours)."""
    listed = {p.path.rpartition(".")[2] for p in CONTACT_POINTS}
    private = set()
    from transformers import Trainer
    for path in [*ROOT.joinpath("train").glob("*.py"), *ROOT.joinpath("rl").rglob("*.py")]:
        for name in re.findall(r"^    def (_[a-z]\w*)\(", path.read_text(encoding="utf-8"), re.M):
            if hasattr(Trainer, name):
                private.add(name)
    assert private <= listed, f"overrides of Trainer's private members not in contact_points.py: {private - listed}"
