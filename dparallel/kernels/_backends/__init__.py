"""Raw (autograd-free) ``envsum``/``sensesum``/``featsum`` per backend module, on validated
tensors with at least one pair; :mod:`dparallel.kernels.neighbor_sums` wires and picks them."""
