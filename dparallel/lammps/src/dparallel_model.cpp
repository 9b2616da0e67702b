// SPDX-License-Identifier: MIT
// dparallel's ACSF + MLP potential: reading lammps.model and the fused energy/force kernel.
#include "dparallel_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

// The hot loops are compiled twice, for x86-64-v3 (AVX2 and FMA) and for the baseline
// x86-64, and the loader picks one per machine (GCC function multi-versioning): the plugin
// stays portable (-O3, no -march). The v3 clone contracts a * b + c into FMAs (as the numba
// kernel's "contract"), so its results differ from the baseline clone's in the last bits.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define DP_SIMD __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define DP_SIMD
#endif

namespace dparallel {

namespace {

const char *const ACTIVATIONS[] = {"identity", "tanh", "logistic", "softplus_n2p2", "relu",
                                   "gaussian", "cos", "revlogistic", "exp", "harmonic",
                                   "softplus", "silu", "gelu"};
constexpr double EXP_LIMIT = 35.0;  // n2p2's, as dparallel/nn/activations.py
constexpr double PI = 3.14159265358979323846;

std::string fmt(double x) {  // shortest form that names the value (%g)
  std::ostringstream os;
  os << x;
  return os.str();
}

class Tokens {
 public:
  Tokens(const std::string &path) : path_(path) {
    std::ifstream in(path);
    if (!in) fail("cannot open the file");
    std::string line;
    while (std::getline(in, line)) {
      lines_.push_back(line);
      auto hash = line.find('#');
      if (hash != std::string::npos) line.resize(hash);
      std::istringstream ls(line);
      std::string t;
      while (ls >> t) {
        tok_.push_back(t);
        line_of_.push_back(static_cast<int>(lines_.size()));
      }
    }
  }
  [[noreturn]] void fail(const std::string &what) const {
    std::string where = path_;
    if (pos_ > 0 && pos_ <= line_of_.size()) where += ", line " + std::to_string(line_of_[pos_ - 1]);
    throw std::runtime_error(where + ": " + what);
  }
  bool done() const { return pos_ >= tok_.size(); }
  std::string word() {
    if (done()) fail("file ends early (truncated?); re-run `dparallel export MODEL_DIR`");
    return tok_[pos_++];
  }
  void expect(const std::string &w) {
    std::string got = word();
    if (got != w) fail("expected '" + w + "', found '" + got + "'");
  }
  double real() {
    std::string t = word();
    char *end = nullptr;
    double v = std::strtod(t.c_str(), &end);
    if (end == t.c_str() || *end != '\0') fail("expected a number, found '" + t + "'");
    return v;
  }
  int integer() {
    std::string t = word();
    char *end = nullptr;
    long v = std::strtol(t.c_str(), &end, 10);
    if (end == t.c_str() || *end != '\0') fail("expected an integer, found '" + t + "'");
    return static_cast<int>(v);
  }
  std::string rest_of_line() {  // the raw text after the current token, on its line
    int ln = line_of_[pos_ - 1];
    std::string s = lines_[ln - 1];
    auto p = s.find(tok_[pos_ - 1]);
    s = s.substr(p + tok_[pos_ - 1].size());
    while (pos_ < tok_.size() && line_of_[pos_] == ln) ++pos_;
    return s.substr(s.find_first_not_of(' ') == std::string::npos ? 0 : s.find_first_not_of(' '));
  }

