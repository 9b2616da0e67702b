"""dparallel.dashboard (see docs/)."""
