"""THC as a PyTorch DDP communication hook: ``ddp_model.register_comm_hook(state, thc_hook)``,
or through a switch in one call: ``attach(ddp_model)`` (docs/attach.md).

Names are imported on first use (PEP 562), so :mod:`host.ddp.baselines`' compressor names
load without torch (``netco train --help``, issue 36).
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING

from host.lazy import lazy_getattr

_EXPORTS = {
    "AttachError": "host.ddp.attach",
    "attach": "host.ddp.attach",
    "comm_state": "host.ddp.attach",
    "raise_hook_error": "host.ddp.attach",
    "NonFiniteGradientError": "host.ddp.hook",
    "THCHookState": "host.ddp.hook",
    "thc_hook": "host.ddp.hook",
}

__all__ = ["AttachError", "NonFiniteGradientError", "THCHookState", "attach", "comm_state",
           "raise_hook_error", "thc_hook"]

if TYPE_CHECKING:  # pragma: no cover
    from host.ddp.attach import AttachError, attach, comm_state, raise_hook_error
    from host.ddp.hook import NonFiniteGradientError, THCHookState, thc_hook


__getattr__ = lazy_getattr(globals(), _EXPORTS)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """Importing the submodule ``host.ddp.attach`` binds it on its package, where the name is
    the function's: that binding is skipped, so ``from host.ddp import attach`` is the function
    whichever was imported first."""

    def __setattr__(self, name: str, value: object) -> None:
        if not (name in _EXPORTS and isinstance(value, types.ModuleType)):
            super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
