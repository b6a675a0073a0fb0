"""THC as a PyTorch DDP communication hook: ``ddp_model.register_comm_hook(state, thc_hook)``."""

from host.ddp.hook import NonFiniteGradientError, THCHookState, thc_hook

__all__ = ["NonFiniteGradientError", "THCHookState", "thc_hook"]
