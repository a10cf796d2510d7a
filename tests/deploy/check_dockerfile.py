"""Checks of the Dockerfile and .dockerignore at the repository root, without Docker.

Docker cannot run here, so what an image build would prove is checked piece by piece against this
Debian 12 machine (the image's base is Debian 12 too):
  * every package either stage installs exists in Debian's archive (`apt-cache show`), the build
    stage's are scripts/deps.sh's build packages, and they bring the C library headers;
  * the `meson setup` options exist, and the binaries the build installs (meson's install plan,
    with the Dockerfile's prefix and libdir) are exactly what the runtime stage copies;
  * every library the built binaries load (`ldd`) belongs (`dpkg -S`) to a package the runtime
    stage installs or one of their dependencies (`apt-cache depends --recurse`): the image runs;
  * laid out as the image lays them out, the binary finds the simulated NVML library and the guard
    next to itself, and the chart's init container finds the guard where it copies it from;
  * .dockerignore sends every file the build reads and none of the build trees.
Run by meson (suite deploy) through pytest; GS_BUILD_ROOT is the build tree to check.
"""
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile

import pytest

import helmchart

ROOT = helmchart.ROOT
BUILD = os.environ.get("GS_BUILD_ROOT") or os.path.join(ROOT, "build")
GPUSLICE = os.environ.get("GPUSLICE") or os.path.join(BUILD, "gpuslice")
SANITIZED = os.environ.get("GS_SANITIZED") == "1"
DOCKERFILE = os.path.join(ROOT, "Dockerfile")
T4X2 = os.path.join(ROOT, "examples", "nodes", "t4x2.yaml")

# deps.sh packages the image build does not need: compilers and libraries of the tests and the
# fuzz targets (-Dtests=false, -Dfuzz=false), and the test tools (python3-pip fetches the CUDA
# headers of the guard's cuda.h check, scripts/cuda-headers.sh).
TEST_ONLY = {"clang", "libclang-rt-14-dev", "libcmocka-dev", "prometheus", "python3", "python3-pip", "python3-pytest",
             "python3-yaml", "python3-grpcio", "python3-grpc-tools", "python3-protobuf", "python3-jsonschema",
             "python3-kubernetes", "shellcheck",
             "podman", "runc", "busybox-static",  # tests/cdi/test_podman.py
             "containernetworking-plugins", "openssl", "curl"}  # tests/e2e/cluster.sh
# Sanitizer runtimes linked into the ASan+UBSan build only; the image is built without them.
SANITIZER_PACKAGES = re.compile(r"^lib(asan|ubsan|lsan|tsan)\d+$")


def _instructions():
    """The Dockerfile as (stage index, INSTRUCTION, argument text), continuations joined."""
    with open(DOCKERFILE) as f:
        lines = [line for line in f.read().splitlines() if not line.lstrip().startswith("#")]
    text = re.sub(r"\\\n", " ", "\n".join(lines))
    out, stage = [], -1
    for line in text.splitlines():
        if not line.strip():
            continue
        word, _, rest = line.strip().partition(" ")
        word = word.upper()
        if word == "FROM":
            stage += 1
        out.append((stage, word, rest.strip()))
    return out


def stages():
    return [rest for _, w, rest in _instructions() if w == "FROM"]


def apt_packages(stage):
    pkgs = []
    for s, w, rest in _instructions():
        if s != stage or w != "RUN":
            continue
        for part in rest.split("&&"):
            words = shlex.split(part)
            if "apt-get" in words and "install" in words:
                pkgs += [p for p in words[words.index("install") + 1:] if not p.startswith("-")]
    return pkgs


def meson_setup():
    for _, w, rest in _instructions():
        if w == "RUN" and "meson setup" in rest:
            part = next(p for p in rest.split("&&") if "meson setup" in p)
            return shlex.split(part)[2:]
    raise AssertionError("the Dockerfile runs no meson setup")


def _apt_ready():
    if not shutil.which("apt-cache") or not shutil.which("dpkg"):
        return "no apt-cache/dpkg: not a Debian machine"
    with open("/etc/os-release") as f:
        osr = dict(line.split("=", 1) for line in f.read().splitlines() if "=" in line)
    if osr.get("VERSION_CODENAME", "").strip('"') != "bookworm":
        return f"this machine is not Debian 12 (bookworm) like the image: {osr.get('PRETTY_NAME')}"
    return None


needs_apt = pytest.mark.skipif(_apt_ready() is not None, reason=str(_apt_ready()))


