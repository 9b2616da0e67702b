"""dparallel.workflow: ingest, featurize (task + driver), statistics, workflow spec and run."""
