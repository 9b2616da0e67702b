"""``dparallel ingest`` / ``dparallel info`` driven as a user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import ase.io
import numpy as np
import pytest

from dparallel.cli.main import main
from dparallel.io.synthetic import random_structures
from dparallel.store import open_store
from dparallel.types import StructureBatch

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def xyz(tmp_path, rng):
    path = tmp_path / "in.xyz"
    ase.io.write(path, random_structures(25, rng, max_atoms=10), format="extxyz")
    with open(path, "a") as f:
        f.write("2\nProperties=species:S:1:pos:R:3\nH 0 0 0\nZz 0 0 1\n")
    return path


def test_ingest_skip_info_json_resume(tmp_path, xyz, capsys):
    out = tmp_path / "s.zarr"
    args = ["ingest", str(xyz), "-o", str(out), "--on-error", "skip", "--partition-atoms", "30"]
    assert main([*args, "-q"]) == 0
    assert "25 structures" in capsys.readouterr().out
    assert main(["info", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    ref = StructureBatch.from_ase(ase.io.read(xyz, ":25"))
    assert info["n_structures"] == 25 and info["n_atoms"] == ref.n_atoms
    assert info["complete"] is True
    assert info["partitions_done"] == info["partitions_total"] > 1
    assert info["elements"] == sorted(info["elements"], key=["H", "C", "O", "Si", "Cu"].index)
    assert (
        info["skipped"] == [{"index": 25, "reason": info["skipped"][0]["reason"]}]
        and "unknown element 'Zz'" in info["skipped"][0]["reason"]
    )
    assert "structures/positions" in info["arrays"]
    assert open_store(out).read_structures().equals(ref)
    # a second run resumes: nothing left to write
    assert main([*args, "-q"]) == 0
    assert "(0 written" in capsys.readouterr().out
    assert main(["info", str(out)]) == 0
    text = capsys.readouterr().out
    assert "complete" in text and "unknown element 'Zz'" in text


def test_ingest_errors_exit_2(tmp_path, xyz, capsys):
    out = tmp_path / "s.zarr"
    assert main(["ingest", str(xyz), "-o", str(out), "-q"]) == 2
    err = capsys.readouterr().err
    assert f"{xyz}, line " in err and "structure 25: unknown element 'Zz'" in err
    assert main(["ingest", str(xyz), "-o", str(out), "-q", "--on-error", "skip"]) == 2
    assert "another source or config" in capsys.readouterr().err  # raise-config store exists
    assert (
        main(["ingest", str(xyz), "-o", str(out), "-q", "--on-error", "skip", "--overwrite"]) == 0
    )
    assert main(["ingest", str(tmp_path / "none.xyz"), "-o", str(out), "-q"]) == 2
    assert "input file not found" in capsys.readouterr().err


@pytest.mark.integration
def test_python_m_dparallel_subprocess(tmp_path, xyz):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = tmp_path / "s.zarr"
    cmd = [sys.executable, "-m", "dparallel"]
    subprocess.run(
        [*cmd, "ingest", str(xyz), "-o", str(out), "--on-error", "skip"],
        check=True,
        env=env,
        capture_output=True,
        timeout=120,
    )
    res = subprocess.run(
        [*cmd, "info", str(out), "--json"],
        check=True,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    info = json.loads(res.stdout)
    for key in (
        "n_structures",
        "n_atoms",
        "elements",
        "complete",
        "skipped",
        "arrays",
        "partitions_done",
        "partitions_total",
    ):
        assert key in info
    assert info["n_structures"] == 25


def test_a_run_that_skipped_every_structure_is_an_error_naming_why(tmp_path, capsys):
    # it ended "0 structures, …, 2 skipped" with exit 0, and `train` then said "the
    # training split is empty … lower them, or add structures"
    path = tmp_path / "empty.xyz"
    path.write_text("0\nenergy=0.0\n0\nenergy=1.0\n")
    out = tmp_path / "out.zarr"
    assert main(["ingest", str(path), "-o", str(out), "-q", "--on-error", "skip"]) == 2
    assert capsys.readouterr().err == (
        f"dparallel ingest: error: every structure of {path} was skipped (2): {out} holds "
        f"none; `dparallel info {out}` says why\n"
    )
    assert open_store(out).info()["complete"]  # kept: the reasons are in it


def test_a_bad_structure_says_what_is_kept_and_how_to_go_on(tmp_path, capsys):
    # ingest stopped with the structure's error alone, leaving a store whose rerun with
    # --on-error skip was then refused as "made from another source or config"
    path = tmp_path / "one_empty.xyz"
    path.write_text("1\nenergy=0.5\nH 0 0 0\n0\nenergy=0.0\n")
    out = tmp_path / "out.zarr"
    assert main(["ingest", str(path), "-o", str(out), "-q"]) == 2
    assert capsys.readouterr().err == (
        f"dparallel ingest: error: {path}, line 4, structure 1: structure has no atoms; "
        f"{out} keeps its 0 done partitions of 1: fix the file (then rerun with --overwrite), "
        "or leave such structures out with --on-error skip --overwrite\n"
    )
    assert (
        main(["ingest", str(path), "-o", str(out), "-q", "--on-error", "skip", "--overwrite"]) == 0
    )
    assert open_store(out).n_structures == 1


def test_an_input_error_before_any_partition_says_nothing_of_the_store_there(tmp_path, capsys):
    """An error met opening the source (an unknown --format, a header that does not
    parse) comes before this run wrote anything: the store already at -o (another
    dataset's, say) is not its, so no '--overwrite' hint (it said 'keeps its 1 done
    partitions … rerun with --overwrite', which would replace that store)."""
    data = tmp_path / "d.xyz"
    data.write_text("1\nenergy=0.5\nH 0 0 0\n")
    out = tmp_path / "s.zarr"
    assert main(["ingest", str(data), "-o", str(out), "-q"]) == 0
    capsys.readouterr()
    bad = tmp_path / "bad.xyz"
    bad.write_text("not a count\nenergy=0.5\nH 0 0 0\n")
    for argv in (["ingest", str(data), "-o", str(out), "-q", "--format", "extxzy"],
                 ["ingest", str(bad), "-o", str(out), "-q", "--format", "extxyz"]):  # fmt: skip
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("dparallel ingest: error: ") and "--overwrite" not in err, err
    assert open_store(out).n_structures == 1


def test_info_source_counts_describe_the_file_and_the_top_level_what_is_stored(tmp_path, capsys):
    """``source.n_atoms`` is the atoms the file's frames declare, a broken frame's too (a
    last frame whose count line says 50 and the file ends after 2 atom lines; a frame whose
    count 7 runs into the next one); ``n_atoms`` is what the store holds
    (docs/store-format.md, "Root attributes")."""
    header = "Properties=species:S:1:pos:R:3"
    two = f"2\n{header}\nH 0 0 0\nH 0 0 0.74\n"
    path = tmp_path / "broken.xyz"
    path.write_text(f"{two}7\n{header}\nH 0 0 0\nH 0 0 1\n{two}50\n{header}\nH 0 0 0\nH 0 0 1\n")
    out = tmp_path / "s.zarr"
    assert main(["ingest", str(path), "-o", str(out), "--on-error", "skip", "-q"]) == 0
    capsys.readouterr()
    assert main(["info", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["source"]["n_structures"], info["source"]["n_atoms"]) == (4, 2 + 7 + 2 + 50)
    assert (info["n_structures"], info["n_atoms"], info["n_skipped"]) == (2, 4, 2)


def test_ingest_label_keys_and_their_refusal_for_n2p2(tmp_path, rng, capsys):
    """``--energy-key``/``--forces-key`` store what ASE reads under those keys; for an n2p2
    file (fixed places) they are refused in one line before anything is written."""
    frames = random_structures(6, rng, max_atoms=6)
    for k, atoms in enumerate(frames):
        atoms.calc = None
        atoms.info["dft_energy"] = -1.0 - k
        atoms.arrays["dft_forces"] = rng.normal(size=(len(atoms), 3))
    path = tmp_path / "dft.xyz"
    ase.io.write(path, frames, format="extxyz")
    out = tmp_path / "s.zarr"
    keys = ["--energy-key", "dft_energy", "--forces-key", "dft_forces"]
    assert main(["ingest", str(path), "-o", str(out), "-q", *keys]) == 0
    got = open_store(out).read_structures()
    read = ase.io.read(path, ":")
    assert got.energy.tolist() == [a.info["dft_energy"] for a in read]
    assert (got.forces == np.concatenate([a.arrays["dft_forces"] for a in read])).all()
    from dparallel.n2p2 import write_input_data

    data = tmp_path / "input.data"
    write_input_data(data, frames, "ase")
    capsys.readouterr()
    assert main(["ingest", str(data), "-o", str(tmp_path / "n.zarr"), "-q", *keys[:2]]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "energy_key cannot be given for an n2p2 file" in err
    assert not (tmp_path / "n.zarr").exists()


def test_a_broken_frame_counting_more_atoms_than_any_memory_is_named_not_allocated(
    tmp_path, capsys
):
    """A count line claiming 10^12 atoms in a frame the next count line cuts short sized
    every partition's atom slots by it: ``ingest`` died allocating 931 GiB (a traceback);
    it names the frame, and ``--on-error skip`` stores the others."""
    header = "Properties=species:S:1:pos:R:3"
    two = f"2\n{header}\nH 0 0 0\nH 0 0 0.74\n"
    path = tmp_path / "huge_count.xyz"
    path.write_text(f"{two}1000000000000\n{header}\nH 0 0 0\nH 0 0 1\n{two}")
    out = tmp_path / "s.zarr"
    assert main(["ingest", str(path), "-o", str(out), "-q"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"dparallel ingest: error: {path}, line 5, structure 1: atom count 1000000000000 on "
        "line 5 is too large: line 9 starts the next frame after 2 atom lines"
    ), err
    skip = ["--on-error", "skip", "--overwrite"]
    assert main(["ingest", str(path), "-o", str(out), "-q", *skip]) == 0
    stored = open_store(out).info()
    assert (stored["n_structures"], stored["n_atoms"], stored["n_skipped"]) == (2, 4, 1)
