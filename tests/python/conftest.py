# pytest setup for the Python module's tests: ctest runs them with PYTHONPATH=<build>/python and
# XGRAD_SOURCE_DIR=<repository>; this makes sure the module under test is the one just built.
import os

import pytest

import xgrad

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("XGRAD_SOURCE_DIR", os.path.join(HERE, "..", ".."))


@pytest.fixture
def source_dir():
    return SOURCE_DIR


def pytest_report_header(config):
    return "xgrad from %s" % os.path.dirname(xgrad.__file__)
