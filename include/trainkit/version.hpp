#pragma once
// trainkit's version, in one place.
#define TRAINKIT_VERSION_MAJOR 0
#define TRAINKIT_VERSION_MINOR 2
#define TRAINKIT_VERSION_PATCH 0
