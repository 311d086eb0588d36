// GCC 12 reports -Wuninitialized / -Wmaybe-uninitialized from its own avx512fintrin.h wherever AVX-512
// intrinsics are inlined (_mm256_undefined_pd() is `__m256d __Y = __Y;` on purpose): hundreds of lines of
// a known false positive on an AVX-512 machine. These two macros switch the two warnings off around the
// including of such headers (xsimd, immintrin.h) only; GCC judges them where the inlined function is
// written, so xgrad's own code keeps them.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#define XGRAD_INTRINSIC_HEADERS_BEGIN                                                                     \
    _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wuninitialized\"")                  \
        _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")
#define XGRAD_INTRINSIC_HEADERS_END _Pragma("GCC diagnostic pop")
#else
#define XGRAD_INTRINSIC_HEADERS_BEGIN
#define XGRAD_INTRINSIC_HEADERS_END
#endif
