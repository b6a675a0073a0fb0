"""host.errors: one-line option errors shared by the switch's and the controller's front ends."""

from __future__ import annotations

from argparse import Namespace

import pytest

from control_plane import options as controller_options
from host.errors import OptionError, UsageError, check_options, readable_file
from host.softswitch import options as switch_options


def test_readable_file_names_the_flag(tmp_path):
    f = tmp_path / "a.pem"
    f.write_text("x")
    assert readable_file(str(f), "--tls-cert") == f
    with pytest.raises(OptionError, match=r"^--tls-cert .*/nope.pem: no such file$"):
        readable_file(str(tmp_path / "nope.pem"), "--tls-cert")
    with pytest.raises(OptionError, match="no such file"):
        readable_file(str(tmp_path), "--p4info")          # a folder is not a file


def test_check_options_turns_an_option_error_into_the_front_ends_error():
    def bad(args: Namespace) -> None:
        raise OptionError(f"--slots {args.slots}: give 1..4")

    with pytest.raises(UsageError, match=r"^--slots 9: give 1..4$") as info:
        check_options(bad, Namespace(slots=9), UsageError)
    assert info.value.__cause__ is None and info.value.__suppress_context__
    with pytest.raises(OptionError):
        check_options(bad, Namespace(slots=9))
    check_options(lambda args: None, Namespace())


def test_the_front_ends_share_one_option_error():
    assert switch_options.OptionError is controller_options.OptionError is OptionError
