"""Which URLs a store may be written at (dparallel.store._objects): those whose service's
conditional writes the tests check (s3://, az://, memory://); gs:// is refused with why."""

from __future__ import annotations

import pytest

from dparallel.errors import StoreError
from dparallel.io.location import as_location
from dparallel.store import _objects


def test_a_store_at_gs_is_refused_with_the_reason():
    with pytest.raises(StoreError, match=r"gs://b/s.zarr: .*gs:// stores can be read, not written"):
        _objects.require_conditional_writes(as_location("gs://b/s.zarr"))


@pytest.mark.parametrize("url", ["s3://b/s.zarr", "az://c/s.zarr", "abfs://c/s.zarr"])
def test_a_store_at_s3_or_azure_may_be_written(url):
    _objects.require_conditional_writes(as_location(url))  # nothing requested
