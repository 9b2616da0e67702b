"""Raw (autograd-free) ``envsum``/``sensesum``/``featsum`` per backend module, on validated
tensors with at least one pair; :mod:`dparallel.kernels.neighbor_sums` wires and picks them.
Beside them: what the backend switches ask (``availability``: does numba import, the error
for an unknown name; ``triton_env``: is Triton interpreted) and the pairs grouped by atom
that the numba and Triton sums visit (``segments``)."""
