"""``torchrl.services``: the Service protocol, the in-process and the Ray registries."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from torchrl.services import (
    LocalService,
    RayService,
    Service,
    ServiceBase,
    get_services,
)
from torchrl.services.base import ServiceBackend

from _services_helpers import Accumulator, OwnedServer  # isort: skip

HERE = Path(__file__).resolve().parent


@pytest.fixture
def local() -> LocalService:
    services = LocalService(namespace=f"test-{os.getpid()}")
    yield services
    services.reset()


def test_service_protocol_and_backend_literal() -> None:
    assert isinstance(OwnedServer().start(), Service)
    assert not isinstance(Accumulator(), Service)  # no start/client/is_alive
    assert "ray" in ServiceBackend.__args__ and "direct" in ServiceBackend.__args__


def test_import_is_light() -> None:
    code = (
        "import sys, torchrl.services; "
        "print('torch' in sys.modules, 'ray' in sys.modules, 'tensordict' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["False", "False", "False"]


def test_local_registry_dict_interface(local: LocalService) -> None:
    acc = local.register("acc", Accumulator, start=3)
    assert isinstance(local, ServiceBase)
    assert acc.add(2) == 5
    other = LocalService(namespace=local.namespace)  # same namespace: same services
    assert other["acc"] is acc and "acc" in other and other.list() == ["acc"]
    assert "acc" not in LocalService(namespace=local.namespace + "-other")
    assert 3 not in local
    with pytest.raises(ValueError, match="'acc' is already registered"):
        local.register("acc", Accumulator)
    with pytest.raises(KeyError, match="no service named 'nope'.*registered: \\['acc'\\]"):
        local.get("nope")
    with pytest.raises(ValueError, match="non-empty str"):
        local.register("", Accumulator)
    with pytest.raises(TypeError, match="must be callable or a running Service"):
        local.register("x", 3)
    local.reset()
    assert acc.stopped and local.list() == []


def test_local_registry_keeps_external_services_running(local: LocalService) -> None:
    server = OwnedServer().start()
    assert local.register("server", server) == ("server-client", 7)
    assert local.get_client("server") == ("server-client", 7)
    with pytest.raises(TypeError, match="takes no factory arguments"):
        local.register("server2", server, 1)
    local.reset()
    assert server.is_alive  # the registry did not own it


def test_get_services_backends() -> None:
    assert isinstance(get_services("direct"), LocalService)
    assert isinstance(get_services("local", namespace="n"), LocalService)
    ray_services = get_services("ray", namespace="ns", ray_init_config={"num_cpus": 1})
    assert isinstance(ray_services, RayService) and ray_services.namespace == "ns"
    with pytest.raises(ValueError, match="backend 'monarch' is not implemented here"):
        get_services("monarch")
    with pytest.raises(ValueError, match="backend 'bogus' is unknown"):
        get_services("bogus")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ray_init_config must be a dict"):
        RayService(ray_init_config=[1])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="namespace must be a non-empty str"):
        RayService(namespace="")


def test_ray_service_without_ray_raises_import_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from torchrl.services import ray_service

    monkeypatch.setattr(ray_service, "_has_ray", False)
    with pytest.raises(ImportError, match="pip install"):
        RayService().list()


@pytest.fixture(scope="module")
def ray_session():
    ray = pytest.importorskip("ray")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    # Ray workers import the test services (_services_helpers) by module name.
    paths = [str(HERE), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    yield ray
    if started:
        ray.shutdown()


@pytest.mark.slow  # a Ray cluster and two actor processes: ~10-30 s on 2 cores
def test_ray_service_named_actors(ray_session) -> None:
    ray = ray_session
    services = RayService(namespace=f"test-services-{os.getpid()}")
    try:
        acc = services.register("acc", Accumulator, 10, num_cpus=0)
        assert ray.get(acc.add.remote(5)) == 15
        # another registry object (as another worker would make) finds the same actor
        again = RayService(namespace=services.namespace)
        assert ray.get(again["acc"].add.remote(1)) == 16
        assert again.list() == ["acc"] and "acc" in again
        assert "acc" not in RayService(namespace=services.namespace + "-other")
        with pytest.raises(ValueError, match="already registered"):
            services.register("acc", Accumulator)
        with pytest.raises(KeyError, match="no service named 'missing'"):
            services.get("missing")
        server = OwnedServer().start()
        assert services.register("server", server) == ("server-client", 7)
        assert services.get_client("server") == ("server-client", 7)
        assert services.list() == ["acc", "server"]
        services.reset()
        assert services.list() == [] and server.is_alive
        with pytest.raises(ValueError):
            ray.get_actor("acc", namespace=services.namespace)
    finally:
        services.reset()