 private:
  std::string path_;
  std::vector<std::string> tok_, lines_;
  std::vector<int> line_of_;
  size_t pos_ = 0;
};

inline double ipow(double x, int n) {
  double r = 1.0;
  for (int i = 0; i < n; ++i) r *= x;
  return r;
}

// Branch-free exp, cos(pi x), sin(pi x) that the compiler can vectorise (libm calls keep a
// loop scalar): the same polynomials as dparallel/kernels/_vecmath.py, ~1-2 ulp.
inline double vexp(double x) {
  const double SHIFT = 6755399441055744.0;  // 1.5 * 2^52
  x = x < -746.0 ? -746.0 : (x > 709.0 ? 709.0 : x);
  const double t = x * 1.4426950408889634 + SHIFT;
  const double nn = t - SHIFT;
  double r = x - nn * 6.93147180369123816490e-01;
  r = r - nn * 1.90821492927058770002e-10;
  double p = 1.0 / 6227020800.0;
  p = p * r + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  int64_t tb, sb;
  const double sh = SHIFT;
  std::memcpy(&tb, &t, 8);
  std::memcpy(&sb, &sh, 8);
  const int64_t k = tb - sb, k1 = k >> 1;
  const int64_t b1 = (k1 + 1023) << 52, b2 = (k - k1 + 1023) << 52;
  double s1, s2;
  std::memcpy(&s1, &b1, 8);
  std::memcpy(&s2, &b2, 8);
  return p * s1 * s2;
}

inline double sin_pi_half(double y) {  // sin(pi y), |y| <= 1/2
  const double z = PI * y, z2 = z * z;
  double p = -1.0 / 1.21645100408832e17;
  p = p * z2 + 1.0 / 355687428096000.0;
  p = p * z2 - 1.0 / 1307674368000.0;
  p = p * z2 + 1.0 / 6227020800.0;
  p = p * z2 - 1.0 / 39916800.0;
  p = p * z2 + 1.0 / 362880.0;
  p = p * z2 - 1.0 / 5040.0;
  p = p * z2 + 1.0 / 120.0;
  p = p * z2 - 1.0 / 6.0;
  return z + z * z2 * p;
}

inline double cos_pi_half(double y) {  // cos(pi y), |y| <= 1/2
  const double z2 = (PI * y) * (PI * y);
  double p = 1.0 / 2.43290200817664e18;
  p = p * z2 - 1.0 / 6402373705728000.0;
  p = p * z2 + 1.0 / 20922789888000.0;
  p = p * z2 - 1.0 / 87178291200.0;
  p = p * z2 + 1.0 / 479001600.0;
  p = p * z2 - 1.0 / 3628800.0;
  p = p * z2 + 1.0 / 40320.0;
  p = p * z2 - 1.0 / 720.0;
  p = p * z2 + 1.0 / 24.0;
  p = p * z2 - 0.5;
  return 1.0 + z2 * p;
}

// f_c(r) and df_c/dr, zero at and beyond rc (dparallel/kernels/cutoffs.py).
inline void cutoff_fn(const Cutoff &c, double r, double &f, double &df) {
  if (r >= c.rc) {
    f = df = 0.0;
    return;
  }
  if (c.type == 2 || c.type == 3) {
    double t = std::tanh(1.0 - r / c.rc), t2 = t * t;
    f = t2 * t;
    df = -3.0 * t2 * (1.0 - t2) / c.rc;
    if (c.type == 3) {
      double n = std::tanh(1.0);
      n = 1.0 / (n * n * n);
      f *= n;
      df *= n;
    }
    return;
  }
  if (c.type == 0) {
    f = 1.0;
    df = 0.0;
    return;
  }
  double rci = c.alpha * c.rc, width = c.rc - rci;
  if (c.alpha > 0.0 && r < rci) {
    f = 1.0;
    df = 0.0;
    return;
  }
  double x = (r - rci) / width;
  x = x < 0.0 ? 0.0 : (x > 1.0 ? 1.0 : x);
  double dfdx;
  switch (c.type) {
    case 1:
      f = 0.5 * (1.0 - sin_pi_half(x - 0.5));  // cos(pi x) = -sin(pi (x - 1/2))
      dfdx = -0.5 * PI * cos_pi_half(x - 0.5);  // sin(pi x) = cos(pi (x - 1/2))
      break;
    case 4: {
      double one_m = 1.0 - x * x;
      if (one_m < 1e-300) one_m = 1e-300;
      f = std::exp(1.0 - 1.0 / one_m);
      dfdx = -2.0 * x * f / (one_m * one_m);
      break;
    }
    case 5:
      f = (2.0 * x - 3.0) * x * x + 1.0;
      dfdx = (6.0 * x - 6.0) * x;
      break;
    case 6: {
      double x2 = x * x;
      f = ((15.0 - 6.0 * x) * x - 10.0) * x2 * x + 1.0;
      dfdx = x2 * ((60.0 - 30.0 * x) * x - 30.0);
      break;
    }
    case 7: {
      double x3 = x * x * x;
      f = (x * (x * (20.0 * x - 70.0) + 84.0) - 35.0) * x3 * x + 1.0;
      dfdx = x3 * (x * (x * (140.0 * x - 420.0) + 420.0) - 140.0);
      break;
    }
    default: {  // 8
      double x4 = x * x * x * x;
      f = (x * (x * ((315.0 - 70.0 * x) * x - 540.0) + 420.0) - 126.0) * x4 * x + 1.0;
      dfdx = x4 * (x * (x * ((2520.0 - 630.0 * x) * x - 3780.0) + 2520.0) - 630.0);
    }
  }
  df = dfdx / width;
}

// Z = 2^(1-zeta) (1 + lambda c)^zeta and dZ/dc; 0 where 1 + lambda c <= 0 (as n2p2).
inline void angular(const Angular &a, double c, double &z, double &dz) {
  double base = 1.0 + a.lambda * c, pm1, val;
  if (a.izeta) {
    pm1 = ipow(base, a.izeta - 1);
    val = pm1 * base;
  } else {
    double safe = base > 0.0 ? base : 1.0;
    pm1 = std::pow(safe, a.zeta - 1.0);
    val = pm1 * safe;
  }
  if (a.lambda != 0.0 && !(base > 0.0)) val = pm1 = 0.0;
  z = a.pre * val;
  dz = a.pre * a.zeta * a.lambda * pm1;
}

// f_c and df_c/dr of M distances (the type switch outside the loop, so it vectorises).
DP_SIMD void cutoff_batch(const Cutoff &c, const double *__restrict r, int M, double *__restrict f,
                  double *__restrict df) {
  if (c.type == 1 && c.alpha == 0.0) {
    const double inv = 1.0 / c.rc;
    for (int m = 0; m < M; ++m) {
      const double x = r[m] * inv, y = (x < 1.0 ? x : 1.0) - 0.5;
      const double in = r[m] < c.rc ? 1.0 : 0.0;
      f[m] = in * 0.5 * (1.0 - sin_pi_half(y));
      df[m] = in * (-0.5 * PI) * cos_pi_half(y) * inv;
    }
    return;
  }
  for (int m = 0; m < M; ++m) cutoff_fn(c, r[m], f[m], df[m]);
}

// Z and dZ/dcos of one angular function for M cosines (vectorisable for integer zeta).
inline void angular_batch(const Angular &a, const double *__restrict c, int M, double *__restrict z,
                   double *__restrict dz) {
  if (!a.izeta) {
    for (int m = 0; m < M; ++m) angular(a, c[m], z[m], dz[m]);
    return;
  }
  for (int m = 0; m < M; ++m) dz[m] = 1.0;  // base^(zeta - 1), built up in place
  for (int t = 1; t < a.izeta; ++t)
    for (int m = 0; m < M; ++m) dz[m] *= 1.0 + a.lambda * c[m];
  const double pz = a.pre * a.zeta * a.lambda;
  const bool clip = a.lambda != 0.0;
  for (int m = 0; m < M; ++m) {
    const double base = 1.0 + a.lambda * c[m];
    const double keep = (!clip || base > 0.0) ? 1.0 : 0.0;
    const double pm1 = keep * dz[m];
    z[m] = a.pre * pm1 * base;
    dz[m] = pz * pm1;
  }
}

// sum_m x[m] y[m] v[m] (w[m]), in four interleaved partial sums (a fixed order, repeatable).
inline double dot(const double *__restrict x, const double *__restrict y,
                  const double *__restrict v, const double *__restrict w, int M) {
  double s[4] = {0.0, 0.0, 0.0, 0.0};
  int m = 0;
  if (w) {
    for (; m + 4 <= M; m += 4)
      for (int l = 0; l < 4; ++l) s[l] += x[m + l] * y[m + l] * v[m + l] * w[m + l];
    for (; m < M; ++m) s[0] += x[m] * y[m] * v[m] * w[m];
  } else {
    for (; m + 4 <= M; m += 4)
      for (int l = 0; l < 4; ++l) s[l] += x[m + l] * y[m + l] * v[m + l];
    for (; m < M; ++m) s[0] += x[m] * y[m] * v[m];
  }
  return (s[0] + s[1]) + (s[2] + s[3]);
}

// y[c] = sum_r x[r] W[r * ncol + c] (W row-major, nrow x ncol), r ascending. Columns in
// blocks of 16 held in four 4-wide registers across the rows (GCC vector extensions; two
// SSE2 halves each in the baseline clone): one load of W per multiply-add, no stores.
typedef double v4d __attribute__((vector_size(32)));

inline void vecmat(const double *__restrict W, const double *__restrict x, int nrow, int ncol,
                   double *__restrict y) {
  int c0 = 0;
  for (; c0 + 16 <= ncol; c0 += 16) {
    v4d a0 = {0.0, 0.0, 0.0, 0.0}, a1 = a0, a2 = a0, a3 = a0, w0, w1, w2, w3;
    for (int r = 0; r < nrow; ++r) {
      const double *wr = W + static_cast<size_t>(r) * ncol + c0;
      const v4d xr = {x[r], x[r], x[r], x[r]};
      std::memcpy(&w0, wr, 32);
      std::memcpy(&w1, wr + 4, 32);
      std::memcpy(&w2, wr + 8, 32);
      std::memcpy(&w3, wr + 12, 32);
      a0 += xr * w0;
      a1 += xr * w1;
      a2 += xr * w2;
      a3 += xr * w3;
    }
    std::memcpy(y + c0, &a0, 32);
    std::memcpy(y + c0 + 4, &a1, 32);
    std::memcpy(y + c0 + 8, &a2, 32);
    std::memcpy(y + c0 + 12, &a3, 32);
  }
  for (; c0 + 4 <= ncol; c0 += 4) {
    v4d a0 = {0.0, 0.0, 0.0, 0.0}, w0;
    for (int r = 0; r < nrow; ++r) {
      const v4d xr = {x[r], x[r], x[r], x[r]};
      std::memcpy(&w0, W + static_cast<size_t>(r) * ncol + c0, 32);
      a0 += xr * w0;
    }
    std::memcpy(y + c0, &a0, 32);
  }
  for (; c0 < ncol; ++c0) {
    double a = 0.0;
    for (int r = 0; r < nrow; ++r) a += x[r] * W[static_cast<size_t>(r) * ncol + c0];
    y[c0] = a;
  }
}

// Activation value and derivative (dparallel/nn/activations.py; torch's for the last 3).
inline void activate(int id, double x, double &y, double &dy) {
  switch (id) {
    case 0: y = x; dy = 1.0; break;
    case 1: y = std::tanh(x); dy = 1.0 - y * y; break;
    case 2:
      if (x > EXP_LIMIT) { y = 1.0; dy = 0.0; }
      else if (x < -EXP_LIMIT) { y = 0.0; dy = 0.0; }
      else { y = 1.0 / (1.0 + std::exp(-x)); dy = y * (1.0 - y); }
      break;
    case 3:
      if (x > EXP_LIMIT) { y = x; dy = 1.0; }
      else if (x < -EXP_LIMIT) { y = 0.0; dy = 0.0; }
      else { double e = std::exp(x); y = std::log(1.0 + e); dy = e / (1.0 + e); }
      break;
    case 4: y = x > 0.0 ? x : 0.0; dy = x > 0.0 ? 1.0 : 0.0; break;
    case 5: y = std::exp(-0.5 * x * x); dy = -x * y; break;
    case 6: y = std::cos(x); dy = -std::sin(x); break;
    case 7: {
      double xc = x < -700.0 ? -700.0 : (x > 700.0 ? 700.0 : x);
      double s = 1.0 / (1.0 + std::exp(-xc));
      y = 1.0 - s;
      dy = (x < -700.0 || x > 700.0) ? 0.0 : -s * (1.0 - s);
      break;
    }
    case 8: y = std::exp(-x); dy = -y; break;
    case 9: y = x * x; dy = 2.0 * x; break;
    case 10:  // torch.nn.Softplus(beta=1, threshold=20)
      if (x > 20.0) { y = x; dy = 1.0; }
      else { y = std::log1p(std::exp(x)); dy = 1.0 / (1.0 + std::exp(-x)); }
      break;
    case 11: { double s = 1.0 / (1.0 + std::exp(-x)); y = x * s; dy = s + x * s * (1.0 - s); break; }
    default: {  // 12: GELU, exact (erf) form
      double cdf = 0.5 * (1.0 + std::erf(x / std::sqrt(2.0)));
      y = x * cdf;
      dy = cdf + x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * PI);
    }
  }
}

int find_or_add_cut(Element &E, const Cutoff &c) {
  for (size_t i = 0; i < E.cuts.size(); ++i)
    if (E.cuts[i].rc == c.rc && E.cuts[i].alpha == c.alpha && E.cuts[i].type == c.type)
      return static_cast<int>(i);
  E.cuts.push_back(c);
  return static_cast<int>(E.cuts.size()) - 1;
}

}  // namespace

