"""The whole input.nn, read as n2p2 reads it: compared with n2p2's own setup log and errors."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import pytest
from n2p2_helpers import ALLOY_SYMFUNCTIONS, alloy_input_nn, alloy_structures, random_weights

from dparallel.errors import InputFormatError
from dparallel.n2p2 import acsf_from_input_nn, read_input_nn, write_input_data
from dparallel.n2p2.binaries import (
    N2p2RunError,
    log_networks,
    log_symmetry_function_lines,
    run_tool,
    stage,
)

if TYPE_CHECKING:
    from pathlib import Path

FULL = alloy_input_nn(
    cutoff="6 0.1",
    scaling="scale_symmetry_functions_sigma\nscale_min_short -0.5\nscale_max_short 2",
    activations="t s l",
    extra="mean_energy -1.25\nconv_energy 3.7\nconv_length 1.6\nnormalize_nodes\n"
    "element_activation_short Cu p r l\nelement_nodes_short Ag 9 5\n"
    "epochs 17\ntest_fraction 0.2\nupdater_type 0\ngradient_type 1\ngradient_adam_eta 0.002\n"
    "kalman_type 0\nwrite_trainpoints\nweights_min -1.0\n",
)


def _n2p2_setup_log(tmp_path: Path, text: str) -> str:
    """n2p2's setup log for ``text`` (nnp-scaling reads settings, elements, SFs, networks)."""
    (tmp_path / "spec.nn").write_text(text)
    write_input_data(tmp_path / "data.in", alloy_structures(2, seed=1))
    stage(tmp_path, {"input.nn": tmp_path / "spec.nn", "input.data": tmp_path / "data.in"})
    run_tool("nnp-scaling", tmp_path, ["1"])
    return (tmp_path / "nnp-scaling.log.0000").read_text()


