"""Why local workers fail when the main script starts a cluster as it is imported.

Local Dask workers are forked from the forkserver or spawned (:mod:`dparallel.cluster.forkserver`);
either way, Python's multiprocessing imports the main script again in each worker before
it runs (its "safe importing of main module" rule). A script that starts a local cluster at
its top level, outside ``if __name__ == "__main__":``, starts it again in every worker, which
fails in the worker; the parent then only hears "Nanny failed to start worker process".
Code read from stdin (``python - < script.py``) cannot be imported again at all.
:func:`refuse_while_bootstrapping` stops such a start in the worker with one line;
:func:`main_script_hint` names the likely cause in the parent's error.
"""

from __future__ import annotations

import multiprocessing
import sys
from pathlib import Path

from dparallel.errors import ClusterError

__all__ = ["main_script_hint", "refuse_while_bootstrapping"]

_GUARD = 'if __name__ == "__main__":'
#: What distributed's nanny says when a worker process died before it reported back.
_WORKER_DIED = "failed to start worker process"


def _bootstrapping() -> bool:
    """Whether this process is a worker still importing its parent's main script."""
    # multiprocessing's own test (spawn._check_not_importing_main) reads the same attribute
    return bool(getattr(multiprocessing.current_process(), "_inheriting", False))


def refuse_while_bootstrapping() -> None:
    """Raise :class:`ClusterError` when a local cluster is started by a worker process that
    is importing the main script again (the script lacks the ``__main__`` guard)."""
    if _bootstrapping():
        raise ClusterError(
            "a local cluster was started while a worker process imported the main script "
            f"again: put the code that starts it under `{_GUARD}` (each worker imports the "
            "main script first)"
        )


def main_script_hint(exc: BaseException) -> str:
    """The likely cause of a failed local cluster start when it is the main script
    (``" (likely cause: ...)"``), or ``""``."""
    if not any(_WORKER_DIED in str(e) for e in _chain(exc)):
        return ""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not isinstance(path, str):  # python -c, the interactive interpreter: nothing to import
        return ""
    if path.startswith("<"):  # "<stdin>"
        return (
            f" (likely cause: the worker processes import the main script again and code "
            f"read from {path} cannot be: save it to a file and start the cluster under "
            f"`{_GUARD}`)"
        )
    try:
        source = Path(path).read_text(errors="replace")
    except OSError:
        return ""
    if "__main__" in source:
        return ""
    return (
        f" (likely cause: the worker processes import the main script {path} again, and "
        f"it starts a cluster as it is imported: put that code under `{_GUARD}`)"
    )


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and its causes and contexts, each once."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not e for e in seen):
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen
