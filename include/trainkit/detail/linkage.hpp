#pragma once
// Where trainkit's non-template functions are compiled. By default in every
// file that includes them (header-only). A program built with
// TRAINKIT_SEPARATE_COMPILATION defined in every file compiles them once, in
// the one file that includes <trainkit/src.hpp>; the other files only declare
// them, which takes most of the library's code out of each file that trains
// (docs/decisions.md, "separate compilation").
//
// A header with such functions defines them out of line, inside
// `#if TRAINKIT_DEFINITIONS`, each marked TRAINKIT_INLINE; class templates
// whose common instantiations src.hpp compiles declare them `extern` under
// `#if TRAINKIT_EXTERN_TEMPLATES`.
#if defined(TRAINKIT_SEPARATE_COMPILATION)
#define TRAINKIT_INLINE
#if defined(TRAINKIT_SOURCE)  // set by trainkit/src.hpp only
#define TRAINKIT_DEFINITIONS 1
#else
#define TRAINKIT_DEFINITIONS 0
#endif
#else
#define TRAINKIT_INLINE inline
#define TRAINKIT_DEFINITIONS 1
#endif
// A file without the definitions declares the instantiations src.hpp makes.
#define TRAINKIT_EXTERN_TEMPLATES (!TRAINKIT_DEFINITIONS)
