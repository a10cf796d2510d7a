"""gpuslice-cdi-hook on a fake container: OCI state on stdin, bundle/config.json, a root with the
driver's libcuda.so.1 mounted under /usr/local/nvidia/lib64 and the host's (static) ldconfig as
the image's. Hostile roots: symlinks pointing outside must not lead the hook out of the root.

Environment (set by meson): GS_CDIHOOK (the hook), GS_SOURCE_ROOT."""
import json
import os
import shutil
import subprocess

import pytest

HOOK = os.environ.get("GS_CDIHOOK", "")
LIB = "usr/local/nvidia/lib64"


def container(tmp, hostile=None):
    root = os.path.join(tmp, "bundle", "rootfs")
    os.makedirs(os.path.join(root, LIB))
    os.makedirs(os.path.join(root, "etc"))
    os.makedirs(os.path.join(root, "sbin"))
    src = os.path.join(tmp, "empty.c")
    with open(src, "w") as f:
        f.write("int gs_fake_cuda;\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", os.path.join(root, LIB, "libcuda.so.1"), "-Wl,-soname,libcuda.so.1",
                    src], check=True)
    shutil.copy(shutil.which("ldconfig") or "/sbin/ldconfig", os.path.join(root, "sbin", "ldconfig"))
    with open(os.path.join(root, "etc", "ld.so.conf"), "w") as f:
        f.write("include /etc/ld.so.conf.d/*.conf\n")
    with open(os.path.join(tmp, "bundle", "config.json"), "w") as f:
        json.dump({"ociVersion": "1.0.2", "root": {"path": "rootfs"}}, f)
    return root


def hook(tmp, *args, state=None):
    state = state if state is not None else json.dumps({"ociVersion": "1.0.2", "id": "c1", "status": "creating",
                                                        "pid": 1, "bundle": os.path.join(tmp, "bundle")})
    return subprocess.run([HOOK, *args], input=state, capture_output=True, text=True, timeout=60)


def test_links_and_linker_cache(tmp_path):
    tmp = str(tmp_path)
    root = container(tmp)
    p = hook(tmp)
    assert p.returncode == 0, p.stderr
    assert os.readlink(os.path.join(root, LIB, "libcuda.so")) == "libcuda.so.1"
    with open(os.path.join(root, "etc", "ld.so.conf.d", "00-gpuslice.conf")) as f:
        assert f.read() == "/usr/local/nvidia/lib64\n"
    with open(os.path.join(root, "etc", "ld.so.cache"), "rb") as f:   # the container's own cache
        cache = f.read()
    assert b"libcuda.so.1\0" in cache and b"/usr/local/nvidia/lib64/libcuda.so.1\0" in cache
    p = hook(tmp)                                                      # again: idempotent
    assert p.returncode == 0, p.stderr


def test_bad_inputs(tmp_path):
    tmp = str(tmp_path)
    container(tmp)
    for state, want in [("", "OCI state (stdin):1:"), ("[]", "not a JSON object"), ('{"bundle": 3}', "no \"bundle\""),
                        ('{"bundle": "rel"}', "not an absolute path")]:
        p = hook(tmp, state=state)
        assert p.returncode == 1 and want in p.stderr, (state, p.stderr)
    with open(os.path.join(tmp, "bundle", "config.json"), "w") as f:
        json.dump({"root": {"path": "/"}}, f)
    p = hook(tmp)
    assert p.returncode == 1 and "is not a container root" in p.stderr
    assert hook(tmp, "--lib-dir", "../x").returncode == 2


def test_no_ldconfig_in_the_image(tmp_path):
    tmp = str(tmp_path)
    root = container(tmp)
    os.unlink(os.path.join(root, "sbin", "ldconfig"))
    p = hook(tmp)
    assert p.returncode == 0 and "linker cache not updated" in p.stderr
    assert os.path.islink(os.path.join(root, LIB, "libcuda.so"))


def test_hostile_root_symlinks_stay_inside(tmp_path):
    tmp = str(tmp_path)
    root = container(tmp)
    outside = os.path.join(tmp, "outside")
    os.makedirs(os.path.join(outside, "ld.so.conf.d"))
    shutil.copy(os.path.join(root, LIB, "libcuda.so.1"), outside)
    # the library directory and /etc as absolute and relative symlinks out of the root; the
    # configuration file as a symlink to a file outside
    shutil.rmtree(os.path.join(root, "usr"))
    os.makedirs(os.path.join(root, "usr", "local", "nvidia"))
    os.symlink(outside, os.path.join(root, LIB))
    shutil.move(os.path.join(root, "etc"), os.path.join(root, "etc.real"))
    os.symlink("../../../outside", os.path.join(root, "etc"))
    victim = os.path.join(outside, "victim")
    with open(victim, "w") as f:
        f.write("host file\n")
    p = hook(tmp)
    assert sorted(os.listdir(outside)) == ["ld.so.conf.d", "libcuda.so.1", "victim"], p.stderr
    assert os.listdir(os.path.join(outside, "ld.so.conf.d")) == []
    # with a real /etc whose ld.so.conf.d entry points out: replaced, the outside file untouched
    os.unlink(os.path.join(root, "etc"))
    shutil.move(os.path.join(root, "etc.real"), os.path.join(root, "etc"))
    os.makedirs(os.path.join(root, "etc", "ld.so.conf.d"))
    os.symlink(victim, os.path.join(root, "etc", "ld.so.conf.d", "00-gpuslice.conf"))
    os.unlink(os.path.join(root, LIB))
    os.makedirs(os.path.join(root, LIB))
    shutil.copy(os.path.join(outside, "libcuda.so.1"), os.path.join(root, LIB))
    os.symlink(victim, os.path.join(root, LIB, "libcuda.so"))          # an existing link is left alone
    p = hook(tmp, "--no-ldconfig")
    with open(victim) as f:
        assert f.read() == "host file\n"
    assert p.returncode == 0, p.stderr
    assert not os.path.islink(os.path.join(root, "etc", "ld.so.conf.d", "00-gpuslice.conf"))
    assert os.readlink(os.path.join(root, LIB, "libcuda.so")) == victim


if not HOOK:
    pytest.fail("GS_CDIHOOK is not set (run through meson)", pytrace=False)
