"""Blockwise Walsh–Hadamard transform in torch (unnormalised butterflies).

The butterfly order — stride 1, 2, 4, …, pairs ``(i, i + h)`` inside groups of ``2h``, new
values ``(a + b, a − b)`` — is the one ``_fused.c`` uses, so both paths give bit-identical
float32 results. Multiply by ``1/√B`` for the orthonormal transform, which is its own inverse.
"""

from __future__ import annotations

import torch


def fwht_(x: torch.Tensor, block: int) -> torch.Tensor:
    """Unnormalised Walsh–Hadamard transform over consecutive blocks of ``block`` elements.

    Parameters
    ----------
    x : torch.Tensor
        1-D float tensor whose length is a multiple of ``block``.
    block : int
        Power of two.

    Returns
    -------
    torch.Tensor
        The transformed tensor (a new tensor; ``x`` is not modified).
    """
    n = x.numel()
    if n % block:
        raise ValueError(f"length {n} is not a multiple of block {block}")
    y = x.reshape(-1, block)
    h = 1
    while h < block:
        v = y.view(-1, block // (2 * h), 2, h)
        a = v[:, :, 0, :]
        b = v[:, :, 1, :]
        y = torch.stack((a + b, a - b), dim=2).view(-1, block)
        h *= 2
    return y.reshape(n)
