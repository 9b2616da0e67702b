"""dparallel.neighbors (see docs/)."""
