#pragma once
// The compiled part of trainkit, for programs built with
// TRAINKIT_SEPARATE_COMPILATION defined in every source file: include this
// header in exactly one source file of the program, before any other trainkit
// header, e.g. a trainkit_src.cpp of one line. It compiles the non-template
// functions of the core (trainkit/trainkit.hpp) and the Adam, AdamW and
// StateDict::value instantiations that the other files then only declare
// (detail/linkage.hpp; docs/decisions.md, "separate compilation").
#if !defined(TRAINKIT_SEPARATE_COMPILATION)
#error "trainkit/src.hpp is for programs that define TRAINKIT_SEPARATE_COMPILATION in every file"
#endif
#if defined(TRAINKIT_DEFINITIONS)
#error "include trainkit/src.hpp before any other trainkit header, in a source file of its own"
#endif
#define TRAINKIT_SOURCE 1

#include "trainkit/trainkit.hpp"

template class trainkit::detail::AdamFamily<trainkit::optim::AdamWOptions, true>;
template class trainkit::detail::AdamFamily<trainkit::optim::AdamOptions, false>;
template bool trainkit::StateDict::value<bool>(const std::string&) const;
template int64_t trainkit::StateDict::value<int64_t>(const std::string&) const;
template double trainkit::StateDict::value<double>(const std::string&) const;
template std::string trainkit::StateDict::value<std::string>(const std::string&) const;
