# gpuslice node agent image (docs/deploy.md): the agent (gpuslice), the guard
# (libgpuslice-guard.so, installed on the node by the chart's init container) and the simulated
# NVML library with the example node descriptions (gpuslice --sim ... works in the image).
#
#   docker build -t gpuslice:0.1.0 .
#   docker run --rm gpuslice:0.1.0 --sim /usr/share/gpuslice/examples/nodes/h100x4-l4x2.yaml inspect
#
# tests/deploy/check_dockerfile.py checks, without Docker, that every package named here exists in
# Debian's archive and that the built binaries need only libraries the runtime packages provide.

FROM debian:bookworm-slim AS build
# The build part of scripts/deps.sh; the test and fuzzing packages are left out (-Dtests=false).
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      gcc libstdc++-12-dev pkg-config meson ninja-build \
      libyaml-dev libjansson-dev libcurl4-openssl-dev libssl-dev libgrpc-dev libprotobuf-c-dev protobuf-c-compiler \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# prefix /usr and libdir lib: the binary finds its libraries in ../lib/gpuslice/ next to itself.
RUN meson setup /build -Dtests=false --buildtype=release --prefix=/usr -Dlibdir=lib \
 && ninja -C /build \
 && meson install -C /build --destdir /out
# gRPC core, abseil, upb, re2, c-ares and libstdc++ are linked into the binary statically: their
# licences ship with it, and the exact versions are recorded (rebuild when Debian updates them).
ENV BUNDLED="libgrpc-dev libabsl-dev libre2-dev libc-ares-dev libstdc++-12-dev"
RUN mkdir -p /out/usr/share/doc/gpuslice/bundled \
 && for p in $BUNDLED; do cp -L /usr/share/doc/$p/copyright /out/usr/share/doc/gpuslice/bundled/$p.copyright; done \
 && dpkg-query -W -f '${Package} ${Version}\n' $BUNDLED > /out/usr/share/doc/gpuslice/bundled/versions.txt

FROM debian:bookworm-slim
# The shared libraries the binaries link (gRPC core, abseil and libstdc++ are linked in statically),
# and libssl3, which the extender loads for TLS.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libyaml-0-2 libjansson4 libcurl4 libssl3 libprotobuf-c1 zlib1g \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/usr/bin/gpuslice /usr/bin/gpuslice
COPY --from=build /out/usr/bin/gpuslice-cdi-hook /usr/bin/gpuslice-cdi-hook
COPY --from=build /out/usr/lib/gpuslice/ /usr/lib/gpuslice/
COPY --from=build /out/usr/share/doc/gpuslice/ /usr/share/doc/gpuslice/
COPY examples/nodes/ /usr/share/gpuslice/examples/nodes/
LABEL org.opencontainers.image.title="gpuslice" \
      org.opencontainers.image.description="Kubernetes node agent that shares NVIDIA GPUs: MIG, time-slicing with VRAM quotas, MPS" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="0.1.0"
# Root: the agent writes the kubelet's device-plugin directory and other host paths.
ENTRYPOINT ["gpuslice"]
CMD ["--help"]
