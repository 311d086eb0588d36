#!/usr/bin/env bash
# Builds the xgrad vs LibTorch benchmark in build-bench/ (Release, -DXGRAD_BUILD_BENCH=ON; needs
# libtorch-dev) and runs it. The tables go to stdout and to bench/results/mha_bench-<time>.txt, the same
# rows as JSON to bench/results/mha_bench-<time>.json. Extra arguments go to the benchmark, e.g.
#   bench/run.sh --quick --sizes tiny,small      (a smoke run of a few seconds)
# The full run (5 MHA sizes x float32/float64 x 1/2 threads, 3 GPT sizes) takes about 15 minutes on 2
# cores; run it on an otherwise idle machine, since both libraries are timed on the same cores.
set -euo pipefail
cd "$(dirname "$0")/.."

cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DXGRAD_BUILD_BENCH=ON \
    -DXGRAD_BUILD_TESTS=OFF -DXGRAD_BUILD_EXAMPLES=OFF -DXGRAD_BUILD_TOOLS=OFF >/dev/null
cmake --build build-bench -j "$(nproc)"
if [ ! -x build-bench/bench/xgrad_bench ]; then
    echo "bench/run.sh: LibTorch was not found by CMake (apt-get install libtorch-dev)" >&2
    exit 1
fi

# OpenBLAS detects this CPU's core itself (the header prints it: "Zen" on AMD Zen 3, "Prescott" on a
# Xeon newer than Debian's OpenBLAS 0.3.21). OPENBLAS_CORETYPE is left alone: xgrad measures its GEMM
# backends instead (kernels/gemm.cpp), and LibTorch runs on whatever OpenBLAS picked.
# Debian's LibTorch runs its intra-op threads on libgomp and its GEMMs on OpenBLAS's own pthreads. With
# libgomp's default spin-waiting, its idle workers compete with OpenBLAS's threads (and with xgrad's in
# the interleaved rounds) for the 2 cores: LibTorch's 2-thread medium step measured 2-5x slower, and
# xgrad's ~2x slower next to it. PASSIVE makes idle OpenMP workers sleep; it helps LibTorch here.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
# Likewise OpenBLAS's own worker threads spin (calling sched_yield) for up to 2^28 cycles after each
# multithreaded GEMM before they sleep. In interleaved rounds at 2 threads, the workers LibTorch's GEMMs
# woke were still spinning through the next xgrad step: measured here, xgrad's f32 medium step took
# 51 ms next to them and 26 ms with a short timeout, while LibTorch's went from 36 to 33 ms. 2^4 cycles
# lets both libraries' idle BLAS threads sleep at once.
export OPENBLAS_THREAD_TIMEOUT="${OPENBLAS_THREAD_TIMEOUT:-4}"
mkdir -p bench/results
stem="bench/results/mha_bench-$(date +%Y%m%d-%H%M%S)"
./build-bench/bench/xgrad_bench --json "$stem.json" "$@" | tee "$stem.txt"
