"""Self-test of the kubelet emulator (kubelet_emulator.py) against a small fake device plugin
written in Python, so that the emulator is known to work independently of gpuslice's agent.

Run: /usr/bin/python3 -m pytest -q tests/integration/test_emulator.py"""
import os
import shutil
import tempfile
import threading
import time

import grpc
import pytest

from kubelet_emulator import (HEALTHY, UNHEALTHY, EmulatorError, KubeletEmulator, pb, pb_grpc)

RESOURCE = "example.com/gpu"


class FakePlugin(pb_grpc.DevicePluginServicer):
    """A minimal device plugin: serves DevicePlugin on <kdir>/<endpoint> and registers with the
    kubelet. Records when GetDevicePluginOptions was called relative to its own Register call."""

    def __init__(self, kdir, resource=RESOURCE, endpoint="fake.sock", devices=("dev-0", "dev-1"),
                 preferred=True, block_options_until_registered=False):
        self.kdir = kdir
        self.resource = resource
        self.endpoint = endpoint
        self.preferred_available = preferred
        self.block_options = block_options_until_registered
        self._cond = threading.Condition()
        self._devices = [(d, HEALTHY) for d in devices]
        self._version = 0
        self._stopped = False
        self.server = None
        self.register_started = self.register_ended = None
        self.options_calls = []          # monotonic times of GetDevicePluginOptions calls
        self.prestart_calls = []
        self._registered = threading.Event()

    # --- plugin side
    def _opts(self):
        return pb.DevicePluginOptions(pre_start_required=False,
                                      get_preferred_allocation_available=self.preferred_available)

    def GetDevicePluginOptions(self, request, context):
        self.options_calls.append(time.monotonic())
        if self.block_options:               # a plugin that cannot answer during Register
            self._registered.wait(5)
        return self._opts()

    def ListAndWatch(self, request, context):
        seen = -1
        while context.is_active():
            with self._cond:
                if self._stopped:
                    return
                if seen == self._version:
                    self._cond.wait(0.1)
                    continue
                seen = self._version
                devices = [pb.Device(ID=i, health=h) for i, h in self._devices]
            yield pb.ListAndWatchResponse(devices=devices)

    def Allocate(self, request, context):
        known = {i for i, _ in self._devices}
        out = pb.AllocateResponse()
        for creq in request.container_requests:
            for i in creq.devices_ids:
                if i not in known:
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown device: {i}")
            out.container_responses.add(envs={"FAKE_VISIBLE_DEVICES": ",".join(creq.devices_ids)})
        return out

    def GetPreferredAllocation(self, request, context):
        out = pb.PreferredAllocationResponse()
        for creq in request.container_requests:
            chosen = list(creq.must_include_deviceIDs)
            for i in creq.available_deviceIDs:
                if len(chosen) >= creq.allocation_size:
                    break
                if i not in chosen:
                    chosen.append(i)
            out.container_responses.add(deviceIDs=chosen)
        return out

    def PreStartContainer(self, request, context):
        self.prestart_calls.append(list(request.devices_ids))
        return pb.PreStartContainerResponse()

    # --- control
    @property
    def socket_path(self):
        return os.path.join(self.kdir, self.endpoint)

    def serve(self):
        if os.path.lexists(self.socket_path):
            os.unlink(self.socket_path)
        with self._cond:
            self._stopped = False
        server = grpc.server(__import__("concurrent.futures").futures.ThreadPoolExecutor(max_workers=8))
        pb_grpc.add_DevicePluginServicer_to_server(self, server)
        assert server.add_insecure_port("unix:" + self.socket_path) != 0
        server.start()
        self.server = server
        return self

    def register(self, version="v1beta1", resource=None, endpoint=None, timeout=10):
        self._registered.clear()
        with grpc.insecure_channel("unix:" + os.path.join(self.kdir, "kubelet.sock")) as ch:
            stub = pb_grpc.RegistrationStub(ch)
            self.register_started = time.monotonic()
            try:
                stub.Register(pb.RegisterRequest(version=version, endpoint=endpoint or self.endpoint,
                                                 resource_name=resource or self.resource,
                                                 options=self._opts()), timeout=timeout)
            finally:
                self.register_ended = time.monotonic()
                self._registered.set()

    def set_devices(self, devices):
        with self._cond:
            self._devices = list(devices)
            self._version += 1
            self._cond.notify_all()

    def stop(self):
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self.server is not None:
            self.server.stop(grace=0).wait(5)
            self.server = None


