import pytest

from tests.integration.test_cli import ServeProcess


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    srv = ServeProcess(tmp_path_factory.mktemp("interop"))
    yield srv
    srv.stop()