int activation_id(const std::string &name) {
  for (int i = 0; i < 13; ++i)
    if (name == ACTIVATIONS[i]) return i;
  return -1;
}

void Model::load(const std::string &path) {
  Tokens t(path);
  std::string magic = t.word();
  if (magic != "dparallel-lammps-model") t.fail("not a dparallel lammps.model file");
  int version = t.integer();
  if (version != 1)
    t.fail("format version " + std::to_string(version) +
           " is newer than this plugin reads (1); rebuild it with `dparallel lammps build`");
  std::string key = t.word();
  if (key == "unsupported") t.fail("pair_style dparallel cannot run this model: " + t.rest_of_line());
  if (key != "elements") t.fail("expected 'elements', found '" + key + "'");
  int n_el = t.integer();
  for (int i = 0; i < n_el; ++i) elements.push_back(t.word());
  t.expect("cutoff");
  cutoff = t.real();
  el.resize(n_el);
  for (int e = 0; e < n_el; ++e) {
    Element &E = el[e];
    t.expect("element");
    E.symbol = t.word();
    if (E.symbol != elements[e]) t.fail("element blocks out of order at " + E.symbol);
    E.has_network = t.integer() != 0;
    t.expect("features");
    E.nf = t.integer();
    E.groups.resize(n_el * n_el);
    for (int f = 0; f < E.nf; ++f) {
      t.expect("sf");
      int type = t.integer(), e1 = t.integer(), e2 = t.integer();
      double eta = t.real(), rs = t.real(), zeta = t.real(), lambda = t.real(), rc = t.real();
      int ctype = t.integer();
      double alpha = t.real();
      if (ctype < 0 || ctype > 8) t.fail("cutoff type must be 0-8");
      if (!(rc <= cutoff))  // the header sizes LAMMPS's lists: neighbours would go missing
        t.fail("a symmetry function's rc " + fmt(rc) + " exceeds the file's cutoff " +
               fmt(cutoff) + "; re-run `dparallel export MODEL_DIR`");
      if (e1 < 0 || e1 >= n_el || e2 < -1 || e2 >= n_el) t.fail("bad neighbour element index");
      int cut = find_or_add_cut(E, Cutoff{rc, alpha, ctype});
      if (rc > E.rmax) E.rmax = rc;
      if (type == 2) {
        E.radial.push_back(Radial{f, e1, cut, eta, rs});
        continue;
      }
      if ((type != 3 && type != 9) || e2 < 0) t.fail("symmetry function type must be 2, 3 or 9");
      int part = -1;
      for (size_t p = 0; p < E.parts.size(); ++p)
        if (E.parts[p].eta == eta && E.parts[p].rs == rs && E.parts[p].cut == cut) part = p;
      if (part < 0) {
        E.parts.push_back(Part{eta, rs, cut});
        part = static_cast<int>(E.parts.size()) - 1;
      }
      int q3 = -1;
      if (type == 3) {
        for (size_t q = 0; q < E.parts3.size(); ++q)
          if (E.parts3[q] == part) q3 = static_cast<int>(q);
        if (q3 < 0) {
          E.parts3.push_back(part);
          q3 = static_cast<int>(E.parts3.size()) - 1;
        }
      }
      Angular a{f, type, part, q3, 0, zeta, lambda, std::pow(2.0, 1.0 - zeta)};
      double zi = std::round(zeta);
      if (std::fabs(zeta - zi) < 1e-12 && zi >= 1 && zi <= 64) a.izeta = static_cast<int>(zi);
      int lo = e1 < e2 ? e1 : e2, hi = e1 < e2 ? e2 : e1;
      Group &g = E.groups[lo * n_el + hi];
      g.fns.push_back(a);
      int co = -1;
      for (size_t i = 0; i < g.combos.size(); ++i)
        if (g.combos[i].part == part && g.combos[i].type == type) co = static_cast<int>(i);
      if (co < 0) {
        g.combos.push_back(Combo{part, type, q3});
        co = static_cast<int>(g.combos.size()) - 1;
      }
      g.combo_of.push_back(co);
      if (type == 9) g.wide = true;
      else if (rc * rc > g.rc2) g.rc2 = rc * rc;
    }
    if (!E.has_network) continue;
    t.expect("scaling");
    E.offset = t.real();
    for (int f = 0; f < E.nf; ++f) {
      E.shift.push_back(t.real());
      E.factor.push_back(t.real());
      E.smin.push_back(t.real());
      E.smax.push_back(t.real());
    }
    t.expect("network");
    E.scale = t.real();
    E.ref = t.real();
    int nl = t.integer(), width = E.nf;
    for (int l = 0; l < nl; ++l) {
      t.expect("layer");
      Layer L;
      L.nin = t.integer();
      L.nout = t.integer();
      std::string act = t.word();
      L.act = activation_id(act);
      if (L.act < 0) t.fail("unknown activation '" + act + "'");
      L.divide = t.integer() != 0;
      if (L.nin != width) t.fail("layer input size does not match the previous layer");
      for (int i = 0; i < L.nin * L.nout; ++i) L.w.push_back(t.real());
      for (int i = 0; i < L.nout; ++i) L.b.push_back(t.real());
      L.wt.resize(L.w.size());
      for (int o = 0; o < L.nout; ++o)
        for (int i = 0; i < L.nin; ++i) L.wt[i * L.nout + o] = L.w[o * L.nin + i];
      width = L.nout;
      E.layers.push_back(std::move(L));
    }
    if (width != 1) t.fail("the network's last layer must have one output");
  }
  t.expect("end");
}

