// SPDX-License-Identifier: MIT
// dparallel's ACSF + per-element MLP potential (lammps.model), independent of LAMMPS.
//
// Formulas follow dparallel (docs/acsf.md, dparallel/nn): n2p2 symmetry functions of
// types 2, 3 and 9 with cutoff types 0-8, E_i = ref + scale * MLP((G - shift) * factor
// + offset). Forces are fused as in dparallel/deploy/acsf_forces.py: per centre the
// descriptors, then dE/dG, then dE/dr_ij in a second pass over the same pairs and
// triplets; no dG/dr array is ever stored.
#ifndef DPARALLEL_MODEL_H
#define DPARALLEL_MODEL_H

#include <string>
#include <vector>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define DP_NETWORK __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define DP_NETWORK
#endif

namespace dparallel {

struct Cutoff {
  double rc, alpha;
  int type;  // n2p2 cutoff_type 0-8
};

struct Radial {  // one type-2 function
  int f, el, cut;
  double eta, rs;
};

struct Part {  // exp(-eta (r - rs)^2) f_c(r) of angular functions, cached per neighbour
  double eta, rs;
  int cut;
};

struct Angular {  // one type-3 or type-9 function
  int f, type, part, q3;     // q3: index of part in Element::parts3 (type 3), else -1
  int izeta;                 // integer zeta in [1, 64] (repeated products) or 0
  double zeta, lambda, pre;  // pre = 2^(1 - zeta)
};

struct Combo {  // functions of a group sharing one radial part and type
  int part, type, q3;
};

struct Group {  // angular functions of one unordered neighbour-element pair
  std::vector<Angular> fns;
  std::vector<Combo> combos;
  std::vector<int> combo_of;  // per function: its combo
  bool wide = false;  // holds a type-9 function (r_jk not limited)
  double rc2 = 0.0;   // largest rc^2 of its type-3 functions
};

struct Layer {
  int nin, nout, act;
  bool divide;
  std::vector<double> w, b;  // (nout, nin) row-major, (nout)
  std::vector<double> wt;     // w transposed, (nin, nout): the forward pass's axpy form
};

struct Element {
  std::string symbol;
  bool has_network = false;
  int nf = 0;
  double rmax = 0.0;
  std::vector<Cutoff> cuts;
  std::vector<Radial> radial;
  std::vector<Part> parts;
  std::vector<int> parts3;     // parts used by type-3 functions (need r_jk terms)
  std::vector<Group> groups;   // n_el * n_el, [a * n_el + b] with a <= b
  std::vector<double> shift, factor, smin, smax;
  double offset = 0.0, scale = 1.0, ref = 0.0;
  std::vector<Layer> layers;
};

struct Neighbor {
  int index, el;  // caller's atom index, element index
  double d[3], r;  // r_ij = x_j - x_i (A), |r_ij|
};

// Per-thread work arrays of Model::compute (reused between atoms).
struct Scratch {
  std::vector<double> x, inv, rad, fc, dfc, a, da, g, dedg, trip, act, dact, r2, cc, gs;
  std::vector<int> tj, block, order, rec, kk, cand;
};

class Model {
 public:
  // Reads lammps.model; throws std::runtime_error naming the file and what is wrong.
  void load(const std::string &path);

  std::vector<std::string> elements;
  std::vector<Element> el;
  double cutoff = 0.0;

  // Energy of centre atom of element e from its neighbours (r < el[e].rmax, any order).
  // Writes its descriptors to values (nf) and dE/dr_in (n x 3) to grad.
  double compute(int e, const Neighbor *nb, int n, Scratch &s, double *values,
                 double *grad) const;

 private:
  DP_NETWORK double network(const Element &E, const double *g, double *dedg, Scratch &s) const;
};

int activation_id(const std::string &name);  // -1 if unknown

}  // namespace dparallel

#endif
