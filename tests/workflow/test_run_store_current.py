"""``dparallel run`` skips featurization only for a store of this very data and config."""

from __future__ import annotations

import os
import time

from dparallel.datasets import write_emt_cu
from dparallel.store import open_store
from dparallel.workflow.featurize import FeaturizeOptions, featurize_in_process
from dparallel.workflow.run import _store_current
from dparallel.workflow.spec import load_quickstart


def test_store_is_current_only_for_the_same_source_and_config(tmp_path):
    data = tmp_path / "cu.xyz"
    write_emt_cu(data, n_structures=8, seed=1)
    sets = [f"dataset.path={data}", f"store.path={tmp_path / 's.zarr'}", "partitioning.atoms=150",
            "dataset.generate=null"]  # fmt: skip
    spec = load_quickstart(sets)
    assert not _store_current(spec, data)  # nothing there yet
    featurize_in_process(
        data,
        spec.store.path,
        spec.descriptors.build(),
        FeaturizeOptions(
            units=spec.dataset.units,
            on_error=spec.dataset.on_error,
            partition_atoms=spec.partitioning.atoms,
        ),
    )
    assert _store_current(spec, data)
    for change in ("dataset.units=bohr-hartree", "dataset.on_error=skip", "partitioning.atoms=100",
                   "descriptors.acsf.r_cut=4.5", "descriptors.derivatives=false",
                   "dataset.energy_key=energy", "dataset.forces_key=forces"):  # fmt: skip
        assert not _store_current(load_quickstart([*sets, change]), data), change
    # the same file name with other content (another seed, same size class)
    stamp = data.stat().st_mtime_ns
    data.unlink()
    write_emt_cu(data, n_structures=8, seed=2)
    os.utime(data, ns=(stamp, stamp))
    assert not _store_current(spec, data)
    data.unlink()
    write_emt_cu(data, n_structures=8, seed=1)
    time.sleep(0.01)
    assert _store_current(spec, data)  # the same content again: current (path and mtime aside)
    open_store(spec.store.path, mode="r+").clear_done(0)
    assert not _store_current(spec, data)  # incomplete


def test_store_written_with_the_old_acsf_key_is_still_current(tmp_path):
    """Stores written before ACSF's spec key became ``type`` (it was ``kind``) resume."""
    import json

    data = tmp_path / "cu.xyz"
    write_emt_cu(data, n_structures=4, seed=1)
    spec = load_quickstart(
        [f"dataset.path={data}", f"store.path={tmp_path / 's.zarr'}", "partitioning.atoms=150"]
    )
    options = FeaturizeOptions(
        units=spec.dataset.units,
        on_error=spec.dataset.on_error,
        partition_atoms=spec.partitioning.atoms,
    )
    featurize_in_process(data, spec.store.path, spec.descriptors.build(), options)
    assert _store_current(spec, data)
    meta_file = tmp_path / "s.zarr" / "zarr.json"
    meta = json.loads(meta_file.read_text())
    text = json.dumps(meta)
    assert '"type": "acsf"' in text
    meta_file.write_text(text.replace('"type": "acsf"', '"kind": "acsf"'))
    assert '"kind": "acsf"' in meta_file.read_text()
    assert _store_current(spec, data)
    meta_file.write_text(text.replace('"type": "acsf"', '"kind": "neighbor_sum"'))
    assert not _store_current(spec, data)  # another kind under the old key is not current


def test_run_refuses_another_config_naming_its_own_overwrite_key(tmp_path):
    """`dparallel run` has no --overwrite: its refusal names store.overwrite (and
    featurize's own refusal keeps naming overwrite=True / --overwrite)."""
    import pytest

    from dparallel.errors import StoreMismatchError
    from dparallel.workflow.featurize import prepare_featurize
    from dparallel.workflow.run import _featurize_options

    data = tmp_path / "cu.xyz"
    write_emt_cu(data, n_structures=8, seed=1)
    sets = [f"dataset.path={data}", f"store.path={tmp_path / 's.zarr'}", "partitioning.atoms=150",
            "dataset.generate=null"]  # fmt: skip
    spec = load_quickstart(sets)
    featurize_in_process(data, spec.store.path, spec.descriptors.build(), _featurize_options(spec))
    changed = load_quickstart([*sets, "descriptors.acsf.r_cut=4.5"])
    descriptors = changed.descriptors.build()
    with pytest.raises(StoreMismatchError) as refused:
        prepare_featurize(data, changed.store.path, descriptors, _featurize_options(changed))
    text = str(refused.value)
    assert "another source or config" in text and "features.acsf" in text
    assert "Pass --set store.overwrite=true (store.overwrite: true in the workflow)" in text
    assert "--overwrite)" not in text and "overwrite=True" not in text
    with pytest.raises(StoreMismatchError, match=r"Pass overwrite=True \(--overwrite\) to"):
        prepare_featurize(
            data, changed.store.path, descriptors, FeaturizeOptions(partition_atoms=150)
        )


def test_validate_refuses_a_store_of_other_descriptors_as_run_does(tmp_path):
    """``validate`` said ok to a workflow whose store was made with other descriptors;
    ``run`` refused it (after starting its cluster). The check compares the recorded
    descriptors alone (the dataset unread), and ``store.overwrite`` lifts it."""
    import json

    import pytest

    from dparallel.errors import ConfigError
    from dparallel.workflow.run import _featurize_options

    data = tmp_path / "cu.xyz"
    write_emt_cu(data, n_structures=4, seed=1)
    sets = [f"dataset.path={data}", f"store.path={tmp_path / 's.zarr'}", "dataset.generate=null",
            "training=null", "output=null"]  # fmt: skip
    spec = load_quickstart(sets)
    featurize_in_process(data, spec.store.path, spec.descriptors.build(), _featurize_options(spec))
    spec.check()  # the same descriptors
    # how the dataset is read and partitioned: compared by run, which reads the dataset
    load_quickstart([*sets, "partitioning.atoms=100", "dataset.on_error=skip"]).check()
    for change in ("descriptors.acsf.r_cut=4.5", "descriptors.dtype=float32"):
        with pytest.raises(ConfigError, match=r"^store.path: .*s.zarr was made from another "
                           r"source or config: config differs in features.* Pass --set "
                           r"store.overwrite=true"):  # fmt: skip
            load_quickstart([*sets, change]).check()
        load_quickstart([*sets, change, "store.overwrite=true"]).check()
    meta = tmp_path / "s.zarr" / "zarr.json"  # written before ACSF's key was "type"
    meta.write_text(meta.read_text().replace('"type": "acsf"', '"kind": "acsf"'))
    assert '"kind": "acsf"' in json.dumps(json.loads(meta.read_text()))
    spec.check()