DP_NETWORK double Model::network(const Element &E, const double *g, double *dedg, Scratch &s) const {
  // forward: keep each layer's output a and da/dz
  size_t total = E.nf;
  for (const Layer &L : E.layers) total += L.nout;
  s.act.resize(total);
  s.dact.resize(total);
  double *h = s.act.data();
  for (int f = 0; f < E.nf; ++f) {
    h[f] = (g[f] - E.shift[f]) * E.factor[f];
    if (E.offset != 0.0) h[f] += E.offset;
  }
  size_t off = 0;
  for (const Layer &L : E.layers) {
    const double *in = s.act.data() + off;
    double *out = s.act.data() + off + L.nin, *dout = s.dact.data() + off + L.nin;
    vecmat(L.wt.data(), in, L.nin, L.nout, out);  // out = W in
    for (int o = 0; o < L.nout; ++o) {
      out[o] += L.b[o];
      if (L.divide) out[o] /= L.nin;
    }
    if (L.act == 1) {  // tanh, vectorisable: (1 - e) / (1 + e) with e = exp(-2|z|)
      for (int o = 0; o < L.nout; ++o) {
        const double z = out[o], a = z < 0.0 ? -z : z, e = vexp(-2.0 * a);
        const double t = (1.0 - e) / (1.0 + e), y = z < 0.0 ? -t : t;
        out[o] = y;
        dout[o] = 1.0 - y * y;
      }
    } else {
      for (int o = 0; o < L.nout; ++o) activate(L.act, out[o], out[o], dout[o]);
    }
    off += L.nin;
  }
  double energy = s.act[off] * E.scale + E.ref;
  // backward: grad of the layer outputs, from the last layer down
  std::vector<double> &gr = s.g;  // reused as the gradient buffer here
  gr.resize(total);
  gr[off] = E.scale;
  for (int l = static_cast<int>(E.layers.size()) - 1; l >= 0; --l) {
    const Layer &L = E.layers[l];
    off -= L.nin;
    double *dz = s.dact.data() + off + L.nin;  // becomes dE/dz of the layer, in place
    const double *gout = gr.data() + off + L.nin;
    for (int o = 0; o < L.nout; ++o) {
      dz[o] *= gout[o];
      if (L.divide) dz[o] /= L.nin;
    }
    vecmat(L.w.data(), dz, L.nout, L.nin, gr.data() + off);  // dE/d(input) = W^T dz
  }
  for (int f = 0; f < E.nf; ++f) dedg[f] = gr[f] * E.factor[f];
  return energy;
}

