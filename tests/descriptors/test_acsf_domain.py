"""ACSF parameters outside their domain are refused when the descriptor is built (before
any run), with the function named; n2p2's ζ < 1 is accepted."""

from __future__ import annotations

import pytest

from dparallel.descriptors.acsf import ACSF
from dparallel.errors import DescriptorError, InputFormatError


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"radial": [(-0.1, 0.0)]}, r"eta = -0.1 < 0"),
        ({"narrow": [(-0.1, 1.0, 1.0, 0.0)]}, r"eta = -0.1 < 0"),
        ({"narrow": [(0.1, 1.0, 0.5, 0.0)]}, r"lambda must be -1 or 1, got 0.5"),
        ({"wide": [(0.1, 1.0, 2.0, 0.0)]}, r"lambda must be -1 or 1, got 2 \(an n2p2 input.nn may"),
        ({"radial": [(0.1, 6.0)]}, r"rs = 6 lies at or beyond the cutoff rc = 6"),
        ({"radial": [(0.1, 9.0)]}, r"rs = 9 lies at or beyond"),
        ({"radial": [(0.1, 0.0), (0.1, 0.0)]}, r"symmetry functions 0 and 1 of H are the same"),
        ({"radial": [(0.1, 0.0)], "r_cut": 1e6}, r"beyond 50 Å"),
        ({"radial": [(float("nan"), 0.0)]}, r"finite"),
        ({"radial": [(0.1, 0.0)], "r_cut": float("inf")}, r"finite"),
    ],
)
def test_out_of_domain_parameters_are_refused(kwargs, message) -> None:
    args = {"r_cut": 6.0, **kwargs}
    with pytest.raises(DescriptorError, match=message):
        ACSF.uniform(["H", "O"], **args)


def test_n2p2_domain_is_kept() -> None:
    acsf = ACSF.uniform(
        ["H"], 6.0, radial=[(0.0, 0.0), (0.5, 5.9)], narrow=[(0.1, 0.5, -1.0, 0.0)],
        wide=[(0.0, 1.0, 1.0, 2.0)],
    )  # fmt: skip
    assert len(acsf.features("H")) == 4


def test_the_spec_refuses_before_the_run() -> None:
    from pydantic import ValidationError

    from dparallel.descriptors.acsf_spec import ACSFSpec

    with pytest.raises(ValidationError, match="finite number"):
        ACSFSpec(elements=["H"], r_cut=float("inf"), radial=[(0.1, 0.0)])
    with pytest.raises(DescriptorError, match=r"lambda must be -1 or 1"):
        ACSFSpec(elements=["H"], narrow=[(0.1, 1.0, 0.3, 0.0)]).build()


@pytest.fixture(autouse=True)
def _warnings_not_yet_given() -> None:
    """Each test sees the lenient warnings as a fresh process would (they are logged once)."""
    from dparallel.descriptors import acsf_functions

    acsf_functions._warned.clear()


def test_an_accepted_n2p2_parameter_is_warned_once_per_process(caplog) -> None:
    """The same set built again (every load of a potential builds it 2-3 times) repeated
    each warning as often."""
    spec = ACSF.uniform(["H"], 6.0, narrow=[(0.1, 1.0, 1.0, 0.0)]).to_dict()
    spec["features"]["H"][0]["eta"] = -0.1
    with caplog.at_level("WARNING"):
        for _ in range(3):
            ACSF.from_dict(spec)
    assert len([r for r in caplog.records if "accepted, as n2p2" in r.getMessage()]) == 1


def test_n2p2_parameters_are_warned_in_words_that_agree(caplog) -> None:
    """A stored spec or input.nn (lenient) keeps eta < 0 and lambda other than ±1, saying so."""
    strict = ACSF.uniform(["H"], 6.0, narrow=[(0.1, 1.0, 1.0, 0.0)])
    spec = strict.to_dict()
    spec["features"]["H"][0].update({"eta": -0.1, "lambda": 0.0})
    with caplog.at_level("WARNING"):
        ACSF.from_dict(spec)
    assert [r.getMessage() for r in caplog.records] == [
        "symmetry function type 3 of H with H-H: eta = -0.1 < 0 grows with distance: "
        "accepted, as n2p2 accepts it",
        "symmetry function type 3 of H with H-H: lambda is 0, not -1 or 1: accepted, as "
        "n2p2 accepts it",
    ]


def test_a_shift_at_or_beyond_the_cutoff_is_kept_from_n2p2_files(caplog) -> None:
    """rs >= rc: refused in a set made here (a likely slip), kept with a warning from a stored
    spec or input.nn, as n2p2 keeps it (its value is the Gaussian's tail inside rc, not 0:
    test_acsf_n2p2.py compares it with n2p2)."""
    spec = ACSF.uniform(["H"], 6.0, radial=[(0.1, 0.0)], wide=[(0.1, 1.0, 1.0, 0.0)]).to_dict()
    spec["features"]["H"][0]["rs"] = 6.0
    spec["features"]["H"][1]["rs"] = 7.5
    with caplog.at_level("WARNING"):
        acsf = ACSF.from_dict(spec)
    assert [f["rs"] for f in acsf.features("H")] == [6.0, 7.5]
    assert "rs = 7.5 lies at or beyond the cutoff rc = 6: accepted, as n2p2" in caplog.text


def test_an_accepted_n2p2_function_survives_pickling() -> None:
    """An ACSF holding n2p2's eta < 0 or lambda other than ±1 unpickles (dask sends it)."""
    import pickle

    spec = ACSF.uniform(["H"], 6.0, narrow=[(0.1, 1.0, 1.0, 0.0)]).to_dict()
    spec["features"]["H"][0].update({"eta": -0.1, "lambda": 0.5})
    acsf = ACSF.from_dict(spec)
    assert pickle.loads(pickle.dumps(acsf)) == acsf


def test_a_cutoff_beyond_50_angstrom_gets_the_units_hint_of_its_source(tmp_path) -> None:
    """Only an n2p2 input.nn is told about bohr; a set made in Å (YAML or Python) is told Å."""
    from pydantic import ValidationError

    from dparallel.descriptors.acsf_spec import ACSFSpec
    from dparallel.n2p2 import acsf_from_input_nn

    with pytest.raises(ValidationError, match=r"r_cut = 60 Å is beyond 50 Å") as spec:
        ACSFSpec(elements=["Cu"], r_cut=60, radial=[(0.5, 0.0)])
    assert "acsf parameters are in Å" in str(spec.value) and "input.nn" not in str(spec.value)
    with pytest.raises(DescriptorError, match=r"check the units: rc is in Å\)$"):
        ACSF.uniform(["Cu"], r_cut=60, radial=[(0.5, 0.0)])
    nn = tmp_path / "input.nn"
    nn.write_text(
        "number_of_elements 1\nelements Cu\ncutoff_type 2\nsymfunction_short Cu 2 Cu 0.01 0 120\n"
    )
    with pytest.raises(InputFormatError, match=r"line 4: .*an input.nn in bohr needs units"):
        acsf_from_input_nn(str(nn))
