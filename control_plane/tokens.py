"""The controller's token state: the job tokens it installed, kept outside the desired-state file.

A job's token (``set_job.token``, docs/protocol.md, "Version 2") is a secret every worker of the
job holds. The desired-state file is committed; the tokens must not be, so the controller keeps
them in its own state file, ``tokens.json`` in the state directory (:func:`default_state_dir`):

* ``$NETCO_STATE_DIR`` if set, else ``$XDG_STATE_HOME/netco``, else ``~/.local/state/netco``;
* the directory is created with mode 0700, the file written atomically with mode 0600
  (:func:`host.files.write_atomic`);
* tokens are keyed by the switch's P4Runtime address and the job id, so renaming or moving the
  desired-state file keeps them::

      {"version": 1, "switches": {"127.0.0.1:9559": {"1": 123456}}}

A :class:`~control_plane.controller.Controller` given a :class:`TokenStore` installs a job's
persisted token instead of drawing a new one, and persists what it installed after ``apply``;
so a restarted (empty) switch gets the same token back from ``netco controller apply FILE`` and
running workers keep working.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from host.files import write_atomic
from host.transport.jobfile import SHOWN_HEX_DIGITS, mask_token

log = logging.getLogger(__name__)

#: Environment variable naming the state directory (highest precedence after ``--state-dir``).
ENV_STATE_DIR = "NETCO_STATE_DIR"
#: The state file's name inside the state directory.
FILE_NAME = "tokens.json"
#: Format version of the state file.
VERSION = 1
#: Permission bits of the state file (it holds secrets) and of its directory.
FILE_MODE = 0o600
DIR_MODE = 0o700

__all__ = ["ENV_STATE_DIR", "FILE_NAME", "SHOWN_HEX_DIGITS", "TokenStore", "TokenStoreError",
           "default_state_dir", "mask_token"]


class TokenStoreError(ValueError):
    """The state file cannot be used; one line naming the file and the fix."""


def default_state_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The controller's state directory: ``$NETCO_STATE_DIR``, else ``$XDG_STATE_HOME/netco``,
    else ``~/.local/state/netco``."""
    env = os.environ if environ is None else environ
    if env.get(ENV_STATE_DIR):
        return Path(env[ENV_STATE_DIR]).expanduser()
    if env.get("XDG_STATE_HOME"):
        return Path(env["XDG_STATE_HOME"]).expanduser() / "netco"
    return Path.home() / ".local" / "state" / "netco"


