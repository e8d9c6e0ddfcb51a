# Headers from Debian's packages that vkattn's files include again and again, parsed once for a
# set of targets compiled alike instead of once a file. With GCC 12 on a 2-core Xeon,
# <vulkan/vulkan_raii.hpp> alone takes 5 s to parse in every file that includes it (the
# engine's Vulkan headers bring it), GoogleTest's, nlohmann-json's and spdlog's 1-2 s each; loading
# their precompiled form (about 350 MB) costs 1-3 s, and making it 22 s. The test programs, about
# thirty files compiled alike, take them (tests/CMakeLists.txt): their files compiled in 342 s with
# the making, against 377 s in a build whose other files compiled 6 % faster (each file timed by
# a compiler launcher in a clean build, 927 s in all, GCC 12, a 2-core Xeon), and a test file
# edited compiles 5-8 s sooner. The library's nine batches (18 s of making for about as much
# saved) and the benchmarks (a target each) gained nothing and do without. CMake's own switch,
# -DCMAKE_DISABLE_PRECOMPILE_HEADERS=ON, compiles every file whole.
#
#   vkattn_precompiled_headers(NAME HEADERS <header>... LINK <library>... [OPTIONS <option>...])
#     NAME: an object library of one empty file that precompiles HEADERS as a target linking LINK
#     and compiled with OPTIONS is compiled
#   vkattn_use_precompiled_headers(NAME <target>...)
#     each target, which links LINK and is compiled with OPTIONS, reuses NAME's
#
# GCC takes a precompiled header only where the compiler's options and the macros its headers
# read are those it was made with; elsewhere it reads the headers as text, the same code slower.
function(vkattn_precompiled_headers name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "HEADERS;LINK;OPTIONS")
  file(CONFIGURE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/${name}.cpp
       CONTENT "// ${name}: nothing of its own; it precompiles the headers its users share\n")
  add_library(${name} OBJECT ${CMAKE_CURRENT_BINARY_DIR}/${name}.cpp)
  target_link_libraries(${name} PRIVATE ${arg_LINK})
  target_compile_options(${name} PRIVATE ${arg_OPTIONS})
  target_precompile_headers(${name} PRIVATE ${arg_HEADERS})
endfunction()

function(vkattn_use_precompiled_headers name)
  foreach(target IN LISTS ARGN)
    target_precompile_headers(${target} REUSE_FROM ${name})
  endforeach()
endfunction()