DP_SIMD double Model::compute(int e, const Neighbor *nb, int n, Scratch &s, double *values,
                      double *grad) const {
  const Element &E = el[e];
  const int nc = static_cast<int>(E.cuts.size()), np = static_cast<int>(E.parts.size());
  const int np3 = static_cast<int>(E.parts3.size()), n_el = static_cast<int>(elements.size());
  // neighbours sorted by element (counting sort), as structure-of-arrays
  s.block.assign(n_el + 1, 0);
  for (int j = 0; j < n; ++j) s.block[nb[j].el + 1]++;
  for (int b = 0; b < n_el; ++b) s.block[b + 1] += s.block[b];
  s.order.resize(n);
  s.x.resize(4 * static_cast<size_t>(n));
  s.tj.assign(s.block.begin(), s.block.end() - 1);  // next free slot per element
  for (int j = 0; j < n; ++j) s.order[s.tj[nb[j].el]++] = j;
  double *X = s.x.data(), *Y = X + n, *Z = Y + n, *R = Z + n;
  for (int m = 0; m < n; ++m) {
    const Neighbor &N = nb[s.order[m]];
    X[m] = N.d[0];
    Y[m] = N.d[1];
    Z[m] = N.d[2];
    R[m] = N.r;
  }
  // per neighbour: f_c per distinct cutoff, a = exp(-eta (r - rs)^2) f_c and da/dr per part
  s.fc.resize(static_cast<size_t>(n) * nc);
  s.dfc.resize(static_cast<size_t>(n) * nc);
  s.a.resize(static_cast<size_t>(n) * np);
  s.da.resize(static_cast<size_t>(n) * np);
  for (int c = 0; c < nc; ++c)
    cutoff_batch(E.cuts[c], R, n, &s.fc[c * n], &s.dfc[c * n]);
  for (int p = 0; p < np; ++p) {
    const Part &P = E.parts[p];
    const double *fc = &s.fc[P.cut * n], *dfc = &s.dfc[P.cut * n];
    double *a = &s.a[p * n], *da = &s.da[p * n];
    for (int m = 0; m < n; ++m) {
      const double d = R[m] - P.rs, x = vexp(-P.eta * d * d);
      a[m] = x * fc[m];
      da[m] = x * (dfc[m] - 2.0 * P.eta * d * fc[m]);
    }
  }
  for (int f = 0; f < E.nf; ++f) values[f] = 0.0;
  const int nrad = static_cast<int>(E.radial.size());
  s.rad.resize(static_cast<size_t>(n) * (nrad + 1));
  for (int q = 0; q < nrad; ++q) {  // exp(-eta (r - rs)^2) of each radial function
    const Radial &Q = E.radial[q];
    const double *fc = &s.fc[Q.cut * n];
    double *x = &s.rad[q * n];
    const int m0 = s.block[Q.el], m1 = s.block[Q.el + 1];
    for (int m = m0; m < m1; ++m) {
      const double d = R[m] - Q.rs;
      x[m] = vexp(-Q.eta * d * d);
    }
    double sum = 0.0;
    for (int m = m0; m < m1; ++m) sum += x[m] * fc[m];
    values[Q.f] += sum;
  }
  // pass 1, triplets j < k, one batch per neighbour-element pair (group): per j the r_jk^2
  // of its candidates k in a vector loop, those inside the cutoff compacted without
  // branches into the batch; then per batch cos, r_jk, the r_jk terms of type-3 parts, Z
  // and dZ/dcos per function, in vector loops
  size_t used = 0;  // of s.trip: grown, never shrunk or zeroed (no memset per atom)
  s.rec.clear();
  s.kk.clear();
  s.inv.resize(n);
  for (int m = 0; m < n; ++m) s.inv[m] = 1.0 / R[m];
  const double *inv = s.inv.data();
  const size_t most = static_cast<size_t>(n) * (n + 1) / 2 + 1;
  if (s.r2.size() < most + n) {
    s.r2.resize(most + n);
    s.cand.resize(2 * most);
  }
  for (int ea = 0; ea < n_el; ++ea) {
    for (int eb = ea; eb < n_el; ++eb) {
      const int gi = ea * n_el + eb;
      const Group &G = E.groups[gi];
      if (G.fns.empty()) continue;
      const double limit = G.wide ? 1e300 : G.rc2;
      int *kc = s.cand.data(), *jc = kc + most;
      double *r2c = s.r2.data(), *d2 = r2c + most;
      int M = 0;
      for (int j = s.block[ea]; j < s.block[ea + 1]; ++j) {
        const int k0 = ea == eb ? j + 1 : s.block[eb], nk = s.block[eb + 1] - k0;
        const double xj = X[j], yj = Y[j], zj = Z[j];
        const double *__restrict xs = X + k0, *__restrict ys = Y + k0, *__restrict zs = Z + k0;
        for (int t = 0; t < nk; ++t) {  // vectorised
          const double dx = xs[t] - xj, dy = ys[t] - yj, dz = zs[t] - zj;
          d2[t] = dx * dx + dy * dy + dz * dz;
        }
        for (int t = 0; t < nk; ++t) {  // compaction, no branch
          kc[M] = k0 + t;
          jc[M] = j;
          r2c[M] = d2[t];
          M += d2[t] < limit;
        }
      }
      if (M == 0) continue;
      const int nfg = static_cast<int>(G.fns.size());
      const size_t off = used;
      used += static_cast<size_t>(M) * (4 + 2 * np3 + 2 * nfg + 4 * np);
      if (s.trip.size() < used) s.trip.resize(2 * used);
      s.rec.push_back(gi);
      s.rec.push_back(static_cast<int>(off));
      s.rec.push_back(M);
      s.rec.push_back(static_cast<int>(s.kk.size()));
      s.kk.insert(s.kk.end(), kc, kc + M);
      s.kk.insert(s.kk.end(), jc, jc + M);
      // layout: cs, rjk, [ajk, dajk] per type-3 part, [z, dz] per function,
      // [ak, dak, aj, daj] per part, 1/r_ij, 1/r_ik
      double *cs = s.trip.data() + off, *rjk = cs + M;
      double *gath = rjk + M * (1 + 2 * np3 + 2 * nfg);
      double *ij = gath + 4 * np * M, *ik = ij + M;
      for (int m = 0; m < M; ++m) {
        const int k = kc[m], j = jc[m];
        ij[m] = inv[j];
        ik[m] = inv[k];
        cs[m] = X[j] * X[k] + Y[j] * Y[k] + Z[j] * Z[k];
      }
      for (int m = 0; m < M; ++m) {
        rjk[m] = std::sqrt(r2c[m]);
        cs[m] *= ij[m] * ik[m];
      }
      for (int p = 0; p < np; ++p) {
        const double *a = &s.a[p * n], *da = &s.da[p * n];
        double *ak = gath + 4 * p * M, *dak = ak + M, *aj = dak + M, *daj = aj + M;
        for (int m = 0; m < M; ++m) {
          ak[m] = a[kc[m]];
          dak[m] = da[kc[m]];
          aj[m] = a[jc[m]];
          daj[m] = da[jc[m]];
        }
      }
      for (int q = 0; q < np3; ++q) {
        const Part &P = E.parts[E.parts3[q]];
        const Cutoff &C = E.cuts[P.cut];
        double *__restrict ajk = rjk + M * (1 + 2 * q), *__restrict dajk = ajk + M;
        cutoff_batch(C, rjk, M, ajk, dajk);  // f_c, df_c first, then in place
        for (int m = 0; m < M; ++m) {
          const double d = rjk[m] - P.rs, x = vexp(-P.eta * d * d), fc = ajk[m];
          ajk[m] = x * fc;
          dajk[m] = x * (dajk[m] - 2.0 * P.eta * d * fc);
        }
      }
      double *zz = rjk + M * (1 + 2 * np3);
      for (int g = 0; g < nfg; ++g) {
        const Angular &A = G.fns[g];
        const double *ak = gath + 4 * A.part * M, *aj = ak + 2 * M;
        const double *a3 = A.type == 3 ? rjk + M * (1 + 2 * A.q3) : nullptr;
        double *z = zz + 2 * g * M, *dz = z + M;
        angular_batch(A, cs, M, z, dz);
        values[A.f] += dot(z, ak, aj, a3, M);
      }
    }
  }
  // networks: E_i and dE/dG
  s.dedg.resize(E.nf);
  const double energy = network(E, values, s.dedg.data(), s);
  const double *w = s.dedg.data();
  // dE/dr_im = P_m r_im + V_m: P (scalar) and V (vector) per neighbour, accumulated below
  s.gs.assign(4 * static_cast<size_t>(n), 0.0);
  double *__restrict ps = s.gs.data(), *__restrict vx = ps + n, *__restrict vy = vx + n;
  double *__restrict vz = vy + n;
  // pass 2, radial: (dE/dr_ij) / r_ij into P
  for (int q = 0; q < nrad; ++q) {
    const Radial &Q = E.radial[q];
    const double *fc = &s.fc[Q.cut * n], *dfc = &s.dfc[Q.cut * n], *x = &s.rad[q * n];
    const double wf = w[Q.f];
    for (int m = s.block[Q.el]; m < s.block[Q.el + 1]; ++m) {
      const double d = R[m] - Q.rs;
      ps[m] += wf * x[m] * (dfc[m] - 2.0 * Q.eta * d * fc[m]);
    }
  }
  for (int m = 0; m < n; ++m) ps[m] *= inv[m];
  // pass 2, triplets: per batch dE/dcos, dE/dr_ij, dE/dr_ik, dE/dr_jk, then per triplet
  // dE/dr_ik = Pk r_ik + Q r_ij and dE/dr_ij = Pj r_ij + Q r_ik (r_jk = r_ik - r_ij)
  const size_t nrec = s.rec.size() / 4;
  for (size_t t = 0; t < nrec; ++t) {
    const int gi = s.rec[4 * t], M = s.rec[4 * t + 2];
    const double *cs = s.trip.data() + s.rec[4 * t + 1], *rjk = cs + M;
    const int *kk = s.kk.data() + s.rec[4 * t + 3], *jj = kk + M;
    const Group &G = E.groups[gi];
    const int nfg = static_cast<int>(G.fns.size()), nco = static_cast<int>(G.combos.size());
    const double *zz = rjk + M * (1 + 2 * np3);
    const double *gath = zz + 2 * nfg * M, *ij = gath + 4 * np * M, *ik = ij + M;
    s.cc.resize((4 + 2 * static_cast<size_t>(nco)) * M);
    std::fill(s.cc.begin(), s.cc.begin() + 4 * M, 0.0);  // cc, cj, ck, cjk
    std::fill(s.cc.begin() + 4 * M, s.cc.end(), 0.0);    // the per-combo sums
    double *__restrict cc = s.cc.data(), *__restrict cj = cc + M, *__restrict ck = cj + M;
    double *__restrict cjk = ck + M, *__restrict sums = cjk + M;
    for (int g = 0; g < nfg; ++g) {  // sum_f w_f Z_f and sum_f w_f dZ_f per combo
      const double wf = w[G.fns[g].f];
      const double *__restrict z = zz + 2 * g * M, *__restrict dz = z + M;
      double *__restrict sz = sums + 2 * G.combo_of[g] * M, *__restrict sdz = sz + M;
      for (int m = 0; m < M; ++m) {
        sz[m] += wf * z[m];
        sdz[m] += wf * dz[m];
      }
    }
    for (int o = 0; o < nco; ++o) {
      const Combo &C = G.combos[o];
      const double *__restrict ak = gath + 4 * C.part * M, *__restrict dak = ak + M;
      const double *__restrict aj = dak + M, *__restrict daj = aj + M;
      const double *__restrict sz = sums + 2 * o * M, *__restrict sdz = sz + M;
      if (C.type == 3) {
        const double *a3 = rjk + M * (1 + 2 * C.q3), *da3 = a3 + M;
        for (int m = 0; m < M; ++m) {
          const double r = ak[m] * a3[m], sa = sz[m] * aj[m];
          cc[m] += sdz[m] * aj[m] * r;
          cj[m] += sz[m] * daj[m] * r;
          ck[m] += sa * dak[m] * a3[m];
          cjk[m] += sa * ak[m] * da3[m];
        }
      } else {
        for (int m = 0; m < M; ++m) {
          cc[m] += sdz[m] * aj[m] * ak[m];
          cj[m] += sz[m] * daj[m] * ak[m];
          ck[m] += sz[m] * aj[m] * dak[m];
        }
      }
    }
    // Pj, Pk, Q per triplet in a vector loop (in place of cj, ck, cc)
    for (int m = 0; m < M; ++m) {
      const double a = ij[m], b = ik[m], p = cc[m], pc = p * cs[m], q = cjk[m] / rjk[m];
      cj[m] = (cj[m] - pc * a) * a + q;
      ck[m] = (ck[m] - pc * b) * b + q;
      cc[m] = p * a * b - q;
    }
    // scatter: the k side per triplet, the j side summed over its run (batches are j-major)
    for (int m = 0; m < M;) {
      const int j = jj[m];
      const double xj = X[j], yj = Y[j], zj = Z[j];
      double sp = 0.0, sx = 0.0, sy = 0.0, sz = 0.0;
      for (; m < M && jj[m] == j; ++m) {
        const int k = kk[m];
        const double q = cc[m];
        sp += cj[m];
        sx += q * X[k];
        sy += q * Y[k];
        sz += q * Z[k];
        ps[k] += ck[m];
        vx[k] += q * xj;
        vy[k] += q * yj;
        vz[k] += q * zj;
      }
      ps[j] += sp;
      vx[j] += sx;
      vy[j] += sy;
      vz[j] += sz;
    }
  }
  for (int m = 0; m < n; ++m) {
    const int o = s.order[m];
    grad[3 * o] = ps[m] * X[m] + vx[m];
    grad[3 * o + 1] = ps[m] * Y[m] + vy[m];
    grad[3 * o + 2] = ps[m] * Z[m] + vz[m];
  }
  return energy;
}

}  // namespace dparallel
