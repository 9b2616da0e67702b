"""Whether a cluster's workers run the client's dparallel and the libraries its numbers
come from: a worker from another image or environment would compute (or store) something
else than the client expects, unnoticed."""

from __future__ import annotations

import functools
import hashlib
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dparallel.errors import ClusterError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from distributed import Client

__all__ = ["LIBRARIES", "check_worker_installs", "installed", "refuse_other_install"]

#: Libraries whose version changes what a featurize task computes or how it writes a store.
LIBRARIES = ("torch", "numpy", "zarr", "numba")


@functools.cache
def installed() -> dict[str, str]:
    """This process's dparallel (its version and a hash of its source files, which tells
    two commits of one version apart) and the versions of :data:`LIBRARIES`."""
    import dparallel

    root = Path(dparallel.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    found = {"dparallel": f"{dparallel.__version__} (source {digest.hexdigest()[:12]})"}
    for name in LIBRARIES:  # a build's local label (torch 2.13.0+cu126 on a GPU worker,
        try:  # +cpu beside it) computes the same numbers: not told apart
            found[name] = metadata.version(name).split("+")[0]
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def check_worker_installs(client: Client) -> None:
    """Raise :class:`ClusterError` naming each worker whose dparallel or libraries differ
    from this process's (or that cannot import dparallel at all); workers that join later
    are not seen here (each featurize task checks its own: :func:`refuse_other_install`)."""
    mine = installed()
    # one round trip to every worker; a worker's exception comes back as its answer
    theirs: dict[str, Any] = client.run(installed, on_error="return")
    failed = {a: exc for a, exc in sorted(theirs.items()) if isinstance(exc, BaseException)}
    if failed:  # dparallel absent, or too old to have this: the probe cannot even unpickle
        (address, exc), *others = failed.items()
        also = f" and {len(others)} more worker(s)" if others else ""
        raise ClusterError(
            f"worker {address}{also} cannot run this dparallel ({_said(exc)}): install the "
            f"client's dparallel ({mine['dparallel']}) in every worker's environment (the "
            "same image or pip install) and restart them"
        )
    differ = {address: _differences(found, mine) for address, found in sorted(theirs.items())}
    differ = {address: what for address, what in differ.items() if what}
    if differ:
        first, *rest = differ.items()
        more = f" and {len(rest)} more worker(s)" if rest else ""
        raise ClusterError(
            f"worker {first[0]} runs {first[1]}{more}: its results would differ from this "
            "client's; give every worker the client's dparallel and libraries (the same "
            "image or environment) and restart them"
        )


def refuse_other_install(client: Mapping[str, str]) -> None:
    """In a task: raise :class:`ClusterError` when this worker's dparallel or libraries
    differ from ``client`` (the client's :func:`installed`), before anything is computed;
    catches a worker that joined after :func:`check_worker_installs`."""
    what = _differences(installed(), client, here="client")
    if what:
        from distributed import get_worker

        try:
            worker = f"worker {get_worker().address}"
        except ValueError:  # not in a worker
            worker = "this process"
        raise ClusterError(
            f"{worker} runs {what}: its results would differ from the client's; give every "
            "worker the client's dparallel and libraries (the same image or environment) and "
            "restart them"
        )


def _differences(found: Mapping[str, str], want: Mapping[str, str], here: str = "here") -> str:
    """What of ``found`` differs from ``want`` (``name version (here version)``), or ''."""
    return ", ".join(
        f"{name} {found.get(name, 'not reported')} ({here} {version})"
        for name, version in want.items()
        if found.get(name) != version
    )


def _said(exc: BaseException) -> str:
    """``exc`` in one line; distributed hands an exception it could not unpickle back as a
    plain ``Exception`` of its repr (``Exception("ImportError('…')")``): that repr alone."""
    text = " ".join(str(exc).split())
    return text if type(exc) is Exception else f"{type(exc).__name__}: {text}"
