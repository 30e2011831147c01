import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
TEST_DIR = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)  # the helpers of this folder (_ray_holder, _remote_child)


@pytest.fixture(scope="session")
def ray_cluster():
    """One local Ray instance for the whole session (starting one costs seconds)."""
    ray = pytest.importorskip("ray")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    # Actors unpickle the test helpers (_collector_helpers, _ray_holder) by module name.
    paths = [TEST_DIR, HERE, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    if started:
        ray.shutdown()
