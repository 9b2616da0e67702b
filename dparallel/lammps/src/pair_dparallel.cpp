// SPDX-License-Identifier: MIT
// pair_style dparallel: a dparallel ACSF potential (MODEL_DIR/lammps.model) in LAMMPS.
//
// Full neighbour list (ghost atoms as neighbours), newton on: the forces that centre i's
// energy puts on its ghost neighbours go back to their owners by reverse communication.
// Per-atom energy is E_i; the per-atom virial of i is -sum_j r_ij (x) dE_i/dr_ij (so it
// sums to the global virial, which comes from fdotr unless per-atom virials are asked).
#include "pair_dparallel.h"

#include "atom.h"
#include "comm.h"
#include "error.h"
#include "force.h"
#include "memory.h"
#include "neigh_list.h"
#include "neighbor.h"
#include "update.h"

#include <cmath>
#include <cstring>
#include <exception>
#include <string>
#include <sys/stat.h>

using namespace LAMMPS_NS;

PairDparallel::PairDparallel(LAMMPS *lmp) : Pair(lmp)
{
  single_enable = 0;
  restartinfo = 0;
  one_coeff = 1;
  manybody_flag = 1;
  centroidstressflag = CENTROID_NOTAVAIL;
}

PairDparallel::~PairDparallel()
{
  if (allocated) {
    memory->destroy(setflag);
    memory->destroy(cutsq);
  }
}

void PairDparallel::allocate()
{
  allocated = 1;
  int n = atom->ntypes + 1;
  memory->create(setflag, n, n, "pair:setflag");
  memory->create(cutsq, n, n, "pair:cutsq");
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) setflag[i][j] = 0;
  map_.assign(n, -1);
}

// pair_style dparallel [maxwarn N]
void PairDparallel::settings(int narg, char **arg)
{
  int iarg = 0;
  while (iarg < narg) {
    if (strcmp(arg[iarg], "maxwarn") == 0 && iarg + 1 < narg) {
      maxwarn_ = utils::inumeric(FLERR, arg[iarg + 1], false, lmp);
      if (maxwarn_ < 0)
        error->all(FLERR, "pair_style dparallel maxwarn N: N must be 0 or more, got {}",
                   maxwarn_);
      iarg += 2;
    } else {
      error->all(FLERR, "Illegal pair_style dparallel argument '{}'; usage: pair_style "
                 "dparallel [maxwarn N]", arg[iarg]);
    }
  }
}

// pair_coeff * * MODEL_DIR El1 El2 ... (one element or NULL per atom type)
void PairDparallel::coeff(int narg, char **arg)
{
  if (!allocated) allocate();
  int ntypes = atom->ntypes;
  if (narg < 3)
    error->all(FLERR, "pair_coeff * * MODEL_DIR El ...: no MODEL_DIR given ({} types: one "
               "element or NULL each after it)", ntypes);
  if (narg != 3 + ntypes)
    error->all(FLERR, "pair_coeff * * MODEL_DIR needs one element (or NULL) per atom type: "
               "{} types, {} given", ntypes, narg - 3);
  if (strcmp(arg[0], "*") != 0 || strcmp(arg[1], "*") != 0)
    error->all(FLERR, "pair_style dparallel takes one 'pair_coeff * * MODEL_DIR El ...'");
  std::string path = arg[2];
  const bool is_dir = path.size() < 6 || path.substr(path.size() - 6) != ".model";
  if (is_dir) path += "/lammps.model";
  model_ = dparallel::Model();
  try {
    model_.load(path);
  } catch (std::exception &exc) {
    error->all(FLERR, "pair_style dparallel: {} (MODEL_DIR is a `dparallel train` model "
               "directory, its export, or an n2p2 potential directory; `dparallel export "
               "MODEL_DIR` writes lammps.model)", exc.what());
  }
  loaded_ = true;
  // `dparallel train` writes model.pt, not lammps.model: one older than model.pt is stale
  struct stat pt, lm;
  const std::string dir = arg[2];
  if (is_dir && comm->me == 0 && stat((dir + "/model.pt").c_str(), &pt) == 0 &&
      stat(path.c_str(), &lm) == 0 && pt.st_mtime > lm.st_mtime)
    error->warning(FLERR, "pair_style dparallel: {}/model.pt is newer than its lammps.model "
                   "(training went on after the export?): these are the exported weights; "
                   "run `dparallel export {}` for the latest", dir, dir);
  for (int t = 1; t <= ntypes; t++) {
    std::string sym = arg[2 + t];
    map_[t] = -1;
    if (sym == "NULL") continue;
    for (size_t e = 0; e < model_.elements.size(); e++)
      if (model_.elements[e] == sym) map_[t] = static_cast<int>(e);
    if (map_[t] < 0) {
      std::string known;
      for (auto &e : model_.elements) known += " " + e;
      error->all(FLERR, "pair_coeff: element {} (type {}) is not in the model {}; its "
                 "elements are{}", sym, t, path, known);
    }
  }
  for (int i = 1; i <= ntypes; i++)
    for (int j = i; j <= ntypes; j++) setflag[i][j] = 1;
}

