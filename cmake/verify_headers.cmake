# Every public header compiles on its own: one translation unit per header,
# `#include <trainkit/...>` and nothing else, built by the target
# `trainkit_verify_headers` (the test headers.self_contained).
#
# Parsing LibTorch is most of each unit's time (8 of 10 s), so the headers
# that reach LibTorch through their own includes get <torch/types.h>
# precompiled: they would read it anyway, so it hides nothing they forget.
# The headers that reach no LibTorch header are compiled without it, where a
# forgotten standard include still fails.

# The LibTorch headers that include <torch/types.h> themselves.
set(TRAINKIT_TORCH_TYPES_RE "#include [<\"](torch/(types|torch|nn/|optim|autograd|cuda|utils|serialize|special)[^>\"]*)[>\"]")

# Sets ${out} to TRUE if `header` (a path under include/) or a trainkit header
# it includes, at any depth, includes one of those.
function(trainkit_header_reaches_torch header out)
  set(todo "${header}")
  set(seen "")
  while(todo)
    list(POP_FRONT todo path)
    if(path IN_LIST seen)
      continue()
    endif()
    list(APPEND seen "${path}")
    file(STRINGS "${PROJECT_SOURCE_DIR}/include/${path}" lines REGEX "^#include ")
    foreach(line IN LISTS lines)
      if(line MATCHES "${TRAINKIT_TORCH_TYPES_RE}")
        set(${out} TRUE PARENT_SCOPE)
        return()
      endif()
      if(line MATCHES "#include [<\"](trainkit/[^>\"]+)[>\"]")
        list(APPEND todo "${CMAKE_MATCH_1}")
      endif()
    endforeach()
  endwhile()
  set(${out} FALSE PARENT_SCOPE)
endfunction()

# One object library per kind, linked as `link_target` (which brings the
# include paths and LibTorch); `headers` are absolute paths under include/.
function(trainkit_verify_headers link_target)
  set(dir "${CMAKE_CURRENT_BINARY_DIR}/verify_headers/${link_target}")
  set(with_torch "")
  set(without_torch "")
  foreach(header IN LISTS ARGN)
    file(RELATIVE_PATH relative "${PROJECT_SOURCE_DIR}/include" "${header}")
    string(MAKE_C_IDENTIFIER "${relative}" stem)
    file(CONFIGURE OUTPUT "${dir}/${stem}.cpp" CONTENT "#include <${relative}>\n" @ONLY)
    trainkit_header_reaches_torch("${relative}" reaches)
    if(reaches)
      list(APPEND with_torch "${dir}/${stem}.cpp")
    else()
      list(APPEND without_torch "${dir}/${stem}.cpp")
    endif()
  endforeach()
  if(NOT TARGET trainkit_verify_headers)
    add_custom_target(trainkit_verify_headers)
  endif()
  foreach(kind with_torch without_torch)
    if(${kind})
      set(name verify_${link_target}_${kind})
      add_library(${name} OBJECT EXCLUDE_FROM_ALL ${${kind}})
      target_link_libraries(${name} PRIVATE ${link_target})
      add_dependencies(trainkit_verify_headers ${name})
    endif()
  endforeach()
  if(with_torch)
    target_precompile_headers(verify_${link_target}_with_torch PRIVATE <torch/types.h>)
  endif()
endfunction()
