// Two translation units include every header: a non-inline definition in a
// header would break the link of this binary (the ODR check).
#include <trainkit/trainkit.hpp>
int trainkit_odr_a() {
  return TRAINKIT_VERSION_MAJOR;
}
