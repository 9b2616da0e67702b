// SPDX-License-Identifier: MIT
// pair_style dparallel: a dparallel ACSF potential (MODEL_DIR/lammps.model) in LAMMPS.
#ifndef DPARALLEL_PAIR_DPARALLEL_H
#define DPARALLEL_PAIR_DPARALLEL_H

#include "dparallel_model.h"
#include "pair.h"

#include <vector>

namespace LAMMPS_NS {

class PairDparallel : public Pair {
 public:
  PairDparallel(class LAMMPS *);
  ~PairDparallel() override;
  void compute(int, int) override;
  void settings(int, char **) override;
  void coeff(int, char **) override;
  void init_style() override;
  double init_one(int, int) override;
  void finish() override;

 private:
  dparallel::Model model_;
  bool loaded_ = false;
  std::vector<int> map_;  // LAMMPS type -> model element, -1 for NULL
  dparallel::Scratch scratch_;
  std::vector<dparallel::Neighbor> nb_;
  std::vector<double> values_, grad_;
  int maxwarn_ = 10, warned_ = 0;
  bigint extrap_run_ = 0, extrap_steps_ = 0;  // this rank: values outside, steps with any
  void allocate();
};

}  // namespace LAMMPS_NS

#endif
