# The image helm/kbox deploys: kboxd, kbox-sandbox, the harness and the policies on a CUDA base
# with PyTorch. Not built in this project's CI (no Docker engine there); docs/operations.md says
# how to build it where one exists:
#
#   docker build -t <registry>/kbox/kboxd:<version> .
#
# Stage 1 builds on Debian 12 exactly as a developer does (scripts/install-deps, CMake, Ninja).
# The binaries link Boost, prometheus-cpp and libcrypto statically and protobuf/libseccomp
# dynamically, so they run on Ubuntu 24.04, whose libprotobuf.so.32 and libseccomp.so.2 match
# (docs/dependencies.md, "Running the binaries on the GPU machine").

FROM debian:12 AS build
ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /src
COPY . .
RUN rm -rf build \
 && scripts/install-deps \
 && cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKBOX_BUILD_TESTS=OFF \
 && cmake --build build --target kboxd kbox-sandbox kbox_sandbox_enter kbox_launch_probe kbox kbox-policy \
 && mkdir -p /out/bin /out/share/kbox \
 && cp build/bin/kboxd build/bin/kbox-sandbox build/bin/libkbox_sandbox_enter.so build/bin/libkbox_launch_probe.so build/bin/kbox \
       build/bin/kbox-policy /out/bin/ \
 && cp -r worker/harness /out/share/kbox/harness \
 && cp -r policy/anticheat /out/share/kbox/anticheat \
 && cp -r policy/seccomp /out/share/kbox/seccomp \
 && find /out/share -name __pycache__ -prune -exec rm -rf {} +

# Stage 2: the runtime. A *devel* CUDA image, not a runtime one: candidates are compiled inside
# the pod (torch.utils.cpp_extension.load_inline runs nvcc and g++), so the toolkit is part of
# what kboxd serves. Its CUDA major version must match the PyTorch wheel's (torch.version.cuda).
FROM nvidia/cuda:12.6.3-cudnn-devel-ubuntu24.04 AS runtime
ARG TORCH_VERSION=2.7.1
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      python3 python3-dev python3-venv g++ ninja-build libprotobuf32t64 libseccomp2 ca-certificates \
 && rm -rf /var/lib/apt/lists/*
# PyTorch (with its bundled CUDA libraries and Triton) in a venv; kboxd's config points at it
# (values.yaml: config.python), and the sandbox binds the interpreter's prefix read-only.
RUN python3 -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-cache-dir "torch==${TORCH_VERSION}" numpy setuptools ninja
COPY --from=build /out/ /opt/kbox/
# kboxd finds kbox-sandbox, libkbox_sandbox_enter.so, libkbox_launch_probe.so and ../share/kbox/{harness,anticheat,seccomp}
# beside itself, so the chart sets none of those paths.
ENV PATH=/opt/kbox/bin:/opt/venv/bin:${PATH}
EXPOSE 8080
# Root: the sandbox maps an unprivileged id and mounts per-job tmpfs (docs/sandbox.md); the chart's
# securityContext grants the capabilities for that and nothing more.
USER 0
ENTRYPOINT ["/opt/kbox/bin/kboxd"]
CMD ["--config", "/etc/kbox/config/kboxd.textproto"]