void PairDparallel::init_style()
{
  if (force->newton_pair == 0) error->all(FLERR, "pair_style dparallel requires newton pair on");
  if (strcmp(update->unit_style, "metal") != 0)
    error->all(FLERR, "pair_style dparallel requires 'units metal' (Angstrom, eV); got '{}'",
               update->unit_style);
  if (!loaded_) error->all(FLERR, "pair_style dparallel: no pair_coeff * * MODEL_DIR ... given");
  // special_bonds weights of 0 (the default) take bonded pairs out of the neighbour list
  // (LAMMPS keeps them, flagged, only with a kspace style); E_i needs every neighbour
  static const char *const kind[4] = {"", "1-2", "1-3", "1-4"};
  if (atom->molecular != Atom::ATOMIC && atom->nbonds > 0 && force->kspace == nullptr)
    for (int k = 1; k <= 3; k++)
      if (force->special_lj[k] == 0.0 && force->special_coul[k] == 0.0)
        error->all(FLERR, "pair_style dparallel needs every neighbour inside the cutoff, but "
                   "special_bonds weights of 0 leave {} bonded pairs out of LAMMPS's neighbour "
                   "lists; add 'special_bonds lj/coul 1.0 1.0 1.0' (the weights are not used)",
                   kind[k]);
  neighbor->add_request(this, NeighConst::REQ_FULL);
  extrap_run_ = extrap_steps_ = 0;
  warned_ = 0;
}

double PairDparallel::init_one(int, int)
{
  return model_.cutoff;
}

void PairDparallel::compute(int eflag, int vflag)
{
  ev_init(eflag, vflag);
  double **x = atom->x, **f = atom->f;
  int *type = atom->type;
  int inum = list->inum, *ilist = list->ilist, *numneigh = list->numneigh;
  int **firstneigh = list->firstneigh;
  const bool tally_virial = vflag_atom || (vflag_global && !vflag_fdotr);
  bigint outside = 0;

  for (int ii = 0; ii < inum; ii++) {
    const int i = ilist[ii];
    const int e = map_[type[i]];
    if (e < 0 || !model_.el[e].has_network) continue;
    const dparallel::Element &E = model_.el[e];
    const double rmax2 = E.rmax * E.rmax;
    const double xi = x[i][0], yi = x[i][1], zi = x[i][2];
    // neighbours inside rmax (the list holds the skin too), kept without a branch: about
    // half of them go, in no predictable order
    const int *jlist = firstneigh[i];
    if (nb_.size() < static_cast<size_t>(numneigh[i])) nb_.resize(numneigh[i]);
    int n = 0;
    for (int jj = 0; jj < numneigh[i]; jj++) {
      const int j = jlist[jj] & NEIGHMASK;
      const int ej = map_[type[j]];
      dparallel::Neighbor &nj = nb_[n];
      nj.d[0] = x[j][0] - xi;
      nj.d[1] = x[j][1] - yi;
      nj.d[2] = x[j][2] - zi;
      const double r2 = nj.d[0] * nj.d[0] + nj.d[1] * nj.d[1] + nj.d[2] * nj.d[2];
      nj.index = j;
      nj.el = ej;
      nj.r = r2;
      n += (r2 < rmax2) & (ej >= 0);
    }
    for (int k = 0; k < n; k++) nb_[k].r = std::sqrt(nb_[k].r);
    values_.resize(E.nf);
    grad_.resize(3 * static_cast<size_t>(n));
    const double ei = model_.compute(e, nb_.data(), n, scratch_, values_.data(), grad_.data());
    for (int k = 0; k < E.nf; k++)
      if (values_[k] < E.smin[k] || values_[k] > E.smax[k]) outside++;
    double v[6] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    for (int k = 0; k < n; k++) {
      const int j = nb_[k].index;
      const double *g = &grad_[3 * k];
      f[j][0] -= g[0];
      f[j][1] -= g[1];
      f[j][2] -= g[2];
      f[i][0] += g[0];
      f[i][1] += g[1];
      f[i][2] += g[2];
      if (tally_virial) {
        const double *d = nb_[k].d;
        v[0] -= d[0] * g[0];
        v[1] -= d[1] * g[1];
        v[2] -= d[2] * g[2];
        v[3] -= d[0] * g[1];
        v[4] -= d[0] * g[2];
        v[5] -= d[1] * g[2];
      }
    }
    if (eflag_global) eng_vdwl += ei;
    if (eflag_atom) eatom[i] += ei;
    if (tally_virial) {
      for (int k = 0; k < 6; k++) {
        if (vflag_global && !vflag_fdotr) virial[k] += v[k];
        if (vflag_atom) vatom[i][k] += v[k];
      }
    }
  }
  if (vflag_fdotr) virial_fdotr_compute();

  extrap_run_ += outside;
  if (outside) extrap_steps_++;
  if (maxwarn_ > 0 && warned_ < maxwarn_) {
    bigint all = 0;
    MPI_Allreduce(&outside, &all, 1, MPI_LMP_BIGINT, MPI_SUM, world);
    if (all > 0) {
      warned_++;
      if (comm->me == 0)
        error->warning(FLERR, "pair dparallel: step {}: {} symmetry-function values outside "
                       "the training range (extrapolation){}", update->ntimestep, all,
                       warned_ == maxwarn_ ? "; no more such warnings in this run" : "");
    }
  }
}

void PairDparallel::finish()
{
  bigint mine[2] = {extrap_run_, extrap_steps_}, all[2] = {0, 0};
  MPI_Allreduce(mine, all, 2, MPI_LMP_BIGINT, MPI_SUM, world);
  if (comm->me == 0)
    utils::logmesg(lmp, "pair dparallel: {} symmetry-function values outside the training "
                   "range in this run ({} rank-steps with any)\n", all[0], all[1]);
  extrap_run_ = extrap_steps_ = 0;
  warned_ = 0;
}
