// Print n2p2's own symmetry-function values (and dG_i/dr_i) with full precision.
//
// Built and run by tests/descriptors/test_acsf_n2p2.py against n2p2's libnnp (skipped when
// n2p2 is not built). Reads input.nn and input.data from the working directory, sets n2p2 up
// as nnp-scaling does (symmetry-function groups, no scaling, no unit normalisation) and writes
//   F <element> <n> then per function "<settings line>" (n2p2's internal, sorted order)
//   A <structure> <atom> <element> G_0 ... G_{n-1}
//   D <structure> <atom> dG_0/dx dG_0/dy dG_0/dz ...      (dG_i/dr_i, with argument "1" or "2")
//   N <structure> <atom> <neighbour> <r_i - r_j> dG/dr_j ... (argument "2": per neighbour, its
//     element's functions only, as n2p2 stores them)
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
    bool const neighbours = argc > 1 && std::string(argv[1]) == "2";
    bool const derivatives = neighbours || (argc > 1 && std::string(argv[1]) == "1");
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
            for (auto const& nb : atom.neighbors)
            {
                if (!neighbours) break;
                std::printf("N %zu %zu %zu %.17g %.17g %.17g", s, atom.index, nb.index,
                            nb.dr[0], nb.dr[1], nb.dr[2]);
                for (auto const& d : nb.dGdr)
                {
                    std::printf(" %.17g %.17g %.17g", d[0], d[1], d[2]);
                }
                std::printf("\n");
            }
        }
        ++s;
        file >> std::ws;
    }
    return 0;
}
