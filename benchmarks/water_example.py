"""Where n2p2's RPBE-D3 water example is, for every benchmark (and as the tests find it):
``$N2P2_WATER``, else ``../shared/n2p2/water`` beside the repository."""

from __future__ import annotations

import os
from pathlib import Path

WATER = Path(
    os.environ.get("N2P2_WATER", Path(__file__).resolve().parents[2] / "shared" / "n2p2" / "water")
)
