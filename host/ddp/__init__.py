"""THC as a PyTorch DDP communication hook: ``ddp_model.register_comm_hook(state, thc_hook)``,
or through a switch in one call: ``attach(ddp_model)`` (docs/attach.md)."""

from host.ddp.attach import AttachError, attach, comm_state, raise_hook_error
from host.ddp.hook import NonFiniteGradientError, THCHookState, thc_hook

__all__ = ["AttachError", "NonFiniteGradientError", "THCHookState", "attach", "comm_state",
           "raise_hook_error", "thc_hook"]
