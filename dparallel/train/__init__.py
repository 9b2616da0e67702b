"""dparallel.train (see docs/)."""
