/* kernels/cuda/normal.cuh — the standard normal of docs/random.md, z =
 * sqrt(-2 ln(1 - u1)) cos(θ), θ = fl(2π_d · u2), evaluated in double-double
 * arithmetic and rounded once, so the GPU's z is within 0.5 ulp (plus about
 * 2^-57 relative) of the exact value for the same u1 and θ.
 *
 * Why: CUDA's double log and cos are accurate to 1 and 2 ulp, glibc's to
 * about half an ulp, so plain double arithmetic put 0.003% of the values 3
 * ulp away from the CPU's. The CPU's own z is within about 1.8 ulp of the
 * exact value; a (nearly) correctly rounded GPU z is therefore never more
 * than 2 ulp from it (ulp distances are whole numbers).
 *
 * Host and device (TSR_HOSTDEV, so it can be checked on the host); every
 * product-sum is an explicit fma() or a plain operation that --fmad=false
 * (and -ffp-contract=off) keeps uncontracted. */
#ifndef TSR_KERNELS_CUDA_NORMAL_CUH
#define TSR_KERNELS_CUDA_NORMAL_CUH

#include "philox.h"

struct dd {
  double hi, lo;
};

static inline TSR_HOSTDEV dd dd_fast_two_sum(double a, double b)  /* |a| >= |b| */
{
  double s = a + b;
  return {s, b - (s - a)};
}

static inline TSR_HOSTDEV dd dd_two_sum(double a, double b)
{
  double s = a + b, bb = s - a;
  return {s, (a - (s - bb)) + (b - bb)};
}

static inline TSR_HOSTDEV dd dd_two_prod(double a, double b)
{
  double p = a * b;
  return {p, fma(a, b, -p)};
}

static inline TSR_HOSTDEV dd dd_add(dd x, dd y)
{
  dd s = dd_two_sum(x.hi, y.hi);
  return dd_fast_two_sum(s.hi, s.lo + (x.lo + y.lo));
}

static inline TSR_HOSTDEV dd dd_mul(dd x, dd y)
{
  dd p = dd_two_prod(x.hi, y.hi);
  return dd_fast_two_sum(p.hi, p.lo + (x.hi * y.lo + x.lo * y.hi));
}

static inline TSR_HOSTDEV dd dd_mul_d(dd x, double d)
{
  dd p = dd_two_prod(x.hi, d);
  return dd_fast_two_sum(p.hi, p.lo + x.lo * d);
}

/* x / y, to about 2^-104 relative. */
static inline TSR_HOSTDEV dd dd_div(dd x, dd y)
{
  double q1 = x.hi / y.hi;
  dd r = dd_add(x, dd_mul_d(y, -q1));
  double q2 = r.hi / y.hi;
  r = dd_add(r, dd_mul_d(y, -q2));
  double q3 = r.hi / y.hi;
  dd q = dd_fast_two_sum(q1, q2);
  return dd_add(q, {q3, 0.0});
}

/* ln v for 0 < v <= 1: v = m·2^k with m in [√½, √2), ln m = 2 atanh(s),
 * s = (m-1)/(m+1) = 2s + (2/3)s³ + 2s⁵(1/5 + s²/7 + ...): the first two
 * terms in double-double, the rest (under 2e-4 of ln m, |s| <= 0.172) in
 * double. */
static inline TSR_HOSTDEV dd dd_log(double v)
{
  int k;
  double m = frexp(v, &k);
  if (m < 0.70710678118654752440) m *= 2.0, k -= 1;
  dd s = dd_div({m - 1.0, 0.0}, dd_two_sum(m, 1.0));  /* m - 1 is exact (Sterbenz) */
  dd s2 = dd_mul(s, s), s3 = dd_mul(s2, s);
  double x = s2.hi, c = 1.0 / 25;
  for (int j = 23; j >= 5; j -= 2) c = c * x + 1.0 / j;
  const dd two_thirds = {0x1.5555555555555p-1, 0x1.5555555555555p-55};
  dd lnm = dd_add(dd_mul_d(s, 2.0), dd_mul(s3, two_thirds));
  lnm = dd_add(lnm, {2.0 * s3.hi * x * c, 0.0});
  const dd ln2 = {0x1.62e42fefa39efp-1, 0x1.abc9e3b39803fp-56};
  return dd_add(dd_mul_d(ln2, (double)k), lnm);
}

