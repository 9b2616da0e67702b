"""dparallel.descriptors (see docs/)."""
