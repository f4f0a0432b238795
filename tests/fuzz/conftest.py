"""One fuzz worker and its baseline runs for the whole session (tests/fuzz/harness.py)."""

from __future__ import annotations

import pytest

from tests.fuzz.harness import Fuzzer


@pytest.fixture(scope="session")
def fuzzer(tmp_path_factory):
    fuzzer = Fuzzer(tmp_path_factory.mktemp("fuzz"))
    yield fuzzer
    fuzzer.close()
