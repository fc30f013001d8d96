// The core's vector exp, for kernels compiled once per instruction set (the core's own in
// core/numeric/src/simd/, and a plugin's through cmake's growformer_simd_sources). Include it
// after xsimd in a translation unit compiled with one set's flags, and call it with that set's
// xsimd architecture: gf::simd_exp::vexp<xsimd::avx512f>(x). Everything here has internal
// linkage, so no copy compiled with one set's instructions can be picked by the linker for a
// translation unit of another.
#pragma once

#include <xsimd/xsimd.hpp>

#include <cstddef>
#include <cstdint>

namespace gf {
namespace simd_exp {
namespace {

// a * b + c in one rounding where the set has FMA (AVX-512: _mm512_fmadd_ps; AVX2: xsimd's fma3)
// and as a multiply and an add on SSE2. Never left to the compiler: xsimd 8 has no fma for
// avx512f (its generic x * y + z is fused only when GCC contracts it, at -O2 but not at -O1),
// and GCC 12 compiled an xsimd::fma of two broadcasts as vmulss + vaddps (two roundings).
template <class A>
inline xsimd::batch<float, A> vfma(xsimd::batch<float, A> a, xsimd::batch<float, A> b,
                                   xsimd::batch<float, A> c) {
#if defined(__AVX512F__)
  if constexpr (xsimd::batch<float, A>::size == 16)
    return xsimd::batch<float, A>(_mm512_fmadd_ps(a, b, c));
#endif
  return xsimd::fma(a, b, c);
}

// e^(x + lo) without a clamp, for x + lo in [-250 ln 2, 88.7]: Cody-Waite reduction
// x = n ln 2 + r (|r| <= ln 2 / 2), Cephes' degree-5 polynomial for e^r (under 1 ulp from the
// exact value on every set, tested), then the scale by 2^n, which rounds once into the
// subnormals. With SPLIT, LO joins the reduced argument after x - n ln2_hi, which is exact
// (n ln2_hi has at most 17 significant bits and cancels x's leading ones), so a large x and a
// small correction keep every bit of their sum. The reduction's multiply-adds are fused where
// the set has FMA, so the bits are a function of the instruction set, like the products'.
template <bool Split, class A>
inline xsimd::batch<float, A> vexp_core(xsimd::batch<float, A> x, xsimd::batch<float, A> lo) {
  using B = xsimd::batch<float, A>;
  using I = xsimd::batch<int32_t, A>;
  const B magic(12582912.0f);  // 1.5 * 2^23: rounds to an integer
  const B t = vfma<A>(Split ? x + lo : x, B(1.44269504088896341f), magic);
  const B n = t - magic;
  B r = vfma<A>(n, B(-0.693359375f), x);
  if constexpr (Split) r += lo;
  r = vfma<A>(n, B(2.12194440e-4f), r);
  B p(1.9875691500e-4f);
  p = vfma<A>(p, r, B(1.3981999507e-3f));
  p = vfma<A>(p, r, B(8.3334519073e-3f));
  p = vfma<A>(p, r, B(4.1665795894e-2f));
  p = vfma<A>(p, r, B(1.6666665459e-1f));
  p = vfma<A>(p, r, B(5.0000001201e-1f));
  const B y = vfma<A>(p, r * r, r) + B(1.0f);
#if defined(__AVX512F__)
  if constexpr (B::size == 16)  // 2^n, under- and overflow exact (vscalefps, every lane set)
    return B(_mm512_mask_scalef_ps(y, static_cast<__mmask16>(0xFFFF), y, n));
#endif
  // 2^n as two normal powers of two (n in [-252, 128]): the first product is exact, the second
  // rounds once, into the subnormals where the result lies there
  const I ni = xsimd::bitwise_cast<I>(t) - xsimd::bitwise_cast<I>(magic);
  const I n1 = ni >> 1, n2 = ni - n1;
  const B f1 = xsimd::bitwise_cast<B>((n1 + I(127)) << 23);
  const B f2 = xsimd::bitwise_cast<B>((n2 + I(127)) << 23);
  return (y * f1) * f2;
}

// exp(x), lane by lane, the argument clamped to [-110, 89] first, so exp(-inf) = 0 and
// exp(+inf) = inf; NaN stays NaN (every clamp keeps it). 1.5x the speed of xsimd 8's exp on one
// Zen 5 core (8.7 against 5.8 G elements/s, AVX-512).
template <class A>
inline xsimd::batch<float, A> vexp(xsimd::batch<float, A> x) {
  using B = xsimd::batch<float, A>;
  const B lo(-110.0f), hi(89.0f);
#if defined(__AVX512F__)
  // scalef takes any n (overflow to inf, underflow to 0 exact): only -inf and a magnitude the
  // rounding cannot take need the lower clamp; max(lo, x) returns x when x is NaN (vmaxps; the
  // masked form with every lane set, so GCC 12 sees no undefined source register once inlined)
  if constexpr (B::size == 16)
    x = B(_mm512_mask_max_ps(lo, static_cast<__mmask16>(0xFFFF), lo, x));
  else
#endif
    x = xsimd::select(x < lo, lo, xsimd::select(x > hi, hi, x));
  return vexp_core<false, A>(x, B(0.0f));
}

// Y = F(Y) for the last N < W elements of Y, padded with zeros into one register: a row's tail
// goes through the same vector code as its body, so a value's bits do not depend on where in
// the row it lies.
template <class A, class F>
inline void padded_tail(float* y, size_t n, F&& f) {
  using B = xsimd::batch<float, A>;
  alignas(64) float lanes[B::size];
  for (size_t u = 0; u < B::size; ++u) lanes[u] = u < n ? y[u] : 0.0f;
  f(B::load_aligned(lanes)).store_aligned(lanes);
  for (size_t u = 0; u < n; ++u) y[u] = lanes[u];
}

}  // namespace
}  // namespace simd_exp
}  // namespace gf
