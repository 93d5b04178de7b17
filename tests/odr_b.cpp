#include <trainkit/fwd.hpp>
#include <trainkit/trainkit.hpp>
int trainkit_odr_b() {
  return TRAINKIT_VERSION_MINOR;
}
