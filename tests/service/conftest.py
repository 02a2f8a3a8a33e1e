from __future__ import annotations

from pathlib import Path

import pytest

from service.settings import Settings, StorageSettings


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """Default settings writing only under the test's temporary directory; notifications
    leave at once (no group_wait), so a few rounds show them."""
    return Settings(storage=StorageSettings(data_dir=tmp_path / "data"),
                    notify={"route": {"receiver": "record", "group_wait_s": 0}})