@pytest.fixture
def kdir():
    d = tempfile.mkdtemp(prefix="gs-", dir="/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def kubelet(kdir):
    emu = KubeletEmulator(kdir, dial_timeout=2.0, options_timeout=2.0).start()
    yield emu
    t = time.monotonic()
    emu.stop()
    assert time.monotonic() - t < 10, "emulator stop() hung"


@pytest.fixture
def plugins(kdir):
    started = []

    def make(**kw):
        p = FakePlugin(kdir, **kw).serve()
        started.append(p)
        return p
    yield make
    for p in started:
        p.stop()


def test_register_calls_options_synchronously(kubelet, plugins):
    plugin = plugins()
    plugin.register()
    regs = kubelet.registrations
    assert len(regs) == 1
    reg = regs[0]
    assert reg.ok and reg.version == "v1beta1" and reg.endpoint == "fake.sock"
    assert reg.resource_name == RESOURCE
    assert reg.request_options.get_preferred_allocation_available
    # GetDevicePluginOptions was answered inside the Register RPC.
    assert reg.received_at <= reg.options_at <= reg.returned_at
    assert len(plugin.options_calls) == 1
    assert plugin.register_started <= plugin.options_calls[0] <= plugin.register_ended
    assert kubelet.options(RESOURCE).get_preferred_allocation_available
    assert not kubelet.options(RESOURCE).pre_start_required
    assert kubelet.resources() == [RESOURCE]


def test_list_and_watch_capture(kubelet, plugins):
    plugin = plugins()
    plugin.register()
    first = kubelet.wait_for(RESOURCE, lambda devs: len(devs) == 2, timeout=5)
    assert first.ids == ["dev-0", "dev-1"] and all(d.healthy for d in first.devices)
    t0 = time.monotonic()
    plugin.set_devices([("dev-0", HEALTHY), ("dev-1", UNHEALTHY)])
    msg = kubelet.wait_for(RESOURCE, lambda devs: any(d.health == UNHEALTHY for d in devs), timeout=5)
    assert msg.time > t0 and msg.time - t0 < 1.0
    assert msg.health() == {"dev-0": HEALTHY, "dev-1": UNHEALTHY}
    assert [d.id for d in kubelet.devices(RESOURCE)] == ["dev-0", "dev-1"]
    # `after` skips older messages; a message never sent times out with a clear error.
    plugin.set_devices([("dev-0", HEALTHY)])
    msg2 = kubelet.wait_for(RESOURCE, lambda devs: len(devs) == 1, after=msg.time)
    assert msg2.ids == ["dev-0"]
    assert len(kubelet.messages(RESOURCE)) == 3
    with pytest.raises(EmulatorError, match="timed out"):
        kubelet.wait_for(RESOURCE, lambda devs: len(devs) == 5, timeout=0.3)


def test_allocate_preferred_prestart(kubelet, plugins):
    plugin = plugins()
    plugin.register()
    kubelet.wait_resources([RESOURCE])
    resp = kubelet.allocate(RESOURCE, ["dev-1", "dev-0"])
    assert dict(resp.envs) == {"FAKE_VISIBLE_DEVICES": "dev-1,dev-0"}
    with pytest.raises(grpc.RpcError) as err:
        kubelet.allocate(RESOURCE, ["dev-9"])
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "dev-9" in err.value.details()
    assert kubelet.preferred(RESOURCE, ["dev-0", "dev-1"], ["dev-1"], 1) == ["dev-1"]
    kubelet.prestart(RESOURCE, ["dev-0"])
    assert plugin.prestart_calls == [["dev-0"]]


def test_preferred_needs_the_option(kubelet, plugins):
    plugins(preferred=False).register()
    kubelet.wait_resources([RESOURCE])
    with pytest.raises(EmulatorError, match="does not offer"):
        kubelet.preferred(RESOURCE, ["dev-0"], [], 1)
    assert kubelet.preferred(RESOURCE, ["dev-0"], [], 1, force=True) == ["dev-0"]


def test_register_validation(kubelet, plugins):
    plugin = plugins()
    with pytest.raises(grpc.RpcError) as err:
        plugin.register(version="v1alpha2")
    assert "not supported by kubelet" in err.value.details()
    for bad in ("gpu", "kubernetes.io/gpu", "Example.com/gpu", "example.com/-gpu", "example.com/" + "x" * 64):
        with pytest.raises(grpc.RpcError) as err:
            plugin.register(resource=bad)
        assert "resource name" in err.value.details()
    assert plugin.options_calls == []            # rejected before dialling
    assert all(r.error for r in kubelet.registrations)
    assert kubelet.resources() == []


def test_unreachable_endpoint(kubelet, plugins):
    plugin = plugins()
    t = time.monotonic()
    with pytest.raises(grpc.RpcError) as err:
        plugin.register(endpoint="nobody.sock")
    assert "failed to dial device plugin" in err.value.details()
    assert time.monotonic() - t < 5


def test_plugin_that_cannot_answer_during_register_fails(kubelet, plugins):
    # The deadlock hazard: GetDevicePluginOptions is only answered after Register returned.
    plugin = plugins(block_options_until_registered=True)
    t = time.monotonic()
    with pytest.raises(grpc.RpcError) as err:
        plugin.register()
    assert "failed to get device plugin options" in err.value.details()
    assert time.monotonic() - t < 5
    assert kubelet.resources() == []
    assert kubelet.registrations[-1].error


def test_restart_cleans_sockets_and_accepts_reregistration(kubelet, plugins, kdir):
    plugin = plugins()
    plugin.register()
    kubelet.wait_resources([RESOURCE])
    checkpoint = os.path.join(kdir, "kubelet_internal_checkpoint")
    open(checkpoint, "w").close()
    os.mkdir(os.path.join(kdir, "subdir"))
    t_restart = kubelet.restart()
    # Every unix socket is gone except the new kubelet.sock; regular files and dirs stay.
    assert sorted(os.listdir(kdir)) == ["kubelet.sock", "kubelet_internal_checkpoint", "subdir"]
    # (Not checked: a new inode number; filesystems reuse the freed one at once.)
    assert not kubelet.connected(RESOURCE) and kubelet.resources() == []
    # The plugin re-serves on a fresh socket and registers again.
    plugin.stop()
    plugin.serve()
    plugin.register()
    reg = kubelet.wait_registration(RESOURCE, after=t_restart, timeout=2)
    assert reg.generation > kubelet.registrations[0].generation
    msg = kubelet.wait_for(RESOURCE, lambda devs: len(devs) == 2, after=t_restart, timeout=5)
    assert msg.generation == reg.generation
    assert kubelet.allocate(RESOURCE, ["dev-0"]).envs["FAKE_VISIBLE_DEVICES"] == "dev-0"


def test_plugin_going_away_is_cleaned_up(kubelet, plugins):
    plugin = plugins()
    plugin.register()
    kubelet.wait_resources([RESOURCE])
    assert kubelet.connected(RESOURCE)
    plugin.stop()
    kubelet.wait_disconnected(RESOURCE, timeout=5)
    assert not kubelet.connected(RESOURCE)
    with pytest.raises(grpc.RpcError):
        kubelet.allocate(RESOURCE, ["dev-0"], timeout=2)


def test_reregistration_replaces_the_connection(kubelet, plugins):
    first = plugins(endpoint="a.sock", devices=("a-0",))
    first.register()
    kubelet.wait_for(RESOURCE, lambda devs: [d.id for d in devs] == ["a-0"])
    second = plugins(endpoint="b.sock", devices=("b-0", "b-1"))
    second.register()
    kubelet.wait_for(RESOURCE, lambda devs: [d.id for d in devs] == ["b-0", "b-1"])
    assert kubelet.allocate(RESOURCE, ["b-1"]).envs["FAKE_VISIBLE_DEVICES"] == "b-1"
    assert [r.endpoint for r in kubelet.registrations] == ["a.sock", "b.sock"]


def test_two_resources(kubelet, plugins):
    plugins(resource="example.com/a", endpoint="a.sock", devices=("a-0",)).register()
    plugins(resource="example.com/b", endpoint="b.sock", devices=("b-0",)).register()
    kubelet.wait_resources(["example.com/a", "example.com/b"])
    assert [d.id for d in kubelet.devices("example.com/a")] == ["a-0"]
    assert [d.id for d in kubelet.devices("example.com/b")] == ["b-0"]
    assert kubelet.devices("example.com/none") == []


def test_restart_with_gap(kubelet, plugins, kdir):
    plugins().register()
    kubelet.wait_resources([RESOURCE])
    seen = []
    def probe():
        time.sleep(0.1)
        seen.append(os.path.exists(kubelet.socket_path))
    th = threading.Thread(target=probe)
    th.start()
    t = kubelet.restart(gap=0.3)
    th.join()
    assert seen == [False], "kubelet.sock is absent during the gap"
    assert os.path.exists(kubelet.socket_path) and time.monotonic() - t >= 0.3
