"""Command-line options generated from a dataclass's fields (how ``kvprobe run STUDY`` gets its flags).

Each public field becomes one option named after it (``n_groups`` -> ``--n-groups``),
its help text the ``#:`` comment line(s) directly above the field in the class
source, its type the field's annotation:

===========================  ===============================================
annotation                   on the command line
===========================  ===============================================
``int``, ``float``, ``str``  one value
``X | None``                 one value, or ``none`` (also ``all``) for None
``bool``                     ``--name`` (default False) / ``--no-name`` (default True)
``bool | None``              ``--name yes|no|auto`` (auto = None)
``tuple[T, ...]``            comma-separated values
===========================  ===============================================

Options a user does not give are not passed at all (argparse's ``SUPPRESS``), so the
dataclass default always applies: the command line never overrides a default it was
not given.

Example::

    @dataclass
    class Params:
        #: How many groups to run (None: all).
        n_groups: int | None = None

    parser = argparse.ArgumentParser()
    add_field_options(parser, Params)
    Params(**vars(parser.parse_args(["--n-groups", "3"])))   # Params(n_groups=3)
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import types
import typing
from typing import Any, Callable

_NONE_WORDS = ("none", "all")
_TRUE = ("yes", "true", "1", "on")
_FALSE = ("no", "false", "0", "off")


def at_least(low: int, kind: type = int) -> Callable[[str], Any]:
    """argparse type: a number of ``kind`` that is at least ``low`` (counts, sizes, budgets)."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind.__name__}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {text}")
        return value
    return parse


def flag(field_name: str) -> str:
    """The option of a field: ``n_groups`` -> ``--n-groups``."""
    return "--" + field_name.replace("_", "-")


def public_fields(cls: type) -> list[dataclasses.Field]:
    """The dataclass fields that are parameters: not ``_private``, shown in ``repr`` and compared."""
    return [f for f in dataclasses.fields(cls) if not f.name.startswith("_") and f.init and f.compare]


def field_comments(cls: type) -> dict[str, str]:
    """The ``#:`` comment above each field, searched through the class and its bases."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        try:
            lines = inspect.getsource(klass).splitlines()
        except (OSError, TypeError):
            continue
        pending: list[str] = []
        for line in lines:
            stripped = line.strip()
            if stripped.startswith("#:"):
                pending.append(stripped[2:].strip())
                continue
            m = re.match(r"([A-Za-z_]\w*)\s*:", stripped)
            if m and pending:
                out[m.group(1)] = " ".join(pending)
            pending = []
    return out


def _unwrap(annotation: Any) -> tuple[Any, bool]:
    """(the annotation without ``| None``, whether None is allowed)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional = len(args) < len(typing.get_args(annotation))
        return (args[0] if len(args) == 1 else str), optional
    return annotation, False


def _scalar(kind: Any, option: str) -> Callable[[str], Any]:
    """Parser of one value of ``kind`` whose error names ``option``."""
    if kind is bool:
        def parse_bool(text: str) -> bool:
            low = text.strip().lower()
            if low in _TRUE:
                return True
            if low in _FALSE:
                return False
            raise argparse.ArgumentTypeError(f"expected yes or no, got {text!r}")
        return parse_bool
    convert = kind if kind in (int, float) else str

    def parse(text: str) -> Any:
        try:
            return convert(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {convert.__name__}, got {text!r}") from None
    return parse


def _value_parser(annotation: Any, option: str) -> tuple[Callable[[str], Any], str]:
    """(parser of the option's text, metavar) for a field annotation."""
    kind, optional = _unwrap(annotation)
    if typing.get_origin(kind) is tuple:
        item = _scalar(typing.get_args(kind)[0] if typing.get_args(kind) else str, option)

        def parse_tuple(text: str) -> Any:
            if optional and text.strip().lower() in _NONE_WORDS:
                return None
            return tuple(item(part) for part in text.split(",") if part.strip())
        return parse_tuple, "A,B,..."
    one = _scalar(kind, option)
    if kind is bool and optional:
        def parse_auto(text: str) -> Any:
            return None if text.strip().lower() == "auto" else one(text)
        return parse_auto, "yes|no|auto"
    if optional:
        def parse_optional(text: str) -> Any:
            return None if text.strip().lower() in _NONE_WORDS else one(text)
        return parse_optional, (kind.__name__.upper() if isinstance(kind, type) else "VALUE") + "|none"
    return one, kind.__name__.upper() if isinstance(kind, type) else "VALUE"


def _show(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return "none" if value is None else str(value)


def _turned_off(text: str) -> str:
    """Help of a ``--no-NAME`` flag from the field's comment, which says what the field does when on: the flag
    turns that off (``--no-operations``: "Turn off (on by default): run the cache operations ...")."""
    said = text[:1].lower() + text[1:] if text[:2] != text[:2].upper() else text
    return f"Turn off (on by default): {said}" if text else "Turn off (on by default)."


def add_field_options(parser: argparse.ArgumentParser | Any, cls: type, reserved: set[str] = frozenset()) -> None:
    """Add one option per public field of dataclass ``cls`` to ``parser`` (or an argument group).

    Raises:
        ValueError: a field's option is one of ``reserved`` (options the command already has).
    """
    comments = field_comments(cls)
    hints = typing.get_type_hints(cls)
    for f in public_fields(cls):
        option = flag(f.name)
        if option in reserved:
            raise ValueError(f"{cls.__name__}.{f.name}: {option} is already a common option of the command")
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else None)  # type: ignore[misc]
        text = comments.get(f.name, "")
        annotation = hints.get(f.name, str)
        kind, optional = _unwrap(annotation)
        if kind is bool and not optional:
            if default:
                parser.add_argument("--no-" + f.name.replace("_", "-"), dest=f.name, action="store_false",
                                    default=argparse.SUPPRESS, help=_turned_off(text))
            else:
                parser.add_argument(option, dest=f.name, action="store_true", default=argparse.SUPPRESS,
                                    help=f"{text} (default: off)")
            continue
        parse, metavar = _value_parser(annotation, option)
        shown = "auto" if kind is bool and default is None else _show(default)
        parser.add_argument(option, dest=f.name, type=parse, metavar=metavar, default=argparse.SUPPRESS,
                            help=f"{text} (default: {shown})")


def given_fields(cls: type, namespace: argparse.Namespace) -> dict[str, Any]:
    """The field values a user gave on the command line (the others are absent)."""
    names = {f.name for f in public_fields(cls)}
    return {k: v for k, v in vars(namespace).items() if k in names}
