"""dparallel.kernels (see docs/)."""
