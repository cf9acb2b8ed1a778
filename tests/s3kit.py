"""A real S3-compatible server for tests: versitygw (tools/s3_server.py) on 127.0.0.1, one per test
module. Tests that need it import the fixture (`from tests.s3kit import s3`); without Go to build
the server they are skipped, saying why."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import s3_server


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[s3_server.S3Server]:
    try:
        s3_server.build()
    except s3_server.S3Unavailable as e:
        pytest.skip(str(e))
    with s3_server.start_s3(tmp_path_factory.mktemp("s3")) as server:
        yield server
