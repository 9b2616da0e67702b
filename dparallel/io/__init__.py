"""dparallel.io (see docs/)."""
