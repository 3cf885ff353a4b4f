# Kiln's container images, on Debian 12 like the project itself (docs/deploy.md):
#
#   docker build -t kiln:latest .              # CPU: kiln serve on x86-64 (AVX2 or AVX-512)
#   docker build -t kiln:cuda --target cuda .  # also the CUDA backend, for Hopper GPUs (sm_90a)
#
# The entrypoint is kiln; the default command serves the bundled demo model on 0.0.0.0:8000. Give
# another engine as the command: docker run -p 8000:8000 -v $PWD:/models:ro kiln:latest serve
# /models/model.kiln --host 0.0.0.0. The images run as the unprivileged user kiln (uid 10001).

# --- Build: the compilers and libraries scripts/setup.sh installs (it also installs the test
# tools; none of them reach the runtime images).
FROM debian:12 AS toolchain
ARG DEBIAN_FRONTEND=noninteractive
COPY scripts/setup.sh /tmp/setup.sh
RUN /tmp/setup.sh && rm -rf /var/lib/apt/lists/*

FROM toolchain AS build
WORKDIR /src
COPY . .
RUN cmake --preset release -DKILN_TESTS=OFF -DKILN_BENCH=OFF \
 && cmake --build --preset release --target kiln
# The demo engine for AVX2, which every x86-64 server of the last decade runs (an engine built for
# AVX-512 would refuse those without it).
RUN KILN_CPU_ISA=avx2 build/release/kiln build models/demo -o /out/demo.kiln --dtype bf16

FROM toolchain AS build-cuda
ARG CUDA_VERSION=13.0
ARG CUDA_PACKAGE=13-0
# NVIDIA's Debian 12 repository: nvcc, the CUDA runtime and cuBLAS headers (cuBLAS itself is
# opened at run time).
ADD https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb /tmp/cuda-keyring.deb
RUN dpkg -i /tmp/cuda-keyring.deb && apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends cuda-minimal-build-${CUDA_PACKAGE} libcublas-dev-${CUDA_PACKAGE} \
 && rm -rf /var/lib/apt/lists/*
ENV CUDACXX=/usr/local/cuda-${CUDA_VERSION}/bin/nvcc
WORKDIR /src
COPY . .
RUN cmake --preset cuda -DKILN_TESTS=OFF -DKILN_BENCH=OFF \
 && cmake --build --preset cuda --target kiln

# --- Run: only the shared libraries kiln links (readelf -d kiln | grep NEEDED), and a user.
FROM debian:12-slim AS runtime-base
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends libgomp1 libpcre2-8-0 libutf8proc2 libsentencepiece0 \
      libgrpc++1.51 libgrpc29 libabsl20220623 libxxhash0 libstdc++6 libgcc-s1 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 kiln \
 && useradd --system --uid 10001 --gid kiln --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin kiln
COPY --from=build /out/demo.kiln /opt/kiln/demo.kiln
EXPOSE 8000
ENTRYPOINT ["kiln"]
CMD ["serve", "/opt/kiln/demo.kiln", "--host", "0.0.0.0", "--port", "8000"]

# The CUDA image: kiln with both backends, and cuBLAS from NVIDIA's repository. The GPU driver
# (libcuda) comes from the host through the NVIDIA container toolkit.
FROM runtime-base AS cuda
ARG CUDA_VERSION=13.0
ARG CUDA_PACKAGE=13-0
ARG DEBIAN_FRONTEND=noninteractive
COPY --from=build-cuda /tmp/cuda-keyring.deb /tmp/cuda-keyring.deb
RUN dpkg -i /tmp/cuda-keyring.deb && rm /tmp/cuda-keyring.deb && apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends libcublas-${CUDA_PACKAGE} \
 && rm -rf /var/lib/apt/lists/*
ENV LD_LIBRARY_PATH=/usr/local/cuda-${CUDA_VERSION}/targets/x86_64-linux/lib \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
COPY --from=build-cuda /src/build/cuda/kiln /usr/local/bin/kiln
# Fails the build when a library kiln needs is missing.
RUN kiln --version
USER 10001:10001

# The CPU image, the default target (last).
FROM runtime-base AS runtime
COPY --from=build /src/build/release/kiln /usr/local/bin/kiln
RUN kiln --version
USER 10001:10001