class TokenStore:
    """Job tokens by switch P4Runtime address and job id, in ``DIR/tokens.json``.

    Parameters
    ----------
    directory : str or path-like, optional
        The state directory (``--state-dir``); default :func:`default_state_dir`.

    Notes
    -----
    The file is read once, on first use (:meth:`load`); :meth:`put` merges into what is on
    disk at that moment, under an exclusive lock (``.tokens.lock`` beside the file), so two
    controllers writing different switches or jobs do not lose each other's tokens.
    """

    def __init__(self, directory: str | os.PathLike | None = None) -> None:
        self.directory = Path(directory).expanduser() if directory is not None else default_state_dir()
        self._data: dict[str, dict[int, int]] | None = None

    @property
    def path(self) -> Path:
        """The state file."""
        return self.directory / FILE_NAME

    # -- reading ----------------------------------------------------------------------------
    def load(self) -> dict[str, dict[int, int]]:
        """Switch address -> {job id -> token}, as on disk (empty when there is no file yet).

        Raises
        ------
        TokenStoreError
            The file cannot be read, is not JSON, or does not hold tokens (one line naming the
            file and the fix).
        """
        if self._data is None:
            self._data = self._read()
        return self._data

    def _read(self) -> dict[str, dict[int, int]]:
        p = self.path
        try:
            text = p.read_text()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise TokenStoreError(f"token state file {p}: cannot read it ({exc.strerror or exc}); "
                                  f"fix its permissions or give another --state-dir") from None
        try:
            obj = json.loads(text)
        except ValueError as exc:
            raise TokenStoreError(f"token state file {p}: not JSON ({exc}); remove it (the next "
                                  f"`netco controller apply` keeps the tokens the switches hold) or "
                                  f"restore it from a backup") from None
        return _parse(obj, p)

    def get(self, job_id: int, switches: Iterable[str]) -> int | None:
        """The persisted token of job ``job_id`` on the first of ``switches`` (P4Runtime
        addresses, in the order given) that has one, or None."""
        data = self.load()
        for address in switches:
            token = data.get(address, {}).get(job_id)
            if token:
                return token
        return None

    # -- writing ----------------------------------------------------------------------------
    def check_writable(self) -> None:
        """Create the state directory (mode 0700) if needed and check a file can be written
        there, so that an apply does not find out only after writing the switches.

        Raises
        ------
        TokenStoreError
            Naming the directory and the fix.
        """
        self._mkdir()
        if not os.access(self.directory, os.W_OK | os.X_OK):
            raise TokenStoreError(f"token state directory {self.directory}: not writable; fix its "
                                  f"permissions or give another --state-dir (or {ENV_STATE_DIR})")

    def put(self, tokens: Mapping[str, Mapping[int, int]]) -> None:
        """Persist ``tokens`` (switch address -> {job id -> token}), merged into the file.

        Raises
        ------
        TokenStoreError
            The directory cannot be created or the file cannot be written (one line).
        """
        if not any(tokens.values()):
            return
        self._mkdir()
        with self._locked():
            data = self._read()          # what is on disk now: another controller may have written
            before = {a: dict(per) for a, per in data.items()}
            for address, per_job in tokens.items():
                if per_job:
                    data.setdefault(address, {}).update({int(j): int(t) for j, t in per_job.items()})
            self._data = data
            if data == before and self.path.exists():
                return                   # nothing new (``apply --watch`` persists every round)
            text = json.dumps(_dump(data), indent=2, sort_keys=True) + "\n"
            try:
                write_atomic(self.path, text, mode=FILE_MODE)
            except OSError as exc:
                raise TokenStoreError(f"token state file {self.path}: cannot write it "
                                      f"({exc.strerror or exc}); fix the permissions of "
                                      f"{self.directory} or give another --state-dir") from None
        self._data = data
        log.debug("tokens persisted in %s: %s", self.path, {a: sorted(j) for a, j in tokens.items()})

    def _mkdir(self) -> None:
        try:
            self.directory.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        except OSError as exc:
            raise TokenStoreError(f"token state directory {self.directory}: cannot create it "
                                  f"({exc.strerror or exc}); give another --state-dir (or "
                                  f"{ENV_STATE_DIR})") from None
        if not self.directory.is_dir():
            raise TokenStoreError(f"token state directory {self.directory}: not a directory; give "
                                  f"another --state-dir (or {ENV_STATE_DIR})")

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        lock = self.directory / ".tokens.lock"
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, FILE_MODE)
        except OSError as exc:
            raise TokenStoreError(f"token state directory {self.directory}: cannot write in it "
                                  f"({exc.strerror or exc}); fix its permissions or give another "
                                  f"--state-dir") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)       # closing releases the lock


def _parse(obj: Any, path: Path) -> dict[str, dict[int, int]]:
    """The ``switches`` mapping of a parsed state file, checked."""
    def bad(where: str, why: str) -> TokenStoreError:
        return TokenStoreError(f"token state file {path}: {where}: {why}; fix it or remove the "
                               f"file (the next `netco controller apply` keeps the tokens the "
                               f"switches hold)")

    if not isinstance(obj, dict) or not isinstance(obj.get("switches", {}), dict):
        raise bad("(top level)", 'must be {"switches": {"HOST:PORT": {"JOB_ID": TOKEN}}}')
    if obj.get("version", VERSION) != VERSION:
        raise bad("version", f"{obj.get('version')!r} is not {VERSION} (written by another netco)")
    out: dict[str, dict[int, int]] = {}
    for address, per_job in obj.get("switches", {}).items():
        if not isinstance(per_job, dict):
            raise bad(f"switches.{address}", "must map job ids to tokens")
        jobs: dict[int, int] = {}
        for job, token in per_job.items():
            if not (isinstance(job, str) and job.isdigit() and int(job) <= 0xFFFF):
                raise bad(f"switches.{address}.{job}", "a job id must be 0..65535")
            if isinstance(token, bool) or not isinstance(token, int) or not 0 < token <= 0xFFFFFFFF:
                raise bad(f"switches.{address}.{job}", f"{token!r} is not a token (1..2^32-1)")
            jobs[int(job)] = token
        out[address] = jobs
    return out


def _dump(data: Mapping[str, Mapping[int, int]]) -> dict[str, Any]:
    return {"version": VERSION,
            "switches": {a: {str(j): t for j, t in sorted(per.items())}
                         for a, per in sorted(data.items())}}
