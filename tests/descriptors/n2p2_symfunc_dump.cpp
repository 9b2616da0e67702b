// Print n2p2's own symmetry-function values (and dG_i/dr_i) with full precision.
//
// Built and run by tests/descriptors/test_acsf_n2p2.py against n2p2's libnnp (skipped when
// n2p2 is not built). Reads input.nn and input.data from the working directory, sets n2p2 up
// as nnp-scaling does (symmetry-function groups, no scaling, no unit normalisation) and writes
//   F <element> <n> then per function "<settings line>" (n2p2's internal, sorted order)
//   A <structure> <atom> <element> G_0 ... G_{n-1}
//   D <structure> <atom> dG_0/dx dG_0/dy dG_0/dz ...      (dG_i/dr_i, only with argument "1")
#include "Mode.h"
#include "Structure.h"
#include <cstdio>
#include <fstream>
#include <string>

using namespace nnp;

struct Dumper : public Mode
{
    void listFunctions()
    {
        for (auto const& e : elements)
        {
            std::printf("F %s %zu\n", e.getSymbol().c_str(), e.numSymmetryFunctions());
            for (std::size_t n = 0; n < e.numSymmetryFunctions(); ++n)
            {
                std::printf("%s", e.getSymmetryFunction(n).getSettingsLine().c_str());
            }
        }
    }
};

int main(int argc, char* argv[])
{
    bool const derivatives = argc > 1 && std::string(argv[1]) == "1";
    Dumper mode;
    mode.log.writeToStdout = false;
    mode.initialize();
    mode.loadSettingsFile("input.nn");
    mode.setupElementMap();
    mode.setupElements();
    mode.setupCutoff();
    mode.setupSymmetryFunctions();  // then as Mode::setupGeneric, without normalisation/NN
    mode.setupCutoffMatrix();
    mode.setupSymmetryFunctionMemory(false);
    mode.setupSymmetryFunctionCache();
    mode.setupSymmetryFunctionGroups();
    mode.setupSymmetryFunctionScalingNone();
    mode.setupSymmetryFunctionStatistics(false, false, false, false);
    mode.listFunctions();
    std::ifstream file("input.data");
    std::size_t s = 0;
    while (file.peek() != EOF)
    {
        Structure structure;
        structure.setElementMap(mode.elementMap);
        structure.readFromFile(file);
        structure.calculateNeighborList(mode.getMaxCutoffRadius());
        mode.calculateSymmetryFunctionGroups(structure, derivatives);
        for (auto const& atom : structure.atoms)
        {
            std::printf("A %zu %zu %s", s, atom.index,
                        mode.elementMap[atom.element].c_str());
            for (double g : atom.G) std::printf(" %.17g", g);
            std::printf("\n");
            if (!derivatives) continue;
            std::printf("D %zu %zu", s, atom.index);
            for (auto const& d : atom.dGdr)
            {
                std::printf(" %.17g %.17g %.17g", d[0], d[1], d[2]);
            }
            std::printf("\n");
        }
        ++s;
        file >> std::ws;
    }
    return 0;
}
