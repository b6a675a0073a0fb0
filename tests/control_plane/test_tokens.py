"""The controller's token state file (control_plane/tokens.py): where it lives, its modes, what
it holds, and one-line errors for a file it cannot use."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import finsy as fy
import pytest

from control_plane.config import parse_config
from control_plane.controller import Controller
from control_plane.placement import JOBS_TABLE
from control_plane.tokens import (
    TokenStore,
    TokenStoreError,
    default_state_dir,
    mask_token,
)


def test_default_state_dir_precedence(tmp_path: Path) -> None:
    home = Path.home()
    assert default_state_dir({}) == home / ".local" / "state" / "netco"
    assert default_state_dir({"XDG_STATE_HOME": str(tmp_path / "xdg")}) == tmp_path / "xdg" / "netco"
    assert default_state_dir({"XDG_STATE_HOME": str(tmp_path / "xdg"),
                              "NETCO_STATE_DIR": str(tmp_path / "n")}) == tmp_path / "n"


def test_tests_never_use_the_home_state_dir() -> None:
    """tests/conftest.py points every test at its own directory."""
    d = TokenStore().directory
    assert d == Path(os.environ["NETCO_STATE_DIR"])
    assert not str(d).startswith(str(Path.home() / ".local"))


def test_put_get_modes_and_format(tmp_path: Path) -> None:
    store = TokenStore(tmp_path / "state" / "netco")
    assert store.get(1, ["127.0.0.1:9559"]) is None           # no file yet
    store.put({"127.0.0.1:9559": {1: 0xDEADBEEF, 2: 7}, "10.0.0.1:9559": {1: 5}})
    assert stat.S_IMODE(store.directory.stat().st_mode) == 0o700
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    assert json.loads(store.path.read_text()) == {
        "version": 1, "switches": {"10.0.0.1:9559": {"1": 5},
                                   "127.0.0.1:9559": {"1": 0xDEADBEEF, "2": 7}}}
    fresh = TokenStore(store.directory)                       # another process reads it
    assert fresh.get(1, ["127.0.0.1:9559", "10.0.0.1:9559"]) == 0xDEADBEEF
    assert fresh.get(1, ["10.0.0.1:9559", "127.0.0.1:9559"]) == 5   # first switch given wins
    assert fresh.get(2, ["10.0.0.1:9559", "127.0.0.1:9559"]) == 7
    assert fresh.get(3, ["127.0.0.1:9559"]) is None


def test_put_merges_with_what_another_controller_wrote(tmp_path: Path) -> None:
    a, b = TokenStore(tmp_path), TokenStore(tmp_path)
    a.load()
    b.put({"s2:1": {4: 44}})
    a.put({"s1:1": {3: 33}})             # a's view predates b's write: nothing is lost
    assert TokenStore(tmp_path).load() == {"s1:1": {3: 33}, "s2:1": {4: 44}}


def test_unchanged_tokens_do_not_rewrite_the_file(tmp_path: Path) -> None:
    store = TokenStore(tmp_path)
    store.put({"s1:1": {3: 33}})
    before = store.path.stat().st_mtime_ns
    os.utime(store.path, ns=(before - 10**9, before - 10**9))
    store.put({"s1:1": {3: 33}})
    assert store.path.stat().st_mtime_ns == before - 10**9


@pytest.mark.parametrize(("text", "why"), [
    ("{not json", "not JSON"),
    ('["a"]', "(top level): must be"),
    ('{"switches": {"s:1": {"x": 1}}}', "switches.s:1.x: a job id must be 0..65535"),
    ('{"switches": {"s:1": {"1": 0}}}', "switches.s:1.1: 0 is not a token"),
    ('{"switches": {"s:1": {"1": "12"}}}', "switches.s:1.1: '12' is not a token"),
    ('{"version": 9, "switches": {}}', "version: 9 is not 1"),
])
def test_a_corrupt_file_is_one_line_naming_file_and_fix(tmp_path: Path, text: str, why: str) -> None:
    store = TokenStore(tmp_path)
    store.path.write_text(text)
    with pytest.raises(TokenStoreError) as exc:
        store.load()
    msg = str(exc.value)
    assert msg.startswith(f"token state file {store.path}: ") and why in msg and "\n" not in msg
    assert "remove" in msg


def test_unreadable_file_and_uncreatable_dir(tmp_path: Path) -> None:
    store = TokenStore(tmp_path)
    store.path.mkdir()                   # a folder where the file should be: cannot be read
    with pytest.raises(TokenStoreError, match=r"cannot read it .*--state-dir"):
        store.load()
    (tmp_path / "file").write_text("")
    blocked = TokenStore(tmp_path / "file" / "sub")
    with pytest.raises(TokenStoreError, match=r"token state directory .*: cannot create it"):
        blocked.put({"s:1": {1: 2}})


def test_mask_shows_two_hex_digits_only() -> None:
    assert mask_token(0xDEADBEEF) == "******ef"
    assert mask_token(1) == "******01"


CFG = {
    "switches": [{"name": "s1", "address": "127.0.0.1:1", "addr": "10.0.0.254",
                  "target": "softswitch"},
                 {"name": "s2", "address": "127.0.0.1:2", "addr": "10.0.0.253",
                  "target": "softswitch"}],
    "hosts": [{"name": "h1", "ip": "10.0.0.1", "attach": "s1:1"},
              {"name": "h2", "ip": "10.0.0.2", "attach": "s2:1"}],
    "jobs": [{"name": "a", "id": 1, "members": ["h1"]}, {"name": "b", "id": 2, "members": ["h2"]}],
}


def test_controller_takes_given_then_persisted_then_drawn(tmp_path: Path) -> None:
    cfg = parse_config(CFG)
    store = TokenStore(tmp_path)
    store.put({"127.0.0.1:1": {1: 111}, "127.0.0.1:2": {1: 999}})   # job 1 is on s1 only
    ctl = Controller(cfg, state=store)
    assert ctl.tokens[1] == 111 and ctl.token_source == {1: "persisted", 2: "drawn"}
    ctl = Controller(cfg, tokens={1: 5}, state=store)
    assert ctl.tokens[1] == 5 and ctl.token_source[1] == "given"
    assert Controller(cfg).tokens[1] != 111                          # no state: a fresh draw


def test_rotate_token_pins_a_new_token(tmp_path: Path) -> None:
    ctl = Controller(parse_config(CFG), state=TokenStore(tmp_path))
    old = ctl.tokens[1]
    new = ctl.rotate_token("a")
    assert new != old and ctl.tokens[1] == new and 1 in ctl.pinned
    (job,) = [e for e in ctl.desired["s1"]
              if isinstance(e, fy.P4TableEntry) and e.table_id == JOBS_TABLE]
    assert job.action.args["token"] == new          # the desired state carries the new token
