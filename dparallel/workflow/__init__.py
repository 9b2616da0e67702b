"""dparallel.workflow (see docs/)."""
