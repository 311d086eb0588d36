#!/usr/bin/env bash
# Builds the xgrad vs LibTorch benchmark in build-bench/ (Release, -DXGRAD_BUILD_BENCH=ON; needs
# libtorch-dev) and runs it. The tables go to stdout and to bench/results/mha_bench-<time>.txt, the same
# rows as JSON to bench/results/mha_bench-<time>.json. Extra arguments go to the benchmark, e.g.
#   bench/run.sh --quick --sizes tiny,small      (a smoke run of a few seconds)
# The full run (5 MHA sizes x float32/float64 x 1/2 threads, 3 GPT sizes, bf16 columns) takes about 15 minutes on 2
# cores; run it on an otherwise idle machine, since both libraries are timed on the same cores.
set -euo pipefail
cd "$(dirname "$0")/.."

# The benchmark needs xgrad::core alone: no train/, tools, examples, Python module or tests are built.
cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DXGRAD_BUILD_BENCH=ON -DXGRAD_BUILD_TRAIN=OFF \
    -DXGRAD_BUILD_TESTS=OFF -DXGRAD_BUILD_EXAMPLES=OFF -DXGRAD_BUILD_TOOLS=OFF >/dev/null
cmake --build build-bench -j "$(nproc)"
if [ ! -x build-bench/bench/xgrad_bench ]; then
    echo "bench/run.sh: LibTorch was not found by CMake (apt-get install libtorch-dev)" >&2
    exit 1
fi

# LibTorch set up as a careful user would on this CPU:
# - OpenBLAS (LibTorch's GEMMs) forced to the best kernel family the CPU's flags allow, among the ones
#   Debian's 0.3.21 has: it does not recognise CPUs newer than itself and falls back to its SSE3
#   "Prescott" kernels at a tenth of the FMA peak. The choice is printed in the bench header.
best_openblas_core() {
    local flags
    flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
    has() { [[ "$flags" == *" $1 "* ]]; }
    if has avx512f && has avx512bw && has avx512vl && has avx512dq && has avx512_bf16; then
        echo Cooperlake
    elif has avx512f && has avx512bw && has avx512vl && has avx512dq; then
        echo SkylakeX
    elif has avx2 && has fma; then
        echo Haswell
    elif has avx; then
        echo Sandybridge
    fi
}
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
    core=$(best_openblas_core)
    [ -n "$core" ] && export OPENBLAS_CORETYPE="$core"
fi
# - glibc malloc: LibTorch frees and re-allocates its multi-megabyte activations every step; above the
#   default 128 KiB mmap threshold each one is a fresh mmap whose pages fault in again (a page-fault storm
#   per step). Keeping them on the heap and not trimming it removes that (docs/performance.md measures it).
export MALLOC_MMAP_THRESHOLD_="${MALLOC_MMAP_THRESHOLD_:-33554432}"  # glibc's largest: 32 MiB
export MALLOC_TRIM_THRESHOLD_="${MALLOC_TRIM_THRESHOLD_:-4294967296}"
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