def closure(packages):
    """The packages apt installs for these (Depends and Pre-Depends, recursively; alternatives and
    virtual packages' providers included, which can only make the set larger)."""
    p = subprocess.run(["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts",
                        "--no-breaks", "--no-replaces", "--no-enhances", *packages],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return {line.strip() for line in p.stdout.splitlines() if line and not line.startswith(" ") and "<" not in line}


def owners(paths):
    """{library path: the Debian package that ships it} (merged /usr: both spellings are tried),
    in one dpkg -S call."""
    cands = {}
    for path in paths:
        for c in (path, os.path.realpath(path)):
            for v in (c, c[4:] if c.startswith("/usr/") else "/usr" + c):
                cands.setdefault(v, path)
    p = subprocess.run(["dpkg", "-S", *sorted(cands)], capture_output=True, text=True, timeout=120)
    out = {}
    for line in p.stdout.splitlines():  # "pkg[, pkg]: /path"; exit 1 when some path is not found
        pkg, _, path = line.partition(": ")
        if path in cands:
            out.setdefault(cands[path], pkg.split(",")[0].split(":")[0].strip())
    return out


def install_plan():
    """{install destination with the Dockerfile's prefix and libdir: built file}."""
    args = meson_setup()
    opts = {}
    for i, a in enumerate(args):
        if a.startswith("-D") and "=" in a:
            k, v = a[2:].split("=", 1)
            opts[k] = v
        elif a.startswith("--") and "=" not in a and i + 1 < len(args) and not args[i + 1].startswith("-"):
            opts[a[2:]] = args[i + 1]
        elif a.startswith("--") and "=" in a:
            k, v = a[2:].split("=", 1)
            opts[k] = v
    prefix = opts.get("prefix", "/usr/local")
    dirs = {d: os.path.join(prefix, opts.get(d, default)) for d, default in
            (("bindir", "bin"), ("libdir", "lib"), ("datadir", "share"))}
    with open(os.path.join(BUILD, "meson-info", "intro-install_plan.json")) as f:
        plan = json.load(f)
    out = {}
    for group in plan.values():
        for built, info in group.items():
            dest = info["destination"]
            for d, path in dirs.items():
                dest = dest.replace("{" + d + "}", path)
            assert "{" not in dest, dest
            out[dest] = built
    return out


NOTICES = "/usr/share/doc/gpuslice/"
# What meson.build links statically (the archives' Debian packages): their licences must ship.
STATIC_PACKAGES = {"libgrpc-dev", "libabsl-dev", "libre2-dev", "libc-ares-dev", "libstdc++-12-dev"}


def image_layout():
    """{path in the image: file here} for what the runtime stage copies from the build stage."""
    destdir = re.search(r"meson install .*--destdir[ =](\S+)", next(
        rest for _, w, rest in _instructions() if w == "RUN" and "meson install" in rest)).group(1)
    plan = install_plan()
    layout = {}
    for s, w, rest in _instructions():
        if w != "COPY" or "--from=build" not in rest:
            continue
        src, dst = [a for a in shlex.split(rest) if not a.startswith("--")]
        assert src.startswith(destdir + "/"), f"COPY {src}: not from the install tree {destdir}"
        src = src[len(destdir):]
        if src == NOTICES:  # written by the build stage, not by meson (test_bundled_notices)
            continue
        matched = False
        for dest, built in plan.items():
            if src.endswith("/") and dest.startswith(src):
                layout[dst + dest[len(src):]] = built
                matched = True
            elif dest == src:
                layout[dst] = built
                matched = True
        assert matched, f"COPY {src}: nothing is installed there (install plan: {sorted(plan)})"
    return layout


# ------------------------------------------------------------------------------------------ tests

def test_stages_are_debian_bookworm():
    froms = stages()
    assert len(froms) == 2
    assert froms[0].split()[0] == "debian:bookworm-slim" and froms[0].split()[-2:] == ["AS", "build"]
    assert froms[1] == "debian:bookworm-slim"
    entry = [rest for s, w, rest in _instructions() if w == "ENTRYPOINT"]
    assert entry == ['["gpuslice"]']
    assert "/usr/bin/gpuslice" in image_layout(), "gpuslice on the image's PATH"


@needs_apt
@pytest.mark.parametrize("stage", [0, 1])
def test_packages_exist_in_debian(stage):
    pkgs = apt_packages(stage)
    assert pkgs, f"stage {stage} installs no package"
    p = subprocess.run(["apt-cache", "show", "--no-all-versions", *pkgs], capture_output=True, text=True, timeout=120)
    found = set(re.findall(r"^Package: (\S+)$", p.stdout, re.M))
    missing = [name for name in pkgs if name not in found]
    assert not missing, f"not in the apt cache: {missing}\n{p.stderr}"


def test_build_packages_are_deps_sh_build_packages():
    with open(os.path.join(ROOT, "scripts", "deps.sh")) as f:
        text = f.read()
    deps = set(re.search(r"packages=\(([^)]*)\)", text).group(1).split())
    build = set(apt_packages(0))
    assert build <= deps, f"not in scripts/deps.sh: {sorted(build - deps)}"
    assert deps - build <= TEST_ONLY, f"deps.sh packages the image build lacks: {sorted(deps - build - TEST_ONLY)}"


@needs_apt
def test_build_stage_has_c_library_headers():
    # --no-install-recommends drops gcc's Recommends: libc6-dev; a dependency must bring it.
    assert "libc6-dev" in closure(apt_packages(0))


def test_meson_options_exist():
    args = meson_setup()
    assert args[0].startswith("/") and "-Dtests=false" in args and "--buildtype=release" in args
    with open(os.path.join(ROOT, "meson_options.txt")) as f:
        own = set(re.findall(r"option\('([^']+)'", f.read()))
    with open(os.path.join(BUILD, "meson-info", "intro-buildoptions.json")) as f:
        known = {o["name"] for o in json.load(f)}
    for a in args[1:]:
        name = a[2:].split("=", 1)[0]
        assert name in own or name in known, f"meson setup {a}: no such option"


def test_bundled_notices():
    """The libraries linked in statically have their copyright files and versions copied into the
    image (build stage writes them into the install tree, runtime stage copies the directory)."""
    env = {rest.split("=", 1)[0]: shlex.split(rest.split("=", 1)[1])[0] for s, w, rest in _instructions()
           if s == 0 and w == "ENV" and "=" in rest}
    assert set(env.get("BUNDLED", "").split()) == STATIC_PACKAGES
    runs = " ".join(rest for s, w, rest in _instructions() if s == 0 and w == "RUN")
    assert "/usr/share/doc/$p/copyright" in runs and "dpkg-query" in runs and "versions.txt" in runs
    copies = [shlex.split(rest) for s, w, rest in _instructions() if s == 1 and w == "COPY"]
    assert ["--from=build", "/out" + NOTICES, NOTICES] in copies
    with open(os.path.join(ROOT, "meson.build")) as f:
        meson = f.read()
    for lib in ("grpc_unsecure", "upb", "re2", "cares", "stdc++"):
        assert re.search(r"'%s', static : true" % re.escape(lib), meson), lib
    for p in STATIC_PACKAGES:  # where this machine has them (the build stage installs them)
        if os.path.isdir(f"/usr/share/doc/{p}"):
            assert os.path.exists(f"/usr/share/doc/{p}/copyright"), p


def test_runtime_stage_copies_every_installed_file():
    layout = image_layout()
    plan = install_plan()
    assert sorted(layout.values()) == sorted(plan.values()), "every file meson installs is in the image"
    names = {os.path.basename(p) for p in layout}
    assert {"gpuslice", "libgpuslice-guard.so", "libgpuslice-nvml-sim.so"} <= names


@needs_apt
def test_binaries_need_only_runtime_packages():
    runtime = apt_packages(1)
    allowed = closure(runtime)
    assert set(runtime) <= allowed
    needs = {}  # library path -> image paths that load it
    for image_path, built in sorted(image_layout().items()):
        p = subprocess.run(["ldd", built], capture_output=True, text=True, timeout=30)
        if p.returncode == 1 and "not a dynamic executable" in p.stderr and image_path.endswith("gpuslice-cdi-hook"):
            continue  # statically linked: the runtime runs it on the host, it needs no package
        assert p.returncode == 0, p.stderr
        for line in p.stdout.splitlines():
            assert "not found" not in line, f"{built}: {line.strip()}"
            m = re.search(r"(/\S+) \(0x", line)
            if m:  # not linux-vdso
                needs.setdefault(m.group(1), []).append(image_path)
    assert len(needs) > 5
    pkgs = owners(needs)
    if SANITIZED:  # a sanitized build also loads the sanitizer runtimes and what they depend on
        allowed |= closure(sorted({p for p in pkgs.values() if SANITIZER_PACKAGES.match(p)}))
    for lib, users in sorted(needs.items()):
        assert lib in pkgs, f"{users}: {lib} belongs to no Debian package"
        assert pkgs[lib] in allowed, (f"{users} load {lib} from {pkgs[lib]}, which the runtime stage's packages "
                                      f"({' '.join(runtime)}) do not bring")


def test_image_layout_finds_its_libraries():
    layout = image_layout()
    with tempfile.TemporaryDirectory(prefix="gs-img-") as img:
        for path, built in layout.items():
            os.makedirs(os.path.dirname(img + path), exist_ok=True)
            shutil.copy2(built, img + path)
        exe = img + "/usr/bin/gpuslice"
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE")}
        p = subprocess.run([exe, "--sim", T4X2, "--sim-state", os.path.join(img, "s"), "inspect", "--json"],
                           capture_output=True, text=True, timeout=30, env=env)
        assert p.returncode == 0, p.stderr
        lib = json.loads(p.stdout)["nvml_library"]
        assert os.path.realpath(lib) == img + "/usr/lib/gpuslice/libgpuslice-nvml-sim.so"
        p = subprocess.run([exe, "--sim", T4X2, "--sim-state", os.path.join(img, "s"), "exec", "--vram", "1GiB",
                            "--", "/usr/bin/env"], capture_output=True, text=True, timeout=30, env=env)
        assert p.returncode == 0, p.stderr
        preload = [line.split("=", 1)[1] for line in p.stdout.splitlines() if line.startswith("LD_PRELOAD=")]
        assert [os.path.realpath(x) for x in preload] == [img + "/usr/lib/gpuslice/libgpuslice-guard.so"]
    # The chart's init container copies the guard from the image.
    objs = [d for _, _, d in helmchart.render()]
    ds = next(o for o in objs if o["kind"] == "DaemonSet")
    init = next(c for c in ds["spec"]["template"]["spec"]["initContainers"] if c["name"] == "install-guard")
    src = shlex.split(init["command"][2])[1]
    assert src in layout and os.path.basename(src) == "libgpuslice-guard.so"
    examples = [rest for s, w, rest in _instructions() if s == 1 and w == "COPY" and "--from" not in rest]
    assert examples == ["examples/nodes/ /usr/share/gpuslice/examples/nodes/"]


def test_chart_installs_the_image_cdi_hook():
    """The chart's install-cdi-hook init container copies the image's gpuslice-cdi-hook, a file the
    image has, and the agent names the installed copy."""
    layout = image_layout()
    ds = next(d for _, _, d in helmchart.render() if d["kind"] == "DaemonSet")
    spec = ds["spec"]["template"]["spec"]
    init = next(c for c in spec["initContainers"] if c["name"] == "install-cdi-hook")
    words = shlex.split(init["command"][2])
    assert words[0] == "cp" and words[1] in layout and os.path.basename(words[1]) == "gpuslice-cdi-hook"
    agent = next(c for c in spec["containers"] if c["name"] == "agent")
    assert agent["args"][agent["args"].index("--cdi-hook") + 1] == words[-1]


def _dockerignore_excludes(rel, patterns):
    """Docker's rule: the last pattern that matches the path or one of its parents decides."""
    parts = rel.split("/")
    excluded = False
    for neg, rx in patterns:
        if any(rx.fullmatch("/".join(parts[:i])) for i in range(1, len(parts) + 1)):
            excluded = not neg
    return excluded


def _dockerignore():
    pats = []
    with open(os.path.join(ROOT, ".dockerignore")) as f:
        for line in f.read().splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            neg = line.startswith("!")
            p = line.lstrip("!").strip("/")
            rx = re.escape(p).replace(r"\*\*", ".*").replace(r"\*", "[^/]*").replace(r"\?", "[^/]")
            pats.append((neg, re.compile(rx)))
    return pats


def test_dockerignore_sends_the_build_inputs_only():
    pats = _dockerignore()
    with open(os.path.join(BUILD, "meson-info", "intro-buildsystem_files.json")) as f:
        # files of the tree only: a build dir may also list the compiler or other system files
        inputs = {os.path.relpath(p, ROOT) for p in json.load(f) if os.path.abspath(p).startswith(ROOT + "/")}
    with open(os.path.join(BUILD, "meson-info", "intro-targets.json")) as f:
        for t in json.load(f):
            if os.path.relpath(t["defined_in"], ROOT).startswith("tests/"):
                continue  # -Dtests=false
            for ts in t.get("target_sources", []):
                inputs |= {os.path.relpath(s, ROOT) for s in ts.get("sources", []) if s.startswith(ROOT + "/")}
    inputs = {p for p in inputs if not p.startswith(("tests/", "build"))}
    assert "meson.build" in inputs and "src/gpuslice.c" in inputs and "guard/guard.c" in inputs
    for rel in sorted(inputs):
        assert not _dockerignore_excludes(rel, pats), f".dockerignore leaves out {rel}, which the build reads"
    for d in ("src", "guard", "sim", "bench"):  # headers are not in the target lists
        for dirpath, _, files in os.walk(os.path.join(ROOT, d)):
            for f in files:
                rel = os.path.relpath(os.path.join(dirpath, f), ROOT)
                assert not _dockerignore_excludes(rel, pats), rel
    assert not _dockerignore_excludes("examples/nodes/t4x2.yaml", pats)
    for rel in ("build/gpuslice", "build-asan/build.ninja", ".git/HEAD", "tests/deploy/check_dockerfile.py",
                "deploy/manifests/gpuslice.yaml", "docs/deploy.md"):
        assert _dockerignore_excludes(rel, pats), f".dockerignore sends {rel}"
