/* Instructions per second of one thread for the multiply-adds an attention or matmul kernel
 * could use: f32 FMA, bf16 pair dot products (vdpbf16ps) and int8 dot products
 * (vpdpbusd), each on 512-bit vectors with 12 independent accumulators.
 * Build and run: gcc -O2 -march=sapphirerapids rates.c -o rates && ./rates */
#include <immintrin.h>
#include <stdio.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
#define R12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
int main(int argc, char **argv) {
  (void)argv;
  const long n = 100000000;
  float z = argc * 0.001f;
#define DF(i) __m512 a##i = _mm512_set1_ps(z * i);
  R12(DF)
  __m512 x = _mm512_set1_ps(0.9999f), y = _mm512_set1_ps(0.0001f);
  double t = now();
#define F(i) a##i = _mm512_fmadd_ps(a##i, x, y);
  for (long i = 0; i < n; i++) { R12(F) }
  printf("vfmadd231ps  %.2f G/s x 16 multiply-adds\n", n * 12 / (now() - t) / 1e9);
  __m512bh bx = (__m512bh)_mm512_set1_epi16(0x3f80 + argc), by = (__m512bh)_mm512_set1_epi16(0x3f80);
  t = now();
#define B(i) a##i = _mm512_dpbf16_ps(a##i, bx, by);
  for (long i = 0; i < n; i++) { R12(B) }
  printf("vdpbf16ps    %.2f G/s x 32 multiply-adds\n", n * 12 / (now() - t) / 1e9);
  __m512i ix = _mm512_set1_epi32(argc), iy = _mm512_set1_epi32(3);
#define DI(i) __m512i b##i = _mm512_set1_epi32(i);
  R12(DI)
  t = now();
#define V(i) b##i = _mm512_dpbusd_epi32(b##i, ix, iy);
  for (long i = 0; i < n; i++) { R12(V) }
  printf("vpdpbusd     %.2f G/s x 64 multiply-adds\n", n * 12 / (now() - t) / 1e9);
  float s = 0;
#define S(i) s += _mm512_reduce_add_ps(a##i) + _mm512_reduce_add_epi32(b##i);
  R12(S)
  printf("(checksum %g)\n", s);
  return 0;
}