/* cos θ for 0 <= θ < 7: r = θ - q·π/2 exactly enough (π/2 in three parts,
 * r kept as double-double), then ±cos r or ±sin r by Taylor series with the
 * leading terms in double-double. */
static inline TSR_HOSTDEV dd dd_cos(double theta)
{
  const double p1 = 0x1.921fb54442d18p0, p2 = 0x1.1a62633145c07p-54, p3 = -0x1.f1976b7ed8fbcp-110;
  double q = rint(theta * 0.63661977236758134308);
  dd r = dd_add({theta, 0.0}, dd_two_prod(-q, p1));
  r = dd_add(r, dd_mul_d({p2, p3}, -q));
  dd r2 = dd_mul(r, r);
  double x = r2.hi;
  int quad = (int)q & 3;
  if (quad == 0 || quad == 2) {  /* cos r = 1 - r²/2 + r⁴/24 - r⁶(1/720 - r²/40320 + ...) */
    double t = 1.0 / 20922789888000.0;  /* 1/16! */
    const double inv[] = {1.0 / 87178291200.0, 1.0 / 479001600.0, 1.0 / 3628800.0, 1.0 / 40320.0, 1.0 / 720.0};
    for (int i = 0; i < 5; i++) t = t * -x + inv[i];  /* alternating: c6 - c8 x + c10 x² ... */
    dd c = dd_add({1.0, 0.0}, dd_mul_d(r2, -0.5));
    const dd inv24 = {0x1.5555555555555p-5, 0x1.5555555555555p-59};  /* 1/24 to 2^-110 */
    c = dd_add(c, dd_mul(dd_mul(r2, r2), inv24));
    c = dd_add(c, {-x * x * x * t, 0.0});
    return quad == 0 ? c : dd{-c.hi, -c.lo};
  }
  /* sin r = r - r³/6 + r⁵(1/120 - r²/5040 + ...) */
  double t = 1.0 / 121645100408832000.0;  /* 1/19! */
  const double inv[] = {1.0 / 355687428096000.0, 1.0 / 1307674368000.0, 1.0 / 6227020800.0, 1.0 / 39916800.0,
                        1.0 / 362880.0, 1.0 / 5040.0, 1.0 / 120.0};
  for (int i = 0; i < 7; i++) t = t * -x + inv[i];
  const dd minus_sixth = {-0x1.5555555555555p-3, -0x1.5555555555555p-57};
  dd s = dd_add(r, dd_mul(dd_mul(r2, r), minus_sixth));
  s = dd_add(s, {x * x * r.hi * t, 0.0});
  return quad == 1 ? dd{-s.hi, -s.lo} : s;  /* cos(π/2 + r) = -sin r, cos(3π/2 + r) = sin r */
}

/* sqrt of a non-negative double-double (one Newton step on sqrt(hi)). */
static inline TSR_HOSTDEV dd dd_sqrt(dd a)
{
  double s = sqrt(a.hi);
  if (a.hi == 0.0) return {s, 0.0};
  dd p = dd_two_prod(s, s);
  double t = ((a.hi - p.hi) - p.lo + a.lo) / (2.0 * s);
  return dd_fast_two_sum(s, t);
}

/* tsr_normal_f64's value, rounded once from double-double. */
static inline TSR_HOSTDEV double tsr_normal_f64_dd(const uint32_t w[4])
{
  double u1 = tsr_u01_f64(w[0], w[1]), u2 = tsr_u01_f64(w[2], w[3]);
  double theta = TSR_TWO_PI * u2;  /* the CPU's θ, rounded the same way */
  dd a = dd_mul_d(dd_log(1.0 - u1), -2.0);
  dd root = dd_sqrt(a), c = dd_cos(theta);
  if (u1 == 0.0) return -0.0 * c.hi;  /* the CPU's sqrt(-2·ln 1) is -0.0: keep its sign of zero */
  dd z = dd_mul(root, c);
  return z.hi;
}

#endif
