/* The floating-point peaks of this cpu, for the training benchmark's shares: f32 FMA
 * (vfmadd231ps zmm: 16 multiply-adds, 32 FLOPs per instruction) and bf16 dot products
 * (vdpbf16ps zmm: 32 bf16 pairs into 16 f32 sums, 64 FLOPs per instruction), each in 16
 * independent chains per thread, 1.25 x 10^7 x 16 instructions per thread and run, the best of 5
 * runs. Every accumulator is bound to a register by an empty asm, as in vnni_peak.c, so the
 * compiler can neither merge the identical chains nor drop them. Prints one JSON line with the
 * GFLOP/s for the thread count given (default 1).
 *   cc -O2 -mavx512f -mavx512bf16 -fopenmp bench/fma_peak.c -o fma_peak && ./fma_peak 2 */
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

#define BIND(a, b, c, d) __asm__ volatile("" : "+v"(a), "+v"(b), "+v"(c), "+v"(d))
#define SIXTEEN(S)                                                                  \
  S(a0); S(a1); S(a2); S(a3); S(a4); S(a5); S(a6); S(a7); S(a8); S(a9); S(a10);    \
  S(a11); S(a12); S(a13); S(a14); S(a15);                                           \
  BIND(a0, a1, a2, a3); BIND(a4, a5, a6, a7); BIND(a8, a9, a10, a11); BIND(a12, a13, a14, a15)
#define FMA(a) a = _mm512_fmadd_ps(a, x, y)
#define DOT(a) a = _mm512_dpbf16_ps(a, bx, by)

static const long kIters = 12500000; /* x 16 instructions */

/* GFLOP/s of one kind (0: f32 FMA, 1: bf16 dot) with `threads` threads, the best of 5. */
static double peak(int kind, int threads) {
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    float sink = 0;
    const double t0 = now();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    {
      const float t = (float)omp_get_thread_num() * 1e-3f;
      __m512 a0 = _mm512_set1_ps(t), a1 = _mm512_set1_ps(t + 1e-4f), a2 = _mm512_set1_ps(t + 2e-4f),
             a3 = _mm512_set1_ps(t + 3e-4f), a4 = _mm512_set1_ps(t + 4e-4f), a5 = _mm512_set1_ps(t + 5e-4f),
             a6 = _mm512_set1_ps(t + 6e-4f), a7 = _mm512_set1_ps(t + 7e-4f), a8 = _mm512_set1_ps(t + 8e-4f),
             a9 = _mm512_set1_ps(t + 9e-4f), a10 = _mm512_set1_ps(t + 1e-5f), a11 = _mm512_set1_ps(t + 2e-5f),
             a12 = _mm512_set1_ps(t + 3e-5f), a13 = _mm512_set1_ps(t + 4e-5f), a14 = _mm512_set1_ps(t + 5e-5f),
             a15 = _mm512_set1_ps(t + 6e-5f);
      const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
      const __m512bh bx = _mm512_cvtne2ps_pbh(x, x), by = _mm512_cvtne2ps_pbh(y, y);
      if (kind == 0) {
        for (long i = 0; i < kIters; ++i) { SIXTEEN(FMA); }
      } else {
        for (long i = 0; i < kIters; ++i) { SIXTEEN(DOT); }
      }
      __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                               _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
      s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)),
                                         _mm512_add_ps(_mm512_add_ps(a12, a13), _mm512_add_ps(a14, a15))));
      sink += _mm512_reduce_add_ps(s);
    }
    const double dt = now() - t0, flops = (double)threads * kIters * 16 * (kind == 0 ? 32 : 64);
    if (flops / dt / 1e9 > best) best = flops / dt / 1e9;
    if (sink == 42.f) printf(" ");
  }
  return best;
}

int main(int argc, char** argv) {
  const int threads = argc > 1 ? atoi(argv[1]) : 1;
  printf("{\"threads\": %d, \"fp32_gflops\": %.1f, \"bf16_gflops\": %.1f}\n", threads, peak(0, threads), peak(1, threads));
  return 0;
}
