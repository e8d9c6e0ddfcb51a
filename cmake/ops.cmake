# vkattn_ops(<var> <kind>…): the names engine/vulkan/ops.def gives its lines of those kinds (OP,
# HELPER), in its order, for the builds that follow the table of ops (shaders/, reference/).
# Editing the table configures again.
function(vkattn_ops var)
  set(table ${PROJECT_SOURCE_DIR}/engine/vulkan/ops.def)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${table})
  list(JOIN ARGN "|" kinds)
  file(STRINGS ${table} lines REGEX "^VKATTN_(${kinds})\\(")
  set(names "")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^VKATTN_[A-Z]+\\(([a-z_0-9]+),.*$" "\\1" name "${line}")
    list(APPEND names ${name})
  endforeach()
  set(${var} ${names} PARENT_SCOPE)
endfunction()
