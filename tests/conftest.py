"""Shared pytest fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

#: n2p2's water example (../shared/n2p2/water beside the repository, or $N2P2_WATER).
WATER = Path(
    os.environ.get("N2P2_WATER", Path(__file__).resolve().parents[2] / "shared/n2p2/water")
)


@pytest.fixture
def rng() -> np.random.Generator:
    """A seeded random generator, fresh for each test."""
    return np.random.default_rng(20261122)


@pytest.fixture(autouse=True)
def _client_starts_given_up_end_with_their_test():
    """Let a client start that ``start_within`` gave up (a refused address) end before the
    next test: its thread keeps trying until the connect timeout. (Such a start once held
    dask's global ``scheduler`` setting meanwhile, and a later test's xarray reads failed
    with "no Client active"; the client is now made the default only once connected.)"""
    import threading

    yield
    for thread in threading.enumerate():
        if thread.name == "dparallel-client-start":
            thread.join(timeout=30)


@pytest.fixture(scope="session")
def water() -> Path:
    """n2p2's water example (input.nn, input.data in Bohr/Hartree); skips when absent."""
    if not (WATER / "input.nn").is_file() or not (WATER / "input.data").is_file():
        pytest.skip(f"n2p2's water example not found at {WATER} (set N2P2_WATER)")
    return WATER


def _mount(*argv: str) -> str | None:
    """Run ``mount``/``umount`` with ``argv``; why it failed, or ``None``."""
    import subprocess

    done = subprocess.run(argv, capture_output=True, text=True)
    return None if done.returncode == 0 else (done.stderr.strip() or f"exit {done.returncode}")


@pytest.fixture
def tmpfs(tmp_path: Path):
    """``tmpfs(size)``: a new tmpfs of ``size`` (``"120k"``, ``"1m"``) mounted at a new
    folder of ``tmp_path``, unmounted after the test; ``tmpfs.resize(folder, size)`` remounts
    it (room freed or taken away), ``tmpfs.fill(folder)`` takes all its room. Needs root and
    mount permission; skips otherwise."""
    mounted: list[Path] = []

    def mount(size: str) -> Path:
        folder = tmp_path / f"tmpfs{len(mounted)}"
        folder.mkdir()
        why = _mount("mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder))
        if why is not None:
            pytest.skip(f"cannot mount a tmpfs here (needs root): {why}")
        mounted.append(folder)
        return folder

    def resize(folder: Path, size: str) -> None:
        why = _mount("mount", "-o", f"remount,size={size}", str(folder))
        assert why is None, why

    def fill(folder: Path) -> None:
        """Take every free byte of the tmpfs at ``folder`` (a file ``filler`` in it)."""
        import errno

        fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            for block in (1 << 20, 4096, 1):  # the last partial page too
                while True:
                    try:
                        os.write(fd, b"\0" * block)
                    except OSError as exc:
                        assert exc.errno == errno.ENOSPC, exc
                        break
        finally:
            os.close(fd)

    mount.resize = resize  # type: ignore[attr-defined]
    mount.fill = fill  # type: ignore[attr-defined]
    try:
        yield mount
    finally:
        for folder in reversed(mounted):
            _mount("umount", "-l", str(folder))


@pytest.fixture
def read_only_view(tmp_path: Path):
    """``read_only_view(folder)``: ``folder`` seen through a read-only bind mount (writes
    there fail with EROFS, as on a shared dataset); unmounted after the test. Needs root
    and mount permission; skips otherwise."""
    mounted: list[Path] = []

    def view(folder: Path) -> Path:
        target = tmp_path / f"ro{len(mounted)}" / folder.name
        target.mkdir(parents=True)
        why = _mount("mount", "--bind", str(folder), str(target))
        if why is not None:
            pytest.skip(f"cannot bind-mount here (needs root): {why}")
        mounted.append(target)
        why = _mount("mount", "-o", "remount,ro,bind", str(target))
        if why is not None:
            pytest.skip(f"cannot remount a bind mount read-only here: {why}")
        return target

    try:
        yield view
    finally:
        for target in reversed(mounted):
            _mount("umount", "-l", str(target))
