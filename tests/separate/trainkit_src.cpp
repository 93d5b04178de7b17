// The program's one compiled part of trainkit (TRAINKIT_SEPARATE_COMPILATION).
#include <trainkit/src.hpp>
