"""The fast subset's rule (tests/conftest.py): a test is slow when it starts a subprocess, whatever its name."""

from __future__ import annotations

import subprocess
import sys

from conftest import starts_a_subprocess


def _run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvprobe.cli", *args], capture_output=True, text=True)


def _via_helper():
    return _run_cli("--help")


def _via_two_helpers():
    return _via_helper()


def _nested():
    def cli(*args):
        return subprocess.run(list(args))

    return cli


def _imported_inside():
    import subprocess as sp

    return sp


def _in_process_cli():
    from kvprobe.cli import main

    return main(["verify", "--help"])


def _recursive(n: int = 1):
    return _recursive(n - 1) if n else 0


#: The helpers above by name (named directly, they would make the tests below look like subprocess tests).
STARTING = ("_run_cli", "_via_helper", "_via_two_helpers", "_nested", "_imported_inside")
NOT_STARTING = ("_in_process_cli", "_recursive")  # _recursive: a helper that calls itself ends the walk


def test_a_subprocess_is_found_in_the_body_a_nested_function_or_a_helper_of_the_module():
    for name in STARTING:
        assert starts_a_subprocess(globals()[name]), name


def test_an_in_process_command_test_is_not_a_subprocess_test():
    for name in NOT_STARTING:
        assert not starts_a_subprocess(globals()[name]), name


def test_these_tests_are_fast(request):
    assert not any(item.get_closest_marker("slow") for item in request.session.items
                   if item.path.name == "test_slow_marker.py")


def test_the_suites_command_tests_fall_on_the_right_side():
    """The real CLI runs of tests/test_verify_cli.py (through its ``_cli`` helper) are slow; its in-process
    ``main([...])`` tests, ``cli`` in their names, are not."""
    import test_verify_cli as t

    assert starts_a_subprocess(t.test_cli_verify_json)
    assert starts_a_subprocess(t.test_cli_demo_on_tiny_model_prints_all_conditions)
    assert not starts_a_subprocess(t.test_cli_unknown_model_is_a_clear_error)
    assert not starts_a_subprocess(t.test_cli_help_explains_options)