def test_whole_file_model(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    (tmp_path / "input.nn").write_text(FULL)
    with caplog.at_level(logging.WARNING):
        inp = read_input_nn(tmp_path / "input.nn")
    assert inp.elements == ["Cu", "Ag", "Au"] and inp.nnp_type == "2G"
    assert inp.atom_energy == {"Cu": -3.5, "Ag": -2.25, "Au": 1.75}
    assert (inp.cutoff_type, inp.cutoff_alpha) == (6, 0.1)
    assert inp.n_symmetry_functions == {"Cu": 8, "Ag": 5, "Au": 4}
    assert (inp.scaling.type, inp.scaling.smin, inp.scaling.smax) == ("scalesigma", -0.5, 2.0)
    assert inp.normalization is not None and inp.normalization.conv_length == 1.6
    assert inp.normalize_nodes
    assert inp.networks["Cu"].nodes == (7, 5) and inp.networks["Cu"].activations == ("p", "r", "l")
    assert inp.networks["Ag"].nodes == (9, 5) and inp.networks["Ag"].activations == ("t", "s", "l")
    assert inp.networks["Cu"].activation_names() == ["softplus_n2p2", "relu", "identity"]
    opts = inp.training_options()
    assert opts["epochs"] == 17 and opts["test_fraction"] == 0.2 and opts["seed"] == 12345
    assert opts["optimizer"] == "adam" and opts["lr"] == 0.002
    assert opts["scaling"] == "scalesigma" and opts["scale_min"] == -0.5
    assert "hidden" not in opts  # per-element networks have no single counterpart
    from dparallel.train import TrainingSpec

    TrainingSpec(**opts)  # a valid training config
    warnings = [r for r in caplog.records if "no counterpart" in r.getMessage()]
    assert len(warnings) == 1  # listed once, in file order
    assert warnings[0].getMessage().endswith(": write_trainpoints weights_min")


def test_a_cutoff_is_sized_in_the_units_it_is_read_in(tmp_path: Path) -> None:
    """rc = 60 bohr is 31.8 Å: the whole file reads (its units are not known there), the
    functions in bohr build, and read as Å they are refused naming the line."""
    text = FULL.replace("Cu 2 Cu 0.05 0.0 5.2", "Cu 2 Cu 0.05 0.0 60")
    assert text != FULL
    (tmp_path / "input.nn").write_text(text)
    inp = read_input_nn(tmp_path / "input.nn")
    assert inp.acsf("bohr-hartree").r_cut == pytest.approx(60 * 0.529177, rel=1e-5)
    line = text.splitlines().index("symfunction_short Cu 2 Cu 0.05 0.0 60") + 1
    with pytest.raises(InputFormatError, match=f"line {line}: cutoff rc = 60 Å is beyond 50 Å"):
        inp.acsf(1.0)


def test_kalman_training_keywords_become_the_kalman_optimizer(tmp_path: Path) -> None:
    text = alloy_input_nn(
        cutoff="6 0.1",
        scaling="scale_symmetry_functions",
        activations="t t l",
        extra="updater_type 1\nkalman_type 0\nkalman_epsilon 0.02\n"
        "kalman_q0 0.005\nkalman_qtau 1.5\nkalman_qmin 1e-7\nkalman_eta 0.03\n"
        "kalman_etatau 2.0\nkalman_etamax 2.5\nforce_energy_ratio 3.4\n",
    )
    (tmp_path / "input.nn").write_text(text)
    opts = read_input_nn(tmp_path / "input.nn").training_options()
    want = {"optimizer": "kalman", "kalman_epsilon": 0.02, "kalman_q0": 0.005,
            "kalman_qtau": 1.5, "kalman_qmin": 1e-7, "kalman_eta": 0.03,
            "kalman_etatau": 2.0, "kalman_etamax": 2.5, "kalman_force_components": 3}  # fmt: skip
    assert {k: opts[k] for k in want} == want
    from dparallel.train import TrainingSpec

    TrainingSpec(**opts)
    # its Kalman keys with another optimizer are refused; read_by_optimizer drops them
    from dparallel.errors import ConfigError
    from dparallel.train import parse_training_spec
    from dparallel.train.optimizer_kinds import read_by_optimizer

    adam = {**opts, "optimizer": "adam", "lr": 0.004}
    with pytest.raises(ConfigError, match="kalman_q0"):
        parse_training_spec(adam)
    kept = read_by_optimizer(adam)
    assert not any(k.startswith("kalman_") for k in kept)
    assert kept == {k: v for k, v in adam.items() if not k.startswith("kalman_")}
    assert parse_training_spec(kept).lr == 0.004
    assert read_by_optimizer({**opts, "lr": 0.004}) == opts  # kalman: lr is not its key
    # the fading-memory filter (kalman_type 1) has no counterpart: no optimizer implied
    (tmp_path / "input.nn").write_text(text.replace("kalman_type 0", "kalman_type 1"))
    assert "optimizer" not in read_input_nn(tmp_path / "input.nn").training_options()


def test_use_old_weights_short_starts_from_the_folder(tmp_path: Path) -> None:
    """n2p2 reads weights.XXX.data beside input.nn when the keyword is there (any value):
    training_options() says init_from that folder, and nothing without it."""
    (tmp_path / "input.nn").write_text(alloy_input_nn())
    assert "init_from" not in read_input_nn(tmp_path / "input.nn").training_options()
    (tmp_path / "input.nn").write_text(alloy_input_nn(extra="use_old_weights_short 1"))
    inp = read_input_nn(tmp_path / "input.nn")
    assert inp.training_options()["init_from"] == str(tmp_path)
    assert "use_old_weights_short" not in inp.unused


def test_topology_and_order_equal_n2p2s(n2p2_bin: Path, tmp_path: Path) -> None:
    """Layer sizes, activations (element_* overrides) and symmetry-function order as n2p2."""
    log = _n2p2_setup_log(tmp_path, FULL)
    inp = read_input_nn(tmp_path / "input.nn")
    nets = log_networks(log)
    assert set(nets) == set(inp.elements)
    for e, (sizes, codes) in nets.items():
        net = inp.networks[e]
        assert sizes == [inp.n_symmetry_functions[e], *net.nodes, 1], e
        assert codes == list(net.activations), e
    acsf = acsf_from_input_nn(str(tmp_path / "input.nn"))
    lines = (tmp_path / "input.nn").read_text().splitlines()
    for e, order in log_symmetry_function_lines(log).items():
        assert len(order) == acsf.n_features(e)
        for feature, ln in zip(acsf.features(e), order, strict=True):
            w = lines[ln - 1].split()
            assert w[1] == e and int(w[2]) == feature["type"]
            params = [float(x) for x in w[4 if w[2] == "2" else 5 :]]
            if feature["type"] == 2:
                assert params == [feature["eta"], feature["rs"], feature["rc"]]
            else:
                assert params[:4] == [
                    feature["eta"],
                    feature["lambda"],
                    feature["zeta"],
                    feature["rc"],
                ]
                assert sorted(w[3:5]) == sorted(feature["neighbors"])


def test_element_nodes_keeps_n2p2s_last_hidden_layer(n2p2_bin: Path, tmp_path: Path) -> None:
    """n2p2's element_nodes_short sets every hidden layer but the last (Mode.cpp): so do we."""
    text = alloy_input_nn(extra="element_nodes_short Au 6 9")
    log = _n2p2_setup_log(tmp_path, text)
    assert log_networks(log)["Au"][0][1:3] == [6, 5]
    assert read_input_nn(tmp_path / "input.nn").networks["Au"].nodes == (6, 5)


def _variant(kind: str) -> str:
    base = alloy_input_nn()
    return {
        "missing cutoff_type": base.replace("cutoff_type 6 0.1\n", ""),
        "repeated cutoff_type": base + "cutoff_type 2\n",
        "mixed spellings": base + "symfunction Cu 2 Cu 0.3 0.0 5.2\n",
        "nodes count": base.replace("global_nodes_short 7 5", "global_nodes_short 7"),
        "activation count": base.replace(
            "global_activation_short t s l", "global_activation_short t l"
        ),
        "activation code": base.replace(
            "global_activation_short t s l", "global_activation_short t x l"
        ),
        "partial normalisation": base + "mean_energy 0.5\n",
        "element count": base.replace("number_of_elements 3", "number_of_elements 2"),
        "no hidden layers": base.replace("global_hidden_layers_short 2\n", ""),
        "symfunction element": base + "symfunction_short Cu 2 Ni 0.3 0.0 5.2\n",
        # n2p2 keeps each line's '\r' (its last word 'Ag\r', 'l\r', 'use_short_forces\r'…)
        "windows line ends": base.replace("\n", "\r\n"),
    }[kind]


VARIANTS = [  # (variant, our message, n2p2's message)
    ("missing cutoff_type", "keyword 'cutoff_type' not found", 'Keyword "cutoff_type" not found'),
    ("repeated cutoff_type", "'cutoff_type' appears 2 times", "critical problem"),
    ("mixed spellings", "'symfunction' and 'symfunction_short' are two", "critical problem"),
    ("nodes count", "line 11: inconsistent with global_hidden", '"global_nodes_short"'),
    ("activation count", "line 12: needs 3 codes", '"global_activation_short"'),
    ("activation code", "line 12: unknown activation function 'x'", "Unknown activation"),
    ("partial normalisation", "incorrect usage of normalization", "Incorrect usage of normaliz"),
    ("element count", "line 1: says 2 elements", "Inconsistent number of elements"),
    ("no hidden layers", "number of hidden layers unset", "hidden layers unset"),
    ("symfunction element", "element 'Ni' is not in the elements line", 'key "Ni"'),
    ("windows line ends", "line 1: .*carriage return", 'ERROR: Element "Ag'),
]


@pytest.mark.parametrize("kind,message,_", VARIANTS)
def test_what_n2p2_refuses_is_refused(tmp_path: Path, kind: str, message: str, _: str) -> None:
    path = tmp_path / "input.nn"
    path.write_text(_variant(kind))
    with pytest.raises(InputFormatError, match=message) as info:
        read_input_nn(path)
    assert str(info.value).startswith(str(path))


@pytest.mark.integration
@pytest.mark.parametrize("kind,_,n2p2_message", VARIANTS)
def test_n2p2_refuses_the_same_files(
    n2p2_bin: Path, tmp_path: Path, kind: str, _: str, n2p2_message: str
) -> None:
    """nnp-dataset (which also sets up the normalisation) stops on each file, for that reason."""
    (tmp_path / "input.nn").write_text(_variant(kind))
    write_input_data(tmp_path / "input.data", alloy_structures(1, seed=1))
    with pytest.raises(N2p2RunError, match=n2p2_message):
        run_tool("nnp-dataset", tmp_path, ["0"])


@pytest.mark.integration
def test_what_n2p2_accepts_is_read_alike(n2p2_bin: Path, tmp_path: Path) -> None:
    """'!' comments, the 'symfunction' alias, unknown keywords, sigma next to scale."""
    text = (
        alloy_input_nn(
            scaling="scale_symmetry_functions\nscale_symmetry_functions_sigma ! ignored by n2p2"
        )
        .replace("symfunction_short", "symfunction")
        .replace("elements Au Cu Ag", "elements Au Cu Ag ! comment\nmy_own_keyword 3")
    )
    _n2p2_setup_log(tmp_path, text)
    random_weights(tmp_path)
    run_tool("nnp-dataset", tmp_path, ["0"])
    log = (tmp_path / "nnp-dataset.log.0000").read_text()
    assert "Scaling type::ST_SCALE " in log and 'Unknown keyword "my_own_keyword"' in log
    inp = read_input_nn(tmp_path / "input.nn")
    assert inp.scaling.type == "scale" and inp.elements == ["Cu", "Ag", "Au"]
    assert sum(inp.n_symmetry_functions.values()) == ALLOY_SYMFUNCTIONS.count("\n")
    assert {e: len(v) for e, v in log_symmetry_function_lines(log).items()} == (
        inp.n_symmetry_functions
    )


#: A no-break space (as pasted from a web page) after a keyword that takes no value.
NBSP_TEXT = alloy_input_nn().replace("scale_symmetry_functions\n", "scale_symmetry_functions\xa0\n")


def test_words_are_split_at_blanks_and_tabs_only(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """n2p2 (``reduce``/``split``) separates words at ' ' and '\\t' only: a keyword followed
    by a no-break space is another, unknown keyword there (so no scaling), as here."""
    (tmp_path / "input.nn").write_text(NBSP_TEXT)
    with caplog.at_level(logging.WARNING):
        inp = read_input_nn(tmp_path / "input.nn")
    assert inp.scaling.type == "none"
    assert "'scale_symmetry_functions\\xa0' (line 7)" in caplog.text


@pytest.mark.integration
def test_n2p2_reads_a_keyword_with_a_no_break_space_as_unknown(
    n2p2_bin: Path, tmp_path: Path
) -> None:
    _n2p2_setup_log(tmp_path, NBSP_TEXT)
    random_weights(tmp_path)
    run_tool("nnp-dataset", tmp_path, ["0"])
    log = (tmp_path / "nnp-dataset.log.0000").read_text()
    assert 'Unknown keyword "scale_symmetry_functions\xa0" at line 7' in log
    assert "Scaling type::ST_NONE" in log
