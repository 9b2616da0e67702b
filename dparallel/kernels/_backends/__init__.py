"""Raw (autograd-free) implementations of envsum / sensesum / featsum.

Each backend module exposes ``envsum``, ``sensesum`` and ``featsum`` taking validated,
contiguous CPU or device tensors with at least one pair, and returning fresh tensors.
Autograd wiring and backend selection live in :mod:`dparallel.kernels.neighbor_sums`.
"""
