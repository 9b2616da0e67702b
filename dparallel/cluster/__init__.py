"""dparallel.cluster (see docs/)."""
