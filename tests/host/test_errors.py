"""host.errors: one-line option errors shared by the switch's and the controller's front ends."""

from __future__ import annotations

import os
import shutil
import tempfile
from argparse import Namespace
from pathlib import Path

import pytest

from control_plane import options as controller_options
from host.errors import OptionError, UsageError, check_options, readable_file, writable_file
from host.softswitch import options as switch_options


def test_readable_file_names_the_flag(tmp_path):
    f = tmp_path / "a.pem"
    f.write_text("x")
    assert readable_file(str(f), "--tls-cert") == f
    with pytest.raises(OptionError, match=r"^--tls-cert .*/nope.pem: no such file$"):
        readable_file(str(tmp_path / "nope.pem"), "--tls-cert")
    with pytest.raises(OptionError, match="no such file"):
        readable_file(str(tmp_path), "--p4info")          # a folder is not a file


def test_writable_file_names_the_flag_and_leaves_nothing_behind(tmp_path):
    out = tmp_path / "r.json"
    assert writable_file(str(out), "--out") == out and not out.exists()
    out.write_text("old")
    assert writable_file(str(out), "--out") == out and out.read_text() == "old"
    with pytest.raises(OptionError, match=r"^--out .*/no-dir/r.json: no folder .*/no-dir$"):
        writable_file(str(tmp_path / "no-dir" / "r.json"), "--out")
    with pytest.raises(OptionError, match=r"^--plot .*: a folder, not a file$"):
        writable_file(str(tmp_path), "--plot")
    (tmp_path / "f").write_text("")
    with pytest.raises(OptionError, match=r"^--plot .*/f/p.png: no folder .*/f$"):
        writable_file(str(tmp_path / "f" / "p.png"), "--plot")


def _refusal(path: str) -> str:
    """writable_file's message for ``path``, as this user or, for root (who writes anywhere),
    as uid 65534 in a forked child."""
    try:
        if os.geteuid() != 0:
            writable_file(path, "--out")
            return ""
    except OptionError as exc:
        return str(exc)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.setgid(65534)
            os.setuid(65534)
            writable_file(path, "--out")
            msg = ""
        except OptionError as exc:
            msg = str(exc)
        os.write(w, msg.encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        msg = f.read().decode()
    os.waitpid(pid, 0)
    return msg


def test_writable_file_refuses_a_folder_this_user_cannot_write():
    base = Path(tempfile.mkdtemp(prefix="netco-errors-"))
    try:
        base.chmod(0o755)
        ro = base / "ro"
        ro.mkdir(mode=0o555)
        assert _refusal(str(ro / "r.json")) == f"--out {ro}/r.json: cannot write it (Permission denied)"
        (base / "closed").mkdir(mode=0o700)   # another user's folder: exists, cannot be entered
        if os.geteuid() == 0:
            closed = base / "closed" / "sub"
            closed.mkdir()
            assert _refusal(str(closed / "r.json")) == (f"--out {closed}/r.json: cannot write it "
                                                       "(Permission denied)")
    finally:
        shutil.rmtree(base)


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
