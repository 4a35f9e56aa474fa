"""Command-line options generated from dataclass fields (kvprobe.parameters)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import pytest

from kvprobe.parameters import add_field_options, field_comments, flag, given_fields


@dataclass
class Params:
    #: How many groups (None: all).
    n_groups: int | None = None
    #: Context lengths,
    #: comma-separated.
    lengths: tuple[int, ...] = (0, 1000)
    #: Tasks to run.
    tasks: tuple[str, ...] = ("qa2",)
    #: Use the development split.
    dev: bool = False
    #: Run the cache operations.
    operations: bool = True
    #: Chat template (None: when the tokenizer has one).
    chat: bool | None = None
    #: A weight.
    weight: float = 0.5
    #: A name.
    source: str = "fixtures"
    _cache: list | None = field(default=None, repr=False, compare=False)


def parse(*argv: str) -> Params:
    parser = argparse.ArgumentParser()
    add_field_options(parser, Params)
    return Params(**given_fields(Params, parser.parse_args(list(argv))))


def test_no_option_keeps_every_default():
    assert parse() == Params()


def test_each_annotation_parses():
    p = parse("--n-groups", "3", "--lengths", "0,300", "--tasks", "qa2,qa3", "--dev", "--no-operations",
              "--chat", "no", "--weight", "0.25", "--source", "x.json")
    assert p == Params(n_groups=3, lengths=(0, 300), tasks=("qa2", "qa3"), dev=True, operations=False, chat=False,
                       weight=0.25, source="x.json")
    assert parse("--n-groups", "all").n_groups is None and parse("--n-groups", "none").n_groups is None
    assert parse("--chat", "auto").chat is None and parse("--chat", "yes").chat is True


@pytest.mark.parametrize("argv", [["--n-groups", "x"], ["--lengths", "0,a"], ["--chat", "maybe"],
                                  ["--weight", "heavy"], ["--operations"], ["--cache", "1"]])
def test_bad_values_and_unknown_options_are_refused(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        parse(*argv)
    assert exit_.value.code == 2
    assert capsys.readouterr().err


def test_comments_are_the_help_and_private_fields_are_not_options():
    comments = field_comments(Params)
    assert comments["lengths"] == "Context lengths, comma-separated."
    parser = argparse.ArgumentParser()
    add_field_options(parser, Params)
    text = parser.format_help()
    assert "How many groups (None: all). (default: none)" in " ".join(text.split())
    assert "(default: auto)" in text and "--no-operations" in text and "--cache" not in text
    assert flag("n_groups") == "--n-groups"


def test_a_field_may_not_take_a_common_option():
    with pytest.raises(ValueError, match="--dev is already a common option"):
        add_field_options(argparse.ArgumentParser(), Params, reserved={"--dev"})


@pytest.mark.parametrize("low", [0, 1, 2])
def test_at_least_accepts_its_bound_and_refuses_one_below_by_name(low):
    """Every count option (``--workers``, ``--steps``, ``--n-groups``...) is parsed by ``at_least``: the bound
    itself passes, one below it is refused with the bound and the value in the message."""
    import argparse

    from kvprobe.parameters import at_least

    parse = at_least(low)
    assert parse(str(low)) == low and parse(str(low + 1)) == low + 1
    with pytest.raises(argparse.ArgumentTypeError, match=rf"must be at least {low}, got {low - 1}$"):
        parse(str(low - 1))
    with pytest.raises(argparse.ArgumentTypeError, match="expected int, got 'x'"):
        parse("x")
