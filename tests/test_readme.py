"""The Python example of README.md runs as written and gives what its comments name."""

from __future__ import annotations

from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_python_example_runs() -> None:
    text = README.read_text()
    start = text.index("```python")
    example = text[start + len("```python") : text.index("```", start + 3)]
    namespace: dict = {}
    exec(compile(example, str(README), "exec"), namespace)  # our own README
    out, acsf = namespace["out"], namespace["acsf"]
    # CH3OH + H2O: 6 H, 1 C, 2 O atoms; out["C"].values, .atom_index, .pairs as commented
    assert {e: len(out[e].atom_index) for e in ("H", "C", "O")} == {"H": 6, "C": 1, "O": 2}
    assert out["C"].values.shape == (1, acsf.n_features("C"))
    assert set(out["C"].pairs) == {"H", "C", "O"}
    assert callable(namespace["Calculator"]) and callable(namespace["envsum"])


def test_the_layout_names_every_package() -> None:
    # datasets/ and lammps/ were missing
    text = README.read_text()
    layout = text[text.index("## Layout") :]
    packages = {p.parent.name for p in (README.parent / "dparallel").glob("*/__init__.py")}
    assert {p for p in packages if f"{p}/" not in layout} == set()
