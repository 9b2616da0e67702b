"""Safe torch files and the model file, without a training run."""

from __future__ import annotations

import os
import struct
import zipfile
from typing import TYPE_CHECKING

import pytest
import torch

from dparallel.errors import TrainingError
from dparallel.nn import HDNNP, load_model, load_torch_file, model_file, save_torch_file

if TYPE_CHECKING:
    from pathlib import Path


class _Evil:
    """Unpickling this runs a command (what a crafted file does)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):  # noqa: ANN204
        return (os.system, (f"touch {self.marker}",))


def _model() -> HDNNP:
    torch.manual_seed(0)
    return HDNNP(["Cu", "Au"], {"Cu": 3, "Au": 2}, hidden=(4,)).double()


def test_model_file_round_trip(tmp_path: Path) -> None:
    model = _model()
    save_torch_file(model_file(model, {"epochs": 1}, {"kind": "x"}, "acsf"), tmp_path / "model.pt")
    assert [p.name for p in tmp_path.iterdir()] == ["model.pt"]  # no temporary file left
    back, data = load_model(tmp_path)  # a directory means its model.pt
    assert data["descriptor_kind"] == "acsf" and data["spec"] == {"epochs": 1}
    assert back.config() == model.config() and not back.training
    for k, v in model.state_dict().items():
        assert torch.equal(back.state_dict()[k], v), k
    assert next(load_model(tmp_path, torch.float32)[0].parameters()).dtype == torch.float32


def test_crafted_file_is_refused_unrun(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    torch.save({"x": _Evil(str(marker))}, tmp_path / "evil.pt")
    with pytest.raises(TrainingError, match=r"refusing to load this checkpoint: it holds GLOBAL"):
        load_torch_file(tmp_path / "evil.pt", "checkpoint")
    assert not marker.exists()


def test_broken_and_foreign_files_are_named(tmp_path: Path) -> None:
    save_torch_file({"format": "something-else"}, tmp_path / "model.pt")
    with pytest.raises(TrainingError, match="is not a dparallel model file"):
        load_model(tmp_path / "model.pt")
    (tmp_path / "cut.pt").write_bytes((tmp_path / "model.pt").read_bytes()[:40])
    with pytest.raises(TrainingError, match=r"cut.pt: cannot read this model file"):
        load_model(tmp_path / "cut.pt")
    save_torch_file([1, 2], tmp_path / "list.pt")  # type: ignore[arg-type]
    with pytest.raises(TrainingError, match="not a dparallel torch file"):
        load_torch_file(tmp_path / "list.pt")
    with pytest.raises(TrainingError, match="no trained model at"):
        load_model(tmp_path / "missing")
    stopped = tmp_path / "stopped"  # a training killed before its end: resume, not rerun
    stopped.mkdir()
    (stopped / "checkpoint.pt").write_bytes(b"")
    with pytest.raises(TrainingError, match=rf"-o {stopped} --resume"):
        load_model(stopped)


def test_a_file_of_another_pickle_protocol_is_one_error_without_torchs_warning(
    tmp_path: Path,
) -> None:
    import warnings

    torch.save({"w": torch.ones(2), "n": 3}, tmp_path / "p4.pt", pickle_protocol=4)
    save_torch_file({"w": torch.ones(2)}, tmp_path / "ours.pt")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the test
        with pytest.raises(TrainingError, match=r"p4.pt: cannot read .* pickled with a proto"):
            load_torch_file(tmp_path / "p4.pt")
        assert torch.equal(load_torch_file(tmp_path / "ours.pt")["w"], torch.ones(2))


def test_a_file_that_is_no_model_is_said_to_be_no_model_directory(tmp_path: Path) -> None:
    # `dparallel export --format n2p2 train.xyz`: "cannot read this model file (truncated
    # or corrupt?)" blamed a structure file for being a broken model
    data = tmp_path / "train.xyz"
    data.write_text("1\n\nH 0 0 0\n")
    with pytest.raises(TrainingError) as refused:
        load_model(data)
    assert str(refused.value) == (
        f"{data} is a file, not a model directory: give the folder that `dparallel train` "
        "wrote (with model.pt) or its model.pt"
    )


def test_a_model_file_is_told_by_its_content_not_its_name(tmp_path: Path) -> None:
    """A model file renamed (``cu.pth``, ``model.pt.bak``) still loads, and a structure
    file of another name is still no model: only a name ending in ``.pt`` was taken (the
    renamed file was refused as 'a file, not a model directory')."""
    model = HDNNP(["H"], {"H": 2}, hidden=(3,))
    for name in ("cu.pth", "model.pt.bak"):
        save_torch_file(model_file(model, {}, None, "acsf"), tmp_path / name)
        loaded, _ = load_model(tmp_path / name)
        assert torch.equal(loaded.state_dict()["ref_energy"], model.state_dict()["ref_energy"])
    (tmp_path / "train.pth").write_text("1\n\nH 0 0 0\n")
    with pytest.raises(TrainingError, match=r"train.pth is a file, not a model directory"):
        load_model(tmp_path / "train.pth")


def test_a_flipped_bit_or_garbage_is_refused_not_loaded(tmp_path: Path) -> None:
    """torch's reader checks no CRC: a bit flipped in a weight's bytes loaded as another
    model (``evaluate`` gave other errors, silently), and a file of bytes torch's legacy
    reader tried to unpickle died with an IndexError traceback (found by fuzzing model
    directories). Both are refused, naming the file."""
    good = tmp_path / "good.pt"
    save_torch_file({"w": torch.arange(64, dtype=torch.float64)}, good)
    with zipfile.ZipFile(good) as archive:
        info = next(i for i in archive.infolist() if i.filename.endswith("/data/0"))
    raw = bytearray(good.read_bytes())
    # the entry's data follow its 30-byte local header, file name and extra field
    name_len, extra_len = struct.unpack(
        "<HH", raw[info.header_offset + 26 : info.header_offset + 30]
    )
    raw[info.header_offset + 30 + name_len + extra_len + 8 * 5] ^= 0x01  # w[5]'s lowest bit
    (tmp_path / "flipped.pt").write_bytes(bytes(raw))
    with pytest.raises(TrainingError, match=r"flipped.pt: cannot read .* fails its CRC-32 check"):
        load_torch_file(tmp_path / "flipped.pt")
    (tmp_path / "garbage.pt").write_bytes(b"0.")  # pickle's POP on an empty stack
    with pytest.raises(TrainingError, match=r"garbage.pt: cannot read .* not a torch file"):
        load_torch_file(tmp_path / "garbage.pt")


def test_a_file_saved_without_crcs_still_loads(tmp_path: Path) -> None:
    """``torch.serialization.set_crc32_options(False)`` (torch's speed option) writes 0 as
    every entry's CRC-32: such a file is no corrupt one, and loads."""
    path = tmp_path / "nocrc.pt"
    before = torch.serialization.get_crc32_options()
    torch.serialization.set_crc32_options(False)
    try:
        save_torch_file({"w": torch.arange(64, dtype=torch.float64)}, path)
    finally:
        torch.serialization.set_crc32_options(before)
    with zipfile.ZipFile(path) as archive:
        assert all(i.CRC == 0 for i in archive.infolist() if i.file_size)
    assert torch.equal(load_torch_file(path)["w"], torch.arange(64, dtype=torch.float64))
