"""``dparallel featurize SOURCE -o STORE``: descriptors for every structure, on Dask."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from dparallel.cli._options import (
    add_cluster_arguments,
    add_json_argument,
    add_source_arguments,
    cluster_kwargs,
    connect_early,
    default_log_file,
    local_argument,
    local_forkserver,
    on_connect,
    refuse_unwritable_target,
    route_cluster_logs,
)
from dparallel.cli._progress import (
    FeaturizeProgress,
    closing_lines,
    refuse_all_skipped,
    store_line,
    train_options,
)
from dparallel.errors import ConfigError

if TYPE_CHECKING:
    import argparse


def add_parser(subparsers: Any) -> None:
    """Register the ``featurize`` sub-command."""
    p = subparsers.add_parser(
        "featurize",
        help="compute descriptors into a zarr store on a Dask cluster (resumable)",
        description="Partition SOURCE by estimated work and compute neighbor lists, ACSF and/or "
        "neighbor sums (optionally per-pair derivatives) in Dask worker processes, each "
        "partition written to its own region of STORE. Re-running computes only partitions "
        "not yet done.",
    )
    add_source_arguments(p, "source")
    spec = p.add_mutually_exclusive_group(required=True)
    spec.add_argument(
        "--descriptors",
        metavar="FILE",
        type=local_argument("a descriptors file"),
        help="descriptors YAML",
    )
    spec.add_argument(
        "--workflow",
        metavar="FILE",
        type=local_argument("a workflow file"),
        help="workflow YAML (its descriptors and cluster)",
    )
    p.add_argument(
        "--derivatives", action="store_true", help="store ∂G_i/∂r_ij (for force training)"
    )
    p.add_argument(
        "--scaling-data", metavar="PATH", help="also write n2p2 scaling.data (a path or a URL)"
    )
    add_cluster_arguments(p)
    add_json_argument(p)
    p.set_defaults(func=run)


def source_settings(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` with ``--format``, ``--units``, ``--on-error``, ``--energy-key``,
    ``--forces-key`` and ``--partition-atoms`` that the command line leaves out taken from
    ``--workflow``'s ``dataset`` and ``partitioning`` sections (as ``dparallel run`` reads
    them; the format, units and label keys, which describe the dataset file, only for
    SOURCE = ``dataset.path``), else the defaults (guess, ase, raise, derived), and its
    ``cluster`` section as ``args.workflow_cluster`` (``None`` without a workflow: local),
    which the cluster options override as ``dparallel run``'s do; ``args`` itself is
    updated and returned (``main`` reads ``log_file`` from it)."""
    keys: dict[str, object] = {
        "format": None, "units": "ase", "on_error": "raise", "partition_atoms": None,
        "energy_key": None, "forces_key": None,
    }  # fmt: skip
    settings = dict(keys)
    args.workflow_cluster = None
    if args.workflow:
        from dparallel.workflow.spec import load_workflow

        spec = load_workflow(args.workflow)
        dataset, atoms = spec.dataset, spec.partitioning.atoms
        # its format, units and label keys are its dataset file's: another SOURCE's are
        # the defaults
        if _same_path(args.source, dataset.path):
            settings.update(format=dataset.format, units=dataset.units)
            settings.update(energy_key=dataset.energy_key, forces_key=dataset.forces_key)
        settings.update(on_error=dataset.on_error, partition_atoms=atoms)
        args.workflow_cluster = spec.cluster
    for key, value in settings.items():  # in place: main() reads log_file etc. from args
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def _same_path(a: str, b: str) -> bool:
    """Whether two configured locations name one file, however written
    (:func:`~dparallel.io.location.location_key`)."""
    from dparallel.io.location import LocationError, location_key

    try:
        return location_key(a) == location_key(b)
    except LocationError:  # a URL naming no bucket: reading it fails with that error
        return a == b


def run(args: argparse.Namespace) -> int:
    """Featurize and print a summary."""
    from dataclasses import replace

    args = source_settings(args)
    protect = (args.source, args.descriptors or args.workflow)
    with local_forkserver(
        args, args.workflow_cluster
    ):  # first: it warms up while the driver starts up
        refuse_unwritable_target(args.output, overwrite=args.overwrite, protect=protect)
        if args.scaling_data:
            from dparallel.workflow.featurize import refuse_scaling_target

            log = args.log_file or default_log_file(args.output)
            refuse_scaling_target(args.scaling_data, args.output, (*protect, log))
        route_cluster_logs(args, args.output)  # before the cluster logs anything

    from dparallel.cluster import discard_connection

    # then the cluster, in the background: it starts while the source is indexed
    connecting = connect_early(args, args.workflow_cluster)

    from dparallel.workflow.descriptors_spec import load_descriptors
    from dparallel.workflow.featurize import FeaturizeOptions, featurize, write_scaling_data

    try:  # an n2p2 input.nn's lengths follow the data's --units
        section = None if args.descriptors else "descriptors"
        descriptors = load_descriptors(
            args.descriptors or args.workflow, section=section, data_units=args.units
        )
        if args.scaling_data and descriptors.acsf is None:  # before any work, not after it
            raise ConfigError(
                f"--scaling-data writes n2p2's scaling.data of the ACSF features, and "
                f"{args.descriptors or args.workflow} has no acsf section (it has "
                f"{', '.join(descriptors.descriptors())}): drop --scaling-data or add acsf"
            )
    except BaseException:
        discard_connection(connecting)
        raise
    if args.derivatives and not descriptors.derivatives:
        descriptors = replace(descriptors, derivatives=True)
    options = FeaturizeOptions(
        format=args.format,
        units=args.units,
        on_error=args.on_error,
        energy_key=args.energy_key,
        forces_key=args.forces_key,
        partition_atoms=args.partition_atoms,
        overwrite=args.overwrite,
        repair=args.repair,
        protect=(args.descriptors or args.workflow,),
        torch_threads=args.torch_threads,
        progress=FeaturizeProgress(quiet=args.quiet),
        on_connect=on_connect(args),
        connecting=connecting,
        **cluster_kwargs(args, args.workflow_cluster),
    )
    result = featurize(args.source, args.output, descriptors, options)
    store = result.store
    print(store_line(result, "computed", result.partitions_computed, args.json))
    refuse_all_skipped(result, args.source)
    if args.scaling_data:
        write_scaling_data(store, args.scaling_data, statistics=result.statistics)
        print(f"scaling data: {args.scaling_data}", file=sys.stderr)
    if not args.json:  # the store's summary is all --json prints
        next_lines = closing_lines(
            result.seconds, store=str(store.target), train_options=train_options(descriptors)
        )
        print("\n".join(next_lines))
    return 0
