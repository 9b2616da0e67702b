// SPDX-License-Identifier: MIT
// Time of pair_style dparallel's kernel (dparallel::Model::compute) alone, per centre atom:
// fcc Cu, 10x10x10 cubic cells rattled by 0.02 A (as bench_lammps.py's 4,000-atom cell), the
// neighbours of the first 256 atoms, the minimum over PASSES passes over them (the minimum
// filters out other processes on a shared machine). Build and run, from the repository:
//
//   g++ -std=c++17 -O3 -fno-math-errno -fno-trapping-math -Idparallel/lammps/src \
//       benchmarks/bench_lammps_kernel.cpp dparallel/lammps/src/dparallel_model.cpp -o kernel
//   ./kernel MODEL_DIR/lammps.model [PASSES=200]
//
// (the plugin's flags; the kernel picks its x86-64-v3 clone where the CPU has it).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <random>
#include <vector>

#include "dparallel_model.h"

int main(int argc, char **argv)
{
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s lammps.model [passes]\n", argv[0]);
    return 2;
  }
  dparallel::Model model;
  try {
    model.load(argv[1]);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  const int cells = 10, centres = 256, passes = argc > 2 ? std::atoi(argv[2]) : 200;
  const double a = 3.61, box = cells * a;
  const double basis[4][3] = {{0, 0, 0}, {0.5, 0.5, 0}, {0.5, 0, 0.5}, {0, 0.5, 0.5}};
  std::mt19937 rng(1);
  std::normal_distribution<double> rattle(0.0, 0.02);
  std::vector<double> x;
  for (int i = 0; i < cells; i++)
    for (int j = 0; j < cells; j++)
      for (int k = 0; k < cells; k++)
        for (const auto &b : basis) {
          x.push_back((i + b[0]) * a + rattle(rng));
          x.push_back((j + b[1]) * a + rattle(rng));
          x.push_back((k + b[2]) * a + rattle(rng));
        }
  const int n = static_cast<int>(x.size() / 3);
  const int e = 0;  // the model's first element for every atom
  const double rmax = model.el[e].rmax;
  std::vector<std::vector<dparallel::Neighbor>> nbs(centres);
  for (int i = 0; i < centres; i++)
    for (int j = 0; j < n; j++) {
      if (j == i) continue;
      dparallel::Neighbor nb;
      for (int c = 0; c < 3; c++) {
        nb.d[c] = x[3 * j + c] - x[3 * i + c];
        nb.d[c] -= box * std::round(nb.d[c] / box);  // minimum image (box > 2 rmax)
      }
      nb.r = std::sqrt(nb.d[0] * nb.d[0] + nb.d[1] * nb.d[1] + nb.d[2] * nb.d[2]);
      nb.index = j;
      nb.el = 0;
      if (nb.r < rmax) nbs[i].push_back(nb);
    }
  dparallel::Scratch scratch;
  std::vector<double> values(model.el[e].nf), grad;
  double best = 1e30, energy = 0.0;
  for (int p = 0; p < passes; p++) {
    const auto t0 = std::chrono::steady_clock::now();
    energy = 0.0;
    for (int i = 0; i < centres; i++) {
      grad.resize(3 * nbs[i].size());
      energy += model.compute(e, nbs[i].data(), static_cast<int>(nbs[i].size()), scratch,
                              values.data(), grad.data());
    }
    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    best = std::min(best, dt.count());
  }
  std::printf("%.3f us per atom (min of %d passes over %d atoms, %zu neighbours each); "
              "energy %.15g eV\n", best / centres * 1e6, passes, centres, nbs[0].size(), energy);
  return 0;
}
