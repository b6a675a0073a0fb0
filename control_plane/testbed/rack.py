"""What a rack (:class:`~control_plane.testbed.nsrack.NamespaceRack`,
:class:`~control_plane.testbed.mnrack.MininetRack`) is to its users: built by :meth:`Rack.up`,
torn down by :meth:`Rack.down`, and a context manager doing both."""

from __future__ import annotations

import abc
from typing import Self


class Rack(abc.ABC):
    """A rack of worker hosts and their switch, up for the ``with`` block."""

    @abc.abstractmethod
    def up(self) -> object:
        """Build the rack."""

    @abc.abstractmethod
    def down(self) -> object:
        """Tear down what :meth:`up` built."""

    def __enter__(self) -> Self:
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()
