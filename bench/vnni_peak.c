/* The int8 dot-product peak of this cpu: AVX-512 VNNI vpdpbusd (64 u8 x s8 multiply-adds per
 * instruction) in 16 independent chains per thread, 2 x 10^8 instructions per thread. Prints the
 * best of 5 runs in G MAC/s for the thread count given (default 1). Every accumulator is bound to a
 * register by an empty asm, so the compiler can neither merge the identical chains nor drop them
 * (a version without it measured 668 G MAC/s per core on a Zen 4 whose true rate is 234: gcc had
 * folded chains that compute the same values).
 *   cc -O2 -mavx512f -mavx512bw -mavx512vnni -fopenmp bench/vnni_peak.c -o vnni_peak && ./vnni_peak 2 */
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

#define STEP(a) a = _mm512_dpbusd_epi32(a, x, y)
#define BIND(a, b, c, d) __asm__ volatile("" : "+v"(a), "+v"(b), "+v"(c), "+v"(d))

int main(int argc, char** argv) {
  const int threads = argc > 1 ? atoi(argv[1]) : 1;
  const long iters = 12500000; /* x 16 instructions */
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    long sink = 0;
    const double t0 = now();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    {
      const int t = omp_get_thread_num();
      __m512i a0 = _mm512_set1_epi32(t), a1 = _mm512_set1_epi32(t + 1), a2 = _mm512_set1_epi32(t + 2),
              a3 = _mm512_set1_epi32(t + 3), a4 = _mm512_set1_epi32(t + 4), a5 = _mm512_set1_epi32(t + 5),
              a6 = _mm512_set1_epi32(t + 6), a7 = _mm512_set1_epi32(t + 7), a8 = _mm512_set1_epi32(t + 8),
              a9 = _mm512_set1_epi32(t + 9), a10 = _mm512_set1_epi32(t + 10), a11 = _mm512_set1_epi32(t + 11),
              a12 = _mm512_set1_epi32(t + 12), a13 = _mm512_set1_epi32(t + 13), a14 = _mm512_set1_epi32(t + 14),
              a15 = _mm512_set1_epi32(t + 15);
      const __m512i x = _mm512_set1_epi8(3), y = _mm512_set1_epi8(5);
      for (long i = 0; i < iters; ++i) {
        STEP(a0); STEP(a1); STEP(a2); STEP(a3); STEP(a4); STEP(a5); STEP(a6); STEP(a7);
        STEP(a8); STEP(a9); STEP(a10); STEP(a11); STEP(a12); STEP(a13); STEP(a14); STEP(a15);
        BIND(a0, a1, a2, a3); BIND(a4, a5, a6, a7); BIND(a8, a9, a10, a11); BIND(a12, a13, a14, a15);
      }
      __m512i s = _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
                                   _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7)));
      s = _mm512_add_epi32(s, _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a8, a9), _mm512_add_epi32(a10, a11)),
                                               _mm512_add_epi32(_mm512_add_epi32(a12, a13), _mm512_add_epi32(a14, a15))));
      sink += _mm512_reduce_add_epi32(s);
    }
    const double dt = now() - t0, macs = (double)threads * iters * 16 * 64;
    if (macs / dt / 1e9 > best) best = macs / dt / 1e9;
    if (sink == 42) printf(" ");
  }
  printf("%.1f\n", best);
  return 0;
}
