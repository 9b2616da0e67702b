"""dparallel.store (see docs/)."""
