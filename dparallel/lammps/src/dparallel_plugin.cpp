// SPDX-License-Identifier: MIT
// Registers pair_style dparallel with LAMMPS when the plugin is loaded.
#include "dparallel_plugin.h"

#include "pair_dparallel.h"

#ifndef DPARALLEL_LAMMPS_VERSION
#error "compile with -DDPARALLEL_LAMMPS_VERSION='\"22 Jul 2025\"' (dparallel lammps build does)"
#endif

static void *create_pair_dparallel(void *lmp)
{
  return new LAMMPS_NS::PairDparallel(static_cast<LAMMPS_NS::LAMMPS *>(lmp));
}

extern "C" void lammpsplugin_init(void *lmp, void *handle, void *regfunc)
{
  dparallel_plugin_record plugin;
  plugin.version = DPARALLEL_LAMMPS_VERSION;
  plugin.style = "pair";
  plugin.name = "dparallel";
  plugin.info = "dparallel ACSF neural-network potential (lammps.model)";
  plugin.author = "dparallel developers";
  plugin.creator.v1 = &create_pair_dparallel;
  plugin.handle = handle;
  reinterpret_cast<dparallel_register_fn>(regfunc)(&plugin, lmp);
}
